"""The node's parameters in ROS: declared from the schema, checked with it, updated at run time.

The schema (`app/schema.py`) is the one source of names, types, ranges and restart rules; replay
validates parameter files with it too. The node validates its overrides (parameter files and
`-p`) through the schema before declaring anything, so a bad file is one `ParameterError` naming
the parameter, never an rclpy exception. Each parameter is declared with the checked value
(`ignore_override`: an integer given for a float is declared as that float) and a descriptor
carrying its description, unit, range and read-only flag; float parameters use dynamic typing so
that an integer set at run time reaches the schema check instead of ROS's type check.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from ..app import schema
from ..app.config import NodeConfig, config_from_values
from ..app.errors import ParameterError

_INT64_MAX = 2**63 - 1
_ROS_TYPES = {
    schema.Kind.BOOL: Parameter.Type.BOOL, schema.Kind.INTEGER: Parameter.Type.INTEGER,
    schema.Kind.DOUBLE: Parameter.Type.DOUBLE, schema.Kind.STRING: Parameter.Type.STRING,
    schema.Kind.INTEGER_ARRAY: Parameter.Type.INTEGER_ARRAY,
    schema.Kind.DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY,
    schema.Kind.STRING_ARRAY: Parameter.Type.STRING_ARRAY,
}


def descriptor(spec: schema.ParamSpec) -> ParameterDescriptor:
    """Build the ROS descriptor of one schema entry: description, unit, range, read-only."""
    desc = ParameterDescriptor(name=spec.name, description=spec.ros_description(),
                               additional_constraints=spec.constraints(),
                               read_only=spec.restart)
    if spec.kind.element is schema.Kind.DOUBLE:
        desc.dynamic_typing = True   # an integer reaches the schema check, which accepts it
    else:
        desc.type = _ROS_TYPES[spec.kind].value
    bounded = spec.minimum is not None or spec.maximum is not None
    if bounded and spec.kind is schema.Kind.DOUBLE:
        desc.floating_point_range = [FloatingPointRange(
            from_value=float('-inf') if spec.minimum is None else float(spec.minimum),
            to_value=float('inf') if spec.maximum is None else float(spec.maximum), step=0.0)]
    elif bounded and spec.kind is schema.Kind.INTEGER:
        desc.integer_range = [IntegerRange(
            from_value=-_INT64_MAX if spec.minimum is None else int(spec.minimum),
            to_value=_INT64_MAX if spec.maximum is None else int(spec.maximum), step=1)]
    return desc


def overrides(node: Node) -> dict[str, Any]:
    """Return the values the parameter files and `-p` arguments give this node, by name."""
    # rclpy has no public accessor for the overrides it parsed from the command line.
    return {name: p.value for name, p in node._parameter_overrides.items()}


def declare(node: Node) -> dict[str, Any]:
    """Check the overrides against the schema, declare every parameter; return the values.

    Raises `ParameterError` (every problem of the files in one message) before declaring.
    """
    values = schema.resolve(overrides(node))
    for name, spec in schema.PARAMETERS.items():
        node.declare_parameter(name, values[name], descriptor(spec), ignore_override=True)
    for name in sorted(n for n in values if n.startswith(schema.PLAN_PREFIX)):
        node.declare_parameter(name, values[name], ParameterDescriptor(
            description='informational (planner output)', dynamic_typing=True, read_only=True),
            ignore_override=True)
    return values


def check_update(current: Mapping[str, Any],
                 changes: list[Parameter]) -> tuple[NodeConfig | None, dict[str, Any], str]:
    """Validate run-time changes: (new config, checked new values, '') or (None, {}, reason).

    ROS's own parameters (`use_sim_time`, ...) pass through: they are not the node's settings.
    """
    for p in changes:
        if p.name in schema.RESTART_ONLY:
            return None, {}, (f'{p.name} cannot change at run time (needs a restart); restart '
                              'the node')
    try:
        checked = schema.validate({p.name: p.value for p in changes})
        return config_from_values({**current, **checked}), checked, ''
    except ParameterError as err:
        return None, {}, str(err)
