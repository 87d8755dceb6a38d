"""`/diagnostics` content, `diagnostic_updater` style: one status per task, each with hardware_id.

Statuses (named `<node>: <task>`): `model` (lifecycle state, load result, plan in force, memory),
`inference` (can a path be produced now, and the last inference's stages), `input` (the last
input evaluation's reason; a refusal for broken data stays for `app.health.REFUSAL_HOLD_S`
after the last one, with counts per reason), `path rate` (published paths per second against 1 /
inference.period_s), `input age` (per stream: time since the newest header stamp), `input rates`
(per stream receive rate, so DDS losses show), `timing` (per stage: last, p50, p90 over a
window), `navigation` (the route text now and the one the last inference used), `questions`
(question answering: counts, the last outcome and its reason), `plan` (each stage's median
against the plan file's prediction, warning when one runs over it). The figures themselves are
kept ROS-free in `app/health.py`; the route rule in `app/route.py`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

from ..app.health import (
    ERROR,
    OK,
    WARN,
    Rate,
    RefusalWindow,
    judge_ages,
    judge_rate,
    judge_stream_rates,
)
from ..app.route import (
    ROUTE_CLEARED,
    ROUTE_FRESH,
    ROUTE_NONE,
    ROUTE_STALE,
    ROUTE_UNSUPPORTED,
    RouteChoice,
)
from ..assembly import WorkerFaults
from ..assembly import errors as input_errors
from .conversions import ns_to_time

if TYPE_CHECKING:
    from ..engine import EngineInfo

__all__ = ['ERROR', 'OK', 'WARN', 'NodeStatus', 'Snapshot', 'build', 'input_level']

# Stage keys always present in the inference status (nan until the first inference).
STAGE_KEYS = (
    't_image_decode_ms', 't_frame_decode_max_ms', 't_preprocess_ms', 't_vision_ms',
    't_prefill_ms', 't_decode_ms', 'decode_tokens', 't_diffusion_ms', 't_postprocess_ms',
    't_engine_total_ms', 't_path_build_ms', 't_total_ms', 't_node_overhead_ms',
    'input_age_ms', 'dma_ms', 'stall_ms', 'bytes_streamed',
)
# Stages the timing status summarises (last, p50, p90).
TIMED_KEYS = (
    't_image_decode_ms', 't_preprocess_ms', 't_vision_ms', 't_prefill_ms', 't_decode_ms',
    't_diffusion_ms', 't_postprocess_ms', 't_engine_total_ms', 't_node_overhead_ms',
    't_total_ms', 'input_age_ms',
)
# Reasons that mean broken data rather than timing; reported as ERROR, the rest as WARN.
_ERROR_REASONS = frozenset({
    input_errors.IMAGE_ENCODING, input_errors.IMAGE_STEP_INVALID, input_errors.IMAGE_TRUNCATED,
    input_errors.IMAGE_CORRUPT, input_errors.IMAGE_TOO_LARGE, input_errors.IMAGE_SIZE_MISMATCH,
    input_errors.ODOMETRY_NONFINITE, input_errors.CAMERA_STOPPED, input_errors.CAMERA_MISSING,
    input_errors.IMAGE_MALFORMED, input_errors.ODOMETRY_MALFORMED,
})
# Errors that describe the inputs' state now (a camera not there), not broken data: like the
# timing reasons, they are reported as they are and not held by the refusal window.
_STATE_ERROR_REASONS = frozenset({input_errors.CAMERA_STOPPED, input_errors.CAMERA_MISSING})
SKIP_IN_FLIGHT = 'inference_in_flight'
SKIP_NO_NEW_INPUT = 'no_new_input'  # t0 not newer than the last inference's
DECODE_SLOW = 'image_decode_slow'   # a warning, not a skip: the inference still runs


@dataclass
class NodeStatus:
    """Mutable status the node updates from its threads and publishes (only under its lock)."""

    lifecycle_state: str = 'unconfigured'
    model_state: str = 'unloaded'         # unloaded, loading, ready, degraded, error
    model_message: str = 'not configured'
    load_error: str = ''                  # why the last configure failed
    engine_info: EngineInfo | None = None   # while the model is loaded
    start_info: dict[str, Any] = field(default_factory=dict)   # what start-up resolved
    start_warning: str = ''          # why the configured plan was changed at start-up
    stages: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(STAGE_KEYS, float('nan')))
    last_t0_ns: int = 0
    ticks: int = 0
    ticks_dropped: int = 0
    inferences: int = 0
    input_errors: int = 0
    messages_refused: int = 0             # camera/odometry messages that did not parse
    engine_errors: int = 0
    last_skip_reason: str = ''
    input_level: int = OK
    input_message: str = 'no tick yet'
    input_reason: str = ''                # reason code of the reported evaluation; '' = valid
    input_serial: int = 0                 # which evaluation the input status reports
    refusals: RefusalWindow = field(default_factory=RefusalWindow)   # broken input, held
    inference_level: int = WARN           # outcome of the last evaluation while active
    inference_message: str = 'no inference yet'
    routes_received: int = 0
    route_used: RouteChoice = field(default_factory=lambda: RouteChoice(None, ROUTE_NONE))
    guided: bool = False                  # the last inference ran navigation guidance
    questions_received: int = 0
    questions_answered: int = 0
    questions_dropped: int = 0            # refused (empty) or pushed out of a full queue
    question_errors: int = 0
    question_level: int = OK
    question_message: str = 'no question yet'
    question_reason: str = ''             # reason code of the last refusal/failure; '' = none
    answer_stats: dict[str, float] = field(default_factory=lambda: {
        't_answer_ms': float('nan'), 'answer_tokens': float('nan')})

    def question_problem(self, level: int, reason: str, message: str) -> None:
        """Record a refused, dropped or failed question."""
        self.question_level, self.question_reason = level, reason
        self.question_message = f'{reason}: {message}'

    def report_input(self, serial: int, level: int, message: str, reason: str) -> None:
        """Record the outcome of input evaluation `serial` unless a newer one is reported.

        Selection (timer) and decoding (worker) finish out of order; without the serial a worker
        finishing late would overwrite a newer tick's error with 'inputs valid'.
        """
        if serial < self.input_serial:
            return
        self.input_serial = serial
        self.input_level, self.input_message, self.input_reason = level, message, reason

    def refused(self, level: int, message: str, reason: str, now_s: float) -> None:
        """Hold a refusal for broken data (ERROR, not a missing camera) in the input status."""
        if level >= ERROR and reason not in _STATE_ERROR_REASONS:
            self.refusals.record(reason, message, now_s)

    def no_path(self, level: int, reason: str) -> None:
        """Record that the last evaluation produced no path, and why."""
        self.inference_level, self.inference_message = level, f'no path: {reason}'


@dataclass(frozen=True)
class Snapshot:
    """What the diagnostics timer measured this period, besides the status."""

    hardware_id: str
    expected_path_hz: float
    rate_tolerance: float
    path_rate: Rate
    max_input_age_s: float
    input_ages_s: Mapping[str, float]
    input_rates: Mapping[str, Rate]
    timing: Mapping[str, float]       # `<stage>.last/.p50/.p90`
    timed_inferences: int             # inferences the timing covers
    gpu_memory: Mapping[str, int]
    plan_info: Mapping[str, Any]
    monotonic_s: float                # now, on the clock of `NodeStatus.refusals`
    route: RouteChoice = RouteChoice(None, ROUTE_NONE)   # the rule applied now
    navigation_max_age_s: float = 0.0
    questions_pending: int = 0
    plan_check: tuple[int, str, Mapping[str, Any]] | None = None   # `PlanMonitor.judge()`
    decode_worker_faults: WorkerFaults = WorkerFaults()   # and their restart back-off


def input_level(reason: str) -> int:
    """Diagnostic level for an input error reason."""
    return ERROR if reason in _ERROR_REASONS else WARN


def _kv(values: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_fmt(v)) for k, v in values.items()]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f'{v:.3f}'
    if isinstance(v, (list, tuple)):
        return ','.join(str(x) for x in v)
    return str(v)


def _engine_values(info: EngineInfo | None) -> dict[str, Any]:
    """Return the engine's part of the model status (empty fields while no model is loaded)."""
    if info is None:
        return {'model': '', 'model_family': '', 'device': '', 'gpu': '', 'vram_used_bytes': 0,
                'vram_budget_bytes': 0, 'vram_required_bytes': 0, 'pinned_bytes': 0,
                'embed_on_host': '', 'kernel_settings': ''}
    return {
        'model': info.model, 'model_family': info.model_family, 'device': info.device,
        'gpu': info.gpu,
        'vram_used_bytes': info.vram_used_bytes, 'vram_budget_bytes': info.budget_bytes or 0,
        'vram_required_bytes': info.required_bytes, 'pinned_bytes': info.pinned_bytes,
        'embed_on_host': info.embed_on_host,
        'kernel_settings': info.kernel_settings,   # what a plan's profile must match
        **{f'resident_layers.{k}': list(v) or 'none' for k, v in info.resident_layers.items()},
    }


