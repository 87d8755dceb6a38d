"""Raw vs compressed streaming vs preload on one model, same input, per VRAM budget.

For each budget the raw plan keeps as many interleaved language-model layers resident as fit
(planning.interleaved_indices) and streams the rest raw; the compressed plan keeps the same
layers (one fewer while the staging buffers do not fit) and streams the rest compressed
(runtime/codec.py: nvCOMP ANS on CUDA). Each row: median latency of `--reps` inferences after
`--warmup`, streamed bytes, effective bandwidth (uncompressed bytes delivered per second of
the streaming phases), pinned bytes, attach (compression) time, and whether the trajectory
equals the preload one. Weights are the preset's random N(0, 0.02) BF16 weights (say so in
docs/benchmarks.md).

`--plan-from PROFILE` instead plans each budget with the planner from a profile with compression
terms (`alpamayo-offload profile`): the raw plan (`PlannerOptions(compression='off')`), the
best compressed one (`compression='on'`) and the planned one (compression where it pays; not
measured again when it is one of the other two), and prints each row's predicted against
measured latency (the total in the table, each phase in rows.json). `--plan-from synthetic`
plans from a profile made up from the loaded model's layer sizes (`_SYNTHETIC`: a slow link, so
that compression pays): it exercises the command on the CPU, its predictions mean nothing.

    python -m bench.bench_compress --out $OUT --budget-s 520           # H200, full-size R1
    python -m bench.bench_compress --out /tmp/c --model tiny --device cpu --budgets 1
    python -m bench.bench_compress --out $OUT --plan-from profile.json --budgets 8,12,16
    python -m bench.bench_compress --out /tmp/c --model tiny --device cpu --plan-from synthetic \
        --budgets 0.5225,0.6 --reps 1 --warmup 0
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from alpamayo_offload.engine import Engine, EngineConfig, EngineError
from alpamayo_offload.planning.errors import BudgetError, PlanningError
from alpamayo_offload.planning.planner import (
    PlannerOptions,
    PlanResult,
    interleaved_indices,
    plan,
)
from alpamayo_offload.planning.predictor import Placement, Workload
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
    load_profile,
)

LOG = logging.getLogger('bench_compress')
GIB = 2**30


def _fit(engine: Engine, budget: int, compression: str, start: int) -> tuple[int, float]:
    """Attach the largest interleaved-LM plan (k <= start) that fits; return k and attach s."""
    n_lm = len(engine.model.layer_sequences()['lm'])
    for k in range(start, -1, -1):
        t0 = time.perf_counter()
        try:
            engine.replan(resident={'lm': interleaved_indices(k, n_lm)}, mode='pipelined',
                          budget_bytes=budget, compression=compression)
        except EngineError:
            continue
        return k, time.perf_counter() - t0
    raise EngineError(f'no plan fits {budget / GIB:.1f} GiB with compression={compression}')


def _row(engine: Engine, inputs: Any, warmup: int, reps: int, ref: Any) -> dict[str, Any]:
    for _ in range(warmup):
        engine.infer(inputs)
    runs = [engine.infer(inputs) for _ in range(reps)]
    total = statistics.median(r.timings['total'] for r in runs)
    phases = {p: statistics.median(r.timings[p] for r in runs)
              for p in ('vision', 'prefill', 'decode', 'diffusion')}
    streamed = runs[-1].streaming['bytes_streamed']
    model_s = sum(phases.values())
    return {'total_s': total, 'phases_s': phases, 'bytes_streamed_raw': streamed,
            'effective_gb_s': streamed / model_s / 1e9 if model_s else 0.0,
            'pinned_bytes': engine.info.pinned_bytes,
            'exact': ref is None or bool(np.array_equal(runs[-1].samples_xyz, ref.samples_xyz)
                                         and runs[-1].coc_token_ids == ref.coc_token_ids)}


# What `--plan-from synthetic` assumes: link GB/s, compressed/raw, decompression GB/s, layer ms.
_SYNTHETIC = (1.0, 0.69, 300.0, 0.01)
_PHASES = (('vision', 'vit', 'once'), ('prefill', 'lm', 'once'), ('decode', 'lm', 'decode'),
           ('diffusion', 'expert', 'diffusion'))


def synthetic_profile(engine: Engine) -> Profile:
    """A made-up profile of the loaded model's layer sizes (`_SYNTHETIC`), for a dry run."""
    link, ratio, decode, layer_ms = _SYNTHETIC
    sequences = []
    for name, sizes in engine.layer_footprints().items():
        packed = tuple(f.packed_bytes for f in sizes)
        sequences.append(SequenceProfile(
            name=name, layer_bytes=packed, dma_ms=tuple(b / (link * 1e6) for b in packed),
            resident_bytes=tuple(f.resident_bytes for f in sizes),
            slot_bytes=tuple(f.slot_bytes for f in sizes),
            compressed_bytes=tuple(max(1, int(b * ratio)) for b in packed),
            decompress_gbps=decode, decompress_contention=0.1))
    lengths = {s.name: s.n_layers for s in sequences}
    phases = tuple(PhaseProfile(name, seq, repeats, ((layer_ms,) * lengths[seq],), (0.0,))
                   for name, seq, repeats in _PHASES)
    info = engine.info
    return Profile(model_identity='synthetic',
                   machine=MachineInfo('synthetic', pinned_h2d_gbps=link),
                   sequences=tuple(sequences), phases=phases,
                   vram=VramProfile(info.fixed_bytes, info.embed_bytes, info.working_set_bytes))


