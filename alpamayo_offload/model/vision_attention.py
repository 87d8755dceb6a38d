"""Qwen3-VL's vision attention with one host-device sync a pass instead of three a block.

Without flash-attention, transformers splits q, k and v per image with
`cu_seqlens.diff().tolist()`, once for each of the three, in every one of the 27 vision blocks.
`cu_seqlens` lives on the GPU, so each read makes the host wait until the GPU has run everything
queued so far (81 waits a pass), and the vision phase runs host and device in turn instead of
side by side, so its latency follows the CPU's speed.
The blocks of a pass share one `cu_seqlens` tensor: here its lengths are read once and every
block issues the same ops on the same splits, so the output is bit-identical.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.models.qwen3_vl.modeling_qwen3_vl import (
    ALL_ATTENTION_FUNCTIONS,
    Qwen3VLVisionAttention,
    apply_rotary_pos_emb_vision,
    eager_attention_forward,
    is_flash_attention_requested,
)

from .class_swap import swap_class


class PassLengths:
    """Per-image token counts of the pass's `cu_seqlens`, read from the device once."""

    def __init__(self) -> None:
        self._last: tuple[torch.Tensor, list[int]] | None = None

    def get(self, cu_seqlens: torch.Tensor) -> list[int]:
        """Return the lengths; read them when a new pass brings a new `cu_seqlens`.

        Holding the pass's tensor keeps its identity unique until the next pass replaces it.
        """
        if self._last is None or self._last[0] is not cu_seqlens:
            self._last = (cu_seqlens, (cu_seqlens[1:] - cu_seqlens[:-1]).tolist())
        return self._last[1]


class OneSyncVisionAttention(Qwen3VLVisionAttention):
    """Qwen3VLVisionAttention reading the per-image lengths once a pass (module docstring)."""

    pass_lengths: PassLengths

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                max_seqlen: int | None = None, **kwargs: Any) -> torch.Tensor:
        """Project q, k, v, rotate, attend within each image, project out."""
        if is_flash_attention_requested(self.config):     # varlen kernel: no split, no sync
            return super().forward(hidden_states, cu_seqlens, position_embeddings, max_seqlen,
                                   **kwargs)
        assert position_embeddings is not None            # the vision model always passes them
        seq_length = hidden_states.shape[0]
        query, key, value = (self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1)
                             .permute(1, 0, 2, 3).unbind(0))
        query, key = apply_rotary_pos_emb_vision(query, key, *position_embeddings)
        query, key, value = (t.transpose(0, 1).unsqueeze(0) for t in (query, key, value))
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                       eager_attention_forward)
        lengths = self.pass_lengths.get(cu_seqlens)
        outputs = [attend(self, q, k, v, attention_mask=None, scaling=self.scaling,
                          dropout=0.0 if not self.training else self.attention_dropout,
                          is_causal=False, **kwargs)[0]
                   for q, k, v in zip(*(torch.split(t, lengths, dim=2)
                                        for t in (query, key, value)), strict=True)]
        out = torch.cat(outputs, dim=1).reshape(seq_length, -1).contiguous()
        return self.proj(out)


def sync_vision_once(model: nn.Module) -> int:
    """Switch every Qwen3VLVisionAttention in `model` to `OneSyncVisionAttention`; count them.

    The blocks share one `PassLengths`.
    """
    return swap_class(model, Qwen3VLVisionAttention, OneSyncVisionAttention,
                      pass_lengths=PassLengths())
