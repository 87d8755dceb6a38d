"""The managed node through real rclpy: transitions by service, diagnostics, failed load exit.

One node process (autostart false) is driven through configure, activate, deactivate, cleanup
and shutdown by `lifecycle_msgs` service calls, as `ros2 lifecycle set` and launch do, while a
bag plays; a second one (autostart true) is given a model that cannot load. These cover what the
launch_testing test (test_launch.py) checks where `launch` is installed.
"""
from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.session import (
    LifecycleClient,
    SessionResult,
    default_params_file,
    node_command,
    subscribe_outputs,
)

pytestmark = pytest.mark.slow
DRIVE = DriveConfig(duration_s=14.0)
FRAME = 'test_rear_axle'
TASKS = ('model', 'inference', 'input', 'path rate', 'input age', 'input rates', 'timing',
         'navigation', 'questions', 'plan')


class Harness:
    """A collector node with the session's subscriptions, camera stamps and a lifecycle client."""

    def __init__(self, remaps: dict[str, str]) -> None:
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = Node('lifecycle_test', context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.result = SessionResult()
        subscribe_outputs(self.node, self.result, remaps)
        self.camera_stamps: set[int] = set()
        # Reliable and deep: every frame the player sends is seen, also while this process
        # waits on a lifecycle service (a best-effort, depth-5 subscription dropped some).
        self.node.create_subscription(
            Image, remaps['~/input/camera_0/image'],
            lambda m: self.camera_stamps.add(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec),
            QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE))
        self.lifecycle = LifecycleClient(self.node, self.executor)

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.05)

    def spin_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if done():
                return True
            self.executor.spin_once(timeout_sec=0.05)
        return done()

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(remaps_for(DRIVE))
    yield h
    h.close()


def start_node(overrides: dict[str, str]) -> subprocess.Popen[str]:
    cmd = node_command([default_params_file()], overrides, remaps_for(DRIVE))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(proc: subprocess.Popen[str], timeout_s: float = 30.0) -> tuple[int, str]:
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return code, proc.communicate()[0] or ''


def test_transitions_by_service_paths_and_diagnostics(tmp_path: Path,
                                                      harness: Harness) -> None:
    bag = write_drive(tmp_path / 'bag', DRIVE)
    proc = start_node({'autostart': 'false', 'output.frame_id': FRAME,
                       'inference.period_s': '0.25', 'images.height': '64',
                       'images.width': '96'})
    player = None
    try:
        life = harness.lifecycle
        assert life.wait_for('unconfigured', 90.0, lambda: proc.poll() is None) == \
            'unconfigured'
        assert life.change('configure') and life.state() == 'inactive'
        models = harness.result.status('model')
        assert models and models[-1].values['model_state'] == 'ready', models[-1:]
        player = subprocess.Popen(
            [sys.executable, '-m', 'alpamayo_offload.ros.bag_player', str(bag), '--restamp',
             '--wait-for-subscribers', '1'], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        harness.spin_for(1.0)
        assert not harness.result.paths, 'inactive: subscriptions must not exist yet'
        assert life.change('activate') and life.state() == 'active'
        paths = harness.result.paths
        assert harness.spin_until(lambda: any(p.topic.endswith('/path') for p in paths), 20.0)
        harness.spin_for(2.5)   # a few diagnostics periods while active
        ego = [p for p in paths if p.topic.endswith('/output/path')]
        # Each path carries a camera frame's stamp: one this harness received, or one played
        # before the harness's subscription matched the player (the player waits at most 1 s,
        # and on a loaded machine discovery can take longer; the node's subscription may match
        # first). Those lie on the cameras' period grid before the first frame received here
        # (the drive has no stamp jitter).
        first, period = min(harness.camera_stamps), round(1e9 / DRIVE.camera_rate_hz)
        for p in ego:
            assert p.frame_id == FRAME
            assert p.stamp_ns in harness.camera_stamps or (
                p.stamp_ns < first and (first - p.stamp_ns) % period == 0), (p.stamp_ns, first)
        active_from = harness.result.statuses[-1].received_ns - int(2.5e9)
        check_diagnostics([s for s in harness.result.statuses if s.received_ns >= active_from])

        assert life.change('deactivate') and life.state() == 'inactive'
        published = len(harness.result.paths)
        frames = len(harness.camera_stamps)
        harness.spin_for(1.5)
        assert len(harness.camera_stamps) > frames, 'the bag must still be playing'
        assert len(harness.result.paths) == published, 'no path after deactivate'
        inference = harness.result.status('inference')[-1]
        assert inference.level >= 1 and 'inactive' in inference.message

        assert life.change('cleanup') and life.state() == 'unconfigured'
        harness.spin_for(1.2)
        assert harness.result.status('model')[-1].values['model_state'] == 'unloaded'
        assert life.change('shutdown')
        code, output = stop(proc)
        assert code == 0 and 'Traceback' not in output, output[-3000:]
    finally:
        for p in (proc, player):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def check_diagnostics(statuses: list) -> None:
    """Every task at ~1 Hz with a hardware_id; inference OK with a path; timing filled."""
    for task in TASKS:
        mine = [s for s in statuses if s.name.endswith(f': {task}')]
        assert mine and all(s.hardware_id == 'cpu' for s in mine), task
    model = [s for s in statuses if s.name.endswith(': model')]
    gaps = [(b.received_ns - a.received_ns) / 1e9 for a, b in itertools.pairwise(model)]
    assert gaps and 0.5 < statistics.median(gaps) < 1.6, gaps
    last = {s.name.split(': ')[1]: s for s in statuses}
    assert last['model'].values['lifecycle_state'] == 'active'
    assert last['inference'].level == 0 and last['inference'].message == 'path published'
    assert float(last['path rate'].values['expected_hz']) == 4.0
    assert int(last['path rate'].values['events_total']) >= 1
    for stream in ('camera_0', 'camera_1', 'camera_2', 'camera_6', 'odometry'):
        assert float(last['input age'].values[f'{stream}.age_s']) < 1.0, last['input age']
        assert float(last['input rates'].values[f'{stream}.rate_hz']) > 0, last['input rates']
    timing = last['timing'].values
    assert float(timing['t_total_ms.p90']) >= float(timing['t_total_ms.p50']) > 0, timing


def test_model_that_cannot_load_exits_non_zero_with_the_reason(harness: Harness) -> None:
    proc = start_node({'model': '/nonexistent/alpamayo'})
    code, output = stop(proc, timeout_s=120.0)
    harness.spin_for(0.5)
    assert code == 1, output[-3000:]
    assert 'Traceback' not in output, output[-3000:]
    errors = [s for s in harness.result.status('model') if s.level == 2]
    assert errors and '/nonexistent/alpamayo' in errors[-1].values['load_error'], \
        (harness.result.statuses[-3:], output[-3000:])
    inference = [s for s in harness.result.status('inference') if s.received_ns >=
                 errors[0].received_ns]
    assert inference and all(s.level == 2 for s in inference), inference
