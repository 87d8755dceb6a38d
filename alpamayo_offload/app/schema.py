"""The node's parameters: one schema that the ROS node declares from and replay validates with.

Each `ParamSpec` says a parameter's type, default, unit, range or choices, whether it needs a
restart (read-only while the node runs) and what it does. `ros/params.py` turns a spec into a
ROS `ParameterDescriptor`; `validate` checks a name -> value mapping (merged parameter files,
`-p` overrides, run-time changes) for the node and for replay alike, so a parameter file means
the same in both.

Coercion rules (`check_value`, the same in node and replay):

- an integer given for a float parameter, or inside a float list, is accepted as that float
  (`inference.period_s: 1` is 1.0);
- a string is never read as a number: `"0.05"` (quoted) for a number is refused;
- a bool is not a number: `true` for an integer or float parameter is refused, and `1` is not a
  bool; a float is never truncated to an integer (`buffers.camera_depth: 20.0` is refused);
- a list parameter needs a non-empty list (ROS reads `[]` as no value), each element checked
  as above.

Every refusal names the parameter and says what was expected and what was given. Names outside
the schema are refused with the list of valid names, except those ROS itself reads
(`use_sim_time`, `start_type_description_service`, `qos_overrides.*`) and the informational
`plan.*` keys of a planner output file (`alpamayo-offload plan`), which diagnostics and reports
show.

A planner output file may follow the node's file as a second parameter file; it sets
`vram_budget`, `resident_layers.*`, `embed_on_host`, `fused_norms` and `plan.*`. An empty
resident list is written `[-1]` there (ROS cannot type an empty list); the planner's
`resident_from_param` reads it.
"""
from __future__ import annotations

import array
import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..assembly.decode import DEFAULT_MAX_PIXELS
from ..planning import NO_LAYERS
from .errors import ParameterError

NODE_NAME = 'alpamayo_offload_node'
"""Name of the node; replay expands `~` in topic names and reads parameter sections with it."""

SEQUENCES = ('vit', 'lm', 'expert')
MAX_AUTO_DECODE_THREADS = 16   # 4 cameras x 4 frames (2 Super's six cameras: 24 frames)
PLAN_PREFIX = 'plan.'
# inference.executor's choices; ros/executor.py maps each to the rclpy executor it makes
EXECUTORS = ('events', 'single')
ROS_OWN = frozenset({'use_sim_time', 'start_type_description_service'})
ROS_OWN_PREFIXES = ('qos_overrides.',)


class Kind(enum.Enum):
    """A parameter's type; each is one ROS parameter type (`ros/params.py` maps them)."""

    BOOL = 'bool'
    INTEGER = 'integer'
    DOUBLE = 'float'
    STRING = 'string'
    INTEGER_ARRAY = 'list of integers'
    DOUBLE_ARRAY = 'list of floats'
    STRING_ARRAY = 'list of strings'

    @property
    def element(self) -> Kind:
        """The scalar kind of a list's elements (the kind itself for a scalar)."""
        return _ELEMENT.get(self, self)

    @property
    def is_array(self) -> bool:
        """Whether the parameter is a list."""
        return self in _ELEMENT


