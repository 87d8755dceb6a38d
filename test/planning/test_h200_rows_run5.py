"""What H200 run 5 of 2026-11-30 decided (docs/results/2026-11-30-h200/run5, benchmarks.md §3).

Planner budgets with the synced host terms, and `bench/diag/host_floor.py` on the same VM.
Nothing is fitted: the host-floor scaling below uses the host-floor command's own profile and
measurement, and is checked on the planner command's rows.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import Profile, load_profile

RUN = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200' / 'run5'
WORK = Workload(21, 10)


@pytest.fixture(scope='module')
def bench() -> dict[str, Any]:
    return json.loads((RUN / 'planner' / 'bench_planner.json').read_text())


@pytest.fixture(scope='module')
def floor() -> dict[str, Any]:
    return json.loads((RUN / 'host_floor' / 'host_floor.json').read_text())


def _device_error(profile: Profile, row: dict[str, Any]) -> float:
    pred = predict(profile, Placement.of(row['resident'], row['embed_on_host']), WORK)
    return (pred.total_ms - pred.host_ms - row['measured_device_ms']) / row['measured_device_ms']


def _resident_scaled(profile: Profile, floor: dict[str, Any]) -> Profile:
    """Host layer times scaled per phase to what the all-resident hooked run measured."""
    own = load_profile(RUN / 'host_floor' / 'profile_synced_calls.json')[0]
    hooked = floor['rows'][0]['host_ms_per_pass_hooked_sync_every_1']
    factor = {p.name: (hooked[p.name] - p.host_lead_ms) / sum(p.host_layer_ms)
              for p in own.phases}
    return dataclasses.replace(profile, phases=tuple(
        dataclasses.replace(p, host_layer_ms=tuple(x * factor[p.name] for x in p.host_layer_ms))
        for p in profile.phases))


def test_planner_is_not_slower_than_the_papers_plan_at_any_budget(bench: dict[str, Any]) -> None:
    rows = bench['rows']
    for budget in {r['budget_bytes'] for r in rows}:
        got = {r['kind']: r['measured_s'] for r in rows if r['budget_bytes'] == budget}
        assert got['planned'] < got['interleaved']


def test_all_resident_decode_is_host_bound_and_the_profile_overstates_it(
        floor: dict[str, Any]) -> None:
    """46.6 ms: both the pass's time and the hooks' host time; the streamed profile: 62.4 ms."""
    row = floor['rows'][0]
    pass_ms = row['measured_ms_per_pass']['decode']
    assert row['host_ms_per_pass_hooked_sync_every_1']['decode'] == pytest.approx(pass_ms,
                                                                                 rel=0.01)
    assert floor['host_ms_per_pass_profiled']['synced']['decode'] > 1.3 * pass_ms


def test_resident_host_times_fix_the_near_resident_rows(bench: dict[str, Any],
                                                        floor: dict[str, Any]) -> None:
    synced = load_profile(RUN / 'planner' / 'profile.json')[0]
    scaled = _resident_scaled(synced, floor)
    before = [_device_error(synced, r) for r in bench['rows']]
    after = [_device_error(scaled, r) for r in bench['rows']]
    assert max(map(abs, before)) > 0.15 and max(map(abs, after)) < 0.05
    for b, a, row in zip(before, after, bench['rows'], strict=True):
        if row['budget_bytes'] < 16 * 2**30:          # copy-bound: the host does not bind
            assert abs(a - b) < 0.003


def test_within_one_command_resident_calls_cost_less_than_profiled(bench: dict[str, Any]) -> None:
    """Interleaved 16 GiB: 44.5 ms decode passes bound its 31 resident calls to <= 1.10 ms
    each (streamed calls and lead as profiled); the profile, layers streamed, said 1.41 ms."""
    profile = load_profile(RUN / 'planner' / 'profile.json')[0]
    decode = next(p for p in profile.phases if p.name == 'decode')
    row = next(r for r in bench['rows'] if r['kind'] == 'interleaved'
               and r['budget_bytes'] == 16 * 2**30)
    resident = set(row['resident']['lm'])
    streamed = [decode.host_layer_ms[i] + decode.host_stream_ms for i in range(36)
                if i not in resident]
    per_pass = row['measured_ms']['decode'] / WORK.decode_passes
    bound = (per_pass - sum(streamed) - decode.host_lead_ms) / len(resident)
    profiled = sum(decode.host_layer_ms[i] for i in resident) / len(resident)
    assert bound < 0.8 * profiled
