"""Bisect a full-size bit-exactness failure: preload vs each offload variant, deterministic mode.

Seen on the H200 on 2026-11-29 (bench_peers): ours differed from preload by 0.32-0.43 m in the
deterministic pass. Cause, found with this script: bench_peers switched deterministic algorithms
on with `warn_only=True`, under which PyTorch still picks cuDNN and split-key attention; even two
preload runs then differed by 0.7 m, silently. In strict mode (`warn_only=False`, as now here and
in `EngineConfig(deterministic=True)`) the script's earlier variant list (no cap, no teardown:
preload, embedding on host, sequential, pipelined, planner-like plans) was bit-exact, and so was
every bench_peers row of run 2; this version, with VRAM caps and `--home`, has not yet run in strict
mode. It runs bench_peers' way: engine built non-deterministic, deterministic mode switched on
around each inference, optional VRAM cap, optional bench_peers teardown between rows (`--home`).

    python3 bench/diag/bitexact_full.py [--model full] [--home]
"""
import argparse
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from alpamayo_offload.engine import Engine, EngineConfig  # noqa: E402

GIB = 1 << 30
PLAN = {'vit': (0,), 'lm': tuple(range(1, 29)), 'expert': (6, 28)}
VARIANTS = [
    ('preload again', dict(mode='preload')),
    ('pipelined, nothing resident', dict(mode='pipelined')),
    ('pipelined, nothing resident, capped 16 GiB', dict(mode='pipelined', cap=16 * GIB)),
    ('pipelined, plan, embedding on host', dict(mode='pipelined', embed_on_host=True,
                                                resident=PLAN)),
    ('pipelined, plan, embedding on host, capped 16 GiB', dict(
        mode='pipelined', embed_on_host=True, resident=PLAN, cap=16 * GIB)),
    ('preload, after the others', dict(mode='preload')),
]


def infer(engine: Engine, inp):
    """One inference with deterministic algorithms on (strict, as bench_peers); warnings."""
    torch.use_deterministic_algorithms(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            out = engine.infer(inp)
    finally:
        torch.use_deterministic_algorithms(False)
    return out, sorted({str(w.message)[:160] for w in caught})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='full')
    ap.add_argument('--home', action='store_true', help="bench_peers' teardown between rows")
    args = ap.parse_args()
    engine = Engine.from_config(EngineConfig(model=args.model, device='cuda', mode='preload',
                                             fixed_decode_tokens=21, diffusion_steps=10))
    home = None
    if args.home:
        from peers.home import HomeCopy
        engine.close()
        for module in engine.model.non_layer_modules().values():
            module.to('cpu')
        home = HomeCopy(engine.model)
        home.restore()
        engine.replan(resident={}, mode='preload')
    inp = engine.example_input()
    ref, warned = infer(engine, inp)
    print(f'reference: tokens {ref.coc_token_ids[:8]}..., final waypoint {ref.xyz[-1]}')
    for w in warned:
        print('  warning:', w)
    total = torch.cuda.get_device_properties(0).total_memory
    for name, kw in VARIANTS:
        if home is not None:
            engine.close()
            home.restore()
        torch.cuda.set_per_process_memory_fraction(kw.get('cap', total) / total)  # as bench_peers
        engine.replan(resident=kw.get('resident', {}), mode=kw['mode'],
                      embed_on_host=kw.get('embed_on_host', False), budget_bytes=kw.get('cap'))
        got, warned = infer(engine, inp)
        diff = float(np.max(np.abs(got.samples_xyz - ref.samples_xyz)))
        first = next((i for i, (a, b) in enumerate(zip(got.coc_token_ids, ref.coc_token_ids,
                                                        strict=False)) if a != b), None)
        print(f'{name:50s} max|dxyz| {diff:.3g}  first differing token {first}', flush=True)
        for w in warned:
            print('  warning:', w)
    torch.cuda.synchronize()


if __name__ == '__main__':
    main()
