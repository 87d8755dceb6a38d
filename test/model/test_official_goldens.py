"""Official-tiny fixture: unit goldens (a)-(e), end-to-end cases a, b, c (README tolerances)."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from alpamayo_offload.model import (
    DecodeOptions,
    SyntheticTextIds,
    inputs_from_processed,
    run_inference,
)
from alpamayo_offload.model.action_space import UnicycleAccelCurvatureActionSpace
from alpamayo_offload.model.config import AlpamayoConfig
from alpamayo_offload.model.flow_matching import FlowMatching
from alpamayo_offload.model.inference import Rollout
from alpamayo_offload.model.inputs import make_image_processor
from alpamayo_offload.model.tokens import history_bins, history_token_ids

CASES = {'a': (8, 1), 'b': (1, 1), 'c': (8, 2)}


def test_loaded_fixture_counts(official_model) -> None:
    assert sum(p.numel() for p in official_model.parameters()) == 10_263_938
    assert len(official_model.state_dict()) == 164


def test_a_action_space(official_model, goldens) -> None:
    space: UnicycleAccelCurvatureActionSpace = official_model.action_space
    xyz, rot = goldens['action_space.hist_xyz'], goldens['action_space.hist_rot']
    torch.testing.assert_close(space.estimate_t0_speed(xyz, rot), goldens['action_space.t0_v'],
                               rtol=1e-5, atol=0)
    fx, fr = space.action_to_traj(goldens['action_space.action'], xyz, rot)
    torch.testing.assert_close(fx, goldens['action_space.traj_xyz'], rtol=0, atol=1e-4)
    torch.testing.assert_close(fr, goldens['action_space.traj_rot'], rtol=0, atol=1e-5)
    act = space.traj_to_action(xyz, rot, goldens['action_space.traj_xyz'],
                               goldens['action_space.traj_rot'])
    torch.testing.assert_close(act, goldens['action_space.traj_to_action'], rtol=1e-5, atol=1e-5)


def test_b_action_heads(official_model, goldens) -> None:
    with torch.no_grad():
        out = official_model.action_in_proj(goldens['action_in_proj.x'],
                                            goldens['action_in_proj.t'])
        torch.testing.assert_close(out, goldens['action_in_proj.out'], rtol=0, atol=1e-4)
        out = official_model.action_out_proj(goldens['action_out_proj.h'])
    torch.testing.assert_close(out, goldens['action_out_proj.out'], rtol=0, atol=1e-6)


def test_c_history_tokens(official_model, goldens) -> None:
    tk = official_model.cfg.tokens
    assert tk.hist_token_start_idx == int(goldens['hist_tok.hist_token_start_idx'])
    xyz = goldens['hist_tok.hist_xyz'][:, 0]
    assert torch.equal(history_bins(xyz, tk), goldens['hist_tok.bins'])
    assert torch.equal(history_token_ids(xyz, tk), goldens['hist_tok.token_ids'])


@pytest.mark.parametrize('n', [10, 4])
def test_d_flow_matching(goldens, n: int) -> None:
    fm, b = FlowMatching((64, 2), n), goldens['fm.B']
    seen: list[torch.Tensor] = []

    def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        seen.append(t)
        return -0.7 * x + 1.5 * t * b

    final = fm.sample(goldens[f'fm{n}.x0'], step, n)
    assert torch.equal(fm.time_steps(n, torch.device('cpu')), goldens[f'fm{n}.time_steps'])
    assert torch.equal(torch.stack(seen), goldens[f'fm{n}.t_passed'])
    torch.testing.assert_close(final, goldens[f'fm{n}.final'], rtol=0, atol=1e-6)


def test_e_image_processing(official_model, goldens) -> None:
    proc = make_image_processor(official_model.cfg)
    out = proc(images=[goldens['image_proc.image_uint8'].permute(1, 2, 0).numpy()],
               return_tensors='pt')
    assert torch.equal(out['pixel_values'], goldens['image_proc.pixel_values'])
    assert torch.equal(out['image_grid_thw'], goldens['image_proc.image_grid_thw'])
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    for h, w, lo, hi, ho, wo in goldens['image_proc.smart_resize_table'].tolist():
        assert smart_resize(h, w, factor=32, min_pixels=lo, max_pixels=hi) == (ho, wo)


def _inputs(model, e2e):
    inp, _ = e2e
    return inputs_from_processed(inp['pixel_values'], inp['image_grid_thw'],
                                 inp['ego_history_xyz'][:, 0], inp['ego_history_rot'][:, 0],
                                 model.cfg, SyntheticTextIds(), prompt_ids=inp['input_ids'])


def test_e2e_prompt_from_raw_images(official_model, e2e) -> None:
    from alpamayo_offload.model.inputs import preprocess_images

    inp, out = e2e
    pixels, grid = preprocess_images(inp['images_uint8'].permute(0, 1, 3, 4, 2), official_model.cfg)
    assert torch.equal(pixels, inp['pixel_values']) and torch.equal(grid, inp['image_grid_thw'])
    assert torch.equal(_inputs(official_model, e2e).input_ids, out['a.fused_input_ids'])


@pytest.mark.parametrize('case', list(CASES))
def test_e2e_integer_outputs_exact(official_model, e2e, case: str) -> None:
    _, out = e2e
    m, n = CASES[case]
    r = run_inference(official_model, _inputs(official_model, e2e), 'cpu',
                      DecodeOptions(max_decode_tokens=m, num_samples=n),
                      diffusion_noise=out[f'{case}.diffusion_noise'], keep_extras=True)
    x = r.extras
    assert torch.equal(r.new_token_ids, out[f'{case}.new_token_ids'])
    assert torch.equal(x['sequences'], out[f'{case}.sequences'])
    assert torch.equal(x['sequences_raw'], out[f'{case}.sequences_raw'])
    assert torch.equal(x['rope_deltas'].expand(n, 1), out[f'{case}.rope_deltas'])
    assert int(x['prefill_seq_len']) == int(out[f'{case}.prefill_seq_len'])
    assert torch.equal(x['expert_position_ids'], out[f'{case}.expert_position_ids'])
    assert torch.equal(x['expert_attention_mask'], out[f'{case}.expert_attention_mask'])


CHAIN_SCRIPT = """
import json, sys, traceback
import torch
from safetensors.torch import load_file
from alpamayo_offload.model import (DecodeOptions, SyntheticTextIds, fuse_rms_norms,
                                    inputs_from_processed, load_checkpoint, roll_rotary,
                                    run_inference)
