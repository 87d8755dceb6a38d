"""The profiler times nvCOMP decompression of a real layer directly on the GPU."""
from __future__ import annotations

import pytest


@pytest.mark.cuda
def test_decompress_rate_is_timed_on_a_host_store_layer() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip('needs CUDA')
    from alpamayo_offload.runtime import codec as codec_module
    try:
        codec_module._import_nvcomp()
    except ImportError as err:
        pytest.skip(f'nvCOMP is not installed: {err}')
    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.profiling.compression import time_decompression

    engine = Engine.from_config(EngineConfig(model='tiny', device='cuda', pin_all_layers=True))
    try:
        flat = engine.host_layer_bytes('lm', 0)
        assert flat is not None and flat.dtype == torch.uint8
        assert flat.numel() == engine.layer_footprints()['lm'][0].packed_bytes
        timing = time_decompression(engine, 'lm', 0, reps=3)
        assert timing is not None and timing.gbps > 0 and timing.host_ms > 0   # round trip exact
    finally:
        engine.close()


def test_layer_bytes_come_from_the_host_store_and_the_cpu_times_nothing() -> None:
    import torch

    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.profiling.compression import time_decompression

    engine = Engine.from_config(EngineConfig(model='tiny', device='cpu', pin_all_layers=True))
    try:
        flat = engine.host_layer_bytes('lm', 0)
        assert flat is not None and flat.dtype == torch.uint8
        assert flat.numel() == engine.layer_footprints()['lm'][0].packed_bytes
        assert time_decompression(engine, 'lm', 0) is None
    finally:
        engine.close()
    unstored = Engine.from_config(EngineConfig(model='tiny', device='cpu'))
    try:
        assert unstored.host_layer_bytes('lm', 0) is None
    finally:
        unstored.close()
