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
# Alpamayo camera index -> (horizontal FOV, which side it looks to: +1 left, 0 ahead, -1 right,
# whether it looks backwards)
RIG = {0: (120.0, 1, False), 1: (120.0, 0, False), 2: (120.0, -1, False),
       3: (70.0, 1, True), 5: (70.0, -1, True), 6: (30.0, 0, False)}


def ego_vehicle() -> dict:
    objects = json.loads(OBJECTS.read_text())['objects']
    vehicles = [o for o in objects if o['type'].startswith('vehicle.')]
    assert len(vehicles) == 1
    return vehicles[0]


def test_rig_matches_alpamayo_cameras_in_the_spawner_format() -> None:
    vehicle = ego_vehicle()
    assert vehicle['id'] == carla.DEFAULT_ROLE
    sensors = {s['id']: s for s in vehicle['sensors']}   # the spawner reads "sensors"
    assert sorted(carla.RIG_CAMERA_IDS) == sorted(RIG)
    for slot, (fov, side, rear) in RIG.items():
        cam = sensors[carla.RIG_CAMERA_IDS[slot]]
        assert cam['type'] == 'sensor.camera.rgb'
        assert (cam['image_size_x'], cam['image_size_y']) == (1920, 1080)
        assert cam['fov'] == fov and cam['sensor_tick'] == pytest.approx(0.1)   # 10 Hz
        pose = cam['spawn_point']
        assert set(pose) == {'x', 'y', 'z', 'roll', 'pitch', 'yaw'}
        # ROS convention (the bridge converts): left is +y and a positive yaw
        assert pose['x'] >= 0 and pose['z'] > 1.0
        assert (pose['yaw'] > 0, pose['yaw'] < 0) == (side > 0, side < 0)
        assert (abs(pose['yaw']) > 90) == rear
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
    with pytest.raises(ValueError, match='camera indices of a model family'):
        carla.bridge_remaps('hero', {0: 'l', 1: 'f'})
    six = carla.bridge_remaps('hero', carla.rig_cameras('2super'))
    assert six['~/input/camera_3/image'] == '/carla/hero/alpamayo_rear_left/image'
    assert six['~/input/camera_5/image'] == '/carla/hero/alpamayo_rear_right/image'
    assert sum(k.startswith('~/input/camera_') for k in six) == 6
    with pytest.raises(ValueError, match='role_name'):
        carla.bridge_remaps('a/b')
    assert carla.parse_offset('-1.2, 0,0.1') == [-1.2, 0.0, 0.1]
    with pytest.raises(ValueError, match='three numbers'):
        carla.parse_offset('[-1.2, 0]')


def test_model_family_from_preset_or_checkpoint_config(tmp_path: Path) -> None:
    assert carla.model_family('tiny-2super') == carla.model_family('2super') == '2super'
    assert carla.model_family('layers=4,family=1.5') == '1.5'
    assert carla.model_family('tiny') == carla.model_family('') == 'r1'
    (tmp_path / 'config.json').write_text('{"model_type": "alpamayo2_super"}')
    assert carla.model_family(str(tmp_path)) == '2super'
    (tmp_path / 'config.json').write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="model_type 'llama'"):
        carla.model_family(str(tmp_path))
    (tmp_path / 'config.json').unlink()
    with pytest.raises(ValueError, match='cannot read'):
        carla.model_family(str(tmp_path))
    with pytest.raises(ValueError, match='model family'):
        carla.rig_cameras('r2')


def test_2super_overrides_give_the_node_six_bridge_cameras() -> None:
    launch = carla.node_overrides(carla.DEFAULT_ROLE, 'free-1.5GiB', '[-1.389, 0.0, 0.0]',
                                  'cuda', 'tiny-2super', tuple(carla.rig_cameras('2super')))
    cfg = config_from_values(read_param_file(CARLA_YAML) | launch)
    assert [c.slot for c in cfg.cameras] == [0, 1, 2, 3, 5, 6]
    assert not any(c.compressed for c in cfg.cameras) and cfg.engine.num_cameras == 6
    remaps = carla.bridge_remaps(carla.DEFAULT_ROLE, carla.rig_cameras('2super'))
    assert {c.topic for c in cfg.cameras} <= set(remaps)


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
    context.launch_configurations['model'] = 'tiny-2super'     # six cameras: same actions
    assert len(module._actions(context)) == 2
