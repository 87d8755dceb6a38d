"""Raw inputs -> model inputs: camera frames to pixel patches, world history to t0-frame tokens.

Images go through transformers' PIL `Qwen2VLImageProcessorPil` with the release settings passed
explicitly (no hub): smart-resize to multiples of 32, bicubic, rescale 1/255, mean = std = 0.5.
This is the slow path the fixture's goldens used; the release's fast torchvision path differs by a
few intensity levels at most.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from .config import AlpamayoConfig
from .errors import ModelInputError
from .tokens import TextEncoder, build_prompt_ids, fuse_history, history_token_ids

# Release camera order (sorted camera index); the model sees them in this order.
CAMERA_NAMES = ("camera_cross_left_120fov", "camera_front_wide_120fov",
                "camera_cross_right_120fov", "camera_front_tele_30fov")
CAMERA_INDICES = (0, 1, 2, 6)
FRAMES_PER_CAMERA = 4      # t0-0.3 s ... t0 at 10 Hz, oldest first
HISTORY_POSES = 16         # t0-1.5 s ... t0 at 10 Hz


@dataclass(frozen=True)
class ModelInputs:
    """Everything one inference consumes, on the host; batch size 1."""

    input_ids: torch.Tensor        # (1, L) long, history already fused
    pixel_values: torch.Tensor     # (P, 3*2*16*16) float32
    image_grid_thw: torch.Tensor   # (n_images, 3) long
    ego_history_xyz: torch.Tensor  # (1, 16, 3) float32, t0 ego frame
    ego_history_rot: torch.Tensor  # (1, 16, 3, 3) float32, t0 ego frame


def make_image_processor(cfg: AlpamayoConfig) -> Qwen2VLImageProcessorPil:
    """Build the PIL Qwen2-VL image processor with the release settings, built offline."""
    v, tk = cfg.vision, cfg.tokens
    return Qwen2VLImageProcessorPil(
        patch_size=v.patch_size, temporal_patch_size=v.temporal_patch_size,
        merge_size=v.spatial_merge_size, image_mean=[0.5] * 3, image_std=[0.5] * 3,
        size={"shortest_edge": tk.min_pixels, "longest_edge": tk.max_pixels},
    )


def preprocess_images(images: np.ndarray | torch.Tensor,
                      cfg: AlpamayoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_cam, n_frames, H, W, 3) uint8 RGB -> pixel_values, image_grid_thw (camera-major)."""
    arr = images.cpu().numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if arr.ndim != 5 or arr.shape[-1] != 3 or arr.dtype != np.uint8:
        raise ModelInputError(f"images: got shape {arr.shape} dtype {arr.dtype}; expected "
                              "(n_cameras, n_frames, H, W, 3) uint8 RGB")
    flat = [np.ascontiguousarray(img) for img in arr.reshape(-1, *arr.shape[2:])]
    out = make_image_processor(cfg)(images=flat, return_tensors="pt")
    return out["pixel_values"].float(), out["image_grid_thw"].long()


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


def prepare_inputs(images: np.ndarray | torch.Tensor, hist_xyz_world: np.ndarray | torch.Tensor,
                   hist_rot_world: np.ndarray | torch.Tensor, cfg: AlpamayoConfig,
                   encoder: TextEncoder) -> ModelInputs:
    """Frames + world-frame ego history -> `ModelInputs` with the release prompt."""
    hist_xyz, hist_rot = to_t0_frame(hist_xyz_world, hist_rot_world)
    if hist_xyz.shape[0] != HISTORY_POSES:
        raise ModelInputError(f"ego history has {hist_xyz.shape[0]} poses; expected "
                              f"{HISTORY_POSES} (t0-1.5 s ... t0 at 10 Hz)")
    pixel_values, grid = preprocess_images(images, cfg)
    return inputs_from_processed(pixel_values, grid, hist_xyz[None], hist_rot[None], cfg, encoder)


def inputs_from_processed(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor,
                          hist_xyz: torch.Tensor, hist_rot: torch.Tensor, cfg: AlpamayoConfig,
                          encoder: TextEncoder,
                          prompt_ids: torch.Tensor | None = None) -> ModelInputs:
    """Build `ModelInputs` from processed pixels + t0-frame history (1, 16, 3)."""
    merge = cfg.vision.spatial_merge_size ** 2
    counts: Sequence[int] = (image_grid_thw.prod(-1) // merge).tolist()
    if prompt_ids is None:
        prompt_ids = build_prompt_ids(encoder, counts, cfg.tokens.tokens_per_history_traj)
    ids = fuse_history(prompt_ids, history_token_ids(hist_xyz, cfg.tokens))
    return ModelInputs(input_ids=ids, pixel_values=pixel_values, image_grid_thw=image_grid_thw,
                       ego_history_xyz=hist_xyz.float(), ego_history_rot=hist_rot.float())
