"""Time one runtime row: a deterministic correctness pass, warm-up, then timed runs.

The first pass of every row runs with deterministic algorithms on and is compared with the
preload reference (max absolute difference of the trajectory, or of the logits for the LLM);
it doubles as the row's warm-up and is never timed. Timed runs use the default mode, or strict
deterministic mode with `deterministic_timing` (strict mode costs time, a few per cent on the
H200; docs/benchmarks.md).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch

from .home import caching_pinned_bytes, reset_rss_peak, rss_bytes, rss_peak_bytes

T = TypeVar('T')


@dataclass
class RunOutput:
    """One inference: what it produced (host arrays) and how long each part took."""

    arrays: dict[str, np.ndarray]
    timings: dict[str, float]
    e2e_s: float = 0.0


@dataclass
class Deadline:
    """The wall-clock budget of the whole benchmark."""

    budget_s: float
    start: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        """Seconds since the benchmark started."""
        return time.perf_counter() - self.start

    def allows(self, seconds: float) -> bool:
        """Whether `seconds` more work still ends within the budget."""
        return self.elapsed() + seconds <= self.budget_s


def synchronize() -> None:
    """Wait for the GPU (no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(infer: Callable[[], RunOutput]) -> RunOutput:
    """Run one inference between two device synchronisations and set its wall time."""
    synchronize()
    start = time.perf_counter()
    out = infer()
    synchronize()
    out.e2e_s = time.perf_counter() - start
    return out


def max_abs_diff(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """Largest absolute difference over every array two runs share (inf on a shape mismatch)."""
    worst = 0.0
    for key in sorted(set(a) & set(b)):
        x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
        if x.shape != y.shape:
            return float('inf')
        if x.size:
            worst = max(worst, float(np.max(np.abs(x - y))))
    return worst


def deterministic(run: Callable[[], T]) -> T:
    """Call `run` with deterministic algorithms on, and off again afterwards.

    Strict mode, never `warn_only=True`: with warn_only PyTorch still selects cuDNN attention and
    split-key memory-efficient attention, which are not run-to-run deterministic (measured on the
    H200: two preload runs 0.7 m apart). An op without a deterministic kernel fails the row.
    """
    torch.use_deterministic_algorithms(True)
    try:
        return run()
    finally:
        torch.use_deterministic_algorithms(False)


def measure(infer: Callable[[], RunOutput], *, warmup: int, runs: int, deadline: Deadline,
            reference: RunOutput | None, reference_timed: RunOutput | None,
            deterministic_timing: bool = False, timed_optional: bool = False
            ) -> tuple[dict[str, object], RunOutput, RunOutput]:
    """Correctness pass, `warmup` warm-ups, then up to `runs` timed runs.

    Stops timing early (after at least one run) when the next run would overrun the deadline.
    With `timed_optional` (rows of minutes an inference) not even one timed run is forced:
    when it would overrun, the deterministic pass is the row's only run and its time the row's
    figure (`timing_mode` 'deterministic pass').
    Returns the row's figures, the deterministic output and the last timed output.
    """
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    peak_reset = reset_rss_peak()
    det = deterministic(lambda: timed(infer))

    def timed_run() -> RunOutput:
        return deterministic(lambda: timed(infer)) if deterministic_timing else timed(infer)

    for _ in range(warmup):
        timed_run()
    outs: list[RunOutput] = []
    cut = False
    while len(outs) < runs:
        longest = max(o.e2e_s for o in outs) if outs else det.e2e_s
        if (outs or timed_optional) and not deadline.allows(longest):
            cut = True
            break
        outs.append(timed_run())
    mode = 'deterministic' if deterministic_timing else 'default'
    if not outs:
        outs, mode = [det], 'deterministic pass'
    totals = [o.e2e_s for o in outs]
    phases = sorted({k for o in outs for k in o.timings})
    row: dict[str, object] = {
        'e2e_s': statistics.median(totals),
        'runs_s': totals,
        'deterministic_pass_s': det.e2e_s,
        'timing_mode': mode,
        'phases_s': {k: statistics.median(o.timings.get(k, 0.0) for o in outs) for k in phases},
        'timed_runs': 0 if mode == 'deterministic pass' else len(outs),
        'warmup_runs': 1 + warmup,
        'runs_cut_by_budget': cut,
        'max_abs_diff': None if reference is None else max_abs_diff(det.arrays, reference.arrays),
        'max_abs_diff_default_mode': None if reference_timed is None
        else max_abs_diff(outs[-1].arrays, reference_timed.arrays),
        'rss_bytes': rss_bytes(),
        'rss_peak_bytes': rss_peak_bytes() if peak_reset else None,
        'caching_pinned_bytes': caching_pinned_bytes(),
    }
    if torch.cuda.is_available():
        row['peak_reserved_bytes'] = torch.cuda.max_memory_reserved()
        row['peak_allocated_bytes'] = torch.cuda.max_memory_allocated()
    return row, det, outs[-1]
