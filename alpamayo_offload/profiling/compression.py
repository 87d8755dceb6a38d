"""The compression terms of a profile: compressed bytes, decompression rate, SM contention.

Measured on the engine's own runtime path, from the instrumented per-call records of three runs
with nothing resident (duck-typed `sequence`, `layer`, `repetition`, `dma_ms`, `exe_ms`,
`stall_ms`, `bytes`, `streamed`, as `collect` reads them):

- sequential, compression on: a call's `bytes` are its layer's compressed bytes (what its one
  DMA moved);
- the decompression is timed directly on the GPU (`time_decompression`: the sequence's
  largest layer, from the host store, compressed by the runtime's codec and decoded a few times
  between CUDA events on a stream of its own): its rate, and the host time of each enqueue
  (nvCOMP's Python calls, made by a streaming hook once per compressed layer and pass).
  Without that measurement (records built by hand, CPU tests) the rate is estimated from the
  sequential run, a call's stall less its copy, and the host time is 0. That estimate runs low
  on the GPU, where the compressed copy overlaps the previous layer's compute and only the
  decompression is left in the stall;
- pipelined, raw and compressed: the compressed run decompresses layer i+1 while layer i
  computes, so layer i's compute grows by the SM contention times their overlap; the contention
  is that growth over the overlap, summed over the sequence's layers.

`compression_terms` is pure (tested on CPU with records built by hand); `add_compression_terms`
runs the three inferences on a CUDA engine, or records "not measured" where nvCOMP does not
import (the planner then never compresses).
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from alpamayo_offload.planning.profile import Profile, SequenceProfile

LOG = logging.getLogger(__name__)


def _field(record: Any, name: str) -> Any:
    return record[name] if isinstance(record, Mapping) else getattr(record, name)


def _per_layer(calls: Iterable[Any], name: str) -> dict[tuple[str, int], list[float]]:
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    for c in calls:
        if _field(c, 'streamed'):
            out[(_field(c, 'sequence'), int(_field(c, 'layer')))].append(float(_field(c, name)))
    return out


def compression_terms(seq: SequenceProfile, sequential: Iterable[Any],
                      raw_pipelined: Iterable[Any], packed_pipelined: Iterable[Any],
                      timed: DecompressTiming | None = None) -> SequenceProfile:
    """Return `seq` with its compression terms from the three runs' call records.

    `timed`: the decompression timed directly (`time_decompression`: its rate and host
    enqueue time); without it the rate is estimated from the sequential run's stalls and the
    host time is 0. A layer whose calls copied no bytes in the sequential compressed run is not
    in it: the sequence is then returned unmeasured (compression is never chosen for it).
    """
    calls = list(sequential)
    moved = {k: v for k, v in _per_layer(calls, 'bytes').items() if max(v) > 0}
    stall = _per_layer(calls, 'stall_ms')
    dma = _per_layer(calls, 'dma_ms')
    keys = [(seq.name, i) for i in range(seq.n_layers)]
    if any(k not in moved for k in keys):
        LOG.warning('%s: the compressed run did not copy every layer; compression not measured',
                    seq.name)
        return seq
    packed = tuple(min(int(max(moved[k])), seq.layer_bytes[k[1]]) for k in keys)
    shrunk = {i for i, (b, n) in enumerate(zip(packed, seq.layer_bytes, strict=True)) if b < n}
    if timed is not None and timed.gbps > 0:
        decode = [n / (timed.gbps * 1e6) for n in seq.layer_bytes]
    else:   # the first call of each layer copied it (later ones may find it in its slot)
        decode = [max(0.0, stall[k][0] - dma[k][0]) for k in keys]
    decoded_ms = sum(decode[i] for i in shrunk)
    if not shrunk or decoded_ms <= 0:
        LOG.warning('%s: no layer shrank or decompression took no time; compression not '
                    'measured', seq.name)
        return seq
    gbps = sum(seq.layer_bytes[i] for i in shrunk) / (decoded_ms * 1e6)
    raw = {k: statistics.median(v) for k, v in _per_layer(raw_pipelined, 'exe_ms').items()}
    slowed = {k: statistics.median(v)
              for k, v in _per_layer(packed_pipelined, 'exe_ms').items()}
    growth = overlap = 0.0
    for i in range(seq.n_layers - 1):
        here = (seq.name, i)
        if here in raw and here in slowed and i + 1 in shrunk:
            growth += slowed[here] - raw[here]
            overlap += min(decode[i + 1], raw[here])
    contention = min(1.0, max(0.0, growth / overlap)) if overlap > 0 else 0.0
    return dataclasses.replace(seq, compressed_bytes=packed, decompress_gbps=gbps,
                               decompress_contention=contention,
                               decompress_host_ms=timed.host_ms if timed is not None else 0.0)


@dataclasses.dataclass(frozen=True)
class DecompressTiming:
    """The runtime codec's decompression of one layer, timed on the GPU."""

    gbps: float           # uncompressed bytes written per second of GPU time, in GB/s
    host_ms: float        # host time to enqueue one decompression (the codec's calls)


