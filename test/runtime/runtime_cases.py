"""Shared pieces of the runtime tests: deterministic mode, a three-stack toy model, scenarios."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from alpamayo_offload.runtime import OffloadRuntime
from testkit.toy_model import ToyConfig, ToyModel, build_stack, run_stack

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

SMALL = ToyConfig(hidden=32, intermediate=64, n_heads=2, n_kv_heads=1, head_dim=16)
LARGE = ToyConfig(hidden=48, intermediate=96, n_heads=3, n_kv_heads=1, head_dim=16)
LENGTHS = {'vit': 3, 'lm': 5, 'expert': 4}
WIDTH = {'vit': SMALL.hidden, 'lm': LARGE.hidden, 'expert': SMALL.hidden}


def build_model(seed: int = 0, device: str = 'cpu') -> ToyModel:
    return ToyModel(build_stack(SMALL, LENGTHS['vit'], seed, device),
                    build_stack(LARGE, LENGTHS['lm'], seed + 1, device),
                    build_stack(SMALL, LENGTHS['expert'], seed + 2, device))


@dataclass(frozen=True)
class Step:
    """Run ``sequence`` (its first ``n_layers`` layers) on ``tokens`` tokens, hinting first."""

    sequence: str
    tokens: int
    hint: str | None = None
    n_layers: int | None = None


def inference(decode: int = 2, steps: int = 3, hints: bool = True) -> list[Step]:
    h = (lambda name: name) if hints else (lambda name: None)
    out = [Step('vit', 16, h('lm')), Step('lm', 12)]
    out += [Step('lm', 1, h('expert') if i == decode - 1 else None) for i in range(decode)]
    out += [Step('expert', 8, h('vit') if i == steps - 1 else None) for i in range(steps)]
    return out


SCENARIOS: dict[str, list[Step]] = {
    'two-inferences': inference() + inference(),
    'no-hints': inference(hints=False) * 2,
    'wrong-hints': [Step('vit', 16, 'expert'), Step('lm', 12, 'vit'), Step('lm', 1, 'lm'),
                    Step('expert', 8, 'lm'), Step('expert', 8, 'vit'), Step('lm', 1)],
    'second-vision-and-early-stop': [Step('vit', 16, 'lm'), Step('vit', 16),
                                     Step('lm', 12, n_layers=2), Step('lm', 1, n_layers=3),
                                     Step('expert', 8), Step('lm', 1), Step('expert', 8)],
}


def inputs(device: str = 'cpu', seed: int = 5) -> dict[tuple[str, int], torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = {('vit', 16), ('lm', 12), ('lm', 1), ('expert', 8)}
    return {key: torch.randn(1, key[1], WIDTH[key[0]], generator=gen).to(device, torch.bfloat16)
            for key in sorted(shapes)}


def run(model: ToyModel, rt: OffloadRuntime | None, steps: Sequence[Step],
        device: str = 'cpu') -> list[torch.Tensor]:
    xs = inputs(device)
    outs = []
    with torch.inference_mode():
        for step in steps:
            if step.hint is not None and rt is not None:
                rt.hint_next(step.hint)
            layers = list(getattr(model, step.sequence))[:step.n_layers]
            outs.append(run_stack(layers, xs[(step.sequence, step.tokens)]).cpu())
    return outs


def same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
