"""Profile data model, residency planner and latency predictor (pure; no torch, no CUDA).

The node and engine import the small helpers from here: `resident_from_param` /
`resident_to_param` (the `[-1]` = none convention of `resident_layers.*`), `read_plan_params`,
and `parse_budget` ("12GiB", "free-2GiB", "0.8free").
"""
from __future__ import annotations

from alpamayo_offload.planning.errors import (
    BudgetError,
    PlanFileError,
    PlanningError,
    ProfileFormatError,
    StaleProfileError,
)
from alpamayo_offload.planning.params import (
    NO_LAYERS,
    PARAM_KEYS,
    PlanParams,
    read_plan_params,
    resident_from_param,
    resident_to_param,
    write_plan_params,
)
from alpamayo_offload.planning.planner import PlannerOptions, PlanResult, minimum_budget, plan
from alpamayo_offload.planning.predictor import Pipeline, Placement, Prediction, Workload, predict
from alpamayo_offload.planning.profile import Profile, check_profile, load_profile, save_profile
from alpamayo_offload.planning.units import format_bytes, parse_budget, parse_bytes

__all__ = [
    'NO_LAYERS', 'PARAM_KEYS', 'BudgetError', 'PlanFileError', 'PlanParams', 'PlanResult',
    'PlannerOptions', 'PlanningError', 'Pipeline', 'Placement', 'Prediction', 'Profile',
    'ProfileFormatError', 'StaleProfileError', 'Workload', 'check_profile', 'format_bytes',
    'load_profile', 'minimum_budget', 'parse_budget', 'parse_bytes', 'plan', 'predict',
    'read_plan_params', 'resident_from_param', 'resident_to_param', 'save_profile',
    'write_plan_params',
]
