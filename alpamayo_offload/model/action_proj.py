"""Action heads: noisy action + flow time -> expert token embeddings, and back to a velocity.

Module and parameter names follow the release checkpoint keys
(`action_in_proj.encoder.trunk.{0,3,6}`, `.trunk.{2,5}.weight`, `.norm`, `sinus.{i}.freqs`).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import ActionConfig


class FourierEncoderV2(nn.Module):
    """sin/cos of 2*pi*x*f for log-spaced f in [1, max_freq], scaled by sqrt(2)."""

    def __init__(self, dim: int, max_freq: float, persistent: bool = True) -> None:
        super().__init__()
        self.dim, self.max_freq = dim, max_freq
        self.register_buffer("freqs", self.default_freqs(), persistent=persistent)

    def default_freqs(self, device: torch.device | None = None) -> torch.Tensor:
        """(1, dim/2) log-spaced frequencies (float32; a bf16 checkpoint stores them rounded)."""
        return torch.logspace(0, math.log10(self.max_freq), steps=self.dim // 2,
                              device=device)[None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(...) -> (..., dim). The argument order ((x f) 2) pi matches the release's rounding."""
        arg = x[..., None] * self.freqs * 2 * torch.pi
        return torch.cat([torch.sin(arg), torch.cos(arg)], -1) * math.sqrt(2)


class RMSNorm(nn.Module):
    """RMSNorm that normalises in float32 and scales afterwards (eps 1e-5, release trunk)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise over the last axis."""
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) \
            * self.weight


class MLPEncoder(nn.Module):
    """Linear-SiLU, then (RMSNorm-Linear-SiLU) x (n-1), then RMSNorm-Linear: the `trunk` layout."""

    def __init__(self, in_feats: int, num_layers: int, hidden: int, out: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(in_feats, hidden), nn.SiLU()]
        for i in range(num_layers):
            last = i == num_layers - 1
            layers += [RMSNorm(hidden), nn.Linear(hidden, out if last else hidden)]
            if not last:
                layers.append(nn.SiLU())
        self.trunk = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in) -> (B, out)."""
        return self.trunk(x)


class PerWaypointActionInProjV2(nn.Module):
    """Per-waypoint Fourier features of (accel, curvature) and the flow time -> (B, N, out_dim).

    R1 upcasts the inputs to float32 and stores the `freqs` in the checkpoint; Alpamayo 1.5
    (`release_1_5`) feeds the inputs as given and rebuilds the `freqs` at load (non-persistent).
    """

    def __init__(self, cfg: ActionConfig, action_dim: int, out_dim: int,
                 release_1_5: bool = False) -> None:
        super().__init__()
        feats = cfg.num_fourier_feats
        keep = not release_1_5
        self.upcast = keep
        self.sinus = nn.ModuleList(FourierEncoderV2(feats, cfg.max_freq, keep)
                                   for _ in range(action_dim))
        self.timestep_fourier_encoder = FourierEncoderV2(feats, cfg.max_freq, keep)
        self.encoder = MLPEncoder(feats * (action_dim + 1), cfg.in_proj_num_layers,
                                  cfg.in_proj_hidden_size, out_dim)
        self.norm = nn.LayerNorm(out_dim)

    def fourier_encoders(self) -> list[FourierEncoderV2]:
        """All Fourier encoders (their `freqs` are non-learned checkpoint buffers)."""
        return [*self.sinus, self.timestep_fourier_encoder]  # type: ignore[list-item]

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """X (B, N, C) noisy action, t (B, 1, 1) flow time -> (B, N, out_dim)."""
        b, n, _ = x.shape
        if self.upcast:
            x, t = x.float(), t.float()
        action_feats = torch.cat([enc(x[:, :, i]) for i, enc in enumerate(self.sinus)], dim=-1)
        time_feats = self.timestep_fourier_encoder(t[..., -1]).repeat(1, n, 1)  # (B, N, F)
        feats = torch.cat((action_feats, time_feats), dim=-1)                     # (B, N, F(C+1))
        return self.norm(self.encoder(feats.flatten(0, 1)).reshape(b, n, -1)).to(feats.dtype)
