"""Qwen3-VL's RMSNorm as one `F.rms_norm` op instead of eight element-wise kernels.

Decode and diffusion passes with resident layers are bound by the host issuing kernels, and
each decoder layer's four RMSNorms (cast, pow, mean, add, rsqrt, mul, cast, mul) are 32 of its
56 kernels. `F.rms_norm` computes the same float32 normalisation in one kernel on CUDA, which
makes a whole-GPU inference about 20 % faster (docs/benchmarks.md). Its reduction order
differs, so on CUDA 122 of one inference's 290 norm outputs moved by one bfloat16 step; on the
CPU it decomposes into HF's ops and is bit-identical. Offload stays bit-exact against a
whole-GPU run either way: both run the same norm.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRMSNorm

from .class_swap import swap_class


class FusedRMSNorm(Qwen3VLTextRMSNorm):
    """Qwen3VLTextRMSNorm (normalise in float32, cast back, times the weight) via `F.rms_norm`."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Normalise over the last dimension; float32 inside, the input's dtype out."""
        normed = F.rms_norm(hidden_states.float(), (hidden_states.shape[-1],),
                            eps=self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)


def fuse_rms_norms(model: nn.Module) -> int:
    """Switch every Qwen3VLTextRMSNorm in `model` to `FusedRMSNorm` in place; return how many."""
    return swap_class(model, Qwen3VLTextRMSNorm, FusedRMSNorm)
