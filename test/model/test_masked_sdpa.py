"""The masked grouped-query SDPA path with a wide-copy K/V repeat, against transformers' own."""
from __future__ import annotations

import types

import pytest
import torch
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

from alpamayo_offload.model.masked_sdpa import masked_sdpa_attention, with_fast_masked_repeat
from alpamayo_offload.model.wide_copy import repeat_heads


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('head_dim', [16, 6, 5])
def test_repeat_heads_is_repeat_kv_bit_for_bit(dtype: torch.dtype, head_dim: int) -> None:
    gen = torch.Generator().manual_seed(3)
    states = torch.randn(3, 7, 2, head_dim, generator=gen).to(dtype).transpose(1, 2)  # a view
    got, want = repeat_heads(states, 4), repeat_kv(states, 4)
    assert got.shape == want.shape and got.stride() == want.stride() and got.is_contiguous()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    assert repeat_heads(states, 1) is states


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('mask_kind', ['bool', 'float', None])
def test_masked_gqa_attention_equals_transformers(dtype: torch.dtype, mask_kind: str | None
                                                  ) -> None:
    gen = torch.Generator().manual_seed(5)
    rows, heads, kv_heads, queries, keys, dim = 3, 8, 2, 4, 11, 16
    query = torch.randn(rows, heads, queries, dim, generator=gen).to(dtype)
    key = torch.randn(rows, kv_heads, keys, dim, generator=gen).to(dtype)
    value = torch.randn(rows, kv_heads, keys, dim, generator=gen).to(dtype)
    visible = torch.rand(rows, 1, queries, keys, generator=gen) > 0.3
    visible[..., 0] = True
    mask = {'bool': visible, 'float': torch.zeros(visible.shape, dtype=dtype).masked_fill(
        ~visible, torch.finfo(dtype).min), None: None}[mask_kind]
    module = types.SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True)
    got, _ = masked_sdpa_attention(module, query, key, value, mask, scaling=0.25)
    want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert got.stride() == want.stride()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_only_transformers_sdpa_is_replaced() -> None:
    assert with_fast_masked_repeat(sdpa_attention_forward) is masked_sdpa_attention
    assert with_fast_masked_repeat(repeat_kv) is repeat_kv
