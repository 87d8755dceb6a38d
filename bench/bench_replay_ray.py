"""Replay on Ray against serial replay: samples/s, Ray's overhead, start-up, equal reports.

Writes a synthetic drive bag, then replays it with one configuration serially (the engine in this
process) and through `run_sharded` on a Ray cluster with 1 (and more, `--workers 1,2`) actors.
Each configuration runs `--repeats` times, alternating, and the best run counts (the machine may
be shared). Per run it separates the start-up (serial: engine build; Ray: actors up with their
engines; the cluster's own start is timed once) from the steady rate (samples / wall time of the
evaluation loop), and checks that the report equals the serial one on `DETERMINISTIC_KEYS`.
Torch's CPU threads are the same (`--threads`) in this process and in every actor.

CPU, tiny model:
    python -m bench.bench_replay_ray --out DIR --workers 1,2
GPU (one actor per GPU; needs `pip install -e '.[ray]'` on that machine):
    python -m bench.bench_replay_ray --out DIR --device cuda --model full --plan PLAN.yaml \
        --image-format jpeg --height 1080 --width 1920 --duration-s 30 --rate 1
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.distributed import (
    EngineFactory,
    import_ray,
    run_sharded,
    start_local_cluster,
)
from alpamayo_offload.replay.loop import PreparedBag
from alpamayo_offload.replay.params import load_replay_config
from alpamayo_offload.replay.report import DETERMINISTIC_KEYS
from alpamayo_offload.replay.session import SessionResult, prepare, replay_session

ROOT = Path(__file__).resolve().parents[1]
LOG = logging.getLogger('bench_replay_ray')
OVERHEAD_TARGET_PCT = 5.0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', type=Path, required=True)
    p.add_argument('--device', default='cpu')
    p.add_argument('--model', default='tiny')
    p.add_argument('--params', type=Path, default=ROOT / 'config' / 'alpamayo_offload.yaml')
    p.add_argument('--plan', type=Path, default=None, help='residency plan file (merged last)')
    p.add_argument('--workers', default='1', help='comma-separated actor counts, e.g. 1,2')
    p.add_argument('--repeats', type=int, default=2, help='runs per configuration (best counts)')
    p.add_argument('--threads', type=int, default=1,
                   help='torch CPU threads, here and in each actor (CPU only)')
    p.add_argument('--ray', default='local', metavar='ADDRESS|local',
                   help='a running cluster, or start a local one')
    p.add_argument('--duration-s', type=float, default=20.0, help='drive length in seconds')
    p.add_argument('--rate', type=float, default=2.0, help='evaluation rate (Hz)')
    p.add_argument('--image-format', choices=('raw', 'jpeg', 'png'), default='raw')
    p.add_argument('--height', type=int, default=320)
    p.add_argument('--width', type=int, default=576)
    p.add_argument('--bag', type=Path, default=None, help='replay this bag instead of a new one')
    args = p.parse_args(argv)
    args.workers = [int(w) for w in args.workers.split(',') if w.strip()]
    if not args.workers or min(args.workers) < 1 or args.repeats < 1:
        p.error('--workers needs counts >= 1 and --repeats >= 1')
    return args


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def deterministic(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a report that equal runs share bit for bit."""
    return {k: metrics[k] for k in DETERMINISTIC_KEYS}


def in_sample_s(out: Path) -> float:
    """Seconds spent inside the samples (assembly + model call), summed over `samples.jsonl`.

    The loop's wall time less this (per actor) is what reading the bag and, on Ray, shipping
    shards and records cost; a slower model call under Ray shows up here instead.
    """
    lines = (out / 'samples.jsonl').read_text().splitlines()[1:]
    records = [json.loads(line) for line in lines if line.strip()]
    return sum(r['latency_s']['assembly'] + r['latency_s']['planner_call']
               for r in records if 'latency_s' in r)


