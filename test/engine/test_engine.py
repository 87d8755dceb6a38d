"""The engine: every offload mode and plan gives the preload result bit for bit (tiny, CPU)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from alpamayo_offload.engine import (
    Engine,
    EngineBudgetError,
    EngineConfig,
    EngineError,
    EngineInfo,
    EngineInputError,
    example_input,
)
from alpamayo_offload.engine.identity import kernel_settings
from alpamayo_offload.model import build_random, save_checkpoint, tiny_config
from alpamayo_offload.model.layer_graphs import graph_key, slot_params

FIXTURE = (Path(__file__).resolve().parents[2] / '..' / 'shared' / 'fixtures'
           / 'alpamayo-official-tiny')
SMALL = dict(model='tiny', fixed_decode_tokens=4, diffusion_steps=3)


@pytest.fixture(scope='module')
def inputs():
    return example_input(108, 192)


def _preload_result(inputs, **config):
    """The reference every offloaded run is compared to: everything on the device."""
    engine = Engine.from_config(EngineConfig(mode='preload', **config))
    try:
        return engine.infer(inputs)
    finally:
        engine.close()


@pytest.fixture(scope='module')
def reference(inputs):
    return _preload_result(inputs, **SMALL)


@pytest.mark.parametrize(('mode', 'resident'), [
    ('sequential', {}),
    ('pipelined', {}),
    ('pipelined', {'lm': (0, 2), 'vit': (1,), 'expert': (1,)}),
    ('pipelined', {'lm': (0, 1, 2), 'vit': (0, 1, 2, 3), 'expert': (0, 1, 2)}),
    ('sequential', {'lm': (1,)}),
])
def test_offload_modes_match_preload_bit_for_bit(inputs, reference, mode, resident) -> None:
    engine = Engine.from_config(EngineConfig(mode=mode, resident=resident, instrument=True,
                                             **SMALL))
    try:
        first = engine.infer(inputs)
        second = engine.infer(inputs)   # a second inference starts from the primed pipeline
    finally:
        engine.close()
    for got in (first, second):
        assert np.array_equal(got.samples_xyz, reference.samples_xyz)
        assert np.array_equal(got.samples_rot, reference.samples_rot)
        assert got.coc_token_ids == reference.coc_token_ids
        assert got.decode_tokens == 4
    assert set(first.timings) == {'preprocess', 'vision', 'prefill', 'decode', 'diffusion',
                                  'postprocess', 'total'}
    assert first.streaming['bytes_streamed'] > 0 or resident.get('lm') == (0, 1, 2)


def test_replan_and_embedding_on_host_keep_the_result(inputs, reference) -> None:
    engine = Engine.from_config(EngineConfig(mode='pipelined', **SMALL))
    try:
        engine.replan(resident={'lm': (1,)}, mode='pipelined', embed_on_host=True)
        assert engine.model.vlm.model.language_model.embed_tokens.weight.device.type == 'cpu'
        got = engine.infer(inputs)
        assert engine.info.embed_on_host is True
        assert engine.info.resident_layers['lm'] == (1,)
        assert engine.info.kernel_settings == kernel_settings(   # as a profile records
            fused_norms=True, layer_graphs=False)                  # (graphs need CUDA)
    finally:
        engine.close()
    assert np.array_equal(got.samples_xyz, reference.samples_xyz)


def test_after_a_failed_detach_the_engine_refuses_plans_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A detach that fails (e.g. out of device memory) leaves layers in an unknown state: the
    engine holds no runtime and refuses every later plan, naming why, instead of detaching
    half-detached layers again or attaching a plan over them."""
    engine = Engine.from_config(EngineConfig(mode='pipelined', pin_all_layers=True, **SMALL))
    runtime = engine._runtime
    try:
        with monkeypatch.context() as patch:
            patch.setattr(runtime, 'detach', _failing_detach)
            with pytest.raises(MemoryError):
                engine.replan(resident={'lm': (1,)}, mode='pipelined')
        with pytest.raises(EngineError, match='could not be detached.*MemoryError'):
            engine.replan(resident={'lm': (1,)}, mode='pipelined')
        engine.close()                   # nothing left to detach
    finally:
        runtime.detach()


def _failing_detach() -> None:
    raise MemoryError('device memory exhausted while detaching')


