"""Decode-ahead: same model input as on-demand decoding, whatever the background managed to do."""
from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import pytest
from PIL import Image

from alpamayo_offload.assembly import (
    AssemblyConfig,
    DecodeAheadBuffer,
    DecodeWorkers,
    EncodedImage,
    InputError,
    OdometrySample,
    PixelJob,
    assemble,
    decode_selection,
    run_pixel_job,
    select_inputs,
)

NS = 1_000_000_000
T_START = 1_000 * NS
CFG = AssemblyConfig(image_size_hw=(60, 108))
SLOTS = (0, 1, 2, 6)


def odometry() -> list[OdometrySample]:
    """3 s of straight driving at 50 Hz from T_START (covers every history here)."""
    return [OdometrySample(T_START + k * NS // 50, 'odom', 'base_link', (0.1 * k, 0.0, 0.0),
                           (0.0, 0.0, 0.0, 1.0)) for k in range(151)]


def jpeg_frame(stamp_ns: int, seed: int, w: int = 320, h: int = 180) -> EncodedImage:
    """A textured JPEG (draft decoding and resizing both apply at CFG's size)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.dstack([(xx * 3 + seed) % 256, (yy * 2) % 256, (xx + yy) % 256])
    rgb = np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format='JPEG', quality=90)
    return EncodedImage(stamp_ns, 'cam', buf.getvalue(), True, 'jpeg')


def raw_frame(stamp_ns: int, seed: int) -> EncodedImage:
    px = np.random.default_rng(seed).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    return EncodedImage(stamp_ns, 'cam', px.tobytes(), False, 'rgb8', 90, 160, 480)


def stream(rate: float = 10.0, duration_s: float = 2.0, raw_slot: int | None = 6,
           ) -> list[tuple[int, EncodedImage]]:
    """Frames of all cameras in arrival order (camera `raw_slot` sends raw rgb8)."""
    out = []
    for k in range(int(duration_s * rate) + 1):
        for c, slot in enumerate(SLOTS):
            stamp = T_START + round(k / rate * NS)
            make = raw_frame if slot == raw_slot else jpeg_frame
            out.append((slot, make(stamp, 100 * c + k)))
    return out


Pixels = Callable[[PixelJob], np.ndarray]


@pytest.fixture(scope='module')
def workers() -> Iterator[DecodeWorkers]:
    w = DecodeWorkers(2)
    yield w
    w.close()


@pytest.fixture(params=['thread', 'process'])
def pixels(request: pytest.FixtureRequest) -> Pixels:
    """Where decode-ahead decodes: in its thread, or in worker processes."""
    if request.param == 'thread':
        return run_pixel_job
    return request.getfixturevalue('workers').run


def buffers(pool: ThreadPoolExecutor | None, depth: int = 20, min_interval_s: float = 0.08,
            pixels: Pixels = run_pixel_job) -> dict[int, DecodeAheadBuffer]:
    return {s: DecodeAheadBuffer(depth, pool, min_interval_s, pixels) for s in SLOTS}


def feed(bufs: dict[int, DecodeAheadBuffer], frames: list[tuple[int, EncodedImage]]) -> None:
    for slot, frame in frames:
        bufs[slot].push(frame, CFG)


def settle(bufs: dict[int, DecodeAheadBuffer]) -> None:
    """Wait until every queued background decode has finished."""
    futures = [e.future for b in bufs.values() for e in b._decodes.values()]
    wait(futures, timeout=30)


def lookup(bufs: dict[int, DecodeAheadBuffer]):
    return lambda slot, frame: bufs[slot].ready(frame, CFG)


def snapshot(bufs: dict[int, DecodeAheadBuffer]) -> dict[int, list[EncodedImage]]:
    return {s: b.snapshot() for s, b in bufs.items()}


def test_decoded_ahead_inputs_are_byte_identical_to_on_demand(pixels: Pixels) -> None:
    with ThreadPoolExecutor(2) as pool:
        bufs = buffers(pool, pixels=pixels)
        feed(bufs, stream())
        settle(bufs)
        sel = select_inputs(snapshot(bufs), odometry(), CFG)
        ahead = decode_selection(sel, CFG, pool, lookup(bufs))
    assert sum(b.stats.hits for b in bufs.values()) == 16
    assert sum(b.stats.misses for b in bufs.values()) == 0
    fresh = assemble(snapshot(bufs), odometry(), CFG)          # replay's path: on demand, serial
    assert ahead.images.shape == (4, 4, 60, 108, 3)
    assert ahead.images.tobytes() == fresh.images.tobytes()
    assert ahead.source_hw == fresh.source_hw == ((180, 320),) * 3 + ((90, 160),)
    assert ahead.frame_stamps_ns == fresh.frame_stamps_ns


def test_frames_not_decoded_yet_are_decoded_on_demand() -> None:
    release = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(release.wait)                              # the background is stalled
        bufs = buffers(pool)
        feed(bufs, stream())
        sel = select_inputs(snapshot(bufs), odometry(), CFG)
        with ThreadPoolExecutor(2) as on_demand:
            got = decode_selection(sel, CFG, on_demand, lookup(bufs))
        release.set()
    assert sum(b.stats.misses for b in bufs.values()) == 16
    # the 16 queued decodes the inference did itself are dropped from the background queue
    assert sum(b.stats.cancelled for b in bufs.values()) >= 16
    assert got.images.tobytes() == assemble(snapshot(bufs), odometry(), CFG).images.tobytes()


def test_size_change_at_run_time_is_not_served_stale_pixels() -> None:
    with ThreadPoolExecutor(2) as pool:
        bufs = buffers(pool)
        feed(bufs, stream())
        settle(bufs)
        other = AssemblyConfig(image_size_hw=(30, 54))
        sel = select_inputs(snapshot(bufs), odometry(), other)
        got = decode_selection(sel, other, pool, lambda s, f: bufs[s].ready(f, other))
    assert got.images.shape == (4, 4, 30, 54, 3)
    assert sum(b.stats.hits for b in bufs.values()) == 0


@pytest.mark.parametrize(('fault', 'reason'), [
    ('corrupt', 'image_corrupt'), ('truncated', 'image_truncated'),
    ('size', 'image_size_mismatch'), ('encoding', 'image_encoding'),
])
def test_bad_frame_decoded_ahead_gives_its_reason_when_selected(fault: str, reason: str,
                                                                pixels: Pixels) -> None:
    frames = stream()
    slot, good = frames[-4 * 2 + 1]                            # camera 1, frame at t0 - 0.1 s
    data = {'corrupt': b'\x00garbage' * 40, 'truncated': good.data[:len(good.data) // 2]}
    if fault == 'size':
        bad = jpeg_frame(good.stamp_ns, 7, w=300)
    elif fault == 'encoding':
        bad = EncodedImage(good.stamp_ns, 'cam', good.data, True, 'webp')
    else:
        bad = EncodedImage(good.stamp_ns, 'cam', data[fault], True, 'jpeg')
    frames[-4 * 2 + 1] = (slot, bad)
    with ThreadPoolExecutor(2) as pool:
        bufs = buffers(pool, pixels=pixels)
        feed(bufs, frames)
        settle(bufs)
        sel = select_inputs(snapshot(bufs), odometry(), CFG)
        if fault != 'size':                                    # the failure is stored ahead
            stored = bufs[slot].ready(bad, CFG)
            assert stored is not None and isinstance(stored.exception(), InputError)
        with pytest.raises(InputError) as ahead:
            decode_selection(sel, CFG, pool, lookup(bufs))
        with pytest.raises(InputError) as on_demand:
            decode_selection(sel, CFG, pool)
        # reported again by the next inference that selects it; other frames still serve
        with pytest.raises(InputError) as again:
            decode_selection(sel, CFG, pool, lookup(bufs))
    assert ahead.value.reason == on_demand.value.reason == again.value.reason == reason
    # same message too (PIL names its BytesIO object by address)
    assert re.sub('0x[0-9a-f]+', '', str(ahead.value)) == re.sub('0x[0-9a-f]+', '',
                                                                str(on_demand.value))


def test_rule_skips_near_duplicates_of_fast_cameras_and_they_decode_on_demand() -> None:
    with ThreadPoolExecutor(2) as pool:
        bufs = buffers(pool, depth=40)
        frames = stream(rate=30.0, duration_s=2.0)               # 61 frames per camera
        feed(bufs, frames)
        settle(bufs)
        decoded = {s: sorted(b._decodes) for s, b in bufs.items()}
        sel = select_inputs(snapshot(bufs), odometry(), CFG)
        got = decode_selection(sel, CFG, pool, lookup(bufs))
    for stamps in decoded.values():                             # every third 30 Hz frame
        assert all((s - T_START) % (NS // 10) == 0 for s in stamps), stamps
        assert np.diff(stamps).min() >= 0.08 * NS
    assert sum(b.stats.skipped for b in bufs.values()) == 4 * (61 - 21)
    assert got.images.tobytes() == assemble(snapshot(bufs), odometry(), CFG).images.tobytes()
    every = DecodeAheadBuffer(40, None, 0.0)                   # off: nothing is decoded ahead
    every.push(frames[0][1], CFG)
    assert every.decodes_held() == 0 and len(every) == 1


def test_decodes_and_pool_tasks_stay_bounded_when_the_background_stalls() -> None:
    release = threading.Event()
    depth = 20
    selectable = int(CFG.selectable_age_s * 10) + 1           # frames of a 10 Hz camera: 9
    with ThreadPoolExecutor(1) as pool:
        pool.submit(release.wait)
        buf = DecodeAheadBuffer(depth, pool, 0.0)
        frame = raw_frame(0, 1)
        for k in range(300):                                    # 30 s of a 10 Hz camera
            buf.push(EncodedImage(T_START + k * NS // 10, 'cam', frame.data, False, 'rgb8',
                                  90, 160, 480), CFG)
            assert len(buf) <= depth and buf.decodes_held() <= selectable
            assert buf.tasks_pending() <= selectable
        assert pool._work_queue.qsize() <= selectable           # the bound itself
        release.set()
    assert buf.decodes_held() == selectable and buf.stats.decoded == selectable
    assert buf.stats.cancelled == 300 - selectable


def test_selectable_age_covers_every_frame_selection_can_choose() -> None:
    cfg = AssemblyConfig(image_size_hw=None)
    assert cfg.selectable_age_s == pytest.approx(0.5 + 0.3 + 0.05)
    with pytest.raises(ValueError, match='min_interval_s'):
        DecodeAheadBuffer(8, None, -0.1)
