"""Decode workers: the pixels of a decode in the caller, named faults, no hang, clean exit."""
from __future__ import annotations

import io
import os
import signal
import sys
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
from alpamayo_offload.assembly.decode_workers import restart_wait
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
        assert time.monotonic() - start < 5 and workers.pids() == []   # twice in a row
        assert workers.faults.backing_off == 1 and 0 < workers.faults.retry_in_s <= 0.5
        time.sleep(workers.faults.retry_in_s + 0.05)
        workers._timeout_s = 10.0   # the fresh worker's imports may take > 0.5 s on a busy host
        assert workers.run(PixelJob(encoded('jpeg').data, 2, (60, 108), None)).shape == (60, 108,
                                                                                          3)
        assert workers.faults.backing_off == 0 and len(workers.pids()) == 1
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


class Clock:
    """A clock the test moves by hand (back-off without sleeping)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_that_cannot_be_restarted_stays_a_named_worker_fault() -> None:
    """Out of processes: the failed worker's next jobs are worker faults (the frame is decoded
    on demand), never `image_corrupt`, nothing raises past `run`, and the restart backs off."""
    from unittest import mock

    from alpamayo_offload.assembly import decode_workers

    job = PixelJob(encoded('jpeg').data, 2, (60, 108), None)
    clock = Clock()
    workers = DecodeWorkers(1, clock=clock)
    try:
        (pid,) = workers.pids()
        os.kill(pid, signal.SIGKILL)
        with mock.patch.object(decode_workers, '_Worker', side_effect=OSError('EAGAIN')) as start:
            for _ in range(2):
                with pytest.raises(PixelWorkerError, match='decode_worker_failed'):
                    workers.run(job)
            assert start.call_count == 1   # at once after the death; the 2nd job: backing off
            assert workers.faults.retry_in_s == 0.5
            clock.now += 0.5
            with pytest.raises(PixelWorkerError, match='did not restart'):
                workers.run(job)
            assert start.call_count == 2 and workers.faults.retry_in_s == 1.0
        assert 'restart failed' in workers.faults.last and workers.faults.count == 3
        assert workers.faults.restarts == 0 and workers.pids() == []
        clock.now += 1.0
        assert np.array_equal(workers.run(job), run_pixel_job(job))   # the resources are back
        assert workers.faults.restarts == 1 and workers.faults.backing_off == 0
    finally:
        workers.close()


def test_a_worker_that_dies_on_start_is_restarted_with_a_bounded_back_off() -> None:
    """A real worker process that exits at once (a broken codec, say): a start per doubling
    back-off, 0.5 s up to the longest, not one per frame; the jobs meanwhile are refused at once
    as named worker faults, so the frame is decoded in the caller."""
    clock = Clock()
    job = PixelJob(encoded('jpeg').data, 2, (60, 108), None)
    workers = DecodeWorkers(1, backoff_s=(0.5, 2.0), clock=clock,
                            command=[sys.executable, '-c', 'raise SystemExit(3)'])
    try:
        waits = []
        for _ in range(6):
            with pytest.raises(PixelWorkerError, match='decode_worker_failed'):
                workers.run(job)   # a worker starts and dies under it
            faults = workers.faults
            waits.append(faults.retry_in_s)
            assert faults.backing_off == (faults.retry_in_s > 0)
            for _ in range(20 if faults.backing_off else 0):   # frames while it backs off
                with pytest.raises(PixelWorkerError, match='backing off'):
                    workers.run(job)
            assert workers.faults.restarts == faults.restarts   # no process started meanwhile
            clock.now += faults.retry_in_s
        assert waits == [0.0, 0.5, 1.0, 2.0, 2.0, 2.0]
        assert workers.faults.count == 6 and workers.faults.restarts == 5   # the 1st: at init
        assert 'EOFError' in workers.faults.last or 'BrokenPipe' in workers.faults.last
    finally:
        workers.close()


def test_a_job_that_runs_resets_the_back_off() -> None:
    clock = Clock()
    job = PixelJob(encoded('jpeg').data, 2, (60, 108), None)
    workers = DecodeWorkers(1, clock=clock)
    try:
        for expected_wait in (0.0, 0.5):   # two deaths in a row
            os.kill(workers.pids()[0], signal.SIGKILL) if workers.pids() else None
            with pytest.raises(PixelWorkerError):
                workers.run(job)
            assert workers.faults.retry_in_s == expected_wait
        clock.now += 0.5
        assert np.array_equal(workers.run(job), run_pixel_job(job))
        with pytest.raises(ConversionError):   # a payload the worker rejects: it ran
            workers.run(PixelJob(b'\x00not an image', 1, (4, 4), None))
        os.kill(workers.pids()[0], signal.SIGKILL)
        with pytest.raises(PixelWorkerError):
            workers.run(job)
        assert workers.faults.retry_in_s == 0.0 and len(workers.pids()) == 1   # at once again
    finally:
        workers.close()


def test_frames_are_decoded_on_demand_while_the_workers_back_off() -> None:
    """Decode-ahead during a back-off: no frame decoded ahead, none lost or judged corrupt."""
    cfg = AssemblyConfig(image_size_hw=(60, 108))
    workers = DecodeWorkers(1, backoff_s=(60.0, 60.0),
                            command=[sys.executable, '-c', 'raise SystemExit(3)'])
    frames = [encoded('jpeg', seed=i, stamp_ns=10**12 + i * 10**8) for i in range(3)]
    try:
        with ThreadPoolExecutor(1) as pool:
            buf = DecodeAheadBuffer(4, pool, 0.08, workers.run)
            for frame in frames:
                buf.push(frame, cfg)
                wait([e.future for e in buf._decodes.values()], timeout=30)
        assert buf.stats.worker_faults == 3 and workers.faults.backing_off == 1
        assert workers.faults.count == 2 and workers.faults.restarts == 1
        for frame in frames:
            assert buf.ready(frame, cfg) is None   # left to the caller
            assert decode_image(frame, cfg.frame_size, cfg.decode_options).pixels.shape == (
                60, 108, 3)
    finally:
        workers.close()


def test_bad_worker_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match='timeout_s'):
        DecodeWorkers(1, timeout_s=0)
    with pytest.raises(ValueError, match='count'):
        DecodeWorkers(0)
    with pytest.raises(ValueError, match='backoff_s'):
        DecodeWorkers(1, backoff_s=(2.0, 1.0))


def test_restart_wait_doubles_to_its_longest_and_never_overflows() -> None:
    assert [restart_wait(n, 0.5, 30.0) for n in range(1, 10)] == [
        0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert restart_wait(10**6, 0.5, 30.0) == 30.0   # a place failing for days
