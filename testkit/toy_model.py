"""A toy Qwen3-style decoder block and stacks of it, for the runtime's tests and benchmark.

Small enough to run on the CPU in milliseconds, built like the real language-model layers
(projections in bf16, norms and rotary in fp32, grouped-query attention), so streaming them
exercises the runtime as the model does without loading the model.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from alpamayo_offload.runtime import LayerSequence


@dataclass(frozen=True)
class ToyConfig:
    """Shape of a Qwen3-style decoder block (projections in ``dtype``, norms and rotary in fp32)."""

    hidden: int = 64
    intermediate: int = 192
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    dtype: torch.dtype = torch.bfloat16
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ('hidden', 'intermediate', 'n_heads', 'n_kv_heads', 'head_dim'):
            if getattr(self, name) <= 0:
                raise ValueError(f'ToyConfig.{name} must be > 0, got {getattr(self, name)}')
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f'ToyConfig.n_heads={self.n_heads} must be a multiple of '
                             f'n_kv_heads={self.n_kv_heads}')
        if self.head_dim % 2:
            raise ValueError(f'ToyConfig.head_dim must be even, got {self.head_dim}')


class ToyRMSNorm(nn.Module):
    """RMSNorm with an fp32 weight, computed in fp32 (a mixed-dtype layer on purpose)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.float32))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise over the last dimension; returns ``x``'s dtype."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * self.weight).to(x.dtype)


class ToyBlock(nn.Module):
    """Pre-norm attention (GQA, q/k norm, rotary from an fp32 buffer) plus a gated MLP."""

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim

        def linear(n_in: int, n_out: int) -> nn.Linear:
            return nn.Linear(n_in, n_out, bias=False, dtype=cfg.dtype)

        self.input_layernorm = ToyRMSNorm(cfg.hidden)
        self.q_proj, self.k_proj = linear(cfg.hidden, q_dim), linear(cfg.hidden, kv_dim)
        self.v_proj, self.o_proj = linear(cfg.hidden, kv_dim), linear(q_dim, cfg.hidden)
        self.q_norm, self.k_norm = ToyRMSNorm(cfg.head_dim), ToyRMSNorm(cfg.head_dim)
        self.post_attention_layernorm = ToyRMSNorm(cfg.hidden)
        self.gate_proj = linear(cfg.hidden, cfg.intermediate)
        self.up_proj = linear(cfg.hidden, cfg.intermediate)
        self.down_proj = linear(cfg.intermediate, cfg.hidden)
        exponent = torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim
        self.register_buffer('inv_freq', 1.0 / (cfg.rope_theta ** exponent))

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, heads, T, head_dim)
        pos = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)                      # (T, head_dim / 2)
        cos, sin = freqs.cos(), freqs.sin()
        h = x.float()
        x1, x2 = h[..., 0::2], h[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
        return out.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block on ``x`` of shape (B, T, hidden)."""
        cfg = self.cfg
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_norm(self.q_proj(h).view(b, t, cfg.n_heads, cfg.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(b, t, cfg.n_kv_heads, cfg.head_dim)).transpose(1, 2)
        v = self.v_proj(h).view(b, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = self._rotate(q), self._rotate(k)
        groups = cfg.n_heads // cfg.n_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)  # (B, heads, T, head_dim)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def init_block(block: ToyBlock, generator: torch.Generator) -> None:
    """Random weights (std 1/sqrt(fan_in)) and norm scales near 1, from ``generator``."""
    with torch.no_grad():
        for name, p in block.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float32)
            if name.endswith('norm.weight'):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))


def build_stack(cfg: ToyConfig, n_layers: int, seed: int = 0,
                device: torch.device | str = 'cpu') -> nn.ModuleList:
    """``n_layers`` toy blocks; on ``meta`` they stay uninitialised (fill them from a source)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.device(device):
        blocks = nn.ModuleList(ToyBlock(cfg) for _ in range(n_layers))
    if torch.device(device).type != 'meta':
        for block in blocks:
            init_block(block, generator)
    return blocks


def run_stack(blocks: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """Run blocks in order, as a model's layer loop would."""
    for block in blocks:
        x = block(x)
    return x


@dataclass(frozen=True)
class ToyModel:
    """Three layer stacks standing in for ViT, language model and expert."""

    vit: nn.ModuleList
    lm: nn.ModuleList
    expert: nn.ModuleList

    def sequences(self) -> list[LayerSequence]:
        """Return the stacks as runtime layer sequences."""
        return [LayerSequence('vit', self.vit, 'vit.'), LayerSequence('lm', self.lm, 'lm.'),
                LayerSequence('expert', self.expert, 'expert.')]
