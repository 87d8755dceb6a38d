"""Timing the model's passes and turning each phase report into a runtime hint.

The model reports its passes through the `PhaseObserver` protocol; `PhaseClock` times them (and
is reused by the benchmarks), `_PhaseBridge` also tells the runtime which sequence runs next.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from ..runtime import OffloadRuntime

STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'postprocess', 'total')
# After a pass of this phase, which sequence runs next; the last decode and diffusion passes
# hand over to another sequence (vision and prefill run one pass, reported as the last).
# Navigation guidance adds two 'unguided' language-model passes between decode and diffusion.
_NEXT_AFTER = {'vision': 'lm', 'prefill': 'lm', 'decode': 'lm', 'diffusion': 'expert',
               'unguided': 'lm'}
_NEXT_AFTER_LAST = {**_NEXT_AFTER, 'decode': 'expert', 'diffusion': 'vit', 'unguided': 'expert'}


class PhaseClock:
    """PhaseObserver that times each pass (CUDA events on a GPU, else perf_counter).

    Nothing synchronises until `seconds()`. Benchmarks that run the model under other
    offloaders use it too, so every runtime is timed at the same phase boundaries.
    """

    def __init__(self, cuda: bool) -> None:
        self._cuda = cuda
        self.marks: list[tuple[str, Any, Any]] = []
        self.passes: dict[str, int] = {}
        self._open: tuple[str, Any] | None = None

    def _now(self) -> Any:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Start the clock of the pass."""
        self._open = (phase, self._now())

    def phase_end(self, phase: str, index: int) -> None:
        """Close the clock of the pass."""
        if self._open is None or self._open[0] != phase:
            return
        self.marks.append((phase, self._open[1], self._now()))
        self.passes[phase] = self.passes.get(phase, 0) + 1
        self._open = None

    def pass_seconds(self) -> list[tuple[str, float]]:
        """Each pass's phase and seconds, in the order they ran (synchronises on CUDA)."""
        out = []
        for phase, start, end in self.marks:
            if self._cuda:
                end.synchronize()
                dt = start.elapsed_time(end) / 1000.0
            else:
                dt = end - start
            out.append((phase, dt))
        return out

    def seconds(self) -> dict[str, float]:
        """Seconds per phase, summed over passes (synchronises on CUDA)."""
        out: dict[str, float] = {}
        for phase, dt in self.pass_seconds():
            out[phase] = out.get(phase, 0.0) + dt
        return out


class _PhaseBridge(PhaseClock):
    """PhaseClock that also tells the runtime which sequence follows each pass."""

    def __init__(self, runtime: OffloadRuntime | None, cuda: bool, token_budget: int,
                 after_decode: str = 'expert') -> None:
        super().__init__(cuda)
        self._runtime = runtime
        self._token_budget = token_budget
        # What follows the last decode pass: the expert, the unguided passes ('lm', navigation
        # guidance) or the next inference's ViT (question answering, no expert).
        self._after_decode = after_decode

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Tell the runtime what follows this pass, then start its clock."""
        if self._runtime is not None:
            nxt = _NEXT_AFTER_LAST.get(phase) if is_last else _NEXT_AFTER.get(phase)
            if phase == 'decode' and is_last:
                nxt = self._after_decode
            if phase == 'prefill' and self._token_budget <= 1:
                nxt = self._after_decode   # no decode pass follows the prefill
            if nxt is not None:
                self._runtime.hint_next(nxt)
        super().phase_start(phase, index, is_last)
