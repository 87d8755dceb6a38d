"""Read the node's parameter file(s) into a `ReplayConfig`: same YAML, same mapping as the node.

Files are merged in order like `--params-file` arguments (a planner's residency file last). Node
private names (`~/input/...`) are resolved against the node name, then `--remap FROM:=TO` rules
map them to the topics recorded in the bag.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from alpamayo_offload.planning.errors import PlanningError
from alpamayo_offload.replay.config import CameraTopic, ReplayConfig
from alpamayo_offload.replay.errors import ReplayConfigError
from alpamayo_offload.ros.node_config import (
    PARAMETERS,
    config_from_values,
    flatten_parameters,
)
from alpamayo_offload.ros.vram import resolve_budget

DEFAULT_NODE_NAME = 'alpamayo_offload'



def read_param_file(path: Path, node_name: str = DEFAULT_NODE_NAME) -> dict[str, Any]:
    """Flattened parameters for `node_name` from one ROS 2 parameter YAML (`/**` or the node)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ReplayConfigError(f'cannot read parameter file {str(path)!r}: {err}') from err
    if not isinstance(data, Mapping):
        raise ReplayConfigError(f'parameter file {str(path)!r} is not a mapping of node names')
    values: dict[str, Any] = {}
    for node in ('/**', node_name, f'/{node_name}'):
        section = data.get(node)
        if isinstance(section, Mapping) and isinstance(section.get('ros__parameters'), Mapping):
            values.update(flatten_parameters(section['ros__parameters']))
    if not values:
        raise ReplayConfigError(f'parameter file {str(path)!r} has no `/**: ros__parameters` (or '
                                f'`{node_name}: ros__parameters`) section')
    return values


def resolve_topic(name: str, node_name: str, remaps: Mapping[str, str]) -> str:
    """Apply remap rules to the name as written and as resolved (`~` -> `/<node>`)."""
    if name in remaps:
        return remaps[name]
    full = f'/{node_name}{name[1:]}' if name.startswith('~') else \
        name if name.startswith('/') else f'/{name}'
    return remaps.get(full, full)


def parse_remaps(rules: Sequence[str]) -> dict[str, str]:
    """`FROM:=TO` strings (as `ros2 run ... --ros-args -r`) to a mapping."""
    out: dict[str, str] = {}
    for rule in rules:
        src, sep, dst = rule.partition(':=')
        if not sep or not src or not dst:
            raise ReplayConfigError(f'remap {rule!r} must look like FROM:=TO, e.g. '
                                    '~/input/odometry:=/localization/kinematic_state')
        out[src] = dst
    return out


def load_replay_config(param_files: Sequence[Path], *, remaps: Mapping[str, str] | None = None,
                       node_name: str = DEFAULT_NODE_NAME, rate_hz: float | None = None,
                       overrides: Mapping[str, Any] | None = None,
                       engine_overrides: Mapping[str, Any] | None = None) -> ReplayConfig:
    """Merge the files over the node's declared defaults and map them as the node does.

    `rate_hz` defaults to the node's timer rate (1 / inference.period_s); `overrides` are
    parameter values that win over the files (e.g. `device` from the command line);
    `engine_overrides` set EngineConfig fields the node has no parameter for (`num_samples`).
    """
    values: dict[str, Any] = {k: (d if not hasattr(d, 'name') else None)  # typed, no default
                              for k, (d, _) in PARAMETERS.items()}
    for path in param_files:
        values.update(read_param_file(Path(path), node_name))
    values.update(overrides or {})
    unknown = sorted(k for k in values if k not in PARAMETERS and not k.startswith('plan.')
                     and k != 'embed_on_host')
    if unknown:
        raise ReplayConfigError(f'unknown parameters {unknown} in {[str(p) for p in param_files]};'
                                ' the node declares: ' + ', '.join(PARAMETERS))
    try:
        node = config_from_values(values)   # the node's own mapping: [-1] lists, budget strings
        cameras = tuple(CameraTopic(c.slot, resolve_topic(c.topic, node_name, remaps or {}),
                                    c.compressed) for c in node.cameras)
        engine = dict(node.engine)
        engine.update(engine_overrides or {})
        # "free VRAM" budgets resolve on the replay machine's device, as the node does at start.
        engine['budget_bytes'] = resolve_budget(node.vram_budget,
                                                str(engine['device'])).budget_bytes
        return ReplayConfig(
            cameras=cameras,
            odometry_topic=resolve_topic(node.odometry_topic, node_name, remaps or {}),
            assembly=node.assembly, engine=engine,
            output_frame_id=node.output_frame_id, camera_depth=node.camera_depth,
            odometry_depth=node.odometry_depth,
            rate_hz=rate_hz if rate_hz is not None else 1.0 / node.period_s,
            plan_info=dict(node.plan_info), decode_threads=node.decode_threads)
    except (ValueError, PlanningError) as err:  # ParameterError is a ValueError too
        raise ReplayConfigError(f'{err} (parameter files: {[str(p) for p in param_files]})'
                                ) from err
