"""Flow-matching sampler: Euler integration of the predicted velocity from noise (t=0) to data."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class FlowMatching(nn.Module):
    """No parameters; a module only so the release attribute `diffusion` exists.

    `num_steps` is the model's own step count (`diffusion_cfg.num_inference_steps`).
    """

    def __init__(self, x_dims: tuple[int, int], num_steps: int = 10) -> None:
        super().__init__()
        if num_steps < 1:
            raise ValueError(f"num_steps = {num_steps}: must be >= 1")
        self.x_dims, self.num_steps = x_dims, num_steps

    def time_steps(self, num_steps: int, device: torch.device) -> torch.Tensor:
        """(num_steps + 1,) float32 grid linspace(0, 1)."""
        return torch.linspace(0.0, 1.0, num_steps + 1, dtype=torch.float32, device=device)

    def sample(self, x0: torch.Tensor, step_fn: StepFn, num_steps: int | None = None,
               on_step: Callable[[int, bool], None] | None = None,
               on_step_end: Callable[[int], None] | None = None) -> torch.Tensor:
        """Integrate x' = step_fn(x, t) from x0 (B, N, C) with Euler steps; returns x at t=1.

        `num_steps` None runs the model's own `self.num_steps`. `on_step(i, is_last)` /
        `on_step_end(i)` bracket each step (phase boundaries).
        """
        steps = self.num_steps if num_steps is None else num_steps
        if steps < 1:
            raise ValueError(f"num_steps = {steps}: must be >= 1")
        ts = self.time_steps(steps, x0.device)
        x = x0
        for i in range(steps):
            if on_step is not None:
                on_step(i, i == steps - 1)
            t = ts[i].expand(x.shape[0], 1, 1)  # (B, 1, 1)
            x = x + (ts[i + 1] - ts[i]) * step_fn(x, t)
            if on_step_end is not None:
                on_step_end(i)
        return x
