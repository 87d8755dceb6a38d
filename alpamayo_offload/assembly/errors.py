"""Typed input errors: every rejected tick carries a machine-readable reason code and a message."""
from __future__ import annotations

from typing import Final

# Reason codes, stable strings: they appear in diagnostics and in replay reports.
CAMERA_MISSING: Final = 'camera_missing'
CAMERA_STOPPED: Final = 'camera_stopped'
INPUT_STALE: Final = 'input_stale'
FRAME_MISMATCH: Final = 'frame_mismatch'
IMAGE_ENCODING: Final = 'image_encoding'
IMAGE_STEP_INVALID: Final = 'image_step_invalid'
IMAGE_TRUNCATED: Final = 'image_truncated'
IMAGE_CORRUPT: Final = 'image_corrupt'
IMAGE_TOO_LARGE: Final = 'image_too_large'
IMAGE_SIZE_MISMATCH: Final = 'image_size_mismatch'
IMAGE_MALFORMED: Final = 'image_malformed'   # a serialized message that does not parse
ODOMETRY_MISSING: Final = 'odometry_missing'
ODOMETRY_NONFINITE: Final = 'odometry_nonfinite'
ODOMETRY_GAP: Final = 'odometry_gap'
ODOMETRY_STALE: Final = 'odometry_stale'
ODOMETRY_INSUFFICIENT: Final = 'odometry_insufficient'
ODOMETRY_MALFORMED: Final = 'odometry_malformed'   # a serialized message that does not parse

REASONS: Final = frozenset({
    CAMERA_MISSING, CAMERA_STOPPED, INPUT_STALE, FRAME_MISMATCH, IMAGE_ENCODING,
    IMAGE_STEP_INVALID, IMAGE_TRUNCATED, IMAGE_CORRUPT, IMAGE_TOO_LARGE, IMAGE_SIZE_MISMATCH,
    ODOMETRY_MISSING, ODOMETRY_NONFINITE, ODOMETRY_GAP, ODOMETRY_STALE, ODOMETRY_INSUFFICIENT,
    IMAGE_MALFORMED, ODOMETRY_MALFORMED,
})


class InputError(Exception):
    """The inputs for one tick cannot make a valid model input; the tick is skipped, not fatal."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in REASONS:
            raise ValueError(f'unknown InputError reason {reason!r}; use one of {sorted(REASONS)}')
        super().__init__(f'{reason}: {message}')
        self.reason = reason
        self.message = message
