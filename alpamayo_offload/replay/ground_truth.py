"""The driven future in the t0 ego frame: what a prediction is scored against."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from alpamayo_offload.assembly import AssemblyConfig, OdometrySample, Pose, future_ground_truth
from alpamayo_offload.replay.metrics import yaw_from_rot


@dataclass(frozen=True)
class GroundTruth:
    """Rear-axle poses at t0+0.1 ... t0+6.4 s, in the ego frame at t0 (x forward, y left)."""

    xyz: np.ndarray   # (64, 3) float64
    rot: np.ndarray   # (64, 3, 3)

    @property
    def yaw(self) -> np.ndarray:
        """Heading (rad) of each pose, (64,)."""
        return yaw_from_rot(self.rot)


def to_ego_frame(xyz: np.ndarray, rot: np.ndarray, origin: Pose) -> tuple[np.ndarray, np.ndarray]:
    """Odometry-frame poses into the frame of `origin`: R0^T (p - p0), R0^T R (float64).

    The same rigid transform the model applies to the history (`model.inputs.to_t0_frame`), kept
    in float64 here because scores are differences of large world coordinates.
    """
    r0t = np.asarray(origin.rot, dtype=np.float64).T
    return (np.asarray(xyz, dtype=np.float64) - origin.xyz) @ r0t.T, r0t @ rot


def ground_truth(odometry: Sequence[OdometrySample], t0_ns: int, origin: Pose,
                 cfg: AssemblyConfig) -> GroundTruth:
    """Future poses from the whole bag's odometry; raises `InputError` when not covered."""
    xyz, rot = future_ground_truth(odometry, t0_ns, cfg)
    local_xyz, local_rot = to_ego_frame(xyz, rot, origin)
    return GroundTruth(local_xyz, local_rot)
