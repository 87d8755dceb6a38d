"""SharedPrefixCache against transformers' DynamicCache with the prompt repeated per row.

The reference is what inference did before the shared prefix: one DynamicCache per prompt,
`batch_repeat_interleave` per sample, contexts stacked by concatenating zero-padded copies.
Every comparison is exact (`torch.equal`): the attention must see the same values.
"""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from alpamayo_offload.model import (
    DecodeOptions,
    SharedPrefixCache,
    SyntheticTextIds,
    build_random,
    generate_text,
    prepare_vqa_inputs,
    run_inference,
    shared_prefix_cache,
    stack_caches,
    tiny_1_5_config,
)
from alpamayo_offload.model.wide_copy import repeat_heads
from testkit.repeated_cache import repeated_cache
from testkit.rollouts import SAMPLE_CASES, drive_frames, drive_inputs

H, D = 2, 16


def _kv(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(rows, H, length, D, generator=gen)
    values = torch.randn(rows, length, H, D, generator=gen).transpose(1, 2)   # a strided view
    return keys, values


def _same(got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor]) -> None:
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
        assert g.is_contiguous() and g.stride() == w.stride()


def _filled(cache: DynamicCache | SharedPrefixCache, rows: int, prompt: int, steps: int,
            seed: int) -> None:
    for layer in range(2):
        cache.update(*_kv(1, prompt, seed + layer), layer)
    cache.batch_repeat_interleave(rows)
    for step in range(steps):
        for layer in range(2):
            cache.update(*_kv(rows, 1, 100 * seed + 10 * step + layer), layer)


def test_updates_repeats_and_crops_return_what_a_repeated_dynamic_cache_does() -> None:
    ours, ref = SharedPrefixCache(), DynamicCache()
    for layer in range(2):
        kv = _kv(1, 7, layer)
        _same(ours.update(*kv, layer), ref.update(*kv, layer))
    ours.batch_repeat_interleave(3)
    ref.batch_repeat_interleave(3)
    for step in range(4):
        for layer in range(2):
            kv = _kv(3, 1 if step < 3 else 5, 10 * step + layer)
            _same(ours.update(*kv, layer), ref.update(*kv, layer))
    assert ours.get_seq_length() == ref.get_seq_length() == 15
    assert ours.get_mask_sizes(5, 0) == ref.get_mask_sizes(5, 0)
    for cut in (5, 9):   # within the suffix, then into the prefix
        ours.crop(-cut)
        ref.crop(-cut)
        assert ours.get_seq_length() == ref.get_seq_length()
        for a, b in zip(ours.layers, ref.layers, strict=True):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
        kv = _kv(3, 2, 77)
        _same(ours.update(*kv, 0), ref.update(*kv, 0))
        _same(ours.update(*kv, 1), ref.update(*kv, 1))
    ours.batch_repeat_interleave(2)
    ref.batch_repeat_interleave(2)
    kv = _kv(6, 1, 99)
    _same(ours.update(*kv, 0), ref.update(*kv, 0))


def test_one_row_grows_as_a_dynamic_cache_does() -> None:
    """Nothing shared: the same concatenations, so one sample issues the ops it did before."""
    ours, ref = SharedPrefixCache(), DynamicCache()
    for step, length in enumerate((7, 1, 1, 4)):
        kv = _kv(1, length, step)
        got = ours.update(*kv, 0)
        _same(got, ref.update(*kv, 0))
    assert ours.layers[0].groups[0].suffix is None
    ours.crop(-4)
    ref.crop(-4)
    _same(ours.update(*_kv(1, 2, 9), 0), ref.update(*_kv(1, 2, 9), 0))


def test_the_prompt_is_stored_once_and_never_aliases_an_update() -> None:
    cache = SharedPrefixCache()
    keys, values = _kv(1, 9, 0)
    cache.update(keys, values, 0)
    cache.batch_repeat_interleave(4)
    step = _kv(4, 1, 1)
    cache.update(*step, 0)
    group, = cache.layers[0].groups
    assert group.rows == 4 and group.prefix[0].shape == (1, H, 9, D)
    keys.zero_()                       # e.g. a CUDA graph's static output, replayed again
    step[0].zero_()
    assert torch.equal(cache.layers[0].keys[:, :, :9], _kv(1, 9, 0)[0].expand(4, -1, -1, -1))
    assert torch.equal(cache.layers[0].keys[:, :, 9:], _kv(4, 1, 1)[0])


