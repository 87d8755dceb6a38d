"""The CARLA rig file the bridge's spawner reads, the CARLA parameter file and the wiring."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpamayo_offload.app import carla, schema
from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.app.param_file import read_param_file

ROOT = Path(__file__).resolve().parents[2]
OBJECTS = ROOT / 'config' / 'carla_objects.json'
CARLA_YAML = ROOT / 'config' / 'carla.yaml'
# Alpamayo camera index -> (horizontal FOV, which side it looks to: +1 left, 0 ahead, -1 right)
RIG = {0: (120.0, 1), 1: (120.0, 0), 2: (120.0, -1), 6: (30.0, 0)}




def ego_vehicle() -> dict:
    objects = json.loads(OBJECTS.read_text())['objects']
    vehicles = [o for o in objects if o['type'].startswith('vehicle.')]
    assert len(vehicles) == 1
    return vehicles[0]


def test_rig_matches_alpamayo_cameras_in_the_spawner_format() -> None:
    vehicle = ego_vehicle()
    assert vehicle['id'] == carla.DEFAULT_ROLE
    sensors = {s['id']: s for s in vehicle['sensors']}   # the spawner reads "sensors"
    for slot, (fov, side) in RIG.items():
        cam = sensors[carla.DEFAULT_CAMERA_IDS[slot]]
        assert cam['type'] == 'sensor.camera.rgb'
        assert (cam['image_size_x'], cam['image_size_y']) == (1920, 1080)
        assert cam['fov'] == fov and cam['sensor_tick'] == pytest.approx(0.1)   # 10 Hz
        pose = cam['spawn_point']
        assert set(pose) == {'x', 'y', 'z', 'roll', 'pitch', 'yaw'}
        # ROS convention (the bridge converts): left is +y and a positive yaw
        assert pose['x'] > 0 and pose['z'] > 1.0
        assert (pose['yaw'] > 0, pose['yaw'] < 0) == (side > 0, side < 0)
        assert (pose['y'] > 0, pose['y'] < 0) == (side > 0, side < 0)
    kinds = {s['type']: s['id'] for s in vehicle['sensors']}
    assert kinds['sensor.pseudo.odom'] == 'odometry'   # -> /carla/<role>/odometry
    assert 'sensor.pseudo.tf' in kinds and 'actor.pseudo.control' in kinds


def test_carla_parameter_file_is_valid_and_relative_budget_needs_cuda() -> None:
    carla_values = read_param_file(CARLA_YAML)
    assert set(carla_values) <= set(schema.PARAMETERS)
    launch = carla.node_overrides(carla.DEFAULT_ROLE, 'free-1.5GiB', '[-1.389, 0.0, 0.0]',
                                  'cuda', '/models/alpamayo-r1')
    assert launch['use_sim_time'] is True                # ROS's own: accepted, not a setting
    cfg = config_from_values(carla_values | launch)
    assert cfg.vram_budget == 'free-1.5GiB' and cfg.engine.device == 'cuda'
    assert cfg.output_frame_id == 'ego_vehicle/rear_axle' and cfg.odom_frame_id == 'map'
    assert cfg.assembly.rear_axle_offset == (-1.389, 0.0, 0.0)
    assert [c.compressed for c in cfg.cameras] == [False] * 4 and cfg.camera_reliable
    with pytest.raises(ParameterError, match="free VRAM.*device is 'cpu'"):
        config_from_values(carla_values | launch | {'device': 'cpu'})


def test_bridge_remaps_follow_the_bridge_names() -> None:
    remaps = carla.bridge_remaps('hero', {0: 'l', 1: 'f', 2: 'r', 6: 't'})
    assert remaps == {
        '~/input/camera_0/image': '/carla/hero/l/image',
        '~/input/camera_1/image': '/carla/hero/f/image',
        '~/input/camera_2/image': '/carla/hero/r/image',
        '~/input/camera_6/image': '/carla/hero/t/image',
        '~/input/odometry': '/carla/hero/odometry',
        '~/output/path_odom': '/carla/hero/waypoints',
    }
    with pytest.raises(ValueError, match='camera indices'):
        carla.bridge_remaps('hero', {0: 'l', 1: 'f'})
    with pytest.raises(ValueError, match='role_name'):
        carla.bridge_remaps('a/b')
    assert carla.parse_offset('-1.2, 0,0.1') == [-1.2, 0.0, 0.1]
    with pytest.raises(ValueError, match='three numbers'):
        carla.parse_offset('[-1.2, 0]')


def test_launch_file_wires_node_and_rear_axle_tf() -> None:
    pytest.importorskip('launch_ros', reason='launch_ros is part of a ROS install')
    import importlib.util

    from launch import LaunchContext

    spec = importlib.util.spec_from_file_location(
        'carla_launch', ROOT / 'launch' / 'alpamayo_offload_carla.launch.py')
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    context = LaunchContext()
    for entity in description.entities:
        if hasattr(entity, 'default_value') and hasattr(entity, 'name'):
            context.launch_configurations[entity.name] = ''.join(
                s.perform(context) for s in entity.default_value)
    context.launch_configurations['role_name'] = 'hero'
    actions = module._actions(context)
    assert len(actions) == 2          # the node and the static rear-axle TF
