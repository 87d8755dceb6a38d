"""What H200 run 9 of 2026-11-30 decided (docs/results/2026-11-30-h200/run9, benchmarks.md §3).

`planner_a_first`: 16-12 GiB and k >= 25 with the rolled rotary embedding and one vision sync,
profile as in run 8 (64e3a81). Then, on a fresh VM each, with the profile's non-layer times
fitted to a pipelined run and the highest of three link probes (ae3ead8): `planner_a` (the same
rows) and `planner_b` (10-8 GiB, k <= 14). The committed files are the measurement; these tests
tie the code and the documented conclusions to them.
"""
from __future__ import annotations

import statistics
from typing import Any

import pytest
from h200_results import Run, assert_reproduces_plans_and_predictions

from alpamayo_offload.planning.profile import Profile

RUN = Run('run9')
PARTS = ('planner_a_first', 'planner_a', 'planner_b')
GIB = 2**30


def _decode_host_ms(profile: Profile) -> float:
    """Median host issue time of one LM decode layer call."""
    return statistics.median(next(p for p in profile.phases if p.name == 'decode').host_layer_ms)


def _row(part: str, kind: str) -> dict[str, Any]:
    return next(r for r in RUN.rows(part) if r['kind'] + ' ' + r['budget'] == kind)


@pytest.mark.parametrize('part', PARTS)
def test_the_committed_profiles_reproduce_every_plan_and_prediction(part: str) -> None:
    assert_reproduces_plans_and_predictions(RUN.path / part)


def test_sequential_non_layer_time_over_predicted_vision_and_a_dipped_probe_every_copy() -> None:
    """Before the fit: every row predicted slow (+0.28 to +1.92 %); vision predicted 76.4 ms
    against 61.5-80.7 measured, and at the rows' own link rate the device error shrank."""
    rows = RUN.rows('planner_a_first')
    assert all(r['error'] > 0 for r in rows)
    over = [RUN.predict('planner_a_first', r).phase('vision').wall_ms - r['measured_ms']['vision']
            for r in rows]
    assert sum(o > 7.0 for o in over) == 8 and statistics.median(over) > 10.0
    profile = RUN.profile('planner_a_first')
    assert profile.machine.pinned_h2d_gbps < min(statistics.median(r['link_gbps']) for r in rows)


def test_the_fit_lowers_the_non_layer_time_and_the_kept_probe_skips_the_dip() -> None:
    """Vision 37.3 -> 24.4 ms (A) and 18.3 -> 14.1 ms (B); prefill to ~0; B's probes were
    54.74, 51.32 (a dip) and 53.80 GB/s, and 54.74 was kept."""
    for part in ('planner_a', 'planner_b'):
        profile = RUN.profile(part)
        fitted = profile.settings['fitted_tails']
        assert sorted(fitted) == ['prefill', 'vision']
        assert fitted['vision']['fitted_ms'] < 0.8 * fitted['vision']['sequential_ms']
        assert fitted['prefill']['fitted_ms'] < 0.5
        probes = profile.settings['pinned_h2d_gbps_probes']
        assert len(probes) == 3 and profile.machine.pinned_h2d_gbps == max(probes)
    assert min(RUN.profile('planner_b').settings['pinned_h2d_gbps_probes']) < 51.5


def test_b_is_within_one_percent_on_the_device_part_of_every_row() -> None:
    """Max 0.99 % (8 GiB planned) on the device part; end to end 6 of 8 (k = 5 and 10 missed
    by the host's pre/postprocessing: 97 and 79 ms measured, 57 predicted)."""
    rows = RUN.rows('planner_b')
    assert len(rows) == 8 and max(abs(r['device_error']) for r in rows) < 0.01
    assert sum(abs(r['error']) <= 0.01 for r in rows) == 6
    for kind in ('sweep-k5 -', 'sweep-k10 -'):
        m = _row('planner_b', kind)['measured_ms']
        assert m['preprocess'] + m['postprocess'] > 1.35 * RUN.profile('planner_b').host_ms


def test_one_plan_twice_in_one_command_ran_20_percent_apart_on_a_slow_cpu() -> None:
    """A on its VM: 16 GiB interleaved and k = 31 are one plan, 2.146 and 1.788 s; its decode
    layer call took 1.15 ms of host time, against 0.65 ms on the first A's VM an hour before."""
    same = [_row('planner_a', k) for k in ('interleaved 16.000GiB', 'sweep-k31 -')]
    assert same[0]['resident'] == same[1]['resident']
    assert same[0]['measured_s'] > 1.19 * same[1]['measured_s']
    assert _decode_host_ms(RUN.profile('planner_a')) > 1.1
    assert _decode_host_ms(RUN.profile('planner_a_first')) < 0.7


def test_planner_beats_the_papers_plan_at_every_budget() -> None:
    """By 8.5 % (8 GiB) to 22.6 % (14 GiB); at 16 GiB on A's VM against the same plan measured
    as k = 31 (its interleaved row ran on a slow CPU)."""
    for part in PARTS:
        rows = [r for r in RUN.rows(part) if r['budget_bytes']]
        for budget in sorted({r['budget_bytes'] for r in rows}):
            got = {r['kind']: r['measured_s'] for r in rows if r['budget_bytes'] == budget}
            paper = got['interleaved']
            if part == 'planner_a' and budget == 16 * GIB:
                paper = _row(part, 'sweep-k31 -')['measured_s']
            assert got['planned'] < 0.92 * paper, (part, budget / GIB)
