"""`bench_workloads --smoke`: every workload's rows on tiny 1.5 and 2 Super, and the report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import bench_workloads

pytestmark = pytest.mark.slow


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / 'rows.jsonl').read_text().splitlines()]


def test_smoke_1_5_runs_every_workload_bit_exact_and_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'wl15'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-1.5', '--out', str(out),
                                 '--trace', 's1']) == 0
    rows = _rows(out)
    # s1's rows are traced after every timed row of the run (nav16's are the last timed).
    traces = sorted(out.glob('trace_s1_*.json.gz'))
    assert [t.name for t in traces] == ['trace_s1_planned_0.58GiB.json.gz',
                                        'trace_s1_planned_0.6GiB.json.gz',
                                        'trace_s1_preload_wholeGPU.json.gz']
    assert min(t.stat().st_mtime_ns for t in traces) >= (out / 'rows.jsonl').stat().st_mtime_ns
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
    ratio = next(t for t in doc['targets'] if t['name'] == 's16 / s1 at 0.6 GiB')
    assert ratio['measured'].count(' s raw') == 2       # each plan's streaming named
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
                                 '--budgets', '0.8', '--eager-streams']) == 0
    rows = {(r['kind'], r['budget_gib']): r for r in _rows(out)}
    assert rows[('planned', 0.8)]['bit_exact'] is True
    # The same plan again with its streamed layers eager (graphs need CUDA: eager both times).
    assert rows[('eager-streams', 0.8)]['bit_exact'] is True
    assert rows[('eager-streams', 0.8)]['resident'] == rows[('planned', 0.8)]['resident']
    assert rows[('planned', 0.8)]['rss_bytes'] > 0
    assert rows[('accelerate-device-map', 0.65)]['status'] == \
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


def attach_device_map_double(handed: list[dict[str, Any]]) -> Any:
    """Test double of `hf_peers.attach_device_map` (Accelerate is no dependency, and its
    device_map needs a GPU): places nothing, records what the row handed it."""
    from bench.peers import hf_peers

    def attach(model: Any, device: Any, max_memory_bytes: int, no_split: Any,
               keep_on_device: Any = (), skip_keys: Any = None) -> hf_peers.Attached:
        layers = [t for seq in model.layer_sequences().values() for layer in seq
                  for t in [*layer.parameters(), *layer.buffers()]]
        handed.append({'layer_storages': {t.untyped_storage().data_ptr() for t in layers},
                       'devices': {t.device.type for t in model.parameters()},
                       'max_memory_bytes': max_memory_bytes})
        return hf_peers.Attached('accelerate-device-map', 0.0, {'test_double': True})
    return attach


@pytest.fixture
def accelerate_double(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The Accelerate row made runnable on the CPU through `attach_device_map_double`."""
    from bench import workloads_accelerate
    from bench.peers import hf_peers

    handed: list[dict[str, Any]] = []
    monkeypatch.setattr(workloads_accelerate, 'unavailable', lambda device: None)
    monkeypatch.setattr(hf_peers, 'available', lambda package: True)
    monkeypatch.setattr(hf_peers, 'attach_device_map', attach_device_map_double(handed))
    return handed


def test_accelerate_row_runs_last_on_the_engines_own_weights(
        tmp_path: Path, accelerate_double: list[dict[str, Any]],
        capsys: pytest.CaptureFixture[str]) -> None:
    """After the rows, the same model is handed over: its layers one host store, no 2nd copy."""
    out = tmp_path / 'acc'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-2super', '--out', str(out)]) == 0
    rows = _rows(out)
    assert [(r['kind'], r['budget_gib']) for r in rows] == [
        ('preload', None), ('planned', 0.8), ('planned', 0.65), ('accelerate-device-map', 0.65)]
    acc = rows[-1]
    assert acc['status'] == 'ok', acc['status']
    assert acc['detail'] == {'test_double': True}
    assert acc['bit_exact'] is True and acc['max_abs_diff'] == 0.0     # tokens compared too
    assert acc['rss_peak_bytes'] > 0 and acc['setup_peak_rss_bytes'] > 0
    assert acc['handover_peak_rss_bytes'] > 0
    assert acc['estimate']['inference_s'] >= 0 and 'extrapolated' not in acc
    (handed,) = accelerate_double
    assert len(handed['layer_storages']) == 1          # every layer: a view of the one store
    assert handed['devices'] == {'cpu'}
    assert handed['max_memory_bytes'] == int((0.65 - 0.05) * 2**30)
    doc = json.loads((out / 'bench_workloads.json').read_text())
    (versus,) = [t for t in doc['targets'] if t['name'].startswith('Accelerate device_map')]
    assert versus['name'] == 'Accelerate device_map / ours at 0.65 GiB'
    assert versus['measured'] is not None
    printed = capsys.readouterr().out
    stages = next(line for line in printed.splitlines() if line.startswith('host RSS peak'))
    assert [part.rsplit(' ', 1)[0] for part in stages.split(': ', 1)[1].split(', ')] == [
        'build', 's1 preload whole GPU', 's1 planned 0.8 GiB', 's1 planned 0.65 GiB',
        's1 acc-dmap 0.65 GiB hand-over', 's1 acc-dmap 0.65 GiB set-up', 's1 acc-dmap 0.65 GiB']


