"""What decoding four 1080p JPEG cameras costs the model's latency while it streams layers.

The engine (full-size random R1 on CUDA) runs a planned 16 GiB plan (the largest interleaved set
of resident language-model layers that fits) on a fixed input; meanwhile a background thread
decodes four distinct 1920x1080 q90 JPEGs every camera period, as the node's decode-ahead pool
does (`decode_image` to the model's input size, resize included), with the CPU decoder (OpenCV)
or the GPU decoder (`engine.gpu_jpeg.TorchvisionJpegDecoder`, nvJPEG on its own stream, pixels
copied back). Rows: engine alone, and with each decoder at each camera rate: median inference
latency and per-phase medians over `--reps` inferences after one warm-up, the decode thread's
achieved frame rate and its CPU time per frame. A decoder that slows the model is the wrong
default for `images.decoder: auto`.

    python -m bench.bench_decode_contention --out DIR [--budget-gib 16] [--reps 5] [--rates 10,30]
    python -m bench.bench_decode_contention --out /tmp/dc --model tiny --device cpu --reps 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alpamayo_offload.assembly import EncodedImage, decode_image
from alpamayo_offload.assembly.decode import DecodeOptions
from alpamayo_offload.engine import Engine, EngineConfig, EngineError
from alpamayo_offload.planning.planner import interleaved_indices
from bench.bench_decode import CAMERAS, camera_jpeg

GIB = 2**30


def _plan(engine: Engine, budget: int | None) -> int:
    """Attach the largest interleaved-LM plan that fits `budget`; return its resident count."""
    n_lm = len(engine.model.layer_sequences()['lm'])
    for k in range(n_lm, -1, -1):
        try:
            engine.replan(resident={'lm': interleaved_indices(k, n_lm)}, mode='pipelined',
                          budget_bytes=budget)
        except EngineError:
            continue
        return k
    raise EngineError(f'no interleaved plan fits {budget} bytes')


class DecodeLoad:
    """Decode CAMERAS JPEGs every 1/rate s in a background thread until stopped."""

    def __init__(self, decode: Callable[[bytes], Any], frames: list[bytes], rate_hz: float):
        self._decode, self._frames, self._period = decode, frames, 1.0 / rate_hz
        self._stop = threading.Event()
        self.decoded, self.cpu_s, self.wall_s = 0, 0.0, 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start, tick = time.perf_counter(), 0
        while not self._stop.is_set():
            cpu = time.thread_time()
            for i in range(CAMERAS):
                self._decode(self._frames[(tick * CAMERAS + i) % len(self._frames)])
            self.cpu_s += time.thread_time() - cpu
            self.decoded += CAMERAS
            tick += 1
            delay = start + tick * self._period - time.perf_counter()
            if delay > 0:
                self._stop.wait(delay)
        self.wall_s = time.perf_counter() - start

    def __enter__(self) -> DecodeLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _infer(engine: Engine, inputs: Any, reps: int) -> dict[str, Any]:
    engine.infer(inputs)
    runs = [engine.infer(inputs) for _ in range(reps)]
    return {'total_s': statistics.median(r.timings['total'] for r in runs),
            'phases_s': {p: statistics.median(r.timings[p] for r in runs)
                         for p in ('vision', 'prefill', 'decode', 'diffusion')}}


def main(argv: list[str] | None = None) -> int:
    """Measure the rows; write rows.json and print a table last."""
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--model', default='full')
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--budget-gib', type=float, default=16.0, help='VRAM budget (0: none)')
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--rates', default='10,30', help='camera rates in Hz')
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    engine = Engine.load(EngineConfig(model=args.model, device=args.device, mode='pipelined',
                                      pin_all_layers=True))
    k = _plan(engine, int(args.budget_gib * GIB) if args.budget_gib else None)
    inputs = engine.example_input(presized=True)
    frames = [camera_jpeg(seed) for seed in range(8)]
    options = {'cpu (opencv)': DecodeOptions()}
    if args.device.startswith('cuda'):
        from alpamayo_offload.engine.gpu_jpeg import TorchvisionJpegDecoder

        options['gpu (nvjpeg)'] = DecodeOptions(jpeg_decoder=TorchvisionJpegDecoder(args.device))
    # As the node decodes ahead: decode + the model's own resize to its input size.
    decoders: dict[str, Callable[[bytes], Any]] = {
        name: (lambda d, o=opt: decode_image(EncodedImage(0, 'cam', d, True, 'jpeg'),
                                             engine.image_sizing, o))
        for name, opt in options.items()}
    rows = [{'load': 'none', 'rate_hz': 0, **_infer(engine, inputs, args.reps)}]
    for name, decode in decoders.items():
        for hz in (float(r) for r in args.rates.split(',')):
            with DecodeLoad(decode, frames, hz) as load:
                row = _infer(engine, inputs, args.reps)
            rows.append({'load': name, 'rate_hz': hz, **row,
                         'achieved_hz': load.decoded / CAMERAS / load.wall_s,
                         'cpu_ms_per_frame': load.cpu_s * 1e3 / max(load.decoded, 1)})
    doc = {'model': args.model, 'device': args.device, 'budget_gib': args.budget_gib,
           'resident_lm': k, 'info': engine.info.as_dict(), 'rows': rows}
    (args.out / 'rows.json').write_text(json.dumps(doc, indent=2, default=str))
    base = rows[0]['total_s']
    print(f'{args.model} on {args.device}, {args.budget_gib:g} GiB plan ({k} LM layers '
          f'resident), median of {args.reps}')
    print('| decode load | camera Hz | total s | x alone | decode s | diffusion s | achieved Hz '
          '| CPU ms/frame |')
    print('|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['load']} | {r['rate_hz']:g} | {r['total_s']:.3f} | "
              f"{r['total_s'] / base:.3f} | {r['phases_s']['decode']:.3f} | "
              f"{r['phases_s']['diffusion']:.3f} | {r.get('achieved_hz', 0):.1f} | "
              f"{r.get('cpu_ms_per_frame', 0):.1f} |")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
