"""Optional per-layer timing: timestamps apart from the event protocol, and the stats they yield.

When instrumentation is off no clock exists and the hot path records nothing. When on, CUDA
timing events (or ``perf_counter_ns`` on CPU) mark copy start/end on the copy stream and
wait/start/end on the compute stream; :meth:`CallLog.resolve` turns them into milliseconds.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


class Clock:
    """Timestamps on a stream: CUDA timing events, or host nanoseconds without CUDA."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def mark(self, stream: Any) -> Any:
        """Take a timestamp for when ``stream`` reaches this point."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(stream)
            return event
        return time.perf_counter_ns()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two marks (the work before them must have finished)."""
        if start is None or end is None:
            return 0.0
        if self.cuda:
            return float(start.elapsed_time(end))
        return (end - start) / 1e6


@dataclass(frozen=True)
class LayerCallStats:
    """One call of one layer: copy, wait and compute time, and bytes copied for it."""

    sequence: str
    layer: int
    repetition: int
    dma_ms: float
    exe_ms: float
    stall_ms: float
    bytes: int
    streamed: bool


@dataclass(frozen=True)
class SequenceTotals:
    """Sums over every recorded call of one sequence."""

    sequence: str
    calls: int
    repetitions: int
    dma_ms: float
    exe_ms: float
    stall_ms: float
    bytes: int


@dataclass(frozen=True)
class RuntimeStats:
    """Everything the profiler needs from one stretch of runs (since attach or reset_stats)."""

    calls: tuple[LayerCallStats, ...]
    totals: tuple[SequenceTotals, ...]
    copies: int
    wasted_copies: int
    wasted_bytes: int
    pinned_bytes: int
    host_bytes: int
    streamed_param_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), **kwargs)


@dataclass
class CallMarks:
    """Raw timestamps of one layer call, resolved into :class:`LayerCallStats` later."""

    sequence: str
    layer: int
    repetition: int
    streamed: bool
    nbytes: int = 0
    dma: tuple[Any, Any] | None = None
    wait: tuple[Any, Any] | None = None
    start: Any = None
    end: Any = None


@dataclass
class CallLog:
    """Calls recorded since the last reset."""

    clock: Clock
    calls: list[CallMarks] = field(default_factory=list)

    def resolve(self) -> list[LayerCallStats]:
        """Turn marks into milliseconds (the device must have finished the recorded work)."""
        out = []
        ms = self.clock.elapsed_ms
        for c in self.calls:
            dma = ms(*c.dma) if c.dma else 0.0
            stall = ms(*c.wait) if c.wait else 0.0
            out.append(LayerCallStats(c.sequence, c.layer, c.repetition, dma,
                                      ms(c.start, c.end), stall, c.nbytes, c.streamed))
        return out


def totals(calls: list[LayerCallStats]) -> tuple[SequenceTotals, ...]:
    """Per-sequence sums, in order of first appearance."""
    order: dict[str, list[LayerCallStats]] = {}
    for c in calls:
        order.setdefault(c.sequence, []).append(c)
    return tuple(
        SequenceTotals(
            sequence=name,
            calls=len(group),
            repetitions=len({c.repetition for c in group}),
            dma_ms=sum(c.dma_ms for c in group),
            exe_ms=sum(c.exe_ms for c in group),
            stall_ms=sum(c.stall_ms for c in group),
            bytes=sum(c.bytes for c in group),
        )
        for name, group in order.items()
    )
