"""The engine's compression cache: beside a checkpoint, keyed by its files, read at a second start.

CPU codec (compression 'on'): the second start compresses nothing, reads every layer from the
cache and gives the trajectory and tokens of the start without a cache, bit for bit.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from alpamayo_offload.engine import Engine, EngineConfig, example_input
from alpamayo_offload.engine import compression_cache as cache_module
from alpamayo_offload.engine.compression_cache import (
    NEXT_TO_CHECKPOINT,
    USER_CACHE,
    cache_root,
    weights_key,
)
from alpamayo_offload.model import build_random, save_checkpoint, tiny_config

RUN = dict(fixed_decode_tokens=2, diffusion_steps=2, compression='on', mode='pipelined',
           resident={'vit': (0,)}, compressed={'expert': (1,)})


@pytest.fixture(scope='module')
def inputs():
    return example_input(108, 192)


@pytest.fixture()
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / 'ckpt'
    save_checkpoint(build_random(tiny_config(), dtype=torch.bfloat16), path)
    return path


def _start(inputs, **config):
    engine = Engine.from_config(EngineConfig(**{**RUN, **config}))
    try:
        return engine.infer(inputs), engine.info
    finally:
        engine.close()


def test_second_start_reads_the_cache_beside_the_checkpoint(inputs, checkpoint: Path,
                                                            compress_calls: list[int]) -> None:
    plain, plain_info = _start(inputs, model=str(checkpoint), compression_cache='off')
    assert plain_info.compression_cache == '' and len(compress_calls) > 0
    n = len(compress_calls)
    compress_calls.clear()
    first, info = _start(inputs, model=str(checkpoint))
    assert info.compression_cache == str(checkpoint / NEXT_TO_CHECKPOINT)
    assert len(compress_calls) == n and info.compress_s > 0 and info.compression_cache_hits == 0
    compress_calls.clear()
    second, info = _start(inputs, model=str(checkpoint))
    assert compress_calls == []
    assert info.compression_cache_hits == n and info.compress_s == 0.0
    assert info.compression_cache_read_s > 0
    for got in (first, second):
        assert np.array_equal(got.samples_xyz, plain.samples_xyz)
        assert got.coc_token_ids == plain.coc_token_ids
    assert 'compress_s' in info.as_dict()
    copied, streamed = second.streaming['bytes_copied'], second.streaming['bytes_streamed']
    assert 0 < copied < streamed == plain.streaming['bytes_streamed']


def test_a_rewritten_checkpoint_gets_another_key(checkpoint: Path) -> None:
    config = EngineConfig(model=str(checkpoint))
    before = weights_key(config, torch.bfloat16, torch.device('cpu'))
    weights = checkpoint / 'model.safetensors'
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    after = weights_key(config, torch.bfloat16, torch.device('cpu'))
    assert before['model'] == after['model'] and before['weights'] != after['weights']
    cast = weights_key(EngineConfig(model=str(checkpoint), dtype='float32'), torch.float32,
                       torch.device('cpu'))
    assert cast['dtype'] != after['dtype']


def test_where_the_cache_lives(checkpoint: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_root('off', str(checkpoint)) is None
    assert cache_root('auto', 'tiny') is None              # a preset has no checkpoint
    assert cache_root(str(tmp_path / 'c'), 'tiny') == tmp_path / 'c'
    assert cache_root('auto', str(checkpoint)) == checkpoint / NEXT_TO_CHECKPOINT
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
    monkeypatch.setattr(cache_module.os, 'access', lambda path, mode: False)
    assert cache_root('auto', str(checkpoint)) == tmp_path / 'xdg' / USER_CACHE
    (checkpoint / NEXT_TO_CHECKPOINT).mkdir()                 # one shipped with the checkpoint
    assert cache_root('auto', str(checkpoint)) == checkpoint / NEXT_TO_CHECKPOINT


def test_a_preset_caches_only_in_a_named_directory(inputs, tmp_path: Path,
                                                   compress_calls: list[int]) -> None:
    _, info = _start(inputs, model='tiny')
    assert info.compression_cache == '' and compress_calls
    compress_calls.clear()
    _start(inputs, model='tiny', compression_cache=str(tmp_path))
    n = len(compress_calls)
    compress_calls.clear()
    _, info = _start(inputs, model='tiny', compression_cache=str(tmp_path))
    assert compress_calls == [] and info.compression_cache_hits == n
    compress_calls.clear()
    _start(inputs, model='tiny', seed=1, compression_cache=str(tmp_path))   # other weights
    assert len(compress_calls) == n


def test_compression_cache_setting_is_validated() -> None:
    with pytest.raises(ValueError, match='compression_cache'):
        EngineConfig(compression_cache='')
