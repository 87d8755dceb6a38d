"""The `Engine`: a loaded model attached to the offload runtime, and its one inference call.

Node, replay, profiler and CLI all run inference through `Engine.infer`.
"""
from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..model import (
    AlpamayoR1,
    DecodeOptions,
    ImageSizing,
    LayerGraphs,
    ModelError,
    ModelInputError,
    SyntheticTextIds,
    TextEncoder,
    TokenizerDirEncoder,
    fuse_rms_norms,
    generate_text,
    graph_decoder_layers,
    prepare_inputs,
    prepare_vqa_inputs,
    release_camera_slots,
    roll_rotary,
    run_inference,
    sync_vision_once,
)
from ..runtime import (
    BudgetError,
    CompressionCache,
    HostStore,
    LayerFootprint,
    LayerSequence,
    Mode,
    OffloadError,
    OffloadRuntime,
    ResidencyPlan,
    RuntimeStats,
    TensorSource,
    layer_footprint,
)
from .compression_cache import compression_cache
from .config import (
    EMBED_MODULE,
    SEQUENCE_PREFIXES,
    AnswerResult,
    EngineBudgetError,
    EngineConfig,
    EngineError,
    EngineInputError,
    EngineResult,
    ModelInputLike,
)
from .estimates import estimate_prompt_tokens, estimate_working_set, estimated_cameras
from .example import _ExampleInput, example_input
from .identity import _model_identity, driver_version, kernel_settings
from .info import EngineInfo, PlanState
from .loading import _load_model, _module_bytes
from .phases import _PhaseBridge


def _layer_sequences(model: AlpamayoR1) -> list[LayerSequence]:
    """Return the model's layer sequences as the runtime (and a host store) take them."""
    prefixes = model.sequence_prefixes()
    return [LayerSequence(name, layers, prefixes[name])
            for name, layers in model.layer_sequences().items()]


# The layer sequence each of the model's phases runs.
_PHASE_SEQUENCE = {'vision': 'vit', 'prefill': 'lm', 'decode': 'lm', 'unguided': 'lm',
                   'diffusion': 'expert'}
_NO_PLAN = 'no plan attached: the engine is closed, or was loaded without replan'


