"""`python -m bench.diag strict-mode` on the CPU: both modes' phases and the vision's ops."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.diag.__main__ import main

pytestmark = pytest.mark.slow


def test_strict_mode_reports_both_modes_and_fills_only_in_strict(tmp_path: Path) -> None:
    assert main(['strict-mode', '--out', str(tmp_path), '--model', 'tiny', '--device', 'cpu',
                 '--runs', '1', '--top', '5']) == 0
    report = json.loads((tmp_path / 'strict_mode.json').read_text())
    assert not torch.are_deterministic_algorithms_enabled()
    for mode in ('default', 'strict'):
        assert set(report[mode]['phases_ms']) == {'vision', 'prefill', 'decode', 'diffusion'}
        assert all(ms > 0 for ms in report[mode]['phases_ms'].values())
        assert 0 < len(report[mode]['vision']['ops']) <= 5
    # strict mode fills every fresh tensor with NaN: the vision tower runs many more fills
    assert report['strict']['vision']['fills'] > report['default']['vision']['fills'] + 100
