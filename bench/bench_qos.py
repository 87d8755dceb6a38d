"""Camera QoS: frame loss and latency of best-effort vs reliable subscriptions through Fast DDS.

A publisher process and a subscriber process (real rclpy, rmw_fastrtps_cpp, discovery limited to
this host, a ROS domain of their own) exchange 1920x1080 camera frames: raw `sensor_msgs/Image`
(bgr8, 6.2 MB) or `sensor_msgs/CompressedImage` (a textured q90 JPEG, ~290 KB), at each rate, from
4 cameras at once (as the node subscribes) and from 1. The publisher is reliable keep-last 10 (the
rmw default, what `ros2 bag play`, image_transport and most camera drivers offer; `--publisher
best_effort` for a driver on sensor-data QoS, which a reliable subscription never receives from:
the pair is incompatible and that case reports loss 100 %); the subscriber
is either the node's best-effort profile (sensor-data QoS, keep-last 5) or its reliable profile
(keep-last 5). Each configuration runs for `--duration` seconds; the subscriber counts distinct
frames received per camera and the latency from the header stamp (set at publish) to its callback.

Reported per configuration: frames sent and received, loss % (1 - received / sent), received Hz
per camera, latency p50/p90/max in ms, and the load average while it ran (the machine is shared).
A table is printed last; the JSON goes to `--out`/bench_qos.json.

Run: python -m bench.bench_qos --out DIR [--duration 10] [--rates 10 20 30] [--cameras 4 1]
     [--payloads raw jpeg] [--transport default|udp]
`--transport udp` sets FASTDDS_BUILTIN_TRANSPORTS=UDPv4 (no shared memory: how frames travel
between two hosts); the default keeps Fast DDS's built-in transports (shared memory on one host).
"""
from __future__ import annotations

import argparse
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NS = 1_000_000_000
WIDTH, HEIGHT = 1920, 1080
TOPIC = '/qos_bench/camera_{}'
RELIABILITIES = ('best_effort', 'reliable')
SUBSCRIBER_DEPTH = 5       # the node's camera subscriptions keep the last 5 frames
PUBLISHER_DEPTH = 10       # rmw default keep-last depth
MATCH_TIMEOUT_S = 20.0
DRAIN_S = 2.0              # time after the last frame for reliable re-sends to arrive


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    payload: str        # 'raw' (bgr8 Image) or 'jpeg' (CompressedImage)
    cameras: int
    rate_hz: float
    reliability: str    # subscriber reliability: 'best_effort' or 'reliable'
    publisher: str = 'reliable'   # publisher reliability


@dataclass(frozen=True)
class Outcome:
    """What one configuration measured."""

    case: Case
    sent: int
    received: int
    loss_pct: float
    sent_hz: float          # per camera, achieved by the publisher
    received_hz: float      # per camera
    latency_ms_p50: float
    latency_ms_p90: float
    latency_ms_max: float
    load_avg_1min: float
    frame_bytes: int


# --- publisher and subscriber roles (each its own process) --------------------------------------

def _camera_jpeg() -> bytes:
    from bench.bench_decode import camera_jpeg

    return camera_jpeg(0)


def _messages(payload: str, cameras: int) -> list[Any]:
    import numpy as np
    from sensor_msgs.msg import CompressedImage, Image

    msgs: list[Any] = []
    jpeg = _camera_jpeg() if payload == 'jpeg' else b''
    for cam in range(cameras):
        if payload == 'raw':
            pixels = np.random.default_rng(cam).integers(0, 256, HEIGHT * WIDTH * 3, np.uint8)
            msg = Image(height=HEIGHT, width=WIDTH, encoding='bgr8', is_bigendian=0,
                        step=WIDTH * 3, data=pixels.tobytes())
        else:
            msg = CompressedImage(format='jpeg', data=jpeg)
        msg.header.frame_id = f'camera_{cam}'
        msgs.append(msg)
    return msgs