torch.set_num_threads(1)
fx = sys.argv[1]
inp, out = load_file(fx + '/e2e_inputs.safetensors'), load_file(fx + '/e2e_outputs.safetensors')


def chain(norms):
    m = load_checkpoint(fx, dtype=torch.float32)
    if norms.startswith('fused'):
        assert fuse_rms_norms(m) == 4 * (3 + 3) + 2
    if norms.endswith('rolled rotary'):
        assert roll_rotary(m) == 3 + 3
    mi = inputs_from_processed(inp['pixel_values'], inp['image_grid_thw'],
                               inp['ego_history_xyz'][:, 0], inp['ego_history_rot'][:, 0], m.cfg,
                               SyntheticTextIds(), prompt_ids=inp['input_ids'])
    res = {}
    for case, (mx, n) in json.loads(sys.argv[2]).items():
        r = run_inference(m, mi, 'cpu', DecodeOptions(max_decode_tokens=mx, num_samples=n),
                          diffusion_noise=out[case + '.diffusion_noise'], keep_extras=True)
        action = r.extras['sampled_action'] - out[case + '.sampled_action']
        res[case] = {
            'tokens': bool(torch.equal(r.new_token_ids, out[case + '.new_token_ids'])),
            'action': action.abs().max().item(),
            'xyz': (r.xyz - out[case + '.pred_xyz'][0, 0]).abs().max().item(),
            'rot': (r.rot - out[case + '.pred_rot'][0, 0]).abs().max().item()}
    return res


results = {}
for norms in json.loads(sys.argv[3]):
    try:
        results[norms] = chain(norms)
    except Exception:
        results[norms] = {'error': traceback.format_exc()}
print(json.dumps(results))
"""
NORMS = ['per-op', 'fused', 'fused, rolled rotary']


@pytest.fixture(scope='module')
def chain_results(official_dir) -> dict[str, dict]:
    """Every norm path's full rollouts, from one subprocess (one start-up of torch), under AVX2
    kernel dispatch; each path on its own freshly loaded checkpoint."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, ATEN_CPU_CAPABILITY='avx2', ONEDNN_MAX_CPU_ISA='AVX2',
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, '-c', CHAIN_SCRIPT, str(official_dir),
                           json.dumps(CASES), json.dumps(NORMS)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('norms', NORMS)
