"""VRAM estimates from the model shape: prompt length and the working set of one inference.

The runtime checks a plan against these terms, and `Engine.info` reports them to the planners.
"""
from __future__ import annotations

from ..model import AlpamayoConfig
from .config import EngineConfig

# Working-set margin on top of the estimate below: allocator slack, cuBLAS workspaces.
_WORKING_SET_SLACK = 512 * 2**20
# The graphs' capture stream's cuBLAS workspace (32 MiB on an H200) and the rounding of the
# graph pool's segments: with every layer of the full model resident the capture stream and
# the pool reserve about 116 MiB, which this term plus the per-layer estimate covers.
_GRAPH_FIXED = 96 * 2**20
# Alpamayo 1.5's and 2 Super's prompt text per camera ("Front telephoto camera: ") and per
# frame ("frame 3 "), upper bounds in Qwen BPE tokens, and the room kept for a route text.
_CAMERA_NAME_TOKENS = 6
_FRAME_TEXT_TOKENS = 3
_NAV_TEXT_TOKENS = 64


def estimate_prompt_tokens(cfg: AlpamayoConfig, n_images: int = 16, height: int = 1080,
                           width: int = 1920, frames_per_camera: int = 4) -> int:
    """Prompt length for `n_images` camera frames of the given size (release layout).

    Alpamayo 1.5 and 2 Super add each camera's name, each frame's number and room for a route
    text.
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    factor = cfg.vision.patch_size * cfg.vision.spatial_merge_size
    h, w = smart_resize(height, width, factor=factor, min_pixels=cfg.tokens.min_pixels,
                        max_pixels=cfg.tokens.max_pixels)
    per_image = (h // factor) * (w // factor)
    text = 0
    if cfg.camera_text:
        cameras = -(-n_images // frames_per_camera)
        text = (cameras * _CAMERA_NAME_TOKENS + n_images * _FRAME_TEXT_TOKENS
                + _NAV_TEXT_TOKENS)
    return n_images * (per_image + 2) + cfg.tokens.tokens_per_history_traj + 2 + 60 + text


def estimated_cameras(cfg: AlpamayoConfig, config: EngineConfig) -> int:
    """Cameras the estimates assume: the configured count, else the family's release profile."""
    if config.num_cameras is not None:
        return config.num_cameras
    return 6 if cfg.is_2super else 4


def estimate_working_set(cfg: AlpamayoConfig, dtype_bytes: int, config: EngineConfig) -> int:
    """Device bytes for activations and the KV cache of one inference, plus allocator slack.

    KV cache: 2 x layers x kv_heads x head_dim x (prompt + tokens + 64 action tokens) per sample,
    twice with navigation guidance (the unguided context beside the guided one, then both
    stacked for the batched expert: at most one more layer's copy at a time).
    Activations: the prefill's widest tensors (MLP intermediate x 3, hidden x 6) and the ViT's.
    """
    t = cfg.text
    tokens = estimate_prompt_tokens(cfg, 4 * estimated_cameras(cfg, config)) \
        + config.max_decode_tokens + 1 + 64
    rows = config.num_samples * (2 if config.guidance_weight is not None else 1)
    kv = 2 * t.num_layers * t.num_kv_heads * t.head_dim * tokens * dtype_bytes * rows
    prefill = tokens * (3 * t.intermediate_size + 6 * t.hidden_size) * dtype_bytes
    logits = config.num_samples * cfg.text.vocab_size * 4 * 4
    graphs = estimate_graph_bytes(cfg, dtype_bytes, rows) \
        if config.layer_graphs and config.device.startswith('cuda') else 0
    return kv + prefill + logits + graphs + _WORKING_SET_SLACK


def estimate_graph_bytes(cfg: AlpamayoConfig, dtype_bytes: int, num_samples: int) -> int:
    """Device bytes the resident layers' CUDA graphs keep (model/layer_graphs.py), at most.

    Every language-model layer graphed for a decode token per sample, every expert layer for the
    64 action tokens per sample; each keeps its input, output, attention output, query, key and
    value. The shared pool also keeps the widest capture's activations (MLP intermediate x 3);
    the capture stream keeps a cuBLAS workspace, and segments round up (`_GRAPH_FIXED`).
    """
    t, e = cfg.text, cfg.expert
    decode, action = num_samples, num_samples * cfg.action.n_waypoints
    lm = t.num_layers * decode * (2 * t.hidden_size + 2 * t.num_heads * t.head_dim
                                  + 2 * t.num_kv_heads * t.head_dim)
    expert = t.num_layers * action * (2 * e.hidden_size + 2 * e.num_heads * e.head_dim
                                      + 2 * t.num_kv_heads * e.head_dim)
    widest = max(decode * t.intermediate_size, action * e.intermediate_size) * 3
    return (lm + expert + widest) * dtype_bytes + _GRAPH_FIXED
