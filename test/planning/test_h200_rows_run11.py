"""What H200 run 11 of 2026-11-30 decided (docs/results/2026-11-30-h200/run11, benchmarks.md §3).

Five device calls on four VMs (the folder's README names the commands and commits): bench A
(16-12 GiB, k >= 25) and B (10-8 GiB, k <= 14) with the pixels made on the GPU, bench A again,
`cpu_drift` twice (per run, the near-resident plans against the CPU's speed; the second time the
16 GiB plans chosen with CPU headroom 1, 1.33 and 1.5), then the CUDA tests. The committed files
are the measurement; these tests tie the code and the documented conclusions to them.
"""
from __future__ import annotations

import json
import statistics
from typing import Any

import pytest
from h200_results import Run, assert_reproduces_plans_and_predictions

from alpamayo_offload.planning.planner import PlannerOptions, plan
from alpamayo_offload.planning.predictor import Placement, Workload, predict

RUN = Run('run11')
BENCH = ('planner_a', 'planner_b', 'planner_a_rerun')
GIB = 2**30


def _drift(name: str) -> dict[str, dict[str, Any]]:
    doc = json.loads((RUN.path / name / 'cpu_drift.json').read_text())
    return {r['plan'] + (' pinned' if r.get('pinned_core') is not None else ''): r
            for r in doc['rows']}


def _totals_s(row: dict[str, Any]) -> list[float]:
    return sorted(r['total_ms'] / 1000 for r in row['runs'])


@pytest.mark.parametrize('part', BENCH)
def test_the_committed_profiles_reproduce_every_plan_and_prediction(part: str) -> None:
    assert_reproduces_plans_and_predictions(RUN.path / part)


def test_pixels_on_the_gpu_cut_the_host_part_from_72_to_8_ms() -> None:
    got = json.loads((RUN.path / 'pixels_host' / 'pixels_host.json').read_text())
    ms = got['median_host_ms']
    assert got['device'] == 'NVIDIA H200'
    assert ms['old: numpy pixels, then .to(cuda, bf16)'] > 70.0
    assert ms['new: uint8 patches pinned, lookup on the GPU'] < 8.5


def test_the_host_pre_and_postprocessing_term_fell_from_57_to_10_ms() -> None:
    """Run 10's profiles held 56.6 ms (A) of host pre/post; with GPU pixels 10-18 ms, and every
    row measured within 7 ms of its profile's term."""
    for part in BENCH:
        host = RUN.profile(part).host_ms
        assert 9.0 < host < 18.0
        for r in RUN.rows(part):
            m = r['measured_ms']
            assert abs(m['preprocess'] + m['postprocess'] - r['breakdown']['host_ms']) < 7.0


def test_b_every_row_within_0_3_percent() -> None:
    rows = RUN.rows('planner_b')
    assert len(rows) == 8 and max(abs(r['error']) for r in rows) < 0.003


def test_a_rerun_misses_only_the_planned_16_gib_row_whose_decode_follows_the_cpu() -> None:
    rows = RUN.rows('planner_a_rerun')
    missed = [r for r in rows if abs(r['error']) > 0.01]
    assert len(rows) == 9 and [(r['kind'], r['budget']) for r in missed] == [
        ('planned', '16.000GiB')]
    assert 'decode' in RUN.predict('planner_a_rerun', missed[0]).cpu_sensitive_phases()


def test_the_planner_beat_the_papers_plan_at_every_budget() -> None:
    for part in BENCH:
        rows = RUN.rows(part)
        for p in (r for r in rows if r['kind'] == 'planned'):
            paper = next(r for r in rows if r['kind'] == 'interleaved'
                         and r['budget'] == p['budget'])
            assert p['measured_s'] < paper['measured_s']


