"""The release config files: every field honoured, refused by name, or ignored by list."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers.activations import ACT2FN

from alpamayo_offload.model import (
    AlpamayoConfig,
    CheckpointError,
    ConfigError,
    DecodeOptions,
    SyntheticTextIds,
    build_meta,
    build_random,
    inputs_from_processed,
    load_checkpoint,
    run_inference,
    save_checkpoint,
    tiny_config,
)
from alpamayo_offload.model.errors import UnsupportedConfigError


def _files() -> tuple[dict[str, Any], dict[str, Any]]:
    cfg = tiny_config()
    return cfg.to_release_dict(), cfg.to_vlm_dict()


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split('.')
    for key in parents:
        data = data[key]
    data[leaf] = value


# (file, field path, value): each must be refused with an error naming the field and value.
REFUSED = [
    ('config.json', 'diffusion_cfg._target_', 'alpamayo_r1.diffusion.ddpm.DDPM'),
    ('config.json', 'diffusion_cfg.int_method', 'heun'),
    ('config.json', 'diffusion_cfg.num_inference_steps', 0),
    ('config.json', 'diffusion_cfg.num_inference_steps', 2.5),
    ('config.json', 'diffusion_cfg.x_dims', [32, 2]),
    ('config.json', 'diffusion_cfg.guidance_scale', 2.0),
    ('config.json', 'expert_cfg.hidden_act', 'no_such_activation'),
    ('config.json', 'expert_cfg.attention_bias', 'yes'),
    ('config.json', 'expert_cfg.num_hidden_layers', 2),
    ('config.json', 'expert_cfg.num_key_value_heads', 4),
    ('config.json', 'expert_cfg.rope_theta', 10000.0),
    ('config.json', 'expert_cfg.max_position_embeddings', 4096),
    ('config.json', 'expert_cfg.dtype', 'int8'),
    ('config.json', 'expert_cfg.sliding_window', 128),
    ('config.json', 'action_in_proj_cfg._target_', 'alpamayo_r1.models.PerWaypointActionInProj'),
    ('config.json', 'action_in_proj_cfg.out_dim', 7),
    ('config.json', 'action_in_proj_cfg.dropout', 0.1),
    ('config.json', 'action_out_proj_cfg.bias', False),
    ('config.json', 'action_space_cfg._target_', 'alpamayo_r1.action_space.BicycleActionSpace'),
    ('config.json', 'action_space_cfg.jerk_lambda', 1.0),
    ('config.json', 'hist_traj_tokenizer_cfg.predict_yaw', True),
    ('config.json', 'hist_traj_tokenizer_cfg.clip', True),
    ('config.json', 'traj_tokenizer_cfg._target_', 'alpamayo_r1.OtherTokenizer'),
    ('config.json', 'traj_tokenizer_cfg.vocab_offset', 1),
    ('config.json', 'add_special_tokens', False),
    ('config.json', 'keep_same_dtype', False),
    ('config.json', 'vlm_backend', 'llava'),
    ('config.json', 'attn_implementation', 'flex_attention'),
    ('config.json', 'dtype', 'int8'),
    ('config.json', 'model_dtype', 'float8'),
    ('config.json', 'expert_non_causal_attention', 'yes'),
    ('config.json', 'tokens_per_history_traj', 16),
    ('config.json', 'traj_token_ids.future_start', 1),
    ('config.json', 'guidance_scale', 1.5),
    ('vlm_config.json', 'text_config.hidden_act', 'no_such_activation'),
    ('vlm_config.json', 'text_config.attention_bias', 1),
    ('vlm_config.json', 'text_config.rope_parameters.rope_type', 'yarn'),
    ('vlm_config.json', 'text_config.rope_parameters.mrope_interleaved', False),
    ('vlm_config.json', 'text_config.rope_parameters.factor', 2.0),
    ('vlm_config.json', 'text_config.sliding_window', 4096),
    ('vlm_config.json', 'text_config.tie_word_embeddings', True),
    ('vlm_config.json', 'vision_config.hidden_act', 'no_such_activation'),
    ('vlm_config.json', 'vision_config.in_channels', 4),
    ('vlm_config.json', 'vision_config.rope_parameters.rope_theta', 500.0),
    ('vlm_config.json', 'vision_config.window_size', 112),
    ('vlm_config.json', 'tie_word_embeddings', True),
    ('vlm_config.json', 'image_token_id', 1),
]


@pytest.mark.parametrize(('file', 'path', 'value'), REFUSED,
                         ids=[f'{f} {p}={v!r}' for f, p, v in REFUSED])
def test_unsupported_field_is_refused_by_name(file: str, path: str, value: Any) -> None:
    release, vlm = _files()
    _set(release if file == 'config.json' else vlm, path, value)
    with pytest.raises(UnsupportedConfigError) as err:
        AlpamayoConfig.from_release_dicts(release, vlm)
    section, _, key = path.rpartition('.')
    named = f'{file} {section}' if section else file
    assert err.value.field.startswith(named) and str(err.value).startswith(err.value.field)
    assert key in err.value.field or section in err.value.field, (err.value.field, path)
    assert repr(value) in str(err.value), str(err.value)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, CheckpointError)


def test_traj_token_range_that_moves_the_special_ids_is_refused() -> None:
    release, vlm = _files()
    release['traj_vocab_size'] = 768   # the code default, which shifts every special id
    with pytest.raises(UnsupportedConfigError, match='traj_token_start_idx \\+ traj_vocab_size'):
        AlpamayoConfig.from_release_dicts(release, vlm)


def test_refused_field_reaches_the_loader_by_name(tmp_path: Path) -> None:
    save_checkpoint(build_random(tiny_config()), tmp_path)
    release = json.loads((tmp_path / 'config.json').read_text())
    release['diffusion_cfg']['int_method'] = 'heun'
    (tmp_path / 'config.json').write_text(json.dumps(release))
    with pytest.raises(UnsupportedConfigError, match=r"diffusion_cfg\.int_method = 'heun'.*"
                                                     r"supports 'euler'"):
        load_checkpoint(tmp_path)


IGNORED = [
    ('config.json', 'transformers_version', '4.57.1'),
    ('config.json', '_name_or_path', '/somewhere'),
    ('config.json', 'architectures', ['AlpamayoR1']),
    ('config.json', 'tie_word_embeddings', True),
    ('config.json', 'diffusion_cfg.train_timestep_sampler', 'beta'),
    ('config.json', 'expert_cfg.vocab_size', 155697),
    ('config.json', 'expert_cfg.initializer_range', 0.5),
    ('config.json', 'hist_traj_tokenizer_cfg.ego_yaw_min', -1.0),
    ('config.json', 'traj_tokenizer_cfg.dims_min', [-1.0, -1.0]),
    ('vlm_config.json', 'text_config.initializer_range', 0.5),
    ('vlm_config.json', 'text_config.eos_token_id', 7),
    ('vlm_config.json', 'vision_config.initializer_range', 0.5),
    ('vlm_config.json', 'output_hidden_states', True),
]


@pytest.mark.parametrize(('file', 'path', 'value'), IGNORED,
                         ids=[f'{f} {p}' for f, p, _ in IGNORED])
def test_fields_that_cannot_change_numbers_are_ignored_by_list(file: str, path: str,
                                                               value: Any) -> None:
    release, vlm = _files()
    _set(release if file == 'config.json' else vlm, path, value)
    assert AlpamayoConfig.from_release_dicts(release, vlm) == tiny_config()


def test_expert_fields_beyond_the_four_are_honoured_in_the_built_modules() -> None:
    release, vlm = _files()
    release['expert_cfg'].update(hidden_act='gelu', attention_bias=True, rms_norm_eps=1e-5)
    cfg = AlpamayoConfig.from_release_dicts(release, vlm)
    assert (cfg.expert.hidden_act, cfg.expert.attention_bias, cfg.expert.rms_norm_eps) == (
        'gelu', True, 1e-5)
    model = build_meta(cfg)
    layer, lm_layer = model.expert.layers[0], model.vlm.model.language_model.layers[0]
    assert type(layer.mlp.act_fn) is type(ACT2FN['gelu'])
    assert type(lm_layer.mlp.act_fn) is type(ACT2FN['silu'])   # the VLM keeps its own
    assert layer.self_attn.q_proj.bias is not None and lm_layer.self_attn.q_proj.bias is None
    assert layer.input_layernorm.variance_epsilon == 1e-5
    assert AlpamayoConfig.from_release_dicts(cfg.to_release_dict(), cfg.to_vlm_dict()) == cfg


def test_text_and_vision_activation_and_bias_are_honoured() -> None:
    release, vlm = _files()
    vlm['text_config'].update(hidden_act='gelu', attention_bias=True)
    vlm['vision_config']['hidden_act'] = 'silu'
    cfg = AlpamayoConfig.from_release_dicts(release, vlm)
    model = build_meta(cfg)
    lm_layer = model.vlm.model.language_model.layers[0]
    assert type(lm_layer.mlp.act_fn) is type(ACT2FN['gelu'])
    assert lm_layer.self_attn.k_proj.bias is not None
    assert model.expert.layers[0].self_attn.k_proj.bias is not None   # inherited
    assert type(model.vlm.model.visual.blocks[0].mlp.act_fn) is type(ACT2FN['silu'])
    assert AlpamayoConfig.from_release_dicts(cfg.to_release_dict(), cfg.to_vlm_dict()) == cfg


def test_attention_bias_checkpoint_round_trips(tmp_path: Path) -> None:
    cfg = dataclasses.replace(tiny_config(),
                              expert=dataclasses.replace(tiny_config().expert,
                                                         attention_bias=True))
    model = build_random(cfg, seed=3)
    save_checkpoint(model, tmp_path)
    loaded = load_checkpoint(tmp_path)
    assert loaded.cfg == cfg
    assert torch.equal(loaded.expert.layers[0].self_attn.q_proj.bias,
                       model.expert.layers[0].self_attn.q_proj.bias)


def test_transformers_457_vlm_layout_is_read(official_dir: Path) -> None:
    """The fixture's vlm_config.json is transformers 4.57's layout (rope_scaling + rope_theta)."""
    vlm = json.loads((official_dir / 'vlm_config.json').read_text())
    assert 'rope_scaling' in vlm['text_config']
    cfg = AlpamayoConfig.from_dir(official_dir)
    assert dataclasses.replace(cfg, vlm_name_or_path='tiny') == tiny_config()
    assert cfg.action.diffusion_steps == 10   # the release omits it: the official default
    written, release = cfg.to_release_dict(), json.loads((official_dir / 'config.json').read_text())
    del release['transformers_version']   # metadata, ignored by list
    release['diffusion_cfg']['num_inference_steps'] = 10   # the writer names the default
    assert written == release


# ---- diffusion_cfg.num_inference_steps ------------------------------------------------------
class _CountSteps:
    """Counts the diffusion passes of one rollout."""

    def __init__(self) -> None:
        self.diffusion = 0

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        self.diffusion += phase == 'diffusion'

    def phase_end(self, phase: str, index: int) -> None:
        pass


@pytest.fixture(scope='module')
def six_step_dir(tmp_path_factory, official_dir: Path) -> Path:
    """The official-tiny checkpoint with `diffusion_cfg.num_inference_steps: 6` in config.json."""
    path = tmp_path_factory.mktemp('six_steps')
    (path / 'model.safetensors').symlink_to(official_dir / 'model.safetensors')
    (path / 'vlm_config.json').write_text((official_dir / 'vlm_config.json').read_text())
    release = json.loads((official_dir / 'config.json').read_text())
    release['diffusion_cfg']['num_inference_steps'] = 6
    (path / 'config.json').write_text(json.dumps(release, indent=2))
    return path


def _rollout(model, e2e, steps: int | None):
    inp, out = e2e
    mi = inputs_from_processed(inp['pixel_values'], inp['image_grid_thw'],
                               inp['ego_history_xyz'][:, 0], inp['ego_history_rot'][:, 0],
                               model.cfg, SyntheticTextIds(), prompt_ids=inp['input_ids'])
    seen = _CountSteps()
    r = run_inference(model, mi, 'cpu', DecodeOptions(max_decode_tokens=8, diffusion_steps=steps),
                      observer=seen, diffusion_noise=out['a.diffusion_noise'])
    assert seen.diffusion == r.diffusion_steps
    return r


def test_checkpoint_steps_are_the_models_own_and_an_override_wins(six_step_dir: Path, e2e,
                                                                  official_model) -> None:
    torch.set_num_threads(1)
    model = load_checkpoint(six_step_dir, dtype=torch.float32)
    assert model.cfg.action.diffusion_steps == 6 and model.diffusion.num_steps == 6
    own, explicit = _rollout(model, e2e, None), _rollout(model, e2e, 6)
    assert own.diffusion_steps == explicit.diffusion_steps == 6
    assert torch.equal(own.xyz, explicit.xyz) and torch.equal(own.rot, explicit.rot)
    ten = _rollout(model, e2e, 10)
    assert ten.diffusion_steps == 10
    assert not torch.equal(own.xyz, ten.xyz)
    # the override gives what the release (no num_inference_steps: 10 steps) gives
    release = _rollout(official_model, e2e, None)
    assert release.diffusion_steps == 10 and torch.equal(ten.xyz, release.xyz)


def test_writer_records_the_steps_and_the_loader_reads_them(tmp_path: Path) -> None:
    base = tiny_config()
    cfg = dataclasses.replace(base, action=dataclasses.replace(base.action, diffusion_steps=6))
    save_checkpoint(build_random(cfg), tmp_path)
    written = json.loads((tmp_path / 'config.json').read_text())
    assert written['diffusion_cfg']['num_inference_steps'] == 6
    assert load_checkpoint(tmp_path).cfg.action.diffusion_steps == 6
    release = copy.deepcopy(written)
    del release['diffusion_cfg']['num_inference_steps']
    vlm = json.loads((tmp_path / 'vlm_config.json').read_text())
    assert AlpamayoConfig.from_release_dicts(release, vlm).action.diffusion_steps == 10


def test_decode_options_steps() -> None:
    model = build_meta(tiny_config())
    assert DecodeOptions().steps_for(model) == 10
    assert DecodeOptions(diffusion_steps=3).steps_for(model) == 3
    with pytest.raises(ValueError, match="diffusion_steps = 0"):
        DecodeOptions(diffusion_steps=0)
