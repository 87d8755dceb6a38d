"""What model and driver an engine runs, as `Engine.info` reports them."""
from __future__ import annotations

from pathlib import Path

import torch

from ..model import AlpamayoR1
from .config import EngineConfig


def _model_identity(config: EngineConfig, model: AlpamayoR1) -> str:
    n = sum(p.numel() for p in model.parameters())
    kind = 'checkpoint' if Path(config.model).is_dir() else f'preset seed={config.seed}'
    return f'alpamayo_r1 {config.model} ({kind}, {n} parameters)'


def _driver_version() -> str:
    try:
        return str(torch.cuda.driver_version())  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return ''
