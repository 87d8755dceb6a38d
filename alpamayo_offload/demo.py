"""Interim demo: run a small built-in layer stack through the offload runtime in every mode.

``python -m alpamayo_offload.demo`` prints a timing table and checks that every mode's outputs are
bit-identical to the preload run (exit status 1 if not). It also hosts the toy Qwen3-style block
that the runtime tests and the runtime benchmark use.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from alpamayo_offload.runtime import LayerSequence, Mode, OffloadRuntime, ResidencyPlan

logger = logging.getLogger(__name__)


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


def build_toy_model(seed: int = 0, device: torch.device | str = 'cpu') -> ToyModel:
    """Build the demo's three stacks (layers of different sizes; slots fit the largest)."""
    small = ToyConfig(hidden=64, intermediate=192, n_heads=4, n_kv_heads=2, head_dim=16)
    large = ToyConfig(hidden=96, intermediate=256, n_heads=6, n_kv_heads=2, head_dim=16)
    return ToyModel(build_stack(small, 4, seed, device), build_stack(large, 6, seed + 1, device),
                    build_stack(small, 5, seed + 2, device))


def infer(model: ToyModel, rt: OffloadRuntime | None, x_vit: torch.Tensor, x_lm: torch.Tensor,
          decode_steps: int, diffusion_steps: int) -> list[torch.Tensor]:
    """One 'inference': vision once, prefill, decode tokens, diffusion steps, with hints."""
    hint: Callable[[str], None] = rt.hint_next if rt is not None else (lambda _name: None)
    outs = []
    hint('lm')
    outs.append(run_stack(model.vit, x_vit))
    y = run_stack(model.lm, x_lm)
    outs.append(y)
    token = y[:, -1:, :]
    for step in range(decode_steps):
        if step == decode_steps - 1:
            hint('expert')
        token = run_stack(model.lm, token)
        outs.append(token)
    z = outs[0][:, :8, :]
    for step in range(diffusion_steps):
        if step == diffusion_steps - 1:
            hint('vit')
        z = run_stack(model.expert, z)
        outs.append(z)
    return outs


DEMO_PLANS: dict[str, dict[str, tuple[int, ...]]] = {
    'none': {},
    'lm-first+last': {'lm': (0, 5)},
    'alternate': {'vit': (1, 3), 'lm': (0, 2, 4), 'expert': (0, 2, 4)},
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run every mode and plan, print the timing table, check bit-exactness."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    torch.use_deterministic_algorithms(True)
    device = torch.device(args.device)
    model = build_toy_model(seed=0)
    gen = torch.Generator().manual_seed(1)
    x_vit = torch.randn(1, 32, 64, generator=gen).to(device, torch.bfloat16)
    x_lm = torch.randn(1, 24, 96, generator=gen).to(device, torch.bfloat16)
    rows: list[tuple[str, str, float, bool]] = []
    reference: list[torch.Tensor] | None = None
    all_exact = True
    cases = [(Mode.PRELOAD, 'all')] + [(m, p) for m in (Mode.SEQUENTIAL, Mode.PIPELINED)
                                       for p in DEMO_PLANS]
    for mode, plan_name in cases:
        plan = ResidencyPlan(DEMO_PLANS.get(plan_name, {}))
        rt = OffloadRuntime(model.sequences(), plan, mode=mode, device=device)
        rt.attach()
        times = []
        with torch.inference_mode():
            infer(model, rt, x_vit, x_lm, decode_steps=4, diffusion_steps=5)  # warm-up
            for _ in range(args.repeats):
                start = time.perf_counter()
                outs = infer(model, rt, x_vit, x_lm, decode_steps=4, diffusion_steps=5)
                if device.type == 'cuda':
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
        rt.detach()
        if reference is None:
            reference = [o.cpu() for o in outs]
        exact = len(outs) == len(reference) and all(
            torch.equal(o.cpu(), r) for o, r in zip(outs, reference, strict=True))
        all_exact &= exact
        rows.append((mode.value, plan_name, 1e3 * sorted(times)[len(times) // 2], exact))
    print(f'offload runtime demo on {device} (median of {args.repeats} inferences after a '
          'warm-up; 1 vision pass, prefill, 4 decode tokens, 5 diffusion steps each)')
    print(f'{"mode":<11} {"resident":<15} {"ms/inference":>12}  bit-exact')
    for mode_name, plan_name, ms, exact in rows:
        print(f'{mode_name:<11} {plan_name:<15} {ms:>12.1f}  {"yes" if exact else "NO"}')
    print('all modes bit-exact vs preload' if all_exact else 'MISMATCH against preload')
    return 0 if all_exact else 1


if __name__ == '__main__':
    sys.exit(main())
