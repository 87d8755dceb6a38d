"""ROS convention lint tests (ament flake8 and pep257) through ruff, which implements both."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ['alpamayo_offload', 'test', 'testkit', 'bench', 'launch', 'setup.py']


def _ruff(*select: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, '-m', 'ruff', 'check', '--no-cache']
    if select:
        cmd += ['--select', ','.join(select)]
    existing = [p for p in PATHS if (ROOT / p).exists()]
    return subprocess.run([*cmd, *existing], cwd=ROOT, capture_output=True, text=True, check=False)


def test_flake8() -> None:
    """Pyflakes + pycodestyle (what ament_flake8 checks), plus the project's own rule set."""
    result = _ruff()
    assert result.returncode == 0, result.stdout + result.stderr


def test_pep257() -> None:
    """Docstring conventions (what ament_pep257 checks) on the installed package."""
    result = subprocess.run(
        [sys.executable, '-m', 'ruff', 'check', '--no-cache', '--select', 'D',
         '--ignore', 'D100,D104,D105,D107,D203,D213', 'alpamayo_offload'],
        cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
