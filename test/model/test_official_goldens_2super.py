"""Alpamayo 2 Super official-tiny fixture: units, prompts, four rollouts, nav CFG, VQA, meta."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from alpamayo_offload.model import (
    AlpamayoConfig,
    DecodeOptions,
    ModelInputs,
    Rollout,
    build_random,
    full_2super_config,
    generate_text,
    load_checkpoint,
    preset,
    run_inference,
    save_checkpoint,
    tiny_2super_config,
)
from alpamayo_offload.model.config import IM_END_ID, IMAGE_PAD_ID, SPECIAL_IDS
from alpamayo_offload.model.errors import UnsupportedConfigError
from alpamayo_offload.model.flow_matching import FlowMatching
from alpamayo_offload.model.inference import _pad_after_stop, combine_guidance
from alpamayo_offload.model.tokens import (
    META_ACTION_TEXT,
    build_prompt_ids,
    build_vqa_prompt_ids,
    history_bins,
    history_token_ids,
)

TOL = {'rtol': 1e-4, 'atol': 1e-5}
# case -> (max new tokens, samples); d samples with top_k=2: its tokens are teacher-forced.
CASES = {'a': (8, 1), 'b': (3, 1), 'c': (8, 3)}
ROLES = {198: '\n', 8948: 'system', 872: 'user', 77091: 'assistant', 151643: '<|endoftext|>',
         151644: '<|im_start|>', 151645: '<|im_end|>', 151652: '<|vision_start|>',
         151653: '<|vision_end|>', IMAGE_PAD_ID: '<|image_pad|>',
         **{i: f'<|{name}|>' for name, i in SPECIAL_IDS.items()}}


class TextPieces:
    """Encodes text to negative ids indexing the pieces, so a prompt renders back to a string."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def encode(self, text: str) -> list[int]:
        self.pieces.append(text)
        return [-len(self.pieces)]

    def render(self, ids: torch.Tensor) -> str:
        return ''.join(self.pieces[-i - 1] if i < 0 else ROLES[i] for i in ids[0].tolist())

    def decode(self, ids):  # pragma: no cover - not needed
        raise NotImplementedError


def _traj_inputs(e2e2s, ids_key: str = 'traj.fused_input_ids', **extra) -> ModelInputs:
    inp, _ = e2e2s
    return ModelInputs(inp[ids_key], inp['traj.pixel_values'], inp['traj.image_grid_thw'],
                       inp['ego_history_xyz'][:, 0], inp['ego_history_rot'][:, 0], **extra)