def _model(st: NodeStatus, snap: Snapshot) -> tuple[int, str, dict[str, Any]]:
    level = {'ready': OK, 'loading': OK, 'unloaded': OK, 'degraded': WARN}.get(st.model_state,
                                                                              ERROR)
    values = {'lifecycle_state': st.lifecycle_state, 'model_state': st.model_state,
              'load_error': st.load_error, **_engine_values(st.engine_info),
              **snap.gpu_memory, **st.start_info, **snap.plan_info}
    return level, st.model_message or st.model_state, values


def _inference(st: NodeStatus) -> tuple[int, str]:
    """Never OK unless active and the last evaluation published a path."""
    if st.model_state == 'error':
        return ERROR, f'no path: model failed to load: {st.load_error}'
    if st.lifecycle_state != 'active':
        return WARN, f'no path: node {st.lifecycle_state}, not active'
    return st.inference_level, st.inference_message


def _rate_values(rate: Rate) -> dict[str, Any]:
    return {'frequency_hz': rate.hz, 'events_in_window': rate.events_in_window,
            'window_s': rate.window_s, 'events_total': rate.total}


def _path_rate(st: NodeStatus, snap: Snapshot) -> tuple[int, str, dict[str, Any]]:
    values = {**_rate_values(snap.path_rate), 'expected_hz': snap.expected_path_hz,
              'tolerance': snap.rate_tolerance}
    if st.lifecycle_state != 'active':
        return WARN, f'node {st.lifecycle_state}: no paths expected', values
    level, message = judge_rate(snap.path_rate, snap.expected_path_hz, snap.rate_tolerance)
    return level, message, values


