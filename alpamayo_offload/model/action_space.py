"""Unicycle action space: normalised (acceleration, curvature) per 0.1 s step <-> ego trajectory.

All solvers run in float32 with autocast off, like the release. The forward direction
(`action_to_traj`) integrates speed and heading with the trapezoidal rule from the t0 speed, which
is estimated from the 16-pose history by regularised least squares (`estimate_t0_speed`). The
inverse (`traj_to_action`) is the release's smoothed least-squares fit; inference does not need it,
but it is kept so ground-truth trajectories can be expressed as actions.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from .config import ActionConfig

_LOW_SPEED_CURVATURE_MPS = 0.6  # below this speed the release zeroes fitted curvature


def yaw_of(rot: torch.Tensor) -> torch.Tensor:
    """Yaw of rotation matrices (..., 3, 3) -> (...)."""
    return torch.atan2(rot[..., 1, 0], rot[..., 0, 0])


def unwrap(theta: torch.Tensor) -> torch.Tensor:
    """Unwrap angles along the last axis so each step lies in [-pi, pi]."""
    d = torch.diff(theta, dim=-1)
    d = torch.atan2(torch.sin(d), torch.cos(d))
    return torch.cat([theta[..., :1], theta[..., :1] + torch.cumsum(d, dim=-1)], dim=-1)


def yaw_to_rot(theta: torch.Tensor) -> torch.Tensor:
    """Rz(theta) as (..., 3, 3) with the z axis fixed."""
    c, s = torch.cos(theta), torch.sin(theta)
    z, o = torch.zeros_like(theta), torch.ones_like(theta)
    return torch.stack([torch.stack([c, -s, z], -1), torch.stack([s, c, z], -1),
                        torch.stack([z, z, o], -1)], -2)


def _difference_matrix(n: int, order: int, dtype: torch.dtype,
                       device: torch.device) -> torch.Tensor:
    """(n - order, n) finite-difference matrix of the given order (1, 2 or 3)."""
    stencil = {1: [-1.0, 1.0], 2: [-1.0, 2.0, -1.0], 3: [-1.0, 3.0, -3.0, 1.0]}[order]
    rows = max(n - order, 0)
    d = torch.zeros(rows, n, dtype=dtype, device=device)
    idx = torch.arange(rows, device=device)
    for k, c in enumerate(stencil):
        d[idx, idx + k] = c
    return d


@functools.lru_cache(maxsize=32)
def _smoothness(n: int, order: int, lam: float, dt: float, dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    """Lam / dt^(2 order) * D^T D: the normal-equation term penalising the order-th derivative.

    A constant per shape, built once (read-only by every caller): rebuilding it took ~0.15 ms of
    each inference's host time. Built outside inference mode so any caller may use it.
    """
    with torch.inference_mode(False):
        d = _difference_matrix(n, order, dtype, device)
        return (lam / dt ** (2 * order)) * (d.T @ d)


@functools.lru_cache(maxsize=32)
def _ridge(n: int, ridge: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Ridge * I (n, n), built once like `_smoothness` (read-only)."""
    with torch.inference_mode(False):
        return ridge * torch.eye(n, dtype=dtype, device=device)


