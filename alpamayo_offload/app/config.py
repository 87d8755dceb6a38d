"""The node's parameters as data: one declaration table and its mapping to config dataclasses.

No ROS import here: rosbag replay reads the same YAML through this module on machines without
ROS (`params.py` adds the rclpy declaration and run-time update rules).

`config/alpamayo_offload.yaml` holds the same keys (a test checks). A planner output file
(`alpamayo-offload plan`, the source of truth for its keys) can be passed as a second parameter
file; it sets `vram_budget`, `resident_layers.*`, `embed_on_host`, `fused_norms` (as its
profile was timed) and `plan.*`. An empty
resident list is written `[-1]` there (ROS cannot type an empty list); the planner's
`resident_from_param` reads it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..assembly import AssemblyConfig
from ..planning import NO_LAYERS, PlanFileError, resident_from_param
from .errors import ParameterError
from .vram import check_budget_spec

SEQUENCES = ('vit', 'lm', 'expert')
MAX_AUTO_DECODE_THREADS = 16   # 4 cameras x 4 frames
TRANSPORTS = ('raw', 'compressed')
RELIABILITIES = ('best_effort', 'reliable')

# name -> (default, description).
PARAMETERS: dict[str, tuple[Any, str]] = {
    'model': ('tiny', "preset ('tiny') or checkpoint directory"),
    'device': ('cpu', "'cpu', 'cuda' or 'cuda:N'"),
    'mode': ('pipelined', "offload mode: 'preload', 'sequential' or 'pipelined'"),
    'vram_budget': ('', '"12GiB", "free-2GiB" or "0.8free" (free VRAM at start-up, CUDA only); '
                        '"": no budget'),
    **{f'resident_layers.{s}': ([NO_LAYERS],
                                f'{s} layer indices kept on the GPU (planner output); '
                                f'[{NO_LAYERS}]: none')
       for s in SEQUENCES},
    'embed_on_host': (False, 'keep the token embedding in host RAM (planner output)'),
    'fused_norms': (True, "RMSNorms as one fused op (faster where the host issuing kernels "
                          "limits; on CUDA some outputs one bfloat16 step off transformers' "
                          'op-by-op norm); false: the op-by-op norm'),
    'tokenizer_dir': ('', 'tokenizer directory for the reasoning text (empty: ids only)'),
    'decode.max_tokens': (32, 'maximum chain-of-causation tokens'),
    'decode.fixed_tokens': (0, 'decode exactly this many tokens (0: stop at the end token)'),
    'decode.diffusion_steps': (10, 'flow-matching steps'),
    'decode.seed': (0, 'sampling seed'),
    'images.height': (0, "height frames are resized to before the model (bilinear; the model "
                         "then resizes again if it wants another size); 0: the loaded model's "
                         'own input size, resized as the model itself resizes the full frame '
                         '(same pixels as sending it the full frame)'),
    'images.width': (0, 'width frames are resized to before the model; 0 with images.height 0: '
                        "the loaded model's own input size"),
    'images.decode_threads': (0, 'threads decoding the 16 frames of one inference in parallel '
                                 f'(0: one per core, at most {MAX_AUTO_DECODE_THREADS})'),
    'images.decode_ahead': (True, 'decode + resize each frame in the background as it arrives, '
                                  'so an inference finds its frames ready (frames not ready are '
                                  'decoded when selected; at the model\'s own size, frames that '
                                  'arrive while it loads are); false: decode the 16 selected '
                                  'frames when an inference starts'),
    'images.decode_ahead_min_interval_s': (0.08, 'decode ahead a frame only if no frame of its '
                                                 'camera within this interval already is (the '
                                                 'model takes frames 0.1 s apart); 0: every '
                                                 'frame, which cameras above ~12 Hz need for '
                                                 'their frames to be ready (t0 is any frame)'),
    'cameras.slots': ([0, 1, 2, 6], 'Alpamayo camera index of each camera topic'),
    'cameras.topics': (['~/input/camera_0/image', '~/input/camera_1/image',
                        '~/input/camera_2/image', '~/input/camera_6/image'],
                       'camera topics, same order as cameras.slots'),
    'cameras.transports': (['raw', 'raw', 'raw', 'raw'],
                           "per camera: 'raw' (sensor_msgs/Image) or 'compressed' (JPEG/PNG)"),
    'cameras.reliability': ('best_effort',
                            "'best_effort' (sensor-data QoS) or 'reliable' (for a reliable "
                            'publisher such as the CARLA bridge: lost fragments of large raw '
                            'frames are re-sent instead of the frame being dropped)'),
    'odometry.topic': ('~/input/odometry', 'nav_msgs/Odometry topic'),
    'odometry.rear_axle_offset': ([0.0, 0.0, 0.0],
                                  'rear axle position (m) in the odometry child frame'),
    'output.frame_id': ('base_link', 'frame of the ego path (the rear axle at t0)'),
    'output.publish_odom_path': (True, 'also publish the path in the odometry frame'),
    'output.odom_frame_id': ('', 'frame of that path (empty: the odometry header frame)'),
    'inference.period_s': (0.5, 'timer period; ticks are dropped while an inference runs'),
    'inference.threads': (1, 'torch CPU threads (process-wide; 0: torch default, all cores); '
                             'few keep callbacks and other processes responsive on small hosts'),
    'sync.frame_tolerance_s': (0.05, 'max distance of a chosen frame from its target time'),
    'sync.max_input_age_s': (1.0, 'skip when t0 is older than this'),
    'sync.max_camera_skew_s': (0.5, 'a camera this far behind the newest one has stopped'),
    'sync.max_odometry_gap_s': (0.2, 'max gap between odometry messages in the history'),
    'sync.odometry_tolerance_s': (0.05, 'how far odometry may be extrapolated past its newest'),
    'buffers.camera_depth': (20, 'encoded frames kept per camera'),
    'buffers.odometry_depth': (400, 'odometry messages kept (must cover 1.5 s)'),
    'diagnostics.period_s': (1.0, 'period of the /diagnostics heartbeat'),
}

# Changing these at run time would need a model reload or new subscriptions.
RESTART_ONLY = frozenset(
    {'model', 'device', 'mode', 'vram_budget', 'embed_on_host', 'fused_norms', 'tokenizer_dir',
     'images.decode_threads', 'images.decode_ahead', 'images.decode_ahead_min_interval_s',
     'inference.threads', 'odometry.topic', 'buffers.camera_depth',
     'buffers.odometry_depth', 'diagnostics.period_s'}
    | {k for k in PARAMETERS if k.startswith(('resident_layers.', 'decode.', 'cameras.'))})



def flatten_parameters(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Nested `ros__parameters` YAML -> dotted names, as ROS 2 names them (`a: {b: 1}` -> `a.b`)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping):
            out.update(flatten_parameters(value, name + '.'))
        else:
            out[name] = value
    return out


@dataclass(frozen=True)
class CameraInput:
    """One subscribed camera."""

    slot: int
    topic: str
    compressed: bool


@dataclass(frozen=True)
class NodeConfig:
    """Everything the node reads from parameters, validated once."""

    engine: dict[str, Any]          # keyword arguments of engine.EngineConfig (budget_bytes aside)
    vram_budget: str                # spec, resolved to bytes at start-up (`vram.resolve_budget`)
    assembly: AssemblyConfig
    cameras: tuple[CameraInput, ...]
    camera_reliable: bool
    odometry_topic: str
    output_frame_id: str
    publish_odom_path: bool
    odom_frame_id: str
    period_s: float
    decode_threads: int
    decode_ahead: bool
    decode_ahead_min_interval_s: float
    torch_threads: int
    camera_depth: int
    odometry_depth: int
    diagnostics_period_s: float
    plan_info: dict[str, Any]

    def __post_init__(self) -> None:
        for name in ('period_s', 'diagnostics_period_s'):
            if not getattr(self, name) > 0:
                raise ParameterError(f'{name} = {getattr(self, name)} must be > 0 seconds')
        if self.decode_ahead_min_interval_s < 0:
            raise ParameterError('images.decode_ahead_min_interval_s '
                                 f'{self.decode_ahead_min_interval_s} must be >= 0 seconds '
                                 '(0: decode every frame ahead)')
        if self.torch_threads < 0:
            raise ParameterError(f'inference.threads {self.torch_threads} must be >= 0 '
                                 '(0: torch default)')
        if self.decode_threads < 1 or self.camera_depth < 4 or self.odometry_depth < 2:
            raise ParameterError(f'images.decode_threads {self.decode_threads} must be >= 1, '
                                 f'buffers.camera_depth {self.camera_depth} >= 4, '
                                 f'buffers.odometry_depth {self.odometry_depth} >= 2')

def config_from_values(values: dict[str, Any]) -> NodeConfig:
    """Build the node config from a name -> value mapping (unset values are None)."""
    try:
        return _build(values)
    except ParameterError:
        raise
    except (ValueError, TypeError) as err:
        raise ParameterError(str(err)) from err


def _build(v: dict[str, Any]) -> NodeConfig:
    slots = [int(s) for s in v['cameras.slots']]
    topics, transports = list(v['cameras.topics']), list(v['cameras.transports'])
    if not len(slots) == len(topics) == len(transports):
        raise ParameterError(f'cameras.slots ({len(slots)}), cameras.topics ({len(topics)}) and '
                             f'cameras.transports ({len(transports)}) must have equal length')
    bad = [t for t in transports if t not in TRANSPORTS]
    if bad:
        raise ParameterError(f'cameras.transports {bad} must each be one of {TRANSPORTS}')
    if v['cameras.reliability'] not in RELIABILITIES:
        raise ParameterError(f"cameras.reliability {v['cameras.reliability']!r} must be one of "
                             f'{RELIABILITIES}')
    h, w = int(v['images.height']), int(v['images.width'])
    if (h == 0) != (w == 0) or h < 0 or w < 0:
        raise ParameterError(f'images.height {h} / images.width {w}: both > 0, or both 0 (the '
                             "model's own input size)")
    budget = v['vram_budget']
    if not isinstance(budget, str):
        raise ParameterError(f'vram_budget {budget!r} must be a string such as "12GiB", '
                             '"free-2GiB", "0.8free" or "" (none)')
    check_budget_spec(budget.strip(), str(v['device']))
    if v['mode'] not in ('preload', 'sequential', 'pipelined'):
        raise ParameterError(f"mode {v['mode']!r} must be 'preload', 'sequential' or 'pipelined'")
    offset = tuple(float(x) for x in v['odometry.rear_axle_offset'])
    if len(offset) != 3:
        raise ParameterError(f'odometry.rear_axle_offset {offset} must be [x, y, z] metres')
    resident = {}
    for s in SEQUENCES:
        try:
            indices = resident_from_param(v[f'resident_layers.{s}'] or [])
        except PlanFileError as err:
            raise ParameterError(f'resident_layers.{s}: {err}') from err
        if indices:
            resident[s] = indices
    engine = {
        'model': str(v['model']), 'device': str(v['device']), 'mode': v['mode'],
        'resident': resident, 'embed_on_host': bool(v['embed_on_host']),
        'fused_norms': bool(v['fused_norms']),
        'tokenizer_dir': v['tokenizer_dir'] or None,
        'max_decode_tokens': int(v['decode.max_tokens']),
        'fixed_decode_tokens': int(v['decode.fixed_tokens']) or None,
        'diffusion_steps': int(v['decode.diffusion_steps']), 'seed': int(v['decode.seed']),
    }
    assembly = AssemblyConfig(
        camera_slots=tuple(slots), frame_tolerance_s=float(v['sync.frame_tolerance_s']),
        rear_axle_offset=offset,  # type: ignore[arg-type]
        max_odometry_gap_s=float(v['sync.max_odometry_gap_s']),
        odometry_tolerance_s=float(v['sync.odometry_tolerance_s']),
        max_input_age_s=float(v['sync.max_input_age_s']),
        max_camera_skew_s=float(v['sync.max_camera_skew_s']),
        image_size_hw=(h, w) if h else None)
    return NodeConfig(
        engine=engine, vram_budget=budget.strip(), assembly=assembly,
        cameras=tuple(CameraInput(s, t, tr == 'compressed')
                      for s, t, tr in zip(slots, topics, transports, strict=True)),
        camera_reliable=v['cameras.reliability'] == 'reliable',
        odometry_topic=str(v['odometry.topic']), output_frame_id=str(v['output.frame_id']),
        publish_odom_path=bool(v['output.publish_odom_path']),
        odom_frame_id=str(v['output.odom_frame_id']), period_s=float(v['inference.period_s']),
        decode_threads=_decode_threads(int(v['images.decode_threads'])),
        decode_ahead=bool(v['images.decode_ahead']),
        decode_ahead_min_interval_s=float(v['images.decode_ahead_min_interval_s']),
        torch_threads=int(v['inference.threads']),
        camera_depth=int(v['buffers.camera_depth']),
        odometry_depth=int(v['buffers.odometry_depth']),
        diagnostics_period_s=float(v['diagnostics.period_s']),
        plan_info={k: val for k, val in v.items() if k.startswith('plan.')})


def _decode_threads(value: int) -> int:
    """0 means one per core (PIL releases the GIL while decoding), at most one per frame."""
    if value < 0:
        raise ParameterError(f'images.decode_threads {value} must be >= 1, or 0 for one per core')
    return value or min(MAX_AUTO_DECODE_THREADS, os.cpu_count() or 1)
