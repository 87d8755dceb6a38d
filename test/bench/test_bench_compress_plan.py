"""`bench_compress --plan-from synthetic` on the tiny model: the GPU command's dry run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_compress

pytestmark = pytest.mark.slow


def test_plan_from_a_synthetic_profile_measures_raw_and_compressed_plans(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_compress.main(['--out', str(tmp_path), '--model', 'tiny', '--device', 'cpu',
                                '--plan-from', 'synthetic', '--budgets', '0.6', '--reps', '1',
                                '--warmup', '0']) == 0
    rows = json.loads((tmp_path / 'rows.json').read_text())
    measured = {r['plan']: r for r in rows if r.get('budget_gib') == 0.6 and 'total_s' in r}
    assert set(measured) >= {'raw', 'compressed'}
    assert measured['compressed']['compression'] and not measured['raw']['compression']
    for r in measured.values():
        assert r['exact'] and r['predicted_s'] > 0 and set(r['predicted_phases_s']) == {
            'vision', 'prefill', 'decode', 'diffusion'}
    assert 'pred s' in capsys.readouterr().out
