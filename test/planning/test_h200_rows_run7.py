"""What H200 run 7 of 2026-11-30 decided (docs/results/2026-11-30-h200/run7, benchmarks.md §2, §3).

The paper's sweep with transformers' op-by-op RMSNorm (`sweep_per_op_norms`), then budgets and
sweep with fused norms (`planner_a`: 16-12 GiB and k >= 25, `planner_b`: 10-8 GiB and k <= 14,
same machine). The committed files are the measurement; these tests tie the code and the
documented conclusions to them.
"""
from __future__ import annotations

import json
import statistics
from typing import Any

import pytest
from h200_results import RESULTS, Run, assert_reproduces_plans_and_predictions, profile

from alpamayo_offload.planning.profile import Profile

RUN = Run('run7')
PER_OP, FUSED = ('sweep_per_op_norms',), ('planner_a', 'planner_b')
GIB = 2**30


def _lm(row: dict[str, Any]) -> int:
    return len(row['resident']['lm'])


@pytest.mark.parametrize('part', PER_OP + FUSED)
def test_the_committed_profiles_reproduce_every_plan_and_prediction(part: str) -> None:
    assert_reproduces_plans_and_predictions(RUN.path / part)


def test_profiles_name_their_norms_and_fused_ones_issue_less() -> None:
    """Host issue time of a whole LM decode pass 29.4 -> 24.7 ms, a diffusion step 31.8 -> 26.8."""
    per_op, fused = RUN.profile('sweep_per_op_norms'), RUN.profile('planner_a')
    assert per_op.machine.kernel_settings == 'deterministic=False, CUBLAS_WORKSPACE_CONFIG=default'
    assert fused.machine.kernel_settings.endswith('norms=fused')

    def host(p: Profile, phase: str) -> float:
        return sum(next(x for x in p.phases if x.name == phase).host_layer_ms)

    for phase in ('decode', 'diffusion'):
        assert host(fused, phase) < 0.87 * host(per_op, phase)


def test_fused_norms_bring_the_near_resident_sweep_rows_within_about_one_percent() -> None:
    """k = 30, 31 with op-by-op norms: -5.2 / -2.8 %; fused: +0.7 / +1.2 % (device +-0.2 %)."""
    per_op = {_lm(r): r for r in RUN.rows('sweep_per_op_norms')}
    fused = {_lm(r): r for r in RUN.rows('planner_a') if r['kind'].startswith('sweep')}
    assert min(per_op[k]['error'] for k in (30, 31)) < -0.025
    assert max(abs(fused[k]['error']) for k in (30, 31)) < 0.012
    assert max(abs(fused[k]['device_error']) for k in (30, 31)) < 0.002
    assert max(abs(per_op[k]['error']) for k in per_op if k <= 25) < 0.006   # copy-bound


def test_cpu_sensitive_flag_covers_every_near_resident_miss() -> None:
    """Op-by-op k = 30 missed by 6 % (device) at a host share of 0.76: the threshold is 0.75."""
    for part in PER_OP + FUSED:
        for row in RUN.rows(part):
            if _lm(row) >= 30 and abs(row['device_error']) > 0.01:
                assert 'decode' in RUN.predict(part, row).cpu_sensitive_phases(), row['kind']
    k30 = next(r for r in RUN.rows('planner_a') if r['kind'] == 'sweep-k30')
    assert RUN.predict('planner_a', k30).cpu_sensitive_phases() == ()   # fused: host share 0.67


def test_fused_rows_within_two_percent_and_most_within_one() -> None:
    rows = [r for part in FUSED for r in RUN.rows(part)]
    assert len(rows) == 17
    assert max(abs(r['error']) for r in rows) < 0.02
    assert sum(abs(r['error']) <= 0.01 for r in rows) == 14


def test_one_plan_measured_twice_in_one_process_differs_by_more_than_the_target() -> None:
    """10 GiB interleaved and sweep k = 14 are the same plan: 4.505 and 4.386 s (2.7 %)."""
    b = RUN.rows('planner_b')
    twice = [r['measured_s'] for r in b if _lm(r) == 14 and not r['resident']['vit']]
    assert len(twice) == 2 and max(twice) / min(twice) > 1.02


def test_planner_beats_the_papers_plan_by_at_least_eight_percent_at_every_budget() -> None:
    rows = [r for part in FUSED for r in RUN.rows(part) if r['budget_bytes']]
    for budget in (8, 10, 12, 14, 16):
        got = {r['kind']: r['measured_s'] for r in rows if r['budget_bytes'] == budget * GIB}
        assert got['planned'] < 0.92 * got['interleaved'], budget


@pytest.mark.parametrize('folder', ['run7/planner_a', 'run7/planner_b',
                                    'run7/sweep_per_op_norms', 'run6/planner'])
def test_the_back_to_back_host_term_was_a_third_above_the_rows(folder: str) -> None:
    """Profile pre/postprocessing 57-78 ms against row medians of 44-58 ms: 30-37 % high, which
    alone put 16 GiB interleaved and k = 31 over 1 % end to end (device +0.16 / +0.14 %)."""
    path = RESULTS / folder
    prof = profile(path)
    rows = [json.loads(line) for line in (path / 'rows.jsonl').read_text().splitlines()]
    steady = statistics.median(r['measured_ms']['preprocess'] + r['measured_ms']['postprocess']
                               for r in rows)
    assert 1.28 < prof.host_ms / steady < 1.4
