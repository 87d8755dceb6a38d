"""bench.repredict_rows prices a compress run's measured plans again from its profile."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpamayo_offload.planning.predictor import Workload
from alpamayo_offload.planning.profile import load_profile
from bench.repredict_rows import main, measured_rows, parse_host_ms, repredict, with_host_ms

RUN = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-12-02-h200' / 'compress'
WORKLOAD = Workload(21, 10)


def _rows() -> list[dict]:
    return measured_rows(json.loads((RUN / 'rows.json').read_text()))


def test_the_profile_reprices_each_row_as_the_run_predicted_it() -> None:
    profile, _ = load_profile(RUN / 'profile.json')
    rows = _rows()
    assert [r['plan'] for r in rows] == ['raw', 'compressed'] * 3
    for row in rows:
        assert repredict(profile, row, WORKLOAD).total_s == pytest.approx(row['predicted_s'],
                                                                          rel=1e-9)


def test_a_decompression_enqueue_prices_compressed_plans_only() -> None:
    profile, _ = load_profile(RUN / 'profile.json')
    timed = with_host_ms(profile, parse_host_ms('lm=0.45, expert=0.45,vit=0.45'))
    for row in _rows():
        before = repredict(profile, row, WORKLOAD)
        after = repredict(timed, row, WORKLOAD)
        if row['compression']:
            assert after.phase('decode').wall_ms > before.phase('decode').wall_ms
        else:
            assert after.total_ms == before.total_ms


def test_bad_what_ifs_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="'lm=x'"):
        parse_host_ms('lm=x')
    with pytest.raises(ValueError, match="'lm=-1'"):
        parse_host_ms('lm=-1')
    profile, _ = load_profile(RUN / 'profile.json')
    with pytest.raises(ValueError, match=r"\['llm'\]"):
        with_host_ms(profile, {'llm': 0.4})
    assert main([str(RUN), '--decompress-host-ms', 'vit']) == 2
    assert 'SEQUENCE=MS' in capsys.readouterr().err


def test_main_prints_one_line_per_measured_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(RUN)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 6 and '+45.0%' in lines[4]
