"""Attach/detach, loading from meta, host accounting, stats and misuse errors (CPU)."""
from __future__ import annotations

import json

import pytest
import torch
from runtime_cases import SCENARIOS, build_model, run, same
from torch import nn

from alpamayo_offload.runtime import (
    BudgetError,
    LayerError,
    LayerSequence,
    Mode,
    OffloadRuntime,
    PlanError,
    ResidencyPlan,
    SourceError,
    StateDictSource,
    StateError,
)
from alpamayo_offload.runtime.offload import check_origin
from testkit.toy_model import ToyConfig, build_stack

MODES = [Mode.PRELOAD, Mode.SEQUENTIAL, Mode.PIPELINED]


def _snapshot(model: nn.Module) -> dict[str, tuple]:
    out = {}
    for name, p in model.named_parameters():
        out[name] = (id(p), p.detach().clone(), p.dtype, p.device, p.requires_grad, p.stride())
    for name, b in model.named_buffers():
        out['buffer:' + name] = (None, b.clone(), b.dtype, b.device, False, b.stride())
    return out


def _same_snapshot(a: dict[str, tuple], b: dict[str, tuple]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        (ia, ta, *rest_a), (ib, tb, *rest_b) = a[key], b[key]
        assert ia == ib, key
        assert rest_a == rest_b, key
        assert torch.equal(ta, tb), key


@pytest.mark.parametrize('mode', MODES)
def test_detach_restores_modules_exactly(mode: Mode) -> None:
    model = build_model()
    whole = nn.ModuleList([model.vit, model.lm, model.expert])
    before = _snapshot(whole)
    for _ in range(2):
        rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (1, 2)}), mode=mode,
                            device='cpu', instrument=True)
        rt.attach()
        run(model, rt, SCENARIOS['two-inferences'][:4])
        rt.detach()
        _same_snapshot(before, _snapshot(whole))
        assert all(not m._forward_pre_hooks and not m._forward_hooks for m in whole.modules())
    with pytest.raises(StateError, match='without attach'):
        rt.detach()


def test_attach_twice_is_refused() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), device='cpu')
    rt.attach()
    with pytest.raises(StateError, match='twice'):
        rt.attach()
    rt.detach()


def _source_for(model_seed: int = 0) -> tuple[StateDictSource, object]:
    model = build_model(model_seed)
    tensors = {}
    for seq in model.sequences():
        for i, layer in enumerate(seq.layers):
            for name, t in layer.state_dict().items():
                tensors[seq.qualified_name(i, name)] = t
    return StateDictSource(tensors), model


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('plan', [{}, {'lm': (0, 4), 'expert': (1,)}])
def test_meta_layers_load_from_a_source(mode: Mode, plan: dict) -> None:
    source, materialised = _source_for()
    expected = run(materialised, None, SCENARIOS['two-inferences'])
    meta = build_model(device='meta')
    rt = OffloadRuntime(meta.sequences(), ResidencyPlan(plan), mode=mode, device='cpu')
    rt.attach(source)
    assert same(run(meta, rt, SCENARIOS['two-inferences']), expected)
    rt.detach()
    assert all(p.device.type == 'meta' for p in meta.lm.parameters())
    assert all(b.device.type == 'meta' for b in meta.lm.buffers())


def test_meta_without_source_is_refused_and_rolled_back() -> None:
    model = build_model()
    model.lm[2] = build_stack(ToyConfig(hidden=48, intermediate=96, n_heads=3, n_kv_heads=1,
                                        head_dim=16), 1, device='meta')[0]
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'vit': (0,)}), device='cpu')
    before = _snapshot(model.lm[0])
    with pytest.raises(LayerError, match=r"'lm\.2\.input_layernorm\.weight'.*meta.*source"):
        rt.attach()
    assert not rt.attached
    _same_snapshot(before, _snapshot(model.lm[0]))
    assert not model.lm[0]._forward_pre_hooks