def _apply(engine: Engine, placement: Placement, budget: int) -> float:
    """Attach `placement` under `budget`; return the attach (and compression) time in s."""
    t0 = time.perf_counter()
    engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                  compressed={s: placement.compressed_indices(s) for s in placement.compressed},
                  compression='on' if placement.compression else 'off', mode='pipelined',
                  budget_bytes=budget, embed_on_host=placement.embed_on_host)
    return time.perf_counter() - t0


def planned_rows(engine: Engine, profile: Profile, budgets: list[float], inputs: Any,
                 args: argparse.Namespace, ref: Any, start: float) -> list[dict[str, Any]]:
    """Measure the raw and the planned plan of each budget against their predictions."""
    # The engine's budget check counts the working set for its own decode-token limit.
    options = PlannerOptions(workload=Workload(21, 10),
                             max_decode_tokens=engine.config.max_decode_tokens)
    rows: list[dict[str, Any]] = []
    for gib in budgets:
        budget = int(gib * GIB)
        try:
            raw = plan(profile, budget, dataclasses.replace(options, compression='off'))
            best = plan(profile, budget, options)
        except BudgetError as err:
            rows.append({'budget_gib': gib, 'plan': 'raw', 'skipped': str(err)})
            continue
        try:
            packed: PlanResult | None = plan(profile, budget,
                                             dataclasses.replace(options, compression='on'))
        except PlanningError as err:
            packed = None
            rows.append({'budget_gib': gib, 'plan': 'compressed', 'skipped': str(err)})
        for kind, result in (('raw', raw), ('compressed', packed), ('planned', best)):
            if result is None:
                continue
            placement = result.placement
            head = {'budget_gib': gib, 'plan': kind, 'compression': placement.compression,
                    'resident': {s: list(placement.indices(s)) for s in placement.resident},
                    'compressed': {s: list(placement.compressed_indices(s))
                                   for s in placement.compressed},
                    'embed_on_host': placement.embed_on_host,
                    'predicted_s': result.prediction.total_s,
                    'predicted_phases_s': {p.name: p.wall_ms / 1000 for p in
                                           result.prediction.phases}}
            twin = next((k for k, r in (('raw', raw), ('compressed', packed))
                         if k != kind and r is not None and r.placement == placement), None)
            if kind == 'planned' and twin:
                rows.append({**head, 'skipped': f'same plan as {twin}'})
                continue
            if time.perf_counter() - start > args.budget_s:
                rows.append({**head, 'skipped': 'time budget'})
                continue
            try:
                attach_s = _apply(engine, placement, budget)
            except EngineError as err:
                rows.append({**head, 'skipped': str(err)})
                continue
            row = _row(engine, inputs, args.warmup, args.reps, ref)
            rows.append({**head, 'attach_s': attach_s, **row,
                         'error': row['total_s'] / result.prediction.total_s - 1})
            LOG.info('%s', rows[-1])
    return rows


