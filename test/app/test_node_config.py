"""Parameter values -> NodeConfig: the joint rules and the typed engine settings."""
from __future__ import annotations

import pytest

from alpamayo_offload.app import schema
from alpamayo_offload.app.config import config_from_values, decode_workers_for
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.engine import EngineConfig


def test_default_config_and_planner_overrides() -> None:
    cfg = config_from_values({})
    assert isinstance(cfg.engine, EngineConfig) and cfg.engine.resident == {}
    assert cfg.engine.budget_bytes is None and cfg.vram_budget == ''   # resolved by the loader
    assert cfg.engine.embed_on_host is False and cfg.torch_threads == 1
    assert cfg.decode_ahead is True and cfg.decode_ahead_min_interval_s == 0.08
    assert [c.slot for c in cfg.cameras] == [0, 1, 2, 6]
    planner = {'vram_budget': '12.000GiB', 'resident_layers.lm': [6, 0, 3],
               'resident_layers.vit': [1], 'resident_layers.expert': [-1],
               'embed_on_host': True, 'plan.predicted_latency_s': 2.5}
    cfg = config_from_values(planner)
    assert cfg.engine.resident == {'lm': (0, 3, 6), 'vit': (1,)}
    assert cfg.engine.embed_on_host is True
    assert cfg.vram_budget == '12.000GiB'
    assert cfg.plan_info == {'plan.predicted_latency_s': 2.5}


def test_diffusion_steps_zero_means_the_checkpoints_own() -> None:
    assert schema.PARAMETERS['decode.diffusion_steps'].default == 0
    assert config_from_values({}).engine.diffusion_steps == EngineConfig().diffusion_steps
    assert config_from_values({'decode.diffusion_steps': 6}).engine.diffusion_steps == 6
    assert config_from_values({'decode.fixed_tokens': 0}).engine.fixed_decode_tokens is None


def test_relative_budget_needs_cuda_and_says_so() -> None:
    values = {'vram_budget': 'free-2GiB'}
    with pytest.raises(ParameterError, match=r"relative to free VRAM.*device is 'cpu'"):
        config_from_values(values)
    assert config_from_values(values | {'device': 'cuda'}).vram_budget == 'free-2GiB'
    with pytest.raises(ParameterError, match='vram_budget'):
        config_from_values({'vram_budget': '12 parsecs'})
    with pytest.raises(ParameterError, match='vram_budget: expected a string'):
        config_from_values({'vram_budget': 12 * 2**30})


@pytest.mark.parametrize(('key', 'value', 'match'), [
    ('cameras.transports', ['raw', 'h264', 'raw', 'raw'], 'cameras.transports'),
    ('cameras.slots', [0, 1, 2], 'equal length'),
    ('cameras.slots', [0, 1, 1, 6], 'camera_slots'),
    ('images.height', 64, 'images.height'),     # without images.width (0)
    ('mode', 'fast', 'mode'),
    ('device', 'gpu', 'device'),
    ('sync.frame_tolerance_s', -1.0, 'frame_tolerance_s'),
    ('inference.period_s', 0.0, 'period_s'),
    ('inference.threads', -1, 'inference.threads'),
    ('images.decode_ahead_min_interval_s', -0.1, 'images.decode_ahead_min_interval_s'),
    ('resident_layers.lm', [0, -1], 'resident_layers.lm'),
    ('sync.frame_tolerence_s', 0.1, 'did you mean'),
])
def test_bad_values_are_rejected_with_the_name(key: str, value: object, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        config_from_values({key: value})


@pytest.mark.parametrize(('device', 'decoder', 'chosen'), [
    ('cpu', 'auto', 'cpu'), ('cuda', 'auto', 'cpu'), ('cpu', 'cpu', 'cpu'), ('cuda', 'gpu', 'gpu')])
def test_auto_decodes_jpeg_on_the_cpu(device: str, decoder: str, chosen: str) -> None:
    # H200 measurement (docs/benchmarks.md, bench_decode_contention): beside a streaming engine
    # nvJPEG decoding fell to 0.7-1.0 Hz of the cameras' 10-30 Hz, the CPU path did not.
    cfg = config_from_values({'device': device, 'images.decoder': decoder})
    assert cfg.decoder == chosen


def test_gpu_decoder_needs_a_cuda_device() -> None:
    with pytest.raises(ParameterError, match='images.decoder'):
        config_from_values({'device': 'cpu', 'images.decoder': 'gpu'})


@pytest.mark.parametrize(('values', 'processes', 'why'), [
    ({}, 'threads', ''),                                   # the defaults: a worker per thread
    ({'device': 'cuda', 'images.decoder': 'auto'}, 'threads', ''),   # 'auto' is the CPU
    ({'device': 'cuda', 'images.decoder': 'cpu'}, 'threads', ''),
    ({'device': 'cuda', 'images.decoder': 'gpu'}, 0, "images.decoder 'gpu'"),
    ({'images.decode_ahead_processes': False}, 0, ''),     # threads, as asked: nothing to say
    ({'images.decode_ahead': False}, 0, ''),
])
def test_no_decode_worker_processes_with_the_gpu_decoder(
        values: dict[str, object], processes: int | str, why: str) -> None:
    cfg = config_from_values({'images.decode_threads': 2, **values})
    count, reason = decode_workers_for(cfg)
    assert count == (min(2, len(cfg.cameras)) if processes == 'threads' else processes)
    assert (why in reason) if why else reason == ''
