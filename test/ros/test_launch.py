"""launch_testing check of the launch file (ROS installs only; skipped where `launch` is missing).

The launch file with a bag player: the node reaches active through launch's lifecycle events, a
Path arrives whose stamp equals a camera stamp and whose frame is the configured one, and
/diagnostics carries the model and inference statuses. test_launch_exit.py runs `ros2 launch`
for the exit statuses; test_lifecycle.py checks the same behaviours through rclpy alone where
launch is missing.
"""
from __future__ import annotations

import pytest

launch_testing = pytest.importorskip('launch_testing')
launch_testing_ros = pytest.importorskip('launch_testing_ros')

import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402
from pathlib import Path  # noqa: E402

import rclpy  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from launch.actions import ExecuteProcess, IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from launch_testing.actions import ReadyToTest  # noqa: E402
from nav_msgs.msg import Path as PathMsg  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from alpamayo_offload.app.schema import NODE_NAME  # noqa: E402
from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive  # noqa: E402
from alpamayo_offload.ros.session import LifecycleClient  # noqa: E402
from launch import LaunchDescription  # noqa: E402

LAUNCH = Path(__file__).resolve().parents[2] / 'launch' / 'alpamayo_offload.launch.py'
NS = 'test_ns'
DRIVE = DriveConfig(duration_s=30.0)
BAG = write_drive(Path(tempfile.mkdtemp(prefix='launch_test_')) / 'bag', DRIVE)
CAMERA_0 = DRIVE.topic_for(0)


@pytest.mark.launch_test
def generate_test_description() -> LaunchDescription:
    remaps = {f'camera_{s}_topic': DRIVE.topic_for(s) for s in DRIVE.camera_slots}
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH)), launch_arguments={
            'namespace': NS, 'odometry_topic': DRIVE.odom_topic, **remaps}.items()),
        ExecuteProcess(cmd=[sys.executable, '-m', 'alpamayo_offload.ros.bag_player', str(BAG),
                            '--restamp', '--wait-for-subscribers', '1']),
        ReadyToTest()])


class TestNodeUnderLaunch(unittest.TestCase):
    """Checks on the launched node while it runs."""

    @classmethod
    def setUpClass(cls) -> None:
        rclpy.init()
        cls.node = rclpy.create_node('launch_test_probe')
        cls.executor = SingleThreadedExecutor()
        cls.executor.add_node(cls.node)
        cls.paths: list[PathMsg] = []
        cls.camera_stamps: set[int] = set()
        cls.statuses: dict[str, int] = {}
        cls.node.create_subscription(PathMsg, f'/{NS}/{NODE_NAME}/output/path',
                                     cls.paths.append, 10)
        cls.node.create_subscription(
            Image, CAMERA_0, lambda m: cls.camera_stamps.add(_ns(m.header.stamp)),
            qos_profile_sensor_data)
        cls.node.create_subscription(DiagnosticArray, '/diagnostics', lambda m: cls.statuses.update(
            {s.name: s.level[0] for s in m.status}), 50)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.node.destroy_node()
        rclpy.shutdown()

    def spin_until(self, done, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not done():
            self.executor.spin_once(timeout_sec=0.1)
        return done()

    def test_active_path_stamped_with_a_camera_stamp_in_the_configured_frame(self) -> None:
        client = LifecycleClient(self.node, self.executor, f'/{NS}/{NODE_NAME}')
        self.assertEqual(client.wait_for('active', 120.0), 'active')
        self.assertTrue(self.spin_until(lambda: self.paths, 60.0))
        path = self.paths[-1]
        self.assertEqual(path.header.frame_id, 'base_link')   # output.frame_id of the package file
        self.assertIn(_ns(path.header.stamp), self.camera_stamps)

    def test_diagnostics_carry_model_and_inference_statuses(self) -> None:
        names = (f'{NODE_NAME}: model', f'{NODE_NAME}: inference')
        self.assertTrue(self.spin_until(lambda: all(n in self.statuses for n in names), 60.0),
                        self.statuses)


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec
