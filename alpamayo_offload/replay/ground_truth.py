"""The driven future in the t0 ego frame: what a prediction is scored against.

The future is cut at its first invalid step: past the end of the recorded odometry, at an
odometry gap over `sync.max_odometry_gap_s`, or at a NaN/Inf sample. The steps before it are the
ground truth; the sample is then scored at the horizons they cover (`metrics.scored_horizons`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from alpamayo_offload.assembly import AssemblyConfig, InputError, OdometrySample, Pose
from alpamayo_offload.assembly.errors import (
    ODOMETRY_GAP,
    ODOMETRY_INSUFFICIENT,
    ODOMETRY_MISSING,
    ODOMETRY_NONFINITE,
)
from alpamayo_offload.assembly.poses import interpolate_poses
from alpamayo_offload.replay.metrics import HORIZONS_S, scored_horizons, yaw_from_rot

_NS = 1_000_000_000


@dataclass(frozen=True)
class GroundTruth:
    """Rear-axle poses at t0+0.1 s ... (up to 6.4 s), in the ego frame at t0 (x forward, y left).

    `limit` is None for the whole future, else the reason code (and `limit_message` the text) of
    what ended it early.
    """

    xyz: np.ndarray   # (N, 3) float64, N <= 64 valid steps
    rot: np.ndarray   # (N, 3, 3)
    limit: str | None = None
    limit_message: str | None = None

    @property
    def yaw(self) -> np.ndarray:
        """Heading (rad) of each pose, (N,)."""
        return yaw_from_rot(self.rot)

    @property
    def steps(self) -> int:
        """Number of valid future steps."""
        return len(self.xyz)


def to_ego_frame(xyz: np.ndarray, rot: np.ndarray, origin: Pose) -> tuple[np.ndarray, np.ndarray]:
    """Odometry-frame poses into the frame of `origin`: R0^T (p - p0), R0^T R (float64).

    The same rigid transform the model applies to the history (`model.inputs.to_t0_frame`), kept
    in float64 here because scores are differences of large world coordinates.
    """
    r0t = np.asarray(origin.rot, dtype=np.float64).T
    return (np.asarray(xyz, dtype=np.float64) - origin.xyz) @ r0t.T, r0t @ rot


def valid_steps(odometry: Sequence[OdometrySample], times_ns: Sequence[int], max_gap_s: float
                ) -> tuple[int, str | None, str | None]:
    """How many leading `times_ns` the odometry covers, and why the next one is not covered.

    Applies `interpolate_poses`' own checks to each prefix (samples bracketing the span finite,
    no gap over `max_gap_s`, no extrapolation past the last sample).
    """
    if not odometry:
        return 0, ODOMETRY_MISSING, 'no odometry in the recording'
    stamps = np.fromiter((s.stamp_ns for s in odometry), dtype=np.int64, count=len(odometry))
    pos = np.array([s.position for s in odometry], dtype=np.float64).reshape(-1, 3)
    quat = np.array([s.orientation_xyzw for s in odometry], dtype=np.float64).reshape(-1, 4)
    finite = np.isfinite(pos).all(axis=1) & np.isfinite(quat).all(axis=1)
    bad_sample = np.cumsum(~finite)
    bad_gap = np.concatenate([[0], np.cumsum(np.diff(stamps) > max_gap_s * _NS)])
    lo0 = max(int(np.searchsorted(stamps, times_ns[0], side='right')) - 1, 0)
    for k, t in enumerate(times_ns):
        if t > stamps[-1]:
            return k, ODOMETRY_INSUFFICIENT, (
                f'the recorded odometry ends {(t - stamps[-1]) / _NS:.2f} s before future step '
                f'{k + 1}')
        hi = min(int(np.searchsorted(stamps, t, side='left')), len(stamps) - 1)
        lo = min(lo0, max(hi - 1, 0))
        if bad_sample[hi] - (bad_sample[lo - 1] if lo else 0):
            first = lo + int(np.argmin(finite[lo:hi + 1]))
            return k, ODOMETRY_NONFINITE, f'odometry at stamp {stamps[first]} ns holds NaN/Inf'
        if bad_gap[hi] - bad_gap[lo]:
            i = lo + int(np.argmax(np.diff(stamps[lo:hi + 1])))
            return k, ODOMETRY_GAP, (f'odometry gap of {(stamps[i + 1] - stamps[i]) / _NS:.3f} s '
                                     f'after stamp {stamps[i]} ns exceeds '
                                     f'sync.max_odometry_gap_s = {max_gap_s}')
    return len(times_ns), None, None


def ground_truth(odometry: Sequence[OdometrySample], t0_ns: int, origin: Pose,
                 cfg: AssemblyConfig) -> GroundTruth:
    """Future poses from the whole recording's odometry, cut at the first invalid step.

    Raises `InputError` when not even the shortest horizon is covered.
    """
    times = [t0_ns + round((k + 1) * cfg.history_dt_s * _NS) for k in range(cfg.future_steps)]
    n, reason, message = valid_steps(odometry, times, cfg.max_odometry_gap_s)
    if not scored_horizons(n):
        raise InputError(reason or ODOMETRY_INSUFFICIENT,
                         f'{message}; ground truth covers {n * cfg.history_dt_s:.1f} s, the '
                         f'shortest horizon is {HORIZONS_S[0]} s')
    xyz, rot = interpolate_poses(odometry, times[:n], rear_axle_offset=cfg.rear_axle_offset,
                                 max_gap_s=cfg.max_odometry_gap_s, extrapolate_s=0.0)
    local_xyz, local_rot = to_ego_frame(xyz, rot, origin)
    return GroundTruth(local_xyz, local_rot, reason, message)
