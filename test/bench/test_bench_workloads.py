"""`bench_workloads --smoke`: every workload's rows on tiny 1.5 and 2 Super, and the report."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_workloads

pytestmark = pytest.mark.slow


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / 'rows.jsonl').read_text().splitlines()]


def test_smoke_1_5_runs_every_workload_bit_exact_and_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'wl15'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-1.5', '--out', str(out)]) == 0
    rows = _rows(out)
    assert [(r['workload'], r['kind'], r['budget_gib']) for r in rows] == [
        (w, kind, gib) for w in ('s1', 's16', 'nav1', 'nav16')
        for kind, gib in (('preload', None), ('planned', 0.6), ('planned', 0.58))]
    assert all(r['status'] == 'ok' for r in rows), [r['status'] for r in rows]
    planned = [r for r in rows if r['kind'] == 'planned']
    assert all(r['bit_exact'] and r['exact_tokens'] and r['exact_trajectory'] for r in planned)
    assert all(r['predicted_s'] > 0 and r['copy_bound_s'] >= 0 for r in planned)
    assert {r['num_samples'] for r in rows} == {1, 16} and {r['guidance'] for r in rows} == {
        False, True}
    doc = json.loads((out / 'bench_workloads.json').read_text())
    names = [t['name'] for t in doc['targets']]
    assert 's16 / s1 at 0.6 GiB' in names and 'nav1 / s1 at 0.6 GiB' in names
    assert doc['meta']['profiles']['nav16'] == {'path': 'synthetic', 'measured_here': False,
                                                'link_gbps': 1.0}
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith('  nav16 / s16 at 0.6 GiB:')
    assert any(line.split()[:3] == ['wl', 'budget', 'kind'] for line in printed)

    # --report rebuilds the same table from rows.jsonl, and --merge adds another run's rows.
    assert bench_workloads.main(['--report', '--out', str(out), '--merge', str(out)]) == 0
    again = json.loads((out / 'bench_workloads.json').read_text())
    assert len(again['rows']) == 2 * len(rows)


def test_smoke_2super_skips_what_cannot_run_with_a_reason(tmp_path: Path) -> None:
    out = tmp_path / 'wl2s'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-2super', '--out', str(out),
                                 '--budgets', '0.8']) == 0
    rows = {(r['kind'], r['budget_gib']): r for r in _rows(out)}
    assert rows[('planned', 0.8)]['bit_exact'] is True
    assert rows[('planned', 0.8)]['rss_bytes'] > 0
    assert rows[('accelerate-device-map', 0.6)]['status'] == \
        'skipped: the Accelerate row needs CUDA'
    names = [t['name'] for t in json.loads((out / 'bench_workloads.json').read_text())['targets']]
    assert any(n.startswith('measured / copy bound') for n in names)
    assert any(n.startswith('peak host RSS') for n in names)

    # A time budget too small for any row: preload is skipped with its estimate, so the planned
    # rows have no reference to be compared with.
    cut = tmp_path / 'cut'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-2super', '--out', str(cut),
                                 '--budget-s', '0', '--parts', 'rows']) == 0
    preload, *planned = _rows(cut)
    assert preload['status'].startswith('skipped: time budget (needs ~')
    assert [r['status'] for r in planned] == ['skipped: no preload reference in this run'] * 2


def test_a_given_profile_plans_with_the_engines_working_set(tmp_path: Path) -> None:
    """A saved profile keeps its timings; its working set is the current engine's estimate."""
    import dataclasses

    from alpamayo_offload.planning.profile import save_profile

    args = bench_workloads.parse_args(['--smoke', '--model', 'tiny-1.5', '--out',
                                       str(tmp_path / 'x'), '--workloads', 's1'])
    engine, _ = bench_workloads.build_engine(args)
    spec = bench_workloads.WORKLOADS['s1']
    bench_workloads.use_workload(engine, spec)
    profile = bench_workloads.synthetic_for(engine, spec)
    stale = dataclasses.replace(profile, vram=dataclasses.replace(profile.vram,
                                                                  working_set_bytes=1))
    (tmp_path / 'profiles').mkdir()
    save_profile(stale, tmp_path / 'profiles' / 'profile_s1.json')
    expected = engine.working_set_bytes()
    engine.close()
    out = tmp_path / 'run'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-1.5', '--out', str(out),
                                 '--workloads', 's1', '--profile',
                                 str(tmp_path / 'profiles')]) == 0
    meta = json.loads((out / 'meta.json').read_text())
    assert meta['profiles']['s1']['working_set_bytes'] == {'profile': 1, 'engine': expected}
    assert all(r['status'] == 'ok' for r in _rows(out) if r['kind'] == 'planned')
