"""Camera and odometry messages to the node's records, from serialized CDR or rclpy objects.

With `inference.raw_messages` the subscriptions hand over serialized bytes (`raw=True`), read
with `assembly.cdr` (the few fields the node uses, a few microseconds of interpreter time); bytes
in an encapsulation other than plain CDR are deserialized by the middleware and converted as
rclpy messages are. Otherwise rclpy builds its message objects and `assembly.messages` converts
them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage

from ..assembly import EncodedImage, InputError, OdometrySample, image_from_msg, odometry_from_msg
from ..assembly.cdr import (
    CdrUnsupportedError,
    compressed_image_from_cdr,
    odometry_from_cdr,
    raw_image_from_cdr,
)
from ..assembly.errors import IMAGE_MALFORMED, ODOMETRY_MALFORMED

R = TypeVar('R')


def odometry_sample(msg: bytes | Any, msg_type: type) -> OdometrySample:
    """Convert a `nav_msgs/Odometry` (object or serialized); InputError if malformed."""
    return _convert(msg, msg_type, odometry_from_cdr, odometry_from_msg, ODOMETRY_MALFORMED)


def camera_frame(msg: bytes | Any, msg_type: type) -> EncodedImage:
    """Convert a `sensor_msgs/Image` or `CompressedImage` (object or serialized) to a frame."""
    parse = compressed_image_from_cdr if msg_type is CompressedImage else raw_image_from_cdr
    return _convert(msg, msg_type, parse, image_from_msg, IMAGE_MALFORMED)


def _convert(msg: bytes | Any, msg_type: type, parse: Callable[[bytes], R],
             convert: Callable[[Any], R], reason: str) -> R:
    if not isinstance(msg, bytes):
        return convert(msg)
    try:
        return parse(msg)
    except CdrUnsupportedError:
        pass
    try:
        typed = deserialize_message(msg, msg_type)
    except Exception as err:  # noqa: BLE001 - the middleware's errors have no common type
        raise InputError(reason, f'{msg_type.__name__} the middleware cannot deserialize: '
                                 f'{err}') from None
    return convert(typed)
