"""CARLA ROS bridge wiring: the bridge's topic names, the camera rig's sensor ids, the remaps.

Shared by `launch/alpamayo_offload_carla.launch.py` and the tests, so the launch file and the
CARLA-like bag test wire the node identically. Names follow carla-simulator/ros-bridge: a sensor
`<id>` attached to the vehicle with role name `<role>` publishes on `/carla/<role>/<id>/...` with
frame id `<role>/<id>`; the odometry pseudo-sensor publishes `/carla/<role>/odometry` in frame
`map` with child frame `<role>` (the actor origin); the bridge's AD agent follows a map-frame
`nav_msgs/Path` on `/carla/<role>/waypoints`.
"""
from __future__ import annotations

from collections.abc import Mapping

DEFAULT_ROLE = 'ego_vehicle'
# Alpamayo camera index -> sensor id in config/carla_objects.json (the rig mimics the release's
# camera_cross_left_120fov, camera_front_wide_120fov, camera_cross_right_120fov,
# camera_front_tele_30fov).
DEFAULT_CAMERA_IDS: Mapping[int, str] = {
    0: 'alpamayo_cross_left', 1: 'alpamayo_front_wide', 2: 'alpamayo_cross_right',
    6: 'alpamayo_front_tele',
}
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


def bridge_remaps(role: str = DEFAULT_ROLE,
                  camera_ids: Mapping[int, str] = DEFAULT_CAMERA_IDS) -> dict[str, str]:
    """Node topic names -> bridge topics: four cameras and odometry in, the map path out."""
    if sorted(camera_ids) != sorted(DEFAULT_CAMERA_IDS):
        raise ValueError(f'camera_ids must map exactly the camera indices '
                         f'{sorted(DEFAULT_CAMERA_IDS)}, got {sorted(camera_ids)}')
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
                   model: str = '') -> dict[str, object]:
    """Parameters the CARLA launch sets last (role-dependent, or launch arguments)."""
    values: dict[str, object] = {
        'use_sim_time': True,
        'output.frame_id': ego_frame(role),
        'vram_budget': vram_budget,
        'odometry.rear_axle_offset': parse_offset(rear_axle_offset),
        'device': device,
    }
    if model:
        values['model'] = model
    return values
