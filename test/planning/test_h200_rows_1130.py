"""What the H200 runs of 2026-11-30 decided (docs/results/2026-11-30-h200, benchmarks.md §3).

Two profiles of one planner run: `profile.json` with host issue times taken the unsynced way
(host running ahead, synchronised every 8th call) and `profile_synced_calls.json` the synced way
(device idle before each call); then the paper's sweep with its own profile. Nothing is fitted.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import Profile, load_profile

RESULTS = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200'
WORK = Workload(21, 10)


def _rows(part: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RESULTS / part / 'rows.jsonl').read_text().splitlines()
            if line]


def _device_error(profile: Profile, row: dict[str, Any]) -> float:
    pred = predict(profile, Placement.of(row['resident'], row['embed_on_host']), WORK)
    return (pred.total_ms - pred.host_ms - row['measured_device_ms']) / row['measured_device_ms']


def _decode_host_per_pass(profile: Profile) -> float:
    decode = next(p for p in profile.phases if p.name == 'decode')
    return sum(decode.host_layer_ms) + decode.host_lead_ms


def test_unsynced_host_terms_overstate_a_decode_pass() -> None:
    """31 of 36 LM layers resident ran decode passes in 36.3 ms: the host needs at most that.
    Unsynced terms said 60.1 ms, synced 44.6 ms."""
    unsynced = load_profile(RESULTS / 'planner' / 'profile.json')[0]
    synced = load_profile(RESULTS / 'planner' / 'profile_synced_calls.json')[0]
    row = next(r for r in _rows('planner') if r['kind'] == 'interleaved'
               and r['budget_bytes'] == 16 * 2**30)
    measured = row['measured_ms']['decode'] / WORK.decode_passes
    assert 36.0 < measured < 36.5
    assert _decode_host_per_pass(unsynced) >= 1.6 * measured
    assert _decode_host_per_pass(synced) <= 1.25 * measured


def test_synced_host_terms_cut_the_worst_device_error_threefold() -> None:
    unsynced = load_profile(RESULTS / 'planner' / 'profile.json')[0]
    synced = load_profile(RESULTS / 'planner' / 'profile_synced_calls.json')[0]
    rows = _rows('planner')
    worst_unsynced = max(abs(_device_error(unsynced, r)) for r in rows)
    worst_synced = max(abs(_device_error(synced, r)) for r in rows)
    assert worst_unsynced > 0.29 and worst_synced < worst_unsynced / 3


def test_two_engine_replay_holds_the_sweep_within_one_percent() -> None:
    """Without host terms the copy/compute replay gives every sweep row's device time within
    1 %: where the host is not the bottleneck, the model of the two engines is right."""
    profile = load_profile(RESULTS / 'sweep' / 'profile.json')[0]
    errors = [_device_error(profile.without_host_terms(), r) for r in _rows('sweep')]
    assert len(errors) == 7 and max(abs(e) for e in errors) <= 0.01, errors