def test_e2e_full_chain_reproduces_goldens(chain_results, norms: str) -> None:
    """Full rollout (cases a, b, c) with injected noise, under AVX2 kernel dispatch.

    Both norm paths, and the engine's default: fused RMSNorms (model/norms.py) with the rolled
    rotary embedding (model/rope.py).

    The goldens come from an AVX2 CPU. On AVX-512 the float32 GEMM/conv kernels differ by ~1 ulp
    and the 10-step chain amplifies that through the 100 Hz Fourier features past 1e-3 (a: 4e-3).
    With ATen and oneDNN limited to AVX2 the whole rollout reproduces them bit for bit here.
    """
    res = chain_results[norms]
    assert 'error' not in res, res.get('error')
    for case, r in res.items():
        assert r['tokens'], case
        assert r['action'] <= 1e-3 and r['xyz'] <= 1e-3 and r['rot'] <= 1e-5, (case, r)


def test_e2e_case_a_intermediates_and_teacher_forced_steps(official_model, e2e) -> None:
    _, out = e2e
    mi = _inputs(official_model, e2e)
    ro = Rollout(official_model, 'cpu')
    tol = {'rtol': 1e-4, 'atol': 1e-5}
    with torch.no_grad():
        embeds, deepstack = ro.vision(mi.pixel_values, mi.image_grid_thw)
        torch.testing.assert_close(embeds, out['a.vision_image_embeds'], **tol)
        torch.testing.assert_close(torch.stack(deepstack), out['a.vision_deepstack_embeds'], **tol)
        logits, hidden, cache, deltas = ro.prefill(mi.input_ids, mi.image_grid_thw, embeds,
                                                   deepstack)
        torch.testing.assert_close(hidden, out['a.prefill_last_hidden_state'], **tol)
        all_logits = [logits]
        for tok in out['a.new_token_ids'][0, :2]:
            all_logits.append(ro.decode(tok.view(1, 1), cache, deltas))
        for i, lg in enumerate(all_logits):  # raw logits, before the <iN> mask
            top = torch.topk(lg, 16)
            torch.testing.assert_close(top.values, out['a.step_logits_top16_values'][i], **tol)
            assert torch.equal(top.indices, out['a.step_logits_top16_indices'][i])
        keys = torch.stack([layer.keys for layer in cache.layers])
        values = torch.stack([layer.values for layer in cache.layers])
        torch.testing.assert_close(keys, out['a.prompt_cache_keys'], **tol)
        torch.testing.assert_close(values, out['a.prompt_cache_values'], **tol)
        pos, mask = ro.expert_conditioning(out['a.sequences'], cache.get_seq_length(), deltas)
        for i in range(10):
            v, h, last = ro.expert_step(out['a.diffusion_x'][i], out['a.diffusion_t'][i], cache,
                                        pos, mask)
            assert cache.get_seq_length() == 224
            torch.testing.assert_close(h, out['a.action_in_proj_out'][i], rtol=0, atol=1e-4)
            torch.testing.assert_close(last, out['a.expert_last_hidden_state'][i], rtol=0,
                                       atol=1e-3)
            torch.testing.assert_close(v, out['a.diffusion_v'][i], rtol=0, atol=1e-3)


def test_golden_cache_injected_teacher_forcing(official_model, e2e) -> None:
    """Expert on the official KV cache: isolates our expert path from our prefill."""
    _, out = e2e
    ro = Rollout(official_model, 'cpu')
    cache = DynamicCache(config=official_model.vlm.config.text_config)
    for i in range(official_model.cfg.text.num_layers):
        cache.update(out['a.prompt_cache_keys'][i].clone(),
                     out['a.prompt_cache_values'][i].clone(), i)
    with torch.no_grad():
        for i in range(10):
            v, _, _ = ro.expert_step(out['a.diffusion_x'][i], out['a.diffusion_t'][i], cache,
                                     out['a.expert_position_ids'], out['a.expert_attention_mask'])
            torch.testing.assert_close(v, out['a.diffusion_v'][i], rtol=0, atol=1e-3)


def test_release_config_roundtrip(official_dir) -> None:
    cfg = AlpamayoConfig.from_dir(official_dir)
    again = AlpamayoConfig.from_release_dicts(cfg.to_release_dict(), cfg.to_vlm_dict())
    assert again == cfg
