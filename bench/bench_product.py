"""The products on one plan per VRAM budget: engine called directly, replay, the live node.

For each budget (`--budgets`, GiB) one plan is made from one profile (measured here, or
`--profile FILE`, or `synthetic` for the CPU smoke run) and written as the planner's parameter
file; then, with that plan and the same input shapes (4 cameras x 4 frames of 1920x1080 JPEG
resized to the model's own size):

- `engine`: `Engine.infer` on the example input, frames presized as the node hands them over;
  its runs are split in two halves, one before and one after replay (each after its own
  re-plan and warm-up), so neither path is always the one measured first after a load, a
  re-plan or the previous node's exit (the halves' medians are kept as `halves_total_ms`);
- `replay`: `replay_session` over a recording of 4 x 1080p camera-like JPEG cameras (the
  synthetic drive writer, frames from `bench_decode.camera_jpeg`) with the same engine;
- `node`: the node (`alpamayo_offload.ros.node`, its own process and engine, real rclpy and
  Fast DDS) fed by the bag player (`ros/bag_player.play`, looping the recording in real time);
  per-inference stages read from its `/diagnostics` (heartbeat 0.2 s, so each inference shows).

Per path and stage (preprocess, vision, prefill, decode, diffusion, postprocess, engine total,
and the path's own wall time per inference): median and p90 over `--runs` inferences after
`--warmup`, beside the plan's prediction. VRAM is capped to the budget in every process
(`torch.cuda.set_per_process_memory_fraction`, as the other benches emulate a smaller GPU).
`--trace` writes a torch profiler trace of one inference of each path at the first budget,
the call after the warm-up, left out of the figures; CUPTI is torn down after it where Kineto
allows (`bench.peers.trace`), but the figures of record come from runs without `--trace`.
Writes bench_product.json (and profile.json, traces) to --out and prints a table last.

GPU machine (ROS wheels carried: `bench/ros_wheels.sh`, docs/benchmarks.md):
    . bench/ros_wheels.sh && PYTHONUNBUFFERED=1 "$ROS_PY" -m bench.bench_product --out $OUT
CPU smoke (tiny model, small frames, synthetic profile):
    .venv/bin/python -m bench.bench_product --smoke --out /tmp/product
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.peers.trace import traced

GIB = 2**30
LOG = logging.getLogger('bench_product')
STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'postprocess', 'total')
PATHS = ('engine', 'replay', 'node')
DECODE_TOKENS, DIFFUSION_STEPS = 21, 10
NODE_DIAGNOSTICS_S = 0.2
CAMERA_FRAMES = 8          # distinct JPEGs per camera, cycled (no decoder cache effects)
SMOKE = {'model': 'tiny', 'device': 'cpu', 'profile': 'synthetic', 'budgets': '0.6',
         'runs': 3, 'warmup': 1, 'height': 96, 'width': 160, 'duration': 5.0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line; `--smoke` sets the CPU smoke run's values (explicit flags still win)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', type=Path, required=True)
    p.add_argument('--smoke', action='store_true', help=f'CPU smoke run: {SMOKE}')
    p.add_argument('--model', help='preset with random weights or checkpoint (default full)')
    p.add_argument('--device', help='default cuda')
    p.add_argument('--budgets', help='VRAM budgets in GiB, comma separated (default 16,12,8)')
    p.add_argument('--profile', help='profile JSON to plan from, or "synthetic" (made-up, CPU '
                                     'smoke only); default: profile the loaded model here')
    p.add_argument('--compression', default='off', choices=('auto', 'off', 'on'),
                   help="the planner's choice of compressed placements (off where nvCOMP is not "
                        'installed: a compressed plan would fall back to raw streaming)')
    p.add_argument('--paths', default=','.join(PATHS), help='which of engine,replay,node')
    p.add_argument('--runs', type=int, help='timed inferences per path (default 10)')
    p.add_argument('--warmup', type=int, help='inferences left out first (default 2)')
    p.add_argument('--height', type=int, help='camera frame height (default 1080)')
    p.add_argument('--width', type=int, help='camera frame width (default 1920)')
    p.add_argument('--duration', type=float, help='recording length in s (default 10)')
    p.add_argument('--rate', type=float,
                   help='replay evaluations per second (default: warmup + runs + 1 over the '
                        'recording after its first 2 s)')
    p.add_argument('--node-param', action='append', default=[], metavar='NAME=VALUE',
                   help='node parameter for the node and replay (YAML value), e.g. '
                        'inference.threads=0; repeatable')
    p.add_argument('--node-timeout', type=float, default=300.0,
                   help='seconds for the node to load and become active')
    p.add_argument('--trace', action='store_true',
                   help='torch profiler trace of one inference per path (first budget)')
    p.add_argument('--budget-s', type=float, default=560.0,
                   help='skip a path that would end past this many seconds from the start, '
                        'by its predicted latency (the GPU machine stops a command at 600 s)')
    p.add_argument('--work', type=Path, help='scratch directory (default: a temporary one)')
    args = p.parse_args(argv)
    defaults = {**{'model': 'full', 'device': 'cuda', 'budgets': '16,12,8', 'runs': 10,
                   'warmup': 2, 'height': 1080, 'width': 1920, 'duration': 10.0},
                **(SMOKE if args.smoke else {})}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.rate is None:
        args.rate = (args.warmup + args.runs + 1 + args.trace) / max(1.0, args.duration - 2.0)
    unknown = set(args.paths.split(',')) - set(PATHS)
    if unknown or args.runs < 1 or args.warmup < 0:
        p.error(f'--paths {args.paths} (of {PATHS}), --runs {args.runs} >= 1, '
                f'--warmup {args.warmup} >= 0')
    return args


# ---------------------------------------------------------------- numbers
def summary(rows: list[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per key: median and p90 (nearest rank) of the rows' finite values, and their count."""
    out = {}
    for key in sorted({k for r in rows for k in r}):
        values = sorted(float(r[key]) for r in rows
                        if key in r and np.isfinite(float(r[key])))
        if values:
            out[key] = {'median': statistics.median(values),
                        'p90': values[max(0, -(-9 * len(values) // 10) - 1)], 'n': len(values)}
    return out


def cap_vram(device: str, gib: float | None) -> None:
    """Cap this process's CUDA allocations to `gib` (None: the whole GPU); no-op on the CPU."""
    if device.startswith('cuda'):
        from bench.peers.runner import cap_vram as cap

        cap(None if gib is None else int(gib * GIB))


# ---------------------------------------------------------------- inputs
def write_recording(path: Path, args: argparse.Namespace) -> Any:
    """The drive bag: 4 cameras of camera-like JPEGs at 10 Hz, 50 Hz odometry."""
    from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
    from bench.bench_decode import camera_jpeg

    drive = DriveConfig(duration_s=args.duration, image_format='jpeg', height=args.height,
                        width=args.width)
    frames = {(s, k): camera_jpeg(CAMERA_FRAMES * i + k, args.height, args.width)
              for i, s in enumerate(drive.camera_slots) for k in range(CAMERA_FRAMES)}
    write_drive(path, drive, lambda slot, k: frames[(slot, k % CAMERA_FRAMES)])
    return drive


def node_values(args: argparse.Namespace) -> dict[str, Any]:
    """Node parameters shared by replay and the node: the engine as profiled, JPEG cameras."""
    values: dict[str, Any] = {
        'model': args.model, 'device': args.device, 'mode': 'pipelined',
        'decode.max_tokens': DECODE_TOKENS, 'decode.fixed_tokens': DECODE_TOKENS,
        'decode.diffusion_steps': DIFFUSION_STEPS, 'cameras.transports': ['compressed'] * 4,
        'inference.period_s': 0.1, 'diagnostics.period_s': NODE_DIAGNOSTICS_S,
        'diagnostics.plan_window': args.runs}
    for item in args.node_param:
        name, sep, value = item.partition('=')
        if not sep:
            raise SystemExit(f'--node-param {item!r}: give NAME=VALUE')
        values[name] = yaml.safe_load(value)
    return values


def write_params(path: Path, values: Mapping[str, Any]) -> Path:
    """Write `values` as a node parameter file (flat dotted names)."""
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': dict(values)}}))
    return path


# ---------------------------------------------------------------- the three paths
def untimed_calls(args: argparse.Namespace, trace: Path | None) -> int:
    """Inferences of a path left out of its figures: the warm-up and, when it is traced, the
    traced call after it (the profiler's own overhead is in that call)."""
    return args.warmup + (trace is not None)


def schedule(paths: list[str], runs: int) -> list[tuple[str, int]]:
    """The order paths run in at one budget, with the timed runs of each part.

    With replay, the engine's runs bracket it: half before, the rest after.
    """
    if 'engine' not in paths or 'replay' not in paths or runs < 2:
        return [(name, runs) for name in paths]
    order: list[tuple[str, int]] = []
    for name in paths:
        if name == 'engine':
            order.append(('engine', runs // 2))
        elif name == 'replay':
            order += [('replay', runs), ('engine', runs - runs // 2)]
        else:
            order.append((name, runs))
    return order


def engine_path(engine: Any, model_input: Any, args: argparse.Namespace,
                trace: Path | None, runs: int) -> dict[str, Any]:
    """Time `Engine.infer` directly: its stages and the synchronised wall time per call."""
    import torch

    cuda = args.device.startswith('cuda')
    skip = untimed_calls(args, trace)
    infer = traced(engine.infer, skip, trace) if trace else engine.infer
    rows = []
    for i in range(skip + runs):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        timings = infer(model_input).timings
        if cuda:
            torch.cuda.synchronize()
        if i >= skip:
            rows.append({**{k: 1e3 * v for k, v in timings.items()},
                         'wall': 1e3 * (time.perf_counter() - t0)})
    return {'rows': rows, 'torch_threads': torch.get_num_threads()}


def replay_path(engine: Any, bag: Path, files: list[Path], remaps: Mapping[str, str],
                args: argparse.Namespace, work: Path, trace: Path | None) -> dict[str, Any]:
    """Replay the recording through `replay_session` with the engine; stages per sample."""
    import torch

    from alpamayo_offload.engine import EngineError
    from alpamayo_offload.replay.params import load_replay_config
    from alpamayo_offload.replay.session import prepare, replay_session

    cfg = load_replay_config(files, remaps=remaps, rate_hz=args.rate)
    cfg = cfg.with_model_sizing(engine.image_sizing)
    skip = untimed_calls(args, trace)
    infer = traced(engine.infer, skip, trace) if trace else engine.infer
    if work.exists():
        shutil.rmtree(work)
    res = replay_session(prepare([bag], cfg), cfg, infer, work, model_info=engine.info.as_dict(),
                         progress=False, planner_errors=(EngineError,), bev_count=0)
    records = [json.loads(line) for line in (work / 'samples.jsonl').read_text().splitlines()]
    done = [r for r in records if r.get('status') == 'ok' and not r.get('warmup')]
    rows = [{**{k: 1e3 * v for k, v in r['latency_s'].items()},
             'wall': 1e3 * (r['latency_s']['assembly'] + r['latency_s']['planner_call'])}
            for r in done[skip:skip + args.runs]]
    return {'rows': rows, 'torch_threads': torch.get_num_threads(), 'exit_code': res.exit_code,
            'evaluations': len(records), 'scored': len(done)}


def node_path(bag: Path, files: list[Path], remaps: Mapping[str, str], gib: float,
              args: argparse.Namespace, predicted_s: float, trace: Path | None,
              log: Path) -> dict[str, Any]:
    """Start the node with the plan, loop the recording into it, read its stages per inference."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from alpamayo_offload.app.schema import NODE_NAME
    from alpamayo_offload.ros.bag_player import play
    from alpamayo_offload.ros.session import LifecycleClient, node_command

    skip = untimed_calls(args, trace)
    child = (sys.executable, '-m', 'bench.bench_product', '--node-child', str(gib),
             str(trace or ''), str(skip))
    cmd = node_command(files, {}, dict(remaps), child)
    statuses: dict[str, list[dict[str, Any]]] = {'inference': [], 'model': [], 'plan': []}
    seen: dict[int, dict[str, str]] = {}

    def on_diag(msg: DiagnosticArray) -> None:
        for s in msg.status:
            task = s.name.removeprefix(f'{NODE_NAME}: ')
            if task not in statuses:
                continue
            values = {kv.key: kv.value for kv in s.values}
            statuses[task][-1:] = [{'level': int.from_bytes(s.level, 'little')
                                    if isinstance(s.level, bytes) else int(s.level),
                                    'message': s.message, 'values': values}]
            if task == 'inference' and s.message == 'path published':
                seen.setdefault(int(values['inferences']), values)

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    stop = threading.Event()
    with open(log, 'w') as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        node = Node('bench_product', context=ctx)
        node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        t_start = time.monotonic()
        state = LifecycleClient(node, executor).wait_for('active', args.node_timeout,
                                                         lambda: proc.poll() is None)
        ready_s = time.monotonic() - t_start
        player = Node('bench_product_player', context=ctx)

        def loop() -> None:
            while not stop.is_set() and ctx.ok():
                play(player, bag, restamp=True, wait_for_subscribers_s=5.0)

        feeder = threading.Thread(target=loop, daemon=True)
        if state == 'active':
            feeder.start()
        need = skip + args.runs
        deadline = time.monotonic() + 30.0 + 3.0 * need * max(predicted_s, 0.5)
        while state == 'active' and proc.poll() is None and len(seen) < need \
                and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        stop.set()
        if feeder.is_alive():
            feeder.join(timeout=args.duration + 10.0)
    finally:
        stop.set()
        alive = proc.poll() is None
        if alive:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        rclpy.try_shutdown(context=ctx)
    counts = sorted(seen)
    rows = [{**{k: float(seen[n][f't_{k}_ms']) for k in STAGES if k != 'total'},
             'total': float(seen[n]['t_engine_total_ms']), 'wall': float(seen[n]['t_total_ms']),
             'image_decode': float(seen[n]['t_image_decode_ms']),
             'node_overhead': float(seen[n]['t_node_overhead_ms']),
             'input_age': float(seen[n]['input_age_ms'])}
            for n in counts[skip:skip + args.runs]]
    model = statuses['model'][-1]['values'] if statuses['model'] else {}
    return {'rows': rows, 'state': state, 'ready_s': round(ready_s, 1),
            'inferences_seen': counts, 'alive_at_end': alive, 'exit_code': proc.returncode,
            'torch_threads': model.get('inference_threads'), 'executor': model.get('executor'),
            'model_status': model,
            'plan_status': statuses['plan'][-1] if statuses['plan'] else None,
            'log_tail': log.read_text()[-3000:] if len(rows) < args.runs else ''}


def merge_parts(earlier: Mapping[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """The engine path's parts as one result: rows joined, each part's median total kept."""
    if 'rows' not in earlier:
        got['halves_total_ms'] = [_median_total(got['rows'])]
        return got
    return {**got, 'rows': [*earlier['rows'], *got['rows']],
            'seconds': round(earlier['seconds'] + got['seconds'], 1),
            'halves_total_ms': [*earlier['halves_total_ms'], _median_total(got['rows'])]}


def _median_total(rows: list[Mapping[str, float]]) -> float | None:
    return statistics.median(r['total'] for r in rows) if rows else None


def node_child(argv: list[str]) -> None:
    """The node's process: cap VRAM, load as the node does, trace one inference if asked."""
    gib, trace, at_call = float(argv[0]), argv[1], int(argv[2])
    from alpamayo_offload.ros import node as ros_node

    def loader(cfg: Any) -> Any:
        cap_vram(cfg.engine.device, gib or None)
        loaded = ros_node.load_node_engine(cfg)
        if trace:
            loaded.engine.infer = traced(loaded.engine.infer, at_call, Path(trace))
        return loaded

    ros_node.main(argv[3:], engine_loader=loader)


# ---------------------------------------------------------------- plan and run
def expected_s(path: str, predicted_s: float, args: argparse.Namespace) -> float:
    """Rough seconds a path takes at `predicted_s` per inference (the node loads a model)."""
    inferences = (args.warmup + args.runs + 2) * max(predicted_s, 0.1) * 1.3
    return inferences + (60.0 if path == 'node' else 5.0)


def load_engine_and_profile(args: argparse.Namespace,
                            out: Path) -> tuple[Any, Any, Path, str]:
    """Load the engine (pinned store: re-plans attach without re-copying) and get a profile."""
    import torch

    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.planning.profile import load_profile, save_profile

    cuda = args.device.startswith('cuda')
    measure = args.profile is None
    engine = Engine.from_config(EngineConfig(
        model=args.model, device=args.device, mode='sequential' if measure else 'pipelined',
        resident={}, max_decode_tokens=DECODE_TOKENS, fixed_decode_tokens=DECODE_TOKENS,
        diffusion_steps=DIFFUSION_STEPS, seed=0, pin_all_layers=cuda, instrument=measure))
    if args.profile == 'synthetic':
        from bench.bench_compress import synthetic_profile

        profile = synthetic_profile(engine)
    elif args.profile:
        profile = load_profile(args.profile)[0]
    else:
        from alpamayo_offload.profiling.gpu_profile import add_host_terms, profile_engine

        torch.cuda.synchronize()
        profile = profile_engine(engine, model=args.model,
                                 loaded_bytes=torch.cuda.memory_allocated(), warmup=1,
                                 settings={'decode_tokens': DECODE_TOKENS,
                                           'diffusion_steps': DIFFUSION_STEPS})
        profile = add_host_terms(engine, engine.example_input(presized=True), profile, runs=3)
    path = out / 'profile.json'
    return engine, profile, path, save_profile(profile, path)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every budget and path within the time budget; the document bench_product.json holds."""
    from alpamayo_offload.app.param_file import default_params_file
    from alpamayo_offload.planning import PlannerOptions, Workload, plan, write_plan_params
    from alpamayo_offload.planning.expectation import predicted_stage_ms
    from alpamayo_offload.planning.params import profile_ref
    from alpamayo_offload.profiling.commands import plan_file_params
    from alpamayo_offload.ros.demo import remaps_for

    start = time.perf_counter()
    out: Path = args.out
    paths = [p for p in PATHS if p in args.paths.split(',')]
    engine, profile, profile_path, digest = load_engine_and_profile(args, out)
    doc: dict[str, Any] = {
        'command': ' '.join([Path(sys.executable).name, '-m', 'bench.bench_product',
                             *sys.argv[1:]]),
        'date': time.strftime('%Y-%m-%d %H:%M:%S %Z'), 'model': args.model,
        'device': args.device, 'cores': os.cpu_count(), 'frames': [args.height, args.width],
        'runs': args.runs, 'warmup': args.warmup, 'profile': str(args.profile or 'measured'),
        'setup_s': None, 'budgets': []}
    t = time.perf_counter()
    bag = work / 'drive'
    drive = write_recording(bag, args)
    doc['recording_write_s'] = round(time.perf_counter() - t, 1)
    remaps = remaps_for(drive)
    params = write_params(work / 'bench_node.yaml', node_values(args))
    model_input = engine.example_input(args.height, args.width, presized=True)
    options = PlannerOptions(workload=Workload(DECODE_TOKENS, DIFFUSION_STEPS),
                             max_decode_tokens=DECODE_TOKENS, compression=args.compression)
    doc['setup_s'] = round(time.perf_counter() - start, 1)
    for i, gib in enumerate(float(b) for b in args.budgets.split(',')):
        budget = int(gib * GIB)
        result = plan(profile, budget, options)
        plan_file = work / f'plan_{gib:g}GiB.yaml'
        write_plan_params(plan_file, plan_file_params(profile, result, budget,
                                                      profile_ref(profile_path, digest)))
        placement = result.placement
        row: dict[str, Any] = {
            'budget_gib': gib, 'plan_file': plan_file.read_text(),
            'predicted_ms': predicted_stage_ms(result.prediction), 'paths': {}}
        doc['budgets'].append(row)
        files = [default_params_file(), params, plan_file]
        parts: dict[str, dict[str, Any]] = {}   # each path's raw result (rows) at this budget
        for name, runs in schedule(paths, args.runs):
            need_s = expected_s(name, result.prediction.total_s, args)
            if time.perf_counter() - start + need_s > args.budget_s:
                row['paths'].setdefault(
                    name, {'skipped': f'time budget (--budget-s): needs ~{need_s:.0f} s'})
                continue
            earlier = parts.get(name, {})
            trace = out / f'trace_{name}_{gib:g}GiB.json.gz' \
                if args.trace and i == 0 and not earlier else None
            t = time.perf_counter()
            if name == 'node':
                cap_vram(args.device, None)
                got = node_path(bag, files, remaps, gib, args, result.prediction.total_s, trace,
                                work / f'node_{gib:g}GiB.log')
            else:
                cap_vram(args.device, gib)
                engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                              mode='pipelined', budget_bytes=budget,
                              embed_on_host=placement.embed_on_host)
                got = engine_path(engine, model_input, args, trace, runs) \
                    if name == 'engine' else \
                    replay_path(engine, bag, files, remaps, args, work / f'replay_{gib:g}', trace)
            got['seconds'] = round(time.perf_counter() - t, 1)
            if name == 'engine':
                got = merge_parts(earlier, got)
            parts[name] = got
            row['paths'][name] = {**{k: v for k, v in got.items() if k != 'rows'},
                                  'stages_ms': summary(got['rows'])}
            got = row['paths'][name]
            LOG.info('%g GiB %s: %s', gib, name, {k: round(v['median'], 1)
                                                  for k, v in got['stages_ms'].items()})
            (out / 'bench_product.json').write_text(json.dumps(doc, indent=1) + '\n')
    cap_vram(args.device, None)
    engine.close()
    doc['wall_s'] = round(time.perf_counter() - start, 1)
    return doc


def table(doc: Mapping[str, Any]) -> str:
    """Medians per stage (ms) beside the prediction; p90 of the engine total; gaps."""
    cols = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'postprocess', 'total')
    head = (f"{'GiB':>5} {'path':<7} {'n':>3} " + ' '.join(f'{c[:7]:>8}' for c in cols)
            + f" {'p90 tot':>8} {'wall':>8} {'vs plan':>8} {'vs eng':>7}")
    lines = [head]
    for row in doc['budgets']:
        pred = row['predicted_ms']
        host = f"{pred['host']:.1f} (+)"
        cells = [f'{host:>8}', *(f'{pred[c]:8.1f}' for c in cols[1:5]),
                 f"{'(+)':>8}", f"{pred['total']:8.1f}"]
        lines.append(f"{row['budget_gib']:>5g} {'plan':<7} {'-':>3} " + ' '.join(cells))
        engine_total = row['paths'].get('engine', {}).get('stages_ms', {}).get('total', {})
        for name, got in row['paths'].items():
            st = got.get('stages_ms', {})
            if not st:
                lines.append(f"{row['budget_gib']:>5g} {name:<7} {0:>3} "
                             f"{got.get('skipped') or got.get('state') or 'no inference'}")
                continue
            med = [st[c]['median'] if c in st else float('nan') for c in cols]
            total = st.get('total', {})
            vs_plan = total.get('median', float('nan')) / pred['total'] - 1
            vs_eng = total.get('median', float('nan')) / engine_total['median'] - 1 \
                if engine_total else float('nan')
            lines.append(f"{row['budget_gib']:>5g} {name:<7} {total.get('n', 0):>3} "
                         + ' '.join(f'{m:8.1f}' for m in med)
                         + f" {total.get('p90', float('nan')):8.1f}"
                         f" {st.get('wall', {}).get('median', float('nan')):8.1f}"
                         f" {100 * vs_plan:+7.1f}% {100 * vs_eng:+6.1f}%")
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the bench (or, with `--node-child`, be the node's process)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--node-child']:
        node_child(argv[1:])
        return 0
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s: %(message)s')
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='bench_product_') as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        doc = run(args, work)
    doc['table'] = table(doc)
    (args.out / 'bench_product.json').write_text(json.dumps(doc, indent=1) + '\n')
    print(f"{doc['command']}  ({doc['date']}, {doc['wall_s']} s)")
    print('median ms per stage over the timed inferences; plan: pre- and postprocess predicted '
          'together (+); total: the engine\'s; wall: the path per inference (engine: the call, '
          'replay: assembly + call, node: tick to published path)')
    print(doc['table'])
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
