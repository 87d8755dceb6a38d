"""CARLA ROS bridge wiring: the bridge's topic names, the camera rig's sensor ids, the remaps.

Shared by `launch/alpamayo_offload_carla.launch.py` and the tests, so the launch file and the
CARLA-like bag test wire the node identically. Names follow carla-simulator/ros-bridge: a sensor
`<id>` attached to the vehicle with role name `<role>` publishes on `/carla/<role>/<id>/...` with
frame id `<role>/<id>`; the odometry pseudo-sensor publishes `/carla/<role>/odometry` in frame
`map` with child frame `<role>` (the actor origin); the bridge's AD agent follows a map-frame
`nav_msgs/Path` on `/carla/<role>/waypoints`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

DEFAULT_ROLE = 'ego_vehicle'
# Alpamayo camera index -> sensor id in config/carla_objects.json. The rig mimics the release's
# camera_cross_left_120fov (0), camera_front_wide_120fov (1), camera_cross_right_120fov (2),
# camera_rear_left_70fov (3), camera_rear_right_70fov (5) and camera_front_tele_30fov (6); the
# bridge spawns all six, and the node subscribes to its model's profile of them.
RIG_CAMERA_IDS: Mapping[int, str] = {
    0: 'alpamayo_cross_left', 1: 'alpamayo_front_wide', 2: 'alpamayo_cross_right',
    3: 'alpamayo_rear_left', 5: 'alpamayo_rear_right', 6: 'alpamayo_front_tele',
}
# The cameras each model family runs: R1 and 1.5 the four release cameras, 2 Super its
# six-camera trajectory profile.
FAMILY_CAMERAS: Mapping[str, tuple[int, ...]] = {
    'r1': (0, 1, 2, 6), '1.5': (0, 1, 2, 6), '2super': (0, 1, 2, 3, 5, 6),
}
DEFAULT_CAMERA_IDS: Mapping[int, str] = {s: RIG_CAMERA_IDS[s] for s in FAMILY_CAMERAS['r1']}
# config.json `model_type` of each family (as model/config.py reads a checkpoint).
_MODEL_TYPES = {'alpamayo_r1': 'r1', 'alpamayo1_5': '1.5', 'alpamayo2_super': '2super'}
# Rear axle in the actor-origin frame for vehicle.tesla.model3 (x forward, metres; measure other
# blueprints as docs/carla.md shows).
DEFAULT_REAR_AXLE_OFFSET = (-1.389, 0.0, 0.0)


def camera_topic(role: str, sensor_id: str) -> str:
    """Image topic of a bridge camera (raw `sensor_msgs/Image`, bgra8)."""
    return f'/carla/{role}/{sensor_id}/image'


def camera_frame(role: str, sensor_id: str) -> str:
    """Header frame id of a bridge camera's images."""
    return f'{role}/{sensor_id}'


def odometry_topic(role: str) -> str:
    """Return the odometry pseudo-sensor's topic (frame `map`, child frame `<role>`)."""
    return f'/carla/{role}/odometry'


def waypoints_topic(role: str) -> str:
    """Map-frame path topic the bridge's AD agent (local planner) follows."""
    return f'/carla/{role}/waypoints'


def ego_frame(role: str) -> str:
    """Frame of the ego-frame path: the rear axle (the launch file publishes it as static TF)."""
    return f'{role}/rear_axle'


def model_family(model: str) -> str:
    """Family ('r1', '1.5', '2super') of a node `model` value: a preset or a checkpoint folder.

    Presets name it (`tiny-2super`, `layers=8,family=1.5`; others are R1); a checkpoint
    directory's `config.json` says it in `model_type`, read as plain JSON (no model code at
    launch). Raises ValueError naming the file when a directory's config cannot say.
    """
    path = Path(model).expanduser()
    if model and path.is_dir():
        config = path / 'config.json'
        try:
            model_type = json.loads(config.read_text()).get('model_type')
        except (OSError, ValueError, AttributeError) as err:
            raise ValueError(f'model {model!r}: cannot read {config} ({err})') from err
        if model_type not in _MODEL_TYPES:
            raise ValueError(f'model {model!r}: {config} has model_type {model_type!r}; known: '
                             f'{sorted(_MODEL_TYPES)}')
        return _MODEL_TYPES[model_type]
    for family in ('2super', '1.5'):
        if model.endswith(family) or f'family={family}' in model:
            return family
    return 'r1'


def rig_cameras(family: str) -> dict[int, str]:
    """Alpamayo camera index -> rig sensor id of the cameras `family` runs."""
    if family not in FAMILY_CAMERAS:
        raise ValueError(f'model family {family!r}: one of {sorted(FAMILY_CAMERAS)}')
    return {slot: RIG_CAMERA_IDS[slot] for slot in FAMILY_CAMERAS[family]}


def camera_parameters(slots: tuple[int, ...]) -> dict[str, object]:
    """Return the node's camera parameters for `slots` (topics remapped to the bridge, raw)."""
    return {'cameras.slots': list(slots),
            'cameras.topics': [f'~/input/camera_{s}/image' for s in slots],
            'cameras.transports': ['raw'] * len(slots)}


def bridge_remaps(role: str = DEFAULT_ROLE,
                  camera_ids: Mapping[int, str] = DEFAULT_CAMERA_IDS) -> dict[str, str]:
    """Node topic names -> bridge topics: the cameras and odometry in, the map path out.

    `camera_ids` maps the Alpamayo index of each subscribed camera to its rig sensor id (a
    family's set: `rig_cameras`).
    """
    if tuple(sorted(camera_ids)) not in set(FAMILY_CAMERAS.values()):
        raise ValueError(f'camera_ids must map exactly the camera indices of a model family '
                         f'({", ".join(f"{f}: {list(s)}" for f, s in FAMILY_CAMERAS.items())}), '
                         f'got {sorted(camera_ids)}')
    if not role or '/' in role:
        raise ValueError(f'role_name {role!r} must be a non-empty name without "/"')
    remaps = {f'~/input/camera_{slot}/image': camera_topic(role, sensor_id)
              for slot, sensor_id in sorted(camera_ids.items())}
    remaps['~/input/odometry'] = odometry_topic(role)
    remaps['~/output/path_odom'] = waypoints_topic(role)
    return remaps


def parse_offset(text: str) -> list[float]:
    """'[-1.389, 0.0, 0.0]' or '-1.389,0,0' (a launch argument) -> [x, y, z] metres."""
    parts = [p for p in text.strip().strip('[]').replace(' ', '').split(',') if p]
    try:
        values = [float(p) for p in parts]
    except ValueError as err:
        raise ValueError(f'rear_axle_offset {text!r} must be three numbers "x,y,z" (metres, '
                         'actor origin -> rear axle)') from err
    if len(values) != 3:
        raise ValueError(f'rear_axle_offset {text!r} must be three numbers "x,y,z" (metres)')
    return values


def node_overrides(role: str, vram_budget: str, rear_axle_offset: str, device: str,
                   model: str = '', cameras: tuple[int, ...] = ()) -> dict[str, object]:
    """Parameters the CARLA launch sets last (role-dependent, or launch arguments).

    `cameras` (a family's slots) sets the node's camera parameters; empty keeps the files'.
    """
    values: dict[str, object] = {
        'use_sim_time': True,
        'output.frame_id': ego_frame(role),
        'vram_budget': vram_budget,
        'odometry.rear_axle_offset': parse_offset(rear_axle_offset),
        'device': device,
    }
    if model:
        values['model'] = model
    if cameras:
        values |= camera_parameters(cameras)
    return values
