"""Qwen3-VL's text rotary embedding in 8 ops a layer instead of 16, with the same bits.

Decode and diffusion passes with resident layers are bound by the host issuing kernels, and
transformers' `apply_rotary_pos_emb` issues 16 of a decoder layer's 54 ops: two unsqueezes, then
slice, slice, neg, cat, mul, mul, add for each of q and k. `rotate_half(x) * sin` equals
`roll(x, half) * sin'` with sin' = cat(-sin1, sin2) element for element ((-a) * b and a * (-b)
round alike), and the sum keeps its operands and order, so the output is bit-identical on any
device. sin' and the unsqueezed cos are built once per pass: every layer of a pass gets the same
(cos, sin) tensors.
Its `attend` (cache update and attention, run eagerly between the layer graphs' parts) runs a
masked call of several rows in chunks of rows (model/row_chunks.py), with the same bits.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.models.qwen3_vl.modeling_qwen3_vl import (
    ALL_ATTENTION_FUNCTIONS,
    Qwen3VLTextAttention,
    eager_attention_forward,
)

from .class_swap import swap_class
from .masked_sdpa import (
    as_autocast_inputs,
    autocast_dtype,
    masked_sdpa_attention,
    takes_over,
    with_fast_masked_repeat,
)
from .row_chunks import ROW_CHUNK_BYTES, attend_in_row_chunks


class PassRotary:
    """(cos, sin') broadcast over heads, derived once from the pass's (cos, sin)."""

    def __init__(self) -> None:
        # (cos, sin) of the pass, then what was derived from them
        self._last: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def get(self, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return cos and sin' unsqueezed on the head dimension; derive them on a new pass.

        Holding the pass's tensors keeps their identity unique until the next pass replaces them.
        """
        if self._last is None or self._last[0] is not cos or self._last[1] is not sin:
            half = sin.shape[-1] // 2
            signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
            self._last = (cos, sin, cos.unsqueeze(1), signed.unsqueeze(1))
        return self._last[2], self._last[3]


class RolledRotaryAttention(Qwen3VLTextAttention):
    """Qwen3VLTextAttention with the rotary embedding applied by `roll` (module docstring)."""

    pass_rotary: PassRotary
    row_chunk_bytes: int = ROW_CHUNK_BYTES

    def forward(self, hidden_states: torch.Tensor,
                position_embeddings: tuple[torch.Tensor, torch.Tensor],
                attention_mask: torch.Tensor | None, past_key_values: Any = None,
                **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Project, normalise q and k per head, rotate, update the cache, attend, project out."""
        query, key, value = self.project(hidden_states,
                                         *self.pass_rotary.get(*position_embeddings))
        out, weights = self.attend(query, key, value, attention_mask, past_key_values, **kwargs)
        return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1).contiguous()), weights

    def project(self, hidden_states: torch.Tensor, cos: torch.Tensor,
                signed_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> rotated query, rotated key, value, each (B, heads, L, head_dim).

        Fixed shapes from pass to pass: `model/layer_graphs.py` replays it as a CUDA graph.
        """
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        key = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        half = self.head_dim // 2
        query = query * cos + query.roll(half, dims=-1) * signed_sin
        key = key * cos + key.roll(half, dims=-1) * signed_sin
        return query, key, value

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, past_key_values: Any = None,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append key and value to the cache and attend -> (output before o_proj, weights).

        A masked call of several rows runs in chunks of at most `row_chunk_bytes` of transient
        (model/row_chunks.py), bit-identical to one call. A call that SDPA makes under autocast
        gets its inputs cast first, as SDPA would cast them (model/masked_sdpa.py): the cache
        then keeps the expert's float32 keys in the autocast dtype, which every later read
        would cast them to.
        """
        attend = with_fast_masked_repeat(ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward))
        heads_repeat = 1
        if attention_mask is not None and attend is masked_sdpa_attention and takes_over(
                self, key, value, attention_mask, **kwargs):
            query, key, value, attention_mask = as_autocast_inputs(
                autocast_dtype(query.device), query, key, value, attention_mask)
            heads_repeat = query.shape[1] // key.shape[1]
        return attend_in_row_chunks(
            self, attend, query, key, value, attention_mask, past_key_values,
            cap=self.row_chunk_bytes, heads_repeat=heads_repeat,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            **kwargs)


def roll_rotary(model: nn.Module) -> int:
    """Switch every Qwen3VLTextAttention in `model` to `RolledRotaryAttention`; count them.

    The layers share one `PassRotary`: a pass's own tensors are what it keys on, and the
    language model's and the expert's passes never interleave, so nothing is derived twice.
    """
    return swap_class(model, Qwen3VLTextAttention, RolledRotaryAttention,
                      pass_rotary=PassRotary())
