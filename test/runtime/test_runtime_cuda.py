"""The CUDA paths: bit-exactness, pinned regions, no allocation in forward, peak <= budget."""
from __future__ import annotations

import pytest
import torch
from runtime_cases import SCENARIOS, build_model, run, same

from alpamayo_offload.runtime import (
    HostStore,
    LayerError,
    LayerSequence,
    Mode,
    OffloadRuntime,
    ResidencyPlan,
    StateDictSource,
)
from testkit.toy_model import ToyConfig, build_stack

pytestmark = pytest.mark.cuda

PLANS = {
    'none': {},
    'first-last': {'vit': (0, 2), 'lm': (0, 4), 'expert': (0, 3)},
    'odd': {'vit': (1,), 'lm': (1, 3), 'expert': (1, 3)},
    'lm-alternate': {'lm': (0, 2, 4)},
}


@pytest.fixture(scope='module')
def reference() -> dict[str, list[torch.Tensor]]:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cuda')
    rt.attach()
    out = {name: run(model, rt, steps, device='cuda') for name, steps in SCENARIOS.items()}
    rt.detach()
    return out


@pytest.mark.parametrize('mode', [Mode.SEQUENTIAL, Mode.PIPELINED])
@pytest.mark.parametrize('plan', sorted(PLANS))
def test_matches_preload_on_cuda(mode: Mode, plan: str,
                                 reference: dict[str, list[torch.Tensor]]) -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), ResidencyPlan(PLANS[plan]), mode=mode, device='cuda',
                        instrument=plan == 'odd')
    rt.attach()
    for _ in range(2):
        for name, steps in SCENARIOS.items():
            assert same(run(model, rt, steps, device='cuda'), reference[name]), (plan, name)
    if rt.instrument:
        stats = rt.stats()
        assert all(c.dma_ms > 0 for c in stats.calls if c.bytes > 0)
        assert all(c.exe_ms > 0 for c in stats.calls)
    rt.detach()
    assert all(p.device.type == 'cpu' for p in model.lm.parameters())


def test_host_store_streams_in_place_and_matches_preload(
        reference: dict[str, list[torch.Tensor]]) -> None:
    """One pinned store, attached under two plans in turn: bit-exact, nothing re-pinned."""
    model = build_model()
    store = HostStore.adopt(model.sequences(), pin=True)
    assert store.pinned
    for plan in ('none', 'odd', 'none'):
        rt = OffloadRuntime(model.sequences(), ResidencyPlan(PLANS[plan]), mode=Mode.PIPELINED,
                            device='cuda')
        rt.attach(store)
        assert 0 < rt.pinned_bytes == rt.host_bytes <= store.nbytes
        for name, steps in SCENARIOS.items():
            assert same(run(model, rt, steps, device='cuda'), reference[name]), (plan, name)
        rt.detach()
        assert all(p.device.type == 'meta' for p in model.lm.parameters())


def test_store_unpinned_and_restored_holds_the_same_pageable_weights() -> None:
    """`unpin` + `restore_layers`: the layers are host views again, page-locked no more."""
    expected = run(build_model(), None, SCENARIOS['two-inferences'])
    model = build_model()
    store = HostStore.adopt(model.sequences(), pin=True)
    assert store.pinned and store._arena.tensor.is_pinned()
    store.unpin()
    assert not store.pinned and not store._arena.tensor.is_pinned()
    store.restore_layers(model.sequences())
    weights = list(model.lm.parameters())
    assert all(p.device.type == 'cpu' and not p.is_pinned() for p in weights)
    assert same(run(model, None, SCENARIOS['two-inferences']), expected)


def test_regions_are_pinned_and_exact() -> None:
    cfg = ToyConfig(hidden=512, intermediate=1536, n_heads=8, n_kv_heads=2, head_dim=64)
    layers = build_stack(cfg, 6)
    rt = OffloadRuntime([LayerSequence('lm', layers)], ResidencyPlan({'lm': (0,)}),
                        mode=Mode.PIPELINED, device='cuda')
    rt.attach()
    for st in rt._streamed:
        assert st.region.tensor.is_pinned()
    assert rt.streamed_param_bytes <= rt.pinned_bytes <= 1.02 * rt.streamed_param_bytes
    for layer in layers[1:]:
        assert all(p.is_cuda and p.data_ptr() % 256 == 0 for p in layer.parameters())
    rt.detach()
    assert rt.pinned_bytes == 0


