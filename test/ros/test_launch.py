"""launch_testing check of the launch file (ROS installs only; skipped where it is missing)."""
from __future__ import annotations

import pytest

launch_testing = pytest.importorskip('launch_testing')
launch_testing_ros = pytest.importorskip('launch_testing_ros')

import unittest  # noqa: E402
from pathlib import Path  # noqa: E402

from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from launch_testing.actions import ReadyToTest  # noqa: E402

from launch import LaunchDescription  # noqa: E402

LAUNCH = Path(__file__).resolve().parents[2] / 'launch' / 'alpamayo_offload.launch.py'


@pytest.mark.launch_test
def generate_test_description() -> LaunchDescription:
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH)),
                                 launch_arguments={'namespace': 'test_ns'}.items()),
        ReadyToTest()])


class TestDiagnosticsArrive(unittest.TestCase):
    def test_diagnostics_topic(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray

        with launch_testing_ros.WaitForTopics([('/diagnostics', DiagnosticArray)],
                                              timeout=30.0) as wait:
            self.assertTrue(wait.topics_received())
