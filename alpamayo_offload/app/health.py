"""Health figures the node reports without ROS: stage timings, rates, ages, stages against plan.

The conventions follow ROS's `diagnostic_updater` (not installable from PyPI): a frequency is
measured over the last few diagnostics periods (`FrequencyStatus`: events counted at each
publication, rate = events over the window / its duration), and judged against an expected rate
with a tolerance; input age is the time since the newest message's header stamp
(`TimeStampStatus`). Every method takes the time it needs as an argument, so the figures are
testable with made-up clocks.
"""
from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..planning import PREDICTED_STAGES

OK, WARN, ERROR = 0, 1, 2   # DiagnosticStatus levels


class RollingWindow:
    """The last `size` values of one figure: last, median and 90th percentile."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f'window size {size} must be at least 1')
        self._values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        """Record one value (non-finite values are skipped: a stage that did not run)."""
        if math.isfinite(value):
            self._values.append(value)

    def summary(self) -> tuple[float, float, float]:
        """(last, p50, p90); nan while empty. Percentiles by nearest rank."""
        if not self._values:
            return (math.nan,) * 3
        ordered = sorted(self._values)
        return self._values[-1], _rank(ordered, 0.5), _rank(ordered, 0.9)

    def __len__(self) -> int:
        return len(self._values)


def _rank(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class StageTimings:
    """A `RollingWindow` per stage key, summarised as `<key>.last`, `.p50`, `.p90`."""

    def __init__(self, keys: Iterable[str], size: int) -> None:
        self._windows = {k: RollingWindow(size) for k in keys}
        self._size = size
        self._added = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """How many inferences the windows hold (at most the window size)."""
        return min(self._added, self._size)

    def add(self, values: Mapping[str, float]) -> None:
        """Record one inference's stage values (keys outside the tracked set are ignored)."""
        with self._lock:
            self._added += 1
            self._add(values)

    def _add(self, values: Mapping[str, float]) -> None:
        for key, window in self._windows.items():
            if key in values:
                window.add(float(values[key]))

    def summary(self) -> dict[str, float]:
        """Flat `{key.last, key.p50, key.p90}` of every tracked stage."""
        out: dict[str, float] = {}
        with self._lock:
            summaries = {key: window.summary() for key, window in self._windows.items()}
        for key, (last, p50, p90) in summaries.items():
            out |= {f'{key}.last': last, f'{key}.p50': p50, f'{key}.p90': p90}
        return out


@dataclass(frozen=True)
class Rate:
    """A rate measured over a window of diagnostics periods."""

    hz: float            # nan until two samples span some time
    events_in_window: int
    window_s: float
    total: int


class EventRate:
    """Counts events (from any thread); `sample` at each diagnostics period gives the rate.

    Like `diagnostic_updater.FrequencyStatus`: the window is the last `window` samples, so a
    stream that stops reaches 0 Hz within `window` periods.
    """

    def __init__(self, window: int = 5) -> None:
        self._count = 0
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque(maxlen=window + 1)

    def event(self) -> None:
        """Count one event."""
        with self._lock:
            self._count += 1

    def reset_window(self) -> None:
        """Forget past samples (the stream restarts, e.g. on activation); keep the total."""
        with self._lock:
            self._samples.clear()

    def sample(self, now_s: float) -> Rate:
        """Record the count at `now_s` (monotonic seconds) and return the rate over the window."""
        with self._lock:
            count = self._count
            self._samples.append((now_s, count))
            t_first, c_first = self._samples[0]
        span = now_s - t_first
        events = count - c_first
        return Rate(events / span if span > 0 else math.nan, events, span, count)


REFUSAL_HOLD_S = 5.0   # a refused input stays in the input status this long after the last one


@dataclass(frozen=True)
class HeldRefusals:
    """The refusals of the hold window: the last one, and how many there were per reason."""

    reason: str                  # the last refusal's
    message: str                 # the last refusal's
    counts: Mapping[str, int]    # reason -> refusals in the window, most frequent first
    hold_s: float


