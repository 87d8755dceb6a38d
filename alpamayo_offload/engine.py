"""The one place that connects the Alpamayo model to the offload runtime.

The model reports its passes through the `PhaseObserver` protocol; the engine turns each report
into a runtime hint (which layer sequence runs next, so its first layer is already in flight)
and a timing mark. Node, replay, profiler and CLI all run inference through `Engine.infer`.
"""
from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from .model import (
    AlpamayoConfig,
    AlpamayoR1,
    CheckpointTensorSource,
    DecodeOptions,
    ImageSizing,
    ModelError,
    ModelInputError,
    SyntheticTextIds,
    TextEncoder,
    TokenizerDirEncoder,
    build_meta,
    materialize_random,
    prepare_inputs,
    preset,
    run_inference,
)
from .runtime import (
    LayerSequence,
    Mode,
    OffloadError,
    OffloadRuntime,
    ResidencyPlan,
    RuntimeStats,
    TensorSpec,
)

logger = logging.getLogger(__name__)

# Layer sequences in execution order, with the checkpoint prefix of each (released key names).
SEQUENCE_PREFIXES = {
    'vit': 'vlm.model.visual.blocks.',
    'lm': 'vlm.model.language_model.layers.',
    'expert': 'expert.layers.',
}
EMBED_MODULE = 'vlm.model.language_model.embed_tokens'
STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'postprocess', 'total')
# After a pass of this phase, which sequence runs next (decode/diffusion: while not the last pass).
_NEXT_AFTER = {'vision': 'lm', 'prefill': 'lm', 'decode': 'lm', 'diffusion': 'expert'}
_NEXT_AFTER_LAST = {'decode': 'expert', 'diffusion': 'vit'}
# Working-set margin on top of the estimate below: allocator slack, cuBLAS workspaces.
_WORKING_SET_SLACK = 512 * 2**20


class EngineError(RuntimeError):
    """The engine cannot be built or an inference failed; the message says why and what to do."""


class EngineInputError(EngineError):
    """An input to `Engine.infer` is malformed (shape, dtype, NaN); nothing was run."""


class ModelInputLike(Protocol):
    """What `infer` reads of an input (`assembly.ModelInput` has these fields)."""

    images: np.ndarray                 # (n_cam, 4, H, W, 3) uint8 RGB, cameras in release order
    ego_history_xyz: np.ndarray        # (16, 3) world (odometry) frame, rear axle
    ego_history_rot: np.ndarray        # (16, 3, 3)


@dataclass(frozen=True)
class EngineConfig:
    """What to load and how to run it; validated once.

    `model` is a preset (`tiny`, `full`, `layers=N[,vit=M]`) or a checkpoint directory.
    `dtype` None means bf16 on CUDA and float32 on CPU for presets, as stored for checkpoints.
    `working_set_bytes` None estimates activations + KV cache from the model shape.
    `deterministic` turns on torch's deterministic algorithms process-wide (bit-exact checks).
    """

    model: str = 'tiny'
    device: str = 'cpu'
    mode: str = 'pipelined'
    budget_bytes: int | None = None
    resident: Mapping[str, Sequence[int]] = field(default_factory=dict)
    embed_on_host: bool = False
    tokenizer_dir: str | None = None
    vlm_config: str | None = None
    max_decode_tokens: int = 32
    fixed_decode_tokens: int | None = None
    diffusion_steps: int = 10
    sample: bool = False
    num_samples: int = 1
    seed: int = 0
    dtype: str | None = None
    deterministic: bool = False
    instrument: bool = False
    working_set_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in {m.value for m in Mode}:
            raise ValueError(f"EngineConfig.mode = {self.mode!r}: must be one of "
                             f"{[m.value for m in Mode]}")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ValueError(f'EngineConfig.budget_bytes = {self.budget_bytes}: '
                             'must be > 0 or None')
        unknown = set(self.resident) - set(SEQUENCE_PREFIXES)
        if unknown:
            raise ValueError(f'EngineConfig.resident names {sorted(unknown)}; sequences are '
                             f'{list(SEQUENCE_PREFIXES)}')
        if self.dtype not in (None, 'bfloat16', 'float16', 'float32'):
            raise ValueError(f"EngineConfig.dtype = {self.dtype!r}: must be None, 'bfloat16', "
                             "'float16' or 'float32'")
        try:
            torch.device(self.device)
        except RuntimeError as err:
            raise ValueError(f'EngineConfig.device = {self.device!r}: {err}') from err
        object.__setattr__(self, 'resident',
                           {k: tuple(int(i) for i in v) for k, v in self.resident.items()})

    def decode_options(self) -> DecodeOptions:
        """Return the model's decoding options from this config."""
        return DecodeOptions(max_decode_tokens=self.max_decode_tokens,
                             fixed_decode_tokens=self.fixed_decode_tokens, sample=self.sample,
                             seed=self.seed, num_samples=self.num_samples,
                             diffusion_steps=self.diffusion_steps)


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
    streaming: dict[str, float]        # dma_ms, stall_ms, bytes_streamed