class Engine:
    """A loaded model attached to an offload runtime; `infer` runs one inference."""

    def __init__(self, config: EngineConfig, model: AlpamayoR1, source: TensorSource | None,
                 encoder: TextEncoder, decoder: TextEncoder | None) -> None:
        self.config = config
        self.model = model
        self.device = torch.device(config.device)
        self._source = source
        self._encoder = encoder
        self._decoder = decoder
        self._runtime: OffloadRuntime | None = None
        self._graphs: LayerGraphs | None = None    # the resident layers' CUDA graphs
        self._plan: PlanState | None = None        # set by replan
        self._inferences = 0
        self._calls_seen = 0
        self._cache: CompressionCache | None = None
        self._cache_resolved = False                # the cache is resolved on first use
        self._layer_bytes = {name: [_module_bytes(m) for m in layers]
                             for name, layers in model.layer_sequences().items()}
        self._handed_over = False                   # set by host_model: no plan afterwards
        self._detach_failed: str | None = None      # why the last plan's detach failed

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_config(cls, config: EngineConfig) -> Engine:
        """Load (or randomly build) the model and attach the runtime with the configured plan."""
        engine = cls.load(config)
        engine.replan(resident=config.resident, compressed=config.compressed, mode=config.mode,
                      budget_bytes=config.budget_bytes, embed_on_host=config.embed_on_host,
                      instrument=config.instrument)
        return engine

    @classmethod
    def load(cls, config: EngineConfig) -> Engine:
        """Load (or randomly build) the model with no plan attached: `replan` attaches one.

        For a caller that may try several plans on one model (the node at start-up, when the
        configured plan does not fit the VRAM left to it): a refused plan costs no reload.
        """
        device = torch.device(config.device)
        if device.type == 'cuda' and not torch.cuda.is_available():
            raise EngineError(f'device {config.device!r} requested but CUDA is not available; '
                              "set device to 'cpu'")
        if device.type == 'cuda':
            # Resident layers are many tensors of many sizes; expandable segments keep the
            # allocator's fragmentation inside the working-set margin (without them a plan with
            # 48 MiB to spare can fail on hundreds of MiB of reserved-but-unallocated blocks).
            torch.cuda.memory._set_allocator_settings('expandable_segments:True')
        if config.deterministic:
            os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
            torch.use_deterministic_algorithms(True)
        try:
            model, source = _load_model(config, device)
            if config.fused_norms:
                fuse_rms_norms(model)
            roll_rotary(model)                  # bit-identical, fewer ops (model/rope.py)
            graph_decoder_layers(model)         # graphs only once enabled (model/layer_graphs.py)
            sync_vision_once(model)             # bit-identical, no sync a block
            encoder: TextEncoder
            if config.tokenizer_dir:
                encoder = TokenizerDirEncoder(config.tokenizer_dir)
                decoder: TextEncoder | None = encoder
            else:
                encoder, decoder = SyntheticTextIds(), None
            if config.pin_all_layers:
                source = HostStore.adopt(_layer_sequences(model), source,
                                         pin=device.type == 'cuda')
        except (ModelError, OSError) as err:
            raise EngineError(f'cannot load model {config.model!r}: {err}') from err
        except OffloadError as err:
            raise EngineError(f'cannot pin the layers of {config.model!r}: {err}') from err
        return cls(config, model, source, encoder, decoder)

    def replan(self, *, resident: Mapping[str, Sequence[int]], mode: str = 'pipelined',
               budget_bytes: int | None = None, embed_on_host: bool = False,
               instrument: bool = False, layer_graphs: bool | None = None,
               stream_graphs: bool | None = None,
               compressed: Mapping[str, Sequence[int]] | None = None,
               compression: str | None = None) -> None:
        """Re-attach the runtime with another plan on the loaded model (no reload).

        `compressed` names layers kept compressed in VRAM; streamed layers stream compressed as
        `compression` (None: `EngineConfig.compression`) says.
        Refuses a plan that cannot fit `budget_bytes` before anything moves (`EngineBudgetError`:
        the model stays loaded, so the caller may try another plan).
        `layer_graphs` False runs this plan's resident layers eagerly (the profiler times them
        so); `stream_graphs` graphs its streamed ones by slot (with `layer_graphs`); None
        follows `EngineConfig`.
        """
        if self._handed_over:
            raise EngineError('the model was handed over to the host (host_model): its layers '
                              'share the host store outside any runtime; load the engine again '
                              'to run a plan')
        if self._detach_failed is not None:
            raise EngineError(f'the previous plan could not be detached ({self._detach_failed}): '
                              'its layers are in an unknown state; load the engine again')
        if self._runtime is not None:
            self._drop_runtime()
            if self.device.type == 'cuda':
                torch.cuda.empty_cache()
        self._place_non_layer(embed_on_host)
        fixed = sum(_module_bytes(m) for name, m in self.model.non_layer_modules().items()
                    if not (embed_on_host and name == EMBED_MODULE))
        working = self.working_set_bytes()
        compression = compression or self.config.compression
        try:
            runtime = OffloadRuntime(
                _layer_sequences(self.model), ResidencyPlan(dict(resident), dict(compressed or {})),
                mode=mode, device=self.device, budget_bytes=budget_bytes, fixed_bytes=fixed,
                working_set_bytes=working, instrument=instrument, compression=compression,
                compression_cache=self._compression_cache() if compression != 'off' else None)
            runtime.attach(self._source)
        except BudgetError as err:
            raise EngineBudgetError(str(err)) from err
        except OffloadError as err:
            raise EngineError(str(err)) from err
        self._runtime = runtime
        graphs = self.device.type == 'cuda' and (
            self.config.layer_graphs if layer_graphs is None else layer_graphs)
        by_slot = graphs and (self.config.stream_graphs if stream_graphs is None
                              else stream_graphs)
        if graphs:
            self._enable_graphs(runtime, by_slot)
        self._inferences = 0
        self._calls_seen = 0
        embed = _module_bytes(self.model.non_layer_modules()[EMBED_MODULE])
        self._plan = PlanState(
            mode=mode, budget_bytes=budget_bytes, embed_on_host=embed_on_host,
            resident={k: tuple(v) for k, v in resident.items()},
            required_bytes=runtime.vram_plan.required_bytes,
            fixed_bytes=fixed - (0 if embed_on_host else embed), working_set_bytes=working,
            layer_graphs=graphs, stream_graphs=by_slot,
            compressed={k: tuple(v) for k, v in (compressed or {}).items()},
            compression=compression)

    def _compression_cache(self) -> CompressionCache | None:
        """Return the on-disk cache of compressed layers (resolved once), or None."""
        if not self._cache_resolved:
            self._cache = compression_cache(self.config, self._dtype(), self.device)
            self._cache_resolved = True
        return self._cache

    def _enable_graphs(self, runtime: OffloadRuntime, streamed: bool) -> None:
        """Graph the resident language-model and expert layers (their weights stay put).

        With `streamed`, the streamed ones too, by the slot they run from.
        """
        if self._graphs is None:
            self._graphs = LayerGraphs(self.device)     # one for the engine's life
        for name, layers in self.model.layer_sequences().items():
            if name in ('lm', 'expert'):
                resident = set(runtime.plan.indices(name))
                self._graphs.enable(layers[i] for i in sorted(resident))
                if streamed:
                    self._graphs.enable((m for i, m in enumerate(layers) if i not in resident),
                                        by_slot=True)

    def _release_graphs(self) -> None:
        """Drop the graphs before the runtime moves the weights they point at."""
        if self._graphs is not None:
            self._graphs.release()

    def _place_non_layer(self, embed_on_host: bool) -> None:
        for name, module in self.model.non_layer_modules().items():
            target = torch.device('cpu') if (embed_on_host and name == EMBED_MODULE) \
                else self.device
            module.to(target)

    def working_set_bytes(self, max_decode_tokens: int | None = None) -> int:
        """Return the working-set term of the VRAM check, for this engine or another limit."""
        if self.config.working_set_bytes is not None:
            return self.config.working_set_bytes
        config = self.config if max_decode_tokens is None else dataclasses.replace(
            self.config, max_decode_tokens=max_decode_tokens)
        return estimate_working_set(self.model.cfg, self._dtype_bytes(), config)

    def _dtype(self) -> torch.dtype:
        return self.model.vlm.model.language_model.norm.weight.dtype

    def _dtype_bytes(self) -> int:
        return self._dtype().itemsize

    def close(self) -> None:
        """Detach the runtime (weights back where they came from)."""
        if self._runtime is not None:
            self._drop_runtime()

    def _drop_runtime(self) -> None:
        """Release the graphs and detach the runtime; the engine holds none afterwards.

        A detach that fails leaves some layers detached and some not: the engine then refuses
        every later plan (`replan` raises `EngineError`) rather than detach them twice or
        attach a plan over weights in an unknown state.
        """
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        self._release_graphs()
        try:
            runtime.detach()
        except BaseException as err:
            self._detach_failed = f'{type(err).__name__}: {err}'
            raise

    def host_model(self, pinned: bool = False) -> AlpamayoR1:
        """Detach and return the model with every weight in host memory, for another runtime.

        The layers become views of the host store (`pin_all_layers`: no copy; its pages made
        pageable again unless `pinned`), or keep the host tensors a random build gave them;
        the non-layer modules move to the CPU. Host memory grows by the non-layer modules at
        most. The engine takes no plan afterwards (`replan` refuses): the weights are the
        caller's. Layers read from a checkpoint at attach (no store) have no host copy to hand
        over: refused with `EngineError`.
        """
        self.close()
        sequences = _layer_sequences(self.model)
        if isinstance(self._source, HostStore):
            try:   # checked and restored first: a refusal leaves the store pinned, re-plannable
                self._source.restore_layers(sequences)
                if not pinned:
                    self._source.unpin()
            except OffloadError as err:
                raise EngineError(f'cannot hand the layers over: {err}') from err
        elif any(t.is_meta for seq in sequences for layer in seq.layers
                 for t in [*layer.parameters(), *layer.buffers()]):
            raise EngineError('the layers have no host copy to hand over (they are read from the '
                              'checkpoint at attach): load with pin_all_layers=True')
        for module in self.model.non_layer_modules().values():
            module.to('cpu')
        self._handed_over = True
        return self.model

    # ---------------------------------------------------------------- inference
    def infer(self, model_input: ModelInputLike, nav_text: str | None = None,
              camera_indices: Sequence[int] | None = None) -> EngineResult:
        """Frames + world-frame ego history -> trajectory in the t0 ego frame, with timings.

        `nav_text` / `camera_indices` (Alpamayo 1.5) default to the input's attributes of those
        names. With a route text and `EngineConfig.guidance_weight` the rollout runs navigation
        guidance; without a route text it runs the plain rollout.
        """
        if self._runtime is None:
            raise EngineError(_NO_PLAN)
        nav_text = nav_text if nav_text is not None else getattr(model_input, 'nav_text', None)
        if camera_indices is None:
            camera_indices = getattr(model_input, 'camera_indices', None)
        t_start = time.perf_counter()
        if self._inferences == 0:
            self._runtime.prime('vit')   # overlap the first copy with preprocessing
        try:
            inputs = prepare_inputs(np.asarray(model_input.images),
                                    np.asarray(model_input.ego_history_xyz, dtype=np.float64),
                                    np.asarray(model_input.ego_history_rot, dtype=np.float64),
                                    self.model.cfg, self._encoder, self.device, self._dtype(),
                                    camera_indices=camera_indices, nav_text=nav_text)
        except ModelInputError as err:
            raise EngineInputError(str(err)) from err
        t_prep = time.perf_counter()
        guided = nav_text is not None and self.config.guidance_weight is not None
        opts = self.config.decode_options(guided)
        cuda = self.device.type == 'cuda'
        bridge = _PhaseBridge(self._runtime, cuda, opts.token_budget,
                              'lm' if guided else 'expert')
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
        timings = self._timings(bridge, t_start, t_prep)
        return EngineResult(
            xyz=xyz[0], rot=rot[0], samples_xyz=xyz, samples_rot=rot,
            coc_token_ids=list(result.coc_token_ids[0]),
            coc_text=result.coc_text[0] if result.coc_text else None,
            decode_tokens=result.decode_steps, timings=timings,
            streaming=self._streaming(bridge.passes), diffusion_steps=result.diffusion_steps,
            nav_text=nav_text, guided=guided, coc_texts=result.coc_text,
            passes=tuple(bridge.pass_seconds()))

    def generate_text(self, images: np.ndarray, question: str,
                      camera_indices: Sequence[int] | None = None, max_new_tokens: int = 256,
                      sample: bool = True, seed: int = 0) -> AnswerResult:
        """Answer a question about camera frames (Alpamayo 1.5 VQA; the expert does not run).

        Sampling as the release does (temperature 0.6, top-p 0.98) unless `sample` is False
        (greedy). The answers are text when the engine has a tokenizer, else only ids.
        """
        if self._runtime is None:
            raise EngineError(_NO_PLAN)
        t_start = time.perf_counter()
        try:
            inputs = prepare_vqa_inputs(np.asarray(images), question, self.model.cfg,
                                        self._encoder, self.device, self._dtype(),
                                        camera_indices=camera_indices)
            opts = DecodeOptions(max_decode_tokens=max_new_tokens, sample=sample, seed=seed)
        except (ModelInputError, ValueError) as err:
            raise EngineInputError(str(err)) from err
        t_prep = time.perf_counter()
        bridge = _PhaseBridge(self._runtime, self.device.type == 'cuda', opts.token_budget,
                              'vit')
        try:
            with torch.inference_mode():
                result = generate_text(self.model, inputs, self.device, opts, observer=bridge,
                                       decoder=self._decoder)
        except ModelInputError as err:
            raise EngineInputError(str(err)) from err
        except (ModelError, RuntimeError) as err:
            raise EngineError(f'question answering failed: {err}') from err
        self._streaming(bridge.passes)   # keeps the per-inference call cursor in step
        return AnswerResult(answers=result.answers, answer_token_ids=result.answer_token_ids,
                            decode_tokens=result.decode_steps,
                            timings=self._timings(bridge, t_start, t_prep))

    def _timings(self, bridge: _PhaseBridge, t_start: float, t_prep: float) -> dict[str, float]:
        """Seconds per stage; navigation guidance's unguided passes count as prefill."""
        phases = bridge.seconds()
        t_end = time.perf_counter()
        model_s = sum(phases.values())
        timings = {'preprocess': t_prep - t_start, **{p: phases.get(p, 0.0) for p in
                   ('vision', 'prefill', 'decode', 'diffusion')},
                   'postprocess': max(0.0, (t_end - t_prep) - model_s), 'total': t_end - t_start}
        timings['prefill'] += phases.get('unguided', 0.0)
        return timings

    def _streaming(self, passes: Mapping[str, int]) -> dict[str, float]:
        """Bytes streamed this inference (exact, from the plan) and DMA/stall time if measured.

        `bytes_streamed` counts the streamed layers' weights delivered to the device
        (uncompressed), `bytes_copied` what crossed the host link (compressed where the layers
        are; nothing for layers kept compressed in VRAM); `.<phase>` splits both by phase
        (navigation guidance's unguided passes count as prefill, as in the timings).
        """
        assert self._runtime is not None
        resident = self._runtime.plan.resident
        preload = self._runtime.mode is Mode.PRELOAD
        per_pass = self._runtime.pass_bytes()
        out = {'bytes_streamed': 0.0, 'bytes_copied': 0.0, 'dma_ms': 0.0, 'stall_ms': 0.0}
        for phase, reps in passes.items():
            name = _PHASE_SEQUENCE.get(phase)
            if name is None:
                continue
            streamed = 0 if preload else reps * sum(
                b for i, b in enumerate(self._layer_bytes[name]) if i not in resident.get(name, ()))
            copied = reps * per_pass.get(name, (0, 0))[1]
            key = 'prefill' if phase == 'unguided' else phase
            for kind, value in (('bytes_streamed', streamed), ('bytes_copied', copied)):
                out[kind] += value
                out[f'{kind}.{key}'] = out.get(f'{kind}.{key}', 0.0) + value
        if self._runtime.instrument:   # this inference's calls: those after the cursor
            calls = self._runtime.stats().calls
            mine = calls[self._calls_seen:] if self._calls_seen <= len(calls) else calls
            self._calls_seen = len(calls)
            out['dma_ms'] = sum(c.dma_ms for c in mine)
            out['stall_ms'] = sum(c.stall_ms for c in mine)
        return out

    def host_layer_bytes(self, sequence: str, index: int) -> torch.Tensor | None:
        """Return a layer's packed bytes in the host store (None: the weights are not in one)."""
        if not isinstance(self._source, HostStore):
            return None
        return self._source.layer_bytes(sequence, index)

    def layer_footprints(self) -> dict[str, list[LayerFootprint]]:
        """Each layer's device bytes resident and streamed, as the runtime's budget check counts."""
        return {name: [layer_footprint(m) for m in layers]
                for name, layers in self.model.layer_sequences().items()}

    def runtime_stats(self, reset: bool = False) -> RuntimeStats:
        """Return the runtime's per-layer statistics since attach or the last reset."""
        if self._runtime is None:
            raise EngineError(_NO_PLAN)
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

    def example_input(self, height: int = 1080, width: int = 1920,
                      presized: bool = False) -> _ExampleInput:
        """Return a fixed input: the family's release cameras x 4 frames, a gentle curve.

        Four cameras (R1, 1.5), six for 2 Super, or `EngineConfig.num_cameras` starting with
        those (`release_camera_slots`), each with its release slot.

        `presized`: frames already resized to the model's size (`image_sizing`), as the node
        delivers them; the model sees the same pixels, and `infer` skips the resize of 16 full
        frames (several hundred ms of CPU per inference).
        """
        cfg = self.model.cfg
        slots = release_camera_slots(cfg, estimated_cameras(cfg, self.config))
        raw = example_input(height, width, len(slots), slots if cfg.camera_text else None)
        if not presized:
            return raw
        sizing = self.image_sizing
        frames = [[np.asarray(sizing.resize(Image.fromarray(f))) for f in cam]
                  for cam in raw.images]
        return dataclasses.replace(raw, images=np.stack([np.stack(cam) for cam in frames]))

    # ---------------------------------------------------------------- reporting
    @property
    def info(self) -> EngineInfo:
        """Model identity, device, VRAM and plan, for diagnostics and reports."""
        plan = self._plan
        if plan is None:
            raise EngineError(_NO_PLAN)
        rt = self._runtime
        embed = self.model.vlm.model.language_model.embed_tokens.weight
        cuda = self.device.type == 'cuda'
        return EngineInfo(
            model=self.config.model,
            model_identity=_model_identity(self.config, self.model),
            device=str(self.device),
            dtype=str(embed.dtype).removeprefix('torch.'),
            mode=plan.mode, budget_bytes=plan.budget_bytes, required_bytes=plan.required_bytes,
            embed_on_host=plan.embed_on_host,
            resident_layers={name: tuple(plan.resident.get(name, ()))
                             for name in SEQUENCE_PREFIXES},
            layers={name: len(sizes) for name, sizes in self._layer_bytes.items()},
            embed_bytes=embed.numel() * embed.element_size(),
            fixed_bytes=plan.fixed_bytes, working_set_bytes=plan.working_set_bytes,
            hidden_size=self.model.cfg.text.hidden_size,
            prompt_tokens=estimate_prompt_tokens(
                self.model.cfg, 4 * estimated_cameras(self.model.cfg, self.config)),
            model_family=self.model.cfg.family,
            num_samples=self.config.num_samples,
            guidance_weight=self.config.guidance_weight,
            diffusion_steps=self.config.decode_options().steps_for(self.model),
            pinned_bytes=rt.pinned_bytes if rt is not None else 0,
            compression=plan.compression,
            compressed_layers={name: tuple(plan.compressed.get(name, ()))
                               for name in SEQUENCE_PREFIXES},
            layer_graphs=self._graphs.captured if self._graphs is not None else 0,
            host_store_bytes=self._source.nbytes if isinstance(self._source, HostStore) else 0,
            torch=torch.__version__, host=platform.node(),
            kernel_settings=kernel_settings(fused_norms=self.config.fused_norms,
                                            layer_graphs=plan.layer_graphs,
                                            stream_graphs=plan.stream_graphs),
            vram_used_bytes=torch.cuda.memory_allocated(self.device) if cuda else 0,
            driver=driver_version() if cuda else '',
            gpu=torch.cuda.get_device_name(self.device) if cuda else '',
            **self._compression_info(rt))

    @staticmethod
    def _compression_info(rt: OffloadRuntime | None) -> dict[str, Any]:
        """Return what compressing the layers cost at the last attach, and the cache it used."""
        if rt is None:
            return {}
        stats, cache = rt.compression_stats, rt.compression_cache
        return {'compression_cache': str(cache.root) if cache is not None else '',
                'compress_s': stats.compress_s, 'compression_cache_hits': stats.cache_hits,
                'compression_cache_read_s': stats.cache_read_s}