_ELEMENT = {Kind.INTEGER_ARRAY: Kind.INTEGER, Kind.DOUBLE_ARRAY: Kind.DOUBLE,
            Kind.STRING_ARRAY: Kind.STRING}


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: type, default, unit, allowed values, restart rule and description.

    `minimum`/`maximum` bound a number (each element of a list), inclusive unless
    `min_exclusive`; `choices` are the allowed strings (each element of a list); `length` is the
    exact length of a list; `restart` means the value is read once at start-up (read-only in ROS).
    """

    name: str
    kind: Kind
    default: Any
    description: str
    unit: str = ''
    minimum: float | None = None
    min_exclusive: bool = False
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    length: int | None = None
    restart: bool = False

    def constraints(self) -> str:
        """Say the allowed values in words ('> 0', 'in [0, 6]', "one of 'a', 'b'"), or ''."""
        parts = []
        if self.choices:
            parts.append('one of ' + ', '.join(repr(c) for c in self.choices))
        if self.minimum is not None and self.maximum is not None:
            parts.append(f'in [{_num(self.minimum)}, {_num(self.maximum)}]')
        elif self.minimum is not None:
            parts.append(f'{">" if self.min_exclusive else ">="} {_num(self.minimum)}')
        elif self.maximum is not None:
            parts.append(f'<= {_num(self.maximum)}')
        if self.length is not None:
            parts.append(f'{self.length} elements')
        return ', '.join(parts)

    def expected(self) -> str:
        """Say what a valid value looks like, for error messages."""
        kind = ('an ' if self.kind.value[0] in 'aeiou' else 'a ') + self.kind.value
        extra = self.constraints()
        unit = f' ({self.unit})' if self.unit else ''
        if self.kind.is_array and extra:
            return f'{kind}{unit}, each {extra}' if self.length is None else \
                f'{kind}{unit}: {extra}'
        return f'{kind}{unit}' + (f'{", " if self.choices else " "}{extra}' if extra else '')

    def ros_description(self) -> str:
        """Return the text `ros2 param describe` shows: what it does, unit, range, restart."""
        facts = [f'unit: {self.unit}'] if self.unit else []
        if self.constraints():
            facts.append(self.constraints())
        if self.restart:
            facts.append('read at start-up (restart to change)')
        return self.description + (f' [{"; ".join(facts)}]' if facts else '')


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _p(name: str, kind: Kind, default: Any, description: str, **kw: Any) -> ParamSpec:
    return ParamSpec(name, kind, default, description, **kw)


_S, _B, _I, _F = Kind.STRING, Kind.BOOL, Kind.INTEGER, Kind.DOUBLE
_SPECS = (
    _p('model', _S, 'tiny', "preset ('tiny', 'full', 'tiny-1.5', '1.5', 'layers=N[,vit=M]') or "
       'checkpoint directory (Alpamayo-R1 or 1.5, from its config.json)', restart=True),
    _p('device', _S, 'cpu', "'cpu', 'cuda' or 'cuda:N'", restart=True),
    _p('mode', _S, 'pipelined', 'offload mode', choices=('preload', 'sequential', 'pipelined'),
       restart=True),
    _p('vram_budget', _S, '', '"12GiB", "free-2GiB" or "0.8free" (free VRAM at start-up, CUDA '
       'only); "": no budget', restart=True),
    *[_p(f'resident_layers.{s}', Kind.INTEGER_ARRAY, [NO_LAYERS],
         f'{s} layer indices kept on the GPU (planner output); [{NO_LAYERS}]: none',
         minimum=NO_LAYERS, restart=True) for s in SEQUENCES],
    *[_p(f'compressed_layers.{s}', Kind.INTEGER_ARRAY, [NO_LAYERS],
         f'{s} layer indices kept compressed in VRAM, decompressed into a slot each pass '
         f'(planner output; needs compression on); [{NO_LAYERS}]: none',
         minimum=NO_LAYERS, restart=True) for s in SEQUENCES],
    _p('compression', _S, 'off', "streamed layers travel losslessly compressed (nvCOMP ANS on "
       "CUDA, bit-exact): 'on' (refused where nvCOMP is missing on CUDA), 'auto' (on where nvCOMP "
       "imports, else raw with one log line) or 'off' (planner output)",
       choices=('off', 'auto', 'on'), restart=True),
    _p('compression_cache', _S, 'auto', 'where compressed layers are kept on disk so a second '
       "start skips compressing them: 'auto' (next to a checkpoint where writable, else "
       "$XDG_CACHE_HOME/alpamayo-offload/compression; none for presets), 'off' or a directory",
       restart=True),
    _p('embed_on_host', _B, False, 'keep the token embedding in host RAM (planner output)',
       restart=True),
    _p('fused_norms', _B, True, 'RMSNorms as one fused op (faster where the host issuing kernels '
       "limits; on CUDA some outputs one bfloat16 step off transformers' op-by-op norm); "
       'false: the op-by-op norm', restart=True),
    _p('tokenizer_dir', _S, '', 'tokenizer directory for the reasoning text (empty: ids only)',
       restart=True),
    _p('decode.max_tokens', _I, 32, 'maximum chain-of-causation tokens', unit='tokens',
       minimum=1, restart=True),
    _p('decode.fixed_tokens', _I, 0, 'decode exactly this many tokens (0: stop at the end token)',
       unit='tokens', minimum=0, restart=True),
    _p('decode.diffusion_steps', _I, 0, "flow-matching steps; 0: the checkpoint's own "
       '(diffusion_cfg.num_inference_steps; presets: 10)', unit='steps', minimum=0,
       restart=True),
    _p('decode.seed', _I, 0, 'sampling seed', restart=True),
    _p('decode.num_samples', _I, 1, 'trajectories per inference (one batched pass serves them '
       'all): sample 0 is ~/output/path, all on ~/output/trajectory_samples', unit='samples',
       minimum=1, restart=True),
    _p('images.height', _I, 0, 'height frames are resized to before the model (bilinear; the '
       'model then resizes again if it wants another size); 0 with images.width 0: the loaded '
       "model's own input size, resized as the model itself resizes the full frame",
       unit='px', minimum=0),
    _p('images.width', _I, 0, 'width frames are resized to before the model; 0 with '
       "images.height 0: the loaded model's own input size", unit='px', minimum=0),
    _p('images.jpeg_dct_scaling', _B, True, 'decode a JPEG on the CPU at the largest DCT '
       'scale (1/2, 1/4, 1/8) that still covers the size it is resized to (a 1080p frame for '
       'a 576x320 model: half the CPU time); the pixels then differ from those of the full '
       'frame by a fraction of a grey level on average; false: decode the full frame, so the '
       'model sees exactly the pixels it makes of the full frame'),
    _p('images.decode_threads', _I, 0, 'threads decoding the frames of one inference (4 per '
       f'camera) in parallel (0: one per core, at most {MAX_AUTO_DECODE_THREADS})', unit='threads',
       minimum=0, restart=True),
    _p('images.decode_ahead', _B, True, 'decode + resize each frame in the background as it '
       "arrives, so an inference finds its frames ready (frames not ready are decoded when "
       "selected); false: decode the selected frames when an inference starts", restart=True),
    _p('images.decode_ahead_processes', _B, True, 'decode ahead in worker processes (one per '
       "decode-ahead thread; frames go by pipe), so the decodes take none of the node's "
       'interpreter lock (GIL) from the inference; a failed worker is replaced (with a '
       'back-off while it keeps failing) and its frame decoded when selected; none with '
       "images.decoder 'gpu'; false: in threads of the node", restart=True),
    _p('images.decode_ahead_min_interval_s', _F, 0.08, 'decode ahead a frame only if no frame '
       'of its camera within this interval already is (the model takes frames 0.1 s apart); 0: '
       'every frame, which cameras above ~12 Hz need for their frames to be ready',
       unit='s', minimum=0.0, restart=True),
    _p('images.max_pixels', _I, DEFAULT_MAX_PIXELS, 'largest frame accepted (width x height, '
       'read from the header before decoding; larger frames are rejected as image_too_large); '
       'the default admits 8K (33.2 M)', unit='px', minimum=1),
    _p('images.decoder', _S, 'auto', "JPEG decoder: 'cpu' (cv_bridge/OpenCV, libjpeg-turbo), "
       "'gpu' (nvJPEG through torchvision, CUDA devices only) or 'auto' (the CPU: alone nvJPEG "
       'takes a tenth of the CPU time, but beside a streaming engine its frames wait behind the '
       "engine's work and decoding falls far behind the cameras)",
       choices=('auto', 'cpu', 'gpu'), restart=True),
    _p('images.decode_warn_ms', _F, 100.0, 'a frame whose decode + resize takes longer raises '
       'a warning in the input diagnostics (image_decode_slow); 0: never', unit='ms',
       minimum=0.0),
    _p('cameras.slots', Kind.INTEGER_ARRAY, [0, 1, 2, 6],
       'Alpamayo camera index of each camera topic (R1 and 1.5: 0, 1, 2, 6; 2 Super: 0, 1, 2, '
       '3, 5, 6, config/alpamayo_offload_2super.yaml)', minimum=0, maximum=6, restart=True),
    _p('cameras.topics', Kind.STRING_ARRAY,
       ['~/input/camera_0/image', '~/input/camera_1/image', '~/input/camera_2/image',
        '~/input/camera_6/image'], 'camera topics, same order as cameras.slots', restart=True),
    _p('cameras.transports', Kind.STRING_ARRAY, ['raw', 'raw', 'raw', 'raw'],
       "per camera: 'raw' (sensor_msgs/Image) or 'compressed' (JPEG/PNG)",
       choices=('raw', 'compressed'), restart=True),
    _p('cameras.reliability', _S, 'reliable', "'reliable' (keep-last 5: lost fragments of large "
       "raw frames are re-sent instead of the frame being dropped; connects only to reliable "
       "publishers, the ROS default) or 'best_effort' (sensor-data QoS: for cameras that publish "
       'best-effort, which a reliable subscription never receives)',
       choices=('reliable', 'best_effort'), restart=True),
    _p('odometry.topic', _S, '~/input/odometry', 'nav_msgs/Odometry topic', restart=True),
    _p('odometry.rear_axle_offset', Kind.DOUBLE_ARRAY, [0.0, 0.0, 0.0],
       'rear axle position [x, y, z] in the odometry child frame', unit='m', length=3),
    _p('navigation.topic', _S, '~/input/navigation', 'std_msgs/String route text (Alpamayo '
       '1.5, e.g. "turn left at the next intersection"; latched: transient local); an empty '
       'text clears the route', restart=True),
    _p('navigation.max_age_s', _F, 10.0, 'route text older than this (time since it arrived) is '
       'stale and not used; 0: never stale', unit='s', minimum=0.0),
    _p('navigation.guidance_weight', _F, 0.0, 'navigation classifier-free guidance weight w, '
       'v = (1 - w) v_unguided + w v_guided, whenever a route text is used (the release '
       'notebook: 1.5; 1: the guided rollout alone); 0: off (the route text is only in the '
       'prompt)', minimum=0.0, restart=True),
    _p('vqa.max_tokens', _I, 64, 'longest answer to a ~/input/question (the next driving '
       'inference waits for at most one answer)', unit='tokens', minimum=1),
    _p('vqa.sample', _B, False, 'sample answers as the release does (temperature 0.6, top-p '
       '0.98); false: greedy'),
    _p('output.frame_id', _S, 'base_link', 'frame of the ego path (the rear axle at t0)'),
    _p('output.publish_odom_path', _B, True, 'also publish the path in the odometry frame'),
    _p('output.odom_frame_id', _S, '', 'frame of that path (empty: the odometry header frame)'),
    _p('inference.period_s', _F, 0.5, 'timer period; ticks are dropped while an inference runs',
       unit='s', minimum=0.0, min_exclusive=True),
    _p('inference.threads', _I, 1, 'torch CPU threads (process-wide; 0: torch default, all '
       'cores); few keep callbacks and other processes responsive on small hosts',
       unit='threads', minimum=0, restart=True),
    _p('inference.executor', _S, 'events', "ROS callback executor: 'events' (rclpy's "
       'EventsExecutor, in C++: a message costs the Python interpreter about a third of the '
       'CPU it costs the Python executor, and so the inference thread, which needs the '
       "interpreter between its GPU launches, loses less to odometry and camera callbacks) or "
       "'single' (rclpy's SingleThreadedExecutor; also where rclpy has no EventsExecutor)",
       choices=EXECUTORS, restart=True),
    _p('inference.raw_messages', _B, True, 'take cameras and odometry as serialized CDR and read '
       'the fields the node uses with struct (a few us of interpreter time per message instead '
       "of rclpy's message objects, ~50 us per odometry message, which the inference thread "
       "waits for between its GPU launches); false: rclpy's message classes", restart=True),
    _p('sync.frame_tolerance_s', _F, 0.05, 'max distance of a chosen frame from its target time',
       unit='s', minimum=0.0, min_exclusive=True),
    _p('sync.max_input_age_s', _F, 1.0, 'skip when t0 is older than this', unit='s',
       minimum=0.0, min_exclusive=True),
    _p('sync.max_camera_skew_s', _F, 0.5, 'a camera this far behind the newest one has stopped',
       unit='s', minimum=0.0, min_exclusive=True),
    _p('sync.max_odometry_gap_s', _F, 0.2, 'max gap between odometry messages in the history',
       unit='s', minimum=0.0, min_exclusive=True),
    _p('sync.odometry_tolerance_s', _F, 0.05, 'how far odometry may be extrapolated past its '
       'newest message', unit='s', minimum=0.0),
    _p('buffers.camera_depth', _I, 20, 'encoded frames kept per camera', unit='frames',
       minimum=4, restart=True),
    _p('buffers.odometry_depth', _I, 400, 'odometry messages kept (must cover 1.5 s)',
       unit='messages', minimum=2, restart=True),
    _p('diagnostics.period_s', _F, 1.0, 'period of the /diagnostics heartbeat', unit='s',
       minimum=0.0, min_exclusive=True, restart=True),
    _p('diagnostics.rate_tolerance', _F, 0.2, 'published paths per second may fall this '
       'fraction below 1 / inference.period_s before the path rate status warns', minimum=0.0,
       maximum=1.0),
    _p('diagnostics.timing_window', _I, 50, 'inferences the per-stage p50/p90 cover',
       unit='inferences', minimum=1, restart=True),
    _p('diagnostics.plan_window', _I, 10, "inferences whose per-stage median the plan status "
       "holds against the plan file's prediction (plan.predicted_ms.*)", unit='inferences',
       minimum=1, restart=True),
    _p('diagnostics.plan_tolerance', _F, 0.1, 'the plan status warns when a stage\'s median over '
       'diagnostics.plan_window inferences runs more than this fraction over its prediction '
       '(a starved CPU on the vehicle shows here)', minimum=0.0, min_exclusive=True,
       restart=True),
    _p('autostart', _B, True, 'configure and activate at start-up (a failed configure ends the '
       'process with a non-zero status); false: wait for lifecycle transitions (`ros2 '
       'lifecycle set`, launch files)', restart=True),
)
PARAMETERS: Mapping[str, ParamSpec] = {s.name: s for s in _SPECS}
RESTART_ONLY = frozenset(s.name for s in _SPECS if s.restart)


def defaults() -> dict[str, Any]:
    """Name -> default value of every parameter (lists copied)."""
    return {s.name: list(s.default) if s.kind.is_array else s.default for s in _SPECS}


def is_foreign(name: str) -> bool:
    """Whether `name` is set for ROS itself or by the planner (`plan.*`), not a node setting."""
    return name in ROS_OWN or name.startswith((*ROS_OWN_PREFIXES, PLAN_PREFIX))


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f'the bool {value}'
    if isinstance(value, int):
        return f'the integer {value}'
    if isinstance(value, float):
        return f'the float {value}'
    if isinstance(value, str):
        return f'the string {value!r}'
    if value is None:
        return 'nothing (null)'
    if isinstance(value, (list, tuple, array.array)):
        return f'the list {list(value)!r}'
    return f'{type(value).__name__} {value!r}'


def _refuse(spec: ParamSpec, value: Any) -> ParameterError:
    hint = ' (write numbers without quotes)' if isinstance(value, str) and \
        spec.kind.element in (Kind.INTEGER, Kind.DOUBLE) else ''
    return ParameterError(f'{spec.name}: expected {spec.expected()}, got '
                          f'{_describe(value)}{hint}')


def _scalar(spec: ParamSpec, value: Any, shown: Any) -> Any:
    """Check one scalar (a list's element: `shown` is the whole list, for the message)."""
    kind = spec.kind.element
    ok_type = {
        Kind.BOOL: isinstance(value, bool),
        Kind.INTEGER: isinstance(value, int) and not isinstance(value, bool),
        Kind.DOUBLE: isinstance(value, (int, float)) and not isinstance(value, bool),
        Kind.STRING: isinstance(value, str),
    }[kind]
    if not ok_type:
        raise _refuse(spec, shown)
    if kind is Kind.DOUBLE:
        value = float(value)
    if kind in (Kind.INTEGER, Kind.DOUBLE):
        low, high = spec.minimum, spec.maximum
        if value != value or (low is not None and (value < low or (spec.min_exclusive
                                                                   and value == low))) \
                or (high is not None and value > high):
            raise _refuse(spec, shown)
    if spec.choices and value not in spec.choices:
        raise _refuse(spec, shown)
    return value


def check_value(name: str, value: Any) -> Any:
    """Return `value` for parameter `name` after the module's coercion rules; raise if invalid."""
    spec = PARAMETERS[name]
    if not spec.kind.is_array:
        return _scalar(spec, value, value)
    if value is None or (isinstance(value, (list, tuple, array.array)) and not value):
        none = f'; write [{NO_LAYERS}] for none' if NO_LAYERS in spec.default else ''
        raise ParameterError(f'{name}: expected {spec.expected()}, got an empty list (ROS reads '
                             f'an empty list as no value{none})')
    if isinstance(value, str) or not isinstance(value, (list, tuple, array.array)):
        raise _refuse(spec, value)
    items = [_scalar(spec, v, value) for v in value]
    if spec.length is not None and len(items) != spec.length:
        raise _refuse(spec, value)
    return items


def unknown_names_message(unknown: list[str]) -> str:
    """'unknown parameter(s) ... (did you mean ...?); valid names: ...'."""
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(PARAMETERS), n=1)
        hints.append(f'{name!r}' + (f' (did you mean {close[0]!r}?)' if close else ''))
    return (f'unknown parameter{"s" if len(unknown) > 1 else ""} {", ".join(hints)}; valid '
            f'names: {", ".join(PARAMETERS)} (and plan.*, use_sim_time, qos_overrides.*)')


