"""The models `bench_compress` measures, behind one interface: Alpamayo-R1 and a Llama decoder.

A subject attaches a plan (resident language-model layers, mode, budget, compression), runs
one inference and says per phase how long it took, how many uncompressed bytes it delivered
to the device and how many crossed the host link. Both cache compressed layers in the same
directory (`cache_dir`, keyed by what names their random weights), so a second attach of a
compressed plan reads them instead of compressing.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from alpamayo_offload.engine import Engine, EngineConfig, EngineError
from alpamayo_offload.runtime import (
    CompressionCache,
    LayerSequence,
    OffloadError,
    OffloadRuntime,
    ResidencyPlan,
)

from .peers import hf_peers
from .peers.llama import LlamaSettings, build_llama, generate, working_set_bytes

R1_PHASES = ('vision', 'prefill', 'decode', 'diffusion')
LLAMA_PHASES = ('prefill', 'decode')


class PlanRefusedError(Exception):
    """The subject refused a plan (over budget, or no codec for compression 'on')."""


@dataclass
class Run:
    """One inference: seconds, uncompressed bytes delivered and bytes copied, per phase."""

    total_s: float
    phases_s: dict[str, float]
    streamed: dict[str, float]
    copied: dict[str, float]
    output: dict[str, Any]

    def same_as(self, other: Run) -> bool:
        """Whether both produced the same outputs, bit for bit."""
        return self.output.keys() == other.output.keys() and all(
            np.array_equal(np.asarray(v), np.asarray(other.output[k]))
            for k, v in self.output.items())


@dataclass(frozen=True)
class AttachStats:
    """What the last attach cost and holds."""

    pinned_bytes: int
    compress_s: float
    cache_hits: int
    cache_read_s: float
    required_bytes: int


class R1Subject:
    """Alpamayo-R1 (a preset or checkpoint) through the engine, on its fixed example input.

    Loaded in the default mode: the bench turns strict deterministic mode on around the passes
    it compares bit for bit, never around the ones it times.
    """

    name = 'r1'
    phases = R1_PHASES

    def __init__(self, model: str, device: str, cache_dir: Path, decode_tokens: int,
                 diffusion_steps: int) -> None:
        config = EngineConfig(model=model, device=device, mode='pipelined',
                              fixed_decode_tokens=decode_tokens, diffusion_steps=diffusion_steps,
                              compression='off', compression_cache=str(cache_dir))
        self.engine = Engine.load(config)
        self.inputs = self.engine.example_input(presized=True)
        self.n_lm = len(self.engine.model.layer_sequences()['lm'])

    def attach(self, resident: Mapping[str, tuple[int, ...]], mode: str,
               budget_bytes: int | None, compression: str) -> None:
        """Re-attach the engine with this plan."""
        try:
            self.engine.replan(resident=resident, mode=mode, budget_bytes=budget_bytes,
                               compression=compression)
        except EngineError as err:
            raise PlanRefusedError(str(err)) from err

    def infer(self) -> Run:
        """Run one inference on the example input."""
        r = self.engine.infer(self.inputs)
        return Run(r.timings['total'], {p: r.timings[p] for p in self.phases},
                   {p: r.streaming.get(f'bytes_streamed.{p}', 0.0) for p in self.phases},
                   {p: r.streaming.get(f'bytes_copied.{p}', 0.0) for p in self.phases},
                   {'xyz': r.samples_xyz, 'tokens': np.asarray(r.coc_token_ids)})

    def attach_stats(self) -> AttachStats:
        """Pinned bytes, compression and cache seconds of the last attach."""
        info = self.engine.info
        return AttachStats(info.pinned_bytes, info.compress_s, info.compression_cache_hits,
                           info.compression_cache_read_s, info.required_bytes)

    def close(self) -> None:
        """Detach the runtime."""
        self.engine.close()


TINY_LLAMA = {'layers': 4, 'hidden': 64, 'intermediate': 128, 'heads': 4, 'vocab': 512,
              'prompt_tokens': 16, 'new_tokens': 4, 'slack_bytes': 0}


class LlamaSubject:
    """A Llama-2-7B-shaped decoder (random N(0, 0.02) weights): prefill, then greedy decode."""

    name = 'llama'
    phases = LLAMA_PHASES

    def __init__(self, settings: LlamaSettings, cache_dir: Path) -> None:
        self.s = settings
        self.device = torch.device(settings.device)
        self.model = build_llama(settings, self.device)
        layers = list(self.model.model.layers)
        self.n_lm = len(layers)
        self.sequence = LayerSequence('lm', layers, 'model.layers.')
        gen = torch.Generator().manual_seed(settings.seed + 1)
        self.prompt = torch.randint(0, settings.vocab, (1, settings.prompt_tokens),
                                    generator=gen)
        m = self.model
        self.non_layer = [m.model.embed_tokens, m.model.norm, m.model.rotary_emb, m.lm_head]
        dtype = next(m.parameters()).dtype
        self.cache = CompressionCache(cache_dir, {
            'model': 'llama-random', 'shape': f'{settings.layers}x{settings.hidden}x'
            f'{settings.intermediate}x{settings.heads}x{settings.vocab}',
            'seed': str(settings.seed), 'dtype': str(dtype).removeprefix('torch.'),
            'drawn_on': self.device.type, 'torch': torch.__version__.split('+')[0]})
        self.runtime: OffloadRuntime | None = None

    def attach(self, resident: Mapping[str, tuple[int, ...]], mode: str,
               budget_bytes: int | None, compression: str) -> None:
        """Detach the previous plan and attach this one."""
        self.close()
        for module in self.non_layer:
            module.to(self.device)
        try:
            runtime = OffloadRuntime(
                [self.sequence], ResidencyPlan(dict(resident)), mode=mode, device=self.device,
                budget_bytes=budget_bytes,
                fixed_bytes=sum(hf_peers.module_bytes(m) for m in self.non_layer),
                working_set_bytes=working_set_bytes(self.s, self.device.type == 'cuda'),
                compression=compression,
                compression_cache=self.cache if compression != 'off' else None)
            runtime.attach()
        except OffloadError as err:
            raise PlanRefusedError(str(err)) from err
        self.runtime = runtime

    def infer(self) -> Run:
        """Greedy generation of `new_tokens` after the fixed prompt."""
        assert self.runtime is not None
        start = time.perf_counter()
        out = generate(self.model, self.prompt, self.s.new_tokens, self.device)
        total = time.perf_counter() - start
        raw, moved = self.runtime.pass_bytes()['lm']
        passes = {'prefill': 1, 'decode': self.s.new_tokens - 1}
        return Run(total, {p: out.timings[p] for p in self.phases},
                   {p: float(raw * n) for p, n in passes.items()},
                   {p: float(moved * n) for p, n in passes.items()}, dict(out.arrays))

    def attach_stats(self) -> AttachStats:
        """Pinned bytes, compression and cache seconds of the last attach."""
        rt = self.runtime
        assert rt is not None
        stats = rt.compression_stats
        return AttachStats(rt.pinned_bytes, stats.compress_s, stats.cache_hits,
                           stats.cache_read_s, rt.vram_plan.required_bytes)

    def close(self) -> None:
        """Detach the runtime (the layers' weights back in host RAM)."""
        if self.runtime is not None:
            self.runtime.detach()
            self.runtime = None
        for module in self.non_layer:
            module.to('cpu')


def llama_settings(shape: str, device: str) -> LlamaSettings:
    """Return the Llama-2-7B shape ('7b': 512-token prompt, 64 new tokens) or a tiny one."""
    if shape == 'tiny':
        return LlamaSettings(device=device, **TINY_LLAMA)
    if shape == '7b':
        return LlamaSettings(device=device)
    raise ValueError(f'llama shape {shape!r}: expected 7b or tiny')

