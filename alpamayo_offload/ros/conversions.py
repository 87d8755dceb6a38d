"""numpy trajectories to ROS messages: paths in the ego frame and in the odometry frame."""
from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path

from ..assembly import Pose
from ..assembly.poses import matrix_to_quat

_NS = 1_000_000_000


def ns_to_time(stamp_ns: int) -> Time:
    """Integer nanoseconds to `builtin_interfaces/Time`."""
    return Time(sec=stamp_ns // _NS, nanosec=stamp_ns % _NS)


def to_odom_frame(xyz: np.ndarray, rot: np.ndarray, pose_t0: Pose) -> tuple[np.ndarray, np.ndarray]:
    """Ego-frame (t0 rear axle) poses to the odometry frame: p_w = R_t0 p + x_t0, R_w = R_t0 R."""
    return xyz @ pose_t0.rot.T + pose_t0.xyz, pose_t0.rot @ rot


def path_msg(xyz: np.ndarray, rot: np.ndarray, frame_id: str, stamp_ns: int) -> Path:
    """`nav_msgs/Path` with one pose per waypoint; every pose carries the path's t0 stamp."""
    quats = matrix_to_quat(rot)
    stamp = ns_to_time(stamp_ns)
    msg = Path()
    msg.header.frame_id = frame_id
    msg.header.stamp = stamp
    for p, q in zip(xyz.tolist(), quats.tolist(), strict=True):
        ps = PoseStamped()
        ps.header.frame_id = frame_id
        ps.header.stamp = stamp
        ps.pose.position.x, ps.pose.position.y, ps.pose.position.z = p
        o = ps.pose.orientation
        o.x, o.y, o.z, o.w = q
        msg.poses.append(ps)
    return msg