def test_layers_pinned_once_give_the_result_under_every_plan(inputs, reference) -> None:
    """`pin_all_layers`: the layers live in one host store; replans only re-point them."""
    engine = Engine.from_config(EngineConfig(mode='pipelined', pin_all_layers=True, **SMALL))
    try:
        assert engine.info.host_store_bytes > engine.info.pinned_bytes == 0  # no CUDA
        layers = engine.model.vlm.model.language_model.layers
        for mode, resident in (('pipelined', {}), ('pipelined', {'lm': (0, 2), 'vit': (1,)}),
                               ('sequential', {'expert': (0, 1)}), ('preload', {})):
            engine.replan(resident=resident, mode=mode)
            got = engine.infer(inputs)
            assert np.array_equal(got.samples_xyz, reference.samples_xyz), (mode, resident)
            assert got.coc_token_ids == reference.coc_token_ids
    finally:
        engine.close()
    assert all(p.is_meta for p in layers.parameters())   # the store keeps the weights


def test_host_model_hands_the_stores_weights_over_without_a_copy(inputs, reference) -> None:
    """`host_model`: every weight on the host, the layers views of the store, same result."""
    from alpamayo_offload.model import SyntheticTextIds, prepare_inputs, run_inference

    engine = Engine.from_config(EngineConfig(mode='pipelined', pin_all_layers=True, **SMALL))
    store = engine._source
    model = engine.host_model()
    base, span = store._arena.tensor.data_ptr(), store.nbytes
    layers = [t for seq in model.layer_sequences().values() for layer in seq
              for t in layer.parameters()]
    assert layers and all(base <= t.data_ptr() < base + span for t in layers)
    assert all(t.device.type == 'cpu' for t in [*model.parameters(), *model.buffers()])
    x = prepare_inputs(np.asarray(inputs.images), np.asarray(inputs.ego_history_xyz),
                       np.asarray(inputs.ego_history_rot), model.cfg, SyntheticTextIds())
    with torch.no_grad():
        got = run_inference(model, x, torch.device('cpu'), engine.config.decode_options())
    assert np.array_equal(got.xyz.double().numpy(), reference.samples_xyz)
    assert list(got.coc_token_ids[0]) == reference.coc_token_ids
    with pytest.raises(EngineError, match='handed over to the host'):
        engine.replan(resident={})


def test_host_model_refuses_layers_read_from_a_checkpoint(tmp_path: Path) -> None:
    save_checkpoint(build_random(tiny_config()), tmp_path)
    engine = Engine.from_config(EngineConfig(model=str(tmp_path), mode='pipelined',
                                             fixed_decode_tokens=2))
    with pytest.raises(EngineError, match='no host copy to hand over'):
        engine.host_model()


@pytest.mark.parametrize('tokens', [4, 1])
@pytest.mark.parametrize('resident', [{}, {'lm': (0,)}, {'lm': (0, 1, 2)},
                                      {'lm': (0, 2), 'vit': (1,), 'expert': (1,)}])
def test_every_pass_prefetches_the_sequence_that_follows(inputs, resident, tokens) -> None:
    """No copy is thrown away: each pass hints what runs next (vision -> LM, decode -> expert,
    diffusion -> the next frame's ViT), so no prefetch guesses wrong and gets overwritten."""
    engine = Engine.from_config(EngineConfig(
        mode='pipelined', resident=resident, model='tiny', fixed_decode_tokens=tokens,
        max_decode_tokens=tokens, diffusion_steps=3, instrument=True))
    try:
        for _ in range(2):
            engine.infer(inputs)
            stats = engine.runtime_stats(reset=True)
            assert stats.copies > 0
            assert stats.wasted_copies == 0, (resident, tokens)
    finally:
        engine.close()


def test_a_loaded_engine_runs_only_once_a_plan_is_attached(inputs, reference) -> None:
    engine = Engine.load(EngineConfig(mode='pipelined', **SMALL))
    try:
        for use in (lambda: engine.infer(inputs), lambda: engine.info):
            with pytest.raises(EngineError, match='no plan attached'):
                use()
        engine.replan(resident={'lm': (1,)}, mode='pipelined')
        got = engine.infer(inputs)
        assert engine.info.resident_layers['lm'] == (1,)
    finally:
        engine.close()
    assert np.array_equal(got.samples_xyz, reference.samples_xyz)


