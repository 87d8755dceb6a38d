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


class UnsupportedConfigError(ConfigError, CheckpointError):
    """A checkpoint's config holds a field this implementation cannot honour.

    Either a value outside what it supports, or a field it does not know (which could change the
    model's numbers). `field` is the field's path, e.g. `config.json: diffusion_cfg.int_method`;
    `value` what the file holds; `supported` what would be accepted. A `ConfigError` and a
    `CheckpointError` both, so callers catching either still catch it.
    """

    def __init__(self, field: str, value: object, supported: str) -> None:
        self.field, self.value, self.supported = field, value, supported
        super().__init__(f"{field} = {value!r} is not supported: {supported}")


class HostMemoryError(ModelError, MemoryError):
    """The machine's available host RAM cannot hold the model's weights (both numbers named)."""
