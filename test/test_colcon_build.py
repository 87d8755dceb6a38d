"""`colcon build` in a scratch workspace installs the package with its launch and config files.

Its scripts go to lib/alpamayo_offload, where `ros2 run alpamayo_offload <script>` finds them.
"""
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
    _check_ros_run(tmp_path / 'install' / 'alpamayo_offload')


def _check_ros_run(prefix: Path) -> None:
    """What `source install/setup.bash; ros2 run alpamayo_offload alpamayo-offload --help` does.

    ros2 run takes the executable from <package prefix>/lib/<package> (ament index lookup); the
    environment is the one the workspace's setup file sets, so the built copy is the one imported.
    """
    site = next(prefix.glob('lib/python3*/site-packages'))
    env = {**os.environ, 'AMENT_PREFIX_PATH': str(prefix),
           'PYTHONPATH': os.pathsep.join([str(site), os.environ.get('PYTHONPATH', '')])}
    find = ("from ament_index_python.packages import get_package_prefix as p; "
            "import alpamayo_offload as a; print(p('alpamayo_offload')); print(a.__file__)")
    located = subprocess.run([sys.executable, '-c', find], env=env, cwd=prefix,
                             capture_output=True, text=True, timeout=60, check=True)
    package_prefix, module = located.stdout.split()
    assert Path(package_prefix) == prefix and Path(module).is_relative_to(site), located.stdout
    script = Path(package_prefix) / 'lib' / 'alpamayo_offload' / 'alpamayo-offload'
    assert os.access(script, os.X_OK)
    result = subprocess.run([str(script), '--help'], env=env, cwd=prefix, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith('usage: alpamayo-offload'), result.stdout[:500]
    # the node script is the entry point that exits quietly on Ctrl-C from the first instant
    entry_points = next(site.glob('alpamayo_offload-*-info/entry_points.txt')).read_text()
    assert 'alpamayo_offload_node = alpamayo_offload.ros.node_entry:main' in entry_points
