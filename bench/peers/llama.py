"""The second model: a Llama-2-7B-shaped decoder (OpenVLA-7B's language backbone).

Random BF16 weights built on the GPU from a seed (home copy in host RAM), greedy generation of
`new_tokens` tokens after a fixed `prompt_tokens`-token prompt with a KV cache: the prefill emits
the first token, then one decode pass per further token. Ours is the offload runtime on
`model.model.layers` (one `LayerSequence`, pipelined, as many interleaved layers resident as the
cap allows by the runtime's own VRAM accounting); peers as for Alpamayo.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from alpamayo_offload.planning.planner import interleaved_indices
from alpamayo_offload.runtime import (
    BudgetError,
    LayerSequence,
    Mode,
    OffloadRuntime,
    ResidencyPlan,
)

from . import hf_peers
from .home import HomeCopy, release_memory
from .measure import Deadline, RunOutput
from .rows import GIB, RowSpec
from .runner import Repeats, RowBench, RowSkippedError, cap_vram

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaSettings:
    """Shape and workload of the LLM rows (defaults: Llama-2-7B, OpenVLA's 32064 vocabulary)."""

    device: str = 'cuda'
    layers: int = 32
    hidden: int = 4096
    intermediate: int = 11008
    heads: int = 32
    vocab: int = 32064
    prompt_tokens: int = 512
    new_tokens: int = 64
    repeats: Repeats = Repeats()
    accel_headroom_gib: float = 1.5
    seed: int = 0
    slack_bytes: int = 512 * 2**20   # allocator slack and cuBLAS workspaces on the working set

    def __post_init__(self) -> None:
        for name in ('layers', 'hidden', 'intermediate', 'heads', 'vocab', 'prompt_tokens',
                     'new_tokens'):
            if getattr(self, name) < 1:
                raise ValueError(f'LlamaSettings.{name} = {getattr(self, name)}: must be >= 1')
        if self.hidden % self.heads:
            raise ValueError(f'LlamaSettings.hidden = {self.hidden} is not a multiple of '
                             f'heads = {self.heads}')

    def config(self) -> LlamaConfig:
        """The transformers config of this shape."""
        return LlamaConfig(hidden_size=self.hidden, intermediate_size=self.intermediate,
                           num_hidden_layers=self.layers, num_attention_heads=self.heads,
                           num_key_value_heads=self.heads, vocab_size=self.vocab,
                           max_position_embeddings=4096, rms_norm_eps=1e-5,
                           tie_word_embeddings=False)


def working_set_bytes(s: LlamaSettings, cuda: bool) -> int:
    """KV cache, the prefill's widest activations, last-token logits, allocator slack."""
    nbytes = 2 if cuda else 4
    tokens = s.prompt_tokens + s.new_tokens
    kv = 2 * s.layers * s.hidden * tokens * nbytes
    prefill = s.prompt_tokens * (3 * s.intermediate + 6 * s.hidden) * nbytes
    return kv + prefill + 4 * s.vocab * 4 + s.slack_bytes


def build_llama(settings: LlamaSettings, device: torch.device) -> LlamaForCausalLM:
    """Random weights on `device` (N(0, 0.02), norms 1) in parameter order, then home on host."""
    cfg = settings.config()
    dtype = torch.bfloat16 if device.type == 'cuda' else torch.float32
    with torch.device('meta'):
        model = LlamaForCausalLM(cfg)
    model.to(dtype).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(settings.seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.ndim == 1:
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=gen)
        for module in model.modules():
            if isinstance(module, LlamaRotaryEmbedding):
                with torch.device('cpu'):
                    fresh = LlamaRotaryEmbedding(cfg)
                for key, buf in fresh.named_buffers(recurse=False):
                    module._buffers[key] = buf
    model.to('cpu')
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    return model.eval()



def generate(model: LlamaForCausalLM, prompt: torch.Tensor, new_tokens: int,
             device: torch.device) -> RunOutput:
    """Greedy generation: prefill (first token), then one decode pass per further token.

    Returns the tokens and the last logits, and the prefill and decode seconds (CUDA events on
    a GPU).
    """
    cuda = device.type == 'cuda'
    marks: list[Any] = []

    def mark() -> Any:
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        marks.append(mark())
        out = model(input_ids=prompt.to(device), past_key_values=cache, use_cache=True,
                    logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token]
        marks.append(mark())
        for _ in range(new_tokens - 1):
            out = model(input_ids=token, past_key_values=cache, use_cache=True,
                        logits_to_keep=1)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
        marks.append(mark())
        logits = out.logits[:, -1].float().cpu().numpy()
    if cuda:
        marks[-1].synchronize()
        prefill = marks[0].elapsed_time(marks[1]) / 1000.0
        decode = marks[1].elapsed_time(marks[2]) / 1000.0
    else:
        prefill, decode = marks[1] - marks[0], marks[2] - marks[1]
    ids = torch.cat(tokens, dim=1).cpu().numpy()
    return RunOutput({'tokens': ids, 'logits': logits},
                     {'prefill': prefill, 'decode': decode,
                      'decode_per_token': decode / max(1, new_tokens - 1)})


class LlamaBench(RowBench):
    """Runs the LLM rows on one loaded model."""

    model_name = 'llama'

    def __init__(self, settings: LlamaSettings, deadline: Deadline) -> None:
        super().__init__(deadline, settings.repeats, settings.accel_headroom_gib)
        self.s = settings
        self.device = torch.device(settings.device)
        self.cuda = self.device.type == 'cuda'
        start = time.perf_counter()
        self.model = build_llama(settings, self.device)
        self.build_s = time.perf_counter() - start
        self.home = HomeCopy(self.model)
        gen = torch.Generator().manual_seed(settings.seed + 1)
        self.prompt = torch.randint(0, settings.vocab, (1, settings.prompt_tokens),
                                    generator=gen)
        self.runtime: OffloadRuntime | None = None
        self.on_device: list[nn.Module] = []
        LOG.info('llama built in %.1f s (%.2f GiB home copy)', self.build_s,
                 self.home.nbytes / GIB)

    def _non_layer(self) -> list[nn.Module]:
        m = self.model
        return [m.model.embed_tokens, m.model.norm, m.model.rotary_emb, m.lm_head]

    def working_set_bytes(self) -> int:
        """KV cache, the prefill's widest activations, last-token logits, allocator slack."""
        return working_set_bytes(self.s, self.cuda)

    # ---------------------------------------------------------------- attach / detach
    def teardown(self) -> None:
        """Detach whatever is attached and put the home weights back."""
        if self.runtime is not None:
            self.runtime.detach()
            self.runtime = None
        if self.peer is not None:
            self.peer.remove()
            self.peer = None
        self.current = None
        self.home.restore()

    def prepare(self, spec: RowSpec, headroom_gib: float) -> dict[str, Any]:
        """Move, plan or wrap the model for the row under its cap."""
        if self.reuses(spec):
            return self.reuse_peer(spec)
        self.teardown()
        cap_vram(spec.cap_bytes)
        self.current = (spec.runtime, spec.cap_gib)
        start = time.perf_counter()
        if spec.runtime == 'preload':
            self.model.to(self.device)
            detail: dict[str, Any] = {}
        elif spec.runtime == 'ours-planned':
            detail = self._attach_ours(spec)
        else:
            detail = self._attach_peer(spec, headroom_gib)
        if self.cuda:
            torch.cuda.synchronize()
        out = {'setup_s': time.perf_counter() - start, 'detail': detail}
        if self.runtime is not None:
            out['registered_pinned_bytes'] = self.runtime.pinned_bytes
        if spec.runtime == 'accelerate-device-map':
            out['headroom_gib'] = headroom_gib
        return out

    def _attach_ours(self, spec: RowSpec) -> dict[str, Any]:
        if spec.cap_bytes is None:
            raise RowSkippedError('ours needs a cap')
        layers = list(self.model.model.layers)
        seq = LayerSequence('lm', layers, 'model.layers.')
        fixed = sum(hf_peers.module_bytes(m) for m in self._non_layer())
        for k in range(len(layers), -1, -1):    # most resident layers that fit the cap
            try:
                plan = ResidencyPlan({'lm': interleaved_indices(k, len(layers))})
                runtime = OffloadRuntime([seq], plan,
                                         mode=Mode.PIPELINED, device=self.device,
                                         budget_bytes=spec.cap_bytes, fixed_bytes=fixed,
                                         working_set_bytes=self.working_set_bytes())
                break
            except BudgetError:
                continue
        else:
            raise hf_peers.PeerError(f'nothing fits {spec.cap_gib} GiB (two slots + non-layer '
                                     'modules + working set)')
        for module in self._non_layer():
            module.to(self.device)
        runtime.attach()
        self.runtime = runtime
        return {'resident_layers': list(plan.indices('lm')),
                'required_bytes': runtime.vram_plan.required_bytes}

    def _attach_peer(self, spec: RowSpec, headroom_gib: float) -> dict[str, Any]:
        package = spec.runtime.split('-')[0]
        if not hf_peers.available(package):
            raise RowSkippedError(f'{package} is not importable here')
        model = self.model
        if spec.runtime == 'accelerate-device-map':
            if spec.cap_bytes is None:
                raise RowSkippedError('Accelerate device_map rows need a cap')
            max_memory = spec.cap_bytes - int(headroom_gib * GIB)
            if max_memory <= 0:
                raise hf_peers.PeerError(f'cap {spec.cap_gib} GiB leaves no max_memory after '
                                         f'{headroom_gib} GiB headroom')
            self.peer = hf_peers.attach_device_map(
                model, self.device, max_memory,
                model._no_split_modules, skip_keys=model._skip_keys_device_placement)
        elif spec.runtime == 'accelerate-cpu-offload':
            self.peer = hf_peers.attach_cpu_offload(model, self.device)
        else:
            self.peer = hf_peers.attach_group_offloading(
                model, self.device, [model.model],
                'block_level' if spec.runtime == 'diffusers-block' else 'leaf_level',
                keep_on_device=[model.lm_head], pull_out=[model.model.embed_tokens])
        return self.peer.detail

    # ---------------------------------------------------------------- inference
    def infer(self, spec: RowSpec) -> RunOutput:
        """Greedy generation: prefill (first token), then one decode pass per token."""
        return generate(self.model, self.prompt, self.s.new_tokens, self.device)

    def close(self) -> None:
        """Detach everything and drop the model."""
        self.teardown()
        release_memory()
