"""Every mode and residency plan gives outputs bit-identical to the preload run (CPU)."""
from __future__ import annotations

import pytest
import torch
from runtime_cases import LENGTHS, SCENARIOS, build_model, run, same

from alpamayo_offload.runtime import Mode, OffloadRuntime, ResidencyPlan


def _plans() -> dict[str, dict[str, tuple[int, ...]]]:
    def each(pick):
        return {name: tuple(i for i in range(n) if pick(i, n)) for name, n in LENGTHS.items()}

    return {
        'none': {},
        'all': each(lambda i, n: True),
        'first-last': each(lambda i, n: i in (0, n - 1)),
        'odd': each(lambda i, n: i % 2 == 1),
        'even': each(lambda i, n: i % 2 == 0),
        'lm-only-alternate': {'lm': (0, 2, 4)},
        'one-streamed-each': each(lambda i, n: i != 1),
        'lm-all-resident': {'lm': tuple(range(LENGTHS['lm']))},
    }


PLANS = _plans()


@pytest.fixture(scope='module')
def reference() -> dict[str, list[torch.Tensor]]:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cpu')
    rt.attach()
    out = {name: run(model, rt, steps) for name, steps in SCENARIOS.items()}
    rt.detach()
    return out


@pytest.mark.parametrize('mode', [Mode.SEQUENTIAL, Mode.PIPELINED])
@pytest.mark.parametrize('plan', sorted(PLANS))
def test_matches_preload(mode: Mode, plan: str, reference: dict[str, list[torch.Tensor]]) -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), ResidencyPlan(PLANS[plan]), mode=mode, device='cpu',
                        instrument=True)
    rt.attach()
    for name, steps in SCENARIOS.items():
        assert same(run(model, rt, steps), reference[name]), (mode, plan, name)
    stats = rt.stats()
    streamed_calls = [c for c in stats.calls if c.streamed]
    if plan == 'all':
        assert not streamed_calls and stats.copies == 0
    else:
        assert streamed_calls and stats.copies > 0
    rt.detach()


def test_without_runtime_equals_preload(reference: dict[str, list[torch.Tensor]]) -> None:
    model = build_model()
    for name, steps in SCENARIOS.items():
        assert same(run(model, None, steps), reference[name])


def test_pipelined_prefetch_is_never_wasted_with_right_hints() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (0, 3)}), mode=Mode.PIPELINED,
                        device='cpu', instrument=True)
    rt.attach()
    run(model, rt, SCENARIOS['two-inferences'])
    stats = rt.stats()
    streamed = [c for c in stats.calls if c.streamed]
    assert stats.wasted_copies == 0
    # Every call found its layer already copied (or copied for it) exactly once, plus the one
    # prefetch for the inference that never comes.
    assert stats.copies == sum(1 for c in streamed if c.bytes > 0) + 1
    assert all(c.bytes > 0 for c in streamed)
    rt.detach()


def test_wrong_hint_costs_a_copy_not_correctness() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PIPELINED, device='cpu', instrument=True)
    rt.attach()
    run(model, rt, SCENARIOS['wrong-hints'])
    assert rt.stats().wasted_copies > 0
    rt.detach()


@pytest.mark.parametrize('mode', [Mode.SEQUENTIAL, Mode.PIPELINED])
def test_grad_modes(mode: Mode) -> None:
    model = build_model()
    x = torch.randn(1, 4, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        expected = model.vit[1](model.vit[0](x))
    rt = OffloadRuntime(model.sequences(), mode=mode, device='cpu')
    rt.attach()
    with torch.no_grad():
        assert torch.equal(model.vit[1](model.vit[0](x)), expected)
    with torch.inference_mode():
        assert torch.equal(model.vit[1](model.vit[0](x)), expected)
    rt.detach()


def test_streamed_weights_live_in_slots_between_calls() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (1,)}), mode=Mode.PIPELINED,
                        device='cpu')
    rt.attach()
    slots = rt._streamer.slots  # white-box: where the binding points
    spans = [(s.data_ptr(), s.data_ptr() + s.numel()) for s in slots]

    def in_slot(t: torch.Tensor) -> bool:
        return any(lo <= t.data_ptr() < hi for lo, hi in spans)

    assert all(in_slot(p) for p in model.lm[0].parameters())
    assert not any(in_slot(p) for p in model.lm[1].parameters())
    assert all(p.data_ptr() % 256 == 0 for p in model.lm[0].parameters())
    rt.detach()


def test_prime_copies_ahead_of_the_first_call() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PIPELINED, device='cpu', instrument=True)
    rt.attach()
    rt.prime('vit')
    run(model, rt, SCENARIOS['two-inferences'][:1])
    stats = rt.stats()
    assert stats.copies == len(model.vit) + 1 and stats.wasted_copies == 0
    rt.detach()


class _Caller(torch.nn.Module):
    """A layer whose forward runs another streamed layer (held outside its module tree)."""

    def __init__(self, callee: torch.nn.Module) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self._callee = [callee]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._callee[0](self.proj(x))


def test_nested_streamed_layers_are_refused() -> None:
    from alpamayo_offload.runtime import LayerSequence, StateError

    callee = torch.nn.Linear(4, 4)
    caller = _Caller(callee)
    seqs = [LayerSequence('a', [caller]), LayerSequence('b', [callee, torch.nn.Identity()])]
    rt = OffloadRuntime(seqs, mode=Mode.PIPELINED, device='cpu')
    rt.attach()
    with pytest.raises(StateError, match='must not call each other'):
        caller(torch.ones(1, 4))
    rt.detach()
