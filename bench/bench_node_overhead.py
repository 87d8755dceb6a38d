"""Node overhead per inference, without the model: message conversion, input selection, JPEG
decode + resize of 4 cameras x 4 frames of 1920x1080, and path building (ego + odometry frame).

CPU only; prints measured vs the 5 ms target. Run: .venv/bin/python bench/bench_node_overhead.py
"""
from __future__ import annotations

import io
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image
from sensor_msgs.msg import CompressedImage

from alpamayo_offload.assembly import (
    AssemblyConfig,
    OdometrySample,
    decode_selection,
    image_from_msg,
    select_inputs,
)
from alpamayo_offload.ros.conversions import path_msg, to_odom_frame

NS = 1_000_000_000
TARGET_MS = 5.0
REPEATS = 15


def jpeg_1080p(seed: int) -> bytes:
    yy, xx = np.mgrid[0:1080, 0:1920]
    rgb = np.dstack([(xx // 7 + seed) % 256, (yy // 5) % 256, ((xx + yy) // 11) % 256])
    buf = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(buf, format='JPEG', quality=90)
    return buf.getvalue()


def main() -> None:
    jpegs = [jpeg_1080p(s) for s in range(4)]
    slots = (0, 1, 2, 6)
    msgs = {}
    for s in slots:
        msgs[s] = []
        for k in range(8):
            m = CompressedImage(format='jpeg', data=jpegs[s % 4])
            m.header.stamp.sec, m.header.stamp.nanosec = 100, k * NS // 10
            msgs[s].append(m)
    odom = [OdometrySample(100 * NS - NS + k * NS // 50, 'odom', 'base_link', (k * 0.1, 0, 0),
                           (0, 0, 0, 1)) for k in range(100)]
    cfg = AssemblyConfig(image_size_hw=(320, 576))
    xyz, rot = np.cumsum(np.ones((64, 3)), 0), np.tile(np.eye(3), (64, 1, 1))
    results: dict[str, list[float]] = {'convert': [], 'select': [], 'decode': [], 'path': []}
    for threads in (1, 2):
        pool = ThreadPoolExecutor(threads) if threads > 1 else None
        for key in results:
            results[key] = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            cams = {s: [image_from_msg(m) for m in msgs[s]] for s in slots}
            t1 = time.perf_counter()
            sel = select_inputs(cams, odom, cfg)
            t2 = time.perf_counter()
            mi = decode_selection(sel, cfg, pool)
            t3 = time.perf_counter()
            path_msg(xyz, rot, 'base_link', sel.t0_ns)
            path_msg(*to_odom_frame(xyz, rot, mi.odom_pose_t0), 'odom', sel.t0_ns)
            t4 = time.perf_counter()
            for key, dt in zip(results, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                results[key].append(dt * 1e3)
        med = {k: statistics.median(v) for k, v in results.items()}
        rest = med['convert'] + med['select'] + med['path']
        print(f'decode threads {threads}: conversion {med["convert"]:.2f} ms (16 msgs x 2 '
              f'copies), selection+history {med["select"]:.2f} ms, path building '
              f'{med["path"]:.2f} ms')
        print(f'  JPEG decode + resize, 16 x 1920x1080 -> 576x320: {med["decode"]:.1f} ms')
        total = rest + med['decode']
        print(f'  overhead without decode: {rest:.2f} ms (target <= {TARGET_MS} ms: '
              f'{"met" if rest <= TARGET_MS else "NOT met"}); with decode: {total:.1f} ms '
              f'(target {"met" if total <= TARGET_MS else "NOT met"})')
        if pool:
            pool.shutdown()


if __name__ == '__main__':
    main()
