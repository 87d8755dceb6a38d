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

from rclpy.context import Context
from rclpy.executors import Executor, SingleThreadedExecutor

_LOG = logging.getLogger(__name__)
EXECUTORS = ('events', 'single')


def make_executor(kind: str, context: Context) -> tuple[Executor, str]:
    """Return the executor `kind` names and the kind made.

    'events' falls back to 'single' (with a warning) where this rclpy has no EventsExecutor.
    """
    if kind not in EXECUTORS:
        raise ValueError(f'inference.executor {kind!r}: one of {EXECUTORS}')
    if kind == 'events':
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError as err:
            _LOG.warning('inference.executor events: rclpy has no EventsExecutor (%s); '
                         'using the SingleThreadedExecutor', err)
        else:
            return EventsExecutor(context=context), 'events'
    return SingleThreadedExecutor(context=context), 'single'
