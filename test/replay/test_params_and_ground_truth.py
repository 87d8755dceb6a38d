"""The node YAML drives replay the same way; ground truth matches the analytic synthetic drive."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from replay_doubles import replay_config

from alpamayo_offload.app.synthetic_drive import ego_pose
from alpamayo_offload.assembly import Pose
from alpamayo_offload.assembly.poses import quat_to_matrix
from alpamayo_offload.model.inputs import to_t0_frame
from alpamayo_offload.replay.errors import ReplayConfigError
from alpamayo_offload.replay.ground_truth import ground_truth, to_ego_frame
from alpamayo_offload.replay.loop import prepare_bag
from alpamayo_offload.replay.params import load_replay_config, parse_remaps

NODE_YAML = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'


def test_node_yaml_with_remaps(tmp_path: Path) -> None:
    cfg = load_replay_config([NODE_YAML], remaps=parse_remaps(
        ['~/input/odometry:=/localization/odometry',
         '/alpamayo_offload_node/input/camera_6/image:=/cam/tele/compressed']))
    assert cfg.odometry_topic == '/localization/odometry'
    assert cfg.cameras[0].topic == '/alpamayo_offload_node/input/camera_0/image'   # as the node
    assert cfg.cameras[3].topic == '/cam/tele/compressed'
    assert cfg.rate_hz == pytest.approx(2.0)           # 1 / inference.period_s
    assert cfg.engine.model == 'tiny' and cfg.assembly.frame_tolerance_s == 0.05
    other = load_replay_config([NODE_YAML], node_name='other')
    assert other.cameras[0].topic == '/other/input/camera_0/image'


def test_plan_file_is_merged_last(tmp_path: Path) -> None:
    plan = tmp_path / 'plan.yaml'
    plan.write_text('/**:\n  ros__parameters:\n    resident_layers:\n      vit: [-1]\n'
                    '      lm: [0, 3]\n      expert: [-1]\n    embed_on_host: false\n'
                    "    vram_budget: 12GiB\n    plan:\n      predicted_latency_s: 1.5\n"
                    "      profile: p.json#sha256=ab\n")
    cfg = load_replay_config([NODE_YAML, plan], rate_hz=0.5, overrides={'device': 'cuda'})
    assert cfg.engine.resident == {'lm': (0, 3)}
    assert cfg.vram_budget == '12GiB' and cfg.engine.device == 'cuda'
    assert cfg.engine.budget_bytes is None        # resolved once, by the engine loader
    assert cfg.plan_info['plan.predicted_latency_s'] == 1.5 and cfg.rate_hz == 0.5


def test_bad_parameter_files(tmp_path: Path) -> None:
    bad = tmp_path / 'bad.yaml'
    bad.write_text('/**:\n  ros__parameters:\n    sync:\n      frame_tolerance: 0.1\n')
    with pytest.raises(ReplayConfigError, match=r"unknown parameter 'sync.frame_tolerance' "
                                                r"\(did you mean 'sync.frame_tolerance_s'\?\)"):
        load_replay_config([NODE_YAML, bad])
    bad.write_text('/**:\n  ros__parameters:\n    cameras:\n      slots: [0, 1]\n')
    with pytest.raises(ReplayConfigError, match=r'cameras.slots \(2\), cameras.topics \(4\)'):
        load_replay_config([NODE_YAML, bad])
    bad.write_text('other_node:\n  ros__parameters:\n    model: x\n')
    with pytest.raises(ReplayConfigError, match=r'has no `/\*\*: ros__parameters`'):
        load_replay_config([bad])
    with pytest.raises(ReplayConfigError, match=r'must look like FROM:=TO'):
        parse_remaps(['/a=/b'])


def test_ground_truth_matches_the_analytic_drive(bag_factory) -> None:
    path, drive = bag_factory()
    cfg = replay_config(drive)
    bag = prepare_bag(path, cfg)
    t0 = bag.ticks[0]
    t0_s = (t0 - drive.start_ns) / 1e9
    p0, q0 = ego_pose(drive, t0_s)
    from alpamayo_offload.assembly import Pose
    origin = Pose(p0, quat_to_matrix(q0))
    gt = ground_truth(bag.odometry, t0, origin, cfg.assembly)
    expect = []
    for k in range(1, 65):
        p, q = ego_pose(drive, t0_s + 0.1 * k)
        expect.append(origin.rot.T @ (p - p0))
    np.testing.assert_allclose(gt.xyz, np.array(expect), atol=2e-4)   # 50 Hz chord error
    yaw_expect = drive.yaw_rate * 0.1 * np.arange(1, 65)
    np.testing.assert_allclose(gt.yaw, yaw_expect, atol=1e-6)
    assert math.isclose(gt.xyz[-1, 0], 8.0 * math.sin(0.96) / 0.15, rel_tol=1e-4)


def test_ego_frame_transform_agrees_with_the_models() -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(-3, 3, 17)
    rot = np.zeros((17, 3, 3))
    rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1] = np.cos(a), -np.sin(a), np.sin(a), \
        np.cos(a)
    rot[:, 2, 2] = 1.0
    xyz = rng.uniform(-500, 500, (17, 3))
    mine_xyz, mine_rot = to_ego_frame(xyz, rot, Pose(xyz[-1], rot[-1]))
    model_xyz, model_rot = to_t0_frame(xyz, rot)
    np.testing.assert_allclose(mine_xyz, model_xyz.double().numpy(), atol=1e-4)
    np.testing.assert_allclose(mine_rot, model_rot.double().numpy(), atol=1e-6)