def test_stacked_caches_equal_zero_padded_concatenation() -> None:
    a, b = SharedPrefixCache(), SharedPrefixCache()
    ref_a, ref_b = DynamicCache(), DynamicCache()
    _filled(a, 3, 7, 4, 1)
    _filled(ref_a, 3, 7, 4, 1)
    _filled(b, 3, 5, 2, 2)
    _filled(ref_b, 3, 5, 2, 2)
    stacked = stack_caches(a, b)
    assert stacked.get_seq_length() == 11 and a.get_seq_length() == b.get_seq_length() == 0
    for layer in range(2):
        la, lb = ref_a.layers[layer], ref_b.layers[layer]
        pad = torch.nn.functional.pad
        want = [torch.cat([pad(x, (0, 0, 0, 11 - x.shape[2])), pad(y, (0, 0, 0, 11 - y.shape[2]))])
                for x, y in ((la.keys, lb.keys), (la.values, lb.values))]
        kv = _kv(6, 3, 50 + layer)
        got = stacked.update(*kv, layer)
        _same(got, tuple(torch.cat([w, n], dim=2) for w, n in zip(want, kv, strict=True)))
    stacked.crop(-3)
    assert stacked.get_seq_length() == 11


# ---- whole rollouts: the shared prefix against the repeated cache ----------------------------
def _both(run):
    new = run()
    with repeated_cache():
        ref = run()
    return new, ref


@pytest.mark.parametrize('case', list(SAMPLE_CASES))
def test_rollouts_equal_the_repeated_cache_bit_for_bit(case: str) -> None:
    make, samples, weight, nav = SAMPLE_CASES[case]
    torch.set_num_threads(1)
    model = build_random(make(), seed=5)
    inputs = drive_inputs(model.cfg, nav)
    # 6 decode steps take every cache path 12 do (the same repeats and crops), in half the time
    opts = DecodeOptions(max_decode_tokens=6, sample=True, seed=3, num_samples=samples,
                         guidance_weight=weight, diffusion_steps=3)
    new, ref = _both(lambda: run_inference(model, inputs, 'cpu', opts,
                                                        keep_extras=True))
    assert torch.equal(new.xyz, ref.xyz) and torch.equal(new.rot, ref.rot)
    assert torch.equal(new.new_token_ids, ref.new_token_ids)
    assert new.extras.keys() == ref.extras.keys()
    for key, value in new.extras.items():
        assert torch.equal(value, ref.extras[key]), key
    if samples > 1:   # sampled rows differ: each row attends to its own suffix
        assert len({tuple(r.tolist()) for r in new.new_token_ids}) > 1


def test_question_answers_equal_the_repeated_cache() -> None:
    model = build_random(tiny_1_5_config(), seed=2)
    images, _, _ = drive_frames()
    inputs = prepare_vqa_inputs(images, 'Is the light green?', model.cfg, SyntheticTextIds())
    opts = DecodeOptions(max_decode_tokens=8, sample=True, num_samples=3)
    new, ref = _both(lambda: generate_text(model, inputs, 'cpu', opts))
    assert torch.equal(new.token_ids, ref.token_ids)


def test_a_positive_crop_or_a_crop_past_the_start_is_refused() -> None:
    cache = SharedPrefixCache()
    cache.update(*_kv(1, 5, 0), 0)
    with pytest.raises(ValueError, match='negative'):
        cache.crop(2)
    with pytest.raises(ValueError, match='drop_last'):
        cache.crop(-6)
    cache.crop(-5)
    assert cache.get_seq_length() == 0


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('head_dim', [16, 6, 5])
def test_shared_rows_copy_the_bits_of_a_concatenation(dtype: torch.dtype, head_dim: int) -> None:
    """The prefix broadcast through wide integer views (or plain where none fits) keeps the bits."""
    gen = torch.Generator().manual_seed(7)
    prefix = [torch.randn(1, H, 9, head_dim, generator=gen).to(dtype) for _ in range(2)]
    ours = SharedPrefixCache()
    ours.update(*prefix, 0)
    ours.batch_repeat_interleave(3)
    got, want, suffix = (), [], []
    for _ in range(2):
        kv = [torch.randn(3, H, 1, head_dim, generator=gen).to(dtype) for _ in range(2)]
        suffix = kv if not suffix else [torch.cat([s, k], dim=-2)
                                        for s, k in zip(suffix, kv, strict=True)]
        got = ours.update(*kv, 0)
        want = [torch.cat([p.expand(3, -1, -1, -1), s], dim=-2)
                for p, s in zip(prefix, suffix, strict=True)]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype and g.is_contiguous()
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))


