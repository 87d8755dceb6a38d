"""What does the host really spend per pass when (nearly) everything is resident?

Run 4 of bench_planner (H200, 2026-11-30, docs/benchmarks.md section 3) left this open: the
profile's host issue times, taken per layer call with timing hooks, say 44.6 ms (synced) or
60.1 ms (unsynced) per decode pass, yet a plan with 31 of 36 LM layers resident ran its passes in
36.3 ms, and the predictor turned every near-resident plan host-bound. One command measures on
one machine, uncapped:

1. the profile as bench_planner takes it, host terms both ways;
2. every layer resident (nothing streams): each phase's time per pass with no timing hooks —
   the host floor itself, since a decode pass computes in ~10 ms;
3. the same plan with the timing hooks on, both ways: what the hooks and syncs add;
4. decode with k = 30, 32, 34 of 36 LM layers resident (everything else resident): where the
   passes turn from copy-bound to host-bound, against each profile's prediction.

    python3 bench/diag/host_floor.py --out $OUT/host_floor [--runs 3]
"""
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from diag_cli import (  # noqa: E402
    DECODE_TOKENS,
    DIFFUSION_STEPS,
    parse_args,
    profiled_engine,
    synced_runs,
)

from alpamayo_offload.engine import Engine  # noqa: E402
from alpamayo_offload.planning.planner import interleaved_indices  # noqa: E402
from alpamayo_offload.planning.predictor import Placement, Workload, predict  # noqa: E402
from alpamayo_offload.planning.profile import Profile, save_profile  # noqa: E402
from alpamayo_offload.profiling.collect import with_host_terms  # noqa: E402
from alpamayo_offload.profiling.gpu_profile import (  # noqa: E402
    add_host_terms,
    host_issue_calls,
)

PHASES = ('vision', 'prefill', 'decode', 'diffusion')
WORK = Workload(DECODE_TOKENS, DIFFUSION_STEPS)
PASSES = {'vision': 1, 'prefill': 1, 'decode': WORK.decode_passes,
          'diffusion': WORK.diffusion_steps}


def per_pass(engine: Engine, model_input: object, runs: int) -> dict[str, float]:
    """Median ms per pass of each phase over `runs` inferences after a warm-up."""
    got = [r.timings for r in synced_runs(engine, model_input, runs)]
    return {p: 1000 * statistics.median(t[p] for t in got) / PASSES[p] for p in PHASES}


def host_per_pass(terms: Profile) -> dict[str, float]:
    """Host ms per pass of each phase as the predictor charges it: layer calls + lead."""
    return {ph.name: sum(ph.host_layer_ms) + ph.host_lead_ms for ph in terms.phases}


def hooked(engine: Engine, model_input: object, profile: Profile,
           sync_every: int) -> dict[str, float]:
    """Host ms per pass of one inference of the attached plan with the timing hooks on."""
    torch.cuda.synchronize()
    return host_per_pass(with_host_terms(
        profile, host_issue_calls(engine, model_input, sync_every=sync_every)))


def main() -> None:
    args = parse_args(__doc__)
    start = time.perf_counter()
    engine, profile = profiled_engine(fused_norms=not args.per_op_norms)
    model_input = engine.example_input(presized=True)
    synced = add_host_terms(engine, model_input, profile, args.runs, sync_every=1)
    unsynced = with_host_terms(synced, host_issue_calls(engine, model_input, sync_every=8))
    save_profile(synced, args.out / 'profile_synced_calls.json')
    save_profile(unsynced, args.out / 'profile_unsynced_calls.json')
    counts = {name: profile.sequence(name).n_layers for name in ('vit', 'lm', 'expert')}
    everything = {name: list(range(n)) for name, n in counts.items()}
    plans = [('all resident', everything)]
    plans += [(f'lm {k}/{counts["lm"]} resident, rest resident',
               {**everything, 'lm': list(interleaved_indices(k, counts['lm']))})
              for k in (34, 32, 30)]
    rows = []
    for name, resident in plans:
        engine.replan(resident=resident, mode='pipelined', budget_bytes=None,
                      embed_on_host=False)
        placement = Placement.of(resident)
        row = {'plan': name, 'measured_ms_per_pass': per_pass(engine, model_input, args.runs)}
        for way, prof in (('synced', synced), ('unsynced', unsynced)):
            pred = predict(prof, placement, WORK)
            row[f'predicted_ms_per_pass_{way}'] = {
                p: pred.phase(p).wall_ms / PASSES[p] for p in PHASES}
        if name == 'all resident':
            for sync_every in (1, 8):
                row[f'host_ms_per_pass_hooked_sync_every_{sync_every}'] = hooked(
                    engine, model_input, profile, sync_every)
        rows.append(row)
        print(json.dumps(row), flush=True)
    compute = {ph.name: sum(ph.typical_exe_ms()) + ph.typical_other_ms()
               for ph in profile.phases}
    (args.out / 'host_floor.json').write_text(json.dumps(
        {'rows': rows, 'compute_ms_per_pass': compute,
         'host_ms_per_pass_profiled': {'synced': host_per_pass(synced),
                                       'unsynced': host_per_pass(unsynced)},
         'wall_s': time.perf_counter() - start}, indent=1) + '\n')
    hosts = {'synced': host_per_pass(synced), 'unsynced': host_per_pass(unsynced),
             **{f'hooked all-resident, sync every {n}':
                rows[0][f'host_ms_per_pass_hooked_sync_every_{n}'] for n in (1, 8)}}
    print('| phase | compute ms/pass | ' + ' | '.join(f'host ms/pass, {k}' for k in hosts) + ' |')
    print('|---|---|' + '---|' * len(hosts))
    for p in PHASES:
        print(f'| {p} | {compute[p]:.1f} | ' + ' | '.join(f'{h[p]:.1f}' for h in hosts.values())
              + ' |')
    print('\n| plan | phase | measured ms/pass | predicted, synced | predicted, unsynced |')
    print('|---|---|---|---|---|')
    for row in rows:
        for p in ('decode', 'diffusion'):
            print(f"| {row['plan']} | {p} | {row['measured_ms_per_pass'][p]:.1f} | "
                  f"{row['predicted_ms_per_pass_synced'][p]:.1f} | "
                  f"{row['predicted_ms_per_pass_unsynced'][p]:.1f} |")


if __name__ == '__main__':
    main()
