"""A bag shaped like a CARLA ROS bridge recording, through the real node wired as the CARLA launch.

Bridge topic names and frame ids, bgra8 1280x720 images at 20 Hz, odometry of the actor origin in
`map` at 50 Hz; the node runs on sim time (the player publishes /clock). With the real tiny
engine the two published paths must be the same trajectory in two frames (related by the true
rear-axle pose at t0); with the planted-future test double the map path must land on the driven
path.
"""
from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from planted_engine import rear_axle_truth, save_drive  # test/carla is on sys.path

from alpamayo_offload.app import carla
from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.assembly.poses import quat_to_matrix
from alpamayo_offload.ros.session import SessionResult, default_params_file, run_session

pytestmark = pytest.mark.slow
NS = 1_000_000_000
ROLE = carla.DEFAULT_ROLE
SLOTS = (0, 1, 2, 6)
OFFSET = carla.DEFAULT_REAR_AXLE_OFFSET
CARLA_PARAMS = Path(__file__).resolve().parents[2] / 'config' / 'carla.yaml'
DRIVE = DriveConfig(
    duration_s=2.6, encoding='bgra8', width=1280, height=720, camera_rate_hz=20.0,
    odom_rate_hz=50.0, odom_frame_id='map', child_frame_id=ROLE,
    camera_ids=tuple(carla.DEFAULT_CAMERA_IDS[s] for s in SLOTS),
    camera_topic=f'/carla/{ROLE}/{{id}}/image', camera_frame_id=f'{ROLE}/{{id}}',
    odom_topic=carla.odometry_topic(ROLE), yaw_rate=0.25)


@pytest.fixture(scope='module')
def carla_bag(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp('carla')
    yield write_drive(folder / 'bag', DRIVE)
    shutil.rmtree(folder)    # ~0.75 GB of raw 1280x720 bgra8 frames


def launch_params(tmp: Path) -> list[Path]:
    """The CARLA launch's parameter files, its last overrides made CPU/tiny for this machine."""
    values = carla.node_overrides(ROLE, '', str(list(OFFSET)), 'cpu', 'tiny')
    values |= {'images.height': 64, 'images.width': 96}
    tree: dict = {}
    for key, value in values.items():
        *parents, leaf = key.split('.')
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    overrides = tmp / 'launch_overrides.yaml'
    overrides.write_text(yaml.safe_dump({'/**': {'ros__parameters': tree}}))
    return [default_params_file(), CARLA_PARAMS, overrides]


def carla_session(bag: Path, tmp: Path, command: tuple[str, ...] | None = None) -> SessionResult:
    res = run_session(bag, param_files=launch_params(tmp), remaps=carla.bridge_remaps(ROLE),
                      sim_time=True, rate=0.5, command=command, tail_s=1.0)
    assert res.node_alive_at_end, res.node_output[-3000:]
    return res


def paired_paths(res: SessionResult) -> list[tuple[object, object]]:
    ego = {p.stamp_ns: p for p in res.paths if p.topic.endswith('/output/path')}
    world = {p.stamp_ns: p for p in res.paths if p.topic == carla.waypoints_topic(ROLE)}
    assert ego and world, (sorted({p.topic for p in res.paths}), res.node_output[-3000:])
    assert set(world) <= set(ego)
    return [(ego[t], world[t]) for t in sorted(world)]


def test_real_engine_paths_in_ego_and_map_frames_agree_with_odometry(
        carla_bag: Path, tmp_path: Path) -> None:
    res = carla_session(carla_bag, tmp_path)
    pairs = paired_paths(res)
    assert len(pairs) >= 3, res.node_output[-3000:]
    for ego, world in pairs:
        assert ego.frame_id == carla.ego_frame(ROLE) and world.frame_id == 'map'
        assert (ego.stamp_ns - DRIVE.start_ns) % (NS // 20) == 0    # t0 is a camera stamp
        x0, r0 = rear_axle_truth(DRIVE, (ego.stamp_ns - DRIVE.start_ns) / NS, OFFSET)
        np.testing.assert_allclose(world.xyz, ego.xyz @ r0.T + x0, atol=0.01)
        np.testing.assert_allclose(quat_to_matrix(world.quat_xyzw),
                                   r0 @ quat_to_matrix(ego.quat_xyzw), atol=1e-3)
    model = res.status('model')[-1].values
    assert model['vram_budget'] == 'none' and model['model_state'] == 'ready'


def test_planted_true_future_lands_on_the_driven_path_in_map(
        carla_bag: Path, tmp_path: Path) -> None:
    double = Path(__file__).with_name('planted_engine.py')
    drive_file = save_drive(DRIVE, tmp_path / 'drive.json')
    res = carla_session(carla_bag, tmp_path, (sys.executable, str(double), str(drive_file)))
    pairs = paired_paths(res)
    assert len(pairs) >= 3, res.node_output[-3000:]
    for _, world in pairs:
        t0 = (world.stamp_ns - DRIVE.start_ns) / NS
        driven = [rear_axle_truth(DRIVE, t0 + 0.1 * (k + 1), OFFSET) for k in range(64)]
        np.testing.assert_allclose(world.xyz, np.array([x for x, _ in driven]), atol=0.01)
        np.testing.assert_allclose(quat_to_matrix(world.quat_xyzw),
                                   np.array([r for _, r in driven]), atol=1e-3)