def _streams(snap: Snapshot) -> tuple[tuple[int, str, dict[str, Any]],
                                      tuple[int, str, dict[str, Any]]]:
    ages = {f'{n}.age_s': 'never' if math.isnan(a) else a for n, a in snap.input_ages_s.items()}
    rates: dict[str, Any] = {}
    for n, r in snap.input_rates.items():
        rates |= {f'{n}.rate_hz': r.hz, f'{n}.received': r.total}
    return ((*judge_ages(snap.input_ages_s, snap.max_input_age_s),
             {**ages, 'max_input_age_s': snap.max_input_age_s}),
            (*judge_stream_rates(snap.input_rates), rates))


_ROUTE_LEVEL = {ROUTE_NONE: OK, ROUTE_FRESH: OK, ROUTE_CLEARED: OK, ROUTE_STALE: WARN,
                ROUTE_UNSUPPORTED: WARN}


def _route_message(route: RouteChoice, max_age_s: float) -> str:
    return {
        ROUTE_NONE: 'no route text received: inferences run without one',
        ROUTE_FRESH: f'route text in use ({route.age_s:.1f} s old)',
        ROUTE_CLEARED: 'route cleared (empty text): inferences run without one',
        ROUTE_STALE: f'route text stale: {route.age_s:.1f} s old > navigation.max_age_s '
                     f'{max_age_s:g}; inferences run without one',
        ROUTE_UNSUPPORTED: 'route text ignored: the model (Alpamayo-R1) takes none',
    }[route.state]


