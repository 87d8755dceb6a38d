"""Shared pytest set-up: an own ROS domain per run, and the CUDA marker."""
from __future__ import annotations

import os

import pytest

# Each test run gets its own DDS domain so parallel runs on one machine don't hear each other.
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason='needs a CUDA GPU (runs on the GPU machine)')
    for item in items:
        if 'cuda' in item.keywords:
            item.add_marker(skip)
