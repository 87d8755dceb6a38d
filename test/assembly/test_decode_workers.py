"""Decode workers: the pixels of a decode in the caller, named faults, no hang, clean exit."""
from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import pytest
from PIL import Image

from alpamayo_offload.assembly import (
    AssemblyConfig,
    DecodeAheadBuffer,
    DecodeOptions,
    DecodeWorkers,
    EncodedImage,
    InputError,
    PixelJob,
    PixelWorkerError,
    decode_image,
    run_pixel_job,
)
from alpamayo_offload.assembly.convert import ConversionError
from alpamayo_offload.model import AlpamayoConfig, ImageSizing, tiny_config


def camera(seed: int, h: int = 270, w: int = 480) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.dstack([(xx // 3 + seed) % 256, (yy // 2) % 256, ((xx + yy) // 5) % 256])
    return np.clip(base + rng.normal(0.0, 6.0, base.shape), 0, 255).astype(np.uint8)


def encoded(fmt: str, seed: int = 0, stamp_ns: int = 1) -> EncodedImage:
    buf = io.BytesIO()
    Image.fromarray(camera(seed)).save(buf, format=fmt.upper(), quality=90)
    return EncodedImage(stamp_ns, 'cam', buf.getvalue(), True, fmt)


@pytest.fixture
def workers() -> Iterator[DecodeWorkers]:
    w = DecodeWorkers(2, timeout_s=3.0)
    yield w
    w.close()


@pytest.mark.parametrize('fmt', ['jpeg', 'png'])
@pytest.mark.parametrize('size', ['release', 'tiny', 'fixed', 'native'])
@pytest.mark.parametrize('dct', [True, False])
def test_worker_pixels_are_the_callers_byte_for_byte(workers: DecodeWorkers, fmt: str,
                                                     size: str, dct: bool) -> None:
    frame_size = {'release': ImageSizing.of(AlpamayoConfig()), 'tiny': ImageSizing.of(
        tiny_config()), 'fixed': (60, 108), 'native': None}[size]
    image, options = encoded(fmt), DecodeOptions(dct_scaling=dct)
    here = decode_image(image, frame_size, options)
    there = decode_image(image, frame_size, options, workers.run)
    assert there.pixels.dtype == np.uint8 and there.pixels.flags['C_CONTIGUOUS']
    assert there.pixels.shape == here.pixels.shape and there.source_hw == here.source_hw
    assert there.pixels.tobytes() == here.pixels.tobytes()


def test_payload_the_worker_cannot_decode_is_image_corrupt_as_in_the_caller(
        workers: DecodeWorkers) -> None:
    good = encoded('png')
    at = good.data.index(b'IDAT') + 200          # header and end marker intact, pixels not
    bad = EncodedImage(1, 'cam', good.data[:at] + b'\x00' * 4000 + good.data[at + 4000:], True,
                       'png')
    with pytest.raises(ConversionError):
        workers.run(PixelJob(b'\x00not an image', 1, (4, 4), None))
    with pytest.raises(InputError) as here:
        decode_image(bad, (60, 108))
    with pytest.raises(InputError) as there:
        decode_image(bad, (60, 108), pixels=workers.run)
    assert here.value.reason == there.value.reason == 'image_corrupt'
    assert str(here.value) == str(there.value)
    assert workers.faults.count == 0


def test_a_killed_worker_is_a_named_fault_and_is_replaced() -> None:
    job = PixelJob(encoded('jpeg').data, 2, (60, 108), None)
    workers = DecodeWorkers(1)
    try:
        (pid,) = workers.pids()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(PixelWorkerError, match='decode_worker_failed'):
            workers.run(job)
        assert workers.faults.count == 1 and workers.faults.last
        assert len(workers.pids()) == 1 and workers.pids() != [pid]
        assert np.array_equal(workers.run(job), run_pixel_job(job))
        assert workers.faults.count == 1
    finally:
        workers.close()


def test_a_hung_worker_times_out_and_is_replaced() -> None:
    workers = DecodeWorkers(1, timeout_s=0.5)
    try:
        (pid,) = workers.pids()
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(PixelWorkerError, match='no reply in time'):
            workers.run(PixelJob(encoded('jpeg').data, 2, (60, 108), None))
        assert time.monotonic() - start < 5 and workers.pids() != [pid]
        (pid,) = workers.pids()
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(PixelWorkerError, match='no reply in time'):   # > the pipe holds
            workers.run(PixelJob(b'\xff' * (4 << 20), 1, (60, 108), None))
        assert time.monotonic() - start < 5 and workers.pids() != [pid]
        assert workers.run(PixelJob(encoded('jpeg').data, 2, (60, 108), None)).shape == (60, 108,
                                                                                          3)
    finally:
        workers.close()


def test_close_stops_the_workers_and_refuses_jobs() -> None:
    workers = DecodeWorkers(2)
    pids = workers.pids()
    workers.close()
    for pid in pids:
        with pytest.raises(ChildProcessError):   # reaped: gone, not a zombie
            os.waitpid(pid, os.WNOHANG)
    with pytest.raises(PixelWorkerError, match='closed'):
        workers.run(PixelJob(b'', 1, (4, 4), None))


def test_a_worker_fault_leaves_the_frame_to_on_demand_decoding(workers: DecodeWorkers) -> None:
    cfg = AssemblyConfig(image_size_hw=(60, 108))
    frame = encoded('jpeg', stamp_ns=10**12)
    for pid in workers.pids():
        os.kill(pid, signal.SIGKILL)
    with ThreadPoolExecutor(1) as pool:
        buf = DecodeAheadBuffer(4, pool, 0.08, workers.run)
        buf.push(frame, cfg)
        wait([e.future for e in buf._decodes.values()], timeout=30)
    assert buf.stats.worker_faults == 1 and buf.stats.decoded == 1
    assert buf.ready(frame, cfg) is None and buf.stats.misses == 1


def test_a_worker_that_cannot_be_restarted_stays_a_named_worker_fault() -> None:
    """Out of processes: the failed worker's next jobs are worker faults (the frame is decoded
    on demand), never `image_corrupt`, and nothing raises past `run`."""
    from unittest import mock

    from alpamayo_offload.assembly import decode_workers

    job = PixelJob(encoded('jpeg').data, 2, (60, 108), None)
    workers = DecodeWorkers(1)
    try:
        (pid,) = workers.pids()
        os.kill(pid, signal.SIGKILL)
        with mock.patch.object(decode_workers, '_Worker', side_effect=OSError('EAGAIN')):
            for _ in range(2):
                with pytest.raises(PixelWorkerError, match='decode_worker_failed'):
                    workers.run(job)
        assert 'restart failed' in workers.faults.last and workers.faults.count == 2
    finally:
        workers.close()


def test_bad_worker_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match='timeout_s'):
        DecodeWorkers(1, timeout_s=0)
    with pytest.raises(ValueError, match='count'):
        DecodeWorkers(0)
