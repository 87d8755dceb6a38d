"""Plain message records and duck-typed converters from rclpy or rosbags messages.

rclpy messages and `rosbags`-deserialised messages share field names, so one converter serves the
live node and offline replay. Buffers keep these records (images stay encoded).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EncodedImage:
    """One camera frame as received: raw pixels (`sensor_msgs/Image`) or JPEG/PNG bytes."""

    stamp_ns: int
    frame_id: str
    data: bytes
    compressed: bool
    encoding: str          # raw: pixel encoding (rgb8, ...); compressed: the `format` string
    height: int = 0        # raw only
    width: int = 0         # raw only
    step: int = 0          # raw only
    is_bigendian: bool = False   # raw only: byte order of 16-bit samples


@dataclass(frozen=True)
class OdometrySample:
    """A pose of the odometry child frame in the odometry frame."""

    stamp_ns: int
    frame_id: str
    child_frame_id: str
    position: tuple[float, float, float]
    orientation_xyzw: tuple[float, float, float, float]


def stamp_to_ns(stamp: Any) -> int:
    """`builtin_interfaces/Time` (rclpy or rosbags) to integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def image_from_msg(msg: Any) -> EncodedImage:
    """Convert a `sensor_msgs/Image` or `sensor_msgs/CompressedImage` (recognised by `format`)."""
    stamp = stamp_to_ns(msg.header.stamp)
    data = bytes(msg.data)
    if hasattr(msg, 'format'):
        return EncodedImage(stamp, msg.header.frame_id, data, True, str(msg.format))
    return EncodedImage(stamp, msg.header.frame_id, data, False, str(msg.encoding),
                        int(msg.height), int(msg.width), int(msg.step), bool(msg.is_bigendian))


def odometry_from_msg(msg: Any) -> OdometrySample:
    """Convert a `nav_msgs/Odometry` to its pose sample (twist is not used by the model)."""
    p = msg.pose.pose.position
    q = msg.pose.pose.orientation
    return OdometrySample(stamp_to_ns(msg.header.stamp), msg.header.frame_id, msg.child_frame_id,
                          (float(p.x), float(p.y), float(p.z)),
                          (float(q.x), float(q.y), float(q.z), float(q.w)))
