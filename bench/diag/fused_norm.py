"""Would a fused RMSNorm take host time off resident layers, and bit for bit? (GPU)

`layer_ops.py` counts 70 ATen ops in one LM decoder-layer call in decode, 32 of them the layer's
four RMSNorms (cast, pow, mean, add, rsqrt, mul, cast, mul each). Near-resident passes are
host-bound on the H200 (benchmarks.md §3, run 6), so one op per norm could cut their host time
by up to ~40 %. On the CPU `F.rms_norm` decomposes into the same ops (bit-identical, nothing
gained); on CUDA torch may dispatch one fused kernel. One command, whole GPU, everything
resident, answers:

1. ATen ops of one LM decoder-layer call in decode, HF's norm against `F.rms_norm`;
2. every `Qwen3VLTextRMSNorm` of one inference re-run on its own recorded input both ways:
   how many outputs are bitwise equal, the largest difference; default and deterministic mode;
3. decode ms a pass, diffusion ms a step and end to end, both ways, alternating inferences so
   the host's drift falls on both alike;
4. the trajectories' max abs difference between the two.

Answered on the H200 (2026-11-30, docs/benchmarks.md section 5): 70 -> 54 ops, 20 % faster end
to end, 168 of 290 norm outputs bitwise equal (the rest one bfloat16 step off); the engine now
fuses by default (`EngineConfig.fused_norms`), so this builds it with HF's norms to compare.

    python3 bench/diag/fused_norm.py --out $OUT/fused_norm [--runs 4]
    .venv/bin/python bench/diag/fused_norm.py --out /tmp/fn --model tiny --device cpu  # dry run
"""
import argparse
import collections
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from diag_cli import paper_engine, parse_args  # noqa: E402  (this directory, first on sys.path)
from layer_ops import watch  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRMSNorm  # noqa: E402

from alpamayo_offload.engine import Engine  # noqa: E402
from alpamayo_offload.model import FusedRMSNorm  # noqa: E402

HF_FORWARD = Qwen3VLTextRMSNorm.forward
fused_forward = FusedRMSNorm.forward
PASSES = {'decode': 20, 'diffusion': 10}


@contextlib.contextmanager
def norms(fused: bool) -> Iterator[None]:
    """Run the block with every Qwen3VLTextRMSNorm fused (or HF's own)."""
    Qwen3VLTextRMSNorm.forward = fused_forward if fused else HF_FORWARD
    try:
        yield
    finally:
        Qwen3VLTextRMSNorm.forward = HF_FORWARD


@contextlib.contextmanager
def deterministic(on: bool) -> Iterator[None]:
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def layer_ops(engine: Engine, model_input: Any, fused: bool) -> dict[str, int]:
    """ATen ops of the last call of LM layer 0 in one inference (a decode pass)."""
    seen: list[collections.Counter[str]] = []
    handles = watch(engine.model.vlm.model.language_model.layers[0], seen)
    try:
        with norms(fused):
            engine.infer(model_input)
    finally:
        for h in handles:
            h.remove()
    return dict(seen[-1].most_common())


def recorded_norm_inputs(engine: Engine, model_input: Any) -> list[tuple[Any, torch.Tensor]]:
    """(module, input) of the first call of every Qwen3VLTextRMSNorm in one inference."""
    got: dict[int, tuple[Any, torch.Tensor]] = {}

    def keep(module: Any, args: Any) -> None:
        got.setdefault(id(module), (module, args[0].detach().clone()))

    handles = [m.register_forward_pre_hook(keep) for m in engine.model.modules()
               if isinstance(m, Qwen3VLTextRMSNorm)]
    try:
        engine.infer(model_input)
    finally:
        for h in handles:
            h.remove()
    return list(got.values())


@torch.no_grad()
def compare_norms(records: list[tuple[Any, torch.Tensor]], strict: bool) -> dict[str, Any]:
    equal, worst = 0, 0.0
    with deterministic(strict):
        for module, x in records:
            a, b = HF_FORWARD(module, x), fused_forward(module, x)
            equal += int(torch.equal(a, b))
            worst = max(worst, (a.float() - b.float()).abs().max().item())
    return {'norms': len(records), 'bitwise_equal': equal, 'max_abs_diff': worst}


def timed(engine: Engine, model_input: Any, fused: bool) -> tuple[dict[str, float], Any]:
    if engine.device.type == 'cuda':
        torch.cuda.synchronize()
    with norms(fused):
        result = engine.infer(model_input)
    t = result.timings
    return ({'total_s': t['total'], **{f'{p}_ms_per_pass': 1000 * t[p] / n
                                       for p, n in PASSES.items()}}, result)


def main() -> None:
    def model_and_device(ap: argparse.ArgumentParser) -> None:
        ap.add_argument('--model', default='full')
        ap.add_argument('--device', default='cuda')

    args = parse_args(__doc__, runs=4, norms_flag=False, more=model_and_device)
    start = time.perf_counter()
    engine = paper_engine(fused_norms=False, model=args.model, device=args.device,
                          mode='preload')
    model_input = engine.example_input(presized=True)
    ops = {way: layer_ops(engine, model_input, way == 'fused') for way in ('hf', 'fused')}
    records = recorded_norm_inputs(engine, model_input)
    bitwise = {mode: compare_norms(records, mode == 'deterministic')
               for mode in ('default', 'deterministic')}
    del records
    for fused in (False, True):                      # warm-up both
        timed(engine, model_input, fused)
    runs: dict[str, list[dict[str, float]]] = {'hf': [], 'fused': []}
    last: dict[str, Any] = {}
    for _ in range(args.runs):
        for way in ('hf', 'fused'):
            figures, last[way] = timed(engine, model_input, way == 'fused')
            runs[way].append(figures)
    median = {way: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
              for way, rows in runs.items()}
    trajectory_diff = float(abs(last['hf'].xyz - last['fused'].xyz).max())
    doc = {'ops_per_lm_layer_call_decode': ops, 'norm_outputs': bitwise, 'runs': runs,
           'median': median, 'trajectory_max_abs_diff_m': trajectory_diff,
           'wall_s': time.perf_counter() - start}
    (args.out / 'fused_norm.json').write_text(json.dumps(doc, indent=1) + '\n')
    print('| norms | ATen ops / LM layer call (decode) | decode ms/pass | diffusion ms/step | '
          'end to end s |\n|---|---|---|---|---|')
    for way in ('hf', 'fused'):
        m = median[way]
        print(f"| {way} | {sum(ops[way].values())} | {m['decode_ms_per_pass']:.1f} | "
              f"{m['diffusion_ms_per_pass']:.1f} | {m['total_s']:.3f} |")
    for mode, b in bitwise.items():
        print(f"{mode}: {b['bitwise_equal']} of {b['norms']} norm outputs bitwise equal, "
              f"max abs diff {b['max_abs_diff']:.3g}")
    print(f'trajectory max abs diff hf vs fused: {trajectory_diff:.3g} m')


if __name__ == '__main__':
    main()