def run_row(name: str, result: SessionResult, start_s: float, wall_s: float,
            serial: Mapping[str, Any] | None, out: Path) -> dict[str, Any]:
    """One run's figures: start-up, steady and end-to-end rates, equality with serial."""
    samples = result.metrics['counts']['evaluation_times']
    loop_s = result.state.wall_s['samples']
    return {
        'config': name, 'exit_code': result.exit_code, 'samples': samples,
        'scored': result.metrics['counts']['scored'], 'start_s': round(start_s, 3),
        'samples_s': round(loop_s, 3), 'wall_s': round(wall_s, 3),
        'in_sample_s': round(in_sample_s(out), 3),
        'samples_per_s': round(samples / loop_s, 4) if loop_s > 0 else None,
        'end_to_end_samples_per_s': round(samples / wall_s, 4) if wall_s > 0 else None,
        'equal_to_serial': None if serial is None
        else deterministic(result.metrics) == deterministic(serial),
    }


def best_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration, the run with the highest steady rate, with Ray's overhead against serial.

    Overhead = serial rate / configuration rate - 1 for one actor (time per sample, in %); for N
    actors the speed-up against serial is given instead. The part of one actor's overhead spent
    outside the samples (reading the bag, shipping shards and records) is given apart, against
    the serial run's time outside its samples: on a shared machine the time inside the samples
    moves with the load, this part with the Ray path.
    """
    best: dict[str, dict[str, Any]] = {}
    for r in runs:
        if r['config'] not in best or (r['samples_per_s'] or 0) > (best[r['config']]
                                                                   ['samples_per_s'] or 0):
            best[r['config']] = dict(r)
    serial = best.get('serial', {}).get('samples_per_s')
    for r in best.values():
        rate = r['samples_per_s']
        r['runs_equal_to_serial'] = all(x['equal_to_serial'] for x in runs
                                        if x['config'] == r['config']
                                        and x['equal_to_serial'] is not None)
        if r['config'] == 'serial' or not serial or not rate:
            continue
        r['speedup'] = round(rate / serial, 3)
        if r['config'] == 'ray x1':
            base = best['serial']
            r['overhead_pct'] = round((serial / rate - 1) * 100, 2)
            outside = (r['samples_s'] - r['in_sample_s']) - (base['samples_s']
                                                              - base['in_sample_s'])
            r['outside_overhead_pct'] = round(outside / base['samples_s'] * 100, 2)
    return list(best.values())


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The best rows as a Markdown table."""
    lines = ['| configuration | samples | steady samples/s | loop s (in samples) | start-up s '
             '| end-to-end samples/s | Ray overhead (outside samples) | speed-up '
             '| report equal to serial |',
             '|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        eq = '—' if r['config'] == 'serial' else ('yes' if r['runs_equal_to_serial'] else 'NO')
        over = f"{r['overhead_pct']:+.1f} % ({r['outside_overhead_pct']:+.1f} %)" \
            if 'overhead_pct' in r else '—'
        speed = f"{r['speedup']:.2f}×" if 'speedup' in r else '—'
        lines.append(f"| {r['config']} | {r['samples']} | {r['samples_per_s']} "
                     f"| {r['samples_s']} ({r['in_sample_s']}) | {r['start_s']} "
                     f"| {r['end_to_end_samples_per_s']} | {over} | {speed} | {eq} |")
    return '\n'.join(lines)


def run_serial(bags: Sequence[PreparedBag], cfg: ReplayConfig, factory: EngineFactory,
               out: Path) -> tuple[SessionResult, float, float]:
    """Build the engine here and replay; returns the result, start-up and total wall seconds."""
    t = time.perf_counter()
    planner, info, sizing, errors = factory()
    start_s = time.perf_counter() - t
    result = replay_session(bags, cfg.with_model_sizing(sizing), planner, out, model_info=info,
                            progress=False, planner_errors=errors, bev_count=0)
    return result, start_s, time.perf_counter() - t


def run_ray(bags: Sequence[PreparedBag], cfg: ReplayConfig, factory: EngineFactory, out: Path,
            workers: int, on_gpu: bool) -> tuple[SessionResult, float, float]:
    """Replay on `workers` fresh actors; returns the result, actors' start-up and total wall."""
    t = time.perf_counter()
    result = run_sharded(bags, cfg, factory, out, workers=workers, progress=False, bev_count=0,
                         on_gpu=on_gpu)
    return result, result.state.wall_s['workers_start'], time.perf_counter() - t


def start_cluster(ray: Any, address: str, cpus: int) -> float:
    """Connect to `address` or start a local cluster whose workers import this checkout.

    A running cluster's workers run at the niceness its nodes were started with: start them
    with `RAY_worker_niceness=0` to compare with a serial run on equal terms.
    """
    old = os.environ.get('PYTHONPATH')
    os.environ['PYTHONPATH'] = os.pathsep.join([str(ROOT), *([old] if old else [])])
    t = time.perf_counter()
    if address == 'local':
        start_local_cluster(ray, num_cpus=cpus, log_to_driver=False)
    else:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return time.perf_counter() - t


def main(argv: Sequence[str] | None = None) -> None:
    """Write the bag, run every configuration `--repeats` times alternating, write the table."""
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ray = import_ray()
    on_gpu = args.device.startswith('cuda')
    load_start = load_average()
    drive = DriveConfig(duration_s=args.duration_s, image_format=args.image_format,
                        height=args.height, width=args.width)
    with tempfile.TemporaryDirectory() as tmp:
        bag = args.bag or write_drive(Path(tmp) / 'drive', drive)
        remaps = {f'~/input/camera_{s}/image': drive.topic_for(s) for s in drive.camera_slots}
        remaps['~/input/odometry'] = drive.odom_topic
        transport = 'raw' if args.image_format == 'raw' else 'compressed'
        cfg = load_replay_config(
            [args.params, *([args.plan] if args.plan else [])], remaps=remaps,
            rate_hz=args.rate, overrides={'model': args.model, 'device': args.device,
                                          'cameras.transports': [transport] * 4},
            engine_overrides={'deterministic': True})
        bags = prepare([bag], cfg)
        factory = EngineFactory(cfg.engine, None if on_gpu else args.threads, cfg.vram_budget,
                                dict(cfg.plan_info))
        cluster_s = start_cluster(ray, args.ray, max(args.workers))
        runs: list[dict[str, Any]] = []
        try:
            for rep in range(args.repeats):
                out = args.out / f'serial_{rep}'
                result, start_s, wall_s = run_serial(bags, cfg, factory, out)
                serial = result.metrics
                runs.append(run_row('serial', result, start_s, wall_s, None, out))
                LOG.info('%s', runs[-1])
                del result
                gc.collect()
                for n in args.workers:
                    out = args.out / f'ray{n}_{rep}'
                    result, start_s, wall_s = run_ray(bags, cfg, factory, out, n, on_gpu)
                    runs.append(run_row(f'ray x{n}', result, start_s, wall_s, serial, out))
                    LOG.info('%s', runs[-1])
        finally:
            ray.shutdown()
    rows = best_rows(runs)
    summary = {
        'date_utc': time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime()),
        'machine': {'host': platform.node(), 'cpus': os.cpu_count(),
                    'processor': platform.processor() or platform.machine(),
                    'python': platform.python_version(), 'ray': ray.__version__},
        'load_average_start': load_start, 'load_average_end': load_average(),
        'device': args.device, 'model': args.model, 'threads': None if on_gpu else args.threads,
        'images': f'{args.image_format} {args.height}x{args.width}',
        'drive_s': args.duration_s, 'rate_hz': args.rate, 'cluster_start_s': round(cluster_s, 2),
        'overhead_target_pct': OVERHEAD_TARGET_PCT, 'best': rows, 'runs': runs,
    }
    table = markdown_table(rows)
    (args.out / 'bench_replay_ray.json').write_text(json.dumps(summary, indent=1) + '\n')
    (args.out / 'bench_replay_ray.md').write_text(table + '\n')
    print(table)
    print(json.dumps({k: v for k, v in summary.items() if k not in ('runs', 'best')}))


if __name__ == '__main__':
    main()