@pytest.mark.parametrize(('edit', 'match'), [
    (lambda sd: sd.pop('lm.1.q_proj.weight'), r"'lm\.1\.q_proj\.weight' is not in the source"),
    (lambda sd: sd.update({'lm.1.q_proj.weight': torch.zeros(3, 3, dtype=torch.bfloat16)}),
     r'shape \(3, 3\)'),
    (lambda sd: sd.update({'lm.1.inv_freq': torch.zeros(8, dtype=torch.bfloat16)}),
     'dtype torch.bfloat16.*expects.*torch.float32'),
])
def test_source_errors(edit, match: str) -> None:  # noqa: ANN001
    source, _ = _source_for()
    tensors = dict(source._tensors)
    edit(tensors)
    meta = build_model(device='meta')
    rt = OffloadRuntime(meta.sequences(), mode=Mode.PIPELINED, device='cpu')
    with pytest.raises(SourceError, match=match):
        rt.attach(StateDictSource(tensors))


def test_host_regions_are_exact() -> None:
    cfg = ToyConfig(hidden=256, intermediate=768, n_heads=4, n_kv_heads=2, head_dim=64)
    layers = build_stack(cfg, 4)
    rt = OffloadRuntime([LayerSequence('lm', layers)], ResidencyPlan({'lm': (2,)}),
                        mode=Mode.PIPELINED, device='cpu')
    expected_bytes = sum(p.numel() * p.element_size() for i in (0, 1, 3)
                         for p in [*layers[i].parameters(), *layers[i].buffers()])
    assert rt.streamed_param_bytes == expected_bytes
    rt.attach()
    assert rt.pinned_bytes == 0  # nothing to page-lock without CUDA
    assert expected_bytes <= rt.host_bytes <= 1.02 * expected_bytes
    for st in rt._streamed:
        assert st.region.tensor.data_ptr() % 4096 == 0
    rt.detach()
    assert rt.host_bytes == 0


def test_stats_are_plain_json_dataclasses() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (0,)}), mode=Mode.PIPELINED,
                        device='cpu', instrument=True)
    rt.attach()
    steps = SCENARIOS['two-inferences']
    run(model, rt, steps)
    stats = rt.stats()
    data = json.loads(stats.to_json())
    assert {t['sequence'] for t in data['totals']} == {'vit', 'lm', 'expert'}
    lm = next(t for t in stats.totals if t.sequence == 'lm')
    lm_passes = sum(1 for s in steps if s.sequence == 'lm')
    assert lm.repetitions == lm_passes and lm.calls == 5 * lm_passes
    resident = [c for c in stats.calls if c.sequence == 'lm' and c.layer == 0]
    assert all(not c.streamed and c.bytes == 0 and c.dma_ms == 0 for c in resident)
    streamed = [c for c in stats.calls if c.streamed]
    assert all(c.bytes > 0 and c.exe_ms >= 0 for c in streamed)
    assert lm.bytes == sum(c.bytes for c in stats.calls if c.sequence == 'lm')
    assert [c.repetition for c in stats.calls if c.sequence == 'vit' and c.layer == 0] == [0, 1]
    rt.reset_stats()
    assert rt.stats().calls == ()
    rt.detach()


def test_stats_need_instrumentation() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), device='cpu')
    rt.attach()
    with pytest.raises(StateError, match='instrument=True'):
        rt.stats()
    rt.detach()


def test_budget_refused_before_anything_moves() -> None:
    model = build_model()
    before = _snapshot(model.lm)
    with pytest.raises(BudgetError, match=r'5 resident layers.*budget 0\.000 GiB \(1000 B\)'):
        OffloadRuntime(model.sequences(), ResidencyPlan({'lm': tuple(range(5))}),
                       mode=Mode.PIPELINED, device='cpu', budget_bytes=1000)
    _same_snapshot(before, _snapshot(model.lm))
    with pytest.raises(BudgetError, match='working set'):
        OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cpu', budget_bytes=10**4)