def _print_planned(rows: list[dict[str, Any]]) -> None:
    raw = {r['budget_gib']: r['total_s'] for r in rows if r['plan'] == 'raw' and 'total_s' in r}
    print(f"{'budget':>7} {'plan':>8} {'compr':>5} {'res/kept':>9} {'pred s':>7} {'meas s':>7} "
          f"{'error':>7} {'x raw':>6} {'GB/s eff':>8} exact")
    for r in rows:
        if 'predicted_s' not in r:
            print(f"{r['budget_gib']!s:>7} {r['plan']:>8} skipped: {r['skipped']}")
            continue
        counts = (f"{sum(map(len, r['resident'].values()))}/"
                  f"{sum(map(len, r['compressed'].values()))}")
        lead = (f"{r['budget_gib']!s:>7} {r['plan']:>8} {'on' if r['compression'] else 'off':>5} "
                f"{counts:>9} {r['predicted_s']:7.3f}")
        if 'skipped' in r:
            print(f"{lead} skipped: {r['skipped']}")
            continue
        ratio = r['total_s'] / raw[r['budget_gib']] if r['budget_gib'] in raw else float('nan')
        print(f"{lead} {r['total_s']:7.3f} {100 * r['error']:+6.2f}% {ratio:6.2f} "
              f"{r['effective_gb_s']:8.1f} {r['exact']}")


def main(argv: list[str] | None = None) -> int:
    """Run the rows within the time budget; write rows.json and print a table last."""
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--model', default='full')
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--budgets', default='8,12,16', help='VRAM budgets in GiB')
    ap.add_argument('--warmup', type=int, default=1)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--budget-s', type=float, default=520.0, help='wall-clock budget')
    ap.add_argument('--plan-from', default=None,
                    help='plan each budget from this profile (or "synthetic") and print '
                         'predicted vs measured')
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s')
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    config = EngineConfig(model=args.model, device=args.device, mode='pipelined',
                          fixed_decode_tokens=21, diffusion_steps=10, deterministic=True,
                          compression='off')
    engine = Engine.load(config)
    inputs = engine.example_input(presized=True)
    rows: list[dict[str, Any]] = []
    try:
        engine.replan(resident={}, mode='preload')
        ref_row = _row(engine, inputs, args.warmup, args.reps, None)
        ref = engine.infer(inputs)
        rows.append({'budget_gib': None, 'plan': 'preload', **ref_row})
        if args.plan_from:
            profile = synthetic_profile(engine) if args.plan_from == 'synthetic' \
                else load_profile(args.plan_from)[0]
            planned = planned_rows(engine, profile, [float(b) for b in args.budgets.split(',')],
                                   inputs, args, ref, start)
            (args.out / 'rows.json').write_text(json.dumps(rows + planned, indent=2))
            _print_planned(planned)
            return 0
        n_lm = len(engine.model.layer_sequences()['lm'])
        for gib in (float(b) for b in args.budgets.split(',')):
            budget = int(gib * GIB)
            k_raw = n_lm
            for compression in ('off', 'on'):
                if time.perf_counter() - start > args.budget_s:
                    rows.append({'budget_gib': gib, 'plan': compression,
                                 'skipped': 'time budget'})
                    continue
                try:
                    k, attach_s = _fit(engine, budget, compression, k_raw)
                except EngineError as err:
                    rows.append({'budget_gib': gib, 'plan': compression, 'skipped': str(err)})
                    continue
                k_raw = k if compression == 'off' else k_raw
                row = _row(engine, inputs, args.warmup, args.reps, ref)
                rows.append({'budget_gib': gib, 'plan': 'raw' if compression == 'off'
                             else 'compressed', 'resident_lm': k, 'attach_s': attach_s, **row})
                LOG.info('%s', rows[-1])
    finally:
        engine.close()
    (args.out / 'rows.json').write_text(json.dumps(rows, indent=2))
    raw = {r['budget_gib']: r['total_s'] for r in rows if r.get('plan') == 'raw'}
    print(f"{'budget':>7} {'plan':>10} {'lm res':>6} {'total s':>8} {'x raw':>6} "
          f"{'GB/s eff':>8} {'pinned GiB':>10} {'attach s':>8} exact")
    for r in rows:
        if 'skipped' in r:
            print(f"{r['budget_gib']!s:>7} {r['plan']:>10} skipped: {r['skipped']}")
            continue
        ratio = r['total_s'] / raw[r['budget_gib']] if r['budget_gib'] in raw else float('nan')
        print(f"{r['budget_gib']!s:>7} {r['plan']:>10} {r.get('resident_lm', '-')!s:>6} "
              f"{r['total_s']:8.3f} {ratio:6.2f} {r['effective_gb_s']:8.1f} "
              f"{r['pinned_bytes'] / GIB:10.2f} {r.get('attach_s', 0.0):8.1f} {r['exact']}")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
