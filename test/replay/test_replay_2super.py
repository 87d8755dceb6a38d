"""Alpamayo 2 Super through `replay` over a real bag: six cameras, scored like the others."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from alpamayo_offload.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
NODE_YAML = ROOT / 'config' / 'alpamayo_offload.yaml'
SUPER_YAML = ROOT / 'config' / 'alpamayo_offload_2super.yaml'
SLOTS = (0, 1, 2, 3, 5, 6)


@pytest.fixture(autouse=True)
def _restore_determinism_flag():
    """Replay turns on torch's process-wide deterministic mode; don't leak it to other tests."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.slow
def test_six_camera_bag_is_replayed_and_scored(bag_factory, tmp_path: Path) -> None:
    bag, drive = bag_factory(camera_slots=SLOTS, duration_s=4.0)
    fast = tmp_path / 'fast.yaml'
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 4\n'
                    '    images:\n      height: 64\n      width: 96\n')
    remaps = [f'--remap=~/input/camera_{s}/image:={drive.topic_for(s)}' for s in SLOTS]
    out = tmp_path / 'out'
    code = cli_main(['replay', str(bag), '--params', str(NODE_YAML), '--params', str(SUPER_YAML),
                     '--params', str(fast), *remaps,
                     f'--remap=~/input/odometry:={drive.odom_topic}', '--rate', '1',
                     '--out', str(out), '--no-progress'])
    assert code == 0
    doc = json.loads((out / 'metrics.json').read_text())
    assert doc['complete'] and doc['counts']['scored'] >= 1
    assert math.isfinite(doc['accuracy']['min_ade/by_t=1.0']['mean'])   # a 4 s bag: 1 s horizon
    assert doc['model']['model'] == 'tiny-2super'
    assert doc['config']['engine']['num_cameras'] == 6
    assert tuple(doc['config']['assembly']['camera_slots']) == SLOTS
