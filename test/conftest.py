"""Shared pytest set-up: an own ROS domain per run, the CUDA marker, and runs without ROS."""
from __future__ import annotations

import os

import pytest

# Each test run gets its own DDS domain so parallel runs on one machine don't hear each other.
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))

# Modules that import rclpy (directly or through the node): not collected where ROS 2 is absent
# (the GPU machine runs `pytest -m cuda` without it). `make test` sets ALPAMAYO_TEST_NEEDS_ROS=1,
# so there a missing rclpy is an error, not a silent skip.
NEEDS_RCLPY = ('carla/test_carla_bag.py', 'ros/test_node_decode_ahead.py', 'ros/test_node_1_5.py',
               'ros/test_node_integration.py', 'ros/test_params.py', 'ros/test_plan_file.py',
               'ros/test_clean_exit.py', 'app/test_param_verdicts.py', 'ros/test_node_2super.py',
               'ros/test_raw_messages.py', 'ros/test_diagnostics_input.py',
               'ros/test_node_executor.py')
try:
    import rclpy  # noqa: F401
    HAVE_RCLPY = True
except ImportError:
    HAVE_RCLPY = False
if os.environ.get('ALPAMAYO_TEST_NEEDS_ROS') == '1' and not HAVE_RCLPY:
    raise pytest.UsageError('ALPAMAYO_TEST_NEEDS_ROS=1 but rclpy is not importable: '
                            "install the test extras (`make test` does: '.[ros-pip,test]')")
collect_ignore = [] if HAVE_RCLPY else list(NEEDS_RCLPY)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason='needs a CUDA GPU (runs on the GPU machine)')
    for item in items:
        if 'cuda' in item.keywords:
            item.add_marker(skip)


@pytest.fixture()
def compress_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the CPU codec's compress calls (the bytes of each region it compressed)."""
    from alpamayo_offload.runtime.codec import PlaneZlibCodec

    seen: list[int] = []
    original = PlaneZlibCodec.compress

    def counted(self: PlaneZlibCodec, flat):  # noqa: ANN001, ANN202
        seen.append(flat.numel())
        return original(self, flat)

    monkeypatch.setattr(PlaneZlibCodec, 'compress', counted)
    return seen
