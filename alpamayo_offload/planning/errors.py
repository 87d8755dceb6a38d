"""Typed errors of the planning package; every message names the value and the fix."""
from __future__ import annotations


class PlanningError(Exception):
    """Base class: anything the profiler, planner or predictor refuses."""


class ProfileFormatError(PlanningError):
    """A profile file is unreadable, from another schema version, or inconsistent."""


class StaleProfileError(PlanningError):
    """A profile was measured on another GPU or for another model than the one in use."""


class BudgetError(PlanningError):
    """A VRAM budget is malformed or below the minimum the runtime needs."""


class PlanFileError(PlanningError):
    """A residency parameter file lacks a key or holds a value of the wrong type."""


class WorkloadError(PlanningError):
    """A workload (samples, guidance, cameras) other than the one the profile or plan was for."""
