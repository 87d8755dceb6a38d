"""Masked attention in chunks of rows: the same bits as one call, and chunks within the cap.

The reference is the rollout as it ran before chunking: every attention call over all rows at
once (transformers' attention, or the rolled one with no chunk cap). Every comparison is exact.
"""
from __future__ import annotations

from unittest import mock

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from alpamayo_offload.model import (
    DecodeOptions,
    RolledRotaryAttention,
    SharedPrefixCache,
    build_random,
    roll_rotary,
    row_chunks,
    run_inference,
    stack_caches,
    tiny_1_5_config,
)
from alpamayo_offload.model.row_chunks import (
    attend_in_row_chunks,
    chunk_transient_bytes,
    masked_attention_key_bytes,
    rows_per_chunk,
)
from testkit.rollouts import SAMPLE_CASES, drive_inputs


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('case', list(SAMPLE_CASES))
def test_rollouts_in_row_chunks_equal_whole_calls_bit_for_bit(case: str,
                                                              dtype: torch.dtype) -> None:
    """BF16 runs under autocast: the rolled attention casts SDPA's inputs before autocast does."""
    make, samples, weight, nav = SAMPLE_CASES[case]
    torch.set_num_threads(1)
    model = build_random(make(), seed=5, dtype=dtype)
    inputs = drive_inputs(model.cfg, nav, seed=1, speed=7.0, yaw=0.2)
    # 6 decode steps take every cache path 12 do (the same repeats and crops), in half the time
    opts = DecodeOptions(max_decode_tokens=6, sample=True, seed=3, num_samples=samples,
                         guidance_weight=weight, diffusion_steps=3)

    def run():
        return run_inference(model, inputs, 'cpu', opts, keep_extras=True)

    ref = run()                                   # transformers' attention, whole calls
    roll_rotary(model)
    steps: list[tuple[int, int]] = []

    def fixed(step: int):
        def pick(row_bytes: int, cap: int = 0) -> int:
            steps.append((step, row_bytes))
            return step
        return pick

    results = {}
    for step in (1, 2):
        with mock.patch.object(row_chunks, 'rows_per_chunk', fixed(step)):
            results[step] = run()
    results['cap'] = run()                        # the default cap: one chunk on tiny models
    rows = samples * (2 if weight is not None else 1)
    assert rows > 1 and {s for s, _ in steps} == {1, 2}
    for got in results.values():
        assert torch.equal(got.xyz, ref.xyz) and torch.equal(got.rot, ref.rot)
        assert torch.equal(got.new_token_ids, ref.new_token_ids)
        assert got.extras.keys() == ref.extras.keys()
        for key, value in got.extras.items():
            assert torch.equal(value, ref.extras[key]), key


def _cache(rows: int, seed: int) -> SharedPrefixCache:
    """A two-layer cache of a 9-token prompt shared by `rows` rows, 3 own tokens each."""
    gen = torch.Generator().manual_seed(seed)
    cache = SharedPrefixCache()
    for layer in range(2):
        cache.update(torch.randn(1, 2, 9, 8, generator=gen),
                     torch.randn(1, 2, 9, 8, generator=gen), layer)
    cache.batch_repeat_interleave(rows)
    for layer in range(2):
        cache.update(torch.randn(rows, 2, 3, 8, generator=gen),
                     torch.randn(rows, 2, 3, 8, generator=gen), layer)
    return cache