def run_publisher(case: Case, duration_s: float) -> dict[str, Any]:
    """Publish `case.cameras` cameras at `case.rate_hz` for `duration_s`; report what was sent.

    Camera k publishes at phase k / (cameras x rate) of each period, like free-running cameras
    rather than one burst. A frame late on its schedule is sent at once, never skipped, so a
    publisher that cannot keep up shows as a lower sent rate.
    """
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image

    rclpy.init()
    node = Node('qos_bench_publisher')
    cls = Image if case.payload == 'raw' else CompressedImage
    qos = QoSProfile(depth=PUBLISHER_DEPTH, reliability=ReliabilityPolicy.BEST_EFFORT
                     if case.publisher == 'best_effort' else ReliabilityPolicy.RELIABLE)
    pubs = [node.create_publisher(cls, TOPIC.format(c), qos) for c in range(case.cameras)]
    msgs = _messages(case.payload, case.cameras)
    deadline = time.monotonic() + MATCH_TIMEOUT_S
    while any(p.get_subscription_count() == 0 for p in pubs) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)   # let discovery settle both ways before the first frame
    schedule = sorted((k / case.rate_hz + c / (case.cameras * case.rate_hz), c)
                      for k in range(round(duration_s * case.rate_hz))
                      for c in range(case.cameras))
    sent = [0] * case.cameras
    start = time.monotonic()
    for offset, cam in schedule:
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        msg = msgs[cam]
        now = time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = now // NS, now % NS
        msg.header.frame_id = f'{cam}:{sent[cam]}'
        pubs[cam].publish(msg)
        sent[cam] += 1
    elapsed = time.monotonic() - start
    time.sleep(DRAIN_S)   # keep the writers alive while reliable re-sends finish
    node.destroy_node()
    rclpy.try_shutdown()
    return {'sent': sent, 'elapsed_s': elapsed, 'frame_bytes': len(msgs[0].data)}


