"""Read a ROS 2 parameter file as the node sees it: its `/**` and node sections, names flattened.

ROS 2 applies the `/**` section to every node and `<node>` / `/<node>` to the named one, later
sections over earlier ones; nested keys are dotted names (`sync: {frame_tolerance_s: ...}` is
`sync.frame_tolerance_s`). Replay and tests read files through here; the node gets the same
values from ROS and checks them with the same schema (`schema.validate`).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import ParameterError
from .schema import NODE_NAME


class ParameterFileError(ParameterError):
    """A parameter file cannot be read or holds no section for the node."""


def flatten_parameters(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Nested `ros__parameters` YAML -> dotted names, as ROS 2 names them (`a: {b: 1}` -> `a.b`)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping):
            out.update(flatten_parameters(value, name + '.'))
        else:
            out[name] = value
    return out


def read_param_file(path: Path, node_name: str = NODE_NAME) -> dict[str, Any]:
    """Flattened parameters for `node_name` from one file (`/**`, then `node_name` sections)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ParameterFileError(f'cannot read parameter file {str(path)!r}: {err}') from err
    if not isinstance(data, Mapping):
        raise ParameterFileError(f'parameter file {str(path)!r} is not a mapping of node names')
    values: dict[str, Any] = {}
    found = False
    for node in ('/**', node_name, f'/{node_name}'):
        section = data.get(node)
        if isinstance(section, Mapping) and isinstance(section.get('ros__parameters'), Mapping):
            found = True
            values.update(flatten_parameters(section['ros__parameters']))
    if not found:
        raise ParameterFileError(f'parameter file {str(path)!r} has no `/**: ros__parameters` '
                                 f'(or `{node_name}: ros__parameters`) section')
    return values