def test_a_plan_over_budget_is_an_engine_budget_error_and_the_model_stays(inputs,
                                                                          reference) -> None:
    """Callers catch the type (the engine loader falls back to another plan), not a cause."""
    engine = Engine.load(EngineConfig(mode='pipelined', **SMALL))
    try:
        engine.replan(resident={}, mode='pipelined', embed_on_host=True)
        floor = engine.info.required_bytes
        with pytest.raises(EngineBudgetError, match='over by'):
            engine.replan(resident={'lm': (0, 1, 2)}, mode='pipelined', budget_bytes=floor)
        engine.replan(resident={}, mode='pipelined', budget_bytes=floor, embed_on_host=True)
        assert np.array_equal(engine.infer(inputs).samples_xyz, reference.samples_xyz)
        info = engine.info
        assert isinstance(info, EngineInfo) and info.budget_bytes == floor
        plain = info.as_dict()
        assert plain['resident_layers'] == {'vit': [], 'lm': [], 'expert': []}
        assert plain['required_bytes'] == floor and plain['gpu'] == ''   # CPU: no GPU fields
    finally:
        engine.close()


def test_streamed_bytes_count_every_pass(inputs) -> None:
    engine = Engine.from_config(EngineConfig(mode='pipelined', **SMALL))
    try:
        got = engine.infer(inputs)
        sizes = engine._layer_bytes
    finally:
        engine.close()
    expected = sum(sizes['vit']) + 5 * sum(sizes['lm']) + 3 * sum(sizes['expert'])
    assert got.streaming['bytes_streamed'] == expected
    phases = {'vision': sum(sizes['vit']), 'prefill': sum(sizes['lm']),
              'decode': 4 * sum(sizes['lm']), 'diffusion': 3 * sum(sizes['expert'])}
    assert {p: got.streaming[f'bytes_streamed.{p}'] for p in phases} == phases
    # Raw streaming copies each layer's aligned flat region: at least its bytes, every pass.
    assert got.streaming['bytes_copied'] >= expected
    assert sum(got.streaming[f'bytes_copied.{p}'] for p in phases) == \
        got.streaming['bytes_copied']


def test_budget_that_cannot_fit_is_refused_with_numbers() -> None:
    with pytest.raises(EngineError, match=r'does not fit: needs .* GiB'):
        Engine.from_config(EngineConfig(mode='pipelined', budget_bytes=1024, **SMALL))


def test_unknown_model_is_refused() -> None:
    with pytest.raises(EngineError, match="neither a checkpoint directory nor a preset"):
        Engine.from_config(EngineConfig(model='no-such-model'))


def test_bad_config_values_are_refused() -> None:
    with pytest.raises(ValueError, match='mode'):
        EngineConfig(mode='fast')
    with pytest.raises(ValueError, match='diffusion_steps = 0'):
        EngineConfig(diffusion_steps=0)
    with pytest.raises(ValueError, match='resident names'):
        EngineConfig(resident={'decoder': (0,)})
    with pytest.raises(ValueError, match='budget_bytes'):
        EngineConfig(budget_bytes=0)


def test_malformed_input_is_an_input_error(inputs) -> None:
    engine = Engine.from_config(EngineConfig(mode='pipelined', **SMALL))
    try:
        bad = example_input(108, 192)
        object.__setattr__(bad, 'ego_history_xyz', np.full((16, 3), np.nan))
        with pytest.raises(EngineInputError, match='NaN'):
            engine.infer(bad)
        assert engine.infer(inputs).xyz.shape == (64, 3)   # still usable afterwards
    finally:
        engine.close()


@pytest.mark.skipif(not FIXTURE.is_dir(), reason=f'fixture not found at {FIXTURE}')
def test_checkpoint_streams_layers_from_safetensors_like_a_full_load(inputs) -> None:
    """Layers stay on meta and are read straight into place; same result as all-resident."""
    streamed = Engine.from_config(EngineConfig(model=str(FIXTURE), mode='pipelined',
                                               fixed_decode_tokens=3, diffusion_steps=2))
    preloaded = Engine.from_config(EngineConfig(model=str(FIXTURE), mode='preload',
                                                fixed_decode_tokens=3, diffusion_steps=2))
    try:
        a, b = streamed.infer(inputs), preloaded.infer(inputs)
        lm0 = streamed.model.vlm.model.language_model.layers[0].mlp.up_proj.weight
        assert lm0.dtype == torch.bfloat16   # as stored, nothing cast
    finally:
        streamed.close()
        preloaded.close()
    assert np.array_equal(a.samples_xyz, b.samples_xyz)
    assert a.coc_token_ids == b.coc_token_ids


