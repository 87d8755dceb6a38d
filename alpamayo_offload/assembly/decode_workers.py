"""Decode workers: the pixel work of decode-ahead in other processes, off the node's GIL.

An inference thread that issues GPU work from Python takes the GIL back after every kernel launch;
any other thread of its process that runs Python meanwhile delays it. A decode in a thread of the
node holds the GIL for ~0.2 ms per 1080p frame (Pillow's header parse, the Python between the
OpenCV and Pillow calls, and each take-back after them), and on a busy host a decode thread
preempted while holding it stalls the inference for a whole time slice. A worker process holds
its own GIL: the node's thread only writes the JPEG bytes to a pipe and reads the pixels back
(`readinto` a NumPy buffer: the copy runs in the kernel, GIL released), nothing pickled.

What runs where: `decode_image` validates the frame in the caller (encoding, header, pixel
limit, end marker: the named `InputError`s stay the same) and hands the worker a `PixelJob`
(bytes, DCT scale, target size, Pillow filter); the worker runs `run_pixel_job`, so the pixels
are those of a decode in the caller, byte for byte. A payload the worker's codec rejects comes
back as a message and becomes `image_corrupt` as in the caller. A worker that dies, closes its
pipe or takes longer than `timeout_s` is killed and the job raises `PixelWorkerError` (the
frame is then decoded in the caller when selected); the fault is counted and the last one kept
for diagnostics (`decode_worker_failed`). The worker is replaced at once after a job that ran,
and with a doubling back-off after failures in a row (`DecodeWorkers`), so a worker that cannot
start is not restarted on every frame.

Wire format (little-endian): request `<IBIIb` (payload bytes, reduction, target height, width,
Pillow filter or -1) + payload; reply `<BII` (status 0, height, width) + height x width x 3
bytes, or status 1 + a UTF-8 message of `width` bytes. A worker is `main()` of this module in
a fresh interpreter (`sys.executable` run anew with the node's environment: none of the node's
threads, locks or CUDA state carry over, as they would into a fork).
"""
from __future__ import annotations

import fcntl
import logging
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from .convert import ConversionError
from .decode import PixelJob, PixelWorkerError, run_pixel_job

LOG = logging.getLogger(__name__)
DECODE_WORKER_FAILED = 'decode_worker_failed'
_REQUEST = struct.Struct('<IBIIb')
_REPLY = struct.Struct('<BII')
_OK, _ERROR = 0, 1
_PIPE_BYTES = 1 << 20
# not `-m` this module: the package's __init__ has imported it by then (runpy warns)
WORKER_COMMAND = (sys.executable, '-c', 'import sys; from alpamayo_offload.assembly.'
                  'decode_workers import main; sys.exit(main())')


def _widen(pipe: BinaryIO | None) -> None:
    """Let the pipe hold a whole frame (Linux: 64 KiB by default, a handoff per 64 KiB)."""
    if pipe is None or not hasattr(fcntl, 'F_SETPIPE_SZ'):
        return
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except OSError:   # above /proc/sys/fs/pipe-max-size for this user: the default size
        pass


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    """`n` bytes, or None at a clean end of input (nothing read)."""
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            if data:
                raise EOFError(f'input ended after {len(data)} of {n} bytes')
            return None
        data += chunk
    return bytes(data)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Run each request's job and write its reply, until the input ends (the worker's loop)."""
    while (head := _read_exact(requests, _REQUEST.size)) is not None:
        size, reduction, th, tw, resample = _REQUEST.unpack(head)
        data = _read_exact(requests, size) if size else b''
        if data is None:
            raise EOFError('input ended before the payload')
        job = PixelJob(data, reduction, (th, tw), None if resample < 0 else resample)
        try:
            px = np.ascontiguousarray(run_pixel_job(job))
        except Exception as err:   # noqa: BLE001 - as in the node: a payload it cannot decode
            message = str(err).strip().encode()
            replies.write(_REPLY.pack(_ERROR, 0, len(message)) + message)
        else:
            replies.write(_REPLY.pack(_OK, px.shape[0], px.shape[1]))
            replies.write(memoryview(px).cast('B'))
        replies.flush()


class _Worker:
    """One worker process and its two pipes (unbuffered: `select` sees what is unread)."""

    def __init__(self, command: Sequence[str]) -> None:
        self.proc = subprocess.Popen(command,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        for pipe in (self.proc.stdin, self.proc.stdout):
            _widen(pipe)
        if self.proc.stdin is not None:
            os.set_blocking(self.proc.stdin.fileno(), False)

    def run(self, job: PixelJob, timeout_s: float) -> np.ndarray:
        deadline = time.monotonic() + timeout_s
        self._write(_REQUEST.pack(len(job.data), job.reduction, *job.target_hw,
                                  -1 if job.resample is None else job.resample) + job.data,
                    deadline)
        status, h, w = _REPLY.unpack(self._read(_REPLY.size, deadline))
        if status != _OK:
            raise ConversionError(self._read(w, deadline).decode(errors='replace'))
        if (h, w) != tuple(job.target_hw):
            raise EOFError(f'reply of {h}x{w} pixels for a {job.target_hw} job')
        out = np.empty((h, w, 3), np.uint8)
        self._read_into(memoryview(out).cast('B'), deadline)
        return out

    def _write(self, data: bytes, deadline: float) -> None:
        """Write all of `data` (its input is non-blocking: a stalled worker cannot hang us)."""
        stdin = self.proc.stdin
        assert stdin is not None
        view, done = memoryview(data), 0
        while done < len(view):
            self._wait(([], [stdin]), deadline)
            done += stdin.write(view[done:]) or 0   # None: the pipe filled meanwhile

    def _read(self, n: int, deadline: float) -> bytes:
        buf = bytearray(n)
        self._read_into(memoryview(buf), deadline)
        return bytes(buf)

    def _read_into(self, view: memoryview, deadline: float) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        got = 0
        while got < len(view):
            self._wait(([stdout], []), deadline)
            n = stdout.readinto(view[got:])
            if not n:
                raise EOFError(f'the worker closed its pipe (exit status {self.proc.poll()})')
            got += n

    def _wait(self, fds: tuple[list[Any], list[Any]], deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or not any(select.select(*fds, [], left)[:2]):
            raise TimeoutError('no reply in time (the worker is stuck)')

    def stop(self, timeout_s: float = 2.0) -> None:
        """Close its input (it exits), kill it if it does not."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@dataclass(frozen=True)
