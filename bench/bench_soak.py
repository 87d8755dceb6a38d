"""Soak: the node on a looping synthetic drive with a bad input every minute, resources over time.

Starts the node as the launch file does (`python -m alpamayo_offload.ros.node` with
config/alpamayo_offload.yaml: tiny model, CPU) in a ROS domain of its own, and publishes a drive
from this process with rclpy: four cameras at 10 Hz (two raw rgb8, two compressed JPEG, 160x96,
the synthetic drive's frames) and odometry at 50 Hz along the synthetic drive's circle, one lap
(2 pi / yaw rate, ~42 s) played in a loop with stamps at wall time, so the pose is continuous
across laps. Every `--bad-every-s` seconds one bad input is sent, in turn: a corrupt JPEG, a
truncated raw frame, a raw header claiming 16000x12000 pixels, a NaN odometry sample, a 3 s gap
of one camera.

Every `--sample-s` seconds the node process is sampled: resident memory (VmRSS), open file
descriptors (/proc/PID/fd), threads (/proc/PID/status), and the paths it published since the
last sample (paths/s); /diagnostics statuses above OK are counted per reason (the text before
the first ':' of the status message); the drive's publisher lag (how far behind their stamps its
messages went out: the drive publishes in stamp order, so a late publisher delays frames but
never sends them ahead of odometry) and the machine's load average are recorded beside, so a
drop in paths/s can be told apart from a slow or starved publisher. Written to `--out`: soak.csv
(one row per sample), soak.json (samples, summary, machine, command) and node.log. The summary,
printed last, gives the growth after warm-up (least-squares slope per 10 minutes of RSS, fds and
threads over the samples after `--warmup-s`) and paths/s mean and min after warm-up.

Run: python -m bench.bench_soak --minutes 30 --out DIR [--bad-every-s 60] [--sample-s 10]
"""
from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as PathMsg
from PIL import Image as PILImage
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CompressedImage, Image

from alpamayo_offload.app.param_file import default_params_file
from alpamayo_offload.app.schema import NODE_NAME
from alpamayo_offload.app.synthetic_drive import DriveConfig, camera_frame, ego_pose

NS = 1_000_000_000
MIB = 2**20
SLOTS = (0, 1, 2, 6)
COMPRESSED_SLOTS = (2, 6)
CAMERA_HZ, ODOM_HZ = 10.0, 50.0
BAD_INPUTS = ('corrupt_jpeg', 'truncated_raw', 'oversized_header', 'nan_odometry', 'camera_gap')
GAP_S = 3.0
NODE_STOP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Sample:
    """One look at the node process."""

    t_s: float            # since the node started
    rss_mib: float
    fds: int
    threads: int
    paths: int            # paths published since the previous sample
    paths_per_s: float
    non_ok_statuses: int  # diagnostics statuses above OK since the previous sample
    bad_inputs: str       # bad inputs sent since the previous sample
    publisher_lag_ms: float = 0.0   # most the drive's messages went out behind their stamps
    load_1min: float = 0.0          # the machine's 1-minute load average


def proc_status(pid: int) -> tuple[float, int, int]:
    """(VmRSS in MiB, open fds, threads) of `pid` from /proc."""
    fields = {}
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        key, _, value = line.partition(':')
        fields[key] = value.split()
    return (int(fields['VmRSS'][0]) / 1024, len(os.listdir(f'/proc/{pid}/fd')),
            int(fields['Threads'][0]))


def slope_per_10min(t_s: list[float], values: list[float]) -> float:
    """Least-squares slope of `values` over `t_s`, per 10 minutes (nan for fewer than 2)."""
    if len(t_s) < 2:
        return float('nan')
    return float(np.polyfit(np.asarray(t_s), np.asarray(values, dtype=float), 1)[0] * 600.0)


