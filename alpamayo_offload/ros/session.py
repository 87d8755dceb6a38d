"""Run the node as a subprocess, feed it a bag through the player, and record what it publishes.

Shared by the demo and the integration tests so both exercise exactly what the launch file
starts: the `alpamayo_offload.ros.node` entry point with `config/alpamayo_offload.yaml`.
`LifecycleClient` calls the node's lifecycle services (`~/get_state`, `~/change_state`) as
`ros2 lifecycle` and launch do. A session can also give the node a route text (latched, before
it starts) and ask it questions once it publishes paths.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from nav_msgs.msg import Path as PathMsg
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from ..app.param_file import default_params_file
from ..app.schema import NODE_NAME

_NS = 1_000_000_000
NODE_COMMAND = (sys.executable, '-m', 'alpamayo_offload.ros.node')


@dataclass(frozen=True)
class PathRecord:
    """One received `nav_msgs/Path`."""

    topic: str
    stamp_ns: int
    frame_id: str
    xyz: np.ndarray
    quat_xyzw: np.ndarray
    received_ns: int


@dataclass(frozen=True)
class StatusRecord:
    """One `DiagnosticStatus` from the node."""

    name: str
    level: int
    message: str
    values: dict[str, str]
    received_ns: int
    hardware_id: str = ''


@dataclass
class SessionResult:
    """Everything observed during one run."""

    paths: list[PathRecord] = field(default_factory=list)
    samples: list[PathRecord] = field(default_factory=list)   # ~/output/trajectory_samples
    answers: list[str] = field(default_factory=list)
    statuses: list[StatusRecord] = field(default_factory=list)
    node_alive_at_end: bool = False
    node_output: str = ''

    def status(self, task: str) -> list[StatusRecord]:
        """Statuses of one task ('inference', 'input', 'model'), in arrival order."""
        return [s for s in self.statuses if s.name.endswith(f': {task}')]


TRANSITIONS = {'configure': Transition.TRANSITION_CONFIGURE,
               'activate': Transition.TRANSITION_ACTIVATE,
               'deactivate': Transition.TRANSITION_DEACTIVATE,
               'cleanup': Transition.TRANSITION_CLEANUP}
_SHUTDOWN_FROM = {'unconfigured': Transition.TRANSITION_UNCONFIGURED_SHUTDOWN,
                  'inactive': Transition.TRANSITION_INACTIVE_SHUTDOWN,
                  'active': Transition.TRANSITION_ACTIVE_SHUTDOWN}


class LifecycleClient:
    """The node's `~/get_state` and `~/change_state` services, called from `node`."""

    def __init__(self, node: Node, executor: Executor, target: str = f'/{NODE_NAME}') -> None:
        self._executor = executor
        self._get = node.create_client(GetState, f'{target}/get_state')
        self._change = node.create_client(ChangeState, f'{target}/change_state')

    def _call(self, client: Any, request: Any, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while not client.service_is_ready():
            if time.monotonic() > deadline:
                return None
            self._executor.spin_once(timeout_sec=0.05)
        future = client.call_async(request)
        self._executor.spin_until_future_complete(future, max(0.0, deadline - time.monotonic()))
        return future.result() if future.done() else None

    def state(self, timeout_s: float = 5.0) -> str:
        """Return the node's lifecycle state label ('' when it does not answer in time)."""
        response = self._call(self._get, GetState.Request(), timeout_s)
        return response.current_state.label if response is not None else ''

    def change(self, transition: str, timeout_s: float = 60.0) -> bool:
        """Request `transition` ('configure', ..., 'shutdown'); True when it succeeded."""
        if transition == 'shutdown':
            transition_id = _SHUTDOWN_FROM[self.state()]
        else:
            transition_id = TRANSITIONS[transition]
        request = ChangeState.Request(transition=Transition(id=transition_id))
        response = self._call(self._change, request, timeout_s)
        return bool(response is not None and response.success)

    def wait_for(self, state: str, timeout_s: float,
                 alive: Callable[[], bool] = lambda: True) -> str:
        """Poll until the node is in `state`, `alive()` turns false or time runs out; the last."""
        deadline = time.monotonic() + timeout_s
        current = ''
        while time.monotonic() < deadline and alive():
            current = self.state(timeout_s=min(5.0, max(0.1, deadline - time.monotonic())))
            if current == state:
                break
            self._executor.spin_once(timeout_sec=0.1)
        return current


def _remap_args(remaps: dict[str, str]) -> list[str]:
    return [a for src, dst in remaps.items() for a in ('-r', f'{src}:={dst}')]


def node_command(param_files: list[Path], overrides: dict[str, str], remaps: dict[str, str],
                 command: tuple[str, ...] = NODE_COMMAND) -> list[str]:
    """Command line of the node with parameter files, `-p` overrides and remaps."""
    args = [*command, '--ros-args']
    for f in param_files:
        args += ['--params-file', str(f)]
    for k, v in overrides.items():
        args += ['-p', f'{k}:={v}']
    return args + _remap_args(remaps)


def run_session(bag: Path, *, param_files: list[Path] | None = None,
                overrides: dict[str, str] | None = None, remaps: dict[str, str] | None = None,
                ready_timeout_s: float = 60.0, tail_s: float = 1.5, rate: float = 1.0,
                command: tuple[str, ...] | None = None, sim_time: bool = False,
                navigation: str | None = None, questions: Sequence[str] = (),
                domain_id: int | None = None) -> SessionResult:
    """Start the node, wait until it is active (autostart), play `bag`, collect, stop.

    By default the bag is restamped to wall time; with `sim_time` it keeps its stamps, the player
    publishes `/clock` and the node runs with use_sim_time (how it runs with a simulator).
    `navigation` is published once, latched, before the node starts; `questions` are published
    together once the first path arrived. `domain_id` (None: `ROS_DOMAIN_ID`'s) puts the node,
    the player and the collector in their own ROS domain, so sessions can run side by side.
    """
    if sim_time:
        overrides = {'use_sim_time': 'true', **(overrides or {})}
    files = param_files if param_files is not None else [default_params_file()]
    cmd = node_command(files, overrides or {}, remaps or {}, command or NODE_COMMAND)
    result = SessionResult()
    env = None if domain_id is None else {**os.environ, 'ROS_DOMAIN_ID': str(domain_id)}
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=domain_id)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    player = None
    try:
        node = Node('session_collector', context=ctx)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        subscribe_outputs(node, result, remaps or {})
        asking = _publishers(node, remaps or {}, navigation)
        LifecycleClient(node, executor).wait_for('active', ready_timeout_s,
                                                 lambda: proc.poll() is None)
        player = subprocess.Popen(
            [sys.executable, '-m', 'alpamayo_offload.ros.bag_player', str(bag),
             '--clock' if sim_time else '--restamp', '--rate', str(rate),
             '--wait-for-subscribers', '3'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        waiting = list(questions)
        while player.poll() is None:
            executor.spin_once(timeout_sec=0.05)
            if waiting and result.paths and asking.get_subscription_count() > 0:
                for question in waiting:
                    asking.publish(String(data=question))
                waiting = []
        end = time.monotonic() + tail_s
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        result.node_alive_at_end = proc.poll() is None
        node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        result.node_output = proc.communicate()[0] or ''
        if player is not None:
            result.node_output += '\n--- player ---\n' + (player.communicate()[0] or '')
        rclpy.try_shutdown(context=ctx)
    return result


def _topic(name: str, remaps: dict[str, str]) -> str:
    """Resolve the node's private `~/...` name (its remapped name where remapped)."""
    return remaps.get(name, f'/{NODE_NAME}/{name[2:]}')


def _publishers(node: Node, remaps: dict[str, str], navigation: str | None) -> Any:
    """Publish `navigation` latched (as a route planner does); return the question publisher."""
    if navigation is not None:
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_publisher(String, _topic('~/input/navigation', remaps), latched).publish(
            String(data=navigation))
    return node.create_publisher(String, _topic('~/input/question', remaps), 10)


def subscribe_outputs(node: Node, result: SessionResult, remaps: dict[str, str]) -> None:
    """Record the node's paths, trajectory samples, answers and /diagnostics into `result`."""
    for topic in (_topic(o, remaps) for o in ('~/output/path', '~/output/path_odom')):
        node.create_subscription(PathMsg, topic, lambda m, t=topic: result.paths.append(
            _path_record(t, m)), 10)
    samples = _topic('~/output/trajectory_samples', remaps)
    node.create_subscription(PathMsg, samples, lambda m: result.samples.append(
        _path_record(samples, m)), 64)
    node.create_subscription(String, _topic('~/output/answer', remaps),
                             lambda m: result.answers.append(m.data), 10)

    def on_diag(msg: DiagnosticArray) -> None:
        now = time.time_ns()
        result.statuses.extend(
            StatusRecord(s.name, s.level[0] if isinstance(s.level, bytes) else int(s.level),
                         s.message, {kv.key: kv.value for kv in s.values}, now, s.hardware_id)
            for s in msg.status if s.name.startswith(NODE_NAME))

    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)


def _path_record(topic: str, msg: PathMsg) -> PathRecord:
    xyz = np.array([[p.pose.position.x, p.pose.position.y, p.pose.position.z] for p in msg.poses])
    quat = np.array([[p.pose.orientation.x, p.pose.orientation.y, p.pose.orientation.z,
                      p.pose.orientation.w] for p in msg.poses])
    return PathRecord(topic, msg.header.stamp.sec * _NS + msg.header.stamp.nanosec,
                      msg.header.frame_id, xyz.reshape(-1, 3), quat.reshape(-1, 4), time.time_ns())
