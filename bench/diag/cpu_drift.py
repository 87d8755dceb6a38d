"""Do the near-resident plans' misses follow the CPU's speed of the moment, run by run?

bench_planner run 11 (H200, 2026-11-30, docs/benchmarks.md section 3): every row of 8-10 GiB
came within 0.27 % end to end, but plans with 30-32 of 36 LM layers resident ran their decode
4-15 % above prediction while the CPU's kernel-issue probe moved between 6.8 and 11.6 µs. Their
decode issues ~25 ms of host work a pass against 28-35 ms of copies, so a slower CPU makes it
host-bound. This takes one profile (--profile, from bench_planner on the same kind of machine)
and times the 16 GiB plan chosen with CPU headroom 1, 1.33 and 1.5 (`PlannerOptions`) and the
paper's k = 30 and 31, --rounds visits of --runs inferences each (plans alternate between
visits), probing the CPU's issue speed before each run: per run, decode measured against decode
predicted at the profile's CPU speed and at the probed one. No VRAM cap (a cap changes what
fits, not the speed). Run 11c's table (a pinned-core row, no headroom rows) came from 3ecae48.

    python3 bench/diag/cpu_drift.py --out $OUT/cpu_drift --profile PROFILE.json
"""
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from bench_planner import at_cpu_speed  # noqa: E402
from diag_cli import paper_engine, parse_args  # noqa: E402

from alpamayo_offload.planning.planner import (  # noqa: E402
    PlannerOptions,
    interleaved_indices,  # noqa: E402
    plan,
)
from alpamayo_offload.planning.predictor import Placement, Workload, predict  # noqa: E402
from alpamayo_offload.planning.profile import Profile, load_profile  # noqa: E402
from alpamayo_offload.profiling.gpu_profile import host_issue_us  # noqa: E402

GIB = 2**30


def decode_ms(profile: Profile | None, placement: Placement, workload: Workload) -> float | None:
    """The decode phase's predicted wall time (None without a profile, e.g. an unprobed CPU)."""
    if profile is None:
        return None
    return next(p.wall_ms for p in predict(profile, placement, workload).phases
                if p.name == 'decode')


def timed_runs(engine: Any, model_input: Any, runs: int) -> list[dict[str, float]]:
    """`runs` inferences after one warm-up, each with the CPU's issue speed probed before."""
    engine.infer(model_input)
    got = []
    for _ in range(runs):
        probe = host_issue_us(torch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        timings = engine.infer(model_input).timings
        torch.cuda.synchronize()
        got.append({'probe_us': probe, 'total_ms': 1000 * (time.perf_counter() - t0),
                    **{k: 1000 * v for k, v in timings.items()}})
    return got


def main() -> None:
    def more(ap: Any) -> None:
        ap.add_argument('--profile', type=Path, required=True, help="bench_planner's profile")
        ap.add_argument('--rounds', type=int, default=2, help='visits of every plan')

    args = parse_args(__doc__, runs=5, norms_flag=False, more=more)
    profile, _ = load_profile(args.profile)
    workload = Workload(profile.measured_passes('decode'), 10)
    n_lm = profile.sequence('lm').n_layers
    plans = {**{f'planned-16GiB-h{h:g}': plan(profile, 16 * GIB, PlannerOptions(
        workload=workload, cpu_headroom=h)).placement for h in (1.0, 1.33, 1.5)},
             **{f'k{k}': Placement.of({'lm': interleaved_indices(k, n_lm)}) for k in (30, 31)}}
    start = time.perf_counter()
    engine = paper_engine(fused_norms=True, model='full', device='cuda', mode='pipelined',
                          pin_all_layers=True)
    model_input = engine.example_input(presized=True)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in plans}
    for _ in range(args.rounds):
        for name, placement in plans.items():
            engine.replan(resident={s: list(placement.indices(s))
                                    for s in ('vit', 'lm', 'expert')},
                          embed_on_host=placement.embed_on_host)
            runs[name] += timed_runs(engine, model_input, args.runs)
            print(f'{name}: {time.perf_counter() - start:.0f} s', flush=True)
    rows = []
    for name, placement in plans.items():
        predicted = decode_ms(profile, placement, workload)
        for r in runs[name]:
            r['decode_pred_ms'] = predicted
            r['decode_pred_at_probe_ms'] = decode_ms(at_cpu_speed(profile, [r['probe_us']]),
                                                     placement, workload)
        rows.append({'plan': name, 'resident': {s: list(placement.indices(s))
                                                for s in ('vit', 'lm', 'expert')},
                     'embed_on_host': placement.embed_on_host,
                     'predicted_s': predict(profile, placement, workload).total_s,
                     'runs': runs[name]})
    (args.out / 'cpu_drift.json').write_text(json.dumps(
        {'profile': str(args.profile), 'profile_probe_us':
         profile.settings.get('host_issue_probe_us'), 'rows': rows}, indent=1) + '\n')
    print('| plan | predicted s | total s min/med/max | probe µs min/med/max | '
          'decode ms min/med/max | decode predicted | decode error at probe, each run |')
    print('|---|---|---|---|---|---|---|')
    for row in rows:
        got = row['runs']
        total = [r['total_ms'] / 1000 for r in got]
        probe = [r['probe_us'] for r in got]
        dec = [r['decode'] for r in got]
        errs = ' '.join(f"{100 * (r['decode_pred_at_probe_ms'] - r['decode']) / r['decode']:+.1f}"
                        for r in got)
        print(f"| {row['plan']} | {row['predicted_s']:.3f} | "
              f'{min(total):.3f}/{statistics.median(total):.3f}/{max(total):.3f} | '
              f'{min(probe):.1f}/{statistics.median(probe):.1f}/{max(probe):.1f} | '
              f'{min(dec):.0f}/{statistics.median(dec):.0f}/{max(dec):.0f} | '
              f"{got[0]['decode_pred_ms']:.0f} | {errs} |")


if __name__ == '__main__':
    main()
