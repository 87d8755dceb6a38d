"""Is the prefill's first streamed LM layer in its slot when the prefill starts?

Run 9 (H200, 2026-11-30, docs/benchmarks.md section 3) measured every streamed prefill of its
8-10 GiB command 4-9 ms above prediction. The predictor has the first streamed LM layer copied
while vision ends (its pre-hook prefetch in the last streamed ViT layer); predicted as if that
copy started only after the prefill's host lead, the prefill came within -1.8 to +1.2 %. This
runs one plan pipelined and instrumented and prints, for the last streamed ViT calls and the
first streamed LM calls of the prefill, each call's copy time and how long its compute waited
for the copy (`stall_ms`): a first LM stall near a layer's copy time says the copy was not
overlapped with the end of vision.

    python3 bench/diag/prefill_start.py --out $OUT/prefill_start [--lm-resident 14]
    .venv/bin/python bench/diag/prefill_start.py --out /tmp/ps --model tiny --device cpu
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from diag_cli import paper_engine, parse_args  # noqa: E402

from alpamayo_offload.planning.closed_forms import interleaved_indices  # noqa: E402


def _more(ap) -> None:  # noqa: ANN001
    ap.add_argument('--lm-resident', type=int, default=14,
                    help='evenly spaced resident LM layers (the paper plan of 10 GiB: 14)')
    ap.add_argument('--model', default='full')
    ap.add_argument('--device', default='cuda')


def main() -> None:
    args = parse_args(__doc__, runs=2, more=_more)
    if args.lm_resident < 0:
        raise SystemExit(f'--lm-resident {args.lm_resident}: give 0 or more resident LM layers')
    engine = paper_engine(fused_norms=not args.per_op_norms, model=args.model,
                          device=args.device, mode='pipelined', pin_all_layers=True,
                          instrument=True)
    n_lm = engine.info.layers['lm']
    if args.lm_resident > n_lm:
        raise SystemExit(f'--lm-resident {args.lm_resident}: the model has {n_lm} LM layers')
    engine.replan(resident={'lm': interleaved_indices(args.lm_resident, n_lm)},
                  mode='pipelined', instrument=True)
    model_input = engine.example_input(presized=True)
    engine.infer(model_input)                        # warm-up of this attach
    runs = []
    for _ in range(args.runs):
        engine.runtime_stats(reset=True)
        timings = engine.infer(model_input).timings
        calls = [c for c in engine.runtime_stats().calls if c.streamed]
        vit = [c for c in calls if c.sequence == 'vit'][-2:]
        prefill = [c for c in calls if c.sequence == 'lm' and c.repetition == 0][:4]
        runs.append({'timings_ms': {k: 1000 * v for k, v in timings.items()},
                     'calls': [{'sequence': c.sequence, 'layer': c.layer, 'dma_ms': c.dma_ms,
                                'stall_ms': c.stall_ms, 'exe_ms': c.exe_ms}
                               for c in vit + prefill]})
    (args.out / 'prefill_start.json').write_text(json.dumps(
        {'model': args.model, 'lm_resident': args.lm_resident, 'runs': runs}, indent=1) + '\n')
    for run in runs:
        print(f"prefill {run['timings_ms']['prefill']:.1f} ms; "
              + '; '.join(f"{c['sequence']}[{c['layer']}] dma {c['dma_ms']:.2f} stall "
                          f"{c['stall_ms']:.2f} exe {c['exe_ms']:.2f}" for c in run['calls']))


if __name__ == '__main__':
    main()
