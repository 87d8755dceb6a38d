"""Rolled rotary embedding: every text attention swapped, fewer ops, the same bits."""
from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import DynamicCache
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextAttention

from alpamayo_offload.model import (
    DecodeOptions,
    RolledRotaryAttention,
    build_random,
    fuse_rms_norms,
    roll_rotary,
    run_inference,
    tiny_config,
)


class OpCount(TorchDispatchMode):
    """Counts the ATen ops dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def test_rolling_swaps_every_text_attention_and_keeps_the_weights() -> None:
    model = build_random(tiny_config(), seed=0)
    before = model.state_dict()
    n_layers = len(model.layer_sequences()['lm']) + len(model.layer_sequences()['expert'])
    assert roll_rotary(model) == n_layers
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() for k in before)
    assert not any(type(m) is Qwen3VLTextAttention for m in model.modules())
    assert roll_rotary(model) == 0                        # idempotent


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
def test_attention_is_bit_identical_to_transformers_in_prefill_and_decode(
        dtype: torch.dtype) -> None:
    model = build_random(tiny_config(), seed=0).to(dtype)
    text = model.vlm.model.language_model
    hf = text.layers[1].self_attn
    rolled = Qwen3VLTextAttention(hf.config, hf.layer_idx).to(dtype)
    rolled.load_state_dict(hf.state_dict())
    roll_rotary(rolled)
    assert type(rolled) is RolledRotaryAttention
    torch.manual_seed(0)
    caches = DynamicCache(config=hf.config), DynamicCache(config=hf.config)
    for start, n in ((0, 37), (37, 1), (38, 1)):               # prefill, then two decode steps
        x = torch.randn(1, n, hf.config.hidden_size).to(dtype)
        positions = torch.arange(start, start + n).view(1, 1, n).expand(3, 1, n)
        cos_sin = text.rotary_emb(x, positions)
        mask = None if n == 1 else torch.ones(n, n, dtype=torch.bool).tril().view(1, 1, n, n)
        with torch.no_grad():
            want, _ = hf(x, cos_sin, mask, past_key_values=caches[0])
            got, _ = rolled(x, cos_sin, mask, past_key_values=caches[1])
        assert torch.equal(got, want), (start, n)
    assert all(torch.equal(a, b) for a, b in zip(caches[0].layers[1].keys,
                                                 caches[1].layers[1].keys, strict=True))


@pytest.mark.parametrize('fused_norms', [False, True])
def test_whole_inference_is_bit_identical_with_rolled_rotary(fused_norms: bool,
                                                              tiny_inputs: Any) -> None:
    """Tokens, trajectory and every sample: the swap changes no number."""
    torch.set_num_threads(1)
    plain, rolled = build_random(tiny_config(), seed=0), build_random(tiny_config(), seed=0)
    if fused_norms:
        fuse_rms_norms(plain)
        fuse_rms_norms(rolled)
    roll_rotary(rolled)
    inputs = tiny_inputs
    opts = DecodeOptions(fixed_decode_tokens=8, num_samples=2)
    a = run_inference(plain, inputs, 'cpu', opts, diffusion_noise=None)
    b = run_inference(rolled, inputs, 'cpu', opts, diffusion_noise=None)
    assert torch.equal(a.new_token_ids, b.new_token_ids)
    assert torch.equal(a.xyz, b.xyz) and torch.equal(a.rot, b.rot)


def _ops_per_lm_layer_call(model: Any, inputs: Any) -> dict[int, list[int]]:
    """ATen ops of every LM layer call of one inference (as the engine runs it), by layer."""
    seen: dict[int, list[int]] = collections.defaultdict(list)
    active: list[OpCount] = []

    def pre(module: Any, args: Any) -> None:
        active.append(OpCount())
        active[-1].__enter__()

    def post_of(i: int) -> Any:
        def post(module: Any, args: Any, out: Any) -> None:
            counter = active.pop()
            counter.__exit__(None, None, None)
            seen[i].append(counter.n)
        return post

    handles = [h for i, layer in enumerate(model.layer_sequences()['lm'])
               for h in (layer.register_forward_pre_hook(pre),
                         layer.register_forward_hook(post_of(i)))]
    with torch.inference_mode():
        run_inference(model, inputs, 'cpu', DecodeOptions(fixed_decode_tokens=3))
    for h in handles:
        h.remove()
    return seen


def test_a_decode_layer_call_issues_eight_fewer_ops(tiny_inputs: Any) -> None:
    """54 -> 46 ATen ops for a layer past the pass's first (which also derives cos and sin')."""
    plain, rolled = build_random(tiny_config(), seed=0), build_random(tiny_config(), seed=0)
    fuse_rms_norms(plain)
    fuse_rms_norms(rolled)
    roll_rotary(rolled)
    before = _ops_per_lm_layer_call(plain, tiny_inputs)
    after = _ops_per_lm_layer_call(rolled, tiny_inputs)
    assert before[1][-1] == 54 and after[1][-1] == 46
    assert after[0][-1] == 46 + 6            # the pass's first layer derives cos and sin'