def _stacked_with_own_prefixes() -> SharedPrefixCache:
    """A guided (3 rows) and an unguided (4 rows) context stacked, then 2 rows of own prompts."""
    a, b = SharedPrefixCache(), SharedPrefixCache()
    _filled(a, 3, 7, 4, 1)
    _filled(b, 4, 5, 2, 2)
    stacked = stack_caches(a, b)
    own = SharedPrefixCache()
    for layer in range(2):          # one prefix row per row: nothing shared
        own.update(*_kv(2, 11, 60 + layer), layer)
    both = stack_caches(stacked, own)
    for layer in range(2):
        both.update(*_kv(9, 3, 70 + layer), layer)
    return both


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
def test_rows_built_at_the_query_heads_are_their_repeat(dtype: torch.dtype) -> None:
    layer = _stacked_with_own_prefixes().layers[1]
    for group in layer.groups:
        group.prefix = tuple(t.to(dtype) for t in group.prefix)
        group.suffix = tuple(t.to(dtype) for t in group.suffix)
    for start, stop in ((0, 9), (2, 5), (6, 9)):
        got = layer.rows_kv(start, stop, heads_repeat=3)
        want = [repeat_heads(t, 3) for t in layer.rows_kv(start, stop)]
        for g, w in zip(got, want, strict=True):
            assert g.shape == (stop - start, 3 * H, 14, D) and g.stride() == w.stride()
            assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))


@pytest.mark.parametrize('step', [1, 2, 3, 4, 9, 20])
def test_chunks_share_one_buffer_and_write_a_shared_prefix_once(
        step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _stacked_with_own_prefixes().layers[0]
    want = [layer.rows_kv(start, min(start + step, 9), 2) for start in range(0, 9, step)]
    written: list[int] = []

    def counting(dst: torch.Tensor, src: torch.Tensor) -> None:
        written.append(dst.numel())
        dst.copy_(src)

    monkeypatch.setattr(shared_prefix_cache, 'copy_into', counting)
    chunks = []
    for start, stop, kv in layer.chunks_kv(step, heads_repeat=2):
        chunks.append((start, stop))
        for g, w in zip(kv, want[len(chunks) - 1], strict=True):   # read before the next chunk
            assert torch.equal(g, w) and g.stride() == w.stride()
    assert chunks == [(s, min(s + step, 9)) for s in range(0, 9, step)]
    # Rows 0-2 share a 7-token prefix (7 tokens of their own after it), rows 3-6 a 5-token one
    # (9 of their own), rows 7-8 have 11 tokens of prompt each (3 of their own). Every row's own
    # tokens are written; a shared prefix only into slots that did not hold it for the previous
    # chunk (one call with no chunks: 3 x 7 + 4 x 5 + 2 x 11 = 63 prefix tokens).
    prefix_tokens = {1: 7 + 5 + 22, 2: 14 + 15 + 22, 3: 21 + 15 + 22, 4: 63, 9: 63, 20: 63}[step]
    own_tokens = 3 * 7 + 4 * 9 + 2 * 3
    assert sum(written) == 2 * (2 * H * D) * (prefix_tokens + own_tokens)   # K and V, heads x 2


def test_reset_empties_and_what_does_not_apply_is_refused() -> None:
    cache = SharedPrefixCache()
    cache.update(*_kv(1, 5, 0), 0)
    cache.reset()
    assert cache.get_seq_length() == 0 and cache.layers[0].keys is None
    cache.update(*_kv(2, 3, 1), 0)
    assert cache.get_seq_length() == 3 and cache.layers[0].rows == 2
    for call in (lambda: cache.reorder_cache(torch.tensor([1, 0])), lambda: cache.offload(0),
                 cache.layers[0].prefetch):
        with pytest.raises(NotImplementedError, match='SharedPrefixCache'):
            call()
