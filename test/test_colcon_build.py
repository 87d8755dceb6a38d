"""`colcon build` in a scratch workspace installs the package with its launch and config files."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLCON = Path(sys.executable).with_name('colcon')


@pytest.mark.skipif(not COLCON.exists(), reason='colcon is not installed in this environment')
def test_colcon_build_installs_launch_and_config(tmp_path: Path) -> None:
    src = tmp_path / 'src' / 'alpamayo_offload'
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        '.venv', '.git', 'build', 'install', 'log', '__pycache__', '*.egg-info', '.pytest_cache'))
    env = {**os.environ, 'PATH': f'{COLCON.parent}{os.pathsep}{os.environ["PATH"]}'}
    result = subprocess.run(
        [str(COLCON), 'build', '--packages-select', 'alpamayo_offload'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    share = tmp_path / 'install' / 'alpamayo_offload' / 'share' / 'alpamayo_offload'
    assert (share / 'package.xml').is_file()
    assert sorted(p.name for p in (share / 'launch').glob('*.launch.py')) == sorted(
        p.name for p in (ROOT / 'launch').glob('*.launch.py'))
    for pattern in ('*.yaml', '*.json'):
        assert sorted(p.name for p in (share / 'config').glob(pattern)) == sorted(
            p.name for p in (ROOT / 'config').glob(pattern))
    index = (tmp_path / 'install' / 'alpamayo_offload' / 'share' / 'ament_index'
             / 'resource_index' / 'packages' / 'alpamayo_offload')
    assert index.is_file()
    lib = tmp_path / 'install' / 'alpamayo_offload' / 'lib' / 'alpamayo_offload'
    assert (lib / 'alpamayo_offload_node').is_file()
    assert (lib / 'alpamayo-offload').is_file()
