"""Typed errors of the model package; each message names the bad value and the fix."""
from __future__ import annotations


class ModelError(Exception):
    """Base class of every error raised by `alpamayo_offload.model`."""


class ConfigError(ModelError, ValueError):
    """A model configuration (preset, config.json, vlm_config.json) is invalid or unknown."""


class CheckpointError(ModelError):
    """A checkpoint directory is unknown, truncated, corrupt or does not match the model."""


class ModelInputError(ModelError, ValueError):
    """Raw inputs (frames, ego history, token ids) have the wrong shape, type or values."""
