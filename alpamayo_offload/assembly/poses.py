"""Pose interpolation over odometry: linear position, slerp orientation, rear-axle offset."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .errors import (
    ODOMETRY_GAP,
    ODOMETRY_INSUFFICIENT,
    ODOMETRY_MISSING,
    ODOMETRY_NONFINITE,
    ODOMETRY_STALE,
    InputError,
)
from .messages import OdometrySample


def quat_to_matrix(q_xyzw: np.ndarray) -> np.ndarray:
    """Convert unit quaternions (..., 4), x y z w order, to rotation matrices (..., 3, 3)."""
    q = q_xyzw / np.linalg.norm(q_xyzw, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    m = np.empty(q.shape[:-1] + (3, 3))
    m[..., 0, 0] = 1 - 2 * (y * y + z * z)
    m[..., 0, 1] = 2 * (x * y - z * w)
    m[..., 0, 2] = 2 * (x * z + y * w)
    m[..., 1, 0] = 2 * (x * y + z * w)
    m[..., 1, 1] = 1 - 2 * (x * x + z * z)
    m[..., 1, 2] = 2 * (y * z - x * w)
    m[..., 2, 0] = 2 * (x * z - y * w)
    m[..., 2, 1] = 2 * (y * z + x * w)
    m[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return m


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) to unit quaternions (..., 4) x, y, z, w with w >= 0."""
    m = np.asarray(m, dtype=np.float64)
    r = m.reshape(-1, 3, 3)
    d0, d1, d2 = r[:, 0, 0], r[:, 1, 1], r[:, 2, 2]
    # Shepperd's method: pivot on the largest of trace and diagonal for numerical stability;
    # all four candidates are computed (vectorised) and the pivot's row is kept.
    pivots = np.stack([d0 + d1 + d2, d0, d1, d2], axis=1)
    k = pivots.argmax(axis=1)
    s = 2.0 * np.sqrt(np.maximum(1.0 + np.stack(
        [d0 + d1 + d2, d0 - d1 - d2, d1 - d0 - d2, d2 - d0 - d1], axis=1), 1e-300))
    a21, a12 = r[:, 2, 1], r[:, 1, 2]
    a02, a20 = r[:, 0, 2], r[:, 2, 0]
    a10, a01 = r[:, 1, 0], r[:, 0, 1]
    cand = np.stack([
        np.stack([(a21 - a12) / s[:, 0], (a02 - a20) / s[:, 0], (a10 - a01) / s[:, 0],
                  s[:, 0] / 4], axis=1),
        np.stack([s[:, 1] / 4, (a01 + a10) / s[:, 1], (a02 + a20) / s[:, 1],
                  (a21 - a12) / s[:, 1]], axis=1),
        np.stack([(a01 + a10) / s[:, 2], s[:, 2] / 4, (a12 + a21) / s[:, 2],
                  (a02 - a20) / s[:, 2]], axis=1),
        np.stack([(a02 + a20) / s[:, 3], (a12 + a21) / s[:, 3], s[:, 3] / 4,
                  (a10 - a01) / s[:, 3]], axis=1),
    ], axis=1)
    q = cand[np.arange(len(r)), k]
    q = np.where(q[:, 3:4] < 0, -q, q)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q.reshape(m.shape[:-2] + (4,))


def slerp(q0: np.ndarray, q1: np.ndarray, u: float) -> np.ndarray:
    """Interpolate unit quaternions (x, y, z, w) on the sphere; u outside [0, 1] extrapolates."""
    q0 = q0 / _norm(q0)
    q1 = q1 / _norm(q1)
    dot = float(np.dot(q0, q1))
    if dot < 0.0:  # take the short way round
        q1, dot = -q1, -dot
    if dot > 1.0 - 1e-12:  # angle below ~1e-6 rad: lerp is exact to float precision, no 0/0
        q = q0 + u * (q1 - q0)
        return q / _norm(q)
    theta = np.arccos(min(dot, 1.0))
    q = (np.sin((1.0 - u) * theta) * q0 + np.sin(u * theta) * q1) / np.sin(theta)
    return q / _norm(q)


