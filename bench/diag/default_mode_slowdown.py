"""Why were our capped rows slower in default mode than in strict deterministic mode?

bench_peers run 2 on the H200 (2026-11-29): the planner's 16 GiB plan took 2.45 s in its
deterministic pass but 3.07 s (median of 3) in default mode, 14 GiB 2.46 vs 3.98 s, while preload
was faster in default mode. Suspects: the attention kernel default mode picks (cuDNN SDPA, whose
workspace is allocated per call) and the allocator freeing cached blocks (a device-wide sync)
when a capped process runs short. Each variant below changes one thing; the table names the cause.
Run 3 (H200, 2026-11-29 23:15 UTC) did not reproduce it: default mode was 4-9 % faster than strict,
no allocator retries (docs/benchmarks.md section 4).

    python3 bench/diag/default_mode_slowdown.py [--runs 3]
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from alpamayo_offload.engine import Engine, EngineConfig  # noqa: E402

GIB = 1 << 30
# The planner's plans of bench_peers run 2 (docs/results/2026-11-29-h200/run2/rows.jsonl).
PLANS = {
    16: {'vit': (0,), 'lm': tuple(i for i in range(36) if i not in (18, 26)), 'expert': (0, 34)},
    14: {'vit': (0,), 'lm': (0, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 14, 15, 16, 17, 19, 20, 21, 23,
                             24, 25, 27, 28, 29, 31, 32, 33, 34, 35)},
}
VARIANTS = [  # (name, cap GiB or None, deterministic, cuDNN SDPA enabled)
    ('default mode', 16, False, True),
    ('strict deterministic', 16, True, True),
    ('default mode, cuDNN SDPA off', 16, False, False),
    ('default mode, no cap', None, False, True),
    ('default mode', 14, False, True),
    ('strict deterministic', 14, True, True),
    ('default mode, cuDNN SDPA off', 14, False, False),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--runs', type=int, default=3)
    args = ap.parse_args()
    engine = Engine.from_config(EngineConfig(model='full', device='cuda', mode='sequential',
                                             fixed_decode_tokens=21, diffusion_steps=10))
    inp = engine.example_input()
    total = torch.cuda.get_device_properties(0).total_memory
    rows = []
    for name, cap, strict, cudnn in VARIANTS:
        plan_cap = cap or 16
        torch.cuda.set_per_process_memory_fraction((cap * GIB if cap else total) / total)
        engine.replan(resident=PLANS[plan_cap], mode='pipelined', embed_on_host=True,
                      budget_bytes=plan_cap * GIB)
        torch.use_deterministic_algorithms(strict)
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        try:
            engine.infer(inp)                                       # warm-up
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_stats().get('num_alloc_retries', 0)
            times, decode = [], []
            for _ in range(args.runs):
                torch.cuda.synchronize()
                start = time.perf_counter()
                result = engine.infer(inp)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
                decode.append(result.timings.get('decode', 0.0))
            retries = torch.cuda.memory_stats().get('num_alloc_retries', 0) - before
        finally:
            torch.use_deterministic_algorithms(False)
            torch.backends.cuda.enable_cudnn_sdp(True)
        rows.append((f'{plan_cap} GiB plan, {name}', cap, statistics.median(times),
                     statistics.median(decode), retries,
                     torch.cuda.max_memory_reserved() / GIB))
        print(rows[-1], flush=True)
    print(f'\n| variant | cap GiB | e2e s (median of {args.runs}) | decode s | alloc retries '
          '| peak reserved GiB |\n|---|---|---|---|---|---|')
    for name, cap, e2e, dec, retries, peak in rows:
        print(f'| {name} | {cap or "-"} | {e2e:.3f} | {dec:.3f} | {retries} | {peak:.2f} |')


if __name__ == '__main__':
    main()
