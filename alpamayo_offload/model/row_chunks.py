"""Masked attention over a shared-prefix cache, run in chunks of rows with a bounded transient.

A masked attention call of many rows (the expert's over the VLM cache, 2S rows with navigation
guidance; guidance's unguided refeed, S rows) holds, per key and row of one layer, the layer's
full K/V, transformers' `repeat_kv` copies of K and V at the query heads, SDPA's re-laid-out
copies of them and the float mask's copies expanded over the heads: ~25 KB per key and row for
Alpamayo 1.5's expert, ~1.2 GB for 16 rows at ~3,100 keys. Here the new K/V is stored once,
then each chunk of rows gets its own K/V from the cache (`SharedPrefixLayer.chunks_kv`) and goes
through the same attention function with its rows of the query and the mask; the outputs are
concatenated. The full (rows, ...) K/V never exists, and the transient is one chunk's. The
chunks share one buffer, so a prompt prefix shared by the rows is written into it once per call,
not once per chunk; where `masked_sdpa_attention` makes the call, the buffer holds K/V at the
query heads (its repeat's values and layout), so no K/V at the K/V heads is built first.

Each row's attention reads only that row's query, K/V and mask, and the kernels' arithmetic per
row does not depend on how many rows a call has (the masked SDPA backends: see
docs/benchmarks.md §6), so the output is bit-identical to the whole call's.
Calls without a mask (decode: one query per row) are left whole: they hold only the K/V itself
(SDPA's grouped-query path, no copies at the query heads), and their flash kernel splits the keys
by a heuristic over the batch size, so a chunk could round differently from the whole call.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .shared_prefix_cache import SharedPrefixCache, SharedPrefixLayer

# Largest transient of one chunk: about one sample's prefill transient on Alpamayo 1.5
# (activations of ~3,100 prompt tokens, ~0.5 GB), so several rows need no more than one sample
# does, in few chunks (16 expert rows at ~3,100 keys: 3; 32: 6): each chunk costs ~20 kernel
# launches of host time in a diffusion step that is otherwise bound by the GPU.
ROW_CHUNK_BYTES = 512 * 2**20

Attention = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def masked_attention_key_bytes(kv_heads: int, heads: int, head_dim: int, queries: int,
                               dtype_bytes: int) -> int:
    """Transient bytes per key and row of an attention call with an additive float mask.

    The row's K/V (built for the call), `repeat_kv`'s copies of K and V at the query heads and
    SDPA's re-laid-out copies of them, and per query the float mask (float32, its cast,
    expanded over the heads): transformers' attention. Where `masked_sdpa_attention` makes the
    call it holds less (K/V built at the query heads directly, a mask already cast), so the
    bound holds for both.
    """
    return (2 * kv_heads * head_dim * dtype_bytes + 4 * heads * head_dim * dtype_bytes
            + queries * (heads * 4 + 4 + 4 + dtype_bytes))


def rows_per_chunk(row_bytes: int, cap: int = ROW_CHUNK_BYTES) -> int:
    """Rows of `row_bytes` transient each that one chunk of at most `cap` bytes takes (>= 1)."""
    return max(1, cap // max(1, row_bytes))


def chunk_transient_bytes(rows: int, row_bytes: int, cap: int = ROW_CHUNK_BYTES) -> int:
    """Upper bound of one chunk's transient for rows of at most `row_bytes` each.

    A chunk holds at most `cap` bytes, or one row when a row alone is larger, and never more
    than all rows; rows of fewer keys than assumed only make chunks of more rows within `cap`.
    """
    return min(rows * row_bytes, max(cap, row_bytes))


def attend_in_row_chunks(module: nn.Module, attend: Attention, query: torch.Tensor,
                         key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, cache: Any,
                         cap: int = ROW_CHUNK_BYTES, heads_repeat: int = 1, **kwargs: Any,
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Append key and value to `cache`, then `attend` -> (output before o_proj, weights).

    A masked call of several rows over a `SharedPrefixCache` runs in chunks of rows of at most
    `cap` bytes of transient (module docstring), one chunk when all fit; anything else as one
    call, as before. `heads_repeat` r > 1 (the caller found that `masked_sdpa_attention` takes
    the call over, `masked_sdpa.takes_over`): each chunk's K/V is built at r times the K/V
    heads directly (`SharedPrefixLayer.rows_kv`), the values and layout its repeat would make.
    """
    layer = _chunkable_layer(module, query, attention_mask, cache)
    if layer is None:
        if cache is not None:
            key, value = cache.update(key, value, module.layer_idx)
        return attend(module, query, key, value, attention_mask, **kwargs)
    keys = layer.get_seq_length() + key.shape[-2]
    step = rows_per_chunk(keys * masked_attention_key_bytes(
        key.shape[1], query.shape[1], query.shape[-1], query.shape[-2], key.element_size()), cap)
    layer.append(key, value)
    outputs, weights = [], []
    # one buffer for every chunk's K/V, its shared prefix written once (`chunks_kv`)
    for start, stop, (rows_key, rows_value) in layer.chunks_kv(step, heads_repeat):
        mask = attention_mask if attention_mask.shape[0] == 1 else attention_mask[start:stop]
        out, w = attend(module, query[start:stop], rows_key, rows_value, mask, **kwargs)
        outputs.append(out)
        weights.append(w)
    if len(outputs) == 1:
        return outputs[0], weights[0]
    if any(w is None for w in weights):
        return torch.cat(outputs), None
    return torch.cat(outputs), torch.cat(weights)


def _chunkable_layer(module: nn.Module, query: torch.Tensor,
                     attention_mask: torch.Tensor | None, cache: Any) -> SharedPrefixLayer | None:
    """Return the cache layer a call may run in chunks over: masked, several rows, filled."""
    if attention_mask is None or query.shape[0] < 2 or not isinstance(cache, SharedPrefixCache):
        return None
    index = module.layer_idx
    if index >= len(cache.layers):
        return None
    layer = cache.layers[index]
    return layer if isinstance(layer, SharedPrefixLayer) and layer.groups else None
