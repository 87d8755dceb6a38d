"""Fused RMSNorms: every Qwen3-VL text norm swapped, checkpoint untouched, same numbers on CPU."""
from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRMSNorm

from alpamayo_offload.model import FusedRMSNorm, build_random, fuse_rms_norms, tiny_config


def test_fusing_swaps_every_text_norm_and_keeps_the_weights() -> None:
    model = build_random(tiny_config(), seed=0)
    before = model.state_dict()
    # four per decoder layer (input, post-attention, q, k) + the LM's and the expert's final norm
    n_layers = len(model.layer_sequences()['lm']) + len(model.layer_sequences()['expert'])
    assert fuse_rms_norms(model) == 4 * n_layers + 2
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() for k in before)   # same storage
    assert not any(type(m) is Qwen3VLTextRMSNorm for m in model.modules())
    assert fuse_rms_norms(model) == 0                      # idempotent


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('shape', [(1, 1, 64), (2, 300, 128), (3, 8, 7, 16)])
def test_fused_norm_is_bit_identical_to_transformers_on_cpu(dtype: torch.dtype,
                                                             shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    hf = Qwen3VLTextRMSNorm(shape[-1], eps=1e-6).to(dtype)
    with torch.no_grad():
        hf.weight.normal_()
    fused = FusedRMSNorm(shape[-1], eps=1e-6).to(dtype)
    fused.load_state_dict(hf.state_dict())
    x = (torch.randn(shape) * 3).to(dtype)
    with torch.no_grad():
        got, want = fused(x), hf(x)
    assert got.dtype == want.dtype == dtype
    assert torch.equal(got, want)
