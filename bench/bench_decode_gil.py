"""What one decoded frame costs an inference thread of its process in GIL wait, per decode path.

A thread decodes 1920x1080 q90 JPEGs back to back to the release model's 320x576 (the node's
`decode_image` with the model's own sizing, DCT-scaled), while this thread runs `bench_gil`'s
op loop (tiny torch ops, each releasing the GIL as a kernel launch does). Per path, interleaved
over `--rounds`: the op loop's GIL wait (wall minus CPU and run-queue time) divided by the frames
decoded meanwhile. Paths:

- `none`: the decode thread sleeps 25 ms per "frame" (what the probe costs by itself);
- `thread, np.asarray`: the decode as it was, the resized frame copied out of Pillow by
  `np.asarray` (its encoder holds the GIL);
- `thread`: the node's decode-ahead today (`decode_image` in a thread of the process);
- `process`: `images.decode_ahead_processes` — the thread checks the frame (header, end
  marker) and hands the bytes to a worker process (`assembly/decode_workers.py`) over a pipe,
  reading the pixels back over it; the worker's own CPU is not in this process.

    python -m bench.bench_decode_gil [--rounds 8] [--seconds 2] [--json OUT.json]
    python -m bench.bench_decode_gil --smoke
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_decode import camera_jpeg
from bench.bench_gil import op_loop

FRAMES = 4            # distinct JPEGs, cycled


def _sizing() -> Any:
    """The release model's frame sizing (1080p -> 320x576)."""
    from alpamayo_offload.model.config import full_config
    from alpamayo_offload.model.inputs import ImageSizing

    return ImageSizing.of(full_config())


def _frames() -> list[Any]:
    from alpamayo_offload.assembly import EncodedImage

    return [EncodedImage(k, 'cam', camera_jpeg(k), True, 'jpeg') for k in range(FRAMES)]


def paths() -> tuple[dict[str, Callable[[int], Any]], Callable[[], None]]:
    """The decode paths by name (each decodes frame k), and a function closing their workers."""
    from alpamayo_offload.assembly import DecodeWorkers, decode_image
    from alpamayo_offload.assembly import decode as decode_module

    sizing, frames = _sizing(), _frames()
    workers = DecodeWorkers(1)
    decode_image(frames[0], sizing, pixels=workers.run)   # the worker has started and imported

    def asarray(k: int) -> Any:
        fast = decode_module._rgb_array
        decode_module._rgb_array = np.asarray   # the extraction before the GIL-free copy
        try:
            return decode_image(frames[k % FRAMES], sizing)
        finally:
            decode_module._rgb_array = fast

    return ({'none': lambda k: time.sleep(0.025),
             'thread, np.asarray': asarray,
             'thread': lambda k: decode_image(frames[k % FRAMES], sizing),
             'process': lambda k: decode_image(frames[k % FRAMES], sizing,
                                               pixels=workers.run)}, workers.close)


def measure(decode: Callable[[int], Any], ops: int, seconds: float) -> dict[str, float]:
    """Op loops in this thread for `seconds` while another thread runs `decode` back to back."""
    stop, done = threading.Event(), [0]

    def run() -> None:
        while not stop.is_set():
            decode(done[0])
            done[0] += 1

    thread = threading.Thread(target=run, name='decode', daemon=True)
    thread.start()
    time.sleep(0.05)
    loops, frames0, start = [], done[0], time.perf_counter()
    while time.perf_counter() - start < seconds:
        loops.append(op_loop(ops))
    elapsed, frames = time.perf_counter() - start, done[0] - frames0
    stop.set()
    thread.join()
    gil = sum(x['gil_wait_s'] for x in loops)
    return {'frames': frames, 'frames_per_s': frames / elapsed, 'gil_wait_s': gil,
            'gil_wait_ms_per_frame': 1e3 * gil / max(frames, 1),
            'gil_wait_pct': 100 * gil / sum(x['wall_s'] for x in loops)}


def report(rows: list[dict[str, Any]]) -> list[str]:
    """Medians over the rounds, per path."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r['path'], []).append(r)
    lines = [f'{"path":20s} {"GIL wait":>9s} {"quartiles":>13s} {"frames":>7s} {"GIL wait":>9s}',
             f'{"":20s} {"ms/frame":>9s} {"ms/frame":>13s} {"per s":>7s} {"% loop":>9s}']
    for name, got in by.items():
        per = [r['gil_wait_ms_per_frame'] for r in got]
        q1, q3 = np.percentile(per, [25, 75])
        lines.append(f'{name:20s} {statistics.median(per):9.3f} {q1:6.3f}-{q3:6.3f} '
                     f'{statistics.median(r["frames_per_s"] for r in got):7.1f} '
                     f'{statistics.median(r["gil_wait_pct"] for r in got):9.2f}')
    lines.append('(none: the decode thread sleeps 25 ms a "frame"; medians over rounds)')
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the paths in `--rounds` interleaved rounds; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=8)
    parser.add_argument('--seconds', type=float, default=2.0, help='per path and round')
    parser.add_argument('--ops', type=int, default=10000, help='tiny torch ops per op loop')
    parser.add_argument('--smoke', action='store_true', help='one short round')
    parser.add_argument('--json', type=Path, help='also write every round here')
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.smoke:
        args.rounds, args.seconds = 1, 0.3
    decoders, close = paths()
    rows = []
    try:
        for _ in range(args.rounds):
            for name, decode in decoders.items():
                rows.append({'path': name, **measure(decode, args.ops, args.seconds)})
    finally:
        close()
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    command = ' '.join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    print(f'GIL wait per decoded frame, {when}: {command}')
    print(f'{os.cpu_count()} cores ({platform.processor() or platform.machine()}); 1920x1080 '
          'q90 JPEG -> 320x576 (release model sizing)')
    for line in report(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({'date': when, 'command': command, 'rows': rows},
                                        indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
