"""`ros2 launch` exit statuses (ROS installs only): a failed model load fails launch; Ctrl-C is 0.

Skipped where `launch`/`launch_ros` or the `ros2` command are missing; test_lifecycle.py checks
the node's side (exit status 1 on a failed load, 0 on shutdown) through rclpy alone.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip('launch')
pytest.importorskip('launch_ros')

pytestmark = pytest.mark.slow
LAUNCH = Path(__file__).resolve().parents[2] / 'launch' / 'alpamayo_offload.launch.py'
NS = 'launch_exit'


def _ros2_launch(*args: str) -> subprocess.Popen[str]:
    ros2 = shutil.which('ros2')
    if ros2 is None:
        pytest.skip('the ros2 command is not on PATH')
    return subprocess.Popen([ros2, 'launch', str(LAUNCH), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_model_that_cannot_load_makes_launch_fail() -> None:
    proc = _ros2_launch('model:=/nonexistent/alpamayo', f'namespace:={NS}_bad')
    output = proc.communicate(timeout=180)[0]
    assert proc.returncode != 0, output[-3000:]
    assert 'exited with status 1' in output, output[-3000:]


def test_ctrl_c_ends_launch_with_status_0() -> None:
    proc = _ros2_launch(f'namespace:={NS}_stop')
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:   # the node logs 'active: ...' once launch has activated it
        lines.append(line)
        if 'active: subscribed' in line or time.monotonic() > deadline:
            break
    assert any('active: subscribed' in line for line in lines), ''.join(lines)[-3000:]
    proc.send_signal(signal.SIGINT)
    output = ''.join(lines) + proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output[-3000:]
    assert 'Traceback' not in output, output[-3000:]
