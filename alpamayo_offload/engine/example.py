"""A fixed input of the release shape, for profiles, benchmarks and tests without a recording."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class _ExampleInput:
    images: np.ndarray
    ego_history_xyz: np.ndarray
    ego_history_rot: np.ndarray
    camera_indices: tuple[int, ...] | None = None   # release slots of the cameras (None: R1's)
    nav_text: str | None = None                      # route text (1.5, 2 Super; None: no route)


def example_input(height: int = 1080, width: int = 1920, n_cameras: int = 4,
                  camera_indices: tuple[int, ...] | None = None) -> _ExampleInput:
    """Return a deterministic input of the release shape: moving gradients, 8 m/s on a curve.

    `camera_indices` names the cameras' release slots (None: the model's default for the count).
    """
    yy, xx = np.mgrid[0:height, 0:width]
    images = np.empty((n_cameras, 4, height, width, 3), dtype=np.uint8)
    for c in range(n_cameras):
        for f in range(4):
            shift = 7 * f + 31 * c
            images[c, f, ..., 0] = (xx + shift) % 256
            images[c, f, ..., 1] = (yy + 2 * shift) % 256
            images[c, f, ..., 2] = (xx + yy + 3 * shift) % 256
    times = np.arange(-15, 1) * 0.1
    yaw = 0.05 * times
    xyz = np.stack([8.0 * np.sin(yaw) / 0.05, 8.0 * (1 - np.cos(yaw)) / 0.05,
                    np.zeros_like(times)], axis=-1)
    rot = np.zeros((16, 3, 3))
    rot[:, 0, 0] = np.cos(yaw)
    rot[:, 0, 1] = -np.sin(yaw)
    rot[:, 1, 0] = np.sin(yaw)
    rot[:, 1, 1] = np.cos(yaw)
    rot[:, 2, 2] = 1.0
    return _ExampleInput(images, xyz, rot, camera_indices)
