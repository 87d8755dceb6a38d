"""The on-disk cache of compressed layers: a second attach reads it and compresses nothing.

Every file the cache would read is checked; a truncated, corrupt or mismatched one is refused
with a log line naming it and the layer is compressed again (and the file rewritten). Outputs
stay bit-identical to the preload run either way (CPU codec).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from runtime_cases import SCENARIOS, build_model, run, same

from alpamayo_offload.runtime import (
    CompressionCache,
    Mode,
    OffloadRuntime,
    PlaneZlibCodec,
    ResidencyPlan,
)

KEY = {'model': 'toy', 'seed': '0'}
PLAN = ResidencyPlan({'lm': (0,)}, compressed={'expert': (1,)})
SCENARIO = 'two-inferences'


@pytest.fixture(scope='module')
def reference() -> list[torch.Tensor]:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cpu')
    rt.attach()
    out = run(model, rt, SCENARIOS[SCENARIO])
    rt.detach()
    return out


def _start(cache: CompressionCache | None, reference: list[torch.Tensor]) -> OffloadRuntime:
    """Attach a fresh model with the cache, check its outputs, detach; return the runtime."""
    model = build_model()
    rt = OffloadRuntime(model.sequences(), PLAN, device='cpu', compression='on',
                        compression_cache=cache)
    rt.attach()
    assert rt._streamed and all(st.compressed for st in rt._streamed)
    assert same(run(model, rt, SCENARIOS[SCENARIO]), reference)
    rt.detach()
    return rt


def _files(cache: CompressionCache) -> dict[str, Path]:
    directory = cache.directory(PlaneZlibCodec())
    return {p.stem: p for p in directory.glob('*.bin')}


def test_second_start_reads_every_layer_and_compresses_nothing(
        tmp_path: Path, reference: list[torch.Tensor], compress_calls: list[int]) -> None:
    cache = CompressionCache(tmp_path, KEY)
    first = _start(cache, reference)
    n = first.compression_stats.layers
    assert n == 11 and len(compress_calls) == n
    assert first.compression_stats.compressed == n and first.compression_stats.cache_written == n
    assert len(_files(cache)) == n
    assert not list(tmp_path.rglob('*.tmp'))
    compress_calls.clear()
    second = _start(CompressionCache(tmp_path, KEY), reference)
    assert compress_calls == []
    stats = second.compression_stats
    assert (stats.cache_hits, stats.compressed, stats.cache_refused) == (n, 0, 0)
    assert stats.compress_s == 0.0 and stats.cache_read_s > 0


def _held_bytes(cache: CompressionCache | None) -> list[torch.Tensor]:
    """Attach with the cache; return every streamed layer's held (compressed) bytes."""
    model = build_model()
    rt = OffloadRuntime(model.sequences(), PLAN, device='cpu', compression='on',
                        compression_cache=cache)
    rt.attach()
    held = [st.transfer.src.clone() for st in rt._streamed]
    rt.detach()
    return held


def test_cached_bytes_are_the_bytes_compressed_without_a_cache(
        tmp_path: Path, reference: list[torch.Tensor]) -> None:
    plain = _start(None, reference)
    assert plain.compression_stats.cache_hits == 0
    cache = CompressionCache(tmp_path, KEY)
    _start(cache, reference)
    without, cached = _held_bytes(None), _held_bytes(CompressionCache(tmp_path, KEY))
    assert len(without) == len(cached) == plain.compression_stats.layers
    assert all(torch.equal(a, b) for a, b in zip(without, cached, strict=True))


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == 'truncated':
        path.write_bytes(bytes(data[:-7]))
    elif how == 'corrupt':
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == 'garbage':
        path.write_bytes(b'not a cache file at all' * 3)
    elif how == 'header':
        path.write_bytes(data[:16] + b'{' * (len(data) - 16))
    elif how == 'empty':
        path.write_bytes(b'')


@pytest.mark.parametrize(('how', 'reason'), [
    ('truncated', 'truncated'), ('corrupt', 'corrupt'), ('garbage', 'magic'),
    ('header', 'unreadable header'), ('empty', 'truncated')])
def test_a_damaged_file_is_refused_by_name_and_recompressed(
        tmp_path: Path, reference: list[torch.Tensor], compress_calls: list[int],
        caplog: pytest.LogCaptureFixture, how: str, reason: str) -> None:
    cache = CompressionCache(tmp_path, KEY)
    _start(cache, reference)
    victim = _files(cache)['lm.2']
    _damage(victim, how)
    compress_calls.clear()
    with caplog.at_level(logging.WARNING):
        rt = _start(CompressionCache(tmp_path, KEY), reference)
    refused = [r.getMessage() for r in caplog.records if 'refused' in r.getMessage()]
    assert len(refused) == 1 and str(victim) in refused[0] and reason in refused[0]
    assert len(compress_calls) == 1
    stats = rt.compression_stats
    assert (stats.cache_refused, stats.compressed, stats.cache_written) == (1, 1, 1)
    compress_calls.clear()
    _start(CompressionCache(tmp_path, KEY), reference)     # rewritten: whole again
    assert compress_calls == []


def test_a_file_of_another_key_or_layer_is_never_used(
        tmp_path: Path, reference: list[torch.Tensor], compress_calls: list[int],
        caplog: pytest.LogCaptureFixture) -> None:
    other = CompressionCache(tmp_path / 'other', {**KEY, 'seed': '1'})
    _start(other, reference)
    cache = CompressionCache(tmp_path / 'mine', KEY)
    _start(cache, reference)
    mine, theirs = _files(cache), _files(other)
    shutil.copyfile(theirs['lm.1'], mine['lm.1'])          # same layer, another checkpoint
    shutil.copyfile(mine['lm.3'], mine['lm.2'])            # same shapes, another layer
    compress_calls.clear()
    with caplog.at_level(logging.WARNING):
        rt = _start(CompressionCache(tmp_path / 'mine', KEY), reference)
    refused = sorted(r.getMessage() for r in caplog.records if 'refused' in r.getMessage())
    assert len(refused) == 2 and len(compress_calls) == 2
    assert str(mine['lm.1']) in refused[0] and 'another key (seed differ)' in refused[0]
    assert str(mine['lm.2']) in refused[1] and "holds layer 'lm.3'" in refused[1]
    assert rt.compression_stats.cache_refused == 2


def test_the_key_and_the_codec_choose_the_directory(tmp_path: Path) -> None:
    a = CompressionCache(tmp_path, KEY)
    assert a.directory(PlaneZlibCodec()) == CompressionCache(tmp_path, dict(KEY)).directory(
        PlaneZlibCodec())
    assert a.directory(PlaneZlibCodec()) != CompressionCache(
        tmp_path, {**KEY, 'seed': '2'}).directory(PlaneZlibCodec())
    assert a.directory(PlaneZlibCodec()) != a.directory(PlaneZlibCodec(chunk_bytes=1 << 16))
    assert a.directory(PlaneZlibCodec()) != a.directory(PlaneZlibCodec(level=6))


def test_an_unwritable_cache_logs_once_and_runs(tmp_path: Path, reference: list[torch.Tensor],
                                                caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / 'file'
    blocker.write_text('a file where the cache directory would go')
    with caplog.at_level(logging.WARNING):
        rt = _start(CompressionCache(blocker / 'cache', KEY), reference)
    assert sum('cannot write' in r.getMessage() for r in caplog.records) == 1
    assert rt.compression_stats.cache_written == 0
    assert rt.compression_stats.compressed == rt.compression_stats.layers
