"""Why does the profile's host pre/postprocessing term come out above the rows' own?

In runs 6-8 of bench_planner (H200, 2026-11-30) the profile's term (median of 3 inferences
taken in `add_host_terms`, synced since run 8) was 74-79 ms while the rows measured 43-63 ms
later in the same process. One command, uncapped, the paper's workload, in the bench's order:

1. the profile as bench_planner takes it, its term over --runs inferences (timed first in
   `add_host_terms` when run 8 ran this, 2026-11-30 06:36 UTC; timed last since 077734f);
2. nothing resident (the profile's own plan) again, --runs synced inferences;
3. 30 of 36 LM layers resident, --runs synced inferences, every other one with Python's
   garbage collector off: whether collections of the objects a big plan holds land in
   preprocessing.

    python3 bench/diag/pre_post.py --out $OUT/pre_post [--runs 6]
"""
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from diag_cli import parse_args, profiled_engine  # noqa: E402

from alpamayo_offload.planning.planner import interleaved_indices  # noqa: E402
from alpamayo_offload.profiling.gpu_profile import add_host_terms  # noqa: E402


def pre_post_ms(engine: object, model_input: object) -> tuple[float, float]:
    """(preprocess, postprocess) ms of one inference started on an idle GPU."""
    torch.cuda.synchronize()
    t = engine.infer(model_input).timings
    return 1000 * t['preprocess'], 1000 * t['postprocess']


def main() -> None:
    args = parse_args(__doc__, runs=6)
    start = time.perf_counter()
    engine, profile = profiled_engine(fused_norms=not args.per_op_norms)
    model_input = engine.example_input(presized=True)
    profile = add_host_terms(engine, model_input, profile, args.runs)
    found = {'profile_runs_ms': profile.settings['host_pre_post_runs_ms'],
             'profile_host_ms': profile.host_ms}
    engine.replan(resident={}, mode='pipelined', budget_bytes=None, embed_on_host=False)
    engine.infer(model_input)
    found['nothing_resident'] = [pre_post_ms(engine, model_input) for _ in range(args.runs)]
    engine.replan(resident={'lm': list(interleaved_indices(30, 36))}, mode='pipelined',
                  budget_bytes=None, embed_on_host=False)
    engine.infer(model_input)
    gc_on, gc_off = [], []
    for i in range(args.runs):
        if i % 2:
            gc.disable()
            gc_off.append(pre_post_ms(engine, model_input))
            gc.enable()
        else:
            gc_on.append(pre_post_ms(engine, model_input))
    found.update({'lm30_gc_on': gc_on, 'lm30_gc_off': gc_off,
                  'wall_s': time.perf_counter() - start})
    (args.out / 'pre_post.json').write_text(json.dumps(found, indent=1) + '\n')
    print(f"profile term {found['profile_host_ms']:.1f} ms, runs "
          f"{[round(x) for x in found['profile_runs_ms']]}")
    for key in ('nothing_resident', 'lm30_gc_on', 'lm30_gc_off'):
        runs = found[key]
        print(f'{key:18s} pre+post median {statistics.median(a + b for a, b in runs):.1f} ms; '
              f'pre {[round(a) for a, _ in runs]} post {[round(b, 1) for _, b in runs]}')


if __name__ == '__main__':
    main()
