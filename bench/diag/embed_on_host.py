"""Why did the planner's 16 GiB plan (embedding on the host) decode 14 % slower than predicted?

Run 6 of bench_planner (H200, 2026-11-30): the planned row's decode took 833 ms against 729 ms
predicted, while the interleaved row (same 5 streamed LM layers' worth of bytes, embedding on the
GPU) took 730 ms against 723. One command, uncapped, same weights, decode ms per pass for:

1. run 6's planned LM placement, embedding on the host (as measured);
2. the same, embedding on the GPU;
3. the same, embedding on the host with its rows copied through pinned memory, non-blocking
   (diagnostic variant of `Rollout.embed`, patched here only);
4. run 6's interleaved LM placement, embedding on the host.

    python3 bench/diag/embed_on_host.py --out $OUT/embed_on_host [--runs 3]
"""
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from diag_cli import paper_engine, parse_args, synced_runs  # noqa: E402  (this directory, first on sys.path)

from alpamayo_offload.engine import Engine  # noqa: E402
from alpamayo_offload.model import inference  # noqa: E402

PLANNED_LM_STREAMED = (0, 4, 12, 22, 30)
INTERLEAVED_LM_STREAMED = (8, 17, 26, 34, 35)
PHASES = {'prefill': 1, 'decode': 20, 'diffusion': 10}


def pinned_embed(self: inference.Rollout, ids: torch.Tensor) -> torch.Tensor:
    """`Rollout.embed` with the gathered rows pinned and copied without blocking the host."""
    table = self.model.vlm.model.language_model.embed_tokens
    rows = table(ids.to(table.weight.device))
    if rows.device.type == 'cpu':
        rows = rows.pin_memory()
    return rows.to(self.device, self.dtype, non_blocking=True)


def per_pass(engine: Engine, model_input: object, runs: int) -> dict[str, float]:
    got = synced_runs(engine, model_input, runs)
    out = {p: 1000 * statistics.median(r.timings[p] for r in got) / n for p, n in PHASES.items()}
    out['tokens'] = [*got[-1].coc_token_ids, hash(got[-1].xyz.tobytes())]
    return out


def main() -> None:
    args = parse_args(__doc__)
    start = time.perf_counter()
    engine = paper_engine(fused_norms=not args.per_op_norms, model='full', device='cuda',
                          mode='pipelined')
    model_input = engine.example_input(presized=True)
    everything = {name: list(range(len(layers)))
                  for name, layers in engine.model.layer_sequences().items()}

    def lm_without(streamed: tuple[int, ...]) -> dict[str, list[int]]:
        return {**everything, 'lm': [i for i in everything['lm'] if i not in streamed]}

    variants = [('planned lm, embed host', lm_without(PLANNED_LM_STREAMED), True, False),
                ('planned lm, embed gpu', lm_without(PLANNED_LM_STREAMED), False, False),
                ('planned lm, embed host pinned', lm_without(PLANNED_LM_STREAMED), True, True),
                ('interleaved lm, embed host', lm_without(INTERLEAVED_LM_STREAMED), True, False),
                ('interleaved lm, embed gpu', lm_without(INTERLEAVED_LM_STREAMED), False, False)]
    original = inference.Rollout.embed
    rows = []
    for name, resident, on_host, pinned in variants:
        engine.replan(resident=resident, mode='pipelined', budget_bytes=None,
                      embed_on_host=on_host)
        inference.Rollout.embed = pinned_embed if pinned else original
        try:
            row = {'variant': name, **per_pass(engine, model_input, args.runs)}
        finally:
            inference.Rollout.embed = original
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != 'tokens'}), flush=True)
    same = all(r['tokens'] == rows[0]['tokens'] for r in rows)
    (args.out / 'embed_on_host.json').write_text(json.dumps(
        {'rows': rows, 'same_tokens': same, 'wall_s': time.perf_counter() - start}, indent=1))
    print('| variant | prefill ms | decode ms/pass | diffusion ms/pass |\n|---|---|---|---|')
    for r in rows:
        print(f"| {r['variant']} | {r['prefill']:.1f} | {r['decode']:.2f} | {r['diffusion']:.1f} |")
    print(f'same tokens in every variant: {same}')


if __name__ == '__main__':
    main()
