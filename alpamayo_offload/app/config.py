"""The node's settings as typed data: parameter values (checked by the schema) -> `NodeConfig`.

No ROS import: the node (`ros/params.py` declares the parameters) and rosbag replay build their
configuration through `config_from_values`, so both map a parameter file the same way. The
schema (`schema.py`) checks each value on its own; this module checks the rules that join
several parameters (equal camera list lengths, image height with width, a budget that can
resolve on the device) and builds the engine, assembly and camera settings.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..assembly import AssemblyConfig, JpegDecoder
from ..planning import PlanFileError, resident_from_param
from . import schema
from .errors import ParameterError
from .vram import check_budget_spec

if TYPE_CHECKING:
    from ..engine import EngineConfig


@dataclass(frozen=True)
class CameraInput:
    """One subscribed camera."""

    slot: int
    topic: str
    compressed: bool


@dataclass(frozen=True)
class NodeConfig:
    """Everything the node reads from parameters, validated once.

    `engine` leaves `budget_bytes` unset: `vram_budget` is resolved to bytes once, by the engine
    loader at start-up ("free VRAM" forms measure the device then).
    """

    engine: EngineConfig
    vram_budget: str                # spec: "12GiB", "free-2GiB", "0.8free" or '' (none)
    assembly: AssemblyConfig
    cameras: tuple[CameraInput, ...]
    camera_reliable: bool
    odometry_topic: str
    navigation_topic: str
    navigation_max_age_s: float     # route text older than this is stale (0: never)
    vqa_max_tokens: int
    vqa_sample: bool                # sample answers (release settings); False: greedy
    output_frame_id: str
    publish_odom_path: bool
    odom_frame_id: str
    period_s: float
    decode_threads: int             # resolved: >= 1
    decode_ahead: bool
    decode_ahead_processes: bool
    decode_ahead_min_interval_s: float
    decoder: str                    # 'cpu' or 'gpu' ('auto' resolved)
    decode_warn_s: float            # 0: never warn
    torch_threads: int              # 0: torch default
    executor: str                   # 'events' or 'single' (ROS callback executor)
    raw_messages: bool              # cameras and odometry taken as serialized CDR
    camera_depth: int
    odometry_depth: int
    diagnostics_period_s: float
    rate_tolerance: float           # path rate may fall this fraction below 1 / period_s
    timing_window: int              # inferences in the per-stage p50/p90
    plan_window: int                # inferences whose stage medians meet the plan's prediction
    plan_tolerance: float           # fraction a stage may run over its prediction
    autostart: bool                 # configure + activate at start-up
    plan_info: Mapping[str, Any]    # the planner file's informational plan.* keys


def config_from_values(values: Mapping[str, Any]) -> NodeConfig:
    """Build the node config from name -> value (missing names take their defaults).

    Raises `ParameterError` naming the parameter for anything the schema or the joint rules
    refuse.
    """
    v = schema.resolve(values)
    try:
        return _build(v)
    except ParameterError:
        raise
    except (ValueError, TypeError) as err:   # EngineConfig / AssemblyConfig checks
        raise ParameterError(str(err)) from err


def _build(v: dict[str, Any]) -> NodeConfig:
    slots, topics, transports = v['cameras.slots'], v['cameras.topics'], v['cameras.transports']
    if not len(slots) == len(topics) == len(transports):
        raise ParameterError(f'cameras.slots ({len(slots)}), cameras.topics ({len(topics)}) and '
                             f'cameras.transports ({len(transports)}) must have equal length')
    h, w = v['images.height'], v['images.width']
    if (h == 0) != (w == 0):
        raise ParameterError(f'images.height {h} / images.width {w}: both > 0, or both 0 (the '
                             "model's own input size)")
    if v['images.decoder'] == 'gpu' and not v['device'].startswith('cuda'):
        raise ParameterError(f"images.decoder 'gpu' needs a CUDA device (device is "
                             f"{v['device']!r}); use 'cpu' or 'auto'")
    budget = v['vram_budget'].strip()
    check_budget_spec(budget, v['device'])
    assembly = AssemblyConfig(
        camera_slots=tuple(slots), frame_tolerance_s=v['sync.frame_tolerance_s'],
        rear_axle_offset=tuple(v['odometry.rear_axle_offset']),  # type: ignore[arg-type]
        max_odometry_gap_s=v['sync.max_odometry_gap_s'],
        odometry_tolerance_s=v['sync.odometry_tolerance_s'],
        max_input_age_s=v['sync.max_input_age_s'],
        max_camera_skew_s=v['sync.max_camera_skew_s'],
        image_size_hw=(h, w) if h else None, max_pixels=v['images.max_pixels'],
        jpeg_dct_scaling=v['images.jpeg_dct_scaling'])
    return NodeConfig(
        engine=engine_config(v), vram_budget=budget, assembly=assembly,
        cameras=tuple(CameraInput(s, t, tr == 'compressed')
                      for s, t, tr in zip(slots, topics, transports, strict=True)),
        camera_reliable=v['cameras.reliability'] == 'reliable',
        odometry_topic=v['odometry.topic'], navigation_topic=v['navigation.topic'],
        navigation_max_age_s=v['navigation.max_age_s'], vqa_max_tokens=v['vqa.max_tokens'],
        vqa_sample=v['vqa.sample'], output_frame_id=v['output.frame_id'],
        publish_odom_path=v['output.publish_odom_path'],
        odom_frame_id=v['output.odom_frame_id'], period_s=v['inference.period_s'],
        decode_threads=v['images.decode_threads'] or min(schema.MAX_AUTO_DECODE_THREADS,
                                                        os.cpu_count() or 1),
        decode_ahead=v['images.decode_ahead'],
        decode_ahead_processes=v['images.decode_ahead_processes'],
        decode_ahead_min_interval_s=v['images.decode_ahead_min_interval_s'],
        decoder='gpu' if v['images.decoder'] == 'gpu' else 'cpu',
        decode_warn_s=v['images.decode_warn_ms'] / 1e3,
        torch_threads=v['inference.threads'], executor=v['inference.executor'],
        raw_messages=v['inference.raw_messages'],
        camera_depth=v['buffers.camera_depth'], odometry_depth=v['buffers.odometry_depth'],
        diagnostics_period_s=v['diagnostics.period_s'],
        rate_tolerance=v['diagnostics.rate_tolerance'],
        timing_window=v['diagnostics.timing_window'], plan_window=v['diagnostics.plan_window'],
        plan_tolerance=v['diagnostics.plan_tolerance'], autostart=v['autostart'],
        plan_info={k: val for k, val in v.items() if k.startswith(schema.PLAN_PREFIX)})


def engine_config(v: Mapping[str, Any]) -> EngineConfig:
    """Build the `EngineConfig` of resolved values (no budget: the loader resolves it once).

    `decode.diffusion_steps` 0 leaves `EngineConfig.diffusion_steps` at its default, the
    checkpoint's own step count; `navigation.guidance_weight` 0 is no guidance (None). The
    engine sizes its working set (and its warm-up input) for the cameras the node subscribes
    (`cameras.slots`): six for 2 Super's release profile.
    """
    from ..engine import EngineConfig  # torch and the model, once the parameters are valid

    resident = _layers(v, 'resident_layers')
    compressed = _layers(v, 'compressed_layers')
    steps = v['decode.diffusion_steps']
    return EngineConfig(
        model=v['model'], device=v['device'], mode=v['mode'], resident=resident,
        embed_on_host=v['embed_on_host'], fused_norms=v['fused_norms'],
        tokenizer_dir=v['tokenizer_dir'] or None, max_decode_tokens=v['decode.max_tokens'],
        fixed_decode_tokens=v['decode.fixed_tokens'] or None, seed=v['decode.seed'],
        compressed=compressed, compression=v['compression'],
        num_samples=v['decode.num_samples'],
        guidance_weight=v['navigation.guidance_weight'] or None,
        num_cameras=len(v['cameras.slots']),
        compression_cache=v['compression_cache'],
        **({'diffusion_steps': steps} if steps else {}))


def _layers(v: Mapping[str, Any], prefix: str) -> dict[str, tuple[int, ...]]:
    """Per sequence, the layer indices of `<prefix>.<sequence>` ([-1] = none; empty dropped)."""
    out = {}
    for s in schema.SEQUENCES:
        try:
            indices = resident_from_param(v[f'{prefix}.{s}'])
        except PlanFileError as err:
            raise ParameterError(f'{prefix}.{s}: {err}') from err
        if indices:
            out[s] = tuple(indices)
    return out


def decode_ahead_threads(cfg: NodeConfig) -> int:
    """Threads decoding ahead: one per camera, at most `images.decode_threads`."""
    return min(cfg.decode_threads, len(cfg.cameras))


def decode_workers_for(cfg: NodeConfig) -> tuple[int, str]:
    """Return how many decode worker processes the node starts, and why none if it starts none.

    Decode-ahead runs in `decode_ahead_threads` threads; with
    `images.decode_ahead_processes` each hands its frames to a worker process, except with
    `images.decoder: gpu` ('auto' is the CPU): nvJPEG decodes in the calling thread, so a worker
    process would only hold its memory. The reason is '' where none was asked for.
    """
    if not (cfg.decode_ahead and cfg.decode_ahead_processes):
        return 0, ''
    if cfg.decoder == 'gpu':
        return 0, ("images.decoder 'gpu': nvJPEG decodes ahead in the node's threads, so no "
                   'decode worker processes are started (images.decode_ahead_processes unused)')
    return decode_ahead_threads(cfg), ''


def jpeg_decoder(cfg: NodeConfig) -> JpegDecoder | None:
    """Build the GPU JPEG decoder for `images.decoder: gpu`; None decodes on the CPU."""
    if cfg.decoder != 'gpu':
        return None
    from ..engine.gpu_jpeg import GpuJpegUnavailableError, TorchvisionJpegDecoder

    try:
        return TorchvisionJpegDecoder(cfg.engine.device)
    except GpuJpegUnavailableError as err:
        raise ParameterError(str(err)) from err
