"""Errors of the application layer."""
from __future__ import annotations


class ParameterError(ValueError):
    """A parameter value the node cannot run with; the message names the parameter and the fix."""
