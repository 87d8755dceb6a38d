"""Raw vs compressed streaming vs preload on one model, same input, per VRAM budget.

For each budget the raw plan keeps as many interleaved language-model layers resident as fit
(planning.interleaved_indices) and streams the rest raw; the compressed plan keeps the same
layers (one fewer while the staging buffers do not fit) and streams the rest compressed
(runtime/codec.py: nvCOMP ANS on CUDA). Each row: median latency of `--reps` inferences after
`--warmup`, streamed bytes, effective bandwidth (uncompressed bytes delivered per second of
the streaming phases), pinned bytes, attach (compression) time, and whether the trajectory
equals the preload one. Weights are the preset's random N(0, 0.02) BF16 weights (say so in
docs/benchmarks.md). The predictor does not price compression yet: predictions are not given.

    python -m bench.bench_compress --out $OUT --budget-s 520           # H200, full-size R1
    python -m bench.bench_compress --out /tmp/c --model tiny --device cpu --budgets 1
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from alpamayo_offload.engine import Engine, EngineConfig, EngineError
from alpamayo_offload.planning.planner import interleaved_indices

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