def test_checkpoint_diffusion_steps_are_run_unless_overridden(inputs, tmp_path: Path) -> None:
    """A checkpoint's diffusion_cfg.num_inference_steps is what runs; an explicit value wins."""
    base = tiny_config()
    cfg = dataclasses.replace(base, action=dataclasses.replace(base.action, diffusion_steps=6))
    save_checkpoint(build_random(cfg), tmp_path)
    steps = {}
    for override in (None, 3):
        engine = Engine.from_config(EngineConfig(model=str(tmp_path), mode='pipelined',
                                                 fixed_decode_tokens=2,
                                                 diffusion_steps=override))
        try:
            result = engine.infer(inputs)
            steps[override] = (engine.info.diffusion_steps, result.diffusion_steps,
                               result.streaming['bytes_streamed'])
            expert_bytes = sum(engine._layer_bytes['expert'])
        finally:
            engine.close()
    assert steps[None][:2] == (6, 6) and steps[3][:2] == (3, 3)
    assert steps[None][2] - steps[3][2] == 3 * expert_bytes


def test_preset_runs_ten_steps_by_default(inputs) -> None:
    engine = Engine.from_config(EngineConfig(mode='preload', fixed_decode_tokens=1))
    try:
        assert engine.info.diffusion_steps == 10
        assert engine.infer(inputs).diffusion_steps == 10
    finally:
        engine.close()


# bf16 on the GPU with deterministic algorithms, as every CUDA test runs.
CUDA = dict(model='tiny', device='cuda', fixed_decode_tokens=6, diffusion_steps=4,
            deterministic=True)


@pytest.mark.cuda
@pytest.mark.parametrize(('mode', 'resident'), [
    ('sequential', {}),
    ('pipelined', {}),
    ('pipelined', {'lm': (0, 2), 'vit': (1, 2), 'expert': (2,)}),
])
def test_cuda_offload_matches_preload_bit_for_bit(mode, resident) -> None:
    """bf16 on the GPU with deterministic algorithms: streamed == preload, second run too."""
    inputs = example_input(216, 384)
    ref = _preload_result(inputs, **CUDA)
    engine = Engine.from_config(EngineConfig(mode=mode, resident=resident, **CUDA))
    try:
        runs = [engine.infer(inputs) for _ in range(2)]
    finally:
        engine.close()
    for got in runs:
        assert np.array_equal(got.samples_xyz, ref.samples_xyz)
        assert got.coc_token_ids == ref.coc_token_ids


@pytest.mark.cuda
def test_cuda_layers_pinned_once_match_preload_bit_for_bit() -> None:
    """One pinned host store, three plans in turn: streamed in place, same result."""
    inputs = example_input(216, 384)
    ref = _preload_result(inputs, **CUDA)
    engine = Engine.from_config(EngineConfig(mode='pipelined', pin_all_layers=True, **CUDA))
    try:
        for resident in ({}, {'lm': (0, 2), 'vit': (1, 2), 'expert': (2,)}, {}):
            engine.replan(resident=resident, mode='pipelined')
            assert 0 < engine.info.pinned_bytes <= engine.info.host_store_bytes
            got = engine.infer(inputs)
            assert np.array_equal(got.samples_xyz, ref.samples_xyz), resident
            assert got.coc_token_ids == ref.coc_token_ids
    finally:
        engine.close()


