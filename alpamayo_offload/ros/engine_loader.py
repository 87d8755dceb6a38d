"""Build the engine the node runs: torch threads, the VRAM budget resolved now, the plan checked.

Runs in the node's load thread (never at import): it is the only place the node touches torch
and CUDA before the first inference.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .params import NodeConfig
from .vram import resolve_budget

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedEngine:
    """The engine and what start-up decided, for diagnostics."""

    engine: Any                 # engine.Engine (imported lazily: torch is heavy)
    report: dict[str, Any]      # budget spec, free VRAM at start, resolved budget, threads
    warning: str                # '' unless the configured plan had to change


def load_engine(cfg: NodeConfig) -> LoadedEngine:
    """Set torch's threads, resolve `vram_budget` on the device and load the model."""
    import torch

    from ..engine import Engine, EngineConfig

    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    budget = resolve_budget(cfg.vram_budget, cfg.engine['device'])
    report: dict[str, Any] = {
        'vram_budget': budget.spec or 'none',
        'vram_budget_resolved_bytes': budget.budget_bytes or 0,
        'vram_free_at_start_bytes': budget.free_bytes or 0,
        'inference_threads': torch.get_num_threads(),
    }
    engine = Engine.from_config(EngineConfig(**cfg.engine, budget_bytes=budget.budget_bytes))
    return LoadedEngine(engine, report, '')
