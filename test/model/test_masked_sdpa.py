"""The masked grouped-query SDPA path with a wide-copy K/V repeat, against transformers' own."""
from __future__ import annotations

import types

import pytest
import torch
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

from alpamayo_offload.model.masked_sdpa import (
    as_autocast_inputs,
    autocast_dtype,
    masked_sdpa_attention,
    takes_over,
    with_fast_masked_repeat,
)
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


def _gqa_call(dtype: torch.dtype) -> tuple[types.SimpleNamespace, torch.Tensor, torch.Tensor,
                                           torch.Tensor, torch.Tensor]:
    """A masked grouped-query call: module, query, key, value, float32 mask."""
    gen = torch.Generator().manual_seed(9)
    query = torch.randn(3, 8, 4, 16, generator=gen).to(dtype)
    key = torch.randn(3, 2, 11, 16, generator=gen).to(dtype)
    value = torch.randn(3, 2, 11, 16, generator=gen).to(dtype)
    mask = torch.zeros(3, 1, 4, 11).masked_fill(torch.rand(3, 1, 4, 11, generator=gen) > 0.7,
                                                torch.finfo(torch.float32).min)
    return types.SimpleNamespace(num_key_value_groups=4, is_causal=True), query, key, value, mask


def test_kv_already_at_the_query_heads_make_the_same_call() -> None:
    module, query, key, value, mask = _gqa_call(torch.bfloat16)
    assert takes_over(module, key, value, mask)
    got, _ = masked_sdpa_attention(module, query, repeat_heads(key, 4), repeat_heads(value, 4),
                                   mask, scaling=0.25)
    want, _ = masked_sdpa_attention(module, query, key, value, mask, scaling=0.25)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_inputs_cast_as_autocast_casts_them_change_no_bit() -> None:
    """Float32 query/keys, BF16 values and a float32 mask under BF16 autocast, cast first or not."""
    module, query, key, value, mask = _gqa_call(torch.float32)
    value = value.to(torch.bfloat16)
    assert autocast_dtype(torch.device('cpu')) is None
    assert as_autocast_inputs(None, query, mask) == (query, mask)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        dtype = autocast_dtype(torch.device('cpu'))
        cast = as_autocast_inputs(dtype, query, key, value, mask)
        assert dtype == torch.bfloat16 and all(t.dtype == dtype for t in cast)
        assert cast[2] is value                       # nothing to cast
        got, _ = masked_sdpa_attention(module, *cast, scaling=0.25)
        want, _ = masked_sdpa_attention(module, query, key, value, mask, scaling=0.25)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_only_masked_grouped_calls_are_taken_over() -> None:
    module, _, key, value, mask = _gqa_call(torch.float32)
    assert takes_over(module, key, value, mask)
    assert not takes_over(module, key, value, None)
    assert not takes_over(module, key, value, mask, output_attentions=True)
    assert not takes_over(module, key, value, mask, position_bias=mask)
    assert not takes_over(types.SimpleNamespace(num_key_value_groups=1), key, value, mask)