class RefusalWindow:
    """Refused inputs of the last `hold_s` seconds, so one stays visible between good ones.

    The node reports one input status; a refused message (one that does not parse) or an input
    evaluation refused for broken data (`image_corrupt`, `odometry_nonfinite`, ...) would be
    overwritten by the next good evaluation, and a camera that sends a bad frame now and then
    would make the status flip between the refusal and OK. `held` returns the refusals until
    `hold_s` passes with none. Not thread-safe: the node keeps it under its status lock. Memory
    is one entry per refusal of the window (pruned at each call).
    """

    def __init__(self, hold_s: float = REFUSAL_HOLD_S) -> None:
        if hold_s <= 0:
            raise ValueError(f'hold_s = {hold_s}; must be > 0')
        self.hold_s = hold_s
        self._times: deque[tuple[float, str]] = deque()   # (monotonic s, reason), oldest first
        self._last = ('', '')

    def record(self, reason: str, message: str, now_s: float) -> None:
        """Count a refusal with its reason code and message at `now_s` (monotonic seconds)."""
        self._times.append((now_s, reason))
        self._last = (reason, message)
        self._prune(now_s)

    def held(self, now_s: float) -> HeldRefusals | None:
        """Return the refusals of the `hold_s` seconds before `now_s`; None when there were none."""
        self._prune(now_s)
        if not self._times:
            return None
        counts: dict[str, int] = {}
        for _, reason in self._times:
            counts[reason] = counts.get(reason, 0) + 1
        ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return HeldRefusals(*self._last, ordered, self.hold_s)

    def _prune(self, now_s: float) -> None:
        while self._times and self._times[0][0] <= now_s - self.hold_s:
            self._times.popleft()


def judge_rate(rate: Rate, expected_hz: float, tolerance: float) -> tuple[int, str]:
    """Level and message of a measured rate against `expected_hz` +- `tolerance` (a fraction).

    As `diagnostic_updater.FrequencyStatus`: no events in the window is an error, a rate outside
    the band a warning; nan (a window spanning no time yet) is a warning.
    """
    if rate.window_s > 0 and rate.events_in_window == 0:
        return ERROR, 'no events recorded in the window'
    if math.isnan(rate.hz):
        return WARN, 'measuring'
    if rate.hz < expected_hz * (1.0 - tolerance):
        return WARN, f'frequency too low ({rate.hz:.2f} Hz, expected {expected_hz:.2f} Hz)'
    if rate.hz > expected_hz * (1.0 + tolerance):
        return WARN, f'frequency too high ({rate.hz:.2f} Hz, expected {expected_hz:.2f} Hz)'
    return OK, 'desired frequency met'


class StreamMonitor:
    """Per input stream: newest header stamp and receive rate (thread-safe).

    Streams are named by the caller (`camera_0`, `odometry`); `received` is called from the
    subscription callbacks, `report` from the diagnostics timer.
    """

    def __init__(self, names: Iterable[str], window: int = 5) -> None:
        self._newest: dict[str, int | None] = dict.fromkeys(names)
        self._rates = {n: EventRate(window) for n in self._newest}
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        """The stream names, in the order given."""
        return tuple(self._newest)

    def received(self, name: str, stamp_ns: int) -> None:
        """Count one message of `name` and keep its stamp if it is the newest."""
        self._rates[name].event()
        with self._lock:
            newest = self._newest[name]
            if newest is None or stamp_ns > newest:
                self._newest[name] = stamp_ns

    def restart(self) -> None:
        """Start the rate windows again (subscriptions were just created)."""
        for rate in self._rates.values():
            rate.reset_window()

    def ages_s(self, now_ns: int) -> dict[str, float]:
        """Seconds from each stream's newest stamp to `now_ns` (nan: nothing received)."""
        with self._lock:
            return {n: math.nan if s is None else (now_ns - s) / 1e9
                    for n, s in self._newest.items()}

    def rates(self, now_s: float) -> dict[str, Rate]:
        """Each stream's receive rate over the window ending at `now_s` (monotonic seconds)."""
        return {n: r.sample(now_s) for n, r in self._rates.items()}


def judge_ages(ages_s: Mapping[str, float], max_age_s: float) -> tuple[int, str]:
    """WARN naming the streams never received or older than `max_age_s`; else OK."""
    missing = [n for n, a in ages_s.items() if math.isnan(a)]
    stale = [f'{n} {a:.2f} s' for n, a in ages_s.items() if not math.isnan(a) and a > max_age_s]
    problems = ([f'never received: {", ".join(missing)}'] if missing else []) + \
        ([f'older than {max_age_s:g} s: {", ".join(stale)}'] if stale else [])
    return (WARN, '; '.join(problems)) if problems else (OK, 'inputs fresh')