class WorkerFaults:
    """What went wrong with the workers so far, and which places wait to restart one."""

    count: int = 0             # worker failures: deaths, stalls, starts that failed
    last: str = ''             # the last failure, named
    restarts: int = 0          # workers started after a failure
    backing_off: int = 0       # places without a worker, waiting out their back-off
    retry_in_s: float = 0.0    # until the soonest of those may start one (0: none waits)


def restart_wait(failures: int, first: float, longest: float) -> float:
    """Seconds before a place may start a worker after `failures` failures in a row.

    None after the first (replaced at once), then `first` doubling up to `longest`; the
    exponent is capped, so a place failing for days never overflows a float.
    """
    if failures <= 1:
        return 0.0
    return min(first * 2.0 ** min(failures - 2, 64), longest)


@dataclass
class _Slot:
    """One worker place: its process (None while backing off) and its restart back-off."""

    index: int
    worker: _Worker | None
    failures: int = 0          # in a row, since its last job that ran
    retry_at: float = 0.0      # clock time from which it may start a worker


class DecodeWorkers:
    """`count` worker processes; `run` is a `decode_image` `pixels` function for many threads.

    A calling thread takes an idle worker place (waiting, GIL released, while all are busy), so
    up to `count` jobs run at once. `close` stops them; a `run` after it raises
    `PixelWorkerError`.

    Restart back-off, per place: the first failure after a job that ran replaces the worker at
    once (a worker killed by accident costs no frame more); each further failure in a row waits
    twice as long before the next start, from `backoff_s[0]` up to `backoff_s[1]`, so a worker
    that dies on start (a broken codec in a fresh interpreter, say) costs a process start at
    most every `backoff_s[1]` instead of one per frame. A job handed to a place that waits is
    refused at once with `PixelWorkerError` (the frame is decoded in the caller, never lost and
    never judged corrupt); a job that runs in a worker, even one whose payload it rejects,
    clears the place's failures. `command` and `clock` exist for tests (a worker that dies on
    start; back-off without sleeping).
    """

    def __init__(self, count: int, timeout_s: float = 10.0,
                 backoff_s: tuple[float, float] = (0.5, 30.0),
                 command: Sequence[str] = WORKER_COMMAND,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if count < 1:
            raise ValueError(f'count = {count} decode workers; need at least 1')
        if timeout_s <= 0:
            raise ValueError(f'timeout_s = {timeout_s}; must be > 0')
        if not 0 < backoff_s[0] <= backoff_s[1]:
            raise ValueError(f'backoff_s = {backoff_s}; need 0 < first <= longest')
        self._timeout_s = timeout_s
        self._backoff_s = backoff_s
        self._command = list(command)
        self._clock = clock
        self._idle: queue.SimpleQueue[_Slot] = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self._count, self._last, self._restarts = 0, '', 0
        try:
            for i in range(count):
                self._slots.append(_Slot(i, _Worker(self._command)))
        except OSError:
            self.close()
            raise
        for slot in self._slots:
            self._idle.put(slot)

    @property
    def faults(self) -> WorkerFaults:
        """The failures so far and the back-off now (a snapshot for diagnostics)."""
        now = self._clock()
        with self._lock:
            waits = [s.retry_at - now for s in self._slots if s.worker is None]
            return WorkerFaults(self._count, self._last, self._restarts, len(waits),
                                max(0.0, min(waits, default=0.0)))

    def run(self, job: PixelJob) -> np.ndarray:
        """Decode + resize `job` in a worker; `ConversionError` for a payload it rejects."""
        slot = self._take()
        try:
            worker = self._worker_of(slot)
            try:
                out = worker.run(job, self._timeout_s)
            except ConversionError:   # the payload, not the worker (a ValueError too)
                slot.failures = 0
                raise
            except (OSError, EOFError, TimeoutError, ValueError, struct.error) as err:
                self._failed(slot, worker, err)
                raise PixelWorkerError(f'{DECODE_WORKER_FAILED}: {err}') from err
            slot.failures = 0
            return out
        finally:
            self._idle.put(slot)

    def pids(self) -> list[int]:
        """Process ids of the current workers (none for a place that is backing off)."""
        with self._lock:
            return [s.worker.proc.pid for s in self._slots if s.worker is not None]

    def close(self) -> None:
        """Stop every worker (a job running finishes or fails first)."""
        with self._lock:
            self._closed = True
            workers = [s.worker for s in self._slots if s.worker is not None]
            for slot in self._slots:
                slot.worker = None
        for worker in workers:
            worker.stop()

    def _take(self) -> _Slot:
        """Take an idle place: one with a worker or free to start one, if any such is idle."""
        slot = self._idle.get()
        now = self._clock()
        for _ in range(len(self._slots) - 1):
            if slot.worker is not None or now >= slot.retry_at:
                break
            try:
                other = self._idle.get_nowait()
            except queue.Empty:
                break
            self._idle.put(slot)
            slot = other
        return slot

    def _worker_of(self, slot: _Slot) -> _Worker:
        """Return the place's worker, started if its back-off is over; else `PixelWorkerError`."""
        with self._lock:
            if self._closed:
                raise PixelWorkerError('the decode workers are closed')
            if slot.worker is not None:
                return slot.worker
            left = slot.retry_at - self._clock()
            if left > 0:
                raise PixelWorkerError(
                    f'{DECODE_WORKER_FAILED}: decode worker {slot.index} is backing off: '
                    f'restart in {left:.1f} s after {slot.failures} failures in a row '
                    f'(last: {self._last})')
            return self._start(slot)

    def _start(self, slot: _Slot) -> _Worker:
        """Start the place's worker (caller holds the lock); a failed start backs it off."""
        try:
            slot.worker = _Worker(self._command)
        except OSError as err:
            self._count_failure(slot, f'restart failed: {type(err).__name__}: {err}')
            raise PixelWorkerError(f'{DECODE_WORKER_FAILED}: decode worker {slot.index} did '
                                   f'not restart: {err}') from err
        self._restarts += 1
        return slot.worker

    def _failed(self, slot: _Slot, worker: _Worker, err: BaseException) -> None:
        """Kill a failed worker, count the fault, replace it now or when its back-off ends."""
        worker.proc.kill()
        worker.stop()
        with self._lock:
            slot.worker = None
            self._count_failure(slot, f'{type(err).__name__}: {err}')
            if self._closed:
                return
            if slot.retry_at > self._clock():
                LOG.warning('%s: decode worker %d (pid %d) failed: %s; restart in %.1f s',
                            DECODE_WORKER_FAILED, slot.index, worker.proc.pid, self._last,
                            slot.retry_at - self._clock())
                return
            try:
                fresh = self._start(slot)
            except PixelWorkerError:
                LOG.warning('%s: decode worker %d (pid %d) failed; %s', DECODE_WORKER_FAILED,
                            slot.index, worker.proc.pid, self._last)
                return
        LOG.warning('%s: decode worker %d (pid %d) failed (%s); replaced by pid %d',
                    DECODE_WORKER_FAILED, slot.index, worker.proc.pid, self._last,
                    fresh.proc.pid)

    def _count_failure(self, slot: _Slot, what: str) -> None:
        """Count a failure of `slot` and set its back-off (caller holds the lock)."""
        self._count += 1
        self._last = what
        slot.failures += 1
        slot.retry_at = self._clock() + restart_wait(slot.failures, *self._backoff_s)


def main() -> int:
    """Serve requests from stdin until it closes; stdout carries replies only.

    Ctrl-C (SIGINT to the terminal's process group) is ignored: the node stops its workers by
    closing their input, and a node that dies closes it too.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), 'wb')
    os.dup2(2, 1)   # a library's stray print goes to stderr, not into a reply
    try:
        serve(sys.stdin.buffer, replies)
    except BrokenPipeError:   # the node went away mid-reply
        pass
    return 0
