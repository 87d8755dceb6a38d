"""`profiling.compression.compression_terms` on call records built by hand."""
from __future__ import annotations

import pytest

from alpamayo_offload.planning.profile import SequenceProfile
from alpamayo_offload.profiling.compression import DecompressTiming, compression_terms

LAYER = 1_000_000
SEQ = SequenceProfile('lm', (LAYER,) * 3, (1.0,) * 3)


def _call(layer: int, *, exe: float = 1.0, dma: float = 0.0, stall: float = 0.0,
          nbytes: int = 0, repetition: int = 0) -> dict:
    return {'sequence': 'lm', 'layer': layer, 'repetition': repetition, 'exe_ms': exe,
            'dma_ms': dma, 'stall_ms': stall, 'bytes': nbytes, 'streamed': True}


def test_bytes_rate_and_contention_from_the_three_runs() -> None:
    # Sequential, compressed: layers 0 and 1 shrink to 0.7, layer 2 does not (streams raw);
    # a stall is the copy plus the decompression (0.5 ms for a 1 MB layer: 2 GB/s).
    sequential = [_call(0, dma=0.7, stall=1.2, nbytes=700_000),
                  _call(1, dma=0.7, stall=1.2, nbytes=700_000),
                  _call(2, dma=1.0, stall=1.0, nbytes=LAYER + 64),
                  _call(0, dma=0.7, stall=1.2, nbytes=700_000, repetition=1)]
    raw = [_call(i, exe=1.0) for i in range(3)]
    # Pipelined, compressed: layer 0 computes while layer 1 decompresses (0.5 ms overlap)
    # and grows by 0.1 ms: contention 0.2. Layer 1's successor is raw: no decompression.
    packed = [_call(0, exe=1.1), _call(1, exe=1.0), _call(2, exe=1.0)]
    got = compression_terms(SEQ, sequential, raw, packed)
    assert got.compressed_bytes == (700_000, 700_000, LAYER)
    assert got.shrinks(0) and not got.shrinks(2)
    assert got.decompress_gbps == pytest.approx(2.0)
    assert got.decompress_contention == pytest.approx(0.2)
    assert got.decompress_ms(0) == pytest.approx(0.5) and got.decompress_ms(2) == 0.0


def test_a_rate_timed_on_the_gpu_replaces_the_stall_estimate() -> None:
    # The copy overlapped the previous compute, so the stalls (0.2 ms less than the copy) say
    # nothing; the rate timed directly is 1 GB/s: 1 ms per 1 MB layer, 1 ms of overlap.
    sequential = [_call(i, dma=0.7, stall=0.5, nbytes=700_000) for i in range(3)]
    raw = [_call(i, exe=2.0) for i in range(3)]
    packed = [_call(0, exe=2.5), _call(1, exe=2.5), _call(2, exe=2.0)]
    got = compression_terms(SEQ, sequential, raw, packed, DecompressTiming(1.0, 0.25))
    assert got.decompress_gbps == pytest.approx(1.0) and got.decompress_host_ms == 0.25
    assert got.decompress_ms(1) == pytest.approx(1.0)
    assert got.decompress_contention == pytest.approx(0.5)
    assert not compression_terms(SEQ, sequential, raw, packed).compression_measured


def test_a_layer_never_copied_leaves_the_sequence_unmeasured() -> None:
    sequential = [_call(0, dma=0.7, stall=1.2, nbytes=700_000)]
    got = compression_terms(SEQ, sequential, [], [])
    assert got == SEQ and not got.compression_measured
