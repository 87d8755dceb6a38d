"""How many ATen ops does one decoder-layer call issue, per module and phase? (CPU, no GPU)

Near-resident passes are host-bound on the H200 (docs/benchmarks.md section 3, run 6): the host
issues each layer's kernels one by one, about 0.9 ms a LM layer call in decode against ~0.3 ms of
GPU compute. The op count is what that host time scales with and does not depend on the
layer's size, so the tiny preset on this CPU gives the full model's count. Views (no kernel) are
counted apart. It watches each sequence's second layer, as most layers are: the first layer of a
pass also derives the pass's rotary tensors (model/rope.py, 6 ops).

    .venv/bin/python bench/diag/layer_ops.py
"""
import collections
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from alpamayo_offload.engine import Engine, EngineConfig  # noqa: E402

VIEWS = {'view', 'reshape', 'transpose', 'slice', 'unsqueeze', 'squeeze', 'expand', 'select',
         't', 'permute', 'alias', '_unsafe_view', 'as_strided', 'detach'}


class OpCounter(TorchDispatchMode):
    """Counts every ATen op dispatched while active, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def watch(layer: nn.Module, sink: list[collections.Counter[str]]) -> list[Any]:
    """Record the op counts of every call of `layer` into `sink`."""
    active: list[OpCounter] = []

    def pre(module: nn.Module, args: Any) -> None:
        active.append(OpCounter())
        active[-1].__enter__()

    def post(module: nn.Module, args: Any, output: Any) -> None:
        counter = active.pop()
        counter.__exit__(None, None, None)
        sink.append(counter.counts)

    return [layer.register_forward_pre_hook(pre), layer.register_forward_hook(post)]


def main() -> None:
    engine = Engine.from_config(EngineConfig(
        model='tiny', device='cpu', mode='preload', resident={}, fixed_decode_tokens=4,
        max_decode_tokens=4, diffusion_steps=2))
    sequences = engine.model.layer_sequences()
    calls: dict[str, list[collections.Counter[str]]] = {name: [] for name in sequences}
    handles = [h for name, layers in sequences.items() for h in watch(layers[1], calls[name])]
    engine.infer(engine.example_input(presized=True))
    for h in handles:
        h.remove()
    picks = {'vit': [('vision', 0)], 'lm': [('prefill', 0), ('decode', -1)],
             'expert': [('diffusion', -1)]}
    print('| module | phase | ops | of which views | kernel ops by name |')
    print('|---|---|---|---|---|')
    for name, wanted in picks.items():
        for phase, which in wanted:
            counts = calls[name][which]
            views = sum(n for op, n in counts.items() if op in VIEWS)
            kernels = ', '.join(f'{op} {n}' for op, n in counts.most_common() if op not in VIEWS)
            print(f'| {name} | {phase} | {sum(counts.values())} | {views} | {kernels} |')

if __name__ == '__main__':
    main()
