"""Time-correct model input: t0 rule, nearest frames, 10 Hz ego history, future ground truth.

Selection (cheap, no decoding) and decoding (16 frames, in the worker) are separate steps so the
node's timer thread never decodes; `assemble` does both for replay. The node may hand frames
decoded ahead (`decode_ahead`) to `decode_selection`, which decodes only the others.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field

import numpy as np

from .decode import (
    DEFAULT_MAX_PIXELS,
    Decoded,
    DecodeOptions,
    FrameSize,
    FrameSizing,
    JpegDecoder,
    decode_image,
)
from .errors import (
    CAMERA_MISSING,
    CAMERA_STOPPED,
    FRAME_MISMATCH,
    IMAGE_SIZE_MISMATCH,
    INPUT_STALE,
    ODOMETRY_INSUFFICIENT,
    InputError,
)
from .messages import EncodedImage, OdometrySample
from .poses import interpolate_poses

_NS = 1_000_000_000

# (camera slot, frame) -> its finished background decode, or None to decode it on demand.
DecodedLookup = Callable[[int, EncodedImage], 'Future[Decoded] | None']


@dataclass(frozen=True)
class AssemblyConfig:
    """How inputs are selected and validated; defaults follow the Alpamayo-R1 input contract.

    Frames are resized to `image_size_hw` when set (`images.height/width`), else to the model's
    own input size by `model_sizing` (the loaded engine's `image_sizing`, set once it is known:
    the model gets exactly the pixels it would make of the full frame), else kept at native size.
    `max_pixels` bounds a frame's pixel count (checked on its header, before decoding);
    `jpeg_decoder` decodes JPEGs instead of the CPU (the GPU's, set by the node);
    `jpeg_dct_scaling` lets the CPU decode JPEGs at a reduced DCT scale (`decode_image`).
    """

    camera_slots: tuple[int, ...] = (0, 1, 2, 6)
    frame_offsets_s: tuple[float, ...] = (0.3, 0.2, 0.1, 0.0)
    frame_tolerance_s: float = 0.05
    history_steps: int = 16
    history_dt_s: float = 0.1
    future_steps: int = 64
    rear_axle_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    max_odometry_gap_s: float = 0.2
    odometry_tolerance_s: float = 0.05
    max_input_age_s: float = 1.0
    max_camera_skew_s: float = 0.5
    image_size_hw: tuple[int, int] | None = None
    model_sizing: FrameSizing | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    jpeg_decoder: JpegDecoder | None = field(default=None, repr=False)
    jpeg_dct_scaling: bool = True

    def __post_init__(self) -> None:
        slots = self.camera_slots
        if not slots or len(set(slots)) != len(slots) or not all(0 <= s <= 6 for s in slots):
            raise ValueError(f'camera_slots {slots} must be unique Alpamayo camera indices in 0..6')
        if sorted(self.frame_offsets_s, reverse=True) != list(self.frame_offsets_s) or \
                min(self.frame_offsets_s, default=-1) < 0:
            raise ValueError(f'frame_offsets_s {self.frame_offsets_s} must be >= 0, oldest first')
        for name in ('frame_tolerance_s', 'history_dt_s', 'max_odometry_gap_s', 'max_input_age_s',
                     'max_camera_skew_s'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} = {getattr(self, name)} must be > 0 seconds')
        if self.odometry_tolerance_s < 0:
            raise ValueError(f'odometry_tolerance_s = {self.odometry_tolerance_s} must be >= 0')
        if self.history_steps < 2 or self.future_steps < 1:
            raise ValueError(f'history_steps {self.history_steps} must be >= 2 and future_steps '
                             f'{self.future_steps} >= 1')
        if len(self.rear_axle_offset) != 3:
            raise ValueError(f'rear_axle_offset {self.rear_axle_offset} must be (x, y, z) metres')
        if self.image_size_hw is not None and min(self.image_size_hw) <= 0:
            raise ValueError(f'image_size_hw {self.image_size_hw} must be positive or None '
                             "(the model's size)")
        if self.max_pixels < 1:
            raise ValueError(f'max_pixels {self.max_pixels} must be >= 1')

    @property
    def decode_options(self) -> DecodeOptions:
        """The per-frame decoding limits, JPEG decoder and DCT scaling."""
        return DecodeOptions(self.max_pixels, self.jpeg_decoder, self.jpeg_dct_scaling)

    @property
    def frame_size(self) -> FrameSize:
        """What frames are resized to: `image_size_hw`, else `model_sizing`, else None (native)."""
        return self.image_size_hw if self.image_size_hw is not None else self.model_sizing

    @property
    def selectable_age_s(self) -> float:
        """How far before its camera's newest frame a frame can still be selected.

        t0 is at most `max_camera_skew_s` before the newest stamp of any camera (else the lagging
        camera stopped), and a chosen frame at most `max(frame_offsets_s) + frame_tolerance_s`
        before t0.
        """
        return self.max_camera_skew_s + max(self.frame_offsets_s) + self.frame_tolerance_s


@dataclass(frozen=True)
class Pose:
    """A rear-axle pose in the odometry frame."""

    xyz: np.ndarray   # (3,)
    rot: np.ndarray   # (3, 3)


@dataclass(frozen=True)
class Selection:
    """The chosen encoded frames and the interpolated history for one t0 (nothing decoded yet)."""

    t0_ns: int
    camera_slots: tuple[int, ...]              # sorted ascending, the model's camera order
    frames: tuple[tuple[EncodedImage, ...], ...]   # per camera, oldest first
    ego_history_xyz: np.ndarray                # (16, 3) odometry frame, rear axle
    ego_history_rot: np.ndarray                # (16, 3, 3)
    odom_frame_id: str


@dataclass(frozen=True)
class ModelInput:
    """What the engine consumes (design.md, assembly contract)."""

    t0_ns: int
    images: np.ndarray                         # (n_cam, n_frames, H, W, 3) uint8 RGB
    camera_indices: tuple[int, ...]
    ego_history_xyz: np.ndarray                # (16, 3) float64, odometry frame
    ego_history_rot: np.ndarray                # (16, 3, 3)
    odom_pose_t0: Pose
    odom_frame_id: str
    frame_stamps_ns: tuple[tuple[int, ...], ...]
    decode_s: float
    source_hw: tuple[tuple[int, int], ...] = ()   # per camera: size as sent (before resizing)
    slowest_frame_decode_s: float = 0.0   # longest decode of one frame, ahead or on demand
    nav_text: str | None = None           # route text the engine puts in the prompt (1.5)


def select_inputs(
    cameras: Mapping[int, Sequence[EncodedImage]],
    odometry: Sequence[OdometrySample],
    cfg: AssemblyConfig,
    now_ns: int | None = None,
) -> Selection:
    """Pick t0, the nearest frame per camera and target time, and the ego history; no decoding.

    t0 is the oldest of the cameras' newest stamps, so every camera has a frame at t0. `now_ns`
    enables the staleness check (live use); replay passes None.
    """
    slots = tuple(sorted(cfg.camera_slots))
    newest: dict[int, int] = {}
    for slot in slots:
        frames = cameras.get(slot, ())
        if not frames:
            raise InputError(CAMERA_MISSING, f'no frame received from camera slot {slot}; '
                             'check its topic remap and transport')
        newest[slot] = frames[-1].stamp_ns
    lead = max(newest.values())
    lagging = max(slots, key=lambda s: lead - newest[s])
    skew = (lead - newest[lagging]) / _NS
    if skew > cfg.max_camera_skew_s:
        raise InputError(CAMERA_STOPPED, f'camera slot {lagging} is {skew:.3f} s behind the newest '
                         f'camera (limit sync.max_camera_skew_s = {cfg.max_camera_skew_s}); '
                         'it stopped')
    t0 = min(newest.values())
    if now_ns is not None and (now_ns - t0) / _NS > cfg.max_input_age_s:
        raise InputError(INPUT_STALE, f'newest common frame is {(now_ns - t0) / _NS:.3f} s old '
                         f'(limit sync.max_input_age_s = {cfg.max_input_age_s}); inputs stopped or '
                         'clocks differ (use_sim_time?)')
    chosen = tuple(_nearest_frames(slot, cameras[slot], t0, cfg) for slot in slots)
    times = [t0 - round((cfg.history_steps - 1 - k) * cfg.history_dt_s * _NS)
             for k in range(cfg.history_steps)]
    xyz, rot = interpolate_poses(odometry, times, rear_axle_offset=cfg.rear_axle_offset,
                                 max_gap_s=cfg.max_odometry_gap_s,
                                 extrapolate_s=cfg.odometry_tolerance_s)
    return Selection(t0, slots, chosen, xyz, rot, odometry[-1].frame_id)


def _nearest_frames(slot: int, frames: Sequence[EncodedImage], t0: int,
                    cfg: AssemblyConfig) -> tuple[EncodedImage, ...]:
    stamps = np.fromiter((f.stamp_ns for f in frames), dtype=np.int64, count=len(frames))
    out = []
    for off in cfg.frame_offsets_s:
        target = t0 - round(off * _NS)
        i = int(np.abs(stamps - target).argmin())
        miss = abs(int(stamps[i]) - target) / _NS
        if miss > cfg.frame_tolerance_s:
            raise InputError(FRAME_MISMATCH, f'camera slot {slot}: nearest frame to t0-{off:.1f} '
                             f's is {miss:.3f} s away (limit sync.frame_tolerance_s = '
                             f'{cfg.frame_tolerance_s}); camera rate too low or frames dropped')
        out.append(frames[i])
    return tuple(out)


def decode_selection(sel: Selection, cfg: AssemblyConfig, pool: Executor | None = None,
                     ahead: DecodedLookup | None = None) -> ModelInput:
    """Decode the selected frames (optionally on `pool`) and stack them into a `ModelInput`.

    `ahead` may hand out frames already decoded in the background; only the others are decoded
    here. Errors are raised in frame order however a frame was decoded, so a bad frame gives the
    same reason with or without decode-ahead.
    """
    start = time.perf_counter()
    flat = [(slot, f) for slot, cam in zip(sel.camera_slots, sel.frames, strict=True)
            for f in cam]
    decoded = _decode_frames(flat, cfg.frame_size, cfg.decode_options, pool, ahead)
    per_cam = len(cfg.frame_offsets_s)
    for c, slot in enumerate(sel.camera_slots):
        sizes = {d.source_hw for d in decoded[c * per_cam:(c + 1) * per_cam]}
        if len(sizes) > 1:
            raise InputError(IMAGE_SIZE_MISMATCH, f'camera slot {slot} frames have different sizes '
                             f'{sorted(sizes)}; a camera must keep one resolution')
    shapes = {d.pixels.shape for d in decoded}
    if len(shapes) > 1:
        raise InputError(IMAGE_SIZE_MISMATCH, f'cameras differ in size {sorted(shapes)}; set '
                         'images.height/width to resize them to one size')
    source_hw = tuple(decoded[c * per_cam].source_hw for c in range(len(sel.camera_slots)))
    images = np.stack([d.pixels for d in decoded]).reshape(
        (len(sel.camera_slots), per_cam) + decoded[0].pixels.shape)
    return ModelInput(
        t0_ns=sel.t0_ns, images=images, camera_indices=sel.camera_slots,
        ego_history_xyz=sel.ego_history_xyz, ego_history_rot=sel.ego_history_rot,
        odom_pose_t0=Pose(sel.ego_history_xyz[-1].copy(), sel.ego_history_rot[-1].copy()),
        odom_frame_id=sel.odom_frame_id,
        frame_stamps_ns=tuple(tuple(f.stamp_ns for f in cam) for cam in sel.frames),
        decode_s=time.perf_counter() - start, source_hw=source_hw,
        slowest_frame_decode_s=max(d.seconds for d in decoded))


def _decode_frames(flat: list[tuple[int, EncodedImage]], size: FrameSize, options: DecodeOptions,
                   pool: Executor | None, ahead: DecodedLookup | None) -> list[Decoded]:
    found = [ahead(slot, f) if ahead is not None else None for slot, f in flat]
    if pool is not None:
        found = [fut if fut is not None else pool.submit(decode_image, f, size, options)
                 for fut, (_, f) in zip(found, flat, strict=True)]
    try:
        return [fut.result() if fut is not None else decode_image(f, size, options)
                for fut, (_, f) in zip(found, flat, strict=True)]
    finally:   # after an error, on-demand decodes not started yet are not needed (finished: no-op)
        for fut in found:
            if fut is not None:
                fut.cancel()


def check_resolution(known: MutableMapping[int, tuple[int, int]], inputs: ModelInput) -> None:
    """Raise once per camera resolution change, then accept the new size (it is remembered).

    Within one input a mixed size is caught by `decode_selection`; across inputs only this check
    sees it, independent of which t0s a busy consumer happened to pick.
    """
    changed = [(slot, known[slot], hw) for slot, hw in zip(inputs.camera_indices, inputs.source_hw,
                                                          strict=True)
               if known.get(slot, hw) != hw]
    known.update(zip(inputs.camera_indices, inputs.source_hw, strict=True))
    if changed:
        slot, old, new = changed[0]
        raise InputError(IMAGE_SIZE_MISMATCH, f'camera slot {slot} changed resolution from '
                         f'{old[1]}x{old[0]} to {new[1]}x{new[0]}; a camera must keep one '
                         'resolution (its intrinsics change); this input is skipped, the new '
                         'size is accepted from the next one')


def assemble(cameras: Mapping[int, Sequence[EncodedImage]], odometry: Sequence[OdometrySample],
             cfg: AssemblyConfig, now_ns: int | None = None,
             pool: Executor | None = None) -> ModelInput:
    """Select and decode in one call (replay, tests); raises `InputError` with a reason."""
    return decode_selection(select_inputs(cameras, odometry, cfg, now_ns), cfg, pool)


def future_ground_truth(odometry: Sequence[OdometrySample], t0_ns: int,
                        cfg: AssemblyConfig) -> tuple[np.ndarray, np.ndarray]:
    """Rear-axle poses at t0+0.1 ... t0+6.4 s (odometry frame) for replay scoring."""
    times = [t0_ns + round((k + 1) * cfg.history_dt_s * _NS) for k in range(cfg.future_steps)]
    if not odometry or odometry[-1].stamp_ns < times[-1]:
        have = (odometry[-1].stamp_ns - t0_ns) / _NS if odometry else 0.0
        raise InputError(ODOMETRY_INSUFFICIENT, f'odometry covers only {have:.2f} s after t0; '
                         f'ground truth needs {times[-1] - t0_ns} ns (drop this t0 near the end)')
    return interpolate_poses(odometry, times, rear_axle_offset=cfg.rear_axle_offset,
                             max_gap_s=cfg.max_odometry_gap_s, extrapolate_s=0.0)
