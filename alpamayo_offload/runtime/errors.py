"""Typed errors of the offload runtime; each message names the offending value and the fix."""
from __future__ import annotations


class OffloadError(Exception):
    """Base class of every error the runtime raises on purpose."""


class PlanError(OffloadError, ValueError):
    """The residency plan does not match the layer sequences (unknown name, index out of range)."""


class BudgetError(OffloadError):
    """The plan needs more VRAM than the budget allows."""


class LayerError(OffloadError):
    """A layer cannot be offloaded as given (tied weights, wrong device, unsupported tensor)."""


class SourceError(OffloadError):
    """A tensor source lacks a tensor or holds one of another shape or dtype."""


class HostMemoryError(OffloadError):
    """Page-locking host memory failed (e.g. a memlock limit)."""


class StateError(OffloadError):
    """A method was called in the wrong lifecycle state (attach twice, stats unattached)."""
