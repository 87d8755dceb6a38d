"""The CARLA launch file's dependency check: through a real ament index in a scratch prefix.

The launch file itself runs only on a ROS install (`launch` is not on PyPI); that it calls the
check before it builds any action is checked on its source.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip('ament_index_python')

from alpamayo_offload.ros.launch_checks import (  # noqa: E402
    MissingPackageError,
    missing_packages,
    require_packages,
)

STARTERS = ('Node', 'LifecycleNode')
CARLA_LAUNCH = Path(__file__).resolve().parents[2] / 'launch' / 'alpamayo_offload_carla.launch.py'
STARTS = {'alpamayo_offload': 'alpamayo_offload_node', 'tf2_ros': 'static_transform_publisher'}


def _prefix(root: Path, *packages: str) -> Path:
    index = root / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    for name in packages:
        (index / name).touch()
    return root


def test_missing_package_is_named_with_its_install_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(_prefix(tmp_path, 'alpamayo_offload')))
    monkeypatch.setenv('ROS_DISTRO', 'jazzy')
    assert missing_packages(STARTS) == ['tf2_ros']
    with pytest.raises(MissingPackageError) as err:
        require_packages(STARTS, 'carla.launch.py')
    message = str(err.value)
    assert message.startswith('carla.launch.py started nothing')
    assert "'tf2_ros' (static_transform_publisher)" in message
    assert 'sudo apt install ros-jazzy-tf2-ros' in message and 'rosdep install' in message
    assert "'alpamayo_offload'" not in message


def test_installed_packages_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(_prefix(tmp_path, *STARTS)))
    require_packages(STARTS, 'carla.launch.py')


def test_without_a_sourced_ros_environment_every_package_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    monkeypatch.delenv('ROS_DISTRO', raising=False)
    with pytest.raises(MissingPackageError) as err:
        require_packages(STARTS, 'carla.launch.py')
    assert 'sudo apt install ros-$ROS_DISTRO-alpamayo-offload ros-$ROS_DISTRO-tf2-ros' in str(
        err.value)


def test_carla_launch_checks_every_package_it_starts_before_any_action() -> None:
    """`require_packages` comes first in `_actions`, and names each started package before.

    Started: each `Node(package=...)` and `LifecycleNode(package=...)`.
    """
    tree = ast.parse(CARLA_LAUNCH.read_text())
    actions = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == '_actions')
    calls = [n for n in ast.walk(actions) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id in ('require_packages', *STARTERS)]
    check = min((c for c in calls if c.func.id == 'require_packages'), key=lambda c: c.lineno)
    nodes = [c for c in calls if c.func.id in STARTERS]
    assert nodes and all(check.lineno < node.lineno for node in nodes)
    named_before = {n.value for n in ast.walk(actions) if isinstance(n, ast.Constant)
                    and isinstance(n.value, str) and n.lineno < check.lineno}
    started = {kw.value.value for node in nodes for kw in node.keywords if kw.arg == 'package'}
    assert started == {'alpamayo_offload', 'tf2_ros'} and started <= named_before, started
