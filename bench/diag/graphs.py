"""`graphs`: CUDA graphs on resident layers, off and on: phase times, VRAM, bits.

Resident layers replayed as CUDA graphs (`EngineConfig.layer_graphs`) cost the host one launch
instead of one per kernel, which matters where a pass is bound by the host issuing kernels:
near-resident plans, decode above all. On the full-size model this times the paper's plan
with 31 of 36 LM layers resident, everything resident, and `--plan` if given, each with graphs
off and on, alternating in `--rounds` so drift of the machine hits both alike. Per attach it
records the memory the capturing inference kept, the peak allocated over the plan's base, and
the allocator's segments by memory pool and stream (the graphs' private pool shows apart), to
compare with `estimate_graph_bytes`. Then, in strict deterministic mode, it checks that graphs
change no bit: graphed runs (the capturing one, then a replaying one) against eager preload.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from alpamayo_offload.engine import Engine
from alpamayo_offload.engine.estimates import estimate_graph_bytes
from alpamayo_offload.planning.planner import interleaved_indices
from bench.diag.common import (
    Plan,
    add_out,
    add_plan,
    add_subcommand,
    out_dir,
    paper_engine,
    plan_from_file,
)

MIB = 2**20
PHASES = ('vision', 'prefill', 'decode', 'diffusion', 'total')
# name -> (mode, resident set and embedding placement)
Plans = dict[str, tuple[str, Plan]]


def register(sub: Any) -> None:
    """Add the `graphs` sub-command."""
    p = add_subcommand(sub, 'graphs', 'CUDA graphs on resident layers: time, VRAM, bits', __doc__)
    add_out(p, runs=4)
    add_plan(p)
    p.add_argument('--rounds', type=int, default=2,
                   help='visits of every plan, graphs off then on (default %(default)s)')
    p.set_defaults(func=run)


def _plans(n_lm: int, plan_file: Plan | None) -> Plans:
    plans: Plans = {f'paper k = {n_lm - 5}': (
        'pipelined', ({'lm': interleaved_indices(n_lm - 5, n_lm)}, False))}
    if plan_file is not None:
        plans['--plan'] = ('pipelined', plan_file)
    plans['all resident'] = ('preload', ({}, False))
    return plans


def _attach(engine: Engine, plan: tuple[str, Plan], graphs: bool) -> None:
    mode, (resident, on_host) = plan
    engine.replan(resident=resident, mode=mode, embed_on_host=on_host, layer_graphs=graphs)


def _segments() -> dict[str, list[float]]:
    """Return 'pool, stream' -> [segments, reserved MiB, allocated MiB] of the allocator."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for seg in torch.cuda.memory._snapshot()['segments']:
        key = f"pool {tuple(seg.get('segment_pool_id', ()))}, stream {seg['stream']}"
        out[key][0] += 1
        out[key][1] += seg['total_size'] / MIB
        out[key][2] += seg['allocated_size'] / MIB
    return dict(out)


def _timed(engine: Engine, model_input: Any, runs: int) -> dict[str, Any]:
    """Run one (capturing) warm-up, then `runs` timed inferences; record time and memory."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    engine.infer(model_input)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    ms: dict[str, list[float]] = {p: [] for p in PHASES}
    for _ in range(runs):
        torch.cuda.synchronize()
        timings = engine.infer(model_input).timings
        for p in PHASES:
            ms[p].append(1000 * timings[p])
    torch.cuda.synchronize()
    return {'ms': ms, 'kept_by_capture_mib': grown / MIB,
            'peak_over_base_mib': (torch.cuda.max_memory_allocated() - base) / MIB,
            'captured': engine.info.layer_graphs, 'segments': _segments()}


def _bit_check(engine: Engine, model_input: Any, plans: Plans) -> list[dict[str, Any]]:
    """Compare graphed runs of every plan with eager preload, in strict deterministic mode."""
    torch.use_deterministic_algorithms(True)
    try:
        _attach(engine, ('preload', ({}, False)), graphs=False)
        ref = engine.infer(model_input)
        out = []
        for name, plan in plans.items():
            _attach(engine, plan, graphs=True)
            for run in range(2):                 # the capturing run, then a replaying one
                got = engine.infer(model_input)
                out.append({'plan': name, 'run': run,
                            'tokens_equal': got.coc_token_ids == ref.coc_token_ids,
                            'xyz_equal': bool(np.array_equal(got.samples_xyz, ref.samples_xyz)),
                            'max_abs_dxyz': float(np.max(np.abs(got.samples_xyz
                                                                - ref.samples_xyz)))})
    finally:
        torch.use_deterministic_algorithms(False)
    return out


def run(args: argparse.Namespace) -> int:
    """Time, measure and bit-check every plan; exit 1 if graphs changed a bit."""
    out = out_dir(args)
    engine = paper_engine(model='full', device='cuda', mode='preload', pin_all_layers=True)
    model_input = engine.example_input(presized=True)
    plans = _plans(engine.info.layers['lm'], plan_from_file(args.plan) if args.plan else None)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {'off': [], 'on': []} for name in plans}
    for _ in range(args.rounds):
        for name, plan in plans.items():
            for graphs in (False, True):
                _attach(engine, plan, graphs)
                results[name]['on' if graphs else 'off'].append(
                    _timed(engine, model_input, args.runs))
    bits = _bit_check(engine, model_input, plans)
    estimate = estimate_graph_bytes(engine.model.cfg, 2, num_samples=1)
    (out / 'graphs.json').write_text(json.dumps(
        {'results': results, 'bits': bits, 'estimate_graph_bytes': estimate}, indent=1) + '\n')
    print(f'graph memory estimate {estimate / MIB:.0f} MiB')
    print(f'{"plan":20s} {"graphs":6s} ' + ' '.join(f'{p:>16s}' for p in PHASES)
          + '  captured  kept MiB  peak+ MiB')
    for name, by in results.items():
        for key, rounds in by.items():
            cells = []
            for p in PHASES:
                vals = [v for r in rounds for v in r['ms'][p]]
                cells.append(f'{statistics.median(vals):7.1f} {min(vals):4.0f}-{max(vals):<4.0f}')
            kept = max(r['kept_by_capture_mib'] for r in rounds)
            peak = max(r['peak_over_base_mib'] for r in rounds)
            print(f'{name:20s} {key:6s} ' + ' '.join(f'{c:>16s}' for c in cells)
                  + f'  {rounds[-1]["captured"]:8d}  {kept:8.1f}  {peak:9.1f}')
    for b in bits:
        print(f'bits {b["plan"]:20s} run {b["run"]}: tokens equal {b["tokens_equal"]}, '
              f'xyz equal {b["xyz_equal"]} (max |dxyz| {b["max_abs_dxyz"]:.3g})')
    return 0 if all(b['tokens_equal'] and b['xyz_equal'] for b in bits) else 1
