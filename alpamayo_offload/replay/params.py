"""Read the node's parameter file(s) into a `ReplayConfig`: same files, same schema, same mapping.

Files are merged in order like `--params-file` arguments (a planner's residency file last), read
by the application layer's reader and checked by its schema, so a file the node refuses replay
refuses too, with the same message. Node private names (`~/input/...`) are resolved against the
node name (`alpamayo_offload_node` unless `--node-name` says otherwise), then `--remap FROM:=TO`
rules map them to the topics recorded in the bag.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.app.param_file import read_param_file
from alpamayo_offload.app.schema import NODE_NAME
from alpamayo_offload.replay.config import CameraTopic, ReplayConfig
from alpamayo_offload.replay.errors import ReplayConfigError


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


def read_values(param_files: Sequence[Path], node_name: str = NODE_NAME,
                overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge the files in order, then `overrides`: name -> value as written (unchecked)."""
    values: dict[str, Any] = {}
    for path in param_files:
        values.update(read_param_file(Path(path), node_name))
    values.update(overrides or {})
    return values


def load_replay_config(param_files: Sequence[Path], *, remaps: Mapping[str, str] | None = None,
                       node_name: str = NODE_NAME, rate_hz: float | None = None,
                       overrides: Mapping[str, Any] | None = None,
                       engine_overrides: Mapping[str, Any] | None = None,
                       navigation: bool = True) -> ReplayConfig:
    """Merge the files over the schema's defaults and map them as the node does.

    `rate_hz` defaults to the node's timer rate (1 / inference.period_s); `overrides` are
    parameter values that win over the files (e.g. `device` from the command line);
    `engine_overrides` set EngineConfig fields the node has no parameter for (`sample`);
    `navigation` False reads no route text (else `navigation.topic`, resolved as the node does).
    The VRAM budget stays a spec: the engine loader resolves it once, on the replay machine.
    """
    files = [str(p) for p in param_files]
    try:
        node = config_from_values(read_values(param_files, node_name, overrides))
        cameras = tuple(CameraTopic(c.slot, resolve_topic(c.topic, node_name, remaps or {}),
                                    c.compressed) for c in node.cameras)
        return ReplayConfig(
            cameras=cameras,
            odometry_topic=resolve_topic(node.odometry_topic, node_name, remaps or {}),
            assembly=node.assembly,
            engine=dataclasses.replace(node.engine, **(engine_overrides or {})),
            vram_budget=node.vram_budget,
            output_frame_id=node.output_frame_id, camera_depth=node.camera_depth,
            odometry_depth=node.odometry_depth,
            rate_hz=rate_hz if rate_hz is not None else 1.0 / node.period_s,
            plan_info=dict(node.plan_info), decode_threads=node.decode_threads,
            navigation_topic=resolve_topic(node.navigation_topic, node_name, remaps or {})
            if navigation else '', navigation_max_age_s=node.navigation_max_age_s)
    except (ParameterError, ValueError) as err:
        raise ReplayConfigError(f'{err} (parameter files: {files})') from err