class DrivePublisher:
    """Publishes the looping drive and the bad inputs through one rclpy node."""

    def __init__(self, node: Node) -> None:
        self.drive = DriveConfig()
        self.lap_s = 2 * math.pi / self.drive.yaw_rate
        self.frames_per_lap = round(self.lap_s * CAMERA_HZ)
        self.lap_s = self.frames_per_lap / CAMERA_HZ   # whole frames per lap
        base = f'/{NODE_NAME}/input'
        qos = QoSProfile(depth=10)
        self.cams = {s: node.create_publisher(
            CompressedImage if s in COMPRESSED_SLOTS else Image, f'{base}/camera_{s}/image', qos)
            for s in SLOTS}
        self.odom = node.create_publisher(Odometry, f'{base}/odometry', qos)
        self.frames = {s: [self._encode(s, k / CAMERA_HZ) for k in range(self.frames_per_lap)]
                       for s in SLOTS}
        self.gap_until_s = -1.0
        self.next_bad = 0

    def _encode(self, slot: int, t_s: float) -> bytes:
        rgb = camera_frame(self.drive, slot, t_s)
        if slot not in COMPRESSED_SLOTS:
            return rgb.tobytes()
        buf = io.BytesIO()
        PILImage.fromarray(rgb).save(buf, format='JPEG', quality=85)
        return buf.getvalue()

    def camera(self, slot: int, k: int, stamp_ns: int, bad: str = '') -> None:
        """Publish frame `k` (drive index) of `slot`, broken as `bad` says."""
        data = self.frames[slot][k % self.frames_per_lap]
        h, w = self.drive.height, self.drive.width
        if slot in COMPRESSED_SLOTS:
            if bad == 'corrupt_jpeg':
                rng = np.random.default_rng(k)
                data = data[:2] + rng.integers(0, 256, len(data) - 4, np.uint8).tobytes() + \
                    data[-2:]
            msg: Any = CompressedImage(format='jpeg', data=data)
        else:
            step = w * 3
            if bad == 'truncated_raw':
                data = data[:len(data) // 2]
            elif bad == 'oversized_header':
                h, w, step = 12000, 16000, 16000 * 3
            msg = Image(height=h, width=w, encoding='rgb8', is_bigendian=0, step=step, data=data)
        msg.header.stamp.sec, msg.header.stamp.nanosec = stamp_ns // NS, stamp_ns % NS
        msg.header.frame_id = f'camera_{slot}'
        self.cams[slot].publish(msg)

    def odometry(self, t_s: float, stamp_ns: int, nan: bool = False) -> None:
        """Publish the ego pose `t_s` into the drive (modulo one lap)."""
        pos, q = ego_pose(self.drive, t_s % self.lap_s)
        if nan:
            pos = np.full(3, np.nan)
        msg = Odometry(child_frame_id='base_link')
        msg.header.stamp.sec, msg.header.stamp.nanosec = stamp_ns // NS, stamp_ns % NS
        msg.header.frame_id = 'odom'
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        p.x, p.y, p.z = (float(v) for v in pos)
        o.x, o.y, o.z, o.w = (float(v) for v in q)
        msg.twist.twist.linear.x = self.drive.speed_mps
        msg.twist.twist.angular.z = self.drive.yaw_rate
        self.odom.publish(msg)

    def take_bad(self) -> str:
        """The next bad input in the rotation."""
        bad = BAD_INPUTS[self.next_bad % len(BAD_INPUTS)]
        self.next_bad += 1
        return bad


def start_node(out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The node as the launch file starts it, its output in node.log."""
    cmd = [sys.executable, '-m', 'alpamayo_offload.ros.node', '--ros-args', '--params-file',
           str(default_params_file()), '-p',
           'cameras.transports:=[' + ','.join('compressed' if s in COMPRESSED_SLOTS else 'raw'
                                              for s in SLOTS) + ']']
    log = (out / 'node.log').open('wb')
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def stop_node(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGINT, as Ctrl-C; the exit status (None if it had to be killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=NODE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


def summarize(samples: list[Sample], warmup_s: float) -> dict[str, Any]:
    """Growth after warm-up and path rate."""
    after = [s for s in samples if s.t_s >= warmup_s]
    t = [s.t_s for s in after]

    def rng(vals: list[float]) -> list[float]:
        return [min(vals), max(vals)] if vals else []
    return {
        'warmup_s': warmup_s, 'samples_after_warmup': len(after),
        'rss_mib_slope_per_10min': slope_per_10min(t, [s.rss_mib for s in after]),
        'fds_slope_per_10min': slope_per_10min(t, [s.fds for s in after]),
        'threads_slope_per_10min': slope_per_10min(t, [s.threads for s in after]),
        'rss_mib_range': rng([s.rss_mib for s in after]),
        'fds_range': rng([s.fds for s in after]),
        'threads_range': rng([s.threads for s in after]),
        'paths_per_s_mean': float(np.mean([s.paths_per_s for s in after])) if after else math.nan,
        'paths_per_s_min': min((s.paths_per_s for s in after), default=math.nan),
        'paths_total': sum(s.paths for s in samples),
        'non_ok_statuses_total': sum(s.non_ok_statuses for s in samples),
        'publisher_lag_ms_max': max((s.publisher_lag_ms for s in after), default=math.nan),
        'load_1min_range': rng([s.load_1min for s in after]),
    }


def soak(args: argparse.Namespace, env: dict[str, str]) -> tuple[list[Sample], dict[str, Any]]:
    """Run the node for `args.minutes` while publishing; the samples and what else was seen."""
    rclpy.init()
    node = Node('soak_drive')
    drive = DrivePublisher(node)
    counts = {'paths': 0, 'non_ok': 0}
    messages: dict[str, int] = {}     # reason (the text before ':') -> statuses
    examples: dict[str, str] = {}     # reason -> its first message

    def on_diag(msg: DiagnosticArray) -> None:
        for s in msg.status:
            level = s.level[0] if isinstance(s.level, bytes) else int(s.level)
            if s.name.startswith(NODE_NAME) and level > 0:
                counts['non_ok'] += 1
                reason = s.message.split(':', 1)[0] if ':' in s.message else s.message[:60]
                messages[reason] = messages.get(reason, 0) + 1
                examples.setdefault(reason, s.message[:200])

    node.create_subscription(PathMsg, f'/{NODE_NAME}/output/path',
                             lambda _m: counts.__setitem__('paths', counts['paths'] + 1), 10)
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    proc = start_node(args.out, env)
    samples: list[Sample] = []
    start = time.monotonic()
    end = start + args.minutes * 60.0
    next_sample, next_bad = start + args.sample_s, start + args.bad_every_s
    cam_k, odom_k = 0, 0
    wall0 = time.time_ns()
    sent_bad: list[str] = []
    pending_bad: dict[str, str] = {}   # slot or 'odom' -> bad input for its next message
    last_paths, last_non_ok = 0, 0
    lag_ms = 0.0
    try:
        while time.monotonic() < end and proc.poll() is None:
            now = time.monotonic()
            if now >= next_bad:
                bad = drive.take_bad()
                sent_bad.append(bad)
                next_bad += args.bad_every_s
                if bad == 'camera_gap':
                    drive.gap_until_s = now - start + GAP_S
                else:
                    pending_bad['odom' if bad == 'nan_odometry' else
                                str(COMPRESSED_SLOTS[0] if bad == 'corrupt_jpeg' else 0)] = bad
            # Messages go out in stamp order, also when this process runs late, so a late
            # publisher never sends camera frames ahead of the odometry that covers them.
            while True:
                cam_due = start + cam_k / CAMERA_HZ
                odom_due = start + odom_k / ODOM_HZ
                due_now = min(cam_due, odom_due)
                if due_now > time.monotonic():
                    break
                lag_ms = max(lag_ms, (time.monotonic() - due_now) * 1e3)
                if cam_due <= odom_due:
                    stamp = wall0 + round(cam_k / CAMERA_HZ * NS)
                    for slot in SLOTS:
                        if slot == SLOTS[-1] and now - start < drive.gap_until_s:
                            continue
                        drive.camera(slot, cam_k, stamp, pending_bad.pop(str(slot), ''))
                    cam_k += 1
                else:
                    t_s = odom_k / ODOM_HZ
                    drive.odometry(t_s, wall0 + round(t_s * NS),
                                   nan=bool(pending_bad.pop('odom', '')))
                    odom_k += 1
            if now >= next_sample:
                rss, fds, threads = proc_status(proc.pid)
                paths = counts['paths'] - last_paths
                samples.append(Sample(round(now - start, 2), round(rss, 1), fds, threads, paths,
                                      paths / args.sample_s, counts['non_ok'] - last_non_ok,
                                      '+'.join(sent_bad), round(lag_ms, 1),
                                      round(os.getloadavg()[0], 2)))
                print(f'{samples[-1].t_s:7.1f} s  rss {rss:7.1f} MiB  fds {fds:3d}  threads '
                      f'{threads:3d}  paths/s {paths / args.sample_s:5.2f}  publisher lag '
                      f'{lag_ms:6.1f} ms  load {samples[-1].load_1min:5.2f}  '
                      f'{"+".join(sent_bad)}', flush=True)
                sent_bad, lag_ms = [], 0.0
                last_paths, last_non_ok = counts['paths'], counts['non_ok']
                next_sample += args.sample_s
            due = min(start + cam_k / CAMERA_HZ, start + odom_k / ODOM_HZ, next_sample, next_bad)
            executor.spin_once(timeout_sec=max(0.0, due - time.monotonic()))
        alive = proc.poll() is None
    finally:
        exit_code = stop_node(proc)
        node.destroy_node()
        rclpy.try_shutdown()
    return samples, {'node_alive_at_end': alive, 'node_exit_code': exit_code,
                     'non_ok_reasons': messages, 'non_ok_examples': examples,
                     'bad_inputs_sent': drive.next_bad}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--minutes', type=float, default=30.0)
    p.add_argument('--out', type=Path, default=Path('bench_soak_out'))
    p.add_argument('--bad-every-s', type=float, default=60.0)
    p.add_argument('--sample-s', type=float, default=10.0)
    p.add_argument('--warmup-s', type=float, default=None,
                   help='samples before this are left out of the growth (default: 120 s, at '
                   'most a quarter of the run)')
    p.add_argument('--domain-id', type=int, default=100 + os.getpid() % 100)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Soak, write CSV + JSON, print the summary last."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(ROS_DOMAIN_ID=str(args.domain_id), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    env = dict(os.environ)
    load_start = os.getloadavg()
    samples, seen = soak(args, env)
    warmup = args.warmup_s if args.warmup_s is not None else min(120.0, args.minutes * 15.0)
    summary = summarize(samples, warmup)
    with (args.out / 'soak.csv').open('w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(Sample.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(s) for s in samples)
    doc = {
        'command': shlex.join(['python', '-m', 'bench.bench_soak', *(argv or sys.argv[1:])]),
        'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': {'platform': platform.platform(), 'cpus': os.cpu_count()},
        'load_avg_start': load_start, 'load_avg_end': os.getloadavg(),
        'summary': summary, **seen, 'samples': [asdict(s) for s in samples],
    }
    (args.out / 'soak.json').write_text(json.dumps(doc, indent=2) + '\n')
    print(f'\nnode alive at end: {seen["node_alive_at_end"]}, exit code {seen["node_exit_code"]}; '
          f'{seen["bad_inputs_sent"]} bad inputs sent; load average {load_start} -> '
          f'{doc["load_avg_end"]}; CSV/JSON in {args.out}')
    for reason, n in sorted(seen['non_ok_reasons'].items(), key=lambda kv: -kv[1]):
        print(f'  diagnostics above OK x{n}: {seen["non_ok_examples"][reason][:150]}')
    s = summary
    print(f'after {s["warmup_s"]:.0f} s warm-up ({s["samples_after_warmup"]} samples): growth per '
          f'10 min: RSS {s["rss_mib_slope_per_10min"]:+.2f} MiB (range {s["rss_mib_range"]}), '
          f'fds {s["fds_slope_per_10min"]:+.2f} (range {s["fds_range"]}), threads '
          f'{s["threads_slope_per_10min"]:+.2f} (range {s["threads_range"]}); paths/s mean '
          f'{s["paths_per_s_mean"]:.2f}, min {s["paths_per_s_min"]:.2f}; publisher lag max '
          f'{s["publisher_lag_ms_max"]:.0f} ms; load {s["load_1min_range"]}')


if __name__ == '__main__':
    main()
