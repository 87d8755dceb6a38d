"""`inference.executor`: the node's ROS callback executor (default: rclpy's EventsExecutor)."""
from __future__ import annotations

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor

from alpamayo_offload.app import schema
from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.ros.executor import EXECUTOR_MAKERS, make_executor


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