def validate(values: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and values; return node settings coerced, plus `plan.*` keys as given.

    ROS's own names are accepted and left out of the result. Every problem found goes into one
    `ParameterError`, so a file with several mistakes is fixed in one pass.
    """
    problems: list[str] = []
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name in PARAMETERS:
            try:
                out[name] = check_value(name, value)
            except ParameterError as err:
                problems.append(str(err))
        elif name.startswith(PLAN_PREFIX):
            out[name] = value
    unknown = sorted(n for n in values if n not in PARAMETERS and not is_foreign(n))
    if unknown:
        problems.append(unknown_names_message(unknown))
    if problems:
        raise ParameterError('; '.join(problems))
    return out


def resolve(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter: the defaults overridden by `values`, validated (`validate`)."""
    return defaults() | validate(values)


def markdown_table() -> str:
    """Return the parameter table of docs/ros.md (name, type, default, unit, allowed, ...)."""
    rows = ['| name | type | default | unit | allowed | restart | description |',
            '|---|---|---|---|---|---|---|']
    for s in _SPECS:
        default = s.default if not isinstance(s.default, bool) else str(s.default).lower()
        cells = (f'`{s.name}`', s.kind.value, f'`{_yaml(default)}`', s.unit,
                 s.constraints(), 'yes' if s.restart else '', s.description)
        rows.append('| ' + ' | '.join(str(c).replace('|', '\\|') for c in cells) + ' |')
    return '\n'.join(rows) + '\n'


def _yaml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"' if value == '' or value != value.strip() else value
    if isinstance(value, list):
        return '[' + ', '.join(_yaml(v) for v in value) + ']'
    return str(value)


if __name__ == '__main__':
    import argparse

    parser = argparse.ArgumentParser(description='Print the node parameter table (Markdown).')
    parser.add_argument('--markdown', action='store_true', required=True,
                        help='the table docs/ros.md carries')
    parser.parse_args()
    print(markdown_table(), end='')
