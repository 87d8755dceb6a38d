"""What the node's ROS callbacks cost an inference thread that needs the GIL between its ops.

On the GPU the engine's thread issues tens of thousands of small kernel launches per inference,
each releasing the interpreter lock (GIL) and taking it back; any other thread of the process
that runs Python then delays it. This reproduces that on the CPU: a thread runs `--ops` tiny
torch CPU ops (64x64 matmuls and adds, each releasing the GIL as a launch does) timed alone
and while the real node (`AlpamayoOffloadNode`, a tiny engine that never infers: the timer is
off) receives a drive from another process: 50 Hz `nav_msgs/Odometry` and four 10 Hz
`sensor_msgs/CompressedImage` of ~300 KB (textured 1920x1080 q90 JPEGs; decode-ahead resizes
them to the release model's 320x576 as in the node).

Per condition (a node configuration and the topics it subscribes), interleaved over `--rounds`:
- slowdown: the op loop's median wall time over the alone baseline's, in %;
- gil_wait: the op thread's time neither running nor waiting for a core (wall minus its CPU
  and run-queue times, from /proc schedstat): waiting for the GIL, whatever else the host runs;
- CPU-s per s of the node's threads: the executor thread, the decode-ahead pool (with its
  worker processes, `images.decode_ahead_processes`) and the rest (the middleware's own
  threads, which never take the GIL).

    python -m bench.bench_gil [--ops 20000] [--reps 6] [--rounds 2] [--json OUT.json]
    python -m bench.bench_gil --smoke
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NS = 1_000_000_000
NODE = 'alpamayo_offload_node'
SLOTS = (0, 1, 2, 6)
UNUSED = '/bench_gil/unsubscribed'   # a topic nobody publishes: a stream left out


@dataclasses.dataclass(frozen=True)
class Condition:
    """One node configuration under the drive; `node=False`: the op loop alone."""

    name: str
    node: bool = True
    odometry: bool = True
    cameras: bool = True
    executor: str = 'events'
    decode_ahead: bool = True
    raw: bool = True                         # inference.raw_messages
    switch_interval_s: float | None = None   # sys.setswitchinterval around the op loop
    params: tuple[tuple[str, str], ...] = ()   # further node parameters

    def ros_args(self) -> list[str]:
        """The node's parameters for this condition."""
        values = {
            'inference.period_s': '1000.0',   # no tick: the op loop stands in for inference
            'inference.executor': self.executor,
            'images.decode_ahead': str(self.decode_ahead).lower(),
            'inference.raw_messages': str(self.raw).lower(),
            'cameras.transports': '[' + ','.join(['compressed'] * len(SLOTS)) + ']',
            'diagnostics.period_s': '1.0'}
        if not self.cameras:
            values['cameras.topics'] = '[' + ','.join(f'{UNUSED}_{s}' for s in SLOTS) + ']'
        if not self.odometry:
            values['odometry.topic'] = UNUSED
        values.update(self.params)
        return ['--ros-args'] + [a for k, v in values.items() for a in ('-p', f'{k}:={v}')]


CONDITIONS = (
    Condition('alone', node=False),
    Condition('single executor, rclpy msgs', executor='single', raw=False),
    Condition('events, rclpy msgs', raw=False),
    Condition('events, rclpy msgs, switch 0.5ms', raw=False, switch_interval_s=0.0005),
    Condition('events, raw msgs'),
    Condition('  no streams (diagnostics timer)', odometry=False, cameras=False),
    Condition('  odometry only, rclpy msgs', cameras=False, raw=False),
    Condition('  odometry only, raw msgs', cameras=False),
    Condition('  cameras only, rclpy msgs', odometry=False, raw=False),
    Condition('  cameras only, raw msgs', odometry=False),
    Condition('  cameras, decode threads, raw', odometry=False,
              params=(('images.decode_ahead_processes', 'false'),)),
    Condition('  cameras, no decode-ahead, rclpy', odometry=False, decode_ahead=False, raw=False),
    Condition('  cameras, no decode-ahead, raw', odometry=False, decode_ahead=False),
)