def _cholesky_solve(lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    chol = torch.linalg.cholesky(lhs)
    return torch.cholesky_solve(rhs.unsqueeze(-1), chol).squeeze(-1)


def _speed_design(theta: torch.Tensor) -> torch.Tensor:
    """(..., 2N, N+1) matrix of v_j u_j + v_{j+1} u_{j+1}, rows interleaved x, y."""
    n = theta.shape[-1] - 1
    a = torch.zeros(*theta.shape[:-1], 2 * n, n + 1, dtype=theta.dtype, device=theta.device)
    rows, cols = 2 * torch.arange(n, device=theta.device), torch.arange(n, device=theta.device)
    cos, sin = torch.cos(theta), torch.sin(theta)
    a[..., rows, cols], a[..., rows, cols + 1] = cos[..., :-1], cos[..., 1:]
    a[..., rows + 1, cols], a[..., rows + 1, cols + 1] = sin[..., :-1], sin[..., 1:]
    return a


class UnicycleAccelCurvatureActionSpace(nn.Module):
    """Holds the normalisation buffers (checkpoint keys `action_space.*`) and the kinematics.

    `persistent=False` (Alpamayo 1.5): the buffers are not checkpoint tensors; they are rebuilt
    from the config at load, rounded to the load dtype as the official constructor makes them.
    """

    def __init__(self, cfg: ActionConfig, persistent: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        for name in ("accel_mean", "accel_std", "curvature_mean", "curvature_std"):
            self.register_buffer(name, torch.tensor(getattr(cfg, name), dtype=torch.float32),
                                 persistent=persistent)

    def rebuild_buffers(self, device: torch.device,
                        rounded_to: torch.dtype = torch.float32) -> None:
        """Recreate the four float32 buffers from the config, values rounded to `rounded_to`."""
        for name in ("accel_mean", "accel_std", "curvature_mean", "curvature_std"):
            value = torch.tensor(getattr(self.cfg, name), dtype=rounded_to, device=device)
            self._buffers[name] = value.to(torch.float32)

    @torch.no_grad()
    def estimate_t0_speed(self, hist_xyz: torch.Tensor, hist_rot: torch.Tensor) -> torch.Tensor:
        """Speed at t0 (...,) from history (..., T, 3), (..., T, 3, 3) in the t0 frame.

        Solves for v_0..v_{T-1}: sum ||v_j u_j + v_{j+1} u_{j+1} - 2 dp_j / dt||^2
        + v_lambda/dt^6 ||D3 v||^2 + v_ridge ||v||^2, and returns the last speed.
        """
        c = self.cfg
        with torch.autocast(hist_xyz.device.type, enabled=False):
            xy = hist_xyz[..., :2].float()
            target = (2.0 / c.dt * (xy[..., 1:, :] - xy[..., :-1, :])).flatten(-2)  # (..., 2N)
            a = _speed_design(unwrap(yaw_of(hist_rot.float())))
            n1 = a.shape[-1]
            lhs = (a.transpose(-1, -2) @ a
                   + _smoothness(n1, 3, c.v_lambda, c.dt, a.dtype, a.device)
                   + _ridge(n1, c.v_ridge, a.dtype, a.device))
            rhs = (a.transpose(-1, -2) @ target.unsqueeze(-1)).squeeze(-1)
            return _cholesky_solve(lhs, rhs)[..., -1]

    @torch.no_grad()
    def action_to_traj(self, action: torch.Tensor, hist_xyz: torch.Tensor,
                       hist_rot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised actions (..., N, 2) -> future xyz (..., N, 3) and rotations (..., N, 3, 3)."""
        c = self.cfg
        with torch.autocast(action.device.type, enabled=False):
            action = action.float()
            accel = action[..., 0] * self.accel_std.float() + self.accel_mean.float()
            kappa = action[..., 1] * self.curvature_std.float() + self.curvature_mean.float()
            v0 = self.estimate_t0_speed(hist_xyz, hist_rot).unsqueeze(-1)  # (..., 1)
            dt = c.dt
            v = torch.cat([v0, v0 + torch.cumsum(accel * dt, dim=-1)], dim=-1)  # (..., N+1)
            # theta_{k+1} = theta_k + kappa_k (v_k dt + a_k dt^2 / 2), theta_0 = 0
            zero = torch.zeros_like(v0)
            theta = torch.cat([zero, zero + torch.cumsum(kappa * v[..., :-1] * dt, dim=-1)
                               + torch.cumsum(kappa * accel * (0.5 * dt * dt), dim=-1)], dim=-1)
            half = 0.5 * dt
            x = (zero + torch.cumsum(v[..., :-1] * torch.cos(theta[..., :-1]) * half, dim=-1)
                 + torch.cumsum(v[..., 1:] * torch.cos(theta[..., 1:]) * half, dim=-1))
            y = (zero + torch.cumsum(v[..., :-1] * torch.sin(theta[..., :-1]) * half, dim=-1)
                 + torch.cumsum(v[..., 1:] * torch.sin(theta[..., 1:]) * half, dim=-1))
            z = hist_xyz[..., -1:, 2].float().expand_as(x)  # height of the t0 pose
            return torch.stack([x, y, z], dim=-1), yaw_to_rot(theta[..., 1:])

    @torch.no_grad()
    def traj_to_action(self, hist_xyz: torch.Tensor, hist_rot: torch.Tensor,
                       fut_xyz: torch.Tensor, fut_rot: torch.Tensor) -> torch.Tensor:
        """Future trajectory (..., N, 3), (..., N, 3, 3) -> normalised actions (..., N, 2)."""
        with torch.autocast(fut_xyz.device.type, enabled=False):
            v0 = self.estimate_t0_speed(hist_xyz, hist_rot)
            xy = torch.cat([hist_xyz[..., -1:, :], fut_xyz.float()], dim=-2)[..., :2]
            dxy = xy[..., 1:, :] - xy[..., :-1, :]
            theta = self._smooth_heading(fut_rot.float())                     # (..., N+1)
            v = self._fit_speed(dxy, theta, v0)                               # (..., N+1)
            accel = self._fit_accel(v)                                        # (..., N)
            kappa = self._fit_curvature(theta, v, accel)                      # (..., N)
            accel = (accel - self.accel_mean.float()) / self.accel_std.float()
            kappa = (kappa - self.curvature_mean.float()) / self.curvature_std.float()
            return torch.stack([accel, kappa], dim=-1)

    def _smooth_heading(self, fut_rot: torch.Tensor) -> torch.Tensor:
        """Headings theta_1..N fitted with theta_0 = 0 fixed and a 3rd-order smoothness term."""
        c = self.cfg
        target = unwrap(yaw_of(fut_rot))
        n = target.shape[-1]
        dtd = _smoothness(n + 1, 3, c.theta_lambda, c.dt, target.dtype, target.device)
        eye = torch.eye(n, dtype=target.dtype, device=target.device)
        theta = _cholesky_solve(eye + dtd[1:, 1:] + c.theta_ridge * eye, target)  # x_0 = 0
        return torch.cat([torch.zeros_like(theta[..., :1]), theta], dim=-1)

    def _fit_speed(self, dxy: torch.Tensor, theta: torch.Tensor, v0: torch.Tensor) -> torch.Tensor:
        """Speeds v_1..N by trapezoidal least squares with v_0 fixed to the t0 estimate."""
        c = self.cfg
        target = (2.0 / c.dt * dxy).flatten(-2)
        a = _speed_design(theta)
        ata = a.transpose(-1, -2) @ a
        n1 = a.shape[-1]
        dtd = _smoothness(n1, 3, c.v_lambda, c.dt, a.dtype, a.device)
        rhs = (a[..., :, 1:].transpose(-1, -2) @ target.unsqueeze(-1)).squeeze(-1)
        rhs = rhs - ata[..., 1:, 0] * v0.unsqueeze(-1) - dtd[1:, 0] * v0.unsqueeze(-1)
        eye = torch.eye(n1 - 1, dtype=a.dtype, device=a.device)
        v = _cholesky_solve(ata[..., 1:, 1:] + dtd[1:, 1:] + c.v_ridge * eye, rhs)
        return torch.cat([v0.unsqueeze(-1), v], dim=-1)

    def _fit_accel(self, v: torch.Tensor) -> torch.Tensor:
        """a_k ~ (v_{k+1} - v_k) / dt with a 2nd-order smoothness term."""
        c = self.cfg
        dv = (v[..., 1:] - v[..., :-1]) / c.dt
        return self._solve_scaled(torch.ones_like(dv), dv, c.a_lambda, c.a_ridge)

    def _fit_curvature(self, theta: torch.Tensor, v: torch.Tensor,
                       accel: torch.Tensor) -> torch.Tensor:
        """kappa_k ~ dtheta_k / (v_k dt + a_k dt^2 / 2), zeroed at low speed, clamped to bounds."""
        c = self.cfg
        dtheta = theta[..., 1:] - theta[..., :-1]
        s = c.dt * v[..., :-1] + (c.dt ** 2) / 2.0 * accel
        kappa = self._solve_scaled(s, dtheta, c.kappa_lambda, c.kappa_ridge)
        slow = ((v[..., :-1].abs() < _LOW_SPEED_CURVATURE_MPS)
                | (v[..., 1:].abs() < _LOW_SPEED_CURVATURE_MPS))
        kappa = kappa.clamp(min=c.curvature_bounds[0], max=c.curvature_bounds[1])
        return torch.where(slow, torch.zeros_like(kappa), kappa)

    def _solve_scaled(self, s: torch.Tensor, y: torch.Tensor, lam: float,
                      ridge: float) -> torch.Tensor:
        """argmin_x sum (s_i x_i - y_i)^2 + lam/dt^4 ||D2 x||^2 + ridge ||x||^2."""
        n = y.shape[-1]
        dtd = _smoothness(n, 2, lam, self.cfg.dt, y.dtype, y.device)
        eye = torch.eye(n, dtype=y.dtype, device=y.device)
        while True:  # the release raises the ridge until the system is positive definite
            try:
                return _cholesky_solve(torch.diag_embed(s * s) + dtd + ridge * eye, s * y)
            except RuntimeError:
                ridge *= 10.0
