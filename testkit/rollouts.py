"""One synthetic drive for the tiny models' bit-identity tests: frames, ego history, inputs.

The tests that compare two ways of computing a rollout (shared vs repeated K/V, attention in
row chunks vs whole, vision outputs freed early vs kept) need the same kind of input for every
model family and the same set of sample / guidance cases.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from alpamayo_offload.model import (
    AlpamayoConfig,
    ModelInputs,
    SyntheticTextIds,
    prepare_inputs,
    tiny_1_5_config,
    tiny_2super_config,
    tiny_config,
)

# name -> (tiny config, samples, guidance weight, navigation text)
SAMPLE_CASES: dict[str, tuple[Callable[[], AlpamayoConfig], int, float | None, str | None]] = {
    'r1, 3 samples': (tiny_config, 3, None, None),
    '1.5, nav guidance, 1 sample': (tiny_1_5_config, 1, 1.5, 'turn left in 50 m'),
    '1.5, nav guidance, 3 samples': (tiny_1_5_config, 3, 1.5, 'turn left in 50 m'),
    '2 Super, 3 samples': (tiny_2super_config, 3, None, None),
    '2 Super, nav guidance, 3 samples': (tiny_2super_config, 3, 2.0, 'keep right'),
}


def drive_frames(seed: int = 0, speed: float = 8.0,
                 yaw: float = 0.3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return random frames (4 cameras x 4, 81x144) and 1.6 s of straight history."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(4, 4, 81, 144, 3), dtype=np.uint8)
    t = np.arange(-15, 1) * 0.1
    xyz = np.stack([speed * t * math.cos(yaw), speed * t * math.sin(yaw), 0 * t], -1)
    c, s = math.cos(yaw), math.sin(yaw)
    rot = np.broadcast_to(np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]), (16, 3, 3)).copy()
    return images, xyz, rot


def drive_inputs(cfg: AlpamayoConfig, nav_text: str | None = None, seed: int = 0,
                 speed: float = 8.0, yaw: float = 0.3) -> ModelInputs:
    """Return the drive as the model's inputs (cameras in the release slots where named)."""
    images, xyz, rot = drive_frames(seed, speed, yaw)
    slots = (0, 1, 2, 6) if cfg.camera_text else None
    return prepare_inputs(images, xyz, rot, cfg, SyntheticTextIds(), nav_text=nav_text,
                          camera_indices=slots)
