"""CUDA graphs on resident layers (model/layer_graphs.py): phase times off and on, memory, bits.

Run 11 left near-resident decode bound by the host issuing kernels and late whenever the host
thread stalled (docs/benchmarks.md section 3). This diag times, on the full-size model, the plans
where that showed: the planner's 16 GiB plan of run 11c, the paper's k = 31 and everything
resident; each with graphs off and on, alternating in rounds so drift hits both alike. Then it
checks, in deterministic mode, that graphs change no bit (preload and the 16 GiB plan against
the eager preload run), and measures the graphs' memory against `estimate_graph_bytes`.

    python3 bench/diag/layer_graphs.py --out $OUT/lg [--runs 4] [--rounds 2]
"""
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')   # same workspace in both modes
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diag_cli import paper_engine, parse_args  # noqa: E402

from alpamayo_offload.engine import Engine  # noqa: E402
from alpamayo_offload.engine.estimates import estimate_graph_bytes  # noqa: E402
from alpamayo_offload.planning.closed_forms import interleaved_indices  # noqa: E402

# The planner's 16 GiB plan of run 11c (docs/results/2026-11-30-h200/run11/planner_a_rerun).
PLANNED_16 = {'vit': (0,), 'lm': (1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20,
                                  21, 23, 24, 25, 26, 27, 28, 29, 31, 32, 33, 34, 35),
              'expert': (1, 3, 5, 7, 9, 13, 17, 21, 25, 29, 34)}
PHASES = ('vision', 'prefill', 'decode', 'diffusion', 'total')


def plans() -> dict[str, tuple[str, dict, bool]]:
    """name -> (mode, resident, embedding on host)."""
    return {'planned 16 GiB (run 11c)': ('pipelined', PLANNED_16, True),
            'paper k = 31': ('pipelined', {'lm': interleaved_indices(31, 36)}, False),
            'all resident': ('preload', {}, False)}


def attach(engine: Engine, plan: tuple[str, dict, bool], graphs: bool) -> None:
    mode, resident, on_host = plan
    engine.replan(resident=resident, mode=mode, embed_on_host=on_host, layer_graphs=graphs)


def timed(engine: Engine, inp, runs: int) -> dict:
    """One capturing warm-up (its memory growth kept), then `runs` timed inferences."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    engine.infer(inp)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    ms = {p: [] for p in PHASES}
    for _ in range(runs):
        torch.cuda.synchronize()
        t = engine.infer(inp).timings
        for p in PHASES:
            ms[p].append(1000 * t[p])
    return {'ms': ms, 'grown_bytes': grown, 'captured': engine.info.layer_graphs}


def bit_check(engine: Engine, inp) -> list[dict]:
    """Deterministic mode: eager preload is the reference; graphed runs must equal it."""
    torch.use_deterministic_algorithms(True)
    try:
        attach(engine, ('preload', {}, False), graphs=False)
        ref = engine.infer(inp)
        out = []
        for name, plan in (('all resident', ('preload', {}, False)),
                           ('planned 16 GiB (run 11c)', plans()['planned 16 GiB (run 11c)'])):
            attach(engine, plan, graphs=True)
            for run in range(2):                 # the capturing run, then a replaying one
                got = engine.infer(inp)
                out.append({'plan': name, 'run': run,
                            'tokens_equal': got.coc_token_ids == ref.coc_token_ids,
                            'xyz_equal': bool(np.array_equal(got.samples_xyz, ref.samples_xyz)),
                            'max_abs_dxyz': float(np.max(np.abs(got.samples_xyz
                                                                - ref.samples_xyz)))})
    finally:
        torch.use_deterministic_algorithms(False)
    return out


def main() -> None:
    args = parse_args(__doc__, runs=4, norms_flag=False, more=lambda ap: ap.add_argument(
        '--rounds', type=int, default=2))
    engine = paper_engine(fused_norms=True, model='full', device='cuda', mode='preload',
                          pin_all_layers=True)
    inp = engine.example_input(presized=True)
    results: dict = {name: {'off': [], 'on': []} for name in plans()}
    for _ in range(args.rounds):
        for name, plan in plans().items():
            for graphs in (False, True):
                attach(engine, plan, graphs)
                results[name]['on' if graphs else 'off'].append(timed(engine, inp, args.runs))
    bits = bit_check(engine, inp)
    estimate = estimate_graph_bytes(engine.model.cfg, 2, num_samples=1)
    (args.out / 'layer_graphs.json').write_text(json.dumps(
        {'results': results, 'bits': bits, 'estimate_graph_bytes': estimate}, indent=1))
    print(f'graph memory estimate {estimate / 2**20:.0f} MiB')
    print(f'{"plan":28s} {"graphs":6s} ' + ' '.join(f'{p:>16s}' for p in PHASES)
          + '  captured  grown MiB')
    for name, by in results.items():
        for key, rounds in by.items():
            cells = []
            for p in PHASES:
                vals = [v for r in rounds for v in r['ms'][p]]
                cells.append(f'{statistics.median(vals):7.1f} {min(vals):4.0f}-{max(vals):<4.0f}')
            grown = max(r['grown_bytes'] for r in rounds) / 2**20
            print(f'{name:28s} {key:6s} ' + ' '.join(f'{c:>16s}' for c in cells)
                  + f'  {rounds[-1]["captured"]:8d}  {grown:9.1f}')
    for b in bits:
        print(f'bits {b["plan"]:28s} run {b["run"]}: tokens equal {b["tokens_equal"]}, '
              f'xyz equal {b["xyz_equal"]} (max |dxyz| {b["max_abs_dxyz"]:.3g})')


if __name__ == '__main__':
    main()
