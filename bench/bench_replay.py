"""Replay throughput: samples/s and per-stage latency of `alpamayo-offload replay` on a drive bag.

Writes a synthetic drive bag (the ROS helper's generator), replays it through the real path
(node parameter file -> input assembly -> Engine -> metrics -> report) and prints one JSON line;
the report directory and bench_replay.json go to --out.

CPU, tiny model (CI machine):
    .venv/bin/python -m bench.bench_replay --out /tmp/bench_replay
GPU, full-size model under a 16 GiB cap (lead; the plan file from `alpamayo-offload plan`):
    python -m bench.bench_replay --device cuda --model /path/to/Alpamayo-R1-10B \
        --plan plan_16GiB.yaml --mem-cap-gib 16 --image-format jpeg --height 1080 --width 1920 \
        --duration 14 --rate 1 --out $OUT
"""
from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.replay.params import load_replay_config
from alpamayo_offload.replay.session import ResultBagOptions, prepare, replay_session

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
LOG = logging.getLogger('bench_replay')


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--device', default='cpu')
    p.add_argument('--model', default='tiny')
    p.add_argument('--params', type=Path, default=ROOT / 'config' / 'alpamayo_offload.yaml')
    p.add_argument('--plan', type=Path, default=None, help='residency plan file (merged last)')
    p.add_argument('--mem-cap-gib', type=float, default=None,
                   help='cap this process to that much GPU memory (cuda only)')
    p.add_argument('--duration', type=float, default=20.0, help='drive length in seconds')
    p.add_argument('--rate', type=float, default=2.0, help='evaluation rate (Hz)')
    p.add_argument('--image-format', choices=('raw', 'jpeg', 'png'), default='raw')
    p.add_argument('--height', type=int, default=320)
    p.add_argument('--width', type=int, default=576)
    p.add_argument('--no-deterministic', action='store_true',
                   help='allow nondeterministic kernels (replay is deterministic by default)')
    p.add_argument('--bag', type=Path, default=None, help='replay this bag instead of a new one')
    p.add_argument('--out', type=Path, default=Path('bench_replay_out'))
    return p.parse_args()


def cap_gpu_memory(cap_gib: float) -> dict[str, Any]:
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gib * GIB / total))
    return {'cap_bytes': int(cap_gib * GIB), 'total_bytes': int(total)}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    drive = DriveConfig(duration_s=args.duration, image_format=args.image_format,
                        height=args.height, width=args.width)
    with tempfile.TemporaryDirectory() as tmp:
        bag = args.bag
        if bag is None:
            t = time.perf_counter()
            bag = write_drive(Path(tmp) / 'drive', drive)
            LOG.info('bag written in %.1f s', time.perf_counter() - t)
        remaps = {f'~/input/camera_{s}/image': drive.topic_for(s) for s in drive.camera_slots}
        remaps['~/input/odometry'] = drive.odom_topic
        files = [args.params] + ([args.plan] if args.plan else [])
        transport = 'raw' if args.image_format == 'raw' else 'compressed'
        overrides = {'model': args.model, 'device': args.device,
                     'cameras.transports': [transport] * len(drive.camera_slots)}
        cfg = load_replay_config(files, remaps=remaps, rate_hz=args.rate, overrides=overrides,
                                 engine_overrides={'deterministic': not args.no_deterministic})
        bags = prepare([bag], cfg)
        gpu = cap_gpu_memory(args.mem_cap_gib) if args.mem_cap_gib else {}

        from alpamayo_offload.app.engine_loader import load_engine
        from alpamayo_offload.engine import EngineError

        t = time.perf_counter()
        engine = load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info).engine
        load_s = time.perf_counter() - t
        cfg = cfg.with_model_sizing(engine.image_sizing)
        report_dir = args.out / 'report'
        t = time.perf_counter()
        res = replay_session(bags, cfg, engine.infer, report_dir,
                             model_info=engine.info.as_dict(),
                             planner_errors=(EngineError,), result_bag=ResultBagOptions(),
                             bev_count=2)
        wall_s = time.perf_counter() - t
    counts = res.metrics['counts']
    lat = res.metrics['latency_ms']
    summary: dict[str, Any] = {
        'date': time.strftime('%Y-%m-%d %H:%M:%S %Z'), 'device': args.device,
        'model': args.model, 'images': f'{args.image_format} {args.height}x{args.width}',
        'engine_load_s': round(load_s, 2), 'replay_wall_s': round(wall_s, 2),
        'scored': counts['scored'], 'rejected': counts['rejected'],
        'samples_per_s': round(counts['scored'] / wall_s, 3) if wall_s > 0 else None,
        'latency_ms_median': {k: round(v['median'], 2) for k, v in lat.items() if v['count']},
        'latency_ms_p90': {k: round(v['p90'], 2) for k, v in lat.items() if v['count']},
        'min_ade_mean_m': res.metrics['accuracy'].get('min_ade', {}).get('mean'),
        'machine': res.metrics['machine'], 'gpu_cap': gpu,
    }
    if args.device.startswith('cuda'):
        import torch

        summary['peak_gpu_bytes'] = int(torch.cuda.max_memory_allocated())
    (args.out / 'bench_replay.json').write_text(json.dumps(summary, indent=1) + '\n')
    print(json.dumps(summary))


if __name__ == '__main__':
    main()
