"""CPU smoke test of `python -m bench.bench_peers`: the orchestration on the tiny preset.

Runs our modes for real (the peers run too where accelerate/diffusers are importable, else their
rows must say so), then checks the JSON-lines log, the report, bit-exactness of ours against
preload, the time-budget skip and the exact restore of the home weights.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from bench import bench_peers
from bench.peers.home import HomeCopy
from bench.peers.llama import LlamaBench, LlamaSettings
from bench.peers.measure import Deadline
from bench.peers.rows import RowSpec, alpamayo_schedule, llama_schedule, speedups
from bench.peers.runner import Repeats

TINY = ['--model', 'tiny', '--device', 'cpu', '--decode-tokens', '2', '--diffusion-steps', '2',
        '--image-hw', '64x96', '--runs', '1', '--peer-runs', '1', '--slow-runs', '1']


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / 'rows.jsonl').read_text().splitlines()]


def test_schedule_puts_the_headline_rows_first() -> None:
    rows = alpamayo_schedule([8, 10, 12, 14, 16])
    head = [(r.runtime, r.cap_gib) for r in rows[:5]]
    assert head == [('preload', None), ('ours-planned', 16.0), ('accelerate-device-map', 16.0),
                    ('ours-planned', 12.0), ('accelerate-device-map', 12.0)]
    assert rows[5].runtime.startswith('diffusers')
    assert len({(r.runtime, r.cap_gib) for r in rows}) == len(rows)
    assert {r.cap_gib for r in rows if r.runtime == 'ours-planned'} == {8, 10, 12, 14, 16}
    assert [r.runtime for r in llama_schedule([6, 8])][:4] == [
        'preload', 'ours-planned', 'accelerate-device-map', 'diffusers-block']
    with pytest.raises(ValueError, match='runtime'):
        RowSpec('alpamayo', 'vllm', 8)


def test_tiny_alpamayo_rows_run_and_ours_is_bit_exact(tmp_path: Path) -> None:
    out = tmp_path / 'run'
    assert bench_peers.main(['--out', str(out), '--cap', '8', '--budget-s', '300', *TINY]) == 0
    rows = {r['runtime']: r for r in _rows(out)}
    for runtime in ('preload', 'ours-pipelined', 'ours-sequential'):
        assert rows[runtime]['status'] == 'ok', rows[runtime]
        assert rows[runtime]['max_abs_diff'] == 0.0
        assert rows[runtime]['max_abs_diff_default_mode'] == 0.0
        assert set(rows[runtime]['phases_s']) >= {'vision', 'prefill', 'decode', 'diffusion'}
        assert rows[runtime]['rss_bytes'] > 0
    assert rows['ours-planned']['status'].startswith('skipped')      # needs a GPU profile
    for runtime, package in (('accelerate-device-map', 'accelerate'),
                             ('accelerate-cpu-offload', 'accelerate'),
                             ('diffusers-block', 'diffusers'), ('diffusers-leaf', 'diffusers')):
        if importlib.util.find_spec(package) is None:
            assert rows[runtime]['status'] == f'skipped: {package} is not importable here'
        else:
            assert rows[runtime]['status'] == 'ok', rows[runtime]
            assert rows[runtime]['max_abs_diff'] == 0.0
    text = (out / 'bench_peers.md').read_text()
    assert '| alpamayo | ours-pipelined | 8 | ok |' in text
    report = json.loads((out / 'bench_peers.json').read_text())
    assert len(report['rows']) == len(rows)
    assert bench_peers.main(['--out', str(out), '--report-only']) == 0


def test_deterministic_timing_times_in_strict_mode(tmp_path: Path) -> None:
    out = tmp_path / 'strict'
    assert bench_peers.main(['--out', str(out), '--cap', '8', '--budget-s', '300',
                             '--runtimes', 'preload,ours-pipelined', '--deterministic-timing',
                             *TINY]) == 0
    rows = _rows(out)
    assert [r['status'] for r in rows] == ['ok', 'ok']
    assert all(r['timing_mode'] == 'deterministic' for r in rows)
    assert rows[1]['max_abs_diff'] == rows[1]['max_abs_diff_default_mode'] == 0.0
    assert not torch.are_deterministic_algorithms_enabled()     # switched off again


def test_time_budget_skips_rows_instead_of_overrunning(tmp_path: Path) -> None:
    out = tmp_path / 'budget'
    assert bench_peers.main(['--out', str(out), '--cap', '8', '--budget-s', '0.5',
                             '--runtimes', 'preload,ours-sequential', *TINY]) == 0
    rows = _rows(out)
    assert [r['runtime'] for r in rows] == ['preload', 'ours-sequential']
    assert all(r['status'] == 'skipped: time budget' for r in rows)


def test_speedups_use_cap_independent_rows_at_higher_caps() -> None:
    rows = [{'model': 'm', 'runtime': 'ours-planned', 'cap_gib': 12.0, 'status': 'ok',
             'e2e_s': 1.0, 'predicted_s': 0.98},
            {'model': 'm', 'runtime': 'accelerate-device-map', 'cap_gib': 12.0, 'status': 'ok',
             'e2e_s': 20.0},
            {'model': 'm', 'runtime': 'diffusers-block', 'cap_gib': 8.0, 'status': 'ok',
             'e2e_s': 6.0},
            {'model': 'm', 'runtime': 'preload', 'cap_gib': None, 'status': 'ok',
             'e2e_s': 0.8}]
    (entry,) = speedups(rows, 'm')
    assert entry['vs_accelerate'] == pytest.approx(20.0)
    assert entry['vs_diffusers'] == pytest.approx(6.0)
    assert entry['vs_preload'] == pytest.approx(0.8)
    assert entry['measured_over_predicted'] == pytest.approx(1.0 / 0.98)


def test_tiny_llama_rows_and_exact_home_restore() -> None:
    settings = LlamaSettings(device='cpu', layers=3, hidden=64, intermediate=128, heads=4,
                             vocab=256, prompt_tokens=16, new_tokens=4,
                             repeats=Repeats(runs=1, peer_runs=1))
    bench = LlamaBench(settings, Deadline(120.0))
    before = {k: v.clone() for k, v in bench.model.state_dict().items()}
    try:
        for spec in llama_schedule([4.0]):
            row = bench.run(spec)
            package = spec.runtime.split('-')[0]
            if spec.runtime in ('preload', 'ours-planned') or \
                    importlib.util.find_spec(package) is not None:
                assert row['status'] == 'ok', row
                assert row['max_abs_diff'] == 0.0
                assert row['phases_s']['decode'] > 0
            else:
                assert row['status'] == f'skipped: {package} is not importable here'
        bench.teardown()
        assert bench.home.matches(bench.model)
        after = bench.model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert all(t.device.type == 'cpu' for t in after.values())
    finally:
        bench.close()


def test_home_copy_refuses_device_tensors_and_restores_storage() -> None:
    layer = torch.nn.Linear(4, 4)
    home = HomeCopy(layer)
    layer.weight.data = torch.zeros(4, 4)
    assert not home.matches(layer)
    home.restore()
    assert home.matches(layer)
    with pytest.raises(ValueError, match='host'):
        HomeCopy(torch.nn.Linear(2, 2, device='meta'))


@pytest.mark.parametrize('field', ['runs', 'peer_runs', 'slow_runs'])
def test_repeats_refuse_counts_outside_1_to_50(field: str) -> None:
    for bad in (0, 51):
        with pytest.raises(ValueError, match=f'{field} = {bad}: must be in 1..50'):
            Repeats(**{field: bad})


def test_a_slow_row_left_no_time_reports_its_deterministic_pass() -> None:
    """`timed_optional`: no timed run is forced past the deadline; the pass is the figure."""
    import numpy as np

    from bench.peers.measure import RunOutput, measure

    calls: list[int] = []

    def infer() -> RunOutput:
        calls.append(1)
        return RunOutput({'xyz': np.zeros(3)}, {'decode': 0.0})

    row, _, _ = measure(infer, warmup=0, runs=1, deadline=Deadline(0.0), reference=None,
                        reference_timed=None, timed_optional=True)
    assert len(calls) == 1 and row['timed_runs'] == 0 and row['runs_cut_by_budget']
    assert row['timing_mode'] == 'deterministic pass'
    assert row['e2e_s'] == row['deterministic_pass_s']
    row, _, _ = measure(infer, warmup=0, runs=1, deadline=Deadline(0.0), reference=None,
                        reference_timed=None)
    assert len(calls) == 3 and row['timed_runs'] == 1 and row['timing_mode'] == 'default'
