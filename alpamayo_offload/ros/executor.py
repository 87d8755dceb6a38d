"""The node's ROS callback executor, as `inference.executor` names it.

The inference runs in a worker thread of the node's process and issues thousands of small GPU
launches from Python; each releases the interpreter lock and must take it back. Every message
the executor thread handles holds that lock while Python runs: rclpy's SingleThreadedExecutor
rebuilds its wait set in Python for each message, which at 50-100 Hz odometry stalls the
inference thread about a millisecond per message (docs/ros.md, "Threads and CPU"). The
EventsExecutor (C++) spends about a third of that interpreter time per message.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from rclpy.context import Context
from rclpy.executors import Executor, SingleThreadedExecutor

from ..app.schema import EXECUTORS

_LOG = logging.getLogger(__name__)
_FALLBACK = 'single'


def _events(context: Context) -> Executor:
    """Make rclpy's EventsExecutor (C++); `ImportError` where this rclpy has none."""
    from rclpy.experimental import EventsExecutor

    return EventsExecutor(context=context)


def _single(context: Context) -> Executor:
    """Make rclpy's SingleThreadedExecutor (Python)."""
    return SingleThreadedExecutor(context=context)


# How each `inference.executor` choice is made (the names: `app.schema.EXECUTORS`); the
# EventsExecutor is imported when made: it is experimental and missing from older rclpy.
EXECUTOR_MAKERS: Mapping[str, Callable[[Context], Executor]] = {
    'events': _events,
    'single': _single,
}


def make_executor(kind: str, context: Context) -> tuple[Executor, str]:
    """Return the executor `kind` names and the kind made.

    'events' falls back to 'single' (with a warning) where this rclpy has no EventsExecutor.
    """
    if kind not in EXECUTOR_MAKERS:
        raise ValueError(f'inference.executor {kind!r}: one of {EXECUTORS}')
    try:
        return EXECUTOR_MAKERS[kind](context), kind
    except ImportError as err:
        _LOG.warning('inference.executor %s: not in this rclpy (%s); using %s', kind, err,
                     _FALLBACK)
        return EXECUTOR_MAKERS[_FALLBACK](context), _FALLBACK
