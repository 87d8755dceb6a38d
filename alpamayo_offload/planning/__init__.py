"""Profile data model, latency predictor, residency planner and plan files (stdlib and yaml only).

Everything here works on numbers already measured, so it runs on any machine, without torch or
a GPU: `Profile` (what `alpamayo-offload profile` measured, read and written as JSON),
`predict` (a replay of the copy, compute and host engines for one placement), `plan` (the
placement with the lowest predicted latency within a VRAM budget), the residency parameter
file (`read_plan_params` / `write_plan_params`, with the `[-1]` = none convention of
`resident_layers.*`), byte and budget units (`parse_budget`: "12GiB", "free-2GiB", "0.8free")
and `model_identity`, which ties a profile to its model. Measuring a profile needs the engine
and lives in `alpamayo_offload.profiling`.
"""
from __future__ import annotations

from alpamayo_offload.planning.errors import (
    BudgetError,
    PlanFileError,
    PlanningError,
    ProfileFormatError,
    StaleProfileError,
    WorkloadError,
)
from alpamayo_offload.planning.identity import model_identity
from alpamayo_offload.planning.params import (
    COMPRESSION_KEYS,
    NO_LAYERS,
    PARAM_KEYS,
    PREDICTED_STAGES,
    PREDICTION_KEYS,
    PlanParams,
    read_plan_params,
    resident_from_param,
    resident_to_param,
    write_plan_params,
)
from alpamayo_offload.planning.planner import PlannerOptions, PlanResult, minimum_budget, plan
from alpamayo_offload.planning.predictor import Pipeline, Placement, Prediction, Workload, predict
from alpamayo_offload.planning.profile import (
    Profile,
    ProfiledWorkload,
    check_profile,
    load_profile,
    save_profile,
)
from alpamayo_offload.planning.units import format_bytes, parse_budget, parse_bytes

__all__ = [
    'COMPRESSION_KEYS', 'NO_LAYERS', 'PARAM_KEYS', 'PREDICTED_STAGES', 'PREDICTION_KEYS',
    'BudgetError', 'PlanFileError', 'PlanParams',
    'PlanResult',
    'PlannerOptions', 'PlanningError', 'Pipeline', 'Placement', 'Prediction', 'Profile',
    'ProfileFormatError', 'ProfiledWorkload', 'StaleProfileError', 'Workload', 'WorkloadError',
    'check_profile', 'format_bytes', 'load_profile', 'minimum_budget', 'model_identity',
    'parse_budget', 'parse_bytes', 'plan', 'predict', 'read_plan_params', 'resident_from_param',
    'resident_to_param', 'save_profile', 'write_plan_params',
]
