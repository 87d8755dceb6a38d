"""`kv-memory`: VRAM one inference needs per phase, against the working-set estimate.

Preload (every layer on the GPU, resident layers graphed, as bench_workloads' reference row),
per workload (`--workloads`: s1, s16, nav1, nav16 = 1 or 16 samples, with or without
navigation guidance), two inferences after a fresh attach (the first captures the graphs):
the peak of `torch.cuda.max_memory_allocated` over the memory allocated before the first, in
all and per phase, beside `Engine.working_set_bytes()`. `--reference` also runs each workload
with the prompt's K/V copied per row (testkit/repeated_cache.py: the cache as it was), to show
what the shared-prefix cache saves; `--row-chunk-bytes` sets the largest transient of the
masked attention's chunks of rows (model/row_chunks.py; a huge value runs every call whole, as
before chunking; the estimate assumes the default); `--deterministic` runs strict deterministic
algorithms (as bench_workloads' bit-exact pass).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from contextlib import nullcontext
from typing import Any

import torch

from alpamayo_offload.engine import core
from alpamayo_offload.engine.estimates import estimate_phase_peaks
from alpamayo_offload.engine.phases import _PhaseBridge
from alpamayo_offload.model import RolledRotaryAttention
from alpamayo_offload.profiling.gpu_profile import PROFILE_ROUTE
from bench.diag.common import add_out, add_subcommand, out_dir, paper_engine
from testkit.repeated_cache import repeated_cache

WORKLOADS = {'s1': (1, False), 's16': (16, False), 'nav1': (1, True), 'nav16': (16, True)}
GIB = 2**30


class _PeakBridge(_PhaseBridge):
    """The engine's phase bridge, also recording each phase's peak allocated bytes."""

    base = 0
    peaks: dict[str, int] = {}

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Start the phase's peak afresh."""
        torch.cuda.reset_peak_memory_stats()
        super().phase_start(phase, index, is_last)

    def phase_end(self, phase: str, index: int) -> None:
        """Keep the phase's peak over the base."""
        grown = torch.cuda.max_memory_allocated() - _PeakBridge.base
        _PeakBridge.peaks[phase] = max(_PeakBridge.peaks.get(phase, 0), grown)
        super().phase_end(phase, index)


def register(sub: Any) -> None:
    """Add the `kv-memory` sub-command."""
    p = add_subcommand(sub, 'kv-memory', 'VRAM of one inference per phase vs the estimate',
                       __doc__)
    add_out(p)
    p.add_argument('--model', default='1.5', help='preset or checkpoint (default %(default)s)')
    p.add_argument('--device', default='cuda')
    p.add_argument('--workloads', default='s1,s16,nav1,nav16')
    p.add_argument('--reference', action='store_true',
                   help='also run the per-row (repeated) cache')
    p.add_argument('--row-chunk-bytes', type=int, default=None,
                   help='cap of one chunk of masked attention rows (default: the model\'s)')
    p.add_argument('--deterministic', action='store_true')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Measure every workload (and its reference); print and write kv_memory.json."""
    out = out_dir(args)
    engine = paper_engine(model=args.model, device=args.device, mode='preload',
                          pin_all_layers=True, deterministic=args.deterministic)
    core._PhaseBridge = _PeakBridge
    if args.row_chunk_bytes is not None:
        for module in engine.model.modules():
            if isinstance(module, RolledRotaryAttention):
                module.row_chunk_bytes = args.row_chunk_bytes
    rows = []
    for name in args.workloads.split(','):
        samples, guided = WORKLOADS[name]
        engine.config = dataclasses.replace(engine.config, num_samples=samples,
                                            guidance_weight=1.5 if guided else None)
        model_input = engine.example_input(presized=True)
        if guided:
            model_input = dataclasses.replace(model_input, nav_text=PROFILE_ROUTE)
        for cache in ('shared', 'repeated') if args.reference else ('shared',):
            engine.replan(resident={}, mode='preload')      # no graphs of another workload
            torch.cuda.synchronize()
            _PeakBridge.base = torch.cuda.memory_allocated()
            _PeakBridge.peaks = {}
            torch.cuda.reset_peak_memory_stats()
            overall = 0
            with repeated_cache() if cache == 'repeated' else nullcontext():
                for _ in range(2):
                    engine.infer(model_input)
                    overall = max(overall, max(_PeakBridge.peaks.values()))
            row = {'workload': name, 'cache': cache, 'peak_bytes': overall,
                   'estimate_bytes': engine.working_set_bytes(), 'phases': _PeakBridge.peaks,
                   'phase_estimates': estimate_phase_peaks(
                       engine.model.cfg, engine.model.vlm.model.language_model.norm.weight
                       .element_size(), engine.config)}
            rows.append(row)
            print(f"{name:6} {cache:8} peak {overall / GIB:6.2f} GiB  estimate "
                  f"{row['estimate_bytes'] / GIB:6.2f} GiB  "
                  + ' '.join(f'{k} {v / GIB:.2f}' for k, v in row['phases'].items()), flush=True)
    (out / 'kv_memory.json').write_text(json.dumps({'model': args.model, 'rows': rows,
                                                    'row_chunk_bytes': args.row_chunk_bytes},
                                                   indent=1) + '\n')
    return 0
