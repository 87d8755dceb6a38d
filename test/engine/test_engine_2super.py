"""Alpamayo 2 Super through the engine: six cameras, samples, navigation guidance, questions.

Every offload mode gives the preload result bit for bit (tiny 2 Super, CPU); the host-memory
check refuses a model the machine cannot hold, before allocating.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from alpamayo_offload.engine import Engine, EngineConfig, estimate_working_set, example_input
from alpamayo_offload.engine.estimates import estimate_prompt_tokens
from alpamayo_offload.engine.loading import _load_model
from alpamayo_offload.model import (
    HostMemoryError,
    build_random,
    load_checkpoint,
    save_checkpoint,
    tiny_1_5_config,
    tiny_2super_config,
)

NAV = 'Turn right in 30m'
SMALL = dict(model='tiny-2super', fixed_decode_tokens=3, diffusion_steps=3, num_samples=2,
             guidance_weight=2.0)
PLANS = [('sequential', {}), ('pipelined', {'lm': (1,), 'expert': (0, 2), 'vit': (3,)})]


@pytest.fixture(scope='module')
def inputs():
    return example_input(108, 192, n_cameras=6)


def _run(mode, resident, inputs, **config):
    engine = Engine.from_config(EngineConfig(mode=mode, resident=resident,
                                             **{**SMALL, **config}))
    try:
        assert engine.model.cfg.is_2super
        return engine.infer(inputs, nav_text=NAV), engine.infer(inputs)
    finally:
        engine.close()


@pytest.fixture(scope='module')
def reference(inputs):
    return _run('preload', {}, inputs)


@pytest.mark.parametrize(('mode', 'resident'), PLANS)
def test_every_mode_matches_preload_bit_for_bit(inputs, reference, mode, resident) -> None:
    for got, ref in zip(_run(mode, resident, inputs), reference, strict=True):
        assert np.array_equal(got.samples_xyz, ref.samples_xyz)
        assert np.array_equal(got.samples_rot, ref.samples_rot)
        assert got.coc_token_ids == ref.coc_token_ids


def test_guided_and_plain_rollouts_differ(reference) -> None:
    guided, plain = reference
    assert guided.guided and not plain.guided
    assert guided.samples_xyz.shape == (2, 64, 3)
    assert not np.array_equal(guided.samples_xyz, plain.samples_xyz)


def test_layer_sequences_under_the_released_paths() -> None:
    model = build_random(tiny_2super_config())
    seqs, prefixes = model.layer_sequences(), model.sequence_prefixes()
    assert prefixes == {'vit': 'vlm.model.visual.blocks.',
                        'lm': 'vlm.model.language_model.layers.',
                        'expert': 'expert.expert.layers.'}
    names = {id(m): n for n, m in model.named_modules()}
    for seq, layers in seqs.items():
        assert [names[id(m)] + '.' for m in layers] == [
            f'{prefixes[seq]}{i}.' for i in range(len(layers))]
    assert 'expert.action_in_proj' in model.non_layer_modules()


def test_working_set_follows_the_six_camera_prompt() -> None:
    cfg, cfg15 = tiny_2super_config(), tiny_1_5_config()
    config = EngineConfig(model='tiny-2super')
    six = estimate_working_set(cfg, 4, config)
    assert six == estimate_working_set(cfg, 4, EngineConfig(model='tiny-2super', num_cameras=6))
    assert six > estimate_working_set(cfg, 4, EngineConfig(model='tiny-2super', num_cameras=4))
    assert estimate_prompt_tokens(cfg, 24) > estimate_prompt_tokens(cfg15, 16)


def test_question_answering_runs() -> None:
    engine = Engine.from_config(EngineConfig(model='tiny-2super', mode='sequential'))
    try:
        raw = example_input(108, 192, n_cameras=6)
        answer = engine.generate_text(raw.images, 'What is ahead?',
                                      camera_indices=(0, 1, 2, 3, 4, 5), max_new_tokens=4,
                                      sample=False)
    finally:
        engine.close()
    assert answer.decode_tokens == 3 and 1 <= len(answer.answer_token_ids[0]) <= 4


def test_host_memory_refused_with_both_numbers(tmp_path) -> None:
    model = build_random(tiny_2super_config(), seed=1)
    save_checkpoint(model, tmp_path)
    needed = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    with pytest.raises(HostMemoryError, match=rf'{needed} bytes.*1000 bytes') as err:
        load_checkpoint(tmp_path, available_host_bytes=1000)
    assert '2super' in str(err.value)
    assert load_checkpoint(tmp_path, available_host_bytes=needed) is not None
    cpu = torch.device('cpu')
    for config in (EngineConfig(model=str(tmp_path), mode='sequential'),
                   EngineConfig(model='tiny-2super')):
        with pytest.raises(HostMemoryError, match='1000 bytes'):
            _load_model(config, cpu, available_host_bytes=1000)


def test_the_illustrative_planner_profile_has_the_engines_full_preset_terms() -> None:
    from alpamayo_offload.model import full_2super_config
    from testkit.super2 import WORKING_SET_BYTES, table_bytes

    cfg = full_2super_config()
    assert estimate_working_set(cfg, 2, EngineConfig(model='2super')) == WORKING_SET_BYTES
    assert table_bytes() == 2 * cfg.text.vocab_size * cfg.text.hidden_size == 1_595_146_240
