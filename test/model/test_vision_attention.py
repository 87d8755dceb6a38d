"""Vision attention reading the per-image lengths once a pass: same bits, 1 read, not 81."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionAttention

from alpamayo_offload.model import (
    DecodeOptions,
    OneSyncVisionAttention,
    Rollout,
    build_random,
    run_inference,
    sync_vision_once,
    tiny_config,
)


def test_the_swap_covers_every_vision_block_and_keeps_the_weights() -> None:
    model = build_random(tiny_config(), seed=0)
    before = model.state_dict()
    assert sync_vision_once(model) == len(model.layer_sequences()['vit'])
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() for k in before)
    assert not any(type(m) is Qwen3VLVisionAttention for m in model.modules())
    assert all(type(b.attn) is OneSyncVisionAttention for b in model.layer_sequences()['vit'])
    assert sync_vision_once(model) == 0                 # idempotent


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
def test_vision_encoding_is_bit_identical_and_reads_the_lengths_once(
        dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch, tiny_inputs: Any) -> None:
    plain, once = build_random(tiny_config(), seed=0), build_random(tiny_config(), seed=0)
    sync_vision_once(once)
    inputs = tiny_inputs
    reads = {'n': 0}
    tolist = torch.Tensor.tolist

    def counted(t: torch.Tensor) -> Any:
        reads['n'] += 1
        return tolist(t)

    monkeypatch.setattr(torch.Tensor, 'tolist', counted)
    got = {}
    for name, model in (('plain', plain), ('once', once)):
        reads['n'] = 0
        with torch.inference_mode():
            got[name] = Rollout(model.to(dtype), 'cpu').vision(inputs.pixel_values,
                                                               inputs.image_grid_thw)
        got[name + ' reads'] = reads['n']
    (embeds_a, deep_a), (embeds_b, deep_b) = got['plain'], got['once']
    assert torch.equal(embeds_a, embeds_b)
    assert all(torch.equal(a, b) for a, b in zip(deep_a, deep_b, strict=True))
    blocks = len(plain.layer_sequences()['vit'])        # transformers reads them for q, k and v
    assert got['plain reads'] - got['once reads'] == 3 * blocks - 1


def test_whole_inference_is_bit_identical_with_one_read_a_pass(tiny_inputs: Any) -> None:
    torch.set_num_threads(1)
    plain, once = build_random(tiny_config(), seed=0), build_random(tiny_config(), seed=0)
    sync_vision_once(once)
    inputs = tiny_inputs
    opts = DecodeOptions(fixed_decode_tokens=8, num_samples=2)
    a = run_inference(plain, inputs, 'cpu', opts)
    b = run_inference(once, inputs, 'cpu', opts)
    assert torch.equal(a.new_token_ids, b.new_token_ids)
    assert torch.equal(a.xyz, b.xyz) and torch.equal(a.rot, b.rot)
