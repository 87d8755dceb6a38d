"""Layers are import rules (docs/design.md): each subpackage imports only what its layer allows."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / 'alpamayo_offload'

# Top-level modules each subpackage must never import.
FORBIDDEN = {
    'runtime': {'rclpy', 'transformers', 'rosbags', 'alpamayo_offload.model',
                'alpamayo_offload.ros',
                'alpamayo_offload.engine', 'alpamayo_offload.assembly', 'alpamayo_offload.planning',
                'alpamayo_offload.replay'},
    'model': {'rclpy', 'rosbags', 'alpamayo_offload.runtime', 'alpamayo_offload.ros',
              'alpamayo_offload.engine', 'alpamayo_offload.planning', 'alpamayo_offload.replay',
              'alpamayo_offload.assembly'},
    'assembly': {'rclpy', 'torch', 'transformers', 'alpamayo_offload.ros', 'alpamayo_offload.model',
                 'alpamayo_offload.runtime', 'alpamayo_offload.engine', 'alpamayo_offload.replay'},
    'planning': {'torch', 'numpy', 'transformers', 'rclpy', 'rosbags',
                 'alpamayo_offload.runtime', 'alpamayo_offload.model', 'alpamayo_offload.engine',
                 'alpamayo_offload.profiling', 'alpamayo_offload.assembly', 'alpamayo_offload.app',
                 'alpamayo_offload.replay', 'alpamayo_offload.ros', 'alpamayo_offload.cli'},
    'profiling': {'rclpy', 'rosbags', 'alpamayo_offload.app', 'alpamayo_offload.replay',
                  'alpamayo_offload.ros', 'alpamayo_offload.assembly', 'alpamayo_offload.cli'},
    'engine': {'rclpy', 'rosbags', 'alpamayo_offload.ros', 'alpamayo_offload.assembly',
               'alpamayo_offload.replay', 'alpamayo_offload.cli'},
    'replay': {'rclpy', 'alpamayo_offload.ros', 'alpamayo_offload.cli'},
    'app': {'rclpy', 'rosbags', 'alpamayo_offload.ros', 'alpamayo_offload.replay',
            'alpamayo_offload.profiling', 'alpamayo_offload.cli'},
}
# Named exceptions: the synthetic drive writes a ROS 2 bag for the demo, tests and bench with
# rosbags (no ROS install needed); the node and replay never import it.
ALLOWED = {'app/synthetic_drive.py': {'rosbags'}}


def _imports(path: Path) -> set[str]:
    """Absolute names of everything `path` imports; relative imports resolved (`from ..model`)."""
    package = path.relative_to(PKG.parent).parts[:-1]   # a module's and an __init__'s package
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ''
            else:
                up = package[:len(package) - (node.level - 1)]
                base = '.'.join([*up, *([node.module] if node.module else [])])
            names.add(base)
            # `from .. import model` names a module too
            names.update(f'{base}.{alias.name}' for alias in node.names)
    return names


def test_relative_imports_are_resolved() -> None:
    """The rules would be blind without this: the package imports its siblings relatively."""
    names = _imports(PKG / 'engine' / 'core.py')
    assert 'alpamayo_offload.runtime' in names and 'alpamayo_offload.model' in names, names


@pytest.mark.parametrize('subpackage', sorted(FORBIDDEN))
def test_subpackage_imports_respect_layers(subpackage: str) -> None:
    bad = []
    for path in sorted((PKG / subpackage).rglob('*.py')):
        for name in _imports(path):
            for forbidden in FORBIDDEN[subpackage]:
                allowed = ALLOWED.get(path.relative_to(PKG).as_posix(), set())
                if (name == forbidden or name.startswith(forbidden + '.')) and \
                        name.split('.')[0] not in allowed:
                    bad.append(f'{path.relative_to(PKG)} imports {name}')
    assert not bad, '\n'.join(bad)


def _imports_ros(name: str) -> bool:
    """rclpy, the ament index, or a ROS interface package (`*_msgs`, `rcl_interfaces`, ...)."""
    top = name.split('.')[0]
    return top in ('rclpy', 'ament_index_python') or top.endswith('_msgs') or \
        top in ('rcl_interfaces', 'builtin_interfaces')


def test_ros_holds_only_modules_that_need_ros() -> None:
    """Each `ros/` module imports rclpy or a ROS message package, directly or through a sibling
    `ros/` module that does (the demo drives the node through `session`); ROS-free code belongs
    in `app/`."""
    modules = {p.stem: _imports(p) for p in (PKG / 'ros').glob('*.py') if p.stem != '__init__'}
    needs = {m for m, names in modules.items() if any(_imports_ros(n) for n in names)}
    grown = True
    while grown:
        before = len(needs)
        needs |= {m for m, names in modules.items()
                  if any(f'alpamayo_offload.ros.{n}' in names for n in needs)}
        grown = len(needs) > before
    assert set(modules) == needs, f'ROS-free modules in ros/: {sorted(set(modules) - needs)}'


def test_replay_runs_without_ros() -> None:
    """Replay machines have no ROS: importing the replay path must not pull in rclpy."""
    code = ('import sys; sys.modules["rclpy"] = None; '
            'import alpamayo_offload.replay.commands, alpamayo_offload.replay.params, '
            'alpamayo_offload.replay.session; print("ok")')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0 and 'ok' in result.stdout, result.stderr[-2000:]


def test_planning_imports_neither_torch_nor_numpy() -> None:
    """Planning is pure: a machine without torch can plan from a profile measured elsewhere."""
    code = ('import sys, alpamayo_offload.planning; '
            'print(sorted({"torch", "numpy"} & set(sys.modules)))')
    result = subprocess.run([sys.executable, '-c', code], cwd=PKG.parent, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == '[]', (
        result.stdout + result.stderr[-2000:])
