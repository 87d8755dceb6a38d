"""transformers' SDPA attention with its masked grouped-query path's K/V repeat made fast.

With a mask, transformers' `sdpa_attention_forward` repeats K and V over the query heads
(`repeat_kv`: a strided copy of one BF16 element per thread) before SDPA; for the expert's
masked attention over the prompt of several samples that copy is ~0.8 GB a layer and step.
`masked_sdpa_attention` makes the same call with the repeat done by `repeat_heads` (the same
values and layout, copied as 8-byte integers), so SDPA gets equal tensors and its output is
bit-identical; every other call goes to transformers' function unchanged.

Where it takes over (`takes_over`), a caller may also hand it what SDPA would make of its inputs
anyway, and save that work per call: K/V already at the query heads (built there directly,
`SharedPrefixLayer.rows_kv`), and query, K/V and mask already in the dtype autocast casts SDPA's
inputs to (`autocast_dtype`): the expert's float32 keys then join the prompt's BF16 ones in
BF16, by wide copies, instead of being promoted, repeated and cast back on every call.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward, use_gqa_in_sdpa
from transformers.utils import is_torch_npu_available

from .wide_copy import repeat_heads

Attention = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def takes_over(module: nn.Module, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, **kwargs: Any) -> bool:
    """Whether `masked_sdpa_attention` makes the call itself rather than transformers' function.

    Only where transformers would repeat K/V and then call SDPA with the mask as given
    (`is_causal` is False whenever a mask is given): a mask, several query heads per K/V head,
    no position bias, no attention weights asked, no Ascend NPU (whose path converts the mask).
    """
    groups = getattr(module, 'num_key_value_groups', 1)
    return not (attention_mask is None or groups <= 1
                or use_gqa_in_sdpa(attention_mask, key, value)
                or kwargs.get('position_bias') is not None or bool(kwargs.get('output_attentions'))
                or is_torch_npu_available())


def masked_sdpa_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, attention_mask: torch.Tensor | None,
                          dropout: float = 0.0, scaling: float | None = None,
                          is_causal: bool | None = None, **kwargs: Any,
                          ) -> tuple[torch.Tensor, None]:
    """`sdpa_attention_forward`, with the K/V repeat of its masked grouped-query path fast.

    Where it `takes_over`, K/V at fewer heads than the query are repeated up to the query's;
    K/V already there are used as they are.
    """
    if not takes_over(module, key, value, attention_mask, **kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    groups = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_heads(key, groups), repeat_heads(value, groups), attn_mask=attention_mask,
        dropout_p=dropout, scale=scaling, is_causal=False)
    return out.transpose(1, 2).contiguous(), None


def with_fast_masked_repeat(attend: Attention) -> Attention:
    """`masked_sdpa_attention` in place of transformers' SDPA function; any other as given."""
    return masked_sdpa_attention if attend is sdpa_attention_forward else attend


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """Return the dtype autocast casts SDPA's inputs to on `device`, or None (autocast off).

    SDPA is on autocast's lower-precision list (CUDA and CPU): every floating input but a
    float64 one is cast to the autocast dtype before the kernel runs.
    """
    if not torch.is_autocast_enabled(device.type):
        return None
    return torch.get_autocast_dtype(device.type)


def as_autocast_inputs(dtype: torch.dtype | None,
                       *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`tensors` cast as autocast would cast them for SDPA (`autocast_dtype`); the same values.

    Autocast's cast is `to(dtype)` of a floating, non-float64 tensor; casting earlier gives SDPA
    the same tensors, and a second cast by autocast then finds nothing to do.
    """
    if dtype is None:
        return tensors
    return tuple(t.to(dtype) if t.is_floating_point() and t.dtype not in (dtype, torch.float64)
                 else t for t in tensors)
