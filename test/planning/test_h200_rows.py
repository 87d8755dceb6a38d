"""The predictor against what the H200 measured on 2026-11-29 (docs/results/2026-11-29-h200).

What these data can check, and only that: the profile, the planner rows (end-to-end only, one
timed run each) and the peers rows (per phase, median of three runs, the same machine but its
own profile). Nothing here is fitted to the rows.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import Profile, load_profile

RESULTS = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-29-h200'
WORK = Workload(21, 10)


@pytest.fixture(scope='module')
def profile() -> Profile:
    log = logging.getLogger('alpamayo_offload.planning.profile')
    level = log.level
    log.setLevel(logging.ERROR)          # schema 1: the expected "no host issue times" warning
    try:
        return load_profile(RESULTS / 'profile_full_h200.json')[0]
    finally:
        log.setLevel(level)


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RESULTS / name).read_text().splitlines() if line]


def _peer(cap: float) -> dict[str, Any]:
    return next(r for r in _rows('bench_peers_rows.jsonl')
                if r['runtime'] == 'ours-planned' and r.get('cap_gib') == cap)


def _placement(detail: dict[str, Any]) -> Placement:
    return Placement.of(detail['resident'], detail['embed_on_host'])


def test_one_stalled_call_is_not_charged_to_every_pass(profile: Profile) -> None:
    diffusion = profile.phases[3]
    assert diffusion.exe_ms[3][17] == pytest.approx(310.8, abs=0.1)   # one host stall
    assert diffusion.typical_exe_ms()[17] == pytest.approx(0.47, abs=0.02)


def test_fix_removes_the_over_estimate_of_the_planner_rows(profile: Profile) -> None:
    """Old: +7.2..+14.2 %, now -1.4..+5.2 % (the rest is host noise, see the last test). The
    stalled call was worth 0.26-0.29 s of every row, the profiled LM copy rate (53.7 GB/s
    against the 55.3 GB/s pinned peak) another 0.03-0.12 s."""
    for row in _rows('bench_planner_rows.jsonl'):
        new = predict(profile, _placement(row), WORK).total_s
        assert 0.30 <= row['predicted_s'] - new <= 0.42, row['kind']
        error = (new - row['measured_s']) / row['measured_s']
        assert abs(error) < abs(row['error']) and abs(error) <= 0.055, (row['kind'], error)


def test_decode_and_diffusion_phases_within_one_percent_where_copy_bound(
        profile: Profile) -> None:
    """Per-phase rows of the peers run: decode at 12 GiB (13 LM layers streamed per pass) and
    diffusion at 16 GiB (34 expert layers streamed per step) are copy-bound: the replay at the
    pinned peak gives them within 1 %."""
    for cap, phase in ((12.0, 'decode'), (16.0, 'diffusion')):
        row = _peer(cap)
        got = predict(profile, _placement(row['detail']), WORK).phase(phase).wall_ms
        want = 1000 * row['phases_s'][phase]
        assert abs(got - want) / want <= 0.01, (cap, phase, got, want)


def test_host_bound_decode_needs_the_host_floor(profile: Profile) -> None:
    """16 GiB, 34 of 36 LM layers resident: the GPU needs ~14 ms per decode pass, the host ~42
    (preload decode, host-bound: 874 ms for 21 passes). A schema-1 profile cannot see it; with
    the host issue time of a pass spread over its layer calls (the preload figure, not fitted to
    this row), the replay lands within 5 % of the measured 910 ms. The next profile measures
    the per-layer split (bench_planner.host_issue_calls)."""
    row = _peer(16.0)
    placement = _placement(row['detail'])
    measured = 1000 * row['phases_s']['decode']
    blind = predict(profile, placement, WORK).phase('decode').wall_ms
    assert blind < 0.35 * measured
    preload = next(r for r in _rows('bench_peers_rows.jsonl') if r['runtime'] == 'preload')
    per_pass = 1000 * preload['phases_s']['decode'] / WORK.decode_passes
    decode = profile.phases[2]
    n = len(decode.exe_ms[0])
    floored = dataclasses.replace(profile, phases=tuple(
        dataclasses.replace(p, host_layer_ms=(per_pass / n,) * n) if p is decode else p
        for p in profile.phases))
    got = predict(floored, placement, WORK).phase('decode').wall_ms
    assert abs(got - measured) / measured <= 0.05, (got, measured)


def test_planner_rows_residual_is_the_unrecorded_host_time(profile: Profile) -> None:
    """The planner rows hold the end-to-end time of one run, host preprocessing included, which
    varied 0.47-0.85 s on this machine today (peers rows, profile, bench_model); their 1 % target
    cannot be checked from them. What they allow: measured minus the predicted device part lies
    inside that host range for every row."""
    for row in _rows('bench_planner_rows.jsonl'):
        pred = predict(profile, _placement(row), WORK)
        residual = row['measured_s'] - (pred.total_ms - pred.host_ms) / 1000
        assert 0.47 <= residual <= 0.85, (row['kind'], row['budget'], residual)
