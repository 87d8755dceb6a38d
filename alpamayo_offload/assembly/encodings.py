"""One table of the camera encodings the node accepts and the OpenCV conversion of each to RGB.

Both conversion paths read it (`convert.py`): cv_bridge on a ROS install, OpenCV where cv_bridge
cannot be imported. The codes are the ones cv_bridge's `getConversionCodes` uses for a
conversion to `rgb8` (note OpenCV names Bayer patterns by the second row's first two pixels:
ROS `bayer_rggb8` is OpenCV `BayerBG`). 16-bit encodings are demosaiced / expanded at 16 bits
and then scaled to 8 bits as cv_bridge's `imgmsg_to_cv2(msg, 'rgb8')` does (and
`cvtColorForDisplay` without dynamic scaling): `convertTo(CV_8U, 255 / 65535)`, i.e. each value
v becomes round(v * 255 / 65535), the full 16-bit range mapped onto 0..255.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2


@dataclass(frozen=True)
class RawEncoding:
    """How one `sensor_msgs/Image` encoding is laid out and converted to RGB uint8."""

    name: str
    channels: int              # samples per pixel as stored (yuv422: 2, one chroma + one luma)
    sample_bytes: int          # 1 or 2 (2: byte order from the message's is_bigendian)
    cv_code: int | None        # cv2.cvtColor code to RGB; None: already RGB

    @property
    def bytes_per_pixel(self) -> int:
        """Bytes one pixel takes in a row (the least `step / width` can be)."""
        return self.channels * self.sample_bytes


def _table() -> dict[str, RawEncoding]:
    rows = [
        ('rgb8', 3, 1, None),
        ('bgr8', 3, 1, cv2.COLOR_BGR2RGB),
        ('rgba8', 4, 1, cv2.COLOR_RGBA2RGB),
        ('bgra8', 4, 1, cv2.COLOR_BGRA2RGB),
        ('mono8', 1, 1, cv2.COLOR_GRAY2RGB),
        ('mono16', 1, 2, cv2.COLOR_GRAY2RGB),
        ('yuv422', 2, 1, cv2.COLOR_YUV2RGB_UYVY),
        ('uyvy', 2, 1, cv2.COLOR_YUV2RGB_UYVY),
        ('yuv422_yuy2', 2, 1, cv2.COLOR_YUV2RGB_YUY2),
        ('yuyv', 2, 1, cv2.COLOR_YUV2RGB_YUY2),
    ]
    bayer = {'rggb': cv2.COLOR_BayerBG2RGB, 'bggr': cv2.COLOR_BayerRG2RGB,
             'gbrg': cv2.COLOR_BayerGR2RGB, 'grbg': cv2.COLOR_BayerGB2RGB}
    for pattern, code in bayer.items():
        rows += [(f'bayer_{pattern}8', 1, 1, code), (f'bayer_{pattern}16', 1, 2, code)]
    return {name: RawEncoding(name, ch, nbytes, code) for name, ch, nbytes, code in rows}


RAW_ENCODINGS: dict[str, RawEncoding] = _table()
COMPRESSED_CODECS = ('jpeg', 'png')


def compressed_codec(fmt: str) -> str | None:
    """Return the codec of a `CompressedImage.format`, or None when neither JPEG nor PNG.

    Accepts the plain names (`jpeg`, `jpg`, `png`) and image_transport's form
    `"<encoding>; <codec> compressed <encoding>"` (e.g. `"rgb8; jpeg compressed bgr8"`). The
    pixel encoding named there needs no handling: JPEG/PNG decode to BGR, converted to RGB.
    """
    text = fmt.strip().lower()
    if ';' in text:
        text = text.split(';', 1)[1].strip().split(' ', 1)[0]
    if text in ('jpeg', 'jpg'):
        return 'jpeg'
    return text if text == 'png' else None


def supported_encodings() -> str:
    """List the accepted encodings, for refusal messages."""
    return (f'sensor_msgs/Image {sorted(RAW_ENCODINGS)}; CompressedImage '
            f"{list(COMPRESSED_CODECS)} (also image_transport's '<enc>; jpeg compressed <enc>')")
