"""Compressed streaming and compressed residency reproduce the preload run bit for bit (CPU codec).

The CPU codec (byte planes + zlib) runs the same schedule as nvCOMP on CUDA, synchronously, so
every piece of the compressed pipeline is checked here; test_compression_cuda.py checks nvCOMP.
"""
from __future__ import annotations

import logging

import pytest
import torch
from runtime_cases import LENGTHS, SCENARIOS, build_model, run, same

from alpamayo_offload.runtime import (
    BudgetError,
    CodecError,
    CodecIndex,
    Compression,
    HostStore,
    Mode,
    OffloadRuntime,
    PlaneZlibCodec,
    ResidencyPlan,
    select_codec,
)
from alpamayo_offload.runtime import codec as codec_module


@pytest.fixture(scope='module')
def reference() -> dict[str, list[torch.Tensor]]:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cpu')
    rt.attach()
    out = {name: run(model, rt, steps) for name, steps in SCENARIOS.items()}
    rt.detach()
    return out


def _bf16_bytes(n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n // 2, generator=gen) * 0.02).to(torch.bfloat16).view(torch.uint8)


def _weights(model: object) -> dict[str, torch.Tensor]:
    return {f'{name}.{k}': v.detach().clone() for name in ('vit', 'lm', 'expert')
            for k, v in getattr(model, name).state_dict().items()}


def test_plane_codec_round_trip_is_exact_and_shrinks_bf16() -> None:
    codec = PlaneZlibCodec(chunk_bytes=4096)
    flat = _bf16_bytes(3 * 4096 + 512)
    packed = codec.compress(flat)
    assert packed.index.raw_nbytes == flat.numel() and len(packed.index.chunks) == 4
    assert packed.index.nbytes < 0.9 * flat.numel()
    out = torch.full_like(flat, 7)
    codec.decompress_into(packed.data, packed.index, out)
    assert torch.equal(out, flat)
    assert CodecIndex.from_dict(packed.index.to_dict()) == packed.index


def test_plane_codec_stores_incompressible_chunks() -> None:
    gen = torch.Generator().manual_seed(1)
    flat = torch.randint(0, 256, (8192,), dtype=torch.uint8, generator=gen)
    codec = PlaneZlibCodec(chunk_bytes=4096)
    packed = codec.compress(flat)
    assert {c.method for c in packed.index.chunks} == {'stored'}
    out = torch.empty_like(flat)
    codec.decompress_into(packed.data, packed.index, out)
    assert torch.equal(out, flat)


def test_codec_refuses_a_region_of_another_codec() -> None:
    packed = PlaneZlibCodec().compress(_bf16_bytes(1024))
    with pytest.raises(CodecError, match='compressed with'):
        PlaneZlibCodec(element_size=1).decompress_into(packed.data, packed.index,
                                                       torch.empty(1024, dtype=torch.uint8))


def test_select_codec() -> None:
    cpu = torch.device('cpu')
    assert select_codec('off', cpu) is None
    assert select_codec(Compression.AUTO, cpu) is None
    assert isinstance(select_codec('on', cpu), PlaneZlibCodec)


def test_auto_without_nvcomp_logs_once(monkeypatch: pytest.MonkeyPatch,
                                       caplog: pytest.LogCaptureFixture) -> None:
    def missing() -> None:
        raise ImportError('no module named nvidia.nvcomp')

    monkeypatch.setattr(codec_module, '_import_nvcomp', missing)
    monkeypatch.setattr(codec_module, '_logged', set())
    with caplog.at_level(logging.WARNING):
        assert select_codec('auto', torch.device('cuda')) is None
        assert select_codec('auto', torch.device('cuda')) is None
    assert sum('uncompressed' in r.message for r in caplog.records) == 1
    with pytest.raises(CodecError, match='nvidia-nvcomp-cu13'):
        select_codec('on', torch.device('cuda'))


PLANS = {
    'all-streamed': ResidencyPlan(),
    'mixed': ResidencyPlan({'lm': (0, 3), 'vit': (1,)},
                           compressed={'lm': (1, 4), 'expert': (0, 2)}),
    'all-kept-compressed': ResidencyPlan(compressed={n: tuple(range(k))
                                                     for n, k in LENGTHS.items()}),
}


@pytest.mark.parametrize('mode', [Mode.SEQUENTIAL, Mode.PIPELINED])
@pytest.mark.parametrize('plan', sorted(PLANS))
def test_compressed_modes_match_preload(mode: Mode, plan: str,
                                        reference: dict[str, list[torch.Tensor]]) -> None:
    model = build_model()
    before = _weights(model)
    rt = OffloadRuntime(model.sequences(), PLANS[plan], mode=mode, device='cpu',
                        instrument=True, compression='on')
    rt.attach()
    streamed = rt._streamed
    assert streamed and all(st.compressed for st in streamed)
    kept = sum(len(v) for v in PLANS[plan].compressed.values())
    assert sum(st.transfer.on_device for st in streamed) == kept
    on_host = [st for st in streamed if not st.transfer.on_device]
    assert rt.host_bytes == sum(st.region.allocated_bytes for st in on_host)
    assert all(st.transfer.src.numel() < st.nbytes for st in streamed)
    for name, steps in SCENARIOS.items():
        assert same(run(model, rt, steps), reference[name]), (mode, plan, name)
    stats = rt.stats()
    assert stats.copies > 0
    raw = {(i.sequence, i.index): st.nbytes for i, st in
           zip((i for i in rt._infos if not i.resident), streamed, strict=True)}
    copied = [c for c in stats.calls if c.streamed and c.bytes]
    assert bool(copied) == bool(on_host)
    assert all(c.bytes < raw[(c.sequence, c.layer)] for c in copied)
    rt.detach()
    after = _weights(model)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_kept_compressed_layers_count_against_the_budget() -> None:
    model = build_model()
    plan = ResidencyPlan(compressed={n: tuple(range(k)) for n, k in LENGTHS.items()})
    probe = OffloadRuntime(model.sequences(), plan, device='cpu', compression='on')
    probe.attach()
    need = probe.vram_plan.required_bytes
    assert probe.vram_plan.compressed_bytes > 0
    probe.detach()
    rt = OffloadRuntime(model.sequences(), plan, device='cpu', compression='on',
                        budget_bytes=need - 1)
    with pytest.raises(BudgetError, match='compressed layers'):
        rt.attach()
    assert not rt.attached


def test_off_streams_raw_and_kept_layers_stream(reference: dict[str, list[torch.Tensor]]) -> None:
    model = build_model()
    plan = ResidencyPlan(compressed={'lm': (0, 1)})
    rt = OffloadRuntime(model.sequences(), plan, device='cpu', compression='off')
    rt.attach()
    assert not any(st.compressed for st in rt._streamed)
    for name, steps in SCENARIOS.items():
        assert same(run(model, rt, steps), reference[name])
    rt.detach()


def test_plan_refuses_a_layer_both_resident_and_compressed() -> None:
    with pytest.raises(ValueError, match='both resident and compressed'):
        ResidencyPlan({'lm': (1,)}, compressed={'lm': (1, 2)})


def test_detaching_layers_of_a_store_decodes_nothing(
        monkeypatch: pytest.MonkeyPatch, reference: dict[str, list[torch.Tensor]]) -> None:
    """Layers whose weights live in a host store go back to `meta` on detach without a decode.

    A decode takes device memory for the layer's raw bytes; a replan to a smaller cap detaches
    the larger plan after the new cap is in force, so it must not need any.
    """
    model = build_model()
    store = HostStore.adopt(model.sequences())
    for plan in ('mixed', 'all-kept-compressed'):
        rt = OffloadRuntime(model.sequences(), PLANS[plan], mode=Mode.PIPELINED, device='cpu',
                            compression='on')
        rt.attach(store)
        assert any(st.compressed for st in rt._streamed)
        assert same(run(model, rt, SCENARIOS['two-inferences']), reference['two-inferences'])
        with monkeypatch.context() as patch:
            patch.setattr(PlaneZlibCodec, 'decompress_into', _refuse_decode)
            rt.detach()
        assert all(p.device.type == 'meta' for p in model.lm.parameters())


def _refuse_decode(*_: object) -> None:
    raise AssertionError('detach decoded a layer that goes back to meta')
