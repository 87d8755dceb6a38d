"""`prefill-start`: is the prefill's first streamed LM layer in its slot when the prefill starts?

The runtime prefetches across phases: the last streamed ViT layer's hook starts the copy of the
first streamed LM layer, so that copy overlaps the end of vision and the prefill does not wait
for it; the predictor assumes so. This runs one plan (`--lm-resident` evenly spaced LM layers
resident) pipelined and instrumented and prints, for the last two streamed ViT calls and the
first four streamed LM calls of the prefill, each call's copy time and how long its compute
waited for the copy (`stall_ms`): a first LM stall near its copy time says the copy was not
overlapped. Runs on the CPU too (`--model tiny --device cpu`), where the copies are host copies.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from alpamayo_offload.planning.planner import interleaved_indices
from bench.diag.common import add_out, add_subcommand, out_dir, paper_engine


def register(sub: Any) -> None:
    """Add the `prefill-start` sub-command."""
    p = add_subcommand(sub, 'prefill-start', "is the prefill's first LM layer copied in time?",
                       __doc__)
    add_out(p, runs=2)
    p.add_argument('--lm-resident', type=int, default=14,
                   help='evenly spaced resident LM layers (default %(default)s)')
    p.add_argument('--model', default='full', help='preset or checkpoint (default %(default)s)')
    p.add_argument('--device', default='cuda')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print copy and stall of the calls around the prefill's start; exit 2 on bad input."""
    out = out_dir(args)
    engine = paper_engine(model=args.model, device=args.device, mode='pipelined',
                          pin_all_layers=True, instrument=True)
    n_lm = engine.info.layers['lm']
    if not 0 <= args.lm_resident <= n_lm:
        print(f"--lm-resident {args.lm_resident}: give 0 to {n_lm} (the model's LM layers)",
              file=sys.stderr)
        return 2
    engine.replan(resident={'lm': interleaved_indices(args.lm_resident, n_lm)},
                  mode='pipelined', instrument=True)
    model_input = engine.example_input(presized=True)
    engine.infer(model_input)                        # warm-up of this attach
    runs = []
    for _ in range(args.runs):
        engine.runtime_stats(reset=True)
        timings = engine.infer(model_input).timings
        calls = [c for c in engine.runtime_stats().calls if c.streamed]
        vit = [c for c in calls if c.sequence == 'vit'][-2:]
        prefill = [c for c in calls if c.sequence == 'lm' and c.repetition == 0][:4]
        runs.append({'timings_ms': {k: 1000 * v for k, v in timings.items()},
                     'calls': [{'sequence': c.sequence, 'layer': c.layer, 'dma_ms': c.dma_ms,
                                'stall_ms': c.stall_ms, 'exe_ms': c.exe_ms}
                               for c in vit + prefill]})
    (out / 'prefill_start.json').write_text(json.dumps(
        {'model': args.model, 'lm_resident': args.lm_resident, 'runs': runs}, indent=1) + '\n')
    for one in runs:
        print(f"prefill {one['timings_ms']['prefill']:.1f} ms; "
              + '; '.join(f"{c['sequence']}[{c['layer']}] dma {c['dma_ms']:.2f} stall "
                          f"{c['stall_ms']:.2f} exe {c['exe_ms']:.2f}" for c in one['calls']))
    return 0