# --- the drive: a publisher process --------------------------------------------------------
def publish(seconds: float, odom_hz: float, camera_hz: float) -> None:
    """Publish odometry and the cameras, stamped with wall time, for `seconds`."""
    import rclpy
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CompressedImage

    from bench.bench_decode import camera_jpeg

    rclpy.init()
    node = rclpy.create_node('bench_gil_drive')
    odom_pub = node.create_publisher(Odometry, f'/{NODE}/input/odometry', QoSProfile(depth=10))
    cam_pubs = [node.create_publisher(CompressedImage, f'/{NODE}/input/camera_{s}/image',
                                      QoSProfile(depth=10)) for s in SLOTS]
    frames = [[camera_jpeg(8 * c + k) for k in range(4)] for c in range(len(SLOTS))]
    events = sorted([(k / odom_hz, -1) for k in range(int(seconds * odom_hz))]
                    + [(k / camera_hz + 0.003 * c, c) for k in range(int(seconds * camera_hz))
                       for c in range(len(SLOTS))])
    print('publishing', flush=True)
    start = time.monotonic()
    try:
        for n, (due, which) in enumerate(events):
            time.sleep(max(0.0, start + due - time.monotonic()))
            stamp = time.time_ns()
            if which < 0:
                msg: Any = Odometry()
                msg.header.frame_id, msg.child_frame_id = 'odom', 'base_link'
                msg.pose.pose.position.x = 8.0 * due
                msg.pose.pose.orientation.w = 1.0
                pub = odom_pub
            else:
                msg = CompressedImage(format='jpeg', data=frames[which][n % 4])
                msg.header.frame_id = f'camera_{SLOTS[which]}'
                pub = cam_pubs[which]
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, NS)
            if not rclpy.ok():   # stopped (SIGTERM from the bench)
                break
            try:
                pub.publish(msg)
            except RuntimeError:   # rcl's RCLError: the context went away after the check
                if rclpy.ok():
                    raise
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


