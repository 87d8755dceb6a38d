"""Raw inputs -> model inputs: camera frames to pixel patches, world history to t0-frame tokens.

Images go through transformers' PIL `Qwen2VLImageProcessorPil` with the release settings passed
explicitly (no hub): smart-resize to multiples of 32, bicubic, rescale 1/255, mean = std = 0.5.
This is the slow path the fixture's goldens used; the release's fast torchvision path differs by a
few intensity levels at most.

`preprocess_images` reproduces that processor bit for bit without its per-image float64 passes:
frames not already at the smart-resize target get the processor's own PIL bicubic resize (uint8 in,
uint8 out; `ImageSizing`, which the node and replay also use to resize frames to the model's size
before they reach the engine), then rescale + normalise is one 256-entry lookup table per channel
(built by the processor's own `rescale`/`normalize`, so every value is the processor's), applied
after the patch reordering is done on uint8 for all frames at once. For a model on a GPU only the
uint8 patches travel and the lookup runs there, in the model's dtype: a table cast to a dtype then
looked up equals the float32 lookup cast, so the pixels are the same bit for bit, and the host
neither builds 70 MB of float32 pixels nor casts and copies them.
`preprocess_images_reference` keeps the processor path for tests.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
    smart_resize,
)

from .config import AlpamayoConfig
from .errors import ModelInputError
from .tokens import (
    CAMERA_DISPLAY_NAMES,
    TextEncoder,
    build_prompt_ids,
    build_vqa_prompt_ids,
    fuse_history,
    history_token_ids,
)

# Release camera order (sorted camera index); the model sees them in this order.
CAMERA_NAMES = ("camera_cross_left_120fov", "camera_front_wide_120fov",
                "camera_cross_right_120fov", "camera_front_tele_30fov")
CAMERA_INDICES = (0, 1, 2, 6)
# Alpamayo 2 Super's trajectory profile: six cameras (no rear telephoto, slot 4).
CAMERA_INDICES_2SUPER = (0, 1, 2, 3, 5, 6)
CAMERA_SLOTS = len(CAMERA_DISPLAY_NAMES)  # Alpamayo 1.5: cameras in any of slots 0..6
FRAMES_PER_CAMERA = 4      # t0-0.3 s ... t0 at 10 Hz, oldest first
HISTORY_POSES = 16         # t0-1.5 s ... t0 at 10 Hz


@dataclass(frozen=True)
class ModelInputs:
    """Everything one inference consumes, on the host but the pixels; batch size 1."""

    input_ids: torch.Tensor        # (1, L) long, history already fused
    pixel_values: torch.Tensor     # (P, 3*2*16*16) float32 on the host, or the model's device+dtype
    image_grid_thw: torch.Tensor   # (n_images, 3) long
    ego_history_xyz: torch.Tensor  # (1, 16, 3) float32, t0 ego frame
    ego_history_rot: torch.Tensor  # (1, 16, 3, 3) float32, t0 ego frame
    # 2 Super with navigation text: the plain prompt, navigation guidance's unguided branch.
    unguided_input_ids: torch.Tensor | None = None


def make_image_processor(cfg: AlpamayoConfig) -> Qwen2VLImageProcessorPil:
    """Build the PIL Qwen2-VL image processor with the release settings, built offline."""
    v, tk = cfg.vision, cfg.tokens
    return Qwen2VLImageProcessorPil(
        patch_size=v.patch_size, temporal_patch_size=v.temporal_patch_size,
        merge_size=v.spatial_merge_size, image_mean=[0.5] * 3, image_std=[0.5] * 3,
        size={"shortest_edge": tk.min_pixels, "longest_edge": tk.max_pixels},
    )


def _as_frames(images: np.ndarray | torch.Tensor) -> np.ndarray:
    """Validate (n_cam, n_frames, H, W, 3) uint8 RGB -> (n_cam * n_frames, H, W, 3)."""
    arr = images.cpu().numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if arr.ndim != 5 or arr.shape[-1] != 3 or arr.dtype != np.uint8:
        raise ModelInputError(f"images: got shape {arr.shape} dtype {arr.dtype}; expected "
                              "(n_cameras, n_frames, H, W, 3) uint8 RGB")
    return arr.reshape(-1, *arr.shape[2:])


@dataclass(frozen=True)
class ImageSizing:
    """How the processor sizes a frame for one model config.

    The smart-resize target of the frame's size, reached by PIL bicubic on the uint8 frame
    (frames already there are kept). A value (equal for equal configs) that code outside the
    model uses to resize frames early (the node, ahead of time; replay): a frame passed through
    `resize` gives the same `pixel_values` as the full frame, bit for bit, because
    `preprocess_images` resizes with this same method.
    """

    factor: int
    min_pixels: int
    max_pixels: int
    resample: ClassVar[int] = Image.Resampling.BICUBIC   # the processor's Pillow filter

    @classmethod
    def of(cls, cfg: AlpamayoConfig) -> ImageSizing:
        """Return the sizing of `cfg`'s image processor."""
        v, tk = cfg.vision, cfg.tokens
        return cls(v.patch_size * v.spatial_merge_size, tk.min_pixels, tk.max_pixels)

    def size_hw(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) the processor resizes a height x width frame to."""
        h, w = smart_resize(height, width, factor=self.factor, min_pixels=self.min_pixels,
                            max_pixels=self.max_pixels)
        return int(h), int(w)

    def resize(self, image: Image.Image,
               size_hw: tuple[int, int] | None = None) -> Image.Image:
        """Resize an RGB frame as the processor does (returned as is when already at size).

        To `size_hw` when given (the target of the full frame, for a frame decoded at a reduced
        JPEG scale), else to this frame's own target.
        """
        th, tw = size_hw if size_hw is not None else self.size_hw(image.height, image.width)
        if (image.height, image.width) == (th, tw):
            return image
        return image.resize((tw, th), self.resample)


def model_image_size_hw(height: int, width: int, cfg: AlpamayoConfig) -> tuple[int, int]:
    """(H, W) the processor resizes a height x width frame to; frames already there skip it."""
    return ImageSizing.of(cfg).size_hw(height, width)


def preprocess_images_reference(images: np.ndarray | torch.Tensor,
                                cfg: AlpamayoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the transformers processor itself, image by image (what the goldens used; slow)."""
    flat = [np.ascontiguousarray(img) for img in _as_frames(images)]
    out = make_image_processor(cfg)(images=flat, return_tensors="pt")
    return out["pixel_values"].float(), out["image_grid_thw"].long()


