"""Golden regression test of the planner and the predictor over the current H200 profiles.

For each committed profile of the current results (`docs/results/README.md` names them), today's
planner makes its plans at fixed budgets and today's predictor prices a fixed set of placements
(the plans those results measured) in every pipeline mode; both are compared with the values
recorded in `golden/predictions.json`. Any change to the planner's choices or to a predictor term
fails here, with the path of the first value that moved.

A deliberate change regenerates the goldens:

    ALPAMAYO_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q test/planning/test_golden_predictions.py

and the commit that does so must say why the predictions or plans moved (and, where they moved
the measured rows' error, re-check them against the hardware).

The measured rows are also checked against the recomputed prediction (within 1 %), so a change
that keeps the goldens but drifts from the hardware cannot be regenerated silently.
"""
from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.planning.planner import PlannerOptions, plan, vram_needed
from alpamayo_offload.planning.predictor import Pipeline, Placement, Prediction, Workload, predict
from alpamayo_offload.planning.profile import Profile, load_profile

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'docs' / 'results' / '2026-11-30-h200' / 'run12'
PARTS = ('planner_a_pooled', 'planner_b')      # bench A (12-16 GiB) and B (8-10 GiB)
GOLDEN = Path(__file__).resolve().parent / 'golden' / 'predictions.json'
UPDATE_ENV = 'ALPAMAYO_UPDATE_GOLDEN'
BUDGETS_GIB = (8, 10, 12, 14, 16)
# (budget GiB, CPU headroom): the planner judging plans on a slower CPU changes its choice.
HEADROOM_PLANS = ((16, 2.0), (16, 3.0))
REL = 1e-9                  # the replay is deterministic; this only absorbs summation order
DIFFUSION_STEPS = 10        # the bench's workload: the profile's decode passes, 10 steps


def _profile(part: str) -> tuple[Profile, str]:
    return load_profile(RESULTS / part / 'profile.json')


def _workload(profile: Profile) -> Workload:
    return Workload(profile.measured_passes('decode'), DIFFUSION_STEPS)


def _rows(part: str) -> list[dict[str, Any]]:
    lines = (RESULTS / part / 'rows.jsonl').read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _row_id(row: dict[str, Any]) -> str:
    return f"{row['kind']} {row['budget']}"


def _breakdown(prediction: Prediction) -> dict[str, Any]:
    return {'total_ms': prediction.total_ms, 'host_ms': prediction.host_ms,
            'phases': {p.name: {'passes': p.passes, 'wall_ms': p.wall_ms, 'copy_ms': p.copy_ms,
                                'compute_ms': p.compute_ms, 'bubble_ms': p.bubble_ms,
                                'bytes_streamed': p.bytes_streamed, 'host_ms': p.host_ms,
                                'cpu_sensitive': p.cpu_sensitive}
                       for p in prediction.phases}}


def _plan_record(profile: Profile, budget_gib: int, headroom: float) -> dict[str, Any]:
    got = plan(profile, budget_gib * 2**30,
               PlannerOptions(workload=_workload(profile), cpu_headroom=headroom))
    return {'resident': {s: list(got.placement.indices(s)) for s in got.placement.resident},
            'embed_on_host': got.placement.embed_on_host, 'strategy': got.strategy,
            'vram_bytes': got.vram.total, 'prediction': _breakdown(got.prediction)}


def _placement_record(profile: Profile, placement: Placement) -> dict[str, Any]:
    workload = _workload(profile)
    return {
        'pipelined': _breakdown(predict(profile, placement, workload)),
        'sequential_ms': predict(profile, placement, workload, Pipeline.SEQUENTIAL).total_ms,
        'cold_passes_ms': predict(profile, placement, workload, Pipeline.COLD_PASSES).total_ms,
        'no_host_terms_ms': predict(profile.without_host_terms(), placement, workload).total_ms,
        'host_x1.5_ms': predict(profile.with_host_scaled(1.5), placement, workload).total_ms,
        'vram_bytes': vram_needed(profile, placement).total,
    }


def _row_placement(row: dict[str, Any]) -> Placement:
    return Placement.of(row['resident'], row['embed_on_host'])


def _plan_keys() -> list[tuple[int, float]]:
    return [(b, 1.0) for b in BUDGETS_GIB] + list(HEADROOM_PLANS)


def _plan_key(budget_gib: int, headroom: float) -> str:
    return f'{budget_gib}GiB headroom {headroom:g}'


