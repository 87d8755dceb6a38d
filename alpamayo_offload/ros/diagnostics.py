"""`/diagnostics` content: per-stage timing, streaming, memory, model state and skip reasons."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

from ..assembly import errors as input_errors
from .conversions import ns_to_time

if TYPE_CHECKING:
    from ..engine import EngineInfo

# Stage keys always present in the inference status (nan until the first inference).
STAGE_KEYS = (
    't_image_decode_ms', 't_frame_decode_max_ms', 't_preprocess_ms', 't_vision_ms',
    't_prefill_ms', 't_decode_ms', 'decode_tokens', 't_diffusion_ms', 't_postprocess_ms',
    't_engine_total_ms', 't_path_build_ms', 't_total_ms', 't_node_overhead_ms',
    'input_age_ms', 'dma_ms', 'stall_ms', 'bytes_streamed',
)
# Reasons that mean broken data rather than timing; reported as ERROR, the rest as WARN.
_ERROR_REASONS = frozenset({
    input_errors.IMAGE_ENCODING, input_errors.IMAGE_STEP_INVALID, input_errors.IMAGE_TRUNCATED,
    input_errors.IMAGE_CORRUPT, input_errors.IMAGE_TOO_LARGE, input_errors.IMAGE_SIZE_MISMATCH,
    input_errors.ODOMETRY_NONFINITE, input_errors.CAMERA_STOPPED, input_errors.CAMERA_MISSING,
})
SKIP_IN_FLIGHT = 'inference_in_flight'
SKIP_LOADING = 'model_loading'
SKIP_MODEL_ERROR = 'model_error'
SKIP_NO_NEW_INPUT = 'no_new_input'  # t0 not newer than the last inference's
DECODE_SLOW = 'image_decode_slow'   # a warning, not a skip: the inference still runs
OK, WARN, ERROR = 0, 1, 2  # DiagnosticStatus levels as ints (the message field is a byte)


@dataclass
class NodeStatus:
    """Mutable status the node updates from its threads and publishes (only under its lock)."""

    model_state: str = 'loading'          # loading, ready, degraded, error
    model_message: str = ''
    engine_info: EngineInfo | None = None   # once the model has loaded
    start_info: dict[str, Any] = field(default_factory=dict)   # what start-up resolved
    start_warning: str = ''          # why the configured plan was changed at start-up
    stages: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(STAGE_KEYS, float('nan')))
    last_t0_ns: int = 0
    ticks: int = 0
    ticks_dropped: int = 0
    inferences: int = 0
    input_errors: int = 0
    engine_errors: int = 0
    last_skip_reason: str = ''
    input_level: int = 0
    input_message: str = 'no tick yet'
    input_reason: str = ''                # reason code of the reported evaluation; '' = valid
    input_serial: int = 0                 # which evaluation the input status reports
    inference_level: int = 0
    inference_message: str = 'no inference yet'


    def report_input(self, serial: int, level: int, message: str, reason: str) -> None:
        """Record the outcome of input evaluation `serial` unless a newer one is reported.

        Selection (timer) and decoding (worker) finish out of order; without the serial a worker
        finishing late would overwrite a newer tick's error with 'inputs valid'.
        """
        if serial < self.input_serial:
            return
        self.input_serial = serial
        self.input_level, self.input_message, self.input_reason = level, message, reason


def input_level(reason: str) -> int:
    """Diagnostic level for an input error reason."""
    return ERROR if reason in _ERROR_REASONS else WARN


def _kv(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_fmt(v)) for k, v in values.items()]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f'{v:.3f}'
    if isinstance(v, (list, tuple)):
        return ','.join(str(x) for x in v)
    return str(v)


def _status(level: int, name: str, message: str, values: dict[str, Any]) -> DiagnosticStatus:
    return DiagnosticStatus(level=level.to_bytes(1, 'little'), name=name, message=message,
                            hardware_id='alpamayo_offload', values=_kv(values))


def _engine_values(info: EngineInfo | None) -> dict[str, Any]:
    """Return the engine's part of the model status (empty fields until it has loaded)."""
    if info is None:
        return {'model': '', 'device': '', 'vram_used_bytes': 0, 'vram_budget_bytes': 0,
                'vram_required_bytes': 0, 'embed_on_host': '', 'kernel_settings': ''}
    return {
        'model': info.model, 'device': info.device, 'vram_used_bytes': info.vram_used_bytes,
        'vram_budget_bytes': info.budget_bytes or 0,
        'vram_required_bytes': info.required_bytes,
        'embed_on_host': info.embed_on_host,
        'kernel_settings': info.kernel_settings,   # what a plan's profile must match
        **{f'resident_layers.{k}': list(v) or 'none' for k, v in info.resident_layers.items()},
    }


def build(node_name: str, stamp_ns: int, st: NodeStatus,
          plan_info: Mapping[str, Any]) -> DiagnosticArray:
    """Three statuses: `<node>: inference`, `<node>: input`, `<node>: model`."""
    model_level = {'ready': OK, 'loading': OK, 'degraded': WARN}.get(st.model_state, ERROR)
    model_values: dict[str, Any] = {
        'model_state': st.model_state, **_engine_values(st.engine_info), **st.start_info,
        **plan_info,
    }
    counters = {'ticks': st.ticks, 'ticks_dropped': st.ticks_dropped, 'inferences': st.inferences,
                'input_errors': st.input_errors, 'engine_errors': st.engine_errors,
                'last_skip_reason': st.last_skip_reason, 'last_t0_ns': st.last_t0_ns}
    return DiagnosticArray(header=Header(stamp=ns_to_time(stamp_ns)), status=[
        _status(st.inference_level, f'{node_name}: inference', st.inference_message,
                {**st.stages, **counters, 'model_state': st.model_state}),
        _status(st.input_level, f'{node_name}: input', st.input_message,
                {'reason': st.input_reason}),
        _status(model_level, f'{node_name}: model',
                st.model_message or st.model_state, model_values),
    ])
