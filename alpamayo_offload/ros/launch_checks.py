"""Dependency check a launch file runs before it starts any process.

A launch file that finds a missing package only when it reaches that package's node has already
started the nodes before it, and those stay behind as orphans (holding VRAM) when launch aborts.
Importable without `launch`, so it is tested where only ament_index_python is installed.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from ament_index_python.packages import get_packages_with_prefixes


class MissingPackageError(RuntimeError):
    """A ROS package a launch file starts a process from is not installed."""


def missing_packages(packages: Mapping[str, str]) -> list[str]:
    """Names in `packages` the ament index (AMENT_PREFIX_PATH) does not know, in order."""
    try:
        installed = get_packages_with_prefixes()
    except OSError:  # AMENT_PREFIX_PATH unset: no ROS environment sourced, nothing is installed
        installed = {}
    return [name for name in packages if name not in installed]


def require_packages(packages: Mapping[str, str], launch_file: str) -> None:
    """Raise `MissingPackageError` naming every missing package and how to install it.

    `packages` maps a package name to what the launch file starts from it (said in the message).
    """
    missing = missing_packages(packages)
    if not missing:
        return
    distro = os.environ.get('ROS_DISTRO', '$ROS_DISTRO')
    needs = '; '.join(f"'{name}' ({packages[name]})" for name in missing)
    apt = ' '.join(f"ros-{distro}-{name.replace('_', '-')}" for name in missing)
    raise MissingPackageError(
        f'{launch_file} started nothing: these ROS packages are not installed: {needs}. '
        f'Install them with `sudo apt install {apt}` (or `rosdep install --from-paths src '
        '--ignore-src -y` in the workspace) and source the ROS and workspace setup files.')
