"""VRAM estimates from the model shape: prompt length and the working set of one inference.

The runtime checks a plan against these terms, and `Engine.info` reports them to the planners.
"""
from __future__ import annotations

from ..model import AlpamayoConfig
from ..model.layer_graphs import MAX_GRAPHED_TOKENS
from ..model.row_chunks import ROW_CHUNK_BYTES, chunk_transient_bytes, masked_attention_key_bytes
from .config import EngineConfig

# Allocator margin of every phase: the compute stream's cuBLAS workspace, which the first
# inference allocates (32 MiB on an H200), and what the caching allocator reserves beyond what
# it hands out. A VRAM cap limits reserved memory, not allocated: on the H200 the reserved peak
# of one-row 1.5 inferences ran 79-181 MiB above the allocated one (expandable segments).
_WORKING_SET_SLACK = 256 * 2**20
# The graphs' capture stream's cuBLAS workspace (32 MiB on an H200) and the rounding of the
# graph pool's segments: with every layer of the full model resident the capture stream and
# the pool reserve about 116 MiB, which this term plus the per-layer estimate covers.
_GRAPH_FIXED = 96 * 2**20
# Alpamayo 1.5's and 2 Super's prompt text per camera ("Front telephoto camera: ") and per
# frame ("frame 3 "), upper bounds in Qwen BPE tokens, and the room kept for a route text.
_CAMERA_NAME_TOKENS = 6
_FRAME_TEXT_TOKENS = 3
_NAV_TEXT_TOKENS = 64
# Bytes per vocabulary entry and sample of a decode pass's logits: the lm_head's output, its
# float32 copy (and the prefill's copy per sample); sampling adds its float32 / int64
# temporaries (scale, sort values and indices, softmax, cumsum, scatter).
_GREEDY_LOGIT_BYTES = 12
_SAMPLED_LOGIT_BYTES = 40
# The vision pass's activations per patch and vision width channel, its merged and DeepStack
# outputs included: the float32 rotary of q and k (their copies and products), qkv, input and
# norm count ~34 bytes; an H200 measured ~56 KB per patch on Alpamayo 1.5's ViT (width 1152).
_VIT_BYTES_PER_PATCH_CHANNEL = 52
# Prefill activations per prompt token, in hidden widths beside the MLP's three intermediates:
# the prompt's embeddings (held by the language model for the whole pass), the layer's input,
# the residual after attention and its norm.
_PREFILL_HIDDEN_COPIES = 4
# Activations per new token of a row in the refeed and the expert, in hidden widths beside the
# MLP's three intermediates and the attention's query and output (2 x heads x head_dim): the
# prefill's four and two more as a margin, since these passes were not counted op by op; an
# upper bound, which test_engine_1_5 checks against the measured per-phase peaks.
_ROW_HIDDEN_COPIES = 6


def _image_tokens(cfg: AlpamayoConfig, n_images: int, height: int = 1080,
                  width: int = 1920) -> int:
    """Return the merged image tokens of `n_images` frames of the given size (release layout)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    factor = cfg.vision.patch_size * cfg.vision.spatial_merge_size
    h, w = smart_resize(height, width, factor=factor, min_pixels=cfg.tokens.min_pixels,
                        max_pixels=cfg.tokens.max_pixels)
    return n_images * (h // factor) * (w // factor)


def estimate_prompt_tokens(cfg: AlpamayoConfig, n_images: int = 16, height: int = 1080,
                           width: int = 1920, frames_per_camera: int = 4) -> int:
    """Prompt length for `n_images` camera frames of the given size (release layout).

    Alpamayo 1.5 and 2 Super add each camera's name, each frame's number and room for a route
    text.
    """
    text = 0
    if cfg.camera_text:
        cameras = -(-n_images // frames_per_camera)
        text = (cameras * _CAMERA_NAME_TOKENS + n_images * _FRAME_TEXT_TOKENS
                + _NAV_TEXT_TOKENS)
    return (_image_tokens(cfg, n_images, height, width) + 2 * n_images
            + cfg.tokens.tokens_per_history_traj + 2 + 60 + text)


def estimated_cameras(cfg: AlpamayoConfig, config: EngineConfig) -> int:
    """Cameras the estimates assume: the configured count, else the family's release profile."""
    if config.num_cameras is not None:
        return config.num_cameras
    return 6 if cfg.is_2super else 4


