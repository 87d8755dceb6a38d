"""Phase observer: how inference tells an outside engine which pass runs next.

The model never imports the runtime; the engine passes an object with these two methods and
translates them into runtime hints. `is_last` is decided before the pass runs, so the engine can
announce the next layer sequence while the current one still executes.
"""
from __future__ import annotations

from typing import Protocol

PHASES = ("vision", "prefill", "decode", "diffusion")


class PhaseObserver(Protocol):
    """Receives the boundaries of every forward pass of one inference."""

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Handle the start of pass `index` of `phase`; `is_last`: no further pass follows."""

    def phase_end(self, phase: str, index: int) -> None:
        """Handle the end of pass `index` of `phase` has been issued."""


class NullObserver:
    """The default observer: ignores every boundary."""

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Ignore the start of a pass."""

    def phase_end(self, phase: str, index: int) -> None:
        """Ignore the end of a pass."""
