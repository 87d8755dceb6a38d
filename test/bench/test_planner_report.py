"""`bench.bench_planner`'s report on this CPU, from the committed H200 rows of bench A.

The report has no GPU part, so its diagnostic columns are checked here: the CPU-speed column
equals the plain device error when the CPU was as fast as at the profile, and moves a row whose
decode follows the CPU when it was not.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.planning.predictor import Workload
from alpamayo_offload.planning.profile import load_profile, save_profile
from bench import bench_planner

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / 'docs' / 'results' / '2026-11-30-h200' / 'run12'
RUN = RESULTS / 'planner_a_pooled'      # bench A: 16, 14, 12 GiB and the sweep k >= 25


def _probed(tmp_path: Path, row_us: dict[str, float]) -> Path:
    """A copy of the run with host-issue probes added (10 µs at the profile; `row_us` per row
    kind + budget, 10 µs for the others)."""
    out = tmp_path / 'run'
    shutil.copytree(RUN, out)
    profile, _ = load_profile(out / 'profile.json')
    save_profile(dataclasses.replace(profile, settings={
        **profile.settings, 'host_issue_probe_us': [10.0, 10.0]}), out / 'profile.json')
    rows = [json.loads(line) for line in (out / 'rows.jsonl').read_text().splitlines()]
    for r in rows:
        us = row_us.get(f"{r['kind']} {r['budget']}", 10.0)
        r['host_issue_us'] = [us, us]
    (out / 'rows.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    return out


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / 'rows.jsonl').read_text().splitlines()]


def test_cpu_speed_column_is_the_device_error_at_the_profiles_speed(tmp_path: Path) -> None:
    out = _probed(tmp_path, {'planned 16.000GiB': 13.0})
    profile, _ = load_profile(out / 'profile.json')
    workload = Workload(profile.measured_passes('decode'), 10)
    for r in _rows(out):
        got = bench_planner._device_error(bench_planner._at_row_cpu(profile, r), r, workload)
        if (r['kind'], r['budget']) == ('planned', '16.000GiB'):
            # decode follows the CPU: 30 % slower issue, a slower prediction
            assert got > r['device_error'] + 0.03
        else:
            assert got == pytest.approx(r['device_error'], abs=1e-12)
    unprobed = {k: v for k, v in _rows(out)[0].items() if k != 'host_issue_us'}
    assert bench_planner._at_row_cpu(profile, unprobed) is None


def test_report_writes_the_table_from_committed_rows(tmp_path: Path) -> None:
    out = _probed(tmp_path, {})
    done = subprocess.run([sys.executable, '-m', 'bench.bench_planner', '--report',
                           '--out', str(out)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr       # every row within the 1 % target
    table = (out / 'bench_planner.md').read_text().splitlines()
    assert "device error at the row's CPU speed" in table[0]
    planned16 = next(line for line in table if line.startswith('| planned | 16.000GiB'))
    cells = [c.strip() for c in planned16.split('|')]
    assert cells[10] == cells[14] == '-0.17 %'      # device error; at the profile's CPU speed
    assert cells[16] == '10.0/10.0 (10.0)'
    row = next(r for r in _rows(out) if r['kind'] == 'planned' and r['budget'] == '16.000GiB')
    fastest = min(row['runs_s'])
    assert 'error vs the fastest run' in table[0]
    assert cells[20] == f"{100 * (row['predicted_s'] - fastest) / fastest:+.2f} %"
    checks = json.loads((out / 'bench_planner.json').read_text())['checks']
    assert checks['max_abs_error_vs_fastest_run'] == pytest.approx(max(
        abs(r['predicted_s'] - min(r['runs_s'])) / min(r['runs_s']) for r in _rows(out)))
    assert (out / 'bench_planner.png').stat().st_size > 10_000


def test_headroom_rows_only_where_the_planned_plan_follows_the_cpu() -> None:
    """Bench B's profile: only the 16 GiB plan has a decode following the CPU, so
    `--cpu-headroom 3` adds one row, the plan `plan --cpu-headroom 3` chooses."""
    from alpamayo_offload.planning.planner import PlannerOptions, plan

    profile, _ = load_profile(RESULTS / 'planner_b' / 'profile.json')
    options = PlannerOptions(workload=Workload(profile.measured_passes('decode'), 10))
    budgets = [b * 2**30 for b in (16, 14, 12, 10, 8)]
    plain = bench_planner.budget_rows(profile, budgets, options, 1.0)
    assert [k for k, _, _ in plain] == ['planned', 'interleaved'] * 5
    safe = [r for r in bench_planner.budget_rows(profile, budgets, options, 3.0)
            if r[0].startswith('headroom')]
    assert [(k, b) for k, b, _ in safe] == [('headroom-3', 16 * 2**30)]
    assert safe[0][2] == plan(profile, 16 * 2**30, dataclasses.replace(
        options, cpu_headroom=3.0)).placement