def estimate_working_set(cfg: AlpamayoConfig, dtype_bytes: int, config: EngineConfig) -> int:
    """Device bytes one inference needs at its peak: the largest of `estimate_phase_peaks`."""
    return max(estimate_phase_peaks(cfg, dtype_bytes, config).values())


def estimate_phase_peaks(cfg: AlpamayoConfig, dtype_bytes: int,
                         config: EngineConfig) -> dict[str, int]:
    """Device bytes held at the peak of each phase of one inference, by phase name.

    Every phase holds the pixel values (the inputs' device copy, kept for the whole inference),
    the resident layers' CUDA graphs (`estimate_graph_bytes`) and the allocator margin, beside:
    - vision: the ViT's activations;
    - prefill: the prompt's K/V, the prefill's activations (MLP intermediate x 3, hidden x 4)
      and the vision outputs (merged and DeepStack features), which the last prefill reading
      them frees as it goes (model/inference.py `VisionOutputs`): the plain rollout's prefill,
      guidance's unguided one;
    - decode: the prompt's K/V and, per row, the new tokens', one layer's full K/V built for
      the attention (and its copy as it is built), the logits and, when sampling, the
      sampling's (S, vocabulary) temporaries; with guidance the vision outputs, still to be
      read by the unguided prefill;
    - unguided (navigation guidance): the guided cache beside the unguided prompt's prefill;
      then the unguided cache's refeed of the new tokens of S rows, whose masked attention runs
      in chunks of rows (model/row_chunks.py): one chunk's K/V, SDPA's copies of it at the
      query heads (a masked call repeats K/V and lays them out again) and the mask's float
      copies expanded over the heads (at most `ROW_CHUNK_BYTES`, or one row when a row alone
      is more), plus every row's activations and attention output;
    - diffusion: the KV cache, one copy of the prompt's K/V per prompt (two with guidance: the
      guided and the unguided one) and, per row (S, or 2S with guidance), its new tokens, the
      expert's 64 action tokens and, stacked for guidance, the zero padding up to the longer
      prompt; the expert's masked attention in chunks of rows, as the refeed's, and every
      row's activations.
    """
    t, e, v = cfg.text, cfg.expert, cfg.vision
    n_images = 4 * estimated_cameras(cfg, config)
    prompt = estimate_prompt_tokens(cfg, n_images)
    image_tokens = _image_tokens(cfg, n_images)
    patches = image_tokens * v.spatial_merge_size ** 2
    new = config.max_decode_tokens + 1
    n = cfg.action.n_waypoints
    guided = config.guidance_weight is not None
    samples = config.num_samples
    prompts = 2 if guided else 1
    rows = samples * prompts
    suffix = new + n + (_NAV_TEXT_TOKENS if guided else 0)
    length = prompt + suffix
    kv_token = 2 * t.num_kv_heads * t.head_dim * dtype_bytes         # one token of one layer
    kv_tokens = t.num_layers * kv_token                               # one token, every layer

    pixels = patches * 3 * v.temporal_patch_size * v.patch_size ** 2 * dtype_bytes
    graphs = estimate_graph_bytes(cfg, dtype_bytes, samples, guided, prompt, new) \
        if config.layer_graphs and config.device.startswith('cuda') else 0
    held = pixels + graphs + _WORKING_SET_SLACK
    features = (1 + len(v.deepstack_visual_indexes)) * image_tokens * t.hidden_size * dtype_bytes
    prefill = prompt * (3 * t.intermediate_size
                        + _PREFILL_HIDDEN_COPIES * t.hidden_size) * dtype_bytes
    logit_bytes = _SAMPLED_LOGIT_BYTES if config.sample else _GREEDY_LOGIT_BYTES
    decode = samples * (length * 2 * kv_token + t.vocab_size * logit_bytes)
    guided_cache = kv_tokens * (prompt + samples * new)

    peaks = {
        'vision': patches * _VIT_BYTES_PER_PATCH_CHANNEL * v.hidden_size,
        'prefill': kv_tokens * prompt + prefill + (features if guided else 0),
        'decode': guided_cache + decode + (features if guided else 0),
    }
    if guided:
        refeed_key = masked_attention_key_bytes(t.num_kv_heads, t.num_heads, t.head_dim, new,
                                                dtype_bytes)
        refeed = (chunk_transient_bytes(samples, length * refeed_key, ROW_CHUNK_BYTES)
                  + samples * new * (3 * t.intermediate_size + _ROW_HIDDEN_COPIES * t.hidden_size
                                     + 2 * t.num_heads * t.head_dim) * dtype_bytes)
        peaks['unguided'] = guided_cache + max(kv_tokens * prompt + prefill,
                                               guided_cache + refeed)
    expert_key = masked_attention_key_bytes(t.num_kv_heads, e.num_heads, e.head_dim, n,
                                            dtype_bytes)
    expert = (chunk_transient_bytes(rows, length * expert_key, ROW_CHUNK_BYTES)
              + rows * n * (3 * e.intermediate_size + _ROW_HIDDEN_COPIES * e.hidden_size
                            + 2 * e.num_heads * e.head_dim) * dtype_bytes)
    peaks['diffusion'] = kv_tokens * (prompts * prompt + rows * suffix) + expert
    return {phase: peak + held for phase, peak in peaks.items()}


