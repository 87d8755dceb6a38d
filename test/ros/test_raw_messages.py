"""`inference.raw_messages`: serialized cameras and odometry give the records rclpy's objects do."""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import rclpy
from nav_msgs.msg import Odometry
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image

from alpamayo_offload.app import schema
from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.assembly import InputError, image_from_msg, odometry_from_msg
from alpamayo_offload.assembly.errors import ODOMETRY_MALFORMED
from alpamayo_offload.ros.inputs import camera_frame, odometry_sample
from alpamayo_offload.ros.node import AlpamayoOffloadNode


def _odometry() -> Odometry:
    msg = Odometry()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_700_000_000, 123_456_789
    msg.header.frame_id, msg.child_frame_id = 'odom', 'base_link'
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z, q.z, q.w = 12.5, -3.25, 0.5, 0.38268343, 0.92387953
    msg.pose.covariance[0] = msg.twist.twist.linear.x = 7.0
    return msg


def test_raw_messages_default_is_on() -> None:
    spec = schema.PARAMETERS['inference.raw_messages']
    assert spec.default is True and spec.restart
    assert config_from_values({}).raw_messages is True
    assert config_from_values({'inference.raw_messages': False}).raw_messages is False


def test_serialized_messages_give_the_records_of_rclpy_objects() -> None:
    odom = _odometry()
    assert odometry_sample(serialize_message(odom), Odometry) == odometry_from_msg(odom)
    assert odometry_sample(odom, Odometry) == odometry_from_msg(odom)
    jpeg = CompressedImage(format='jpeg', data=os.urandom(300_000))
    jpeg.header.frame_id = 'camera_0'
    assert camera_frame(serialize_message(jpeg), CompressedImage) == image_from_msg(jpeg)
    raw = Image(height=2, width=3, encoding='bgr8', step=9, is_bigendian=1, data=bytes(range(18)))
    raw.header.stamp.sec = 5
    assert camera_frame(serialize_message(raw), Image) == image_from_msg(raw)


def test_an_unknown_encapsulation_the_middleware_cannot_read_is_a_named_reason() -> None:
    with pytest.raises(InputError) as err:
        odometry_sample(b'\x00\x07\x00\x00\x01\x02', Odometry)
    assert err.value.reason == ODOMETRY_MALFORMED


@pytest.fixture()
def active_node() -> Iterator[AlpamayoOffloadNode]:
    rclpy.init(args=['--ros-args', '-p', 'inference.period_s:=1000.0'])
    node = AlpamayoOffloadNode()
    try:
        node.trigger_configure()
        node.trigger_activate()
        yield node
    finally:
        node.close()
        node.destroy_node()
        rclpy.try_shutdown()


def test_node_buffers_serialized_odometry_and_refuses_a_malformed_message(
        active_node: AlpamayoOffloadNode) -> None:
    node = active_node
    conf = node._conf
    assert conf is not None
    node._on_odometry(serialize_message(_odometry()))
    assert conf.odometry.snapshot() == [odometry_from_msg(_odometry())]
    node._on_odometry(serialize_message(_odometry())[:60])
    assert len(conf.odometry) == 1
    st = node._status
    assert st.messages_refused == 1 and st.input_reason == ODOMETRY_MALFORMED
    assert st.input_message.startswith('odometry: odometry_malformed')
