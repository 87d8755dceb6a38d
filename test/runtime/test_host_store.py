"""`HostStore`: layers packed once, attached again and again without re-packing (CPU)."""
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
    SourceError,
    StateDictSource,
)

PLANS = [{}, {'lm': (0, 4), 'expert': (1,)}, {'vit': (0, 1, 2), 'lm': (2,)}]


def _inside(t: torch.Tensor, store: HostStore) -> bool:
    base = store._arena.tensor.data_ptr()
    return base <= t.data_ptr() < base + store.nbytes


def _on_meta(model: torch.nn.Module) -> bool:
    return all(t.device.type == 'meta' for t in [*model.parameters(), *model.buffers()])


def test_adopted_layers_run_as_before_under_every_plan_without_repacking() -> None:
    expected = run(build_model(), None, SCENARIOS['two-inferences'])
    model = build_model()
    store = HostStore.adopt(model.sequences())
    assert _on_meta(model.vit) and _on_meta(model.lm) and _on_meta(model.expert)
    for mode in (Mode.PRELOAD, Mode.SEQUENTIAL, Mode.PIPELINED):
        for plan in PLANS:
            rt = OffloadRuntime(model.sequences(), ResidencyPlan(plan), mode=mode, device='cpu')
            rt.attach(store)
            assert all(_inside(st.transfer.src, store) for st in rt._streamed)   # streamed in place
            assert rt.host_bytes == sum(st.region.span for st in rt._streamed)
            assert same(run(model, rt, SCENARIOS['two-inferences']), expected), (mode, plan)
            rt.detach()
            assert _on_meta(model.lm) and rt.host_bytes == 0
    assert store.nbytes >= sum(store.spec(name).nbytes for name in store.keys())


def test_meta_layers_are_filled_from_the_source_once() -> None:
    materialised = build_model()
    expected = run(materialised, None, SCENARIOS['two-inferences'])
    tensors = {seq.qualified_name(i, name): t for seq in materialised.sequences()
               for i, layer in enumerate(seq.layers) for name, t in layer.state_dict().items()}
    meta = build_model(device='meta')
    store = HostStore.adopt(meta.sequences(), StateDictSource(tensors))
    assert sorted(store.keys()) == sorted(tensors)
    assert store.spec('lm.1.q_proj.weight') == StateDictSource(tensors).spec('lm.1.q_proj.weight')
    rt = OffloadRuntime(meta.sequences(), ResidencyPlan({'lm': (1,)}), mode=Mode.PIPELINED,
                        device='cpu')
    rt.attach(store)
    assert same(run(meta, rt, SCENARIOS['two-inferences']), expected)
    rt.detach()


def test_store_refuses_meta_without_source_other_layers_and_unknown_names() -> None:
    with pytest.raises(LayerError, match='meta device and no source'):
        HostStore.adopt(build_model(device='meta').sequences())
    store = HostStore.adopt(build_model().sequences())
    other = build_model()
    lm_as_vit = LayerSequence('vit', other.lm, prefix='vit.')   # LM-shaped where ViT is stored
    rt = OffloadRuntime([lm_as_vit], mode=Mode.PIPELINED, device='cpu')
    with pytest.raises(LayerError, match=r'vit\[0\] is not in the host store'):
        rt.attach(store)
    assert not rt.attached and all(p.device.type == 'cpu' for p in other.lm.parameters())
    with pytest.raises(SourceError, match='not in the source'):
        store.spec('lm.9.q_proj.weight')


def test_adopting_frees_each_layers_own_copy() -> None:
    """The store holds the only copy: no autograd graph keeps the layers' tensors alive."""
    import weakref

    model = build_model()
    originals = [weakref.ref(p) for p in model.lm.parameters()]
    store = HostStore.adopt(model.sequences())
    assert all(ref() is None for ref in originals)
    assert not any(t.requires_grad for t in store._tensors.values())


def test_restored_layers_are_views_of_the_store_and_run_as_before() -> None:
    """`restore_layers` hands the weights back as host views: no copy, same result."""
    expected = run(build_model(), None, SCENARIOS['two-inferences'])
    model = build_model()
    store = HostStore.adopt(model.sequences())
    store.unpin()                                   # not pinned on the CPU: a no-op
    store.restore_layers(model.sequences())
    store.restore_layers(model.sequences())         # again: already the store's views
    tensors = [*model.vit.parameters(), *model.lm.parameters(), *model.expert.buffers()]
    assert tensors and all(_inside(t, store) for t in tensors)
    assert not any(p.requires_grad for p in model.lm.parameters())
    assert same(run(model, None, SCENARIOS['two-inferences']), expected)


def test_restoring_refuses_a_layer_that_holds_its_own_tensors() -> None:
    model = build_model()
    store = HostStore.adopt(model.sequences())
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (0,)}), mode=Mode.PIPELINED,
                        device='cpu')
    rt.attach(store)
    with pytest.raises(LayerError, match='holds a tensor of its own'):
        store.restore_layers(model.sequences())
    rt.detach()
    assert _on_meta(model.vit) and _on_meta(model.lm)      # nothing changed by the refusal
