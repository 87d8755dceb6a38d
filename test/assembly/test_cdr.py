"""`assembly.cdr`: serialized odometry and camera messages read with struct, bounded."""
from __future__ import annotations

import struct

import pytest

from alpamayo_offload.assembly import EncodedImage, InputError, OdometrySample
from alpamayo_offload.assembly.cdr import (
    CdrUnsupportedError,
    compressed_image_from_cdr,
    odometry_from_cdr,
    raw_image_from_cdr,
)
from alpamayo_offload.assembly.errors import IMAGE_MALFORMED, ODOMETRY_MALFORMED


class _Writer:
    """Plain CDR, either byte order: what a publisher's middleware sends."""

    def __init__(self, order: str) -> None:
        self.order = order
        self.buf = bytearray(b'\x00\x01\x00\x00' if order == '<' else b'\x00\x00\x00\x00')

    def put(self, fmt: str, *values: object, align: int) -> _Writer:
        self.buf += b'\x00' * ((-(len(self.buf) - 4)) % align)
        self.buf += struct.pack(self.order + fmt, *values)
        return self

    def string(self, text: str) -> _Writer:
        raw = text.encode() + b'\x00'
        self.put('I', len(raw), align=4)
        self.buf += raw
        return self

    def header(self, sec: int, nanosec: int, frame_id: str) -> _Writer:
        return self.put('iI', sec, nanosec, align=4).string(frame_id)


def _odometry(order: str = '<') -> bytes:
    w = _Writer(order).header(12, 345, 'odom').string('base_link')
    w.put('7d', 1.5, -2.0, 0.25, 0.0, 0.0, 0.3, 0.95, align=8)
    w.put('36d', *range(36), align=8).put('6d', *range(6), align=8)
    return bytes(w.put('36d', *range(36), align=8).buf)


EXPECTED_ODOMETRY = OdometrySample(12_000_000_345, 'odom', 'base_link', (1.5, -2.0, 0.25),
                                   (0.0, 0.0, 0.3, 0.95))


@pytest.mark.parametrize('order', ['<', '>'])
def test_odometry_pose_is_read_in_either_byte_order(order: str) -> None:
    assert odometry_from_cdr(_odometry(order)) == EXPECTED_ODOMETRY


@pytest.mark.parametrize('order', ['<', '>'])
def test_images_are_read_in_either_byte_order(order: str) -> None:
    jpeg = bytes(range(256)) * 3
    w = _Writer(order).header(3, 7, 'cam0').string('jpeg').put('I', len(jpeg), align=4)
    assert compressed_image_from_cdr(bytes(w.buf) + jpeg) == \
        EncodedImage(3_000_000_007, 'cam0', jpeg, True, 'jpeg')
    pixels = bytes(range(18))
    w = _Writer(order).header(4, 8, 'cam1').put('II', 2, 3, align=4).string('rgb8')
    w.put('B', 1, align=1).put('I', 9, align=4).put('I', len(pixels), align=4)
    assert raw_image_from_cdr(bytes(w.buf) + pixels) == \
        EncodedImage(4_000_000_008, 'cam1', pixels, False, 'rgb8', 2, 3, 9, True)


def test_every_truncation_is_a_named_reason() -> None:
    data = _odometry()
    for n in range(len(data)):
        with pytest.raises(InputError) as err:
            odometry_from_cdr(data[:n])
        assert err.value.reason == ODOMETRY_MALFORMED
    jpeg = b'\xff\xd8' + b'x' * 40
    image = bytes(_Writer('<').header(1, 2, 'c').string('jpeg').put('I', len(jpeg), align=4).buf)
    for n in range(len(image) + len(jpeg)):
        with pytest.raises(InputError) as err:
            compressed_image_from_cdr((image + jpeg)[:n])
        assert err.value.reason == IMAGE_MALFORMED


def test_inconsistent_strings_and_lengths_are_named_reasons() -> None:
    huge = bytes(_Writer('<').header(1, 2, 'c').string('jpeg').put('I', 2**32 - 1, align=4).buf)
    three = bytes(_Writer('<').put('iI', 1, 2, align=4).put('I', 3, align=4).buf)
    no_nul, not_utf8 = three + b'abc', three + b'\xff\xfe\x00'
    for data in (huge, no_nul + b'\x00' * 64, not_utf8 + b'\x00' * 64):
        with pytest.raises(InputError) as err:
            compressed_image_from_cdr(data)
        assert err.value.reason == IMAGE_MALFORMED, data[:16]


def test_other_encapsulations_are_left_to_the_middleware() -> None:
    xcdr2 = b'\x00\x07\x00\x00' + _odometry()[4:]
    with pytest.raises(CdrUnsupportedError):
        odometry_from_cdr(xcdr2)


def test_a_stamp_with_nanosec_of_a_second_or_more_is_a_named_reason() -> None:
    w = _Writer('<').header(12, 1_500_000_000, 'odom').string('base_link')
    w.put('7d', 1.5, -2.0, 0.25, 0.0, 0.0, 0.3, 0.95, align=8)
    w.put('36d', *range(36), align=8).put('6d', *range(6), align=8)
    with pytest.raises(InputError) as err:
        odometry_from_cdr(bytes(w.put('36d', *range(36), align=8).buf))
    assert err.value.reason == ODOMETRY_MALFORMED
