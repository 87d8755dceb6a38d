"""CUDA graphs for the fixed-shape parts of resident decoder layers in decode and diffusion.

A decode pass with most language-model layers resident is bound by the host issuing kernels:
its host work is close to its copy time, so whenever the host thread stalls the pass runs late.
Around the KV-cache update a decoder layer's shapes do not change from pass to pass: the input
norm, q/k/v projections, q/k norms and rotary before it; the output projection, residual, norm,
MLP and residual after it.
Each part is captured once per input shape and then replayed in one launch; the cache update and
attention, whose key length grows, stay eager. A replay runs the captured kernels on the same
shapes, so the layer's output is bit-identical to its eager forward (checked against whole-GPU
eager runs by `test_cuda_layer_graphs_change_no_bit` in test/engine/test_engine.py).

A captured kernel keeps its weight addresses. A resident layer's weights never move, so its
graphs are its own. A streamed layer's weights are views of the slot it runs from, laid out the
same in that slot for every layer of its sequence, so its graphs are the slot's
(`enable(..., by_slot=True)`): keyed by the addresses and shapes of the layer's first and last
parameters, which name the slot, they serve every layer of the sequence that runs from it, and
the weights a replay reads are whichever layer the runtime put there (ordered on the stream
before the call, as an eager call's are). Such a layer returns a copy of the slot graph's output,
which the slot's next layer overwrites. The engine enables the layers after attaching and
releases the graphs before it detaches.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextDecoderLayer

from .class_swap import swap_class
from .rope import RolledRotaryAttention

# Inputs of more tokens run eagerly: a prefill gains nothing from one replay, and its captured
# activations would stay allocated in the graph pool.
MAX_GRAPHED_TOKENS = 256


class GraphedDecoderLayer(Qwen3VLTextDecoderLayer):
    """Qwen3VLTextDecoderLayer that replays its fixed-shape parts when `graphs` is set."""

    self_attn: RolledRotaryAttention
    graphs: LayerGraphs | None = None
    # Set for a streamed layer: (first, last) parameter, whose current storage names the slot.
    graph_slot_params: tuple[nn.Parameter, nn.Parameter] | None = None

    def forward(self, hidden_states: torch.Tensor,
                position_embeddings: tuple[torch.Tensor, torch.Tensor],
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: Any = None,
                use_cache: bool | None = False, **kwargs: Any) -> torch.Tensor:
        """Run transformers' forward, or the same ops with the fixed-shape parts replayed."""
        if self.graphs is None or not self.graphs.applies(hidden_states, past_key_values):
            return super().forward(hidden_states, position_embeddings, attention_mask,
                                   position_ids, past_key_values, use_cache, **kwargs)
        rotary = self.self_attn.pass_rotary.get(*position_embeddings)
        return self.graphs.run(self, hidden_states, rotary, attention_mask, past_key_values,
                               {'position_ids': position_ids, 'use_cache': use_cache, **kwargs})

    def before_cache(self, hidden_states: torch.Tensor, cos: torch.Tensor,
                     signed_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Input norm, projections, q/k norms and rotary -> query, key, value."""
        return self.self_attn.project(self.input_layernorm(hidden_states), cos, signed_sin)

    def after_attention(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, norm, MLP and residual, in transformers' order."""
        attended = attended.reshape(*residual.shape[:-1], -1).contiguous()
        hidden = residual + self.self_attn.o_proj(attended)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


def graph_decoder_layers(model: nn.Module) -> int:
    """Make every rolled-rotary Qwen3VLTextDecoderLayer a `GraphedDecoderLayer`; count them.

    Needs `roll_rotary` first (the graphed parts are `RolledRotaryAttention.project`). Without
    enabled graphs the layer runs transformers' forward unchanged.
    """
    layers = [m for m in model.modules() if type(m) is Qwen3VLTextDecoderLayer]
    if any(type(m.self_attn) is not RolledRotaryAttention for m in layers):
        raise TypeError('graph_decoder_layers needs roll_rotary(model) first')
    return swap_class(model, Qwen3VLTextDecoderLayer, GraphedDecoderLayer)


@dataclass
class _Captured:
    """One layer's two graphs for one input shape, with their static inputs and outputs."""

    before: torch.cuda.CUDAGraph
    after: torch.cuda.CUDAGraph
    hidden: torch.Tensor                     # input of `before`, residual of `after`
    rotary: tuple[torch.Tensor, torch.Tensor]
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    attended: torch.Tensor                   # input of `after`
    out: torch.Tensor


def slot_params(layer: nn.Module) -> tuple[nn.Parameter, nn.Parameter]:
    """Return the first and last parameter of a streamed layer, which name its slot."""
    params = list(layer.parameters())
    return params[0], params[-1]


def graph_key(layer: GraphedDecoderLayer) -> Hashable:
    """Return what a layer's graphs belong to: the layer, or (streamed) its current slot.

    A slot is named by the storage address and shape of the layer's first and last parameters
    as they are bound now.
    """
    if layer.graph_slot_params is None:
        return id(layer)
    first, last = layer.graph_slot_params
    return (type(layer), first.data_ptr(), tuple(first.shape), last.data_ptr(),
            tuple(last.shape))


class LayerGraphs:
    """The captured graphs of the layers enabled on one device, in one shared memory pool.

    The graphs replay one after another on the current stream, never concurrently, so they
    share a pool; a layer's output is its graph's static tensor, valid until that layer runs
    again (the next layer or the final norm reads it first). Keep one instance for an engine's
    life and `release` it between plans: its capture stream gets its own cuBLAS workspace
    (32 MiB on an H200), which stays allocated as long as the stream lives: a new instance per
    re-plan would leave one workspace behind each time.
    """

    def __init__(self, device: torch.device) -> None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.device = torch.device('cuda', index)
        self._pool = torch.cuda.graph_pool_handle()
        self._stream = torch.cuda.Stream(device)
        self._layers: list[GraphedDecoderLayer] = []
        self._captured: dict[tuple[int, tuple[Any, ...]], _Captured] = {}
        # The pass's rotary tensors each shape's static copy was last taken from.
        self._rotary: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = {}

    def enable(self, layers: Iterable[nn.Module], by_slot: bool = False) -> int:
        """Graph `layers` from their next call on.

        Without `by_slot` each layer's weights must stay where they are (resident). With it,
        the layers are streamed and share the graphs of the slot they run from (module
        docstring): every slot must lay them out alike, as the runtime does for the layers of
        one sequence.
        """
        found = [m for m in layers if isinstance(m, GraphedDecoderLayer)]
        for layer in found:
            layer.graphs = self
            layer.graph_slot_params = slot_params(layer) if by_slot else None
        self._layers.extend(found)
        return len(found)

    def release(self) -> None:
        """Stop graphing and drop every graph and static tensor (before the weights move)."""
        for layer in self._layers:
            layer.graphs = None
            layer.graph_slot_params = None
        self._layers, self._captured, self._rotary = [], {}, {}
        self._pool = torch.cuda.graph_pool_handle()

    @property
    def captured(self) -> int:
        """Number of (layer, input shape) pairs captured so far."""
        return len(self._captured)

    def applies(self, hidden: torch.Tensor, cache: Any) -> bool:
        """Whether a call can replay: a cached pass of few tokens on this device, not capturing."""
        return (cache is not None and hidden.device == self.device
                and hidden.shape[:-1].numel() <= MAX_GRAPHED_TOKENS
                and not torch.cuda.is_current_stream_capturing())

    def run(self, layer: GraphedDecoderLayer, hidden: torch.Tensor,
            rotary: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None, cache: Any,
            attn_kwargs: dict[str, Any]) -> torch.Tensor:
        """One layer call: replay before the cache, attend eagerly, replay after it."""
        shape = (tuple(hidden.shape), hidden.dtype, tuple(rotary[0].shape), rotary[0].dtype)
        key = graph_key(layer)
        got = self._captured.get((key, shape))
        if got is None:
            out = self._capture(layer, key, shape, hidden, rotary, mask, cache, attn_kwargs)
        else:
            got.hidden.copy_(hidden)
            self._sync_rotary(shape, rotary, got.rotary)
            got.before.replay()
            attended, _ = layer.self_attn.attend(*got.qkv, mask, cache, **attn_kwargs)
            got.attended.copy_(attended)
            got.after.replay()
            out = got.out
        return out if layer.graph_slot_params is None else out.clone()

    def _sync_rotary(self, shape: tuple[Any, ...], rotary: tuple[torch.Tensor, torch.Tensor],
                     static: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Copy a new pass's rotary tensors into the static ones all layers of `shape` read."""
        last = self._rotary.get(shape)
        if last is None or last[0] is not rotary[0] or last[1] is not rotary[1]:
            static[0].copy_(rotary[0])
            static[1].copy_(rotary[1])
            self._rotary[shape] = rotary      # held, so their identity stays unique

    def _capture(self, layer: GraphedDecoderLayer, key: Hashable, shape: tuple[Any, ...],
                 hidden: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                 mask: torch.Tensor | None, cache: Any,
                 attn_kwargs: dict[str, Any]) -> torch.Tensor:
        """Capture both parts on a side stream, then run this call by replaying them."""
        static_rotary = next((c.rotary for (_, s), c in self._captured.items() if s == shape),
                             None)
        if static_rotary is None:
            static_rotary = (rotary[0].clone(), rotary[1].clone())
            self._rotary[shape] = rotary
        else:
            self._sync_rotary(shape, rotary, static_rotary)
        static_hidden = hidden.clone()
        before, qkv = self._graph(layer.before_cache, static_hidden, *static_rotary)
        before.replay()
        attended, _ = layer.self_attn.attend(*qkv, mask, cache, **attn_kwargs)
        static_attended = torch.empty_strided(attended.shape, attended.stride(),
                                              dtype=attended.dtype, device=attended.device)
        static_attended.copy_(attended)
        after, out = self._graph(layer.after_attention, static_attended, static_hidden)
        after.replay()
        self._captured[(key, shape)] = _Captured(before, after, static_hidden,
                                                       static_rotary, qkv, static_attended, out)
        return out

    def _graph(self, fn: Any, *args: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, Any]:
        """Capture `fn(*args)` after one eager warm-up on the side stream -> (graph, outputs).

        The warm-up sets up what a first call sets up lazily (e.g. cuBLAS's workspace for the
        stream), which must not happen inside the capture.
        """
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self._stream):
            fn(*args)
            graph.capture_begin(pool=self._pool, capture_error_mode='thread_local')
            try:
                out = fn(*args)
            finally:
                graph.capture_end()
        current.wait_stream(self._stream)
        return graph, out
