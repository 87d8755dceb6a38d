"""`python -m bench.diag expert-rows` on the CPU: a short table and a small JSON, no trace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.diag.__main__ import main


def test_expert_rows_times_both_row_counts_and_profiles_a_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['expert-rows', '--out', str(tmp_path), '--device', 'cpu', '--layers', '1',
                 '--prompt', '12', '--decoded', '2', '--steps', '1', '--runs', '1', '--rows', '3',
                 '--top', '4', '--chunk-caps', '1,4096']) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ['expert_rows.json']
    report = json.loads((tmp_path / 'expert_rows.json').read_text())
    assert sorted(report['timings']) == ['1', '3'] and report['graphs'] is False
    assert all(t['median_ms'] > 0 for t in report['timings'].values())
    profile = report['step_profile']
    assert profile['time'] == 'host' and len(profile['top']) == 4 and profile['aten_calls'] > 0
    printed = capsys.readouterr().out
    assert '3 rows:' in printed and 'top ops by host time' in printed
    assert report['same_bits_as_transformers'] is True
    variants = report['variants']                        # every cap: the same bits
    assert sorted(variants) == ['chunk cap 1 MiB', 'chunk cap 4096 MiB']
    assert all(v['same_bits'] and v['median_ms'] > 0 for v in variants.values())
    assert report['step_wall_ms'] and profile['device_ms_total'] is None   # no CUDA
    assert 'chunk cap 1 MiB:' in printed


def test_expert_rows_refuses_rows_below_one(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(['expert-rows', '--out', str(tmp_path), '--device', 'cpu', '--rows', '0'])
    assert '--rows: 0: give at least 1' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(['expert-rows', '--out', str(tmp_path), '--device', 'cpu', '--chunk-caps', 'a'])
    assert "not a list of MiB: 'a'" in capsys.readouterr().err
