"""`inference.executor`: the node's ROS callback executor (default: rclpy's EventsExecutor)."""
from __future__ import annotations

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import String

from alpamayo_offload.app import schema
from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.ros.executor import EXECUTOR_MAKERS, make_executor
from alpamayo_offload.ros.node import leave_executor


def test_inference_executor_default_is_events() -> None:
    assert schema.PARAMETERS['inference.executor'].default == 'events'
    assert schema.PARAMETERS['inference.executor'].restart
    assert config_from_values({}).executor == 'events'
    assert config_from_values({'inference.executor': 'single'}).executor == 'single'


def test_inference_executor_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match='inference.executor'):
        make_executor('multi', rclpy.Context())


def test_every_schema_choice_has_an_rclpy_executor_and_only_those() -> None:
    """The names are the schema's; each is made for real below (no fallback in this rclpy)."""
    assert schema.PARAMETERS['inference.executor'].choices == schema.EXECUTORS
    assert set(EXECUTOR_MAKERS) == set(schema.EXECUTORS)


@pytest.mark.parametrize('kind', schema.EXECUTORS)
def test_make_executor_gives_the_kind_asked_for(kind: str) -> None:
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        executor, made = make_executor(kind, ctx)
        assert made == kind
        assert isinstance(executor, SingleThreadedExecutor) == (kind == 'single')
        executor.shutdown()
    finally:
        rclpy.try_shutdown(context=ctx)


class _StoppedOnce:
    """A real executor whose first `remove_node` is hit by a stop signal's `SystemExit(0)`.

    `before`: the stop lands before the removal ran (at the `finally`'s first instruction);
    otherwise right after it returned. Records the steps that ran to completion.
    """

    def __init__(self, executor: object, before: bool) -> None:
        self.executor, self.before, self.done, self.stopped = executor, before, [], False

    def remove_node(self, node: object) -> None:
        if not self.stopped and self.before:
            self.stopped = True
            raise SystemExit(0)
        self.executor.remove_node(node)
        self.done.append('remove_node')
        if not self.stopped:
            self.stopped = True
            raise SystemExit(0)

    def shutdown(self) -> None:
        self.executor.shutdown()
        self.done.append('shutdown')


@pytest.mark.parametrize('before', [True, False], ids=['before-removal', 'after-removal'])
def test_a_stop_during_teardown_still_leaves_the_executor_clean(before: bool) -> None:
    """The node's callbacks leave the EventsExecutor (which aborts the process when destroyed
    with callbacks registered) even when a stop signal's SystemExit lands mid-teardown; the stop
    is raised once the executor is shut down."""
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = Node('leave_probe', context=ctx)
    try:
        node.create_subscription(String, 'probe', lambda _msg: None, 10)
        executor, _ = make_executor('events', ctx)
        executor.add_node(node)
        executor.spin_once(timeout_sec=0.1)
        interrupted = _StoppedOnce(executor, before)
        with pytest.raises(SystemExit) as stop:
            leave_executor(interrupted, node)
        assert stop.value.code == 0
        # an interrupted step runs again (a second removal is a no-op), then the shutdown
        assert interrupted.done == ['remove_node'] * (1 if before else 2) + ['shutdown']
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
