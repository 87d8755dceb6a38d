"""Where the resident layers' CUDA graphs take VRAM: peaks and allocator segments, graphs off/on.

H200 run 12 (2026-11-30): with graphs, the bench rows' peak allocated VRAM rose 290-480 MiB over
run 11's at the same plans, against 113 MiB counted for the graphs. This diag runs the paper's
k = 25 plan and everything resident with graphs off and on; per inference it records the peak
allocated and reserved bytes, then sums the allocator's segments by memory pool and stream.

    python3 bench/diag/graph_memory.py --out $OUT/gm
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from diag_cli import paper_engine, parse_args  # noqa: E402

from alpamayo_offload.planning.planner import interleaved_indices  # noqa: E402

MIB = 2**20


def segments() -> dict[str, list[float]]:
    """'pool, stream' -> [segments, reserved MiB, allocated MiB] from the allocator snapshot."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for seg in torch.cuda.memory._snapshot()['segments']:
        key = f"pool {tuple(seg.get('segment_pool_id', ()))}, stream {seg['stream']}"
        out[key][0] += 1
        out[key][1] += seg['total_size'] / MIB
        out[key][2] += seg['allocated_size'] / MIB
    return dict(out)


def main() -> None:
    args = parse_args(__doc__, runs=2, norms_flag=False)
    engine = paper_engine(fused_norms=True, model='full', device='cuda', mode='preload',
                          pin_all_layers=True)
    inp = engine.example_input(presized=True)
    report = []
    for name, mode, resident in (('paper k = 25', 'pipelined',
                                  {'lm': interleaved_indices(25, 36)}),
                                 ('all resident', 'preload', {})):
        for graphs in (False, True):
            engine.replan(resident=resident, mode=mode, layer_graphs=graphs)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            runs = []
            for _ in range(args.runs):
                torch.cuda.reset_peak_memory_stats()
                engine.infer(inp)
                torch.cuda.synchronize()
                runs.append({'peak_alloc_over_base_mib': (torch.cuda.max_memory_allocated()
                                                          - base) / MIB,
                             'peak_reserved_mib': torch.cuda.max_memory_reserved() / MIB,
                             'alloc_after_over_base_mib': (torch.cuda.memory_allocated()
                                                           - base) / MIB})
            row = {'plan': name, 'graphs': graphs, 'base_mib': base / MIB, 'runs': runs,
                   'segments': segments()}
            report.append(row)
            print(f"{name:14s} graphs {graphs!s:5s} base {base / MIB:8.0f} MiB  " + '  '.join(
                f"peak+{r['peak_alloc_over_base_mib']:6.0f} res {r['peak_reserved_mib']:6.0f} "
                f"after+{r['alloc_after_over_base_mib']:5.0f}" for r in runs), flush=True)
            for key, (n, reserved, allocated) in sorted(row['segments'].items()):
                print(f'    {key:40s} {n:4.0f} segments {reserved:9.1f} MiB reserved '
                      f'{allocated:9.1f} allocated')
    (args.out / 'graph_memory.json').write_text(json.dumps(report, indent=1))


if __name__ == '__main__':
    main()
