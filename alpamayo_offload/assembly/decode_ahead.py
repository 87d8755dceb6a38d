"""Decode ahead: a camera's frames are decoded and resized in the background as they arrive.

Decoding the 16 frames of one inference (1080p JPEG) takes ~50 ms on a 2-core CPU, ten times the
node's whole overhead target; done as each frame arrives, it leaves the inference's critical path.
Correctness never depends on timing: a frame whose background decode has not finished (or was
never started) is decoded on demand by `decode_selection` with the same function, so the model
input is byte-identical either way, and a frame that failed to decode ahead raises its stored
`InputError` only when an inference selects it.

Which frames are decoded ahead, per camera (the rest are decoded on demand if selected):
- none while the size to decode to is unknown (`AssemblyConfig.frame_size` None: in the node,
  while the model that sets it loads): a native 1080p frame is 6 MB, and no inference runs yet;
- a frame older than `AssemblyConfig.selectable_age_s` before the camera's newest frame is not:
  no inference can select it (t0 lies at most `max_camera_skew_s` before the newest stamp of any
  camera, and frames at most `max(frame_offsets_s) + frame_tolerance_s` before t0);
- a frame less than `min_interval_s` from a frame of the same camera already decoded (or queued)
  ahead is not: the model takes frames 0.1 s apart, so at 0.08 s every frame of a 10 Hz camera
  (jitter up to +-10 ms) is decoded ahead, but only every third of a 30 Hz camera, which keeps the
  background cost at most ~12.5 frames/s per camera. The price: t0 is whichever frame is newest
  at the tick, so at 30 Hz the four frames of a camera are ready only when t0 falls on the decoded
  phase (measured: often none are). 0 decodes every frame, which such cameras need for a short
  critical path (three times the background CPU at 30 Hz).

Bounded like the frame buffer: a frame's decode (its pixels, or its place in the queue) is
dropped when the frame leaves the buffer or falls behind the selectable age.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np

from .assembler import AssemblyConfig
from .buffers import StampedBuffer
from .decode import (
    Decoded,
    DecodeOptions,
    FrameSize,
    PixelJob,
    PixelWorkerError,
    decode_image,
    run_pixel_job,
)
from .messages import EncodedImage

_NS = 1_000_000_000


@dataclass
class DecodeAheadStats:
    """Counters of one buffer (read under no lock: figures for diagnostics and benchmarks)."""

    decoded: int = 0        # background decodes finished, failures included
    skipped: int = 0        # frames the interval/age/size rules did not decode ahead
    cancelled: int = 0      # queued decodes dropped before they started (evicted or not needed)
    hits: int = 0           # selected frames found decoded ahead
    misses: int = 0         # selected frames left to on-demand decoding
    worker_faults: int = 0  # background decodes a worker process failed (decoded on demand)
    cpu_s: float = 0.0      # thread CPU time of the background decodes (a worker's not included)


@dataclass(frozen=True)
class _Entry:
    image: EncodedImage
    size: FrameSize
    options: DecodeOptions
    future: Future[Decoded]


class DecodeAheadBuffer:
    """A camera's bounded frame buffer that decodes the frames an inference may use on arrival.

    `snapshot`, `newest_stamp` and `len` are `StampedBuffer`'s, so selection is unchanged;
    `push` also takes the assembly config (frame size, selectable age), read at each
    arrival so run-time parameter changes apply; `ready` hands out finished background decodes.
    With `pool=None` nothing is decoded ahead (the buffer behaves as a `StampedBuffer`).
    `pixels` runs the decode + resize of JPEG/PNG frames (`decode_image`'s argument: in the
    pool's thread by default, `DecodeWorkers.run` in worker processes); a frame whose worker
    failed (`PixelWorkerError`) counts as not decoded ahead.

    Queued decodes wait here, not in the pool's queue (which keeps cancelled tasks, and their
    frames, until a thread reaches them): the pool only ever holds one small task per queued
    frame, each of which decodes the newest queued frame when it runs.
    """

    def __init__(self, depth: int, pool: Executor | None, min_interval_s: float,
                 pixels: Callable[[PixelJob], np.ndarray] = run_pixel_job) -> None:
        if min_interval_s < 0:
            raise ValueError(f'min_interval_s = {min_interval_s} must be >= 0 seconds '
                             '(0: decode every frame ahead)')
        self._frames: StampedBuffer[EncodedImage] = StampedBuffer(depth)
        self._pool = pool
        self._pixels = pixels
        self._min_interval_ns = round(min_interval_s * _NS)
        self._decodes: dict[int, _Entry] = {}   # by stamp; only frames the buffer holds
        self._queued: list[int] = []            # stamps whose decode has not started
        self._tasks = 0                         # pool tasks submitted and not started
        self._lock = threading.Lock()
        self.stats = DecodeAheadStats()

    def push(self, image: EncodedImage, cfg: AssemblyConfig) -> bool:
        """Buffer `image` and queue its decode if an inference may use it (see module docstring).

        Returns False when a frame with the same stamp is already held (nothing changes).
        """
        with self._lock:
            if not self._frames.push(image):
                return False
            if self._pool is None:
                return True
            held = self._frames.snapshot()
            oldest_useful = held[-1].stamp_ns - round(cfg.selectable_age_s * _NS)
            keep = {f.stamp_ns for f in held if f.stamp_ns >= oldest_useful}
            for stamp in [s for s in self._decodes if s not in keep]:
                self._drop(stamp)
            stamp = image.stamp_ns
            size = cfg.frame_size
            if size is None or stamp not in keep or any(abs(stamp - s) < self._min_interval_ns
                                                        for s in self._decodes):
                self.stats.skipped += 1
                return True
            self._decodes[stamp] = _Entry(image, size, cfg.decode_options, Future())
            self._queued.append(stamp)
            if self._tasks < len(self._queued):
                self._tasks += 1
                self._pool.submit(self._decode_next)
            return True

    def ready(self, frame: EncodedImage, cfg: AssemblyConfig) -> Future[Decoded] | None:
        """Return the finished background decode of `frame` as `cfg` decodes it, else None.

        None means: decode it on demand. A decode still queued is dropped (the caller decodes
        the frame itself now); one running is left to finish. A finished future holds the
        pixels or the `InputError` (a worker's failure is not the frame's: None).
        """
        with self._lock:
            entry = self._decodes.get(frame.stamp_ns)
            if entry is not None and entry.image is frame and entry.size == cfg.frame_size \
                    and entry.options == cfg.decode_options and entry.future.done() \
                    and not isinstance(entry.future.exception(), PixelWorkerError):
                self.stats.hits += 1
                return entry.future
            self.stats.misses += 1
            if entry is not None and frame.stamp_ns in self._queued:
                self._drop(frame.stamp_ns)
            return None

    def snapshot(self) -> list[EncodedImage]:
        """Return the held frames, oldest first."""
        return self._frames.snapshot()

    def newest_stamp(self) -> int | None:
        """Stamp of the newest held frame, or None when empty."""
        return self._frames.newest_stamp()

    def decodes_held(self) -> int:
        """Frames with a background decode held (queued, running or finished)."""
        with self._lock:
            return len(self._decodes)

    def tasks_pending(self) -> int:
        """Pool tasks submitted and not started (never more than the frames queued at a time)."""
        with self._lock:
            return self._tasks

    def __len__(self) -> int:
        return len(self._frames)

    def _drop(self, stamp: int) -> None:
        """Forget a frame's decode (caller holds the lock); a queued one is cancelled."""
        entry = self._decodes.pop(stamp)
        if stamp in self._queued:
            self._queued.remove(stamp)
            entry.future.cancel()
            self.stats.cancelled += 1

    def _decode_next(self) -> None:
        """Pool task: decode the newest queued frame (an inference needs the newest soonest)."""
        with self._lock:
            self._tasks -= 1
            if not self._queued:
                return
            entry = self._decodes[self._queued.pop()]
            entry.future.set_running_or_notify_cancel()
        start, failed = time.thread_time(), False
        try:
            entry.future.set_result(decode_image(entry.image, entry.size, entry.options,
                                                 self._pixels))
        except Exception as err:  # noqa: BLE001 - stored; raised when the frame is selected
            failed = isinstance(err, PixelWorkerError)
            entry.future.set_exception(err)
        finally:
            cpu = time.thread_time() - start
            with self._lock:
                self.stats.decoded += 1
                self.stats.worker_faults += failed
                self.stats.cpu_s += cpu
