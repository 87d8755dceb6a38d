"""`bench_compress` on the tiny R1 and a tiny Llama, CPU codec: every row kind of the GPU run.

Preload, the start-up rows (compressing every layer, then reading them all from the cache) and
per budget the raw and the compressed plan, bit-exact against preload in their strict passes,
timed in the default mode, with per-phase bytes and host memory; the short table is printed last
and rows.json written.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench import bench_compress

pytestmark = pytest.mark.slow

ARGS = ['--model', 'tiny', '--llama-shape', 'tiny', '--device', 'cpu', '--budgets', '1,90%',
        '--decode-tokens', '2', '--diffusion-steps', '2', '--reps', '1', '--warmup', '0']


def test_one_run_gives_every_row_of_both_models(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / 'cache'
    assert bench_compress.main(['--out', str(tmp_path / 'out'), '--cache-dir', str(cache),
                                *ARGS]) == 0
    rows = json.loads((tmp_path / 'out' / 'rows.json').read_text())
    assert not torch.are_deterministic_algorithms_enabled()   # strict only around its passes
    phases = {'r1': {'vision', 'prefill', 'decode', 'diffusion'}, 'llama': {'prefill', 'decode'}}
    for model, names in phases.items():
        mine = {(r['plan'], r.get('budget')): r for r in rows if r['model'] == model}
        measured = [r for r in mine.values() if 'total_s' in r]
        assert all(r['exact'] for r in measured)
        assert all(r['timing_mode'] == 'default' and r['deterministic_pass_s'] > 0
                   for r in measured)
        assert all(set(r['phases_s']) == set(r['streamed_bytes']) == names for r in measured)
        assert all(r['rss_bytes'] > 0 and r['peak_rss_bytes'] >= r['rss_bytes']
                   for r in measured)
        cold, warm = mine[('startup-cold', None)], mine[('startup-cache', None)]
        assert cold['compress_s'] > 0 and cold['cache_hits'] == 0
        assert warm['compress_s'] == 0 and warm['cache_hits'] > 0
        assert warm['bytes_copied'] == cold['bytes_copied'] < cold['bytes_streamed_raw']
        raw, packed = mine[('raw', '1')], mine[('compressed', '1')]
        assert packed['bytes_streamed_raw'] == raw['bytes_streamed_raw'] > 0
        assert packed['bytes_copied'] < raw['bytes_copied']
        assert packed['resident_lm'] == raw['resident_lm']
    r1_90 = [r for r in rows if r['model'] == 'r1' and r.get('budget') == '90%']
    assert r1_90 and all('working set' in r['skipped'] for r in r1_90)
    assert any(p.name.endswith('.bin') for p in cache.rglob('*'))
    out = capsys.readouterr().out.strip().splitlines()
    header = next(i for i, line in enumerate(out) if line.split()[:2] == ['model', 'budget'])
    assert len(out) - header - 1 == len(rows)


def test_no_startup_leaves_out_the_start_up_rows(tmp_path: Path) -> None:
    assert bench_compress.main(['--out', str(tmp_path), '--models', 'llama', '--no-startup',
                                *ARGS]) == 0
    plans = [r['plan'] for r in json.loads((tmp_path / 'rows.json').read_text())]
    assert plans[0] == 'preload' and 'raw' in plans and 'compressed' in plans
    assert not any(p.startswith('startup') for p in plans)