@functools.lru_cache(maxsize=8)
def _value_tables(cfg: AlpamayoConfig) -> np.ndarray:
    """(3, 256) float32: the processor's rescale + normalise of every uint8 value per channel.

    Built once per config (read-only): building the processor and tables costs more per inference
    than the lookup itself.
    """
    proc = make_image_processor(cfg)
    levels = np.broadcast_to(np.arange(256, dtype=np.uint8), (3, 1, 256))  # (C, H=1, W) like CHW
    scaled = proc.rescale(np.ascontiguousarray(levels), proc.rescale_factor)
    tables = proc.normalize(scaled, proc.image_mean, proc.image_std)[:, 0, :]
    tables.setflags(write=False)
    return tables


def preprocess_images(images: np.ndarray | torch.Tensor, cfg: AlpamayoConfig,
                      device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_cam, n_frames, H, W, 3) uint8 RGB -> pixel_values on `device` in `dtype`, image_grid_thw.

    Bit-identical to `preprocess_images_reference` cast to `dtype`; vectorised over all frames,
    camera-major. Off the CPU the lookup runs on `device` (`lookup_pixels`).
    """
    patches, grid = reorder_patches(images, cfg)
    t = cfg.vision.temporal_patch_size
    target = torch.device(device)
    if target.type != "cpu":   # through pinned memory: the host does not wait for the copy
        staged = torch.from_numpy(patches).pin_memory()
        return lookup_pixels(staged.to(target, non_blocking=True), _tables_on(cfg, target, dtype),
                             t), grid
    tables = _value_tables(cfg)
    if (tables == tables[:1]).all():
        values = np.take(tables[0], patches, mode="clip")
    else:
        values = np.stack([np.take(tables[c], patches[:, c], mode="clip") for c in range(3)], 1)
    # each frame repeated over the temporal patch: (P, C, 1, p*p) -> (P, C * t * p * p)
    pixel_values = np.broadcast_to(values, (values.shape[0], 3, t, values.shape[-1])).reshape(
        values.shape[0], -1)
    return torch.from_numpy(pixel_values).to(dtype), grid


def reorder_patches(images: np.ndarray | torch.Tensor,
                    cfg: AlpamayoConfig) -> tuple[np.ndarray, torch.Tensor]:
    """(n_cam, n_frames, H, W, 3) uint8 RGB -> (P, 3, 1, p*p) uint8 patches, image_grid_thw.

    Frames not at the processor's size are resized as it does; the patches are in its order.
    """
    frames = _as_frames(images)
    n, height, width = frames.shape[:3]
    sizing = ImageSizing.of(cfg)
    th, tw = sizing.size_hw(height, width)
    if (th, tw) != (height, width):  # the processor's resize: PIL bicubic on the uint8 frame
        frames = np.stack([np.asarray(sizing.resize(Image.fromarray(np.ascontiguousarray(f))))
                           for f in frames])
    p, m = cfg.vision.patch_size, cfg.vision.spatial_merge_size
    gh, gw = th // p, tw // p
    # (n, gh/m, m, p, gw/m, m, p, C) -> (n, gh/m, gw/m, m, m, C, p, p): the processor's order
    patches = np.ascontiguousarray(frames.reshape(n, gh // m, m, p, gw // m, m, p, 3)
                                   .transpose(0, 1, 4, 2, 5, 7, 3, 6)).reshape(-1, 3, 1, p * p)
    grid = torch.tensor([[1, gh, gw]], dtype=torch.long).expand(n, 3).contiguous()
    return patches, grid


def lookup_pixels(patches: torch.Tensor, table: torch.Tensor, temporal: int) -> torch.Tensor:
    """(P, 3, 1, p*p) uint8 patches -> (P, 3 * temporal * p*p) pixels, each looked up in `table`.

    On the patches' device, in the dtype of `table` (3, 256), one row per channel. The numpy
    lookup is faster on a CPU; on a GPU this one saves the host the float32 pixels.
    """
    levels = table.shape[1]
    offsets = torch.arange(0, 3 * levels, levels, dtype=torch.int32,
                           device=patches.device).view(1, 3, 1, 1)
    values = table.reshape(-1)[patches.int().add_(offsets)]
    return values.expand(values.shape[0], 3, temporal, values.shape[-1]).reshape(
        values.shape[0], -1)


@functools.lru_cache(maxsize=8)
def _tables_on(cfg: AlpamayoConfig, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`_value_tables` cast to `dtype` on `device`, copied there once.

    A copy per inference from pageable memory would wait behind a runtime's queued layer copy.
    """
    return torch.from_numpy(_value_tables(cfg).copy()).to(device, dtype)