def run_subscriber(case: Case) -> dict[str, Any]:
    """Subscribe with the node's profile until stdin closes; report frames and latencies."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage, Image

    rclpy.init()
    node = Node('qos_bench_subscriber')
    qos = qos_profile_sensor_data if case.reliability == 'best_effort' else \
        QoSProfile(depth=SUBSCRIBER_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
    cls = Image if case.payload == 'raw' else CompressedImage
    seen: list[set[str]] = [set() for _ in range(case.cameras)]
    latencies_ns: list[int] = []

    def on_frame(msg: Any, cam: int) -> None:
        now = time.time_ns()
        latencies_ns.append(now - (msg.header.stamp.sec * NS + msg.header.stamp.nanosec))
        seen[cam].add(msg.header.frame_id)

    for c in range(case.cameras):
        node.create_subscription(cls, TOPIC.format(c), lambda m, c=c: on_frame(m, c), qos)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    print('ready', flush=True)
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.1)
    node.destroy_node()
    rclpy.try_shutdown()
    return {'received': [len(s) for s in seen], 'latencies_ns': latencies_ns}


# --- the driver ---------------------------------------------------------------------------------

def _role_command(role: str, case: Case, duration_s: float) -> list[str]:
    return [sys.executable, '-m', 'bench.bench_qos', '--role', role, '--case',
            json.dumps(asdict(case)), '--duration', str(duration_s)]


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if line.startswith('{'):
            return json.loads(line)
    raise RuntimeError(f'no result in the output:\n{text[-2000:]}')


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float('nan')
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method='inclusive')[q - 1]


def measure(case: Case, duration_s: float, env: dict[str, str]) -> Outcome:
    """Run one configuration: subscriber first, then the publisher, then collect both."""
    sub = subprocess.Popen(_role_command('sub', case, duration_s), env=env, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert sub.stdout is not None and sub.stdin is not None
    try:
        for line in sub.stdout:
            if line.strip() == 'ready':
                break
        pub = subprocess.run(_role_command('pub', case, duration_s), env=env, text=True,
                             capture_output=True, timeout=duration_s + MATCH_TIMEOUT_S + 60)
        load = os.getloadavg()[0]
        sub.stdin.close()
        sub_out = sub.stdout.read()
        sub.wait(timeout=30)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    if pub.returncode != 0:
        raise RuntimeError(f'publisher failed:\n{pub.stdout}\n{pub.stderr}')
    sent_info, got = _last_json(pub.stdout), _last_json(sub_out)
    sent, received = sum(sent_info['sent']), sum(got['received'])
    lat_ms = sorted(v / 1e6 for v in got['latencies_ns'])
    elapsed = sent_info['elapsed_s']
    return Outcome(case, sent, received, 100.0 * (1 - received / sent) if sent else float('nan'),
                   sent / case.cameras / elapsed, received / case.cameras / elapsed,
                   _percentile(lat_ms, 50), _percentile(lat_ms, 90),
                   lat_ms[-1] if lat_ms else float('nan'), load, sent_info['frame_bytes'])


def bench_env(domain_id: int, transport: str) -> dict[str, str]:
    """Environment of the two processes: own domain, discovery on this host, Fast DDS."""
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), RMW_IMPLEMENTATION='rmw_fastrtps_cpp',
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST', PYTHONPATH=str(Path.cwd()))
    env.pop('ROS_LOCALHOST_ONLY', None)
    if transport == 'udp':
        env['FASTDDS_BUILTIN_TRANSPORTS'] = 'UDPv4'
    return env


def table(outcomes: list[Outcome]) -> str:
    """The results as a markdown table."""
    rows = ['| payload | cameras | rate Hz | subscription | sent | received | loss % | '
            'received Hz/camera | latency p50 ms | latency p90 ms | load 1 min |',
            '|---|---|---|---|---|---|---|---|---|---|---|']
    for o in outcomes:
        c = o.case
        rows.append(f'| {c.payload} | {c.cameras} | {c.rate_hz:g} | {c.reliability} | {o.sent} | '
                    f'{o.received} | {o.loss_pct:.1f} | {o.received_hz:.1f} | '
                    f'{o.latency_ms_p50:.1f} | {o.latency_ms_p90:.1f} | {o.load_avg_1min:.2f} |')
    return '\n'.join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line of the driver (and of the two roles it starts)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', type=Path, default=Path('bench_qos_out'))
    p.add_argument('--duration', type=float, default=10.0, help='seconds per configuration')
    p.add_argument('--rates', type=float, nargs='+', default=[10.0, 20.0, 30.0])
    p.add_argument('--cameras', type=int, nargs='+', default=[4, 1])
    p.add_argument('--payloads', nargs='+', choices=('raw', 'jpeg'), default=['raw', 'jpeg'])
    p.add_argument('--reliabilities', nargs='+', choices=RELIABILITIES, default=list(RELIABILITIES))
    p.add_argument('--publisher', choices=RELIABILITIES, default='reliable',
                   help='publisher reliability (best_effort: a camera driver on sensor-data QoS; '
                   'a reliable subscription does not connect to it)')
    p.add_argument('--transport', choices=('default', 'udp'), default='default')
    p.add_argument('--domain-id', type=int, default=100 + os.getpid() % 100,
                   help='ROS domain of the two processes (default: 100 + pid %% 100)')
    p.add_argument('--role', choices=('pub', 'sub'), help=argparse.SUPPRESS)
    p.add_argument('--case', help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run every configuration, write the JSON, print the table last."""
    args = parse_args(argv)
    if args.role:
        case = Case(**json.loads(args.case))
        result = run_publisher(case, args.duration) if args.role == 'pub' else \
            run_subscriber(case)
        print(json.dumps(result), flush=True)
        return
    env = bench_env(args.domain_id, args.transport)
    load_start = os.getloadavg()
    began = time.monotonic()
    outcomes = []
    for payload in args.payloads:
        for cameras in args.cameras:
            for rate in args.rates:
                for reliability in args.reliabilities:
                    outcome = measure(Case(payload, cameras, rate, reliability, args.publisher),
                                      args.duration, env)
                    print(f'{payload} x{cameras} {rate:g} Hz {reliability}: '
                          f'loss {outcome.loss_pct:.1f} %, p50 {outcome.latency_ms_p50:.1f} ms',
                          flush=True)
                    outcomes.append(outcome)
    report = {
        'command': shlex.join(['python', '-m', 'bench.bench_qos', *(argv or sys.argv[1:])]),
        'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': {'platform': platform.platform(), 'cpus': os.cpu_count(),
                    'python': platform.python_version()},
        'rmw': 'rmw_fastrtps_cpp', 'transport': args.transport, 'domain_id': args.domain_id,
        'publisher_qos': f'{args.publisher} keep-last {PUBLISHER_DEPTH}',
        'subscriber_qos': {'best_effort': 'sensor-data (best-effort keep-last 5)',
                           'reliable': f'reliable keep-last {SUBSCRIBER_DEPTH}'},
        'duration_s_per_case': args.duration, 'wall_s': time.monotonic() - began,
        'load_avg_start': load_start, 'load_avg_end': os.getloadavg(),
        'results': [asdict(o) for o in outcomes],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'bench_qos.json').write_text(json.dumps(report, indent=2) + '\n')
    print(f"\nload average at start {load_start}, at end {report['load_avg_end']}; "
          f"{os.cpu_count()} CPUs; transport {args.transport}; JSON: {args.out / 'bench_qos.json'}")
    print(table(outcomes))


if __name__ == '__main__':
    main()