@pytest.mark.cuda
def test_cuda_host_model_unpins_the_store_and_keeps_every_weight() -> None:
    """`host_model` after GPU plans: pageable host views of the store, non-layer on the CPU."""
    engine = Engine.from_config(EngineConfig(mode='pipelined', pin_all_layers=True, **CUDA))
    engine.replan(resident={'lm': (0,)}, mode='pipelined')
    store = engine._source
    expected = {k: store._get(k).clone() for k in store.keys()}
    model = engine.host_model()
    assert not store.pinned
    tensors = [*model.parameters(), *model.buffers()]
    assert all(t.device.type == 'cpu' and not t.is_pinned() for t in tensors)
    named = {**dict(model.named_parameters(remove_duplicate=False)),
             **dict(model.named_buffers(remove_duplicate=False))}
    assert all(torch.equal(named[k], v) for k, v in expected.items())


@pytest.mark.cuda
def test_cuda_embedding_on_host_matches_preload_bit_for_bit() -> None:
    """The planner may keep the token embedding on the host: same tokens, same trajectory."""
    inputs = example_input(216, 384)
    engine = Engine.from_config(EngineConfig(mode='preload', **CUDA))
    try:
        ref = engine.infer(inputs)
        engine.replan(resident={'lm': (1,)}, mode='pipelined', embed_on_host=True)
        got = engine.infer(inputs)
    finally:
        engine.close()
    assert got.coc_token_ids == ref.coc_token_ids
    assert np.array_equal(got.samples_xyz, ref.samples_xyz)


def test_streamed_layers_name_their_slot_for_its_graphs(inputs) -> None:
    """A streamed layer's graph key is its slot's: as many keys per sequence as slots, and the
    language model's never the expert's; a resident layer's is its own."""
    engine = Engine.from_config(EngineConfig(mode='pipelined', resident={'lm': (0,)}, **SMALL))
    keys: dict[str, set] = {'lm': set(), 'expert': set()}
    try:
        seqs = engine.model.layer_sequences()
        hooks = []
        for name in keys:
            for i, layer in enumerate(seqs[name]):
                layer.graph_slot_params = None if (name, i) == ('lm', 0) else slot_params(layer)
                hooks.append(layer.register_forward_hook(
                    lambda m, a, o, name=name: keys[name].add(graph_key(m))))
        engine.infer(inputs)
        for h in hooks:
            h.remove()
        assert id(seqs['lm'][0]) in keys['lm']
        slots = 2                                     # the pipelined double buffer
        assert len(keys['lm'] - {id(seqs['lm'][0])}) == slots
        assert len(keys['expert']) == slots and not keys['lm'] & keys['expert']
    finally:
        engine.close()


@pytest.mark.cuda
@pytest.mark.parametrize('num_samples', [1, 2])
def test_cuda_streamed_layer_graphs_change_no_bit(num_samples: int) -> None:
    """Graphs of streamed layers, by slot, == the eager whole-GPU run, replayed by every layer
    streamed through the slot."""
    inputs = example_input(216, 384)
    config = dict(CUDA, num_samples=num_samples, sample=num_samples > 1)
    ref = _preload_result(inputs, layer_graphs=False, **config)
    engine = Engine.from_config(EngineConfig(mode='pipelined', resident={'lm': (0,)},
                                             stream_graphs=True, **config))
    try:
        assert engine.info.kernel_settings.endswith('graphs=resident+streamed')
        runs = [engine.infer(inputs) for _ in range(3)]
        assert 0 < engine.info.layer_graphs
        for got in runs:
            assert np.array_equal(got.samples_xyz, ref.samples_xyz)
            assert np.array_equal(got.samples_rot, ref.samples_rot)
            assert got.coc_token_ids == ref.coc_token_ids
    finally:
        engine.close()


@pytest.mark.cuda
@pytest.mark.parametrize('num_samples', [1, 2])
def test_cuda_layer_graphs_change_no_bit(num_samples: int) -> None:
    """Graphs replayed on resident layers == the eager whole-GPU run, in every plan and replan."""
    inputs = example_input(216, 384)
    config = dict(CUDA, num_samples=num_samples, sample=num_samples > 1)
    ref = _preload_result(inputs, layer_graphs=False, **config)
    engine = Engine.from_config(EngineConfig(mode='preload', **config))
    try:
        for mode, resident in (('preload', {}), ('pipelined', {'lm': (0, 2), 'expert': (1, 2)}),
                               ('preload', {})):
            engine.replan(resident=resident, mode=mode)
            assert engine.info.layer_graphs == 0            # captured on first use
            runs = [engine.infer(inputs) for _ in range(2)]      # capture, then replay
            assert engine.info.layer_graphs > 0
            for got in runs:
                assert np.array_equal(got.samples_xyz, ref.samples_xyz), resident
                assert np.array_equal(got.samples_rot, ref.samples_rot), resident
                assert got.coc_token_ids == ref.coc_token_ids
    finally:
        engine.close()