def compute(part: str) -> dict[str, Any]:
    """Everything the golden file records for one profile, from today's planner and predictor."""
    profile, digest = _profile(part)
    return {
        'profile_sha256': digest,
        'workload': {'decode_passes': _workload(profile).decode_passes,
                     'diffusion_steps': DIFFUSION_STEPS},
        'plans': {_plan_key(b, h): _plan_record(profile, b, h) for b, h in _plan_keys()},
        'placements': {_row_id(r): {'resident': r['resident'],
                                    'embed_on_host': r['embed_on_host'],
                                    **_placement_record(profile, _row_placement(r))}
                       for r in _rows(part)},
    }


def _write_golden() -> dict[str, Any]:
    data = {'_regenerate': f'{UPDATE_ENV}=1 python -m pytest -q '
                           'test/planning/test_golden_predictions.py; justify it in the commit',
            'profiles': {part: compute(part) for part in PARTS}}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + '\n')
    warnings.warn(f'{GOLDEN} regenerated ({UPDATE_ENV}=1): say why in the commit', stacklevel=2)
    return data


@pytest.fixture(scope='module')
def golden() -> dict[str, Any]:
    if os.environ.get(UPDATE_ENV) == '1':
        return _write_golden()
    return json.loads(GOLDEN.read_text())


def _differences(want: Any, got: Any, path: str = '') -> Iterator[str]:
    """Paths where `got` differs from `want` (floats to `REL`, everything else exactly)."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            if key not in want or key not in got:
                yield f'{path}/{key}: only in {"golden" if key in want else "today"}'
            else:
                yield from _differences(want[key], got[key], f'{path}/{key}')
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            yield from _differences(w, g, f'{path}[{i}]')
    elif (isinstance(want, float) or isinstance(got, float)) and not isinstance(want, bool) \
            and not isinstance(got, bool) and isinstance(want, int | float) \
            and isinstance(got, int | float):
        if not math.isclose(want, got, rel_tol=REL, abs_tol=1e-12):
            yield f'{path}: golden {want!r}, today {got!r}'
    elif want != got:
        yield f'{path}: golden {want!r}, today {got!r}'


def _assert_same(want: Any, got: Any, what: str) -> None:
    diffs = list(_differences(want, got))
    assert not diffs, (f'{what} moved ({len(diffs)} values; regenerate only on purpose, see '
                       f'this module\'s docstring):\n' + '\n'.join(diffs[:20]))


@pytest.mark.parametrize('part', PARTS)
def test_golden_is_for_the_committed_profile(part: str, golden: dict[str, Any]) -> None:
    recorded = golden['profiles'][part]
    assert recorded['profile_sha256'] == _profile(part)[1], (
        f'{part}/profile.json changed since the goldens were recorded; regenerate them')
    assert sorted(recorded['placements']) == sorted(_row_id(r) for r in _rows(part))


@pytest.mark.parametrize('part', PARTS)
@pytest.mark.parametrize(('budget_gib', 'headroom'), _plan_keys())
def test_planner_makes_the_recorded_plan(part: str, budget_gib: int, headroom: float,
                                         golden: dict[str, Any]) -> None:
    profile, _ = _profile(part)
    _assert_same(golden['profiles'][part]['plans'][_plan_key(budget_gib, headroom)],
                 _plan_record(profile, budget_gib, headroom),
                 f'{part} plan at {_plan_key(budget_gib, headroom)}')


@pytest.mark.parametrize('part', PARTS)
def test_predictor_prices_the_measured_placements_as_recorded(part: str,
                                                              golden: dict[str, Any]) -> None:
    profile, _ = _profile(part)
    for row_id, want in golden['profiles'][part]['placements'].items():
        placement = Placement.of(want['resident'], want['embed_on_host'])
        got = {'resident': want['resident'], 'embed_on_host': want['embed_on_host'],
               **_placement_record(profile, placement)}
        _assert_same(want, got, f'{part} {row_id}')


@pytest.mark.parametrize('part', PARTS)
def test_measured_rows_within_1_percent_of_todays_prediction(part: str,
                                                             golden: dict[str, Any]) -> None:
    """The measurement, not the goldens: today's prediction of each measured plan is within
    1 % of what the H200 measured, and every planned row measured the recorded plan for its
    budget (which `test_planner_makes_the_recorded_plan` ties to today's planner)."""
    profile, _ = _profile(part)
    plans = golden['profiles'][part]['plans']
    for row in _rows(part):
        predicted = predict(profile, _row_placement(row), _workload(profile)).total_s
        error = (predicted - row['measured_s']) / row['measured_s']
        assert abs(error) < 0.01, f'{_row_id(row)}: predicted {predicted:.4f} s, ' \
                                  f"measured {row['measured_s']:.4f} s ({100 * error:+.2f} %)"
        if row['kind'] == 'planned':
            recorded = plans[_plan_key(round(row['budget_bytes'] / 2**30), 1.0)]
            assert Placement.of(recorded['resident'], recorded['embed_on_host']) == \
                _row_placement(row), _row_id(row)
