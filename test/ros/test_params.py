"""The schema in ROS: descriptors, declaration from checked overrides, run-time updates."""
from __future__ import annotations

import math

import pytest
import rclpy
from rcl_interfaces.msg import ParameterType
from rclpy.node import Node
from rclpy.parameter import Parameter

from alpamayo_offload.app import schema
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.ros import params


@pytest.fixture
def make_node():
    """A bare rclpy node with the given parameter overrides (as parameter files set them)."""
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    nodes = []

    def make(**overrides: object) -> Node:
        node = Node(schema.NODE_NAME, context=ctx, parameter_overrides=[
            Parameter(k, value=v) for k, v in overrides.items()])
        nodes.append(node)
        return node
    yield make
    for node in nodes:
        node.destroy_node()
    rclpy.try_shutdown(context=ctx)


def test_descriptors_come_from_the_schema() -> None:
    for name, spec in schema.PARAMETERS.items():
        desc = params.descriptor(spec)
        assert desc.read_only == spec.restart and desc.description == spec.ros_description()
        assert desc.dynamic_typing == (spec.kind.element is schema.Kind.DOUBLE), name
    period = params.descriptor(schema.PARAMETERS['inference.period_s'])
    assert period.floating_point_range[0].from_value == 0.0
    assert math.isinf(period.floating_point_range[0].to_value)
    slots = params.descriptor(schema.PARAMETERS['cameras.slots'])
    assert slots.type == ParameterType.PARAMETER_INTEGER_ARRAY and not slots.integer_range
    depth = params.descriptor(schema.PARAMETERS['buffers.camera_depth'])
    assert (depth.integer_range[0].from_value, depth.type) == (4, ParameterType.PARAMETER_INTEGER)


def test_declare_takes_checked_overrides(make_node) -> None:
    node = make_node(**{'inference.period_s': 1, 'odometry.rear_axle_offset': [-1, 0, 0],
                        'plan.profile': 'p.json#sha256=ab', 'use_sim_time': True})
    values = params.declare(node)
    assert node.get_parameter('inference.period_s').value == 1.0
    assert node.get_parameter('inference.period_s').type_ == Parameter.Type.DOUBLE
    assert list(node.get_parameter('odometry.rear_axle_offset').value) == [-1.0, 0.0, 0.0]
    assert node.get_parameter('plan.profile').value == 'p.json#sha256=ab'
    assert values['inference.period_s'] == 1.0 and 'use_sim_time' not in values
    assert node.describe_parameter('model').read_only


def test_bad_overrides_raise_before_anything_is_declared(make_node) -> None:
    node = make_node(**{'sync.frame_tolerance_s': '0.05', 'sync.frame_tolerence_s': 0.1})
    with pytest.raises(ParameterError, match=r"sync.frame_tolerance_s: expected a float.*'0.05'"
                                             r".*unknown parameter 'sync.frame_tolerence_s'"):
        params.declare(node)
    assert not node.has_parameter('model')


def test_runtime_update_rules() -> None:
    values = schema.defaults()
    cfg, checked, reason = params.check_update(values, [Parameter('inference.period_s', value=1)])
    assert cfg is not None and cfg.period_s == 1.0 and checked == {'inference.period_s': 1.0}
    cfg, _, reason = params.check_update(values, [Parameter('model', value='/ckpt')])
    assert cfg is None and 'restart' in reason
    cfg, _, reason = params.check_update(values, [Parameter('sync.max_input_age_s', value=-1.0)])
    assert cfg is None and 'max_input_age_s' in reason
    cfg, _, reason = params.check_update(values, [Parameter('sync.frame_tolerance_s',
                                                            value='0.1')])
    assert cfg is None and 'without quotes' in reason
    cfg, checked, reason = params.check_update(values, [Parameter('use_sim_time', value=True)])
    assert cfg is not None and checked == {} and reason == ''