def test_presized_example_gives_the_same_trajectory() -> None:
    """Frames resized ahead (as the node does) give the model the same pixels: same answer."""
    engine = Engine.from_config(EngineConfig(mode='preload', **SMALL))
    try:
        raw = engine.example_input(216, 384)
        presized = engine.example_input(216, 384, presized=True)
        want, got = engine.infer(raw), engine.infer(presized)
    finally:
        engine.close()
    h, w = engine.image_sizing.size_hw(216, 384)
    assert presized.images.shape == (4, 4, h, w, 3) and (h, w) != (216, 384)
    assert np.array_equal(got.samples_xyz, want.samples_xyz)
    assert np.array_equal(got.samples_rot, want.samples_rot)
    assert got.coc_token_ids == want.coc_token_ids


def test_per_op_norms_give_the_fused_result_on_cpu_and_say_so(inputs, reference) -> None:
    engine = Engine.from_config(EngineConfig(mode='preload', fused_norms=False, **SMALL))
    try:
        got = engine.infer(inputs)
        assert 'norms=per-op' in engine.info.kernel_settings   # profiles differ
    finally:
        engine.close()
    assert np.array_equal(got.samples_xyz, reference.samples_xyz)


@pytest.mark.cuda
def test_cuda_kernel_settings_follow_the_plans_graphs() -> None:
    """A plan re-attached with fewer graphs (streamed layers eager, or none) says so."""
    engine = Engine.from_config(EngineConfig(mode='preload', **CUDA))
    try:
        assert engine.info.kernel_settings.endswith('graphs=resident+streamed')   # the default
        engine.replan(resident={'lm': (0,)}, mode='pipelined', stream_graphs=False)
        assert engine.info.kernel_settings.endswith('graphs=resident')
        engine.replan(resident={}, mode='preload', layer_graphs=False)
        assert engine.info.kernel_settings.endswith('graphs=off')
        engine.infer(example_input(216, 384))
        assert engine.info.layer_graphs == 0
    finally:
        engine.close()


@pytest.mark.parametrize('pin_all_layers', [False, True])
def test_compressed_streaming_and_residency_match_preload(inputs, reference,
                                                          pin_all_layers) -> None:
    """The CPU codec through the whole engine: streamed and kept-compressed layers, bit for bit."""
    engine = Engine.from_config(EngineConfig(
        mode='pipelined', compression='on', resident={'vit': (0,)},
        compressed={'lm': (1,), 'expert': (0, 2)}, pin_all_layers=pin_all_layers, **SMALL))
    try:
        runs = [engine.infer(inputs) for _ in range(2)]
        assert engine.info.compressed_layers['expert'] == (0, 2)
    finally:
        engine.close()
    for got in runs:
        assert np.array_equal(got.samples_xyz, reference.samples_xyz)
        assert got.coc_token_ids == reference.coc_token_ids


def test_compression_setting_is_validated() -> None:
    with pytest.raises(ValueError, match='compression'):
        EngineConfig(compression='maybe')
    with pytest.raises(ValueError, match='compressed names'):
        EngineConfig(compressed={'decoder': (0,)})


@pytest.mark.cuda
@pytest.mark.parametrize('compressed', [{}, {'lm': (0, 2), 'expert': (1,)}])
def test_cuda_compressed_matches_preload_bit_for_bit(compressed) -> None:
    """nvCOMP streaming (and VRAM-compressed layers) in deterministic mode == preload."""
    pytest.importorskip('nvidia.nvcomp')
    inputs = example_input(216, 384)
    ref = _preload_result(inputs, **CUDA)
    engine = Engine.from_config(EngineConfig(mode='pipelined', compression='on',
                                             compressed=compressed, **CUDA))
    try:
        runs = [engine.infer(inputs) for _ in range(2)]
    finally:
        engine.close()
    for got in runs:
        assert np.array_equal(got.samples_xyz, ref.samples_xyz)
        assert got.coc_token_ids == ref.coc_token_ids