def _navigation(st: NodeStatus, snap: Snapshot) -> tuple[int, str, dict[str, Any]]:
    route = snap.route
    values = {'route_state': route.state, 'route_text': route.latest or '',
              'route_age_s': 'never' if math.isnan(route.age_s) else route.age_s,
              'max_age_s': snap.navigation_max_age_s, 'routes_received': st.routes_received,
              'last_inference_route_state': st.route_used.state,
              'last_inference_route_text': st.route_used.text or '',
              'last_inference_guided': st.guided}
    return _ROUTE_LEVEL[route.state], _route_message(route, snap.navigation_max_age_s), values


def _questions(st: NodeStatus, snap: Snapshot) -> tuple[int, str, dict[str, Any]]:
    values = {'questions_received': st.questions_received,
              'questions_answered': st.questions_answered,
              'questions_dropped': st.questions_dropped, 'question_errors': st.question_errors,
              'questions_pending': snap.questions_pending, 'reason': st.question_reason,
              **st.answer_stats}
    return st.question_level, st.question_message, values


def _input(st: NodeStatus, snap: Snapshot) -> tuple[int, str, dict[str, Any]]:
    """Report the last evaluation, and broken input refused within the hold window (ERROR)."""
    level, message = st.input_level, st.input_message
    values = {'reason': st.input_reason, 'messages_refused': st.messages_refused}
    held = st.refusals.held(snap.monotonic_s)
    values['refusal_hold_s'] = st.refusals.hold_s
    values['refused_in_hold'] = sum(held.counts.values()) if held else 0
    if held is not None:
        counts = ', '.join(f'{r} x{n}' for r, n in held.counts.items())
        message = f'{held.message if level == OK else message} (refused in the last ' \
                  f'{held.hold_s:g} s: {counts})'
        level = ERROR
        values |= {'last_refusal_reason': held.reason,
                   **{f'refused_in_hold.{r}': n for r, n in held.counts.items()}}
    return level, message, {**values, **_worker_values(snap.decode_worker_faults)}


def _worker_values(faults: WorkerFaults) -> dict[str, Any]:
    """Name the decode workers' failures and back-off (`images.decode_ahead_processes`)."""
    return {'decode_worker_faults': faults.count, 'decode_worker_last_fault': faults.last,
            'decode_worker_restarts': faults.restarts,
            'decode_workers_backing_off': faults.backing_off,
            'decode_worker_retry_in_s': faults.retry_in_s}


def build(node_name: str, stamp_ns: int, st: NodeStatus, snap: Snapshot) -> DiagnosticArray:
    """Build the node's statuses for one diagnostics period (see the module docstring)."""
    counters = {'ticks': st.ticks, 'ticks_dropped': st.ticks_dropped, 'inferences': st.inferences,
                'input_errors': st.input_errors, 'engine_errors': st.engine_errors,
                'last_skip_reason': st.last_skip_reason, 'last_t0_ns': st.last_t0_ns,
                'lifecycle_state': st.lifecycle_state, 'model_state': st.model_state}
    age, rates = _streams(snap)
    tasks: list[tuple[str, tuple[int, str, Mapping[str, Any]]]] = [
        ('model', _model(st, snap)),
        ('inference', (*_inference(st), {**st.stages, **counters})),
        ('input', _input(st, snap)),
        ('path rate', _path_rate(st, snap)),
        ('input age', age),
        ('input rates', rates),
        ('timing', (OK, f'last, p50, p90 over the last {snap.timed_inferences} inferences',
                    snap.timing)),
        ('navigation', _navigation(st, snap)),
        ('questions', _questions(st, snap)),
        *([('plan', snap.plan_check)] if snap.plan_check is not None else []),
    ]
    return DiagnosticArray(header=Header(stamp=ns_to_time(stamp_ns)), status=[
        DiagnosticStatus(level=level.to_bytes(1, 'little'), name=f'{node_name}: {task}',
                         message=message, hardware_id=snap.hardware_id, values=_kv(values))
        for task, (level, message, values) in tasks])