def judge_stream_rates(rates: Mapping[str, Rate]) -> tuple[int, str]:
    """WARN naming the streams with no message in the window (losses show as low rates)."""
    silent = [n for n, r in rates.items() if r.window_s > 0 and r.events_in_window == 0]
    if silent:
        return WARN, f'nothing received in the last {max(r.window_s for r in rates.values()):.1f}' \
            f' s on: {", ".join(silent)}'
    return OK, 'receiving'


# The node's stage keys (per inference) that make each predicted stage.
_MEASURED_KEYS = {'vision': ('t_vision_ms',), 'prefill': ('t_prefill_ms',),
                  'decode': ('t_decode_ms',), 'diffusion': ('t_diffusion_ms',),
                  'host': ('t_preprocess_ms', 't_postprocess_ms'),
                  'total': ('t_engine_total_ms',)}
_PREDICTED_PREFIX = 'plan.predicted_ms.'


class PlanMonitor:
    """Each stage's median over the last `window` inferences against the plan's prediction.

    A stage whose median runs more than `tolerance` (a fraction) over its prediction for a
    whole window is reported, with the CPU the prediction assumed: on a vehicle that is most
    often the engine's host thread starved of CPU by other work. Thread-safe.
    """

    def __init__(self, predicted_ms: Mapping[str, float], window: int, tolerance: float,
                 cpu_budget: str = '') -> None:
        if tolerance <= 0:
            raise ValueError(f'tolerance {tolerance} must be > 0')
        self._predicted = {s: float(predicted_ms[s]) for s in PREDICTED_STAGES
                           if s in predicted_ms and float(predicted_ms[s]) > 0}
        self._window = window
        self._tolerance = tolerance
        self._cpu_budget = cpu_budget
        self._windows = {s: RollingWindow(window) for s in self._predicted}
        self._lock = threading.Lock()

    @classmethod
    def from_plan_info(cls, plan_info: Mapping[str, Any], window: int,
                       tolerance: float) -> PlanMonitor:
        """Read `plan.predicted_ms.<stage>` and `plan.cpu_budget` of a plan file's keys."""
        predicted = {}
        for stage in PREDICTED_STAGES:
            value = plan_info.get(_PREDICTED_PREFIX + stage)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                predicted[stage] = float(value)
        return cls(predicted, window, tolerance, str(plan_info.get('plan.cpu_budget', '')))

    def add(self, stages: Mapping[str, float]) -> None:
        """Record one inference's node stage values (`t_vision_ms`, ...; missing: skipped)."""
        with self._lock:
            for stage, window in self._windows.items():
                keys = _MEASURED_KEYS[stage]
                if all(k in stages for k in keys):
                    window.add(sum(float(stages[k]) for k in keys))

    def judge(self) -> tuple[int, str, dict[str, Any]]:
        """Level, message and per-stage values (predicted, median, fraction over)."""
        if not self._predicted:
            return OK, ('no per-stage prediction to compare with (no plan file with '
                        'plan.predicted_ms; write one with `alpamayo-offload plan`)'), {}
        with self._lock:
            medians = {s: (w.summary()[1], len(w)) for s, w in self._windows.items()}
        values: dict[str, Any] = {'window': self._window, 'tolerance': self._tolerance,
                                  'cpu_budget': self._cpu_budget}
        over = []
        for stage, predicted in self._predicted.items():
            median, count = medians[stage]
            excess = median / predicted - 1.0 if count else math.nan
            values |= {f'{stage}.predicted_ms': predicted, f'{stage}.p50_ms': median,
                       f'{stage}.over': excess}
            if count >= self._window and excess > self._tolerance:
                over.append(f'{stage} {median:.1f} ms against {predicted:.1f} ({excess:+.0%})')
        counted = min(n for _, n in medians.values())
        if over:
            return WARN, (f'over the plan by more than {self._tolerance:.0%} (median of the last '
                          f'{self._window} inferences): {"; ".join(over)}; too little CPU for '
                          f'the engine? The plan assumes {self._cpu_budget or "the profiled CPU"}'
                          ), values
        if counted < self._window:
            return OK, f'measuring: {counted} of {self._window} inferences', values
        return OK, (f'every stage within {self._tolerance:.0%} of the plan (median of the last '
                    f'{self._window} inferences)'), values
