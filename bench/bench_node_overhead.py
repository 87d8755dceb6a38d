"""Node overhead per inference for four 1920x1080 JPEG cameras, measured against the 5 ms target.

"Node overhead outside the model" is what the node adds to an inference: its critical path
between the tick and the engine call and after it (input selection with the ego history, the
fetch of the 16 decoded frames, the output paths). The engine's own host stages (preprocess: the
model's processor turning frames and history into pixel values and prompt tokens; postprocess:
the action head's trajectory integration and the decode loop's stop checks) are the model's
work, the same in the node, replay and a direct engine call: they are reported beside, with the
sum of everything besides the model's phases. Frames are resized to the loaded model's own input
size (the node default, `images.height/width` 0; `--image-size HxW` for a fixed size) with the
node's default JPEG DCT scaling (`--no-dct-scaling`: full decode), so decode + resize runs in the
background and is reported separately. Reported:

1. the critical path with decode-ahead (`images.decode_ahead`, the node default): frames are
   decoded + resized in the background as they arrive; between the tick and the model call the
   node selects inputs (1.5 s ego history) and fetches the 16 decoded frames (decoding on demand
   only those not ready), after the model it builds the paths (ego + odometry frame). Measured
   (a) with every frame ready and (b) live: a feeder thread sends 4 cameras x 10 Hz (--camera-hz)
   in real time
   while a loop like the node's worker ticks, selects, fetches, runs the real engine and builds
   paths, so background decoding competes for the CPU as in the node;
2. the same without decode-ahead (the 16 frames decoded + resized at the tick, at 1, 2 and all
   cores; and live);
3. the background decode cost: CPU time per frame and per second of 4-camera input.

Message conversion (in the subscription callbacks) is reported beside. The engine's postprocess
stage is everything between and after the model's phases. Choosing each token (trajectory ids
masked, greedy argmax of its logits) ends the prefill/decode pass that emits it, so it is model
time; an instrumented pass reports it beside. Frames are textured ~290 KB q90 JPEGs (a plain
gradient compresses to 90 KB and decodes twice as fast as a camera frame).

Run: .venv/bin/python -m bench.bench_node_overhead [--device cuda --model DIR] [--json OUT.json]
     [--image-size 320x576]
"""
from __future__ import annotations

import argparse
import bisect
import dataclasses
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
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np
from sensor_msgs.msg import CompressedImage

from alpamayo_offload.assembly import (
    AssemblyConfig,
    DecodeAheadBuffer,
    Decoded,
    EncodedImage,
    ModelInput,
    OdometrySample,
    Selection,
    decode_selection,
    image_from_msg,
    select_inputs,
)
from alpamayo_offload.ros.conversions import path_msg, to_odom_frame
from bench.bench_decode import camera_jpeg

NS = 1_000_000_000
TARGET_MS = 5.0
HOST_STAGES = ('preprocess', 'postprocess')   # the engine's stages besides the model's phases
SLOTS = (0, 1, 2, 6)
MODEL_PHASES = ('vision', 'prefill', 'decode', 'diffusion')
BUFFER_DEPTH = 20                  # the node's buffers.camera_depth default


def messages() -> dict[int, list[CompressedImage]]:
    """8 frames at 10 Hz per camera, every frame a distinct JPEG (no decoder cache effects)."""
    out: dict[int, list[CompressedImage]] = {}
    for c, slot in enumerate(SLOTS):
        out[slot] = []
        for k in range(8):
            msg = CompressedImage(format='jpeg', data=camera_jpeg(8 * c + k))
            msg.header.stamp.sec, msg.header.stamp.nanosec = 100, k * NS // 10
            out[slot].append(msg)
    return out


def straight_odometry(start_ns: int, duration_s: float) -> list[OdometrySample]:
    """50 Hz odometry at 8 m/s from `start_ns` for `duration_s`."""
    return [OdometrySample(start_ns + k * NS // 50, 'odom', 'base_link', (k * 0.16, 0.0, 0.0),
                           (0.0, 0.0, 0.0, 1.0)) for k in range(int(duration_s * 50) + 1)]


def median_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of `fn` in ms after one warm-up call, and its last result."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), result


def verdict(ms: float) -> str:
    return f'{ms:7.2f} ms  (target <= {TARGET_MS} ms: {"met" if ms <= TARGET_MS else "NOT met"})'


def ahead_buffers(pool: ThreadPoolExecutor | None,
                  min_interval_s: float) -> dict[int, DecodeAheadBuffer]:
    return {s: DecodeAheadBuffer(BUFFER_DEPTH, pool, min_interval_s) for s in SLOTS}


