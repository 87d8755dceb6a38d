"""Read a ROS 2 parameter file as the node sees it: its `/**` and node sections, names flattened.

ROS 2 applies the `/**` section to every node and `<node>` / `/<node>` to the named one, later
sections over earlier ones; nested keys are dotted names (`sync: {frame_tolerance_s: ...}` is
`sync.frame_tolerance_s`). Replay and tests read files through here; the node gets the same
values from ROS and checks them with the same schema (`schema.validate`).

`default_params_file` finds the node's own file where no file is given: the installed package's
share directory (through the ament index, as the launch file finds it), else the source tree's
`config/`; never relative to the current directory.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import ParameterError
from .schema import NODE_NAME

PACKAGE = 'alpamayo_offload'
PARAMS_FILE_NAME = 'alpamayo_offload.yaml'
SOURCE_CONFIG_DIR = Path(__file__).resolve().parents[2] / 'config'


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


def installed_config_dir() -> tuple[Path | None, str]:
    """Return the installed package's `share/alpamayo_offload/config`, or None and why not.

    The ament index (`ament_index_python`, AMENT_PREFIX_PATH of a sourced workspace) finds it;
    a machine without ROS has no index, and then nothing is installed the ROS way.
    """
    try:
        from ament_index_python.packages import get_package_share_directory
    except ImportError:
        return None, 'ament_index_python is not installed'
    try:
        return Path(get_package_share_directory(PACKAGE)) / 'config', ''
    except (LookupError, OSError, ValueError) as err:   # not installed / no workspace sourced
        return None, f'the ament index has no {PACKAGE}: {err}'


def default_params_file(source_dir: Path = SOURCE_CONFIG_DIR) -> Path:
    """Return the node's parameter file: installed share directory first, else `source_dir`.

    Raises `ParameterFileError` naming both places when neither holds the file.
    """
    installed, why = installed_config_dir()
    if installed is not None and (installed / PARAMS_FILE_NAME).is_file():
        return installed / PARAMS_FILE_NAME
    if (source_dir / PARAMS_FILE_NAME).is_file():
        return source_dir / PARAMS_FILE_NAME
    where = str(installed / PARAMS_FILE_NAME) if installed is not None else \
        f'share/{PACKAGE}/config/{PARAMS_FILE_NAME} of an installed package ({why})'
    raise ParameterFileError(
        f'no parameter file given and {PARAMS_FILE_NAME} is found neither in {where} nor in the '
        f'source tree ({source_dir / PARAMS_FILE_NAME}); pass one with --params, or source the '
        'workspace the package is installed in')
