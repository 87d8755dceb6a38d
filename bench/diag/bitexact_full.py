"""Bisect a full-size bit-exactness failure: preload vs each offload variant, deterministic mode.

Seen on the H200 on 2026-11-29 (bench_peers): the planner's plan (embedding on the host, ViT
block 0, 34 LM and 2 expert layers resident) differed from preload by 0.32 m in the deterministic
pass, while the tiny model and a 36 x 368 MiB synthetic stack were bit-exact. Each variant below
changes one thing; the first one that differs names the cause.

    python3 bench/diag/bitexact_full.py [--model full]
"""
import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from alpamayo_offload.engine import Engine, EngineConfig  # noqa: E402

LM_PLAN = tuple(i for i in range(36) if i != 29)
VARIANTS = [
    ('preload again', dict(mode='preload')),
    ('preload, embedding on host', dict(mode='preload', embed_on_host=True)),
    ('sequential, nothing resident', dict(mode='sequential')),
    ('pipelined, nothing resident', dict(mode='pipelined')),
    ('pipelined, planner-like plan, embedding on GPU',
     dict(mode='pipelined', resident={'vit': (0,), 'lm': LM_PLAN[:30], 'expert': (6, 28)})),
    ('pipelined, planner-like plan, embedding on host',
     dict(mode='pipelined', embed_on_host=True,
          resident={'vit': (0,), 'lm': LM_PLAN[:30], 'expert': (6, 28)})),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='full')
    args = ap.parse_args()
    engine = Engine.from_config(EngineConfig(model=args.model, device='cuda', mode='preload',
                                             fixed_decode_tokens=21, diffusion_steps=10,
                                             deterministic=True))
    inp = engine.example_input()
    ref = engine.infer(inp)
    print(f'reference: tokens {ref.coc_token_ids[:8]}..., final waypoint {ref.xyz[-1]}')
    for name, kw in VARIANTS:
        engine.replan(resident=kw.get('resident', {}), mode=kw['mode'],
                      embed_on_host=kw.get('embed_on_host', False))
        got = engine.infer(inp)
        diff = float(np.max(np.abs(got.samples_xyz - ref.samples_xyz)))
        first = next((i for i, (a, b) in enumerate(zip(got.coc_token_ids, ref.coc_token_ids,
                                                        strict=False)) if a != b), None)
        print(f'{name:50s} max|dxyz| {diff:.3g}  first differing token {first}', flush=True)
    torch.cuda.synchronize()


if __name__ == '__main__':
    main()