def time_decompression(engine: Any, sequence: str, index: int,
                       reps: int = 5) -> DecompressTiming | None:
    """Time the runtime's GPU codec decoding layer `index` of `sequence`.

    The layer's packed bytes from the engine's host store are compressed by the codec the
    runtime streams with, then decoded `reps` times into a scratch buffer between two CUDA
    events on a stream of their own (the host time of those enqueues is timed too), and the
    result checked bit for bit. None where there is no host store or no CUDA device.
    """
    import torch

    from alpamayo_offload.runtime.codec import select_codec

    flat = engine.host_layer_bytes(sequence, index)
    device = engine.device
    if flat is None or device.type != 'cuda':
        return None
    stream = torch.cuda.Stream(device)
    codec = select_codec('on', device, stream)
    assert codec is not None   # 'on' raises rather than return no codec
    n = flat.numel() - flat.numel() % 2
    raw = flat[:n].to(device)
    packed = codec.compress(raw)
    src = packed.data.to(device)
    out = torch.empty_like(raw)
    with torch.cuda.stream(stream):
        codec.decompress_into(src, packed.index, out)    # warm-up: builds the decoder config
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        enqueue_s = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            codec.decompress_into(src, packed.index, out)
            enqueue_s += time.perf_counter() - t0
        end.record(stream)
    end.synchronize()
    if not torch.equal(out, raw):
        raise RuntimeError(f'{sequence}[{index}]: decompression did not restore the layer')
    return DecompressTiming(n / (start.elapsed_time(end) / reps * 1e6), enqueue_s / reps * 1e3)


def _calls(torch: Any, engine: Any, model_input: Any, mode: str, compression: str) -> list[Any]:
    engine.replan(resident={}, mode=mode, budget_bytes=None, embed_on_host=False,
                  instrument=True, compression=compression)
    engine.infer(model_input)                                  # warm-up of this attach
    engine.runtime_stats(reset=True)
    torch.cuda.synchronize()
    engine.infer(model_input)
    return list(engine.runtime_stats().calls)


def add_compression_terms(engine: Any, model_input: Any, profile: Profile) -> Profile:
    """Return `profile` with each sequence's compression terms, or marked "not measured".

    Leaves the engine pipelined, raw, nothing resident.
    """
    import torch

    from alpamayo_offload.engine import EngineError

    try:
        sequential = _calls(torch, engine, model_input, 'sequential', 'on')
        packed = _calls(torch, engine, model_input, 'pipelined', 'on')
        timed = {s.name: time_decompression(engine, s.name, max(range(s.n_layers),
                                                                key=s.layer_bytes.__getitem__))
                 for s in profile.sequences}
    except EngineError as err:
        LOG.warning('compression not measured (%s): the planner will not compress', err)
        engine.replan(resident={}, mode='pipelined', budget_bytes=None, embed_on_host=False,
                      compression='off')
        return dataclasses.replace(profile, settings={
            **profile.settings, 'compression': f'not measured: {err}'})
    raw = _calls(torch, engine, model_input, 'pipelined', 'off')
    engine.replan(resident={}, mode='pipelined', budget_bytes=None, embed_on_host=False,
                  compression='off')
    for name, t in timed.items():
        if t is not None:
            LOG.info('%s: decompression %.0f GB/s, %.3f ms of host time to enqueue (timed on the '
                     'GPU)', name, t.gbps, t.host_ms)
    sequences = tuple(compression_terms(s, sequential, raw, packed, timed[s.name])
                      for s in profile.sequences)
    measured = all(s.compression_measured for s in sequences)
    return dataclasses.replace(profile, sequences=sequences, settings={
        **profile.settings,
        'compression': 'measured' if measured else 'not measured: see the log of the profile run'})