def _case(out: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    return {k.split('.', 1)[1]: v for k, v in out.items() if k.startswith(f'{name}.')}


def test_config_and_loaded_counts(official2s_model) -> None:
    m = official2s_model
    assert m.cfg.is_2super and m.cfg.family == '2super'
    assert sum(p.numel() for p in m.parameters()) == 10_256_706
    assert len(m.state_dict()) == 164
    assert m.cfg.text.vocab_size == 155_776 and m.cfg.tokens.tokens_per_history_traj == 45
    assert m.expert_path == 'expert.expert' and m.expert_lm is m.expert.expert
    assert m.sequence_prefixes()['expert'] == 'expert.expert.layers.'
    assert m.cfg.to_release_dict() == AlpamayoConfig.from_release_dicts(
        m.cfg.to_release_dict(), None).to_release_dict()


def test_tiny_preset_is_the_fixture_shape(official2s_model) -> None:
    cfg = tiny_2super_config()
    got = official2s_model.cfg
    assert (cfg.text, cfg.vision, cfg.action, cfg.tokens) == (got.text, got.vision, got.action,
                                                             got.tokens)


def test_a_action_space(official2s_model, goldens2s) -> None:
    g = goldens2s
    space = official2s_model.heads.action_space
    xyz, rot = g['action_space.hist_xyz'], g['action_space.hist_rot']
    torch.testing.assert_close(space.estimate_t0_speed(xyz, rot), g['action_space.t0_v'],
                               rtol=1e-5, atol=0)
    fx, fr = space.action_to_traj(g['action_space.action'], xyz, rot)
    torch.testing.assert_close(fx, g['action_space.traj_xyz'], rtol=0, atol=1e-4)
    torch.testing.assert_close(fr, g['action_space.traj_rot'], rtol=0, atol=1e-5)
    act = space.traj_to_action(xyz, rot, g['action_space.traj_xyz'], g['action_space.traj_rot'])
    torch.testing.assert_close(act, g['action_space.traj_to_action'], rtol=1e-5, atol=1e-5)


def test_b_action_heads(official2s_model, goldens2s) -> None:
    heads = official2s_model.heads
    with torch.no_grad():
        out = heads.action_in_proj(goldens2s['action_in_proj.x'], goldens2s['action_in_proj.t'])
        torch.testing.assert_close(out, goldens2s['action_in_proj.out'], rtol=0, atol=1e-4)
        out = heads.action_out_proj(goldens2s['action_out_proj.h'])
    torch.testing.assert_close(out, goldens2s['action_out_proj.out'], rtol=0, atol=1e-6)


def test_c_history_tokens(official2s_model, goldens2s) -> None:
    tk = official2s_model.cfg.tokens
    xyz = goldens2s['hist_tok.hist_xyz'][:, 0]
    assert torch.equal(history_bins(xyz, tk), goldens2s['hist_tok.bins'])
    assert torch.equal(history_token_ids(xyz, tk), goldens2s['hist_tok.token_ids'])


@pytest.mark.parametrize('prefix, n, weight, temperature',
                         [('fm10.', 10, None, 1.0), ('fmcfg4.', 4, 2.0, 0.7)])
def test_d_flow_matching(goldens2s, prefix, n, weight, temperature) -> None:
    b, b2 = goldens2s['fm.B'], goldens2s['fm.B2']

    def step(x, t):
        v_g = -0.7 * x + 1.5 * t * b
        return v_g if weight is None else combine_guidance(v_g, 0.2 * x - 0.5 * t * b2, weight)

    fm = FlowMatching((64, 2), n)
    assert torch.equal(fm.time_steps(n, torch.device('cpu')), goldens2s[f'{prefix}time_steps'])
    final = fm.sample(goldens2s[f'{prefix}all_x'][:, 0], step, n)
    torch.testing.assert_close(final, goldens2s[f'{prefix}all_x'][:, -1], rtol=0, atol=1e-6)


def test_e_expert_on_a_given_cache(official2s_model, goldens2s) -> None:
    g = {k.removeprefix('expert_unit.'): v for k, v in goldens2s.items()
         if k.startswith('expert_unit.')}
    ro = Rollout(official2s_model, 'cpu')
    cache_len = g['cache_keys'].shape[3]
    seq = torch.zeros(2, cache_len, dtype=torch.long)
    seq[0, int(g['offset'][0]) - 1] = SPECIAL_IDS['traj_future_start']
    seq[1, int(g['offset'][1]) - 1] = SPECIAL_IDS['traj_future_start']
    pos, mask = ro.expert_conditioning(seq, cache_len, g['rope_deltas'], g['prefix_mask'])
    assert torch.equal(pos, g['position_ids']) and torch.equal(mask, g['attention_mask'])
    cache = DynamicCache()
    for i in range(g['cache_keys'].shape[0]):
        cache.update(g['cache_keys'][i].clone(), g['cache_values'][i].clone(), i)
    with torch.no_grad():
        out = official2s_model.expert_lm(inputs_embeds=g['inputs_embeds'], position_ids=pos,
                                         past_key_values=cache, attention_mask=mask,
                                         use_cache=True, is_causal=False)
        action = official2s_model.heads.action_out_proj(out.last_hidden_state)
    torch.testing.assert_close(out.last_hidden_state, g['last_hidden_state'], rtol=0, atol=1e-5)
    keys = torch.stack([layer.keys[:, :, cache_len:] for layer in cache.layers])
    values = torch.stack([layer.values[:, :, cache_len:] for layer in cache.layers])
    torch.testing.assert_close(keys, g['new_keys'], rtol=0, atol=1e-5)
    torch.testing.assert_close(values, g['new_values'], rtol=0, atol=1e-5)
    torch.testing.assert_close(action, g['action_out'], rtol=0, atol=1e-5)


def test_f_release_buffers_rebuilt_in_bf16(official2s_dir, goldens2s, tmp_path) -> None:
    model = load_checkpoint(official2s_dir)
    save_checkpoint(model, tmp_path, include_buffers=False)
    again = load_checkpoint(tmp_path, dtype=torch.bfloat16)
    state = again.state_dict()
    for key, value in goldens2s.items():
        if key.startswith('release_bf16_load.'):
            got = state[key.removeprefix('release_bf16_load.')]
            assert torch.equal(got.to(torch.bfloat16), value), key


def test_prompts_render_as_the_official_builders(official2s_dir) -> None:
    prompts = json.loads((official2s_dir / 'prompts.json').read_text())
    p = prompts['prompts']
    six, vqa_cams = (0, 1, 2, 3, 5, 6), (0, 1, 2, 3, 4, 5)
    assert tuple(prompts['input_profiles']['trajectory']['camera_ids']) == six
    for key, kwargs in (('traj', {}), ('nav_unguided', {}),
                        ('nav_guided', {'nav_text': prompts['nav_text']}),
                        ('meta', {'instruction': META_ACTION_TEXT})):
        enc = TextPieces()
        ids = build_prompt_ids(enc, [1] * 24, 45, six, release_2super=True, **kwargs)
        assert enc.render(ids) == p[key], key
    enc = TextPieces()
    ids = build_vqa_prompt_ids(enc, [1] * 24, prompts['vqa_question'], vqa_cams, True)
    assert enc.render(ids) == p['vqa']


@pytest.mark.parametrize('case', list(CASES))
def test_trajectory_rollouts(official2s_model, e2e2s, case: str) -> None:
    inp, out = e2e2s
    o = _case(out, f'traj_{case}')
    m, n = CASES[case]
    mi = _traj_inputs(e2e2s)
    hist = history_token_ids(mi.ego_history_xyz, official2s_model.cfg.tokens)
    ids = inp['traj.input_ids'].masked_scatter(inp['traj.input_ids'] == SPECIAL_IDS[
        'traj_history'], hist)
    assert torch.equal(ids, inp['traj.fused_input_ids'])
    r = run_inference(official2s_model, mi, 'cpu',
                      DecodeOptions(max_decode_tokens=m, num_samples=n),
                      diffusion_noise=o['diffusion_noise'], keep_extras=True)
    x = r.extras
    assert torch.equal(r.new_token_ids, o['new_token_ids'])
    assert torch.equal(x['sequences_raw'], o['sequences_raw'])
    assert torch.equal(x['sequences'], o['sequences'])
    assert torch.equal(x['rope_deltas'].expand(n, 1), o['rope_deltas'])
    assert int(x['prefill_seq_len']) == int(o['prefill_seq_len'])
    assert torch.equal(x['expert_position_ids'], o['expert_position_ids'])
    assert torch.equal(x['expert_attention_mask'], o['expert_attention_mask'])
    # the official shared prefill runs over input_ids[:, :-1]
    torch.testing.assert_close(x['prefill_last_hidden_state'][:, :-1],
                               o['prefill_last_hidden_state'], **TOL)
    if 'prefill_logits' in o:
        torch.testing.assert_close(x['prefill_logits'][0], o['prefill_logits'], rtol=0,
                                   atol=1e-4)
    torch.testing.assert_close(x['sampled_action'], o['sampled_action'], rtol=0, atol=1e-4)
    torch.testing.assert_close(r.xyz, o['pred_xyz'][0, 0], rtol=0, atol=1e-3)
    torch.testing.assert_close(r.rot, o['pred_rot'][0, 0], rtol=0, atol=1e-5)


def _teacher_forced_context(model, mi: ModelInputs, new_raw: torch.Tensor):
    ro = Rollout(model, 'cpu')
    s = new_raw.shape[0]
    with torch.no_grad():
        embeds, deepstack = ro.vision(mi.pixel_values, mi.image_grid_thw)
        _, _, cache, deltas = ro.prefill(mi.input_ids, mi.image_grid_thw, embeds, deepstack)
        cache.batch_repeat_interleave(s)
        deltas = deltas.expand(s, 1)
        for tok in new_raw.T[:-1]:
            ro.decode(tok[:, None], cache, deltas)
    seq = torch.cat([mi.input_ids.expand(s, -1), _pad_after_stop(new_raw)], dim=1)
    pos, mask = ro.expert_conditioning(seq, cache.get_seq_length(), deltas)
    return ro, cache, pos, mask


def test_sampled_rollout_with_per_row_stops_teacher_forced(official2s_model, e2e2s) -> None:
    _, out = e2e2s
    o = _case(out, 'traj_d')
    model, mi = official2s_model, _traj_inputs(e2e2s)
    new_raw = o['sequences_raw'][:, mi.input_ids.shape[1]:]
    assert torch.equal(_pad_after_stop(new_raw), o['new_token_ids'])
    ro, cache, pos, mask = _teacher_forced_context(model, mi, new_raw)
    assert cache.get_seq_length() == int(o['prefill_seq_len'])
    assert torch.equal(pos, o['expert_position_ids'])
    assert torch.equal(mask, o['expert_attention_mask'])
    keys = torch.stack([layer.keys for layer in cache.layers])
    torch.testing.assert_close(keys, o['prompt_cache_keys'], **TOL)
    with torch.no_grad():
        for i in range(o['diffusion_x'].shape[0]):   # each step teacher-forced
            v, h, _ = ro.expert_step(o['diffusion_x'][i], o['diffusion_t'][i], cache, pos, mask)
            torch.testing.assert_close(h, o['action_in_proj_out'][i], rtol=0, atol=1e-4)
            torch.testing.assert_close(v, o['diffusion_v'][i], rtol=0, atol=1e-4)
        sampled = model.heads.diffusion.sample(
            o['diffusion_noise'], lambda x, t: ro.expert_step(x, t, cache, pos, mask)[0])
        xyz, rot = model.heads.action_space.action_to_traj(
            sampled, mi.ego_history_xyz.expand(3, -1, -1), mi.ego_history_rot.expand(3, -1, -1, -1))
    torch.testing.assert_close(sampled, o['sampled_action'], rtol=0, atol=1e-4)
    torch.testing.assert_close(xyz, o['pred_xyz'][0, 0], rtol=0, atol=1e-3)
    torch.testing.assert_close(rot, o['pred_rot'][0, 0], rtol=0, atol=1e-5)


def test_top_k_sampling_stays_in_the_top_k(official2s_model, e2e2s) -> None:
    _, out = e2e2s
    o = _case(out, 'traj_d')
    r = run_inference(official2s_model, _traj_inputs(e2e2s), 'cpu', DecodeOptions(
        max_decode_tokens=8, num_samples=3, sample=True, top_k=1, seed=107))
    assert torch.equal(r.new_token_ids, _case(out, 'traj_a')['new_token_ids'].expand(3, -1))
    assert o['sequences_raw'].shape == (3, 408)


def test_navigation_guidance(official2s_model, e2e2s) -> None:
    _, out = e2e2s
    o = _case(out, 'nav')
    w = float(o['guidance_weight'])
    assert w == official2s_model.cfg.action.guidance_weight == 2.0
    mi = _traj_inputs(e2e2s, 'nav.guided_fused_input_ids',
                      unguided_input_ids=e2e2s[0]['nav.unguided_fused_input_ids'])
    r = run_inference(official2s_model, mi, 'cpu',
                      DecodeOptions(max_decode_tokens=256, guidance_weight=w),
                      diffusion_noise=o['diffusion_noise'], keep_extras=True)
    x = r.extras
    assert torch.equal(r.new_token_ids, o['guided_new_token_ids'])
    assert torch.equal(x['sequences_raw'], o['guided_sequences_raw'])
    assert int(x['prefill_seq_len']) == int(o['guided_prefill_seq_len'])
    assert torch.equal(x['expert_position_ids'], o['guided_position_ids'])
    assert torch.equal(x['expert_attention_mask'], o['guided_attention_mask'])
    assert int(x['unguided_cache_len']) == int(o['unguided_prefill_seq_len'])
    assert torch.equal(x['unguided_rope_deltas'], o['unguided_rope_deltas'])
    assert torch.equal(x['unguided_expert_position_ids'], o['unguided_position_ids'])
    assert torch.equal(x['unguided_expert_attention_mask'], o['unguided_attention_mask'])
    torch.testing.assert_close(x['prefill_last_hidden_state'],
                               o['guided_prefill_last_hidden_state'], **TOL)
    torch.testing.assert_close(x['prefill_logits'][0], o['guided_prefill_logits'], rtol=0,
                               atol=1e-4)
    torch.testing.assert_close(x['sampled_action'], o['sampled_action'], rtol=0, atol=1e-4)
    torch.testing.assert_close(r.xyz, o['pred_xyz'][0, 0], rtol=0, atol=1e-3)
    torch.testing.assert_close(r.rot, o['pred_rot'][0, 0], rtol=0, atol=1e-5)


@pytest.mark.parametrize('task, tokens', [('vqa', 6), ('meta', 8)])
def test_text_tasks(official2s_model, e2e2s, task: str, tokens: int) -> None:
    inp, out = e2e2s
    o = _case(out, task)
    ids = inp['meta.fused_input_ids'] if task == 'meta' else inp['vqa.input_ids']
    pix = 'vqa' if task == 'vqa' else 'traj'
    mi = ModelInputs(ids, inp[f'{pix}.pixel_values'], inp[f'{pix}.image_grid_thw'],
                     inp['ego_history_xyz'][:, 0], inp['ego_history_rot'][:, 0])
    r = generate_text(official2s_model, mi, 'cpu', DecodeOptions(max_decode_tokens=tokens),
                      keep_extras=True)
    assert torch.equal(r.token_ids, o['new_token_ids_raw'])
    if 'new_token_ids' in o:
        assert torch.equal(_pad_after_stop(r.token_ids), o['new_token_ids'])
    assert torch.equal(r.extras['rope_deltas'], o['rope_deltas'])
    torch.testing.assert_close(r.extras['prefill_last_hidden_state'],
                               o['prefill_last_hidden_state'], **TOL)
    assert IM_END_ID not in r.token_ids.tolist() or task == 'vqa'


def test_written_checkpoint_round_trips(tmp_path: Path) -> None:
    model = build_random(tiny_2super_config(), seed=3)
    save_checkpoint(model, tmp_path)
    assert not (tmp_path / 'vlm_config.json').exists()
    assert json.loads((tmp_path / 'config.json').read_text())['model_type'] == 'alpamayo2_super'
    again = load_checkpoint(tmp_path)
    assert again.cfg == model.cfg
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and any(k.startswith('expert.expert.layers.') for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize('path, value', [
    (('hist_traj_tokenizer_cfg', 'pad_origin_at_beginning'), True),
    (('expert_config', 'diffusion_cfg', 'use_classifier_free_guidance'), True),
    (('include_camera_ids',), False),
    (('expert_config', 'llm_config', 'num_hidden_layers'), 2),
    (('brand_new_field',), 1),
    (('vlm_config', 'text_config', 'brand_new_field'), 1),
])
def test_release_fields_honoured_or_refused(official2s_dir, path, value) -> None:
    release = json.loads((official2s_dir / 'config.json').read_text())
    node = release
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(UnsupportedConfigError, match=path[-1]):
        AlpamayoConfig.from_release_dicts(release, None)


def test_full_preset_shape_without_building_it() -> None:
    cfg = full_2super_config()
    t, v, e = cfg.text, cfg.vision, cfg.expert
    assert (t.num_layers, t.hidden_size, t.intermediate_size, t.num_heads, t.num_kv_heads,
            t.head_dim, t.vocab_size) == (64, 5120, 25600, 64, 8, 128, 155_776)
    assert (v.depth, v.hidden_size, v.out_hidden_size, v.deepstack_visual_indexes) == (
        27, 1152, 5120, (8, 16, 24))
    assert (e.hidden_size, e.intermediate_size, e.num_heads, e.head_dim) == (1536, 6144, 16, 128)
    # the same per-layer bytes as the official constructor's (975,196,672 and 75,504,128 in bf16)
    attn = t.hidden_size * t.head_dim * (2 * t.num_heads + 2 * t.num_kv_heads)
    lm_layer = attn + 3 * t.hidden_size * t.intermediate_size + 2 * t.head_dim + 2 * t.hidden_size
    assert 2 * lm_layer == 975_196_672
    e_attn = e.hidden_size * e.head_dim * (2 * e.num_heads + 2 * t.num_kv_heads)
    e_layer = e_attn + 3 * e.hidden_size * e.intermediate_size + 2 * e.head_dim \
        + 2 * e.hidden_size
    assert 2 * e_layer == 75_504_128
    assert preset('layers=2,vit=3,family=2super').is_2super