class _Module(torch.nn.Module):
    """What the attention function reads of an attention module."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_idx, self.num_key_value_groups, self.is_causal = 1, 2, True


@pytest.mark.parametrize('cap_rows', [1, 2, 3, 5, 6])
def test_attention_over_stacked_caches_in_chunks_equals_one_call(cap_rows: int) -> None:
    """Guided and unguided rows (two groups, chunks across them), mask per row, the cache kept."""
    whole = stack_caches(_cache(3, 0), _cache(3, 1))
    chunked = stack_caches(_cache(3, 0), _cache(3, 1))
    gen = torch.Generator().manual_seed(7)
    query = torch.randn(6, 4, 5, 8, generator=gen)
    key, value = torch.randn(6, 2, 5, 8, generator=gen), torch.randn(6, 2, 5, 8, generator=gen)
    mask = torch.zeros(6, 1, 5, 17)
    mask[::2, ..., 3:7] = torch.finfo(torch.float32).min
    keys = 12 + 5
    row_bytes = keys * masked_attention_key_bytes(2, 4, 8, 5, 4)
    module = _Module()
    ref, _ = attend_in_row_chunks(module, sdpa_attention_forward, query, key, value, mask,
                                  whole, cap=10**12, scaling=0.3)
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[1].shape[0])
        return sdpa_attention_forward(*args, **kwargs)

    got, weights = attend_in_row_chunks(module, spy, query, key, value, mask, chunked,
                                        cap=cap_rows * row_bytes, scaling=0.3)
    assert weights is None and torch.equal(got, ref) and got.stride() == ref.stride()
    assert calls == [min(cap_rows, 6 - i) for i in range(0, 6, cap_rows)]
    for a, b in zip(whole.layers, chunked.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert chunked.get_seq_length(1) == whole.get_seq_length(1) == 17


def test_unmasked_and_single_row_calls_stay_whole() -> None:
    cache = _cache(4, 2)
    query = torch.randn(4, 4, 1, 8)
    kv = torch.randn(4, 2, 1, 8), torch.randn(4, 2, 1, 8)
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[1].shape[0])
        return sdpa_attention_forward(*args, **kwargs)

    attend_in_row_chunks(_Module(), spy, query, *kv, None, cache, cap=1, scaling=0.3)
    attend_in_row_chunks(_Module(), spy, query[:1], kv[0][:1], kv[1][:1],
                         torch.zeros(1, 1, 1, 13), _cache(1, 3), cap=1, scaling=0.3)
    assert calls == [4, 1]


def test_chunk_sizes_follow_the_byte_cap() -> None:
    assert rows_per_chunk(100, cap=250) == 2
    assert rows_per_chunk(300, cap=250) == 1              # one row over the cap still runs
    assert chunk_transient_bytes(16, 100, cap=250) == 250
    assert chunk_transient_bytes(2, 100, cap=250) == 200
    assert chunk_transient_bytes(16, 300, cap=250) == 300
    assert RolledRotaryAttention.row_chunk_bytes == row_chunks.ROW_CHUNK_BYTES


def test_a_bf16_expert_step_of_16_rows_hands_sdpa_its_inputs_ready(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No per-layer cast of the mask or K/V, no K/V at the K/V heads: SDPA takes them as given.

    Under autocast every masked expert call gets BF16 query, K/V and mask (autocast has nothing
    to cast), K/V already at the query heads, and every layer of every step reads views of one
    mask cast once per diffusion.
    """
    torch.set_num_threads(1)
    model = build_random(tiny_1_5_config(), seed=5, dtype=torch.bfloat16)
    roll_rotary(model)
    n = model.cfg.action.n_waypoints
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        if query.shape[2] == n:                          # the expert's action tokens
            seen.append((query, key, value, attn_mask))
        return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, 'scaled_dot_product_attention', spy)
    run_inference(model, drive_inputs(model.cfg, None, seed=1), 'cpu',
                  DecodeOptions(max_decode_tokens=3, num_samples=16, diffusion_steps=2))
    assert len(seen) == 2 * model.cfg.text.num_layers
    masks = set()
    for query, key, value, mask in seen:
        assert query.shape[0] == 16 and key.shape[1] == value.shape[1] == query.shape[1]
        assert {t.dtype for t in (query, key, value, mask)} == {torch.bfloat16}
        masks.add(mask.untyped_storage().data_ptr())
    assert len(masks) == 1