def test_budget_counts_slots_and_margins() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), ResidencyPlan({'lm': (0,)}), mode=Mode.PIPELINED,
                        device='cpu', fixed_bytes=123, working_set_bytes=456)
    plan = rt.vram_plan
    assert plan.n_slots == 2 and plan.resident_layers == 1
    largest = max(sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers()])
                  for m in model.lm)
    assert largest <= plan.slot_bytes <= largest + 4096
    seq = OffloadRuntime(model.sequences(), mode=Mode.SEQUENTIAL, device='cpu').vram_plan
    assert seq.n_slots == 1
    all_resident = OffloadRuntime(model.sequences(), ResidencyPlan.all_of(model.sequences()),
                                  device='cpu').vram_plan
    assert all_resident.n_slots == 0


@pytest.mark.parametrize(('plan', 'match'), [
    ({'lm': (5,)}, r'\[5\] of sequence .lm. are out of range: it has 5 layers \(valid 0\.\.4\)'),
    ({'decoder': (0,)}, "names sequence 'decoder'"),
])
def test_bad_plans(plan: dict, match: str) -> None:
    model = build_model()
    with pytest.raises(PlanError, match=match):
        OffloadRuntime(model.sequences(), ResidencyPlan(plan), device='cpu')


@pytest.mark.parametrize('bad', [(-1,), (1, 1), ('0',)])
def test_plan_validation(bad: tuple) -> None:
    with pytest.raises(ValueError, match='ResidencyPlan'):
        ResidencyPlan({'lm': bad})


def test_tied_weights_are_refused() -> None:
    model = build_model()
    model.lm[3].up_proj.weight = model.lm[1].up_proj.weight
    match = r"lm\[3\] shares tensor 'up_proj.weight' with layer lm\[1\]"
    with pytest.raises(LayerError, match=match):
        OffloadRuntime(model.sequences(), device='cpu')


def test_shared_storage_is_refused() -> None:
    model = build_model()
    with torch.no_grad():
        model.lm[3].up_proj.weight = nn.Parameter(model.lm[1].up_proj.weight.view_as(
            model.lm[1].up_proj.weight))
    with pytest.raises(LayerError, match='shares the storage'):
        OffloadRuntime(model.sequences(), device='cpu')


def test_same_module_twice_is_refused() -> None:
    model = build_model()
    seqs = [LayerSequence('a', [model.lm[0]]), LayerSequence('b', [model.lm[0]])]
    with pytest.raises(LayerError, match=r'b\[0\] shares the module itself with layer a\[0\]'):
        OffloadRuntime(seqs, device='cpu')


def test_non_contiguous_is_refused() -> None:
    model = build_model()
    with torch.no_grad():
        w = model.lm[0].up_proj.weight
        model.lm[0].up_proj.weight = nn.Parameter(w.t().contiguous().t())
    with pytest.raises(LayerError, match='not contiguous'):
        OffloadRuntime(model.sequences(), device='cpu')


@pytest.mark.parametrize(('origin', 'target', 'ok'), [
    ('cpu', 'cpu', True), ('meta', 'cpu', True), ('cpu', 'cuda:0', True),
    ('cuda:0', 'cuda:0', True), ('cuda:1', 'cuda:0', False), ('cuda:0', 'cpu', False),
])
def test_wrong_device(origin: str, target: str, ok: bool) -> None:
    if ok:
        check_origin('lm[0]', 'w', torch.device(origin), torch.device(target))
    else:
        with pytest.raises(LayerError, match=f"'w' of layer lm\\[0\\] is on {origin}"):
            check_origin('lm[0]', 'w', torch.device(origin), torch.device(target))


def test_hint_for_unknown_sequence() -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), device='cpu')
    with pytest.raises(PlanError, match="hint_next\\('nope'\\)"):
        rt.hint_next('nope')