def counting_lookup(bufs: dict[int, DecodeAheadBuffer], cfg: AssemblyConfig, hits: list[int]
                    ) -> Callable[[int, EncodedImage], Future[Decoded] | None]:
    """The node's lookup: a finished background decode or None; counts hits into `hits[0]`."""
    def ahead(slot: int, frame: EncodedImage) -> Future[Decoded] | None:
        found = bufs[slot].ready(frame, cfg)
        hits[0] += found is not None
        return found
    return ahead


def build_paths(result: Any, inputs: ModelInput) -> None:
    """What the node publishes after the model: the ego path and the odometry-frame path."""
    path_msg(result.xyz, result.rot, 'base_link', inputs.t0_ns)
    path_msg(*to_odom_frame(result.xyz, result.rot, inputs.odom_pose_t0), 'odom', inputs.t0_ns)


def load_engine(model: str, device: str, threads: int) -> Any:
    import torch

    from alpamayo_offload.engine import Engine, EngineConfig

    torch.set_num_threads(threads)
    return Engine.from_config(EngineConfig(model=model, device=device))


def engine_stages(engine: Any, inputs: ModelInput, repeats: int) -> tuple[dict[str, float], Any]:
    """Median seconds per engine stage on `inputs`, and the last result (real path)."""
    engine.infer(inputs)   # warm-up
    runs = [engine.infer(inputs) for _ in range(repeats)]
    stages = {k: statistics.median(r.timings[k] for r in runs) for k in runs[0].timings}
    return stages, runs[-1]


def token_selection_ms(engine: Any, inputs: ModelInput, repeats: int) -> tuple[float, float]:
    """Instrumented pass: ms per inference (median) spent picking tokens, and tokens per inference.

    The pick of each token from its logits, trajectory ids excluded (`_token_picker`'s), ends
    the prefill/decode pass that emits the token, so the engine counts it in those phases.
    """
    from alpamayo_offload.model import inference

    spent = [0.0]
    calls = [0]
    original = inference._token_picker

    def timed_picker(*args: Any) -> Callable[[Any], Any]:
        pick = original(*args)

        def timed(logits: Any) -> Any:
            start = time.perf_counter()
            try:
                return pick(logits)
            finally:
                spent[0] += time.perf_counter() - start
                calls[0] += 1
        return timed

    per_run = []
    try:
        inference._token_picker = timed_picker
        for _ in range(repeats):
            spent[0] = 0.0
            engine.infer(inputs)
            per_run.append(spent[0] * 1e3)
    finally:
        inference._token_picker = original
    return statistics.median(per_run), calls[0] / repeats


def steady_fetch_ms(cams: dict[int, list[EncodedImage]], sel: Selection, cfg: AssemblyConfig,
                    threads: int, min_interval_s: float, repeats: int) -> tuple[float, int]:
    """Fetch of the 16 frames when every one was decoded ahead (median ms, hits per fetch)."""
    with ThreadPoolExecutor(min(threads, len(SLOTS))) as ahead_pool, \
            ThreadPoolExecutor(threads) as pool:
        bufs = ahead_buffers(ahead_pool, min_interval_s)
        for slot in SLOTS:
            for frame in cams[slot]:
                bufs[slot].push(frame, cfg)
        wait([e.future for b in bufs.values() for e in b._decodes.values()])
        hits = [0]
        lookup = counting_lookup(bufs, cfg, hits)
        ms, _ = median_ms(lambda: decode_selection(sel, cfg, pool, lookup), repeats)
    return ms, hits[0] // (repeats + 1)


