"""Reading the committed H200 results (docs/results/2026-11-30-h200) in the run tests."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.planning.planner import PlannerOptions, plan
from alpamayo_offload.planning.predictor import Placement, Prediction, Workload, predict
from alpamayo_offload.planning.profile import Profile, load_profile

RESULTS = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200'


def rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of a bench_planner folder as its report wrote them."""
    return json.loads((folder / 'bench_planner.json').read_text())['rows']


def profile(folder: Path) -> Profile:
    return load_profile(folder / 'profile.json')[0]


def workload(prof: Profile) -> Workload:
    """The bench's workload: the profile's decode passes, 10 diffusion steps."""
    return Workload(prof.measured_passes('decode'), 10)


def predict_row(prof: Profile, row: dict[str, Any]) -> Prediction:
    return predict(prof, Placement.of(row['resident'], row['embed_on_host']), workload(prof))


class Run:
    """One run's folder of results, read by part (a bench_planner command's folder)."""

    def __init__(self, name: str) -> None:
        self.path = RESULTS / name

    def rows(self, part: str) -> list[dict[str, Any]]:
        return rows(self.path / part)

    def profile(self, part: str) -> Profile:
        return profile(self.path / part)

    def predict(self, part: str, row: dict[str, Any]) -> Prediction:
        return predict_row(self.profile(part), row)


def assert_reproduces_plans_and_predictions(folder: Path) -> None:
    """Today's predictor gives every row's prediction from the folder's profile, and today's
    planner every planned row's plan."""
    prof = profile(folder)
    for row in rows(folder):
        assert predict_row(prof, row).total_s == pytest.approx(row['predicted_s'], rel=1e-12)
        if row['kind'] == 'planned':
            got = plan(prof, row['budget_bytes'],
                       PlannerOptions(workload=workload(prof))).placement
            assert got.embed_on_host == row['embed_on_host']
            assert {s: set(got.indices(s)) for s in row['resident']} == {
                s: set(v) for s, v in row['resident'].items()}
