"""The engine's public types: its errors, what to load and how to run it, what an inference returns.

Kept apart from the `Engine` so callers, tests and doubles can name them without the machinery.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ..model import DecodeOptions
from ..runtime import Compression, Mode

# Layer sequences in execution order, with R1's checkpoint prefix of each (released key names);
# a model's own prefixes (2 Super's expert: `expert.expert.layers.`) are its `sequence_prefixes()`.
SEQUENCE_PREFIXES = {
    'vit': 'vlm.model.visual.blocks.',
    'lm': 'vlm.model.language_model.layers.',
    'expert': 'expert.layers.',
}
EMBED_MODULE = 'vlm.model.language_model.embed_tokens'


class EngineError(RuntimeError):
    """The engine cannot be built or an inference failed; the message says why and what to do."""


class EngineInputError(EngineError):
    """An input to `Engine.infer` is malformed (shape, dtype, NaN); nothing was run."""


class EngineBudgetError(EngineError):
    """The runtime refused a plan: it needs more VRAM than the budget; nothing was moved."""


class ModelInputLike(Protocol):
    """What `infer` reads of an input (`assembly.ModelInput` has these fields)."""

    images: np.ndarray                 # (n_cam, 4, H, W, 3) uint8 RGB, cameras in release order
    ego_history_xyz: np.ndarray        # (16, 3) world (odometry) frame, rear axle
    ego_history_rot: np.ndarray        # (16, 3, 3)
    # Optional (read with getattr): `camera_indices` (release slots 0..6 of the cameras, 1.5)
    # and `nav_text` (route text, 1.5; None = no route).


@dataclass(frozen=True)
class EngineConfig:
    """What to load and how to run it; validated once.

    `model` is a preset (`tiny`, `full`, `tiny-1.5`, `tiny-2super`, `2super`, ...,
    `layers=N[,vit=M][,family=...]`) or a checkpoint directory.
    `dtype` None means bf16 on CUDA and float32 on CPU for presets, as stored for checkpoints.
    `working_set_bytes` None estimates activations + KV cache from the model shape.
    `diffusion_steps` None runs the model's own flow-matching steps (a checkpoint's
    `diffusion_cfg.num_inference_steps`; 10 for the presets); a number overrides them.
    `deterministic` turns on torch's deterministic algorithms process-wide (bit-exact checks).
    `fused_norms` runs Qwen3-VL's RMSNorms as one `F.rms_norm` op (model/norms.py: fewer kernels
    for the host to issue, one bfloat16 step off HF's op-by-op norm in some outputs on CUDA).
    `layer_graphs` replays the fixed-shape parts of resident language-model and expert layers
    as CUDA graphs in decode and diffusion (model/layer_graphs.py: fewer kernels for the host
    to issue, bit-identical output); CUDA only. `stream_graphs` graphs the streamed ones too,
    by the slot they run from (one slot's graphs serve every layer of a sequence streamed
    through it; on by default: bit-identical, and eager streamed layers made diffusion
    host-bound: issuing their kernels took the host longer than copying the layers).
    `compression` compresses streamed layers losslessly once at attach and decompresses them on
    the GPU before each pass (runtime/codec.py): `auto` where nvCOMP imports on CUDA, else raw
    with one log line; `on` requires nvCOMP on CUDA (the zlib codec on the CPU); `off` (the
    default until the planner prices decompression) streams raw.
    `compressed` names layers kept compressed in VRAM (decompressed into a slot each pass).
    `compression_cache` keeps the compressed layers on disk so a second start skips compressing
    them (engine/compression_cache.py): 'auto' (next to a checkpoint where writable, else the
    user's cache directory; nothing for presets), 'off', or a directory.
    `guidance_weight` (Alpamayo 1.5) runs navigation classifier-free guidance with this weight
    whenever an input carries navigation text (None: off; the official notebook uses 1.5);
    `noise_temperature` scales the initial flow-matching noise (the notebook's nav runs: 0.6).
    `num_cameras` sizes the working-set estimate's prompt (1.5 and 2 Super take 1-7 cameras);
    None: the family's release profile (four cameras, six for 2 Super).
    `pin_all_layers` packs every layer once into one pinned host store (runtime/store.py), so
    `Engine.replan` re-attaches without re-pinning and re-copying the streamed layers; all the
    layers' bytes then stay pinned (the memlock limit must cover the whole model).
    """

    model: str = 'tiny'
    device: str = 'cpu'
    mode: str = 'pipelined'
    budget_bytes: int | None = None
    resident: Mapping[str, Sequence[int]] = field(default_factory=dict)
    compressed: Mapping[str, Sequence[int]] = field(default_factory=dict)
    compression: str = 'off'
    compression_cache: str = 'auto'
    embed_on_host: bool = False
    tokenizer_dir: str | None = None
    vlm_config: str | None = None
    max_decode_tokens: int = 32
    fixed_decode_tokens: int | None = None
    diffusion_steps: int | None = None
    sample: bool = False
    num_samples: int = 1
    guidance_weight: float | None = None
    noise_temperature: float = 1.0
    num_cameras: int | None = None
    seed: int = 0
    dtype: str | None = None
    deterministic: bool = False
    fused_norms: bool = True
    layer_graphs: bool = True
    stream_graphs: bool = True
    pin_all_layers: bool = False
    instrument: bool = False
    working_set_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in {m.value for m in Mode}:
            raise ValueError(f"EngineConfig.mode = {self.mode!r}: must be one of "
                             f"{[m.value for m in Mode]}")
        if self.diffusion_steps is not None and self.diffusion_steps < 1:
            raise ValueError(f'EngineConfig.diffusion_steps = {self.diffusion_steps}: must be '
                             ">= 1, or None for the model's own")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ValueError(f'EngineConfig.budget_bytes = {self.budget_bytes}: '
                             'must be > 0 or None')
        for name in ('resident', 'compressed'):
            unknown = set(getattr(self, name)) - set(SEQUENCE_PREFIXES)
            if unknown:
                raise ValueError(f'EngineConfig.{name} names {sorted(unknown)}; sequences are '
                                 f'{list(SEQUENCE_PREFIXES)}')
        if self.compression not in {c.value for c in Compression}:
            raise ValueError(f'EngineConfig.compression = {self.compression!r}: must be one of '
                             f'{[c.value for c in Compression]}')
        if not isinstance(self.compression_cache, str) or not self.compression_cache.strip():
            raise ValueError(f'EngineConfig.compression_cache = {self.compression_cache!r}: '
                             "must be 'auto', 'off' or a directory")
        if self.dtype not in (None, 'bfloat16', 'float16', 'float32'):
            raise ValueError(f"EngineConfig.dtype = {self.dtype!r}: must be None, 'bfloat16', "
                             "'float16' or 'float32'")
        if self.num_cameras is not None and not 1 <= self.num_cameras <= 7:
            raise ValueError(f'EngineConfig.num_cameras = {self.num_cameras}: must be 1..7')
        if self.num_samples < 1:
            raise ValueError(f'EngineConfig.num_samples = {self.num_samples}: must be >= 1')
        try:
            torch.device(self.device)
        except RuntimeError as err:
            raise ValueError(f'EngineConfig.device = {self.device!r}: {err}') from err
        object.__setattr__(self, 'resident',
                           {k: tuple(int(i) for i in v) for k, v in self.resident.items()})
        object.__setattr__(self, 'compressed',
                           {k: tuple(int(i) for i in v) for k, v in self.compressed.items()})

    def decode_options(self, guided: bool = False) -> DecodeOptions:
        """Return the model's decoding options; `guided`: this input has navigation text."""
        return DecodeOptions(max_decode_tokens=self.max_decode_tokens,
                             fixed_decode_tokens=self.fixed_decode_tokens, sample=self.sample,
                             seed=self.seed, num_samples=self.num_samples,
                             diffusion_steps=self.diffusion_steps,
                             guidance_weight=self.guidance_weight if guided else None,
                             noise_temperature=self.noise_temperature)


@dataclass
class EngineResult:
    """One inference: the first sample's trajectory, every sample, reasoning, timings."""

    xyz: np.ndarray                    # (64, 3) float64, t0 ego frame (rear axle), metres
    rot: np.ndarray                    # (64, 3, 3)
    samples_xyz: np.ndarray            # (S, 64, 3)
    samples_rot: np.ndarray            # (S, 64, 3, 3)
    coc_token_ids: list[int]
    coc_text: str | None
    decode_tokens: int
    timings: dict[str, float]          # seconds per stage (STAGES)
    streaming: dict[str, float]        # dma_ms, stall_ms, bytes_streamed, bytes_copied (+ .phase)
    diffusion_steps: int               # flow-matching steps run
    nav_text: str | None = None        # the route text this inference used (None: no route)
    guided: bool = False               # navigation guidance ran (a weight and a route text)
    coc_texts: list[str] | None = None  # every sample's reasoning text (decoded when possible)
    # Every pass of the model as (phase, seconds), in order; unlike `timings`, navigation
    # guidance's two 'unguided' passes stand apart (the profiler times each).
    passes: tuple[tuple[str, float], ...] = ()


@dataclass
class AnswerResult:
    """One question answered (`Engine.generate_text`)."""

    answers: list[str] | None          # per sample, decoded when a tokenizer is configured
    answer_token_ids: list[list[int]]  # per sample: the answer ids (see model TextResult)
    decode_tokens: int
    timings: dict[str, float]          # seconds: preprocess, vision, prefill, decode, total
