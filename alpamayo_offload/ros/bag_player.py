"""Publish a bag's messages to live topics with their recorded timing (`ros2 bag play` stand-in).

Raw CDR bytes from the bag are deserialised straight into rclpy message classes, so any message
type the ROS install knows plays. `--restamp` shifts header stamps to wall time (for nodes on the
wall clock); `--clock` publishes `/clock` at bag time instead (for nodes with use_sim_time).
"""
from __future__ import annotations

if __name__ == '__main__':  # `python -m`: quiet Ctrl-C/SIGTERM also during the imports below
    from ..app.stop_signals import exit_quietly_on_stop

    exit_quietly_on_stop()

import argparse
import importlib
import logging
import time
from pathlib import Path
from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.serialization import deserialize_message
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore
from rosgraph_msgs.msg import Clock

LOG = logging.getLogger(__name__)
_NS = 1_000_000_000


def message_class(msgtype: str) -> type:
    """`sensor_msgs/msg/Image` -> the rclpy class `sensor_msgs.msg.Image`."""
    package, sub, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{package}.{sub}'), name)


def _set_stamp(msg: Any, stamp_ns: int) -> None:
    msg.header.stamp.sec = stamp_ns // _NS
    msg.header.stamp.nanosec = stamp_ns % _NS


def play(node: Node, bag: Path, *, rate: float = 1.0, restamp: bool = False, clock: bool = False,
         remap: dict[str, str] | None = None, wait_for_subscribers_s: float = 0.0) -> int:
    """Play `bag` through publishers of `node`; returns the number of messages published.

    Messages keep their recorded spacing (divided by `rate`). With `wait_for_subscribers_s`, play
    starts once every topic has a subscriber or that many seconds have passed.
    """
    if rate <= 0:
        raise ValueError(f'rate {rate} must be > 0')
    remap = remap or {}
    clock_pub = None
    if clock:
        clock_pub = node.create_publisher(Clock, '/clock', 10)
    count = 0
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        pubs: dict[int, tuple[Any, type]] = {}
        for conn in reader.connections:
            cls = message_class(conn.msgtype)
            topic = remap.get(conn.topic, conn.topic)
            pubs[conn.id] = (node.create_publisher(cls, topic, QoSProfile(depth=10)), cls)
        deadline = time.monotonic() + wait_for_subscribers_s
        while time.monotonic() < deadline and \
                any(p.get_subscription_count() == 0 for p, _ in pubs.values()):
            time.sleep(0.05)
        wall0 = time.monotonic()
        bag0 = reader.start_time
        shift = time.time_ns() - bag0
        for conn, stamp, raw in reader.messages():
            delay = wall0 + (stamp - bag0) / _NS / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pub, cls = pubs[conn.id]
            msg = deserialize_message(raw, cls)
            if restamp and hasattr(msg, 'header'):
                _set_stamp(msg, msg.header.stamp.sec * _NS + msg.header.stamp.nanosec + shift)
            if clock_pub is not None:
                tick = Clock()
                tick.clock.sec, tick.clock.nanosec = stamp // _NS, stamp % _NS
                clock_pub.publish(tick)
            pub.publish(msg)
            count += 1
    LOG.info('played %d messages from %s', count, bag)
    return count


def main(argv: list[str] | None = None) -> None:
    """Command line: `python -m alpamayo_offload.ros.bag_player BAG [--restamp] [--clock] ...`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('bag', type=Path)
    parser.add_argument('--rate', type=float, default=1.0)
    parser.add_argument('--restamp', action='store_true', help='shift stamps to wall time')
    parser.add_argument('--clock', action='store_true', help='publish /clock at bag time')
    parser.add_argument('--remap', nargs='*', default=[], metavar='FROM:=TO')
    parser.add_argument('--wait-for-subscribers', type=float, default=0.0, metavar='SECONDS')
    args, ros_args = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    remap = dict(r.split(':=', 1) for r in args.remap)
    rclpy.init(args=ros_args)
    node = Node('bag_player')
    try:
        play(node, args.bag, rate=args.rate, restamp=args.restamp, clock=args.clock, remap=remap,
             wait_for_subscribers_s=args.wait_for_subscribers)
        time.sleep(0.2)  # let the last messages leave before the participant goes away
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    main()
