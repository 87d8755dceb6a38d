"""Ctrl-C and SIGTERM end the node and the bag player with status 0 and no traceback.

Real subprocesses, real signals: during the start-up imports (torch takes a second or more) and
once the process runs. "During the imports" is made deterministic by waiting until the process
catches SIGTERM (read from /proc), which it does only from the stop handler installed before the
heavy imports, and signalling at once.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest
import rclpy
from rclpy.node import Node

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from testkit.side_by_side import run_side_by_side

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path('/proc/self/status').is_file(), reason='reads /proc (Linux)'),
]

NODE_MODULE = (sys.executable, '-m', 'alpamayo_offload.ros.node')
# What the installed `alpamayo_offload_node` console script runs.
NODE_SCRIPT = (sys.executable, '-c',
               'import sys; from alpamayo_offload.ros.node_entry import main; sys.exit(main())')
PLAYER = (sys.executable, '-m', 'alpamayo_offload.ros.bag_player')
DRIVE = DriveConfig(duration_s=6.0)


class Proc:
    """A subprocess with its merged output collected by a thread."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        self.popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return ''.join(self.lines)

    def wait_until(self, ready: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.popen.poll() is None, f'exited before {what}:\n{self.output[-3000:]}'
            assert time.monotonic() < deadline, f'no {what}:\n{self.output[-3000:]}'
            time.sleep(0.02)

    def stop(self, signum: int) -> tuple[int, str]:
        self.popen.send_signal(signum)
        try:
            code = self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise
        self._reader.join(timeout=5)
        return code, self.output


def catches_sigterm(pid: int) -> bool:
    """True once the process has a handler for SIGTERM (Python has none by default)."""
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('SigCgt:'):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def assert_clean(code: int, output: str) -> None:
    assert 'Traceback' not in output, output[-4000:]
    assert code == 0, output[-4000:]


@pytest.fixture(scope='module')
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_drive(tmp_path_factory.mktemp('drive') / 'bag', DRIVE)


@pytest.mark.parametrize('command', [NODE_MODULE, NODE_SCRIPT], ids=['module', 'script'])
@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_node_stops_cleanly_during_start_up_imports(command: tuple[str, ...],
                                                    signum: int) -> None:
    proc = Proc(list(command))
    proc.wait_until(lambda: catches_sigterm(proc.popen.pid), 'stop handler')
    code, output = proc.stop(signum)
    assert_clean(code, output)
    assert 'ready' not in output, 'the signal came after start-up, not during the imports'


COMMANDS = {'module': NODE_MODULE, 'script': NODE_SCRIPT}
SIGNALS = {'SIGINT': signal.SIGINT, 'SIGTERM': signal.SIGTERM}


def _stopped_once_running(command: tuple[str, ...], signum: int, domain: int) -> tuple[int, str]:
    """Start the node (in ROS domain `domain`), signal it once its model is ready; its end."""
    proc = Proc(list(command), env={**os.environ, 'ROS_DOMAIN_ID': str(domain)})
    proc.wait_until(lambda: 'ready' in proc.output, 'model ready')
    return proc.stop(signum)


@pytest.fixture(scope='module')
def stopped_once_running(request: pytest.FixtureRequest
                         ) -> dict[tuple[str, str], Future[tuple[int, str]]]:
    """The selected cases of the test below, two at a time (`testkit.side_by_side`): each node
    mostly waits on its start-up imports, and each has its own ROS domain."""
    cases = [(item.callspec.params['command'], item.callspec.params['signum'])
             for item in request.session.items
             if getattr(item, 'module', None) is request.module
             and getattr(item, 'originalname', '') == 'test_node_stops_cleanly_once_running']
    return run_side_by_side({case: functools.partial(_stopped_once_running, COMMANDS[case[0]],
                                                     SIGNALS[case[1]]) for case in cases})


@pytest.mark.parametrize('command', list(COMMANDS))
@pytest.mark.parametrize('signum', list(SIGNALS))
def test_node_stops_cleanly_once_running(
        stopped_once_running: dict[tuple[str, str], Future[tuple[int, str]]],
        command: str, signum: str) -> None:
    assert_clean(*stopped_once_running[command, signum].result())


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_bag_player_stops_cleanly_during_start_up_imports(bag: Path, signum: int) -> None:
    proc = Proc([*PLAYER, str(bag)])
    proc.wait_until(lambda: catches_sigterm(proc.popen.pid), 'stop handler')
    code, output = proc.stop(signum)
    assert_clean(code, output)
    assert 'played' not in output


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_bag_player_stops_cleanly_while_publishing(bag: Path, signum: int) -> None:
    """The player is signalled once its publishers are up, mid-bag (RCLError traceback before)."""
    topic = DRIVE.camera_topic.format(slot=DRIVE.camera_slots[0])
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        watcher = Node('clean_exit_watcher', context=ctx)
        proc = Proc([*PLAYER, str(bag), '--rate', '0.5'])
        proc.wait_until(lambda: watcher.count_publishers(topic) > 0, f'publisher on {topic}')
        time.sleep(0.5)
        code, output = proc.stop(signum)
        watcher.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
    assert_clean(code, output)
    assert 'played' not in output, 'the bag ended before the signal'
