"""The rollout's KV cache as it was: the prompt's K/V copied per row, contexts concatenated.

`repeated_cache()` makes `run_inference` / `generate_text` prefill into transformers'
`DynamicCache` (so `batch_repeat_interleave` copies the prompt per sample) and stack navigation
guidance's two contexts by concatenating zero-padded copies: the reference the shared-prefix
cache (model/shared_prefix_cache.py) must equal bit for bit, and whose VRAM it saves.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import torch
from transformers import DynamicCache

from alpamayo_offload.model import inference
from alpamayo_offload.model.inference import ExpertContext


def reference_stack(a: ExpertContext, b: ExpertContext) -> ExpertContext:
    """Stack two expert contexts by concatenating their caches' zero-padded copies per layer."""
    (cache_a, pos_a, mask_a), (cache_b, pos_b, mask_b) = a, b
    len_a, len_b = cache_a.get_seq_length(), cache_b.get_seq_length()
    width = max(len_a, len_b)
    stacked = DynamicCache()
    pad = torch.nn.functional.pad
    for i, (la, lb) in enumerate(zip(cache_a.layers, cache_b.layers, strict=True)):
        keys = torch.cat([pad(la.keys, (0, 0, 0, width - len_a)),
                          pad(lb.keys, (0, 0, 0, width - len_b))])
        values = torch.cat([pad(la.values, (0, 0, 0, width - len_a)),
                            pad(lb.values, (0, 0, 0, width - len_b))])
        la.keys = la.values = lb.keys = lb.values = None
        stacked.update(keys, values, i)
    masks = [inference._pad_mask(m, n, width) for m, n in ((mask_a, len_a), (mask_b, len_b))]
    return stacked, torch.cat([pos_a, pos_b], dim=1), torch.cat(masks)


@contextlib.contextmanager
def repeated_cache() -> Iterator[None]:
    """Run rollouts with the per-row `DynamicCache` inside the block."""
    with mock.patch.object(inference, 'SharedPrefixCache', DynamicCache), \
            mock.patch.object(inference, 'stack_expert_contexts', reference_stack):
        yield