class PhaseClock:
    """PhaseObserver that times each pass (CUDA events on a GPU, else perf_counter).

    Nothing synchronises until `seconds()`. Benchmarks that run the model under other
    offloaders use it too, so every runtime is timed at the same phase boundaries.
    """

    def __init__(self, cuda: bool) -> None:
        self._cuda = cuda
        self.marks: list[tuple[str, Any, Any]] = []
        self.passes: dict[str, int] = {}
        self._open: tuple[str, Any] | None = None

    def _now(self) -> Any:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Start the clock of the pass."""
        self._open = (phase, self._now())

    def phase_end(self, phase: str, index: int) -> None:
        """Close the clock of the pass."""
        if self._open is None or self._open[0] != phase:
            return
        self.marks.append((phase, self._open[1], self._now()))
        self.passes[phase] = self.passes.get(phase, 0) + 1
        self._open = None

    def seconds(self) -> dict[str, float]:
        """Seconds per phase, summed over passes (synchronises on CUDA)."""
        out: dict[str, float] = {}
        for phase, start, end in self.marks:
            if self._cuda:
                end.synchronize()
                dt = start.elapsed_time(end) / 1000.0
            else:
                dt = end - start
            out[phase] = out.get(phase, 0.0) + dt
        return out


class _PhaseBridge(PhaseClock):
    """PhaseClock that also tells the runtime which sequence follows each pass."""

    def __init__(self, runtime: OffloadRuntime | None, cuda: bool, token_budget: int) -> None:
        super().__init__(cuda)
        self._runtime = runtime
        self._token_budget = token_budget

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        """Tell the runtime what follows this pass, then start its clock."""
        if self._runtime is not None:
            nxt = _NEXT_AFTER_LAST.get(phase) if is_last else _NEXT_AFTER.get(phase)
            if phase == 'prefill' and self._token_budget <= 1:
                nxt = 'expert'   # no decode pass follows the prefill
            if nxt is not None:
                self._runtime.hint_next(nxt)
        super().phase_start(phase, index, is_last)


class Engine:
    """A loaded model attached to an offload runtime; `infer` runs one inference."""

    def __init__(self, config: EngineConfig, model: AlpamayoR1, source: _LayerSource | None,
                 encoder: TextEncoder, decoder: TextEncoder | None) -> None:
        self.config = config
        self.model = model
        self.device = torch.device(config.device)
        self._source = source
        self._encoder = encoder
        self._decoder = decoder
        self._runtime: OffloadRuntime | None = None
        self._embed_home = torch.device('cpu')
        self._inferences = 0
        self._calls_seen = 0
        self._layer_bytes = {name: [_module_bytes(m) for m in layers]
                             for name, layers in model.layer_sequences().items()}

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_config(cls, config: EngineConfig) -> Engine:
        """Load (or randomly build) the model and attach the runtime with the configured plan."""
        device = torch.device(config.device)
        if device.type == 'cuda' and not torch.cuda.is_available():
            raise EngineError(f'device {config.device!r} requested but CUDA is not available; '
                              "set device to 'cpu'")
        if device.type == 'cuda':
            # Resident layers are many tensors of many sizes; expandable segments keep the
            # allocator's fragmentation inside the working-set margin (measured on an H200: a
            # plan with 48 MiB to spare failed on 326 MiB of reserved-but-unallocated blocks).
            torch.cuda.memory._set_allocator_settings('expandable_segments:True')
        if config.deterministic:
            os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
            torch.use_deterministic_algorithms(True)
        try:
            model, source = _load_model(config, device)
            encoder: TextEncoder
            if config.tokenizer_dir:
                encoder = TokenizerDirEncoder(config.tokenizer_dir)
                decoder: TextEncoder | None = encoder
            else:
                encoder, decoder = SyntheticTextIds(), None
        except (ModelError, OSError) as err:
            raise EngineError(f'cannot load model {config.model!r}: {err}') from err
        engine = cls(config, model, source, encoder, decoder)
        engine.replan(resident=config.resident, mode=config.mode,
                      budget_bytes=config.budget_bytes, embed_on_host=config.embed_on_host,
                      instrument=config.instrument)
        return engine

    def replan(self, *, resident: Mapping[str, Sequence[int]], mode: str = 'pipelined',
               budget_bytes: int | None = None, embed_on_host: bool = False,
               instrument: bool = False) -> None:
        """Re-attach the runtime with another plan on the loaded model (no reload).

        Refuses a plan that cannot fit `budget_bytes` before anything moves (runtime BudgetError).
        """
        if self._runtime is not None:
            self._runtime.detach()
            self._runtime = None
            if self.device.type == 'cuda':
                torch.cuda.empty_cache()
        self._place_non_layer(embed_on_host)
        fixed = sum(_module_bytes(m) for name, m in self.model.non_layer_modules().items()
                    if not (embed_on_host and name == EMBED_MODULE))
        working = self.config.working_set_bytes
        if working is None:
            working = estimate_working_set(self.model.cfg, self._dtype_bytes(), self.config)
        sequences = [LayerSequence(name, layers, SEQUENCE_PREFIXES[name])
                     for name, layers in self.model.layer_sequences().items()]
        try:
            runtime = OffloadRuntime(
                sequences, ResidencyPlan(dict(resident)), mode=mode, device=self.device,
                budget_bytes=budget_bytes, fixed_bytes=fixed, working_set_bytes=working,
                instrument=instrument)
            runtime.attach(self._source)
        except OffloadError as err:
            raise EngineError(str(err)) from err
        self._runtime = runtime
        self._inferences = 0
        self._calls_seen = 0
        embed = _module_bytes(self.model.non_layer_modules()[EMBED_MODULE])
        self._plan = {'mode': mode, 'budget_bytes': budget_bytes, 'embed_on_host': embed_on_host,
                      'resident': {k: tuple(v) for k, v in resident.items()},
                      'required_bytes': runtime.vram_plan.required_bytes,
                      'fixed_bytes': fixed - (0 if embed_on_host else embed),
                      'working_set_bytes': working}

    def _place_non_layer(self, embed_on_host: bool) -> None:
        for name, module in self.model.non_layer_modules().items():
            target = torch.device('cpu') if (embed_on_host and name == EMBED_MODULE) \
                else self.device
            module.to(target)

    def _dtype_bytes(self) -> int:
        return self.model.vlm.model.language_model.norm.weight.element_size()

    def close(self) -> None:
        """Detach the runtime (weights back where they came from)."""
        if self._runtime is not None:
            self._runtime.detach()
            self._runtime = None

    # ---------------------------------------------------------------- inference
    def infer(self, model_input: ModelInputLike) -> EngineResult:
        """Frames + world-frame ego history -> trajectory in the t0 ego frame, with timings."""
        if self._runtime is None:
            raise EngineError('engine is closed')
        t_start = time.perf_counter()
        if self._inferences == 0:
            self._runtime.prime('vit')   # overlap the first copy with preprocessing
        try:
            inputs = prepare_inputs(np.asarray(model_input.images),
                                    np.asarray(model_input.ego_history_xyz, dtype=np.float64),
                                    np.asarray(model_input.ego_history_rot, dtype=np.float64),
                                    self.model.cfg, self._encoder)
        except ModelInputError as err:
            raise EngineInputError(str(err)) from err
        t_prep = time.perf_counter()
        opts = self.config.decode_options()
        cuda = self.device.type == 'cuda'
        bridge = _PhaseBridge(self._runtime, cuda, opts.token_budget)
        try:
            with torch.inference_mode():
                result = run_inference(self.model, inputs, self.device, opts, observer=bridge,
                                       decoder=self._decoder)
        except ModelInputError as err:
            raise EngineInputError(str(err)) from err
        except (ModelError, RuntimeError) as err:
            raise EngineError(f'inference failed: {err}') from err
        self._inferences += 1
        xyz = result.xyz.double().numpy()
        rot = result.rot.double().numpy()
        if not (np.isfinite(xyz).all() and np.isfinite(rot).all()):
            raise EngineError('the model produced a non-finite trajectory')
        phases = bridge.seconds()
        t_end = time.perf_counter()
        model_s = sum(phases.values())
        timings = {'preprocess': t_prep - t_start, **{p: phases.get(p, 0.0) for p in
                   ('vision', 'prefill', 'decode', 'diffusion')},
                   'postprocess': max(0.0, (t_end - t_prep) - model_s), 'total': t_end - t_start}
        return EngineResult(
            xyz=xyz[0], rot=rot[0], samples_xyz=xyz, samples_rot=rot,
            coc_token_ids=list(result.coc_token_ids[0]),
            coc_text=result.coc_text[0] if result.coc_text else None,
            decode_tokens=result.decode_steps, timings=timings,
            streaming=self._streaming(bridge.passes))

    def _streaming(self, passes: Mapping[str, int]) -> dict[str, float]:
        """Bytes streamed this inference (exact, from the plan) and DMA/stall time if measured."""
        assert self._runtime is not None
        reps = {'vit': passes.get('vision', 0),
                'lm': passes.get('prefill', 0) + passes.get('decode', 0),
                'expert': passes.get('diffusion', 0)}
        resident = self._runtime.plan.resident
        if self._runtime.mode is Mode.PRELOAD:
            streamed = 0
        else:
            streamed = sum(reps[name] * sum(b for i, b in enumerate(sizes)
                                            if i not in resident.get(name, ()))
                           for name, sizes in self._layer_bytes.items())
        out = {'bytes_streamed': float(streamed), 'dma_ms': 0.0, 'stall_ms': 0.0}
        if self._runtime.instrument:   # this inference's calls: those after the cursor
            calls = self._runtime.stats().calls
            mine = calls[self._calls_seen:] if self._calls_seen <= len(calls) else calls
            self._calls_seen = len(calls)
            out['dma_ms'] = sum(c.dma_ms for c in mine)
            out['stall_ms'] = sum(c.stall_ms for c in mine)
        return out

    def runtime_stats(self, reset: bool = False) -> RuntimeStats:
        """Return the runtime's per-layer statistics since attach or the last reset."""
        if self._runtime is None:
            raise EngineError('engine is closed')
        stats = self._runtime.stats()
        if reset:
            self._runtime.reset_stats()
            self._calls_seen = 0
        return stats

    @property
    def image_sizing(self) -> ImageSizing:
        """How the model's processor sizes frames: `resize` a frame with it ahead of `infer`.

        A frame resized so gives the model the same pixels as the full frame (and skips the
        resize in `infer`'s preprocessing).
        """
        return ImageSizing.of(self.model.cfg)

    def example_input(self, height: int = 1080, width: int = 1920) -> _ExampleInput:
        """Return a fixed input: 4 cameras x 4 frames of moving gradients, a gentle curve."""
        return example_input(height, width)

    # ---------------------------------------------------------------- reporting
    @property
    def info(self) -> dict[str, Any]:
        """Model identity, device, VRAM and plan, for diagnostics and reports."""
        cfg = self.model.cfg
        rt = self._runtime
        embed = self.model.vlm.model.language_model.embed_tokens.weight
        info: dict[str, Any] = {
            'model': self.config.model,
            'model_identity': _model_identity(self.config, self.model),
            'device': str(self.device),
            'dtype': str(embed.dtype).removeprefix('torch.'),
            'mode': self._plan['mode'],
            'budget_bytes': self._plan['budget_bytes'],
            'required_bytes': self._plan['required_bytes'],
            'embed_on_host': self._plan['embed_on_host'],
            'resident_layers': {name: list(self._plan['resident'].get(name, ()))
                                for name in SEQUENCE_PREFIXES},
            'layers': {name: len(sizes) for name, sizes in self._layer_bytes.items()},
            'embed_bytes': embed.numel() * embed.element_size(),
            # The runtime's VRAM terms, so a planner budgets exactly as the runtime checks.
            'fixed_bytes': self._plan['fixed_bytes'],
            'working_set_bytes': self._plan['working_set_bytes'],
            'hidden_size': cfg.text.hidden_size,
            'prompt_tokens': estimate_prompt_tokens(cfg),
            'pinned_bytes': rt.pinned_bytes if rt is not None else 0,
            'torch': torch.__version__,
            'host': platform.node(),
            'vram_used_bytes': 0,
            'driver': '',
        }
        if self.device.type == 'cuda':
            info['vram_used_bytes'] = torch.cuda.memory_allocated(self.device)
            info['gpu'] = torch.cuda.get_device_name(self.device)
            info['driver'] = _driver_version()
        return info


