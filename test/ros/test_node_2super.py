"""Alpamayo 2 Super in the node: six cameras + odometry through real rclpy give a Path.

The node runs from its real entry point with the package's parameter file and the 2 Super file
(`config/alpamayo_offload_2super.yaml`: six cameras in release slots 0, 1, 2, 3, 5, 6), the
model a tiny 2 Super checkpoint written for the test (its `config.json` picks the family).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from alpamayo_offload.app.param_file import default_params_file
from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.model import build_random, save_checkpoint, tiny_2super_config
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.session import run_session

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SUPER_YAML = ROOT / 'config' / 'alpamayo_offload_2super.yaml'
SLOTS = (0, 1, 2, 3, 5, 6)


def test_six_cameras_give_paths_with_a_2super_checkpoint(tmp_path: Path) -> None:
    checkpoint = tmp_path / 'tiny-2super'
    save_checkpoint(build_random(tiny_2super_config(), seed=3, dtype=torch.float32), checkpoint)
    drive = DriveConfig(duration_s=3.0, camera_slots=SLOTS)
    bag = write_drive(tmp_path / 'bag', drive)
    res = run_session(bag, param_files=[default_params_file(), SUPER_YAML],
                      remaps=remaps_for(drive),
                      overrides={'model': str(checkpoint), 'inference.period_s': '0.2',
                                 'images.height': '64', 'images.width': '96',
                                 'decode.max_tokens': '4', 'diagnostics.period_s': '0.25'})
    assert res.node_alive_at_end, res.node_output[-3000:]
    ego = [p for p in res.paths if p.topic.endswith('/path')]
    assert ego, res.node_output[-3000:]
    assert all(p.xyz.shape == (64, 3) and np.isfinite(p.xyz).all() for p in ego)
    model = res.status('model')[-1].values
    assert model['model_family'] == '2super' and model['model_state'] == 'ready'
    assert model['camera_slots'] == ','.join(str(s) for s in SLOTS)
    rates = res.status('input rates')[-1].values
    assert {f'camera_{s}.received' for s in SLOTS} <= set(rates)
    assert all(int(rates[f'camera_{s}.received']) > 0 for s in SLOTS)
