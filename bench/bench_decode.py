"""JPEG decode cost of four 1920x1080 cameras at 10, 20 and 30 Hz: CPU (OpenCV, PIL) vs GPU.

Decoders, each timed on distinct textured q90 JPEGs (~290 KB, as `bench_node_overhead.py`):
- `opencv full`: `cv2.imdecode` (libjpeg-turbo) at full size + BGR->RGB;
- `opencv 1/2`, `opencv 1/4`: `IMREAD_REDUCED_COLOR_2/4`, the DCT-scaled decode the node uses
  when `images.height/width` fit in the reduced frame;
- `pil full`: Pillow's decode, for comparison (what the node used before OpenCV);
- `node 576x320`: the node's `decode_image` to 576x320 (header checks, 1/2-scale decode, resize);
- `gpu nvjpeg` / `gpu nvjpeg+host`: `torchvision.io.decode_jpeg(device='cuda')`, on the device
  and copied back to host memory (the assembly contract is NumPy), where torchvision and CUDA
  exist (otherwise listed as unavailable).

Per decoder: wall and CPU milliseconds per frame (one thread, median of `--repeats` passes over
the frames), and for each camera rate the CPU-seconds spent per second of 4-camera data
(frames/s x CPU ms) and the share of the frame budget (one camera period, 1000 / rate ms) that
decoding one tick of 4 frames on one thread takes. GPU rows count host CPU time only.

Run: python -m bench.bench_decode --out DIR [--repeats 5] [--no-gpu]
Writes DIR/bench_decode.json and DIR/bench_decode.md and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from alpamayo_offload.assembly import EncodedImage, decode_image

CAMERAS = 4
RATES_HZ = (10, 20, 30)
FRAMES = 8        # distinct JPEGs per pass (no decoder cache effects)


def camera_jpeg(seed: int, height: int = 1080, width: int = 1920) -> bytes:
    """A q90 JPEG (1920x1080 by default) with camera-like texture (gradients plus sensor noise)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.dstack([(xx // 7 + seed) % 256, (yy // 5) % 256, ((xx + yy) // 11) % 256])
    rgb = np.clip(base + rng.normal(0.0, 4.0, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format='JPEG', quality=90)
    return buf.getvalue()


def _opencv(flag: int) -> Callable[[bytes], Any]:
    def run(data: bytes) -> np.ndarray:
        return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), flag), cv2.COLOR_BGR2RGB)
    return run


def _pil(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert('RGB'))


def _node(data: bytes) -> np.ndarray:
    return decode_image(EncodedImage(0, 'cam', data, True, 'jpeg'), (320, 576)).pixels


def cpu_decoders() -> dict[str, Callable[[bytes], Any]]:
    """The CPU decoders measured, by row name."""
    return {'opencv full': _opencv(cv2.IMREAD_COLOR),
            'opencv 1/2': _opencv(cv2.IMREAD_REDUCED_COLOR_2),
            'opencv 1/4': _opencv(cv2.IMREAD_REDUCED_COLOR_4),
            'pil full': _pil, 'node 576x320': _node}


def gpu_decoders() -> tuple[dict[str, Callable[[bytes], Any]], str]:
    """The GPU decoders, or none and the reason they are unavailable."""
    try:
        import torch  # noqa: PLC0415 - optional here
        from torchvision.io import ImageReadMode, decode_jpeg  # noqa: PLC0415
    except ImportError as err:
        return {}, f'unavailable: {err}'
    if not torch.cuda.is_available():
        return {}, 'unavailable: no CUDA device'

    def device(data: bytes) -> Any:
        out = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                          mode=ImageReadMode.RGB, device='cuda')
        torch.cuda.synchronize()
        return out

    def host(data: bytes) -> np.ndarray:
        return device(data).permute(1, 2, 0).contiguous().cpu().numpy()

    return ({'gpu nvjpeg': device, 'gpu nvjpeg+host': host},
            f'torch {torch.__version__}, {torch.cuda.get_device_name()}')


def measure(decode: Callable[[bytes], Any], frames: list[bytes], repeats: int
            ) -> tuple[float, float]:
    """Median (wall ms, CPU ms) per frame over `repeats` passes, after one warm-up pass."""
    for data in frames:
        decode(data)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for data in frames:
            decode(data)
        walls.append((time.perf_counter() - wall) * 1e3 / len(frames))
        cpus.append((time.process_time() - cpu) * 1e3 / len(frames))
    return statistics.median(walls), statistics.median(cpus)


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: per decoder and rate, CPU-s per s of data and the tick's budget share."""
    head = ['decoder', 'wall ms/frame', 'CPU ms/frame']
    for hz in RATES_HZ:
        head += [f'{hz} Hz CPU-s/s', f'{hz} Hz budget']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for r in rows:
        cells = [r['decoder'], f"{r['wall_ms']:.2f}", f"{r['cpu_ms']:.2f}"]
        for hz in RATES_HZ:
            rate = r['rates'][str(hz)]
            cells += [f"{rate['cpu_s_per_s']:.2f}", f"{rate['budget_share']:.0%}"]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure, print the table, write JSON and Markdown under --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, required=True, help='directory for the results')
    parser.add_argument('--repeats', type=int, default=5, help='timed passes per decoder')
    parser.add_argument('--no-gpu', action='store_true', help='CPU decoders only')
    args = parser.parse_args(argv)
    cv2.setNumThreads(1)
    frames = [camera_jpeg(seed) for seed in range(FRAMES)]
    decoders = cpu_decoders()
    gpu_note = 'skipped (--no-gpu)'
    if not args.no_gpu:
        gpu, gpu_note = gpu_decoders()
        decoders.update(gpu)
    rows = []
    for name, decode in decoders.items():
        wall, cpu = measure(decode, frames, args.repeats)
        rates = {str(hz): {'cpu_s_per_s': CAMERAS * hz * cpu / 1e3,
                           'budget_share': CAMERAS * wall / (1e3 / hz)} for hz in RATES_HZ}
        rows.append({'decoder': name, 'wall_ms': wall, 'cpu_ms': cpu, 'rates': rates})
    meta = {'date': datetime.date.today().isoformat(), 'machine': platform.node(),
            'cpu': platform.processor() or platform.machine(), 'cores': os.cpu_count(),
            'opencv': cv2.__version__, 'gpu': gpu_note, 'cameras': CAMERAS,
            'frame': '1920x1080 q90 JPEG', 'jpeg_kb': sum(map(len, frames)) / len(frames) / 1e3,
            'repeats': args.repeats}
    text = table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'bench_decode.json').write_text(json.dumps({'meta': meta, 'rows': rows},
                                                           indent=1))
    summary = (f"{meta['date']}, {meta['cores']} cores, OpenCV {meta['opencv']}, GPU: "
               f"{meta['gpu']}; {CAMERAS} cameras x {meta['frame']} (~{meta['jpeg_kb']:.0f} KB); "
               "budget = one tick of 4 frames on one thread / camera period")
    (args.out / 'bench_decode.md').write_text(summary + '\n\n' + text + '\n')
    print(summary)
    print(text)


if __name__ == '__main__':
    main()
