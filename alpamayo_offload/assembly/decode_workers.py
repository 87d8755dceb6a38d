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
pipe or takes longer than `timeout_s` is killed and replaced, and the job raises
`PixelWorkerError` (the frame is then decoded in the caller when selected); the fault is
counted and the last one kept for diagnostics (`decode_worker_failed`).

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
_WORKER_MAIN = 'import sys; from alpamayo_offload.assembly.decode_workers import main; ' \
    'sys.exit(main())'


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

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, '-c', _WORKER_MAIN],
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


@dataclass
class WorkerFaults:
    """Jobs a worker could not run (the worker was replaced each time)."""

    count: int = 0
    last: str = ''


class DecodeWorkers:
    """`count` worker processes; `run` is a `decode_image` `pixels` function for many threads.

    A calling thread takes an idle worker (waiting, GIL released, while all are busy), so up to
    `count` jobs run at once. `close` stops them; a `run` after it raises `PixelWorkerError`.
    """

    def __init__(self, count: int, timeout_s: float = 10.0) -> None:
        if count < 1:
            raise ValueError(f'count = {count} decode workers; need at least 1')
        if timeout_s <= 0:
            raise ValueError(f'timeout_s = {timeout_s}; must be > 0')
        self._timeout_s = timeout_s
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self.faults = WorkerFaults()
        try:
            for _ in range(count):
                self._add(_Worker())
        except OSError:
            self.close()
            raise

    def run(self, job: PixelJob) -> np.ndarray:
        """Decode + resize `job` in a worker; `ConversionError` for a payload it rejects."""
        worker = self._idle.get()
        try:
            if self._closed:
                raise PixelWorkerError('the decode workers are closed')
            return worker.run(job, self._timeout_s)
        except ConversionError:       # the payload, not the worker (a ValueError too)
            raise
        except (OSError, EOFError, TimeoutError, ValueError, struct.error) as err:
            worker = self._replace(worker, err)
            raise PixelWorkerError(f'{DECODE_WORKER_FAILED}: {err}') from err
        finally:
            self._idle.put(worker)

    def pids(self) -> list[int]:
        """Process ids of the current workers."""
        with self._lock:
            return [w.proc.pid for w in self._all]

    def close(self) -> None:
        """Stop every worker (a job running finishes or fails first)."""
        with self._lock:
            self._closed = True
            workers, self._all = self._all, []
        for worker in workers:
            worker.stop()

    def _add(self, worker: _Worker) -> None:
        with self._lock:
            self._all.append(worker)
        self._idle.put(worker)

    def _replace(self, worker: _Worker, err: BaseException) -> _Worker:
        """Kill a failed worker, count the fault, start its successor (unless closed)."""
        worker.proc.kill()
        worker.stop()
        with self._lock:
            self.faults.count += 1
            self.faults.last = f'{type(err).__name__}: {err}'
            if worker in self._all:
                self._all.remove(worker)
            if self._closed:
                return worker
            try:
                fresh = _Worker()
            except OSError as start_err:   # the next job on `worker` fails the same way
                self.faults.last += f'; restart failed: {start_err}'
                LOG.warning('%s: decode worker %d failed; restart failed (%s)',
                            DECODE_WORKER_FAILED, worker.proc.pid, start_err)
                return worker
            self._all.append(fresh)
        LOG.warning('%s: decode worker %d failed (%s); replaced by %d', DECODE_WORKER_FAILED,
                    worker.proc.pid, self.faults.last, fresh.proc.pid)
        return fresh


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
