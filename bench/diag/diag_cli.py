"""What the GPU diag scripts share: their command line and the paper's workload.

Every diag runs the paper's fixed workload (21 decode tokens, 10 diffusion steps, seed 0) on one
engine and writes under `--out`. Their figures up to 2026-11-30 05:00 UTC were taken with
transformers' op-by-op RMSNorm; `--per-op-norms` reproduces those, the default runs the
engine's default (fused norms).
"""
import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alpamayo_offload.engine import Engine, EngineConfig

DECODE_TOKENS = 21
DIFFUSION_STEPS = 10


def parse_args(doc: str, runs: int = 3, norms_flag: bool = True,
               more: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """Parse `--out`, `--runs` (>= 1), `--per-op-norms` (unless the diag sets the norms itself)
    and whatever `more` adds; make `--out`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--runs', type=int, default=runs)
    if norms_flag:
        ap.add_argument('--per-op-norms', action='store_true',
                        help="transformers' op-by-op RMSNorm (the figures before fused norms)")
    if more is not None:
        more(ap)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f'--runs {args.runs}: give at least 1')
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def paper_engine(*, fused_norms: bool, **config: Any) -> Engine:
    """The engine with nothing resident, running the paper's workload, with `config` on top."""
    return Engine.from_config(EngineConfig(
        budget_bytes=None, resident={}, max_decode_tokens=DECODE_TOKENS,
        fixed_decode_tokens=DECODE_TOKENS, diffusion_steps=DIFFUSION_STEPS, seed=0,
        fused_norms=fused_norms, **config))


def profiled_engine(*, fused_norms: bool) -> tuple[Engine, Any]:
    """The full-size engine loaded sequential and instrumented, and its profile (before host
    terms) taken as bench_planner takes it."""
    import torch

    from alpamayo_offload.profiling.gpu_profile import profile_engine

    engine = paper_engine(fused_norms=fused_norms, model='full', device='cuda',
                          mode='sequential', instrument=True)
    torch.cuda.synchronize()
    profile = profile_engine(engine, model='full', loaded_bytes=torch.cuda.memory_allocated(),
                             warmup=1, settings={'decode_tokens': DECODE_TOKENS,
                                                 'diffusion_steps': DIFFUSION_STEPS})
    return engine, profile


def synced_runs(engine: Engine, model_input: Any, runs: int) -> list[Any]:
    """`runs` results after one warm-up, each inference started on an idle GPU."""
    import torch

    engine.infer(model_input)
    got = []
    for _ in range(runs):
        torch.cuda.synchronize()
        got.append(engine.infer(model_input))
    return got