def _norm(q: np.ndarray) -> float:
    """`np.linalg.norm` of a real vector (sqrt of its dot with itself), without its overhead."""
    return math.sqrt(q.dot(q))


def interpolate_poses(
    samples: Sequence[OdometrySample],
    times_ns: Sequence[int],
    *,
    rear_axle_offset: Sequence[float],
    max_gap_s: float,
    extrapolate_s: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Rear-axle poses at `times_ns` (sorted ascending) from odometry samples (sorted by stamp).

    Returns xyz (N, 3) and rot (N, 3, 3) in the odometry frame. The rear axle sits at
    `rear_axle_offset` (metres) in the odometry child frame. Up to `extrapolate_s` past the newest
    sample is extrapolated (odometry usually lags the newest camera by a few ms); every gap between
    samples covering the requested span must be at most `max_gap_s`.
    """
    if not samples:
        raise InputError(ODOMETRY_MISSING, 'no odometry received; check the odometry topic remap')
    t_first, t_last = times_ns[0], times_ns[-1]
    stamps = np.fromiter((s.stamp_ns for s in samples), dtype=np.int64, count=len(samples))
    if stamps[0] > t_first:
        raise InputError(ODOMETRY_INSUFFICIENT,
                         f'odometry starts {(stamps[0] - t_first) / 1e9:.3f} s after the oldest '
                         'history time; wait for 1.5 s of odometry')
    if t_last - stamps[-1] > extrapolate_s * 1e9:
        raise InputError(ODOMETRY_STALE,
                         f'newest odometry is {(t_last - stamps[-1]) / 1e9:.3f} s older than t0 '
                         f'(limit {extrapolate_s} s); check the odometry rate or raise '
                         'sync.odometry_tolerance_s')
    lo = max(int(np.searchsorted(stamps, t_first, side='right')) - 1, 0)
    hi = min(int(np.searchsorted(stamps, t_last, side='left')), len(samples) - 1)
    lo = min(lo, max(hi - 1, 0))
    window = samples[lo:hi + 1]
    pos = np.array([s.position for s in window], dtype=np.float64).reshape(-1, 3)
    quat = np.array([s.orientation_xyzw for s in window], dtype=np.float64).reshape(-1, 4)
    finite = np.isfinite(pos).all(axis=1) & np.isfinite(quat).all(axis=1)
    if not finite.all():
        bad = window[int(finite.argmin())]
        raise InputError(ODOMETRY_NONFINITE,
                         f'odometry at stamp {bad.stamp_ns} ns holds NaN/Inf; check the source')
    if len(window) < 2:
        raise InputError(ODOMETRY_INSUFFICIENT, 'need at least two odometry samples around t0')
    gaps = np.diff(stamps[lo:hi + 1]) / 1e9
    if gaps.size and gaps.max() > max_gap_s:
        i = int(gaps.argmax())
        raise InputError(ODOMETRY_GAP,
                         f'odometry gap of {gaps[i]:.3f} s after stamp {stamps[lo + i]} ns exceeds '
                         f'sync.max_odometry_gap_s = {max_gap_s}')
    wst = stamps[lo:hi + 1]
    xyz = np.empty((len(times_ns), 3))
    quats = np.empty((len(times_ns), 4))
    for k, t in enumerate(times_ns):
        j = min(max(int(np.searchsorted(wst, t, side='right')) - 1, 0), len(wst) - 2)
        u = (t - wst[j]) / (wst[j + 1] - wst[j])
        xyz[k] = pos[j] + u * (pos[j + 1] - pos[j])
        quats[k] = slerp(quat[j], quat[j + 1], float(u))
    rot = quat_to_matrix(quats)
    xyz = xyz + rot @ np.asarray(rear_axle_offset, dtype=np.float64)
    return xyz, rot
