"""One parameter file, one verdict: the real node (rclpy, subprocess) and replay agree.

Each case is the package's parameter file plus one more file, passed to the node as two
`--params-file` arguments (as the launch file does) and to replay's config loader. A refused file
makes the node exit with status 2 and one error line naming the parameter (no traceback), and
replay raise `ReplayConfigError` naming it too; an accepted one brings the node up (its model
loads) and gives replay a config.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from alpamayo_offload.replay.errors import ReplayConfigError
from alpamayo_offload.replay.params import load_replay_config

ROOT = Path(__file__).resolve().parents[2]
NODE_YAML = ROOT / 'config' / 'alpamayo_offload.yaml'
READY = 'ready (loaded in'
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Case:
    """A second parameter file and what both must say about it."""

    body: str                 # the `ros__parameters` lines of the second file
    accepted: bool
    names: tuple[str, ...] = ()   # what a refusal must mention


CASES = {
    'package_defaults': Case('    model: tiny\n', True),
    'int_for_float': Case('    inference:\n      period_s: 1\n', True),
    'quoted_float': Case('    sync:\n      frame_tolerance_s: "0.05"\n', False,
                         ('sync.frame_tolerance_s', 'without quotes')),
    'misspelt_key': Case('    sync:\n      frame_tolerence_s: 0.05\n', False,
                         ('sync.frame_tolerence_s', 'valid names', 'sync.frame_tolerance_s')),
    'out_of_range': Case('    inference:\n      period_s: -1\n', False,
                         ('inference.period_s', '> 0')),
    'bad_choice': Case('    mode: fast\n', False, ('mode', "'pipelined'", "'fast'")),
    'bool_for_int': Case('    buffers:\n      camera_depth: true\n', False,
                         ('buffers.camera_depth', 'bool')),
}


@dataclass
class NodeRun:
    """What the node subprocess did with one case."""

    came_up: bool
    returncode: int
    output: str


def _write(tmp: Path, name: str, case: Case) -> Path:
    path = tmp / f'{name}.yaml'
    path.write_text('/**:\n  ros__parameters:\n' + case.body)
    return path


def _run_node(extra: Path, accepted: bool, out: dict[str, NodeRun], name: str) -> None:
    """Start the node; once it is up (or has exited) stop it with SIGINT, as Ctrl-C does."""
    proc = subprocess.Popen(
        [sys.executable, '-m', 'alpamayo_offload.ros.node', '--ros-args',
         '--params-file', str(NODE_YAML), '--params-file', str(extra)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    came_up = False
    for line in proc.stdout:   # ends when the node exits (a refused file) ...
        lines.append(line)
        if READY in line:      # ... or once the model is ready
            came_up = True
            break
        if time.monotonic() > deadline:
            break
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
    out[name] = NodeRun(came_up, proc.returncode, ''.join(lines) + (rest or ''))


@pytest.fixture(scope='module')
def node_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, NodeRun]]:
    """Every case's node run, all started at once (each mostly waits on imports)."""
    tmp = tmp_path_factory.mktemp('verdicts')
    runs: dict[str, NodeRun] = {}
    threads = [threading.Thread(target=_run_node, args=(_write(tmp, n, c), c.accepted, runs, n))
               for n, c in CASES.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    yield runs


@pytest.mark.parametrize('name', list(CASES))
def test_node_and_replay_give_the_same_verdict(name: str, node_runs: dict[str, NodeRun],
                                               tmp_path: Path) -> None:
    case = CASES[name]
    run = node_runs[name]
    try:
        replay = load_replay_config([NODE_YAML, _write(tmp_path, name, case)])
        replay_error = ''
    except ReplayConfigError as err:
        replay, replay_error = None, str(err)
    assert 'Traceback' not in run.output, run.output[-3000:]
    if case.accepted:
        assert replay is not None, replay_error
        assert run.came_up and run.returncode == 0, run.output[-3000:]
    else:
        assert replay is None and run.returncode == 2 and not run.came_up, run.output[-3000:]
        errors = [ln for ln in run.output.splitlines() if 'invalid parameters' in ln]
        assert len(errors) == 1, run.output[-3000:]
        for text in case.names:
            assert text in errors[0], (text, errors[0])
            assert text in replay_error, (text, replay_error)


def test_int_for_float_means_the_float_in_replay(tmp_path: Path) -> None:
    cfg = load_replay_config([NODE_YAML, _write(tmp_path, 'int', CASES['int_for_float'])])
    assert cfg.rate_hz == 1.0
