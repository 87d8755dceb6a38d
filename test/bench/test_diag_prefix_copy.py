"""`python -m bench.diag prefix-copy` on the CPU: the three joins agree bit for bit."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.diag.__main__ import main


def test_prefix_copy_times_three_exact_joins(tmp_path: Path) -> None:
    assert main(['prefix-copy', '--out', str(tmp_path), '--device', 'cpu', '--runs', '1',
                 '--rows', '3', '--kv-heads', '2', '--prefix', '9', '--suffix', '4',
                 '--head-dim', '8']) == 0
    report = json.loads((tmp_path / 'prefix_copy.json').read_text())
    assert [j['exact'] for j in report['joins']] == [True, True, True]
    assert all(j['ms'] > 0 for j in report['joins'])


def test_prefix_copy_refuses_sizes_below_one(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(['prefix-copy', '--out', str(tmp_path), '--device', 'cpu', '--suffix', '0'])
    assert '--suffix: 0: give at least 1' in capsys.readouterr().err