# -------------------------------------------------------------------- helpers
def _module_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in
               [*module.parameters(), *module.buffers()])


def _resolve_dtype(config: EngineConfig, device: torch.device) -> torch.dtype | None:
    if config.dtype is not None:
        return getattr(torch, config.dtype)
    return None


class _LayerSource:
    """The runtime's `TensorSource` over a checkpoint: reads layer tensors straight into place.

    Tensors arrive as stored; only an explicit `EngineConfig.dtype` casts (through a temporary
    of one tensor).
    """

    def __init__(self, checkpoint: CheckpointTensorSource, dtype: torch.dtype | None) -> None:
        self._checkpoint = checkpoint
        self._dtype = dtype

    def keys(self) -> list[str]:
        """Names of every tensor in the checkpoint."""
        return self._checkpoint.keys()

    def spec(self, name: str) -> TensorSpec:
        """Shape and (target) dtype of tensor `name`."""
        stored = self._checkpoint.dtype(name)
        dtype = self._dtype if (self._dtype is not None and stored.is_floating_point) else stored
        return TensorSpec(tuple(self._checkpoint.shape(name)), dtype)

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Copy tensor `name` into `out` (pinned region or device storage)."""
        if out.dtype == self._checkpoint.dtype(name):
            self._checkpoint.read_into(name, out)
        else:
            out.copy_(self._checkpoint.read(name))


def _load_model(config: EngineConfig,
                device: torch.device) -> tuple[AlpamayoR1, _LayerSource | None]:
    """Build a preset with random weights (home in host RAM), or a checkpoint, layers on meta.

    Checkpoint layers stay on `meta`: the runtime fills each straight into its pinned region or
    its resident GPU storage from the safetensors source, so the weights are never held twice.
    """
    path = Path(config.model)
    if path.is_dir():
        cfg = AlpamayoConfig.from_dir(path, config.vlm_config)
        source = CheckpointTensorSource(path)
        dtype = _resolve_dtype(config, device)
        model = build_meta(cfg, dtype or source.dtype(
            'vlm.model.language_model.norm.weight'))
        _load_non_layer(model, source, dtype)
        return model.eval(), _LayerSource(source, dtype)
    try:
        cfg = preset(config.model)
    except (ModelError, ValueError) as err:
        raise EngineError(f'model {config.model!r} is neither a checkpoint directory nor a '
                          f"preset ('tiny', 'full', 'layers=N[,vit=M]'): {err}") from err
    dtype = _resolve_dtype(config, device) or (
        torch.bfloat16 if device.type == 'cuda' else torch.float32)
    # Random init on the target device (fast on a GPU), then the weights' home is host RAM.
    model = materialize_random(build_meta(cfg, dtype), config.seed, device)
    if device.type == 'cuda':
        model.to('cpu')
        torch.cuda.empty_cache()
    return model.eval(), None


def _load_non_layer(model: AlpamayoR1, source: CheckpointTensorSource,
                    dtype: torch.dtype | None) -> None:
    """Materialise every tensor outside the layer sequences from the checkpoint, on the host."""
    layer_prefixes = tuple(SEQUENCE_PREFIXES.values())
    state = {}
    available = set(source.keys())
    for key, meta in model.state_dict().items():
        if key.startswith(layer_prefixes) or key not in available:
            continue
        value = source.read(key)
        if dtype is not None and value.is_floating_point() and not key.startswith('action_space.'):
            value = value.to(dtype)
        state[key] = value
        del meta
    model.load_state_dict(state, strict=False, assign=True)
    missing = {k for k, t in model.state_dict().items()
               if t.is_meta and not k.startswith(layer_prefixes)}
    freqs_dtype = model.action_in_proj.encoder.trunk[0].weight.dtype
    model.rebuild_buffers(torch.device('cpu'), freqs_dtype, names=missing)


def estimate_prompt_tokens(cfg: AlpamayoConfig, n_images: int = 16, height: int = 1080,
                           width: int = 1920) -> int:
    """Prompt length for `n_images` camera frames of the given size (release layout)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    factor = cfg.vision.patch_size * cfg.vision.spatial_merge_size
    h, w = smart_resize(height, width, factor=factor, min_pixels=cfg.tokens.min_pixels,
                        max_pixels=cfg.tokens.max_pixels)
    per_image = (h // factor) * (w // factor)
    return n_images * (per_image + 2) + cfg.tokens.tokens_per_history_traj + 2 + 60


def estimate_working_set(cfg: AlpamayoConfig, dtype_bytes: int, config: EngineConfig) -> int:
    """Device bytes for activations and the KV cache of one inference, plus allocator slack.

    KV cache: 2 x layers x kv_heads x head_dim x (prompt + tokens + 64 action tokens) per sample.
    Activations: the prefill's widest tensors (MLP intermediate x 3, hidden x 6) and the ViT's.
    """
    t = cfg.text
    tokens = estimate_prompt_tokens(cfg) + config.max_decode_tokens + 1 + 64
    kv = 2 * t.num_layers * t.num_kv_heads * t.head_dim * tokens * dtype_bytes * config.num_samples
    prefill = tokens * (3 * t.intermediate_size + 6 * t.hidden_size) * dtype_bytes
    logits = config.num_samples * cfg.text.vocab_size * 4 * 4
    return kv + prefill + logits + _WORKING_SET_SLACK


def _model_identity(config: EngineConfig, model: AlpamayoR1) -> str:
    n = sum(p.numel() for p in model.parameters())
    kind = 'checkpoint' if Path(config.model).is_dir() else f'preset seed={config.seed}'
    return f'alpamayo_r1 {config.model} ({kind}, {n} parameters)'


def _driver_version() -> str:
    try:
        return str(torch.cuda.driver_version())  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return ''


@dataclass(frozen=True)
class _ExampleInput:
    images: np.ndarray
    ego_history_xyz: np.ndarray
    ego_history_rot: np.ndarray


def example_input(height: int = 1080, width: int = 1920, n_cameras: int = 4) -> _ExampleInput:
    """Return a deterministic input of the release shape: moving gradients, 8 m/s on a curve."""
    yy, xx = np.mgrid[0:height, 0:width]
    images = np.empty((n_cameras, 4, height, width, 3), dtype=np.uint8)
    for c in range(n_cameras):
        for f in range(4):
            shift = 7 * f + 31 * c
            images[c, f, ..., 0] = (xx + shift) % 256
            images[c, f, ..., 1] = (yy + 2 * shift) % 256
            images[c, f, ..., 2] = (xx + yy + 3 * shift) % 256
    times = np.arange(-15, 1) * 0.1
    yaw = 0.05 * times
    xyz = np.stack([8.0 * np.sin(yaw) / 0.05, 8.0 * (1 - np.cos(yaw)) / 0.05,
                    np.zeros_like(times)], axis=-1)
    rot = np.zeros((16, 3, 3))
    rot[:, 0, 0] = np.cos(yaw)
    rot[:, 0, 1] = -np.sin(yaw)
    rot[:, 1, 0] = np.sin(yaw)
    rot[:, 1, 1] = np.cos(yaw)
    rot[:, 2, 2] = 1.0
    return _ExampleInput(images, xyz, rot)
