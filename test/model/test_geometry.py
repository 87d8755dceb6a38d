"""Ego-frame transform and unicycle integration against hand-computed cases."""
from __future__ import annotations

import math

import numpy as np
import torch

from alpamayo_offload.model import to_t0_frame
from alpamayo_offload.model.action_space import UnicycleAccelCurvatureActionSpace, yaw_to_rot
from alpamayo_offload.model.config import ActionConfig


def _rz(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def test_t0_frame_hand_case() -> None:
    # Heading +90 deg at t0, at world (1000, 2000, 5): a point 1 m north is 1 m ahead (x).
    xyz = np.array([[1000.0, 1999.0, 5.0], [1000.0, 2000.0, 5.0]])
    rot = np.stack([_rz(math.pi / 2), _rz(math.pi / 2)])
    lx, lr = to_t0_frame(xyz, rot)
    torch.testing.assert_close(lx, torch.tensor([[-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(lr[-1], torch.eye(3))
    # A pose yawed +30 deg relative to t0 keeps that relative yaw.
    _, lr = to_t0_frame(xyz, np.stack([_rz(math.pi / 2 + math.pi / 6), _rz(math.pi / 2)]))
    torch.testing.assert_close(lr[0], torch.tensor(_rz(math.pi / 6), dtype=torch.float32))


def _space() -> UnicycleAccelCurvatureActionSpace:
    return UnicycleAccelCurvatureActionSpace(ActionConfig())


def _history(speed: float, yaw_rate: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.arange(-15, 1, dtype=torch.float64) * 0.1
    if yaw_rate == 0.0:
        xyz = torch.stack([speed * t, 0 * t, 0 * t], -1)
    else:
        r = speed / yaw_rate
        yaw = yaw_rate * t
        xyz = torch.stack([r * torch.sin(yaw), r * (1 - torch.cos(yaw)), 0 * t], -1)
    return xyz.float(), yaw_to_rot((yaw_rate * t).float())


def _normalised(space, accel: float, kappa: float) -> torch.Tensor:
    c = space.cfg
    a = torch.full((64,), (accel - c.accel_mean) / c.accel_std)
    k = torch.full((64,), (kappa - c.curvature_mean) / c.curvature_std)
    return torch.stack([a, k], -1)


def test_straight_line_constant_speed() -> None:
    space = _space()
    xyz, rot = _history(10.0)
    v0 = float(space.estimate_t0_speed(xyz, rot))
    assert abs(v0 - 10.0) < 1e-4 * 10  # ridge 1e-4 biases the fit by ~1e-5 relative
    fx, fr = space.action_to_traj(_normalised(space, 0.0, 0.0), xyz, rot)
    k = torch.arange(1, 65, dtype=torch.float32)
    torch.testing.assert_close(fx[:, 0], v0 * 0.1 * k, atol=1e-4, rtol=0)
    torch.testing.assert_close(fx[:, 0], 1.0 * k, atol=1e-2, rtol=0)  # 10 m/s * 0.1 s
    torch.testing.assert_close(fx[:, 1:], torch.zeros(64, 2), atol=1e-5, rtol=0)
    torch.testing.assert_close(fr, torch.eye(3).expand(64, 3, 3), atol=1e-6, rtol=0)


def test_constant_curvature_turn() -> None:
    space = _space()
    v, kappa = 5.0, 0.05  # radius 20 m, yaw rate 0.25 rad/s
    xyz, rot = _history(v, v * kappa)
    fx, fr = space.action_to_traj(_normalised(space, 0.0, kappa), xyz, rot)
    s = v * 0.1 * torch.arange(1, 65, dtype=torch.float64)
    theta = kappa * s
    exp = torch.stack([torch.sin(theta) / kappa, (1 - torch.cos(theta)) / kappa], -1).float()
    # trapezoidal integration of an exact arc: error O(dt^2) ~ a few cm after 32 m
    torch.testing.assert_close(fx[:, :2], exp, atol=5e-2, rtol=0)
    yaw = torch.atan2(fr[:, 1, 0], fr[:, 0, 0])
    torch.testing.assert_close(yaw, theta.float(), atol=2e-3, rtol=0)
    # radius check: every waypoint lies on the circle of radius 1/kappa around (0, 20)
    radius = torch.linalg.norm(fx[:, :2] - torch.tensor([0.0, 1 / kappa]), dim=-1)
    torch.testing.assert_close(radius, torch.full((64,), 1 / kappa), atol=5e-2, rtol=0)