@contextmanager
def drive(seconds: float, domain: int) -> Iterator[None]:
    """The publisher process, running while the block runs."""
    env = {**os.environ, 'ROS_DOMAIN_ID': str(domain)}
    proc = subprocess.Popen([sys.executable, '-m', 'bench.bench_gil', '--publish',
                             '--seconds', str(seconds)], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != 'publishing':
            raise RuntimeError(f'the drive did not start (exit status {proc.wait()})')
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- measurement ---------------------------------------------------------------------------
def _schedstat(tid: int) -> tuple[int, int]:
    """(ns on a CPU, ns waiting for one) of thread `tid` of this process."""
    with open(f'/proc/self/task/{tid}/schedstat') as f:
        run, wait, _ = f.read().split()
    return int(run), int(wait)


def thread_cpu() -> dict[int, int]:
    """CPU ns so far of every thread of this process, by native id."""
    out = {}
    for tid in os.listdir('/proc/self/task'):
        try:
            out[int(tid)] = _schedstat(int(tid))[0]
        except OSError:   # the thread ended meanwhile
            continue
    return out


def process_cpu(pids: list[int]) -> int:
    """CPU ns so far of processes `pids` (user + system; a process gone meanwhile counts 0)."""
    tick, total = os.sysconf('SC_CLK_TCK'), 0
    for pid in pids:
        try:
            with open(f'/proc/{pid}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) * NS // tick
    return total


def op_loop(ops: int) -> dict[str, float]:
    """`ops` tiny torch ops in this thread: wall, CPU and run-queue seconds, and the GIL wait."""
    import torch

    x = torch.randn(64, 64)
    w = torch.randn(64, 64) * 0.01   # keeps x bounded: no inf/denormal slow paths
    b = torch.randn(64, 64)
    y = torch.empty(64, 64)
    tid = threading.get_native_id()
    run0, wait0 = _schedstat(tid)
    start = time.perf_counter()
    for _ in range(ops // 2):
        torch.mm(x, w, out=y)
        torch.add(y, b, out=x)
    wall = time.perf_counter() - start
    run1, wait1 = _schedstat(tid)
    cpu, runq = (run1 - run0) / NS, (wait1 - wait0) / NS
    return {'wall_s': wall, 'cpu_s': cpu, 'runq_s': runq, 'gil_wait_s': wall - cpu - runq}


class _KeepOpen:
    """The tiny engine, shared by the conditions: a node's cleanup leaves it open."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        """Kept open for the next condition's node."""


_ENGINE: list[Any] = []


def tiny_loader(cfg: Any) -> Any:
    """The node's engine loader: the tiny CPU engine (it never infers here), release sizing.

    The release model's frame sizing makes decode-ahead resize each 1080p frame to 320x576, the
    background work the real node does.
    """
    import torch

    from alpamayo_offload.app.engine_loader import LoadedEngine
    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.model.config import full_config
    from alpamayo_offload.model.inputs import ImageSizing

    torch.set_num_threads(1)
    if not _ENGINE:
        _ENGINE.append(_KeepOpen(Engine.from_config(EngineConfig(model='tiny', device='cpu'))))
    return LoadedEngine(_ENGINE[0], {}, '', ImageSizing.of(full_config()))


def measure(cond: Condition, ops: int, reps: int, settle_s: float) -> dict[str, Any]:
    """Run the op loop `reps` times under `cond`; medians and the node's CPU per second."""
    loops: list[dict[str, float]] = []
    if not cond.node:
        op_loop(ops)   # warm-up
        loops = [op_loop(ops) for _ in range(reps)]
        return _summary(cond, loops, {}, 1.0)
    import rclpy
    from rclpy.lifecycle import TransitionCallbackReturn

    from alpamayo_offload.ros.executor import make_executor
    from alpamayo_offload.ros.node import AlpamayoOffloadNode

    rclpy.init(args=cond.ros_args())
    node = AlpamayoOffloadNode(tiny_loader)
    executor, made = make_executor(cond.executor, node.context)
    assert made == cond.executor, made
    executor.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set() and node.context.ok():
            executor.spin_once(timeout_sec=0.1)

    spinner = threading.Thread(target=spin, name='executor', daemon=True)
    spinner.start()
    try:
        for transition in (node.trigger_configure, node.trigger_activate):
            assert transition() == TransitionCallbackReturn.SUCCESS, transition
        _wait_for_streams(node, cond)
        # messages are counted from here: the loops alone can be shorter than a camera period
        got0 = {n: r.total for n, r in node._streams.rates(time.monotonic()).items()}
        counted = time.perf_counter()
        time.sleep(settle_s)     # buffers fill; decode-ahead reaches steady state
        previous = sys.getswitchinterval()
        op_loop(ops)   # warm-up
        workers = node._conf.ahead_workers
        pids = workers.pids() if workers is not None else []
        cpu0, worker0, t0 = thread_cpu(), process_cpu(pids), time.perf_counter()
        for _ in range(reps):
            if cond.switch_interval_s is not None:
                sys.setswitchinterval(cond.switch_interval_s)
            try:
                loops.append(op_loop(ops))
            finally:
                sys.setswitchinterval(previous)
        cpu1, elapsed = thread_cpu(), time.perf_counter() - t0
        names = {t.native_id: t.name for t in threading.enumerate()}
        spent = {'decode_ahead': (process_cpu(pids) - worker0) / NS} if pids else {}
        for tid, ns in cpu1.items():
            name = names.get(tid, 'middleware')
            group = ('executor' if name == 'executor' else 'decode_ahead'
                     if name.startswith('decode-ahead') else 'op_loop'
                     if tid == threading.get_native_id() else 'other')
            spent[group] = spent.get(group, 0.0) + (ns - cpu0.get(tid, 0)) / NS
        totals = {n: r.total for n, r in node._streams.rates(time.monotonic()).items()}
        received = {n: (totals[n] - got0[n]) / (time.perf_counter() - counted) for n in totals}
    finally:
        stop.set()
        spinner.join()
        node.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    out = _summary(cond, loops, spent, elapsed)
    out['received_hz'] = received    # from the settle on
    out['received_total'] = totals   # since activation
    return out


def _wait_for_streams(node: Any, cond: Condition, timeout_s: float = 20.0) -> None:
    """Return once every stream `cond` subscribes has delivered a message."""
    wanted = (['odometry'] if cond.odometry else []) + \
        ([f'camera_{s}' for s in SLOTS] if cond.cameras else [])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        totals = {n: r.total for n, r in node._streams.rates(time.monotonic()).items()}
        if all(totals[n] for n in wanted):
            return
        time.sleep(0.1)
    raise RuntimeError(f'{cond.name}: no messages on {wanted} within {timeout_s} s')


def _summary(cond: Condition, loops: list[dict[str, float]], spent: dict[str, float],
             elapsed: float) -> dict[str, Any]:
    return {'condition': cond.name, 'loops': loops,
            **{k: statistics.median(x[k] for x in loops) for k in loops[0]},
            'cpu_s_per_s': {k: v / elapsed for k, v in sorted(spent.items())}}


def report(rows: list[dict[str, Any]], ops: int) -> list[str]:
    """The table: each condition's medians over its rounds against the alone baseline."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r['condition'], []).append(r)
    base = statistics.median(r['wall_s'] for r in by['alone'])
    base_busy = statistics.median(r['wall_s'] - r['runq_s'] for r in by['alone'])
    lines = [f'{"condition":34s} {"op loop":>8s} {"slowdown":>8s} {"no runq":>8s} '
             f'{"GIL wait":>8s} {"runq":>6s} {"executor":>8s} {"decode":>7s} {"other":>7s}',
             f'{"":34s} {"ms":>8s} {"%":>8s} {"%":>8s} {"ms":>8s} {"ms":>6s} {"CPU-s/s":>8s} '
             f'{"CPU-s/s":>7s} {"CPU-s/s":>7s}']
    for name, got in by.items():
        wall = statistics.median(r['wall_s'] for r in got)
        gil = statistics.median(r['gil_wait_s'] for r in got)
        runq = statistics.median(r['runq_s'] for r in got)
        cpu = {k: statistics.median(r['cpu_s_per_s'].get(k, 0.0) for r in got)
               for k in ('executor', 'decode_ahead', 'other')}
        busy = statistics.median(r['wall_s'] - r['runq_s'] for r in got)
        lines.append(f'{name:34s} {wall * 1e3:8.1f} {100 * (wall / base - 1):+8.1f} '
                     f'{100 * (busy / base_busy - 1):+8.1f} {gil * 1e3:8.1f} {runq * 1e3:6.1f} '
                     f'{cpu["executor"]:8.3f} {cpu["decode_ahead"]:7.3f} {cpu["other"]:7.3f}')
    lines.append(f'({ops} ops per loop; medians over rounds of the per-round medians; "no runq": '
                 'the slowdown without the time the op thread waited for a core, what a host '
                 'with idle cores would see)')
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the conditions in `--rounds` interleaved rounds under one drive; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--ops', type=int, default=20000, help='tiny torch ops per loop')
    parser.add_argument('--reps', type=int, default=6, help='loops per condition and round')
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--settle-s', type=float, default=2.0,
                        help='seconds of drive before a node condition is measured')
    parser.add_argument('--only', nargs='*', help='condition names to run (alone always runs)')
    parser.add_argument('--smoke', action='store_true',
                        help='a few short loops per condition: checks the machinery')
    parser.add_argument('--json', type=Path, help='also write every loop here')
    parser.add_argument('--publish', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--seconds', type=float, default=600.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.publish:
        publish(args.seconds, 50.0, 10.0)
        return 0
    import torch

    torch.set_num_threads(1)   # the node's inference.threads default
    if args.smoke:
        args.ops, args.reps, args.rounds, args.settle_s = 2000, 2, 1, 1.0
    conds = [c for c in CONDITIONS if not c.node or not args.only or c.name.strip() in args.only]
    domain = int(os.environ.get('ROS_DOMAIN_ID', '0')) or 100 + os.getpid() % 100
    os.environ['ROS_DOMAIN_ID'] = str(domain)
    rows = []
    with drive(args.seconds, domain):
        for _ in range(args.rounds):
            for cond in conds:
                rows.append(measure(cond, args.ops, args.reps, args.settle_s))
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    command = ' '.join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    print(f'GIL contention, {when}: {command}')
    print(f'{os.cpu_count()} cores ({platform.processor() or platform.machine()}); drive: 50 Hz '
          'odometry + 4 x 10 Hz ~300 KB JPEG from another process')
    for line in report(rows, args.ops):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({'date': when, 'command': command, 'ops': args.ops,
                                         'rows': rows}, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