def to_t0_frame(xyz_world: np.ndarray | torch.Tensor, rot_world: np.ndarray | torch.Tensor,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """World poses (T, 3), (T, 3, 3), last = t0 -> t0 ego frame: R0^T (p - p0), R0^T R.

    Computed in float64 (world coordinates can be large), returned as float32.
    """
    xyz = torch.as_tensor(np.asarray(xyz_world), dtype=torch.float64)
    rot = torch.as_tensor(np.asarray(rot_world), dtype=torch.float64)
    if xyz.ndim != 2 or xyz.shape[-1] != 3 or rot.shape != (*xyz.shape[:-1], 3, 3):
        raise ModelInputError(f"ego history: got xyz {tuple(xyz.shape)}, rot {tuple(rot.shape)}; "
                              "expected (T, 3) and (T, 3, 3)")
    if not (torch.isfinite(xyz).all() and torch.isfinite(rot).all()):
        raise ModelInputError("ego history contains NaN or inf")
    r0t = rot[-1].T
    local_xyz = (xyz - xyz[-1]) @ r0t.T
    local_rot = r0t @ rot
    return local_xyz.float(), local_rot.float()


def release_camera_slots(cfg: AlpamayoConfig, n_cameras: int | None = None) -> tuple[int, ...]:
    """Return the family's release slots, or `n_cameras` slots that start with them.

    Four for R1 and 1.5 (0, 1, 2, 6), six for 2 Super (0, 1, 2, 3, 5, 6). Fewer cameras take
    the first of those; more add the remaining slots in index order (1.5 and 2 Super only).
    """
    release = CAMERA_INDICES_2SUPER if cfg.is_2super else CAMERA_INDICES
    if n_cameras is None:
        return release
    if not 1 <= n_cameras <= CAMERA_SLOTS:
        raise ModelInputError(f"{n_cameras} cameras: give 1-{CAMERA_SLOTS}")
    extra = tuple(i for i in range(CAMERA_SLOTS) if i not in release)
    return tuple(sorted((release + extra)[:n_cameras]))


def camera_slots(cfg: AlpamayoConfig, n_cameras: int,
                 camera_indices: Sequence[int] | None) -> tuple[int, ...] | None:
    """Return the release slots (0..6) of the cameras, validated; None for R1 (bare images).

    1.5 and 2 Super take 1-7 cameras in any slots; without `camera_indices` four cameras are
    1.5's release set (0, 1, 2, 6), six are 2 Super's (0, 1, 2, 3, 5, 6). R1 runs the four
    release cameras only.
    """
    default = CAMERA_INDICES_2SUPER if cfg.is_2super else CAMERA_INDICES
    if not cfg.camera_text:
        if camera_indices is not None and tuple(camera_indices) != CAMERA_INDICES:
            raise ModelInputError(f"camera_indices {list(camera_indices)}: Alpamayo-R1 runs the "
                                  f"release cameras {list(CAMERA_INDICES)} only")
        return None
    if camera_indices is None:
        if n_cameras != len(default):
            raise ModelInputError(f"{n_cameras} cameras without camera_indices: name the slot "
                                  f"(0..{CAMERA_SLOTS - 1}) of each camera")
        return default
    slots = tuple(int(i) for i in camera_indices)
    if len(slots) != n_cameras:
        raise ModelInputError(f"camera_indices {list(slots)} name {len(slots)} cameras; the "
                              f"images hold {n_cameras}")
    if not 1 <= len(slots) <= CAMERA_SLOTS or len(set(slots)) != len(slots) \
            or any(not 0 <= i < CAMERA_SLOTS for i in slots):
        raise ModelInputError(f"camera_indices {list(slots)}: 1-{CAMERA_SLOTS} distinct slots "
                              f"in 0..{CAMERA_SLOTS - 1}")
    return slots


def prepare_inputs(images: np.ndarray | torch.Tensor, hist_xyz_world: np.ndarray | torch.Tensor,
                   hist_rot_world: np.ndarray | torch.Tensor, cfg: AlpamayoConfig,
                   encoder: TextEncoder, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32,
                   camera_indices: Sequence[int] | None = None,
                   nav_text: str | None = None) -> ModelInputs:
    """Frames + world-frame ego history -> `ModelInputs` with the release prompt.

    The pixels go to `device` in `dtype`: the model's, so the vision pass uses them as they are.
    `camera_indices` (1.5) are the release slots of the cameras; `nav_text` (1.5) the route text.
    """
    hist_xyz, hist_rot = to_t0_frame(hist_xyz_world, hist_rot_world)
    if hist_xyz.shape[0] != HISTORY_POSES:
        raise ModelInputError(f"ego history has {hist_xyz.shape[0]} poses; expected "
                              f"{HISTORY_POSES} (t0-1.5 s ... t0 at 10 Hz)")
    slots = camera_slots(cfg, _n_cameras(images), camera_indices)
    pixel_values, grid = preprocess_images(images, cfg, device, dtype)
    return inputs_from_processed(pixel_values, grid, hist_xyz[None], hist_rot[None], cfg, encoder,
                                 camera_indices=slots, nav_text=nav_text)


def prepare_vqa_inputs(images: np.ndarray | torch.Tensor, question: str, cfg: AlpamayoConfig,
                       encoder: TextEncoder, device: torch.device | str = "cpu",
                       dtype: torch.dtype = torch.float32,
                       camera_indices: Sequence[int] | None = None) -> ModelInputs:
    """Frames + a question -> `ModelInputs` with Alpamayo 1.5's question prompt (no history).

    The ego-history fields hold a resting history; question answering never reads them.
    """
    if not cfg.camera_text:
        raise ModelInputError("questions need an Alpamayo 1.5 or 2 Super checkpoint (R1 has no "
                              "VQA prompt)")
    slots = camera_slots(cfg, _n_cameras(images), camera_indices)
    pixel_values, grid = preprocess_images(images, cfg, device, dtype)
    merge = cfg.vision.spatial_merge_size ** 2
    ids = build_vqa_prompt_ids(encoder, (grid.prod(-1) // merge).tolist(), question, slots,
                               cfg.is_2super)
    return ModelInputs(input_ids=ids, pixel_values=pixel_values, image_grid_thw=grid,
                       ego_history_xyz=torch.zeros(1, HISTORY_POSES, 3),
                       ego_history_rot=torch.eye(3).expand(1, HISTORY_POSES, 3, 3).clone())


def _n_cameras(images: np.ndarray | torch.Tensor) -> int:
    shape = tuple(images.shape)
    if len(shape) != 5:
        raise ModelInputError(f"images: got shape {shape}; expected "
                              "(n_cameras, n_frames, H, W, 3) uint8 RGB")
    return shape[0]


def inputs_from_processed(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor,
                          hist_xyz: torch.Tensor, hist_rot: torch.Tensor, cfg: AlpamayoConfig,
                          encoder: TextEncoder, prompt_ids: torch.Tensor | None = None,
                          camera_indices: Sequence[int] | None = None,
                          nav_text: str | None = None) -> ModelInputs:
    """Build `ModelInputs` from processed pixels + t0-frame history (1, 16, 3).

    Without `prompt_ids` the release prompt is built: R1's bare images, or 1.5's camera and
    frame text (`camera_indices`) with the route span when `nav_text` is given.
    """
    merge = cfg.vision.spatial_merge_size ** 2
    counts: Sequence[int] = (image_grid_thw.prod(-1) // merge).tolist()
    if nav_text is not None and not cfg.camera_text:
        raise ModelInputError("nav_text needs an Alpamayo 1.5 or 2 Super checkpoint (R1 has no "
                              "route input)")
    builds = prompt_ids is None or (cfg.is_2super and nav_text is not None)
    if cfg.camera_text and camera_indices is None and builds:
        camera_indices = camera_slots(cfg, len(counts) // FRAMES_PER_CAMERA, None)
    slots = camera_indices if cfg.camera_text else None
    hist = history_token_ids(hist_xyz, cfg.tokens)
    if prompt_ids is None:
        prompt_ids = build_prompt_ids(encoder, counts, cfg.tokens.tokens_per_history_traj,
                                      slots, nav_text, cfg.is_2super)
    unguided = None
    if cfg.is_2super and nav_text is not None:
        unguided = fuse_history(build_prompt_ids(encoder, counts,
                                                 cfg.tokens.tokens_per_history_traj, slots,
                                                 None, True), hist)
    ids = fuse_history(prompt_ids, hist)
    return ModelInputs(input_ids=ids, pixel_values=pixel_values, image_grid_thw=image_grid_thw,
                       ego_history_xyz=hist_xyz.float(), ego_history_rot=hist_rot.float(),
                       unguided_input_ids=unguided)
