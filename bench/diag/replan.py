"""`replan`: what does re-planning a loaded model cost, with and without the pinned host store?

Loads a model (`EngineConfig(pin_all_layers=...)`), times two re-plans (the first LM layer
resident, then none) and reports the process's peak RSS and the host store's size. Without the
store a re-plan copies every streamed layer back out and packs (and, on CUDA, pins) them again;
with it, layers are re-pointed at their store regions and only resident ones are copied. Runs
on the CPU with a small preset.
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

from alpamayo_offload.engine import Engine, EngineConfig
from bench.diag.common import add_out, add_subcommand, out_dir


def register(sub: Any) -> None:
    """Add the `replan` sub-command."""
    p = add_subcommand(sub, 'replan', 'time and host memory of a re-plan', __doc__)
    add_out(p)
    p.add_argument('--model', default='layers=2,vit=2',
                   help='preset or checkpoint (default %(default)s)')
    p.add_argument('--device', default='cpu')
    p.add_argument('--pin-all-layers', action='store_true', help='keep the pinned host store')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load, re-plan twice, print and write the times and memory."""
    out = out_dir(args)
    t0 = time.perf_counter()
    engine = Engine.from_config(EngineConfig(
        model=args.model, device=args.device, mode='pipelined', dtype='bfloat16',
        pin_all_layers=args.pin_all_layers, max_decode_tokens=2, fixed_decode_tokens=2,
        diffusion_steps=1))
    loaded = time.perf_counter() - t0
    replans = []
    for resident in ({'lm': (0,)}, {}):
        t0 = time.perf_counter()
        engine.replan(resident=resident, mode='pipelined')
        replans.append(round(time.perf_counter() - t0, 3))
    result = {'model': args.model, 'device': args.device,
              'pin_all_layers': args.pin_all_layers, 'load_s': round(loaded, 1),
              'replan_s': replans,
              'peak_rss_gib': round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
              'host_store_gib': round(engine.info.host_store_bytes / 2**30, 2)}
    (out / 'replan.json').write_text(json.dumps(result, indent=1) + '\n')
    print(json.dumps(result))
    return 0
