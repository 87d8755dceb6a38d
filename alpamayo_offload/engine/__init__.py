"""The one place that connects the Alpamayo model to the offload runtime.

The model reports its passes through the `PhaseObserver` protocol; the engine turns each report
into a runtime hint (which layer sequence runs next, so its first layer is already in flight)
and a timing mark. Node, replay, profiler and CLI all run inference through `Engine.infer`.

Modules: `config` (errors, `EngineConfig`, `EngineResult`), `info` (`PlanState`, `EngineInfo`),
`phases` (`PhaseClock`, the runtime hint bridge), `core` (`Engine`), `loading` (model and
checkpoint loading), `estimates` (VRAM estimates), `identity` (model and driver identity),
`example` (a fixed example input).
"""
from __future__ import annotations

from .config import (
    EMBED_MODULE,
    SEQUENCE_PREFIXES,
    AnswerResult,
    EngineBudgetError,
    EngineConfig,
    EngineError,
    EngineInputError,
    EngineResult,
    ModelInputLike,
)
from .core import Engine
from .estimates import estimate_prompt_tokens, estimate_working_set
from .example import example_input
from .info import EngineInfo, PlanState
from .phases import STAGES, PhaseClock

__all__ = [
    'EMBED_MODULE',
    'AnswerResult',
    'SEQUENCE_PREFIXES',
    'STAGES',
    'Engine',
    'EngineBudgetError',
    'EngineConfig',
    'EngineError',
    'EngineInfo',
    'EngineInputError',
    'EngineResult',
    'ModelInputLike',
    'PhaseClock',
    'PlanState',
    'estimate_prompt_tokens',
    'estimate_working_set',
    'example_input',
]
