"""What H200 run 10 of 2026-11-30 decided (docs/results/2026-11-30-h200/run10, benchmarks.md §3).

On one VM with the code of 02c9b23: the CUDA tests, `prefill_start_before_fix`, then
`planner_a_before_fix` (16-12 GiB, k >= 25) and `planner_b_before_fix` (10-8 GiB, k <= 14). On a
fresh VM with the vision/prefill hint fixed (fa7479e): `prefill_start`, `planner_a`, `planner_b`.
The committed files are the measurement; these tests tie the code and the documented
conclusions to them.
"""
from __future__ import annotations

import json
import re
from itertools import pairwise
from typing import Any

import pytest
from h200_results import Run, assert_reproduces_plans_and_predictions

RUN = Run('run10')
BEFORE = ('planner_a_before_fix', 'planner_b_before_fix')
AFTER = ('planner_a', 'planner_b')
GIB = 2**30


def _phase(row: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in row['breakdown']['phases'] if p['name'] == name)


def _prefill_over_ms(row: dict[str, Any]) -> float:
    return row['measured_ms']['prefill'] - _phase(row, 'prefill')['wall_ms']


def _host_over_ms(row: dict[str, Any]) -> float:
    m = row['measured_ms']
    return m['preprocess'] + m['postprocess'] - row['breakdown']['host_ms']


@pytest.mark.parametrize('part', BEFORE + AFTER)
def test_the_committed_profiles_reproduce_every_plan_and_prediction(part: str) -> None:
    assert_reproduces_plans_and_predictions(RUN.path / part)


def test_the_first_streamed_prefill_layer_waited_its_whole_copy_before_the_fix() -> None:
    """14 interleaved LM layers: lm[1] waited 6.93 of its 7.01 ms copy; after, 0.01 ms."""
    before = json.loads((RUN.path / 'prefill_start_before_fix' / 'prefill_start.json').read_text())
    for run in before['runs']:
        first = next(c for c in run['calls'] if c['sequence'] == 'lm')
        assert first['stall_ms'] > 0.95 * first['dma_ms'] > 6.0
    after = (RUN.path / 'prefill_start' / 'prefill_start.log').read_text()
    stalls = [float(s) for s in re.findall(r'lm\[1\] dma [\d.]+ stall ([\d.]+)', after)]
    assert len(stalls) == 2 and max(stalls) < 0.05


def test_every_streamed_prefill_read_slow_before_the_fix_and_on_prediction_after() -> None:
    """Before: +1.3 to +10.6 ms on all 17 rows; after: -3.8 to +2.9 ms."""
    before = [_prefill_over_ms(r) for part in BEFORE for r in RUN.rows(part)]
    after = [_prefill_over_ms(r) for part in AFTER for r in RUN.rows(part)]
    assert len(before) == len(after) == 17
    assert min(before) > 1.2 and sum(o > 5.0 for o in before) == 12
    assert max(abs(o) for o in after) < 4.0


def test_after_the_fix_the_device_part_is_within_half_a_percent_on_every_row() -> None:
    rows = [r for part in AFTER for r in RUN.rows(part)]
    assert max(abs(r['device_error']) for r in rows) < 0.005
    before = [r for part in BEFORE for r in RUN.rows(part)]
    assert 0.009 < max(abs(r['device_error']) for r in before) < 0.01


def test_b_is_within_one_percent_end_to_end_on_every_row_before_and_after() -> None:
    for part, worst in (('planner_b_before_fix', 0.0068), ('planner_b', 0.0064)):
        rows = RUN.rows(part)
        assert len(rows) == 8 and max(abs(r['error']) for r in rows) < worst


def test_a_misses_after_the_fix_are_host_time() -> None:
    """5 of 9 within 1 %; the planned 14 and 12 GiB misses are the pre/postprocessing (+19 and
    +25 ms over the profile's 56.6), the 31-layer ones also a decode flagged as host-bound."""
    rows = RUN.rows('planner_a')
    missed = [r for r in rows if abs(r['error']) > 0.01]
    assert len(missed) == 4
    for r in missed:
        assert abs(r['device_error']) < 0.005 and r['error'] < 0
        if _phase(r, 'decode')['cpu_sensitive']:
            assert len(r['resident']['lm']) == 31
        else:
            assert _host_over_ms(r) > 18.0
    assert max(_host_over_ms(r) for r in rows) > 26.0


def test_planner_beats_the_papers_plan_at_every_budget() -> None:
    """After the fix by 9.7 % (8 GiB) to 20.5 % (14 GiB); before by 9.5 to 22.1 %."""
    for part in BEFORE + AFTER:
        rows = [r for r in RUN.rows(part) if r['budget_bytes']]
        for budget in {r['budget_bytes'] for r in rows}:
            got = {r['kind']: r['measured_s'] for r in rows if r['budget_bytes'] == budget}
            assert got['planned'] < 0.906 * got['interleaved'], (part, budget / GIB)
            assert all(r['peak_bytes'] <= budget for r in rows if r['budget_bytes'] == budget)


def test_a_visit_with_the_pinned_store_takes_seconds() -> None:
    """Re-plan, one warm-up and one timed run: 4.1-13.3 s (run 9, without the store: 18-25)."""
    for part in BEFORE + AFTER:
        visits = sorted(v for r in RUN.rows(part) for v in r['visits_at_s'])
        assert max(b - a for a, b in pairwise(visits)) < 14.0
