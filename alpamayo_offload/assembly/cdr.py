"""Serialized (CDR) odometry and camera messages to the node's records, reading only what it uses.

The node subscribes to cameras and odometry as serialized bytes (rclpy's `raw=True`) and reads
the header stamp, the frame ids, the pose and the image fields with `struct`, so a message costs
the interpreter a few microseconds instead of building rclpy's nested message objects (an
`Odometry` is about 50 us of interpreter time, which an inference thread waiting for the GIL
between its GPU launches loses; docs/ros.md, "Threads and CPU").

Plain CDR (XCDR1, the ROS 2 default), little- or big-endian. Every read is bounded by the buffer:
a short or inconsistent message raises `InputError` with `ODOMETRY_MALFORMED` or
`IMAGE_MALFORMED`, never `struct.error`. Any other encapsulation raises `CdrUnsupportedError`,
for the caller to deserialize with the middleware instead.
"""
from __future__ import annotations

import struct

from .errors import IMAGE_MALFORMED, ODOMETRY_MALFORMED, InputError
from .messages import EncodedImage, OdometrySample

_ENCAPSULATION = {b'\x00\x00': '>', b'\x00\x01': '<'}   # CDR_BE, CDR_LE
_ODOMETRY_TAIL = 36 * 8 + 6 * 8 + 36 * 8   # pose covariance, twist, twist covariance
_NS = 1_000_000_000


class CdrUnsupportedError(ValueError):
    """The bytes are not plain CDR (another encapsulation); the middleware can still read them."""


class _Reader:
    """Aligned, bounded reads from a CDR payload (offsets count from after the 4-byte header)."""

    def __init__(self, data: bytes, reason: str) -> None:
        self._reason = reason
        if len(data) < 4:
            self.fail(f'{len(data)} bytes: shorter than the CDR header')
        order = _ENCAPSULATION.get(bytes(data[:2]))
        if order is None:
            raise CdrUnsupportedError(f'encapsulation 0x{bytes(data[:2]).hex()} is not plain CDR')
        self._data = data
        self._order = order
        self._pos = 4

    def fail(self, message: str) -> None:
        """Raise the reader's named reason."""
        raise InputError(self._reason, f'malformed CDR message: {message}')

    def _take(self, fmt: str, size: int, align: int) -> tuple:
        pos = self._pos + (-(self._pos - 4)) % align
        if pos + size > len(self._data):
            self.fail(f'{len(self._data)} bytes end inside a field at offset {pos}')
        self._pos = pos + size
        return struct.unpack_from(self._order + fmt, self._data, pos)

    def uint32(self) -> int:
        """Read an unsigned 32-bit integer."""
        return int(self._take('I', 4, 4)[0])

    def uint8(self) -> int:
        """Read one byte."""
        return int(self._take('B', 1, 1)[0])

    def stamp_ns(self) -> int:
        """Read a `builtin_interfaces/Time` as integer nanoseconds."""
        sec, nanosec = self._take('iI', 8, 4)
        if nanosec >= _NS:   # rclpy would refuse it too; two stamps must not map to one
            self.fail(f'stamp nanosec {nanosec} >= 1e9')
        return sec * _NS + nanosec

    def doubles(self, n: int) -> tuple[float, ...]:
        """Read `n` consecutive float64."""
        return tuple(float(v) for v in self._take(f'{n}d', 8 * n, 8))

    def string(self) -> str:
        """Read a CDR string (length with its NUL, the bytes, the NUL)."""
        n = self.uint32()
        if n == 0:
            return ''
        raw = self.octets(n)
        if raw[-1:] != b'\x00':
            self.fail('a string without its terminating NUL')
        try:
            return raw[:-1].decode()
        except UnicodeDecodeError as err:
            self.fail(f'a string that is not UTF-8 ({err.reason})')
            raise   # unreachable: fail raised

    def octets(self, n: int) -> bytes:
        """Read `n` bytes (a copy)."""
        pos = self._pos
        if n > len(self._data) - pos:
            self.fail(f'{n} bytes announced at offset {pos}, {len(self._data) - pos} left')
        self._pos = pos + n
        return bytes(self._data[pos:pos + n])

    def skip(self, size: int, align: int) -> None:
        """Step over `size` bytes aligned to `align` (checked to lie inside the buffer)."""
        self._take(f'{size}x', size, align)


def odometry_from_cdr(data: bytes) -> OdometrySample:
    """Convert a serialized `nav_msgs/Odometry` to its pose sample (twist, covariances unread)."""
    r = _Reader(data, ODOMETRY_MALFORMED)
    stamp = r.stamp_ns()
    frame_id = r.string()
    child = r.string()
    pose = r.doubles(7)
    r.skip(_ODOMETRY_TAIL, 8)   # the message must be whole, not only its first fields
    x, y, z, qx, qy, qz, qw = pose
    return OdometrySample(stamp, frame_id, child, (x, y, z), (qx, qy, qz, qw))


def compressed_image_from_cdr(data: bytes) -> EncodedImage:
    """Convert a serialized `sensor_msgs/CompressedImage` to an encoded frame."""
    r = _Reader(data, IMAGE_MALFORMED)
    stamp = r.stamp_ns()
    frame_id = r.string()
    fmt = r.string()
    return EncodedImage(stamp, frame_id, r.octets(r.uint32()), True, fmt)


def raw_image_from_cdr(data: bytes) -> EncodedImage:
    """Convert a serialized `sensor_msgs/Image` to a frame of raw pixels."""
    r = _Reader(data, IMAGE_MALFORMED)
    stamp = r.stamp_ns()
    frame_id = r.string()
    height, width = r.uint32(), r.uint32()
    encoding = r.string()
    bigendian = r.uint8()
    step = r.uint32()
    pixels = r.octets(r.uint32())
    return EncodedImage(stamp, frame_id, pixels, False, encoding, height, width, step,
                        bool(bigendian))
