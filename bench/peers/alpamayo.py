"""The Alpamayo-R1 rows: our engine's modes and the HF peers on one loaded model.

The engine builds the full-size model once (random weights from a seed, home in host RAM), or
the bench adopts an engine another benchmark loaded and handed over (`Engine.host_model`: its
layers are views of the engine's host store, so the model is never held twice; only peer rows
run then). Our rows re-attach the engine's runtime with another plan (`Engine.replan`); a peer
row closes the engine, wraps the same module tree, and is removed again before the next row,
after which `HomeCopy.restore` puts back the very same host tensors.
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from alpamayo_offload.engine import Engine, EngineConfig, PhaseClock
from alpamayo_offload.engine.identity import driver_version, kernel_settings
from alpamayo_offload.model import SyntheticTextIds, prepare_inputs, run_inference
from alpamayo_offload.planning.identity import model_identity
from alpamayo_offload.planning.planner import PlannerOptions, plan, vram_needed
from alpamayo_offload.planning.predictor import Pipeline, Placement, Workload, predict
from alpamayo_offload.planning.profile import Profile, check_profile, load_profile, save_profile
from alpamayo_offload.profiling.gpu_profile import add_host_terms, profile_engine

from . import hf_peers
from .home import HomeCopy, release_memory
from .measure import Deadline, RunOutput
from .rows import GIB, OURS, RowSpec
from .runner import Repeats, RowBench, RowSkippedError, cap_vram

LOG = logging.getLogger(__name__)
EMBED = 'vlm.model.language_model.embed_tokens'
_DIFFUSERS_ROOTS = ('vlm.model.visual', 'vlm.model.language_model', 'expert')
_NO_SPLIT = ('Qwen3VLVisionBlock', 'Qwen3VLTextDecoderLayer')


@dataclass(frozen=True)
class AlpamayoSettings:
    """What the Alpamayo rows share: model, workload, repeats, Accelerate headroom."""

    model: str = 'full'
    device: str = 'cuda'
    decode_tokens: int = 21
    diffusion_steps: int = 10
    image_hw: tuple[int, int] = (1080, 1920)
    repeats: Repeats = Repeats()
    accel_headroom_gib: float = 4.0
    profile_path: str | None = None
    out_dir: str | None = None

    def __post_init__(self) -> None:
        if self.decode_tokens < 0 or self.diffusion_steps < 1:
            raise ValueError(f'AlpamayoSettings: decode_tokens = {self.decode_tokens} must be '
                             f'>= 0 and diffusion_steps = {self.diffusion_steps} >= 1')


class AlpamayoBench(RowBench):
    """Builds the model once and runs any row of the Alpamayo schedule on it."""

    model_name = 'alpamayo'

    def __init__(self, settings: AlpamayoSettings, deadline: Deadline,
                 engine: Engine | None = None, model_input: Any = None) -> None:
        """Build the model, or adopt `engine` (handed over: `Engine.host_model`) and run
        `model_input` on it, with the engine's options but the settings' decode tokens and
        diffusion steps (no profile: peer rows only)."""
        super().__init__(deadline, settings.repeats, settings.accel_headroom_gib)
        self.s = settings
        self.device = torch.device(settings.device)
        self.cuda = self.device.type == 'cuda'
        start = time.perf_counter()
        self.encoder = SyntheticTextIds()
        self.profile: Profile | None = None
        if engine is None:
            self.config = EngineConfig(
                model=settings.model, device=settings.device, mode='sequential', resident={},
                max_decode_tokens=max(1, settings.decode_tokens),
                fixed_decode_tokens=settings.decode_tokens,
                diffusion_steps=settings.diffusion_steps, seed=0, instrument=self.cuda)
            self.engine = Engine.from_config(self.config)
            if self.cuda:
                torch.cuda.synchronize()
            self.model_input = self.engine.example_input(*settings.image_hw)
            self.profile = self._profile() if self.cuda else None
            self.engine.close()
            for module in self.engine.model.non_layer_modules().values():
                module.to('cpu')
        else:
            self.config = dataclasses.replace(
                engine.config, fixed_decode_tokens=settings.decode_tokens,
                diffusion_steps=settings.diffusion_steps)
            self.engine, self.model_input = engine, model_input
        self.build_s = time.perf_counter() - start
        self.model = self.engine.model
        self.dtype = self.model.vlm.model.language_model.norm.weight.dtype
        self.workload = Workload(
            self.profile.measured_passes('decode') if self.profile else settings.decode_tokens,
            settings.diffusion_steps)
        self.home = HomeCopy(self.model)
        LOG.info('model built in %.1f s (%.2f GiB home copy)', self.build_s,
                 self.home.nbytes / GIB)

    def _profile(self) -> Profile:
        if self.s.profile_path:
            profile, _ = load_profile(self.s.profile_path)
            # This process sets CUBLAS_WORKSPACE_CONFIG for its deterministic passes: a profile
            # taken without it (bench_planner's) warns that its timings may not hold here.
            check_profile(profile, gpu_name=torch.cuda.get_device_name(),
                          model_identity=model_identity(self.s.model),
                          driver=driver_version() or None,
                          kernel_settings=kernel_settings(fused_norms=self.config.fused_norms))
            # The host's pre/postprocessing depends on this bench's input (raw 1080p frames),
            # not on the plan: measured here, as a profile from bench_planner (presized
            # frames) would leave ~0.5 s of resizing out of every prediction.
            host = statistics.median(
                1000 * (r.timings['preprocess'] + r.timings['postprocess'])
                for r in (self.engine.infer(self.model_input) for _ in range(2)))
            LOG.info('host pre/postprocess of this input: %.0f ms (profile: %.0f ms)', host,
                     profile.host_ms)
            return dataclasses.replace(profile, host_ms=host)
        profile = profile_engine(self.engine, model=self.s.model,
                                 loaded_bytes=torch.cuda.memory_allocated(), warmup=1,
                                 settings={'decode_tokens': self.s.decode_tokens,
                                           'diffusion_steps': self.s.diffusion_steps})
        # Host pre/postprocessing and per-call issue times, as `alpamayo-offload profile` adds
        # them: the rows' end-to-end figures include preprocessing (0.4-0.7 s on the H200 VM).
        profile = add_host_terms(self.engine, self.model_input, profile, runs=2)
        if self.s.out_dir:
            save_profile(profile, f'{self.s.out_dir}/profile.json')
        return profile

    def teardown(self) -> None:
        """Detach whatever is attached and put the home weights back."""
        self.engine.close()
        if self.peer is not None:
            self.peer.remove()
            self.peer = None
        self.current = None
        self.home.restore()

    def prepare(self, spec: RowSpec, headroom_gib: float) -> dict[str, Any]:
        """Re-plan our engine, or attach (or reuse) a peer, under the row's cap."""
        if spec.runtime in OURS:
            return self._prepare_ours(spec)
        if self.reuses(spec):
            return self.reuse_peer(spec)
        self.teardown()
        package = spec.runtime.split('-')[0]
        if not hf_peers.available(package):
            raise RowSkippedError(f'{package} is not importable here')
        cap_vram(spec.cap_bytes)
        self.peer = self._attach_peer(spec, headroom_gib)
        self.current = (spec.runtime, spec.cap_gib)
        return {'setup_s': self.peer.setup_s, 'detail': self.peer.detail,
                **({'headroom_gib': headroom_gib}
                   if spec.runtime == 'accelerate-device-map' else {})}

    def _prepare_ours(self, spec: RowSpec) -> dict[str, Any]:
        self.teardown()                     # every row starts from the home weights
        mode = {'preload': 'preload', 'ours-sequential': 'sequential'}.get(spec.runtime,
                                                                           'pipelined')
        placement, predicted, extra = self._placement(spec)
        cap_vram(spec.cap_bytes)
        start = time.perf_counter()
        self.engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                           mode=mode, budget_bytes=spec.cap_bytes,
                           embed_on_host=placement.embed_on_host, instrument=False)
        if self.cuda:
            torch.cuda.synchronize()
        self.current = (spec.runtime, spec.cap_gib)
        info = self.engine.info
        return {'setup_s': time.perf_counter() - start, 'predicted_s': predicted,
                'registered_pinned_bytes': info.pinned_bytes,
                'required_bytes': info.required_bytes,
                'detail': {'resident': {s: list(placement.indices(s))
                                        for s in ('vit', 'lm', 'expert')},
                           'embed_on_host': placement.embed_on_host, **extra}}

    def _placement(self, spec: RowSpec) -> tuple[Placement, float | None, dict[str, Any]]:
        if spec.runtime == 'preload':
            return Placement.of(), None, {}
        if spec.runtime == 'ours-planned':
            if self.profile is None or spec.cap_bytes is None:
                raise RowSkippedError('the planned row needs a GPU profile and a cap')
            result = plan(self.profile, spec.cap_bytes, PlannerOptions(workload=self.workload))
            return result.placement, result.prediction.total_s, {
                'strategy': result.strategy, 'planned_vram_bytes': result.vram.total}
        placement = Placement.of()
        if self.profile is None:
            return placement, None, {}
        pipeline = Pipeline.SEQUENTIAL if spec.runtime == 'ours-sequential' \
            else Pipeline.PIPELINED
        return placement, predict(self.profile, placement, self.workload, pipeline).total_s, {
            'planned_vram_bytes': vram_needed(self.profile, placement).total}

    def _attach_peer(self, spec: RowSpec, headroom_gib: float) -> hf_peers.Attached:
        model, device = self.model, self.device
        named = dict(model.named_modules())
        if spec.runtime == 'accelerate-device-map':
            if spec.cap_bytes is None:
                raise RowSkippedError('Accelerate device_map rows need a cap')
            max_memory = spec.cap_bytes - int(headroom_gib * GIB)
            if max_memory <= 0:
                raise hf_peers.PeerError(f'cap {spec.cap_gib} GiB leaves no max_memory after '
                                         f'{headroom_gib} GiB headroom')
            no_split = list(getattr(model.vlm, '_no_split_modules', None) or _NO_SPLIT)
            return hf_peers.attach_device_map(
                model, device, max_memory, no_split, keep_on_device=(EMBED,),
                skip_keys=getattr(model.vlm, '_skip_keys_device_placement', None))
        if spec.runtime == 'accelerate-cpu-offload':
            return hf_peers.attach_cpu_offload(model, device, keep_on_device=(named[EMBED],))
        roots = [named[r] for r in _DIFFUSERS_ROOTS]
        outside = [m for name, m in model.non_layer_modules().items()
                   if not name.startswith(_DIFFUSERS_ROOTS)]
        return hf_peers.attach_group_offloading(
            model, device, roots,
            'block_level' if spec.runtime == 'diffusers-block' else 'leaf_level',
            keep_on_device=outside, pull_out=(named[EMBED],))

    # ------------------------------------------------------------------ inference
    def infer(self, spec: RowSpec) -> RunOutput:
        """One inference through the engine (ours) or `run_inference` (peers)."""
        return self._engine_infer() if spec.runtime in OURS else self._peer_infer()

    def _engine_infer(self) -> RunOutput:
        result = self.engine.infer(self.model_input)
        return RunOutput({'xyz': result.xyz, 'rot': result.rot}, dict(result.timings))

    def _peer_infer(self) -> RunOutput:
        """What `Engine.infer` does, on a model that a peer has wrapped (same inputs, options:
        the pixels prepared on the device in the model's dtype, the route text if any)."""
        t_start = time.perf_counter()
        x = self.model_input
        nav_text = getattr(x, 'nav_text', None)
        inputs = prepare_inputs(np.asarray(x.images), np.asarray(x.ego_history_xyz, np.float64),
                                np.asarray(x.ego_history_rot, np.float64), self.model.cfg,
                                self.encoder, self.device, self.dtype,
                                camera_indices=getattr(x, 'camera_indices', None),
                                nav_text=nav_text)
        t_prep = time.perf_counter()
        clock = PhaseClock(self.cuda)
        guided = nav_text is not None and self.config.guidance_weight is not None
        with torch.no_grad():   # not inference_mode: Accelerate re-creates Parameters per call
            result = run_inference(self.model, inputs, self.device,
                                   self.config.decode_options(guided), observer=clock)
        phases = clock.seconds()
        t_end = time.perf_counter()
        timings = {'preprocess': t_prep - t_start, **phases,
                   'postprocess': max(0.0, (t_end - t_prep) - sum(phases.values())),
                   'total': t_end - t_start}
        return RunOutput({'xyz': result.xyz[0].double().numpy(),
                          'rot': result.rot[0].double().numpy(),
                          'tokens': np.asarray(result.coc_token_ids[0], dtype=np.int64)},
                         timings)

    def close(self) -> None:
        """Detach everything and drop the model."""
        self.teardown()
        release_memory()