def live(frames: dict[int, list[EncodedImage]], cfg: AssemblyConfig, engine: Any, threads: int,
         decode_ahead: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Cameras in real time (feeder thread) + the node's worker loop; per-tick figures.

    Frames are stamped on a `--camera-hz` grid and pushed when due (each camera a few ms after
    the previous, as separate callbacks would); a tick every `--period-s` (after the first 0.5 s)
    selects, fetches, runs the engine and builds the paths, as the node's worker does.
    """
    duration_s, period_s, rate = args.live_s, args.period_s, args.camera_hz
    base = 1_000 * NS
    odom = straight_odometry(base - 2 * NS, duration_s + 3.0)
    odom_stamps = [o.stamp_ns for o in odom]
    ahead_pool = ThreadPoolExecutor(min(threads, len(SLOTS))) if decode_ahead else None
    pool = ThreadPoolExecutor(threads)
    bufs = ahead_buffers(ahead_pool, args.min_interval_s)
    stop = threading.Event()
    start = time.perf_counter()

    def feeder() -> None:
        k = 0
        while not stop.is_set():
            for c, slot in enumerate(SLOTS):
                due = start + k / rate + 0.003 * c
                time.sleep(max(0.0, due - time.perf_counter()))
                stamp = base + round(k * NS / rate)
                bufs[slot].push(dataclasses.replace(frames[slot][k % len(frames[slot])],
                                                    stamp_ns=stamp), cfg)
            k += 1

    thread = threading.Thread(target=feeder, daemon=True)
    thread.start()
    ticks: list[dict[str, float]] = []
    next_tick = start + 0.5
    while next_tick < start + duration_s:
        time.sleep(max(0.0, next_tick - time.perf_counter()))
        snapshot_end = base + round((time.perf_counter() - start) * NS)
        i = bisect.bisect_right(odom_stamps, snapshot_end + NS // 50)   # odometry received so far
        odom_now = odom[max(0, i - 400):i]
        hits = [0]
        t0 = time.perf_counter()
        sel = select_inputs({s: b.snapshot() for s, b in bufs.items()}, list(odom_now), cfg)
        t1 = time.perf_counter()
        inputs = decode_selection(sel, cfg, pool, counting_lookup(bufs, cfg, hits))
        t2 = time.perf_counter()
        result = engine.infer(inputs)
        t3 = time.perf_counter()
        build_paths(result, inputs)
        t4 = time.perf_counter()
        model_s = sum(result.timings[k] for k in MODEL_PHASES)
        host_s = sum(result.timings[k] for k in HOST_STAGES)
        ticks.append({'select_ms': (t1 - t0) * 1e3, 'fetch_ms': (t2 - t1) * 1e3,
                      'path_ms': (t4 - t3) * 1e3,
                      'node_ms': (t2 - t0 + t4 - t3) * 1e3,
                      'preprocess_ms': result.timings['preprocess'] * 1e3,
                      'postprocess_ms': result.timings['postprocess'] * 1e3,
                      'host_ms': (t2 - t0 + t4 - t3 + host_s) * 1e3,
                      'engine_non_model_ms': (t3 - t2 - model_s) * 1e3,
                      'all_but_model_ms': (t4 - t0 - model_s) * 1e3, 'hits': hits[0]})
        next_tick = max(next_tick + period_s, time.perf_counter())
    stop.set()
    thread.join()
    fed_s = time.perf_counter() - start
    pool.shutdown(wait=True)
    if ahead_pool is not None:
        ahead_pool.shutdown(wait=True)
    stats = [b.stats for b in bufs.values()]
    decoded = sum(st.decoded for st in stats)
    cpu_s = sum(st.cpu_s for st in stats)
    out: dict[str, Any] = {k: statistics.median(t[k] for t in ticks) for k in ticks[0]}
    out.update({
        'ticks': len(ticks), 'node_ms_p90': float(np.percentile([t['node_ms'] for t in ticks], 90)),
        'node_ms_max': max(t['node_ms'] for t in ticks),
        'host_ms_p90': float(np.percentile([t['host_ms'] for t in ticks], 90)),
        'host_ms_max': max(t['host_ms'] for t in ticks),
        'frames_ready_share': sum(t['hits'] for t in ticks) / (16 * len(ticks)),
        'fed_s': fed_s, 'background_decoded': decoded,
        'background_skipped': sum(st.skipped for st in stats),
        'background_cpu_ms_per_frame': cpu_s * 1e3 / decoded if decoded else float('nan'),
        'background_cpu_ms_per_s': cpu_s * 1e3 / fed_s})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=15)
    parser.add_argument('--model', default='tiny', help='engine preset or checkpoint directory')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--torch-threads', type=int, default=1,
                        help="the node's inference.threads default")
    parser.add_argument('--live-s', type=float, default=8.0,
                        help='seconds of real-time camera input per live run')
    parser.add_argument('--period-s', type=float, default=0.25, help='tick period of the live runs')
    parser.add_argument('--camera-hz', type=float, default=10.0,
                        help='camera rate of the live runs')
    parser.add_argument('--min-interval-s', type=float, default=0.08,
                        help="the node's images.decode_ahead_min_interval_s")
    parser.add_argument('--image-size', metavar='HxW', default=None,
                        help="resize frames to this fixed size (the node's images.height/width); "
                             "default: the loaded model's own input size (the node default)")
    parser.add_argument('--no-dct-scaling', action='store_true',
                        help="decode full JPEG frames (the node's images.jpeg_dct_scaling false)")
    parser.add_argument('--json', type=Path, help='also write the figures here')
    args = parser.parse_args()
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    command = ' '.join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])

    msgs = messages()
    size_kb = statistics.mean(len(m.data) for ms in msgs.values() for m in ms) / 1e3
    odom = straight_odometry(99 * NS, 2.0)
    engine = load_engine(args.model, args.device, args.torch_threads)
    fixed: tuple[int, int] | None = None
    if args.image_size:
        height, width = (int(v) for v in args.image_size.lower().split('x'))
        fixed = (height, width)
    cfg = AssemblyConfig(image_size_hw=fixed, model_sizing=engine.image_sizing,
                         jpeg_dct_scaling=not args.no_dct_scaling)
    frame_hw = fixed or engine.image_sizing.size_hw(1080, 1920)
    size_text = (f'{frame_hw[1]}x{frame_hw[0]} ' +
                 ('(fixed, bilinear)' if fixed else "(the model's own size, its bicubic)"))
    cores = os.cpu_count() or 1
    threads = min(16, cores)             # the node's images.decode_threads default (0: per core)
    figures: dict[str, Any] = {'date': when, 'command': command,
                               'cpu': platform.processor() or platform.machine(), 'cores': cores,
                               'jpeg_kb': size_kb, 'target_ms': TARGET_MS,
                               'frame_hw': list(frame_hw), 'frame_resize': size_text,
                               'jpeg_dct_scaling': cfg.jpeg_dct_scaling}

    convert_ms, cams = median_ms(
        lambda: {s: [image_from_msg(m) for m in msgs[s]] for s in SLOTS}, args.repeats)
    select_ms, sel = median_ms(lambda: select_inputs(cams, odom, cfg), args.repeats)
    decode_ms: dict[int, float] = {}
    inputs: ModelInput | None = None
    for n in sorted({1, 2, threads}):
        with ThreadPoolExecutor(n) as pool:
            decode_ms[n], inputs = median_ms(
                lambda p=pool, s=sel: decode_selection(s, cfg, p), args.repeats)
    assert inputs is not None and isinstance(sel, Selection)
    fetch_ms, steady_hits = steady_fetch_ms(cams, sel, cfg, threads, args.min_interval_s,
                                            args.repeats)

    assert inputs.images.shape[2:4] == tuple(frame_hw)
    stages, result = engine_stages(engine, inputs, max(3, args.repeats // 3))
    select_tokens_ms, tokens = token_selection_ms(engine, inputs, max(3, args.repeats // 3))
    path_ms, _ = median_ms(lambda: build_paths(result, inputs), args.repeats)
    runs = {on: live(cams, cfg, engine, threads, on, args) for on in (True, False)}
    engine.close()

    engine_extra_ms = sum(stages[k] for k in HOST_STAGES) * 1e3
    ready_ms = select_ms + fetch_ms + path_ms
    on_demand_ms = select_ms + decode_ms[threads] + path_ms
    on, off = runs[True], runs[False]
    frames_per_s = args.camera_hz * len(SLOTS)
    figures.update({
        'convert_ms': convert_ms, 'select_ms': select_ms, 'path_ms': path_ms,
        'decode_ms_by_threads': decode_ms, 'fetch_ready_ms': fetch_ms,
        'engine_stage_ms': {k: v * 1e3 for k, v in stages.items()},
        'token_selection_in_passes_ms': select_tokens_ms, 'tokens_per_inference': tokens,
        'node_overhead_ready_ms': ready_ms, 'node_overhead_live_ms': on['node_ms'],
        'node_overhead_live_p90_ms': on['node_ms_p90'],
        'host_overhead_ready_ms': ready_ms + engine_extra_ms,
        'host_overhead_live_ms': on['host_ms'], 'host_overhead_live_p90_ms': on['host_ms_p90'],
        'critical_path_decode_ahead_ready_ms': ready_ms,
        'critical_path_decode_ahead_live_ms': on['node_ms'],
        'critical_path_on_demand_ms': on_demand_ms,
        'critical_path_on_demand_live_ms': off['node_ms'],
        'live_decode_ahead': on, 'live_on_demand': off,
        'background_cpu_ms_per_frame': on['background_cpu_ms_per_frame'],
        'background_cpu_ms_per_s_of_input': on['background_cpu_ms_per_frame'] * frames_per_s
        * on['background_decoded'] / max(1, on['background_decoded'] + on['background_skipped'])})

    print(f'host overhead per inference, {when}: {command}')
    scaling = 'DCT-scaled decode' if cfg.jpeg_dct_scaling else 'full decode'
    print(f'4 cameras x 4 frames of 1920x1080 JPEG (~{size_kb:.0f} KB, q90, {scaling}) -> '
          f'{size_text}, {cores} cores ({figures["cpu"]}), {threads} decode threads; median of '
          f'{args.repeats} unless said')
    print(f'  message conversion, 16 msgs (callbacks, not the tick) {convert_ms:7.2f} ms')
    print(f'  selection + 1.5 s ego history                  {select_ms:7.2f} ms')
    print(f'  path building (ego + odom frame)               {path_ms:7.2f} ms')
    print('(1) critical path WITH decode-ahead (selection + fetch of the 16 frames + paths):')
    print(f'  fetch, all 16 decoded ahead ({steady_hits} ready)       {fetch_ms:7.2f} ms')
    print(f'  = critical path, frames ready                  {verdict(ready_ms)}')
    print(f'  = live, 4 x {args.camera_hz:.0f} Hz in real time, {on["ticks"]} ticks with the '
          f'engine running ({100 * on["frames_ready_share"]:.0f}% of frames ready):')
    print(f'    median                                       {verdict(on["node_ms"])}')
    print(f'    p90 {on["node_ms_p90"]:.2f} ms, max {on["node_ms_max"]:.2f} ms (median selection '
          f'{on["select_ms"]:.2f}, fetch {on["fetch_ms"]:.2f}, paths {on["path_ms"]:.2f} ms)')
    print('(2) critical path WITHOUT decode-ahead (16 frames decoded + resized at the tick):')
    for n, ms in decode_ms.items():
        print(f'  JPEG decode + resize, {n:2d} thread(s)          {ms:7.2f} ms  '
              f'({ms / 16:.2f} ms per frame, effective)')
    print(f'  = critical path ({threads} threads)                  {verdict(on_demand_ms)}')
    print(f'  = live, same feed, {off["ticks"]} ticks (median)  '
          f'          {verdict(off["node_ms"])}')
    print('(3) background decode (decode-ahead, live run), CPU time:')
    print(f'  per frame                                      '
          f'{on["background_cpu_ms_per_frame"]:7.2f} ms  ({on["background_decoded"]} frames, '
          f'{on["background_skipped"]} skipped by the interval rule)')
    per_s = figures['background_cpu_ms_per_s_of_input']
    print(f'  per second of 4 x {args.camera_hz:.0f} Hz input                  {per_s:7.1f} ms  '
          f'({per_s / 10:.1f}% of one core; measured '
          f'over the run: {on["background_cpu_ms_per_s"]:.1f} ms/s)')
    print(f'engine ({args.model}, {args.device}, {args.torch_threads} torch thread(s)) on the same '
          'input, median ms per stage:')
    print('  ' + '  '.join(f'{k} {v * 1e3:.2f}' for k, v in stages.items()))
    print(f'  prefill + decode: of which token selection (greedy argmax over the logits, '
          f'trajectory ids excluded, {tokens:.0f} tokens; instrumented pass) '
          f'{select_tokens_ms:.2f} ms')
    print('NODE OVERHEAD outside the model per inference = the node critical path with '
          'decode-ahead (1):')
    print(f'  frames ready                                   {verdict(ready_ms)}')
    print(f'  live, {on["ticks"]} ticks: median                      {verdict(on["node_ms"])}')
    print(f'    p90 {on["node_ms_p90"]:.2f} ms, max {on["node_ms_max"]:.2f} ms')
    print("beside it, the engine's host stages (the model's processor and action head, the same "
          'in node, replay and engine):')
    print(f'  frames ready: preprocess {stages["preprocess"] * 1e3:.2f} + postprocess '
          f'{stages["postprocess"] * 1e3:.2f} ms; node + engine host = '
          f'{ready_ms + engine_extra_ms:.2f} ms')
    print(f'  live median: preprocess {on["preprocess_ms"]:.2f}, postprocess '
          f'{on["postprocess_ms"]:.2f}; node + engine host {on["host_ms"]:.2f} ms (p90 '
          f'{on["host_ms_p90"]:.2f}); everything except the model phases '
          f'{on["all_but_model_ms"]:.2f} ms')
    print(f'  live, on demand (no decode-ahead): node + engine host median {off["host_ms"]:.2f} ms')
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + '\n')


if __name__ == '__main__':
    main()