def test_near_resident_decode_spikes_run_by_run_and_pinning_a_core_does_not_help() -> None:
    """k = 30 held 877-879 ms in all 8 runs; k = 31 hit 731 ms in 5 and spiked to 992; the
    16 GiB plan (32 LM layers) ranged 657-991. One core for the host thread: k = 31 no faster."""
    rows = _drift('cpu_drift_pinned')
    decode = {name: sorted(r['decode'] for r in row['runs']) for name, row in rows.items()}
    assert decode['k30'][-1] - decode['k30'][0] < 5.0
    assert sum(d < 735 for d in decode['k31']) == 5 and decode['k31'][-1] > 950
    assert decode['planned-16GiB'][-1] - decode['planned-16GiB'][0] > 300
    assert statistics.median(decode['k31 pinned']) > statistics.median(decode['k31'])


def test_headroom_trades_median_latency_for_a_narrower_spread() -> None:
    """Headroom 1 / 1.33 / 1.5: median 1.447 / 1.533 / 1.565 s, range 0.305 / 0.239 / 0.115 s."""
    rows = _drift('cpu_drift_headroom')
    med = {h: statistics.median(_totals_s(rows[f'planned-16GiB-h{h}'])) for h in ('1', '1.5')}
    spread = {h: _totals_s(rows[f'planned-16GiB-h{h}'])[-1] - _totals_s(
        rows[f'planned-16GiB-h{h}'])[0] for h in ('1', '1.33', '1.5')}
    assert med['1'] < med['1.5']
    assert spread['1'] > spread['1.33'] > spread['1.5'] and spread['1.5'] < 0.12
    k30 = _totals_s(rows['k30'])
    assert k30[-1] - k30[0] < 0.01


def test_todays_planner_chooses_the_plans_the_headroom_diag_timed() -> None:
    prof = RUN.profile('planner_a')
    work = Workload(prof.measured_passes('decode'), 10)
    for name, row in _drift('cpu_drift_headroom').items():
        if name.startswith('planned-16GiB-h'):
            got = plan(prof, 16 * GIB, PlannerOptions(workload=work,
                                                      cpu_headroom=float(name.rsplit('h', 1)[1])))
            assert got.placement == Placement.of(row['resident'], row['embed_on_host'])
            assert got.prediction.total_s == pytest.approx(row['predicted_s'], rel=1e-12)


def test_headroom_moves_only_the_plan_whose_decode_nears_the_host() -> None:
    """On run 11's profiles, headroom 1.33 leaves 8-14 GiB within 0.1 % of the fastest plan and
    takes the 16 GiB plan off a CPU-following decode."""
    for part in ('planner_a', 'planner_a_rerun'):
        prof = RUN.profile(part)
        work = Workload(prof.measured_passes('decode'), 10)
        for budget in (8, 10, 12, 14, 16):
            fast = plan(prof, budget * GIB, PlannerOptions(workload=work))
            safe = plan(prof, budget * GIB, PlannerOptions(workload=work, cpu_headroom=1.33))
            assert safe.prediction == predict(prof, safe.placement, work)
            if budget < 16:
                assert safe.prediction.total_s == pytest.approx(fast.prediction.total_s,
                                                                rel=1e-3)
            else:
                assert 'decode' in fast.prediction.cpu_sensitive_phases()
                assert 'decode' not in safe.prediction.cpu_sensitive_phases()


def test_against_each_rows_fastest_run_11b_and_11c_are_within_half_a_percent() -> None:
    """The profile describes the machine undisturbed: 17 of 17 rows of 11b and 11c within
    0.49 % of their fastest run; 11a's k = 30 was slow in all three runs (-2.99 %)."""
    def vs_fastest(r: dict[str, Any]) -> float:
        return (r['predicted_s'] - min(r['runs_s'])) / min(r['runs_s'])

    rows = RUN.rows('planner_b') + RUN.rows('planner_a_rerun')
    assert len(rows) == 17 and max(abs(vs_fastest(r)) for r in rows) < 0.005
    k30 = next(r for r in RUN.rows('planner_a') if r['kind'] == 'sweep-k30')
    assert vs_fastest(k30) < -0.029
