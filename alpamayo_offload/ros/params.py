"""The node's parameters in ROS: declaration and run-time update rules.

The table and its mapping to config dataclasses live in `node_config.py` (no ROS import), which
rosbag replay shares.
"""
from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from .errors import ParameterError
from .node_config import (  # noqa: F401  (re-exported: the node and tests use this module)
    PARAMETERS,
    RESTART_ONLY,
    SEQUENCES,
    CameraInput,
    NodeConfig,
    config_from_values,
)


def declare(node: Node) -> list[str]:
    """Declare every parameter of the table plus the `plan.*` overrides; returns all names."""
    for name, (default, text) in PARAMETERS.items():
        desc = ParameterDescriptor(description=text)
        node.declare_parameter(name, default, desc)
    # rclpy has no public accessor for overrides; plan.* keys are free-form planner output.
    plan = sorted(n for n in node._parameter_overrides if n.startswith('plan.'))
    for name in plan:
        node.declare_parameter(name, node._parameter_overrides[name].value, ParameterDescriptor(
            description='informational (planner output)', dynamic_typing=True, read_only=True))
    return list(PARAMETERS) + plan


def read(node: Node, names: list[str]) -> dict[str, Any]:
    """Return the current values of the parameters `names` of `node`."""
    return {n: node.get_parameter_or(n).value for n in names}


def check_update(current: dict[str, Any],
                 changes: list[Parameter]) -> tuple[NodeConfig | None, str]:
    """Validate run-time changes; returns (new config, '') or (None, reason to reject)."""
    for p in changes:
        if p.name in RESTART_ONLY:
            return None, f'{p.name} cannot change at run time (needs a restart); restart the node'
        if p.name not in current:
            return None, f'{p.name} is not a parameter of this node'
    values = dict(current) | {p.name: p.value for p in changes}
    try:
        return config_from_values(values), ''
    except ParameterError as err:
        return None, str(err)
