"""What H200 run 6 of 2026-11-30 decided (docs/results/2026-11-30-h200/run6, benchmarks.md §3, §4).

Planner budgets with every layer's host call timed resident (the calibration run 5 asked for),
`bench_peers.py` at 16 GiB, and `bench/diag/embed_on_host.py` on the same VM. The committed files
are the measurement; these tests keep the code and the documented conclusions tied to them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.planning.planner import PlannerOptions, plan
from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import load_profile

RESULTS = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200'
RUN = RESULTS / 'run6'
GIB = 2**30


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@pytest.fixture(scope='module')
def bench() -> dict[str, Any]:
    return _read(RUN / 'planner' / 'bench_planner.json')


def _spread(runs: list[float]) -> float:
    return (max(runs) - min(runs)) / min(runs)


def test_the_committed_profile_reproduces_every_plan_and_prediction(
        bench: dict[str, Any]) -> None:
    profile = load_profile(RUN / 'planner' / 'profile.json')[0]
    assert profile.settings['host_timed_resident_layers'] == {
        s.name: s.n_layers for s in profile.sequences}          # the H200 held every layer
    work = Workload(profile.measured_passes('decode'), 10)
    for row in bench['rows']:
        placement = Placement.of(row['resident'], row['embed_on_host'])
        assert predict(profile, placement, work).total_s == pytest.approx(row['predicted_s'],
                                                                          rel=1e-12)
        if row['kind'] == 'planned':
            got = plan(profile, row['budget_bytes'], PlannerOptions(workload=work)).placement
            assert got.embed_on_host == row['embed_on_host']
            assert {s: set(got.indices(s)) for s in row['resident']} == {
                s: set(v) for s, v in row['resident'].items()}


def test_copy_bound_rows_are_predicted_within_about_one_percent(bench: dict[str, Any]) -> None:
    """Budgets <= 14 GiB: device error within 1.3 %, end to end 1.1 %, runs spread <= 1.6 %."""
    rows = [r for r in bench['rows'] if r['budget_bytes'] <= 14 * GIB]
    assert len(rows) == 8
    assert max(abs(r['device_error']) for r in rows) < 0.013
    assert max(abs(r['error']) for r in rows) < 0.011
    assert max(_spread(r['runs_s']) for r in rows) < 0.016


def test_resident_timed_host_terms_cut_the_16_gib_error(bench: dict[str, Any]) -> None:
    """Run 5 over-predicted both 16 GiB rows by 11-15 % (device); run 6: -6.1 and +0.7 %."""
    before = _read(RESULTS / 'run5' / 'planner' / 'bench_planner.json')
    at16 = [r for r in bench['rows'] if r['budget_bytes'] == 16 * GIB]
    old16 = [r for r in before['rows'] if r['budget_bytes'] == 16 * GIB]
    assert min(r['device_error'] for r in old16) > 0.11
    assert max(abs(r['device_error']) for r in at16) < 0.065
    planned = next(r for r in at16 if r['kind'] == 'planned')
    assert _spread(planned['runs_s']) > 0.07        # 1.538-1.651 s: the host-bound row moves


def test_the_cpu_sensitive_flag_marks_exactly_the_rows_that_missed(bench: dict[str, Any]) -> None:
    """Decode at 16 GiB: 0.94 of the copy time is host issue work. Those two rows missed 1 %
    (device) or spread most; every unflagged row's device error is within 1.3 %."""
    profile = load_profile(RUN / 'planner' / 'profile.json')[0]
    work = Workload(profile.measured_passes('decode'), 10)
    for row in bench['rows']:
        pred = predict(profile, Placement.of(row['resident'], row['embed_on_host']), work)
        flagged = pred.cpu_sensitive_phases()
        assert flagged == (('decode',) if row['budget_bytes'] == 16 * GIB else ())
        if not flagged:
            assert abs(row['device_error']) < 0.013


def test_planner_is_not_slower_than_the_papers_plan_at_any_budget(bench: dict[str, Any]) -> None:
    rows = bench['rows']
    for budget in {r['budget_bytes'] for r in rows}:
        got = {r['kind']: r['measured_s'] for r in rows if r['budget_bytes'] == budget}
        assert got['planned'] < got['interleaved']


def test_host_bound_passes_of_one_layout_vary_by_a_third_within_one_process() -> None:
    """Every variant of embed_on_host.py keeps the whole expert resident: its diffusion steps
    differ only by host speed (38.2-53.2 ms), more than any embedding placement changed."""
    rows = _read(RUN / 'embed_on_host' / 'embed_on_host.json')['rows']
    diffusion = [r['diffusion'] for r in rows]
    assert max(diffusion) / min(diffusion) > 1.3


def test_peers_at_16_gib_bit_exact_and_far_ahead() -> None:
    rows = {r['runtime']: r for r in map(json.loads, (RUN / 'peers' / 'rows.jsonl')
                                         .read_text().splitlines())}
    assert set(rows) == {'preload', 'ours-planned', 'accelerate-device-map', 'diffusers-leaf',
                         'accelerate-cpu-offload'}
    assert all(r['status'] == 'ok' and r['max_abs_diff'] == 0.0 for r in rows.values())
    ours = rows['ours-planned']['e2e_s']
    assert rows['accelerate-device-map']['e2e_s'] > 10 * ours
    assert rows['accelerate-cpu-offload']['e2e_s'] > 20 * ours
    assert rows['diffusers-leaf']['e2e_s'] > 3 * ours
    assert ours < 2 * rows['preload']['e2e_s']
    assert _spread(rows['ours-planned']['runs_s']) > 0.3     # 2.054-2.772 s on this VM