def estimate_graph_bytes(cfg: AlpamayoConfig, dtype_bytes: int, num_samples: int,
                         guided: bool = False, prompt_tokens: int | None = None,
                         new_tokens: int = 0) -> int:
    """Device bytes the resident layers' CUDA graphs keep (model/layer_graphs.py), at most.

    A layer is graphed per input shape of at most `MAX_GRAPHED_TOKENS` tokens: every
    language-model layer for a decode token per sample, for the prompt when it is that short
    (twice with navigation guidance) and for guidance's refeed of `new_tokens` per sample;
    every expert layer for the 64 action tokens per row (2 per sample with guidance). Each
    keeps its input, output, attention output, query, key and value. The shared pool also keeps
    the widest capture's activations (MLP intermediate x 3); the capture stream keeps a cuBLAS
    workspace, and segments round up (`_GRAPH_FIXED`).
    """
    t, e = cfg.text, cfg.expert
    rows = num_samples * (2 if guided else 1)
    shapes = [num_samples]
    if prompt_tokens is not None:
        shapes += [prompt_tokens] * (2 if guided else 1)
    if guided:
        shapes.append(num_samples * new_tokens)
    lm_tokens = [k for k in shapes if k <= MAX_GRAPHED_TOKENS]
    action = rows * cfg.action.n_waypoints
    expert_tokens = action if action <= MAX_GRAPHED_TOKENS else 0
    lm = t.num_layers * sum(lm_tokens) * (2 * t.hidden_size + 2 * t.num_heads * t.head_dim
                                          + 2 * t.num_kv_heads * t.head_dim)
    expert = t.num_layers * expert_tokens * (2 * e.hidden_size + 2 * e.num_heads * e.head_dim
                                             + 2 * t.num_kv_heads * e.head_dim)
    widest = max(max(lm_tokens, default=0) * t.intermediate_size,
                 expert_tokens * e.intermediate_size) * 3
    return (lm + expert + widest) * dtype_bytes + _GRAPH_FIXED