def _counters() -> tuple[int, int]:
    stats = torch.cuda.memory_stats()
    return stats['allocation.all.allocated'], stats['segment.all.allocated']


def test_runtime_allocates_nothing_during_forward() -> None:
    steps = SCENARIOS['two-inferences']
    counts = {}
    for mode in (Mode.PRELOAD, Mode.SEQUENTIAL, Mode.PIPELINED):
        model = build_model()
        rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (1,)}), mode=mode,
                            device='cuda')
        rt.attach()
        run(model, rt, steps, device='cuda')  # warm-up: kernels, allocator segments
        torch.cuda.synchronize()
        allocated = torch.cuda.memory_allocated()
        allocs, segments = _counters()
        run(model, rt, steps, device='cuda')
        torch.cuda.synchronize()
        after_allocs, after_segments = _counters()
        assert torch.cuda.memory_allocated() == allocated, mode
        assert after_segments == segments, mode  # no cudaMalloc in steady state
        counts[mode] = after_allocs - allocs
        rt.detach()
    # Same activations in every mode: the runtime itself allocates nothing per forward.
    assert counts[Mode.SEQUENTIAL] == counts[Mode.PRELOAD] == counts[Mode.PIPELINED]


@pytest.mark.parametrize('mode', [Mode.PRELOAD, Mode.SEQUENTIAL, Mode.PIPELINED])
def test_peak_stays_within_budget(mode: Mode) -> None:
    steps = SCENARIOS['two-inferences']
    torch.cuda.synchronize()
    model = build_model()
    base = torch.cuda.memory_allocated()
    probe = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cuda')
    probe.attach()
    weights = torch.cuda.memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    run(model, probe, steps, device='cuda')
    working_set = torch.cuda.max_memory_allocated() - base - weights
    probe.detach()
    plan = ResidencyPlan({'lm': (0, 2)})
    sizing = OffloadRuntime(model.sequences(), plan, mode=mode, device='cuda',
                            working_set_bytes=working_set)
    budget = sizing.vram_plan.required_bytes
    rt = OffloadRuntime(model.sequences(), plan, mode=mode, device='cuda', budget_bytes=budget,
                        working_set_bytes=working_set)
    torch.cuda.reset_peak_memory_stats()
    rt.attach()
    run(model, rt, steps, device='cuda')
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base <= budget
    rt.detach()


def test_meta_layers_load_into_pinned_regions_and_device() -> None:
    model = build_model()
    tensors = {}
    for seq in model.sequences():
        for i, layer in enumerate(seq.layers):
            for name, t in layer.state_dict().items():
                tensors[seq.qualified_name(i, name)] = t
    ref_rt = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cuda')
    ref_rt.attach()
    expected = run(model, ref_rt, SCENARIOS['two-inferences'], device='cuda')
    ref_rt.detach()
    meta = build_model(device='meta')
    rt = OffloadRuntime(meta.sequences(), ResidencyPlan({'lm': (0, 3)}), mode=Mode.PIPELINED,
                        device='cuda')
    rt.attach(StateDictSource(tensors))
    assert same(run(meta, rt, SCENARIOS['two-inferences'], device='cuda'), expected)
    rt.detach()


def test_layer_on_cuda_is_wrong_for_a_cpu_runtime() -> None:
    model = build_model()
    model.lm.to('cuda')
    with pytest.raises(LayerError, match='is on cuda:0'):
        OffloadRuntime(model.sequences(), device='cpu')


def test_layers_already_on_the_device_go_back_there() -> None:
    model = build_model()
    model.lm.to('cuda')
    before = {n: p.detach().clone() for n, p in model.lm.named_parameters()}
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (1,)}), mode=Mode.PIPELINED,
                        device='cuda')
    rt.attach()
    rt.detach()
    for n, p in model.lm.named_parameters():
        assert p.is_cuda and torch.equal(p, before[n])


def test_dropped_arena_is_unregistered_so_the_next_one_registers() -> None:
    """An arena dropped without release() must not leave its pages registered (H200 failure:
    the next arena, mapped at the same address, got cudaErrorHostMemoryAlreadyRegistered)."""
    import gc

    from alpamayo_offload.runtime.host import HostArena

    sizes = [3 << 20, 5 << 20]
    for _ in range(3):
        arena = HostArena(sizes, pin=True)
        assert arena.pinned and arena.regions[0].tensor.is_pinned()
        del arena
        gc.collect()
    torch.zeros(1, device='cuda')   # no pending CUDA error surfaces here
