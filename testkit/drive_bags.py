"""Read a synthetic drive's bag back: camera frames per slot and odometry, in stamp order."""
from __future__ import annotations

from pathlib import Path

from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.assembly import (
    EncodedImage,
    OdometrySample,
    image_from_msg,
    odometry_from_msg,
)


def read_drive(bag: Path) -> tuple[dict[int, list[EncodedImage]], list[OdometrySample]]:
    """Frames per camera slot (from the topic's `camera_<slot>`) and odometry, by stamp."""
    cams: dict[int, list[EncodedImage]] = {}
    odom: list[OdometrySample] = []
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        for conn, _, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.msgtype == 'nav_msgs/msg/Odometry':
                odom.append(odometry_from_msg(msg))
            else:
                slot = int(conn.topic.split('camera_')[1].split('/')[0])
                cams.setdefault(slot, []).append(image_from_msg(msg))
    for frames in cams.values():
        frames.sort(key=lambda f: f.stamp_ns)
    return cams, sorted(odom, key=lambda o: o.stamp_ns)
