"""Graphed decoder layers: every text layer swapped, and the graphed parts compose to its forward.

The replays themselves need CUDA (test/engine/test_engine.py, `test_cuda_layer_graphs_*`); here
the split the graphs rely on is checked bit for bit against transformers' forward.
"""
from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextDecoderLayer

from alpamayo_offload.engine import EngineConfig
from alpamayo_offload.engine.estimates import estimate_graph_bytes, estimate_working_set
from alpamayo_offload.model import (
    GraphedDecoderLayer,
    build_random,
    full_config,
    fuse_rms_norms,
    graph_decoder_layers,
    roll_rotary,
    tiny_config,
)


def test_swap_covers_every_text_layer_keeps_weights_and_needs_rolled_rotary() -> None:
    model = build_random(tiny_config(), seed=0)
    with pytest.raises(TypeError, match='roll_rotary'):
        graph_decoder_layers(model)
    roll_rotary(model)
    before = model.state_dict()
    seqs = model.layer_sequences()
    assert graph_decoder_layers(model) == len(seqs['lm']) + len(seqs['expert'])
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() for k in before)
    assert not any(type(m) is Qwen3VLTextDecoderLayer for m in model.modules())
    assert all(layer.graphs is None for layer in seqs['lm'] + seqs['expert'])
    assert graph_decoder_layers(model) == 0                  # idempotent


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
def test_parts_compose_to_the_layer_forward_bit_for_bit(dtype: torch.dtype) -> None:
    """before_cache -> attend -> after_attention is transformers' forward, op for op."""
    model = build_random(tiny_config(), seed=0).to(dtype)
    fuse_rms_norms(model)
    roll_rotary(model)
    text = model.vlm.model.language_model
    plain = copy.deepcopy(text.layers[1])                    # transformers' forward
    graph_decoder_layers(model)
    layer = text.layers[1]
    assert type(layer) is GraphedDecoderLayer
    torch.manual_seed(0)
    config = text.config
    caches = DynamicCache(config=config), DynamicCache(config=config)
    for start, n in ((0, 37), (37, 1), (38, 1), (39, 64)):   # prefill, decode, decode, actions
        x = torch.randn(1, n, config.hidden_size).to(dtype)
        positions = torch.arange(start, start + n).view(1, 1, n).expand(3, 1, n)
        cos_sin = text.rotary_emb(x, positions)
        causal = torch.arange(start + n)[None] <= torch.arange(start, start + n)[:, None]
        mask = None if n == 1 else causal.view(1, 1, n, start + n)
        with torch.no_grad():
            want = plain(x, cos_sin, mask, past_key_values=caches[0])
            qkv = layer.before_cache(x, *layer.self_attn.pass_rotary.get(*cos_sin))
            attended, _ = layer.self_attn.attend(*qkv, mask, caches[1])
            got = layer.after_attention(attended, x)
        assert torch.equal(got, want), (start, n)
    assert torch.equal(caches[0].layers[1].keys, caches[1].layers[1].keys)
    assert torch.equal(caches[0].layers[1].values, caches[1].layers[1].values)


def test_graph_memory_is_counted_in_the_cuda_working_set_only() -> None:
    """~148 MiB for the full model at one sample (H200: 116 MiB reserved, all resident)."""
    cfg = full_config()
    graphs = estimate_graph_bytes(cfg, 2, num_samples=1)
    assert 140 * 2**20 < graphs < 160 * 2**20
    assert estimate_graph_bytes(cfg, 2, num_samples=2) > graphs
    on_gpu = estimate_working_set(cfg, 2, EngineConfig(model='full', device='cuda'))
    assert on_gpu - estimate_working_set(
        cfg, 2, EngineConfig(model='full', device='cuda', layer_graphs=False)) == graphs
    assert estimate_working_set(cfg, 2, EngineConfig(model='full', device='cpu')) == \
        on_gpu - graphs