def test_accelerate_row_short_of_time_extrapolates_a_bounded_run(
        tmp_path: Path, accelerate_double: list[dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Too little time for a full inference: prefill + 2 decode passes, labelled extrapolated."""
    from bench import workloads_accelerate

    monkeypatch.setattr(workloads_accelerate, 'decode_tokens_to_run', lambda left, est, n: 2)
    out = tmp_path / 'bounded'
    assert bench_workloads.main(['--smoke', '--model', 'tiny-2super', '--out', str(out),
                                 '--budgets', '0.65']) == 0
    acc = _rows(out)[-1]
    assert acc['status'] == 'ok' and acc['extrapolated'] is True
    assert acc['decode_tokens_run'] == 2 and acc['bit_exact'] is None
    assert acc['e2e_s'] == pytest.approx(acc['measured_e2e_s'] + 19 * acc['decode_pass_s'])
    assert acc['note'].startswith('e2e extrapolated: ran vision, prefill, 2 of 21 decode')
    table = json.loads((out / 'bench_workloads.json').read_text())['table']
    assert f"{acc['e2e_s']:7.3f}*" in table


def test_accelerate_time_decides_full_bounded_or_none() -> None:
    from bench.workloads_accelerate import SETUP_S, AccelerateEstimate, decode_tokens_to_run

    est = AccelerateEstimate({'vit': 0, 'lm': 1, 'expert': 0}, 0, fixed_s=20.0, pass_s=5.0)
    assert est.seconds(21) == 125.0
    full = 1.15 * (SETUP_S + 125.0)
    assert decode_tokens_to_run(full + 1, est, 21) == 21
    assert decode_tokens_to_run(1.15 * (SETUP_S + 20.0 + 5 * 5.0) + 0.1, est, 21) == 5
    assert decode_tokens_to_run(1.15 * (SETUP_S + 24.0), est, 21) == 0


def test_accelerate_estimate_follows_its_greedy_placement() -> None:
    """2 Super at 32 GiB (28 GiB max_memory): 26 of 64 LM layers fit beside the vision part and
    the embedding, the rest, the LM head and the expert stay on the host."""
    import torch

    from alpamayo_offload.model import build_meta, preset
    from bench.peers.hf_peers import module_bytes
    from bench.workloads_accelerate import estimate, offloaded_bytes

    model = build_meta(preset('2super'), torch.bfloat16)
    host, on_gpu = offloaded_bytes(model, 28 * 2**30)
    lm = model.vlm.model.language_model
    assert host['vit'] == 0
    assert host['lm'] == 38 * module_bytes(lm.layers[0]) + module_bytes(model.vlm.lm_head) + \
        module_bytes(lm.norm) + module_bytes(lm.rotary_emb)
    assert host['expert'] > 0 and on_gpu + sum(host.values()) == module_bytes(model)
    est = estimate(model, 28 * 2**30, 21, 10, {'e2e_s': 2.0, 'phases_s': {'decode': 1.05}})
    assert est.pass_s == pytest.approx(host['lm'] / 5.5e9 + 0.05)


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


def test_a_compressed_rows_plan_attaches_its_kept_layers_and_codec() -> None:
    """`--compression auto` rows: the plan's kept-compressed layers and compressed streaming
    reach the engine (zlib on the CPU), and the row's output equals the raw plan's."""
    import argparse

    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.planning import Placement

    args = argparse.Namespace(device='cpu')
    engine = Engine.from_config(EngineConfig(model='tiny', fixed_decode_tokens=3,
                                             diffusion_steps=2))
    try:
        inputs = engine.example_input()
        bench_workloads.attach_row(engine, 'planned', None, Placement.of({'lm': (0,)}), args)
        raw = engine.infer(inputs)
        assert engine.info.compression == 'off' and not any(engine.info.compressed_layers.values())
        packed = Placement.of({'lm': (0,)}, compressed={'lm': (1,)}, compression=True)
        bench_workloads.attach_row(engine, 'planned', None, packed, args)
        got = engine.infer(inputs)
        assert engine.info.compression == 'on'
        assert engine.info.compressed_layers['lm'] == (1,)
        assert engine.info.resident_layers['lm'] == (0,)
    finally:
        engine.close()
    assert (got.samples_xyz == raw.samples_xyz).all()
