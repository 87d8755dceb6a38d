"""Pixel conversion of validated frames to RGB uint8: cv_bridge where importable, else OpenCV.

On a ROS install `cv_bridge` converts (`imgmsg_to_cv2(msg, 'rgb8')`,
`compressed_imgmsg_to_cv2`), as the ROS ecosystem expects; where it cannot be imported (pip-only
installs, CI, replay machines) OpenCV does the same conversions, which is what cv_bridge does
inside (the codes of `encodings.RAW_ENCODINGS`). Which path is taken, and why, is logged once.

Frames reach this module already validated by `decode.py` (encoding known, step and size
consistent), so a conversion error here is a corrupt payload. cv_bridge is skipped for
big-endian 16-bit data (its Python byte swap uses `ndarray.newbyteorder`, which NumPy 2
removed) and, once with a warning, for an encoding the installed cv_bridge does not know.
JPEG decoding at a reduced DCT scale is OpenCV's (`IMREAD_REDUCED_COLOR_<n>`): cv_bridge has no
such option.
"""
from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np

from .encodings import RawEncoding
from .messages import EncodedImage

LOG = logging.getLogger(__name__)
REDUCTIONS = (1, 2, 4, 8)   # JPEG DCT scales OpenCV can decode at
_REDUCED_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2,
                  4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
_TO_RGB = {1: cv2.COLOR_GRAY2RGB, 3: cv2.COLOR_BGR2RGB, 4: cv2.COLOR_BGRA2RGB}
# ROS 2 names of the packed YUV encodings that older cv_bridge releases know.
_BRIDGE_NAMES = {'uyvy': 'yuv422', 'yuyv': 'yuv422_yuy2'}


class ConversionError(ValueError):
    """A validated frame's payload could not be converted (the caller names it corrupt)."""


def raw_array(image: EncodedImage, enc: RawEncoding) -> np.ndarray:
    """Return the frame's samples without row padding: (H, W) or (H, W, C), uint8 or uint16."""
    h, w = image.height, image.width
    rows = np.frombuffer(image.data, np.uint8).reshape(h, image.step)[:, :w * enc.bytes_per_pixel]
    if enc.sample_bytes == 2:
        rows = rows.view('>u2' if image.is_bigendian else '<u2').astype(np.uint16)
    return rows.reshape((h, w) if enc.channels == 1 else (h, w, enc.channels))


def to_rgb8(px: np.ndarray, code: int | None) -> np.ndarray:
    """Apply `code` (None: none) and scale 16-bit samples to 8 bits as cv_bridge does."""
    out = np.ascontiguousarray(px) if code is None else cv2.cvtColor(np.ascontiguousarray(px),
                                                                     code)
    if out.dtype == np.uint16:
        out = cv2.convertScaleAbs(out, alpha=255.0 / 65535.0)
    return out


def _decoded_to_rgb(px: np.ndarray | None) -> np.ndarray:
    """Convert `cv2.imdecode` output (BGR/BGRA/gray, 8 or 16 bit) to RGB uint8."""
    if px is None or px.size == 0:
        raise ConversionError('the codec found no image in the data')
    channels = 1 if px.ndim == 2 else px.shape[2]
    if channels not in _TO_RGB:
        raise ConversionError(f'decoded image has {channels} channels')
    return to_rgb8(px, _TO_RGB[channels])


class OpenCvConverter:
    """The conversions of `encodings.RAW_ENCODINGS` done with OpenCV directly."""

    path = 'opencv'

    def raw_to_rgb(self, image: EncodedImage, enc: RawEncoding) -> np.ndarray:
        """Full-size (H, W, 3) RGB uint8 of a validated raw frame."""
        return to_rgb8(raw_array(image, enc), enc.cv_code)

    def compressed_to_rgb(self, data: bytes, reduction: int = 1) -> np.ndarray:
        """Decode JPEG/PNG bytes (JPEG at 1/`reduction` scale) to RGB uint8."""
        try:
            px = cv2.imdecode(np.frombuffer(data, np.uint8), _REDUCED_FLAGS[reduction])
        except cv2.error as err:
            raise ConversionError(str(err).strip().splitlines()[-1]) from err
        return _decoded_to_rgb(px)


class CvBridgeConverter:
    """cv_bridge's conversions; OpenCV for what cv_bridge cannot do (module docstring)."""

    path = 'cv_bridge'

    def __init__(self, bridge: Any, error_type: type[Exception]) -> None:
        self._bridge = bridge
        self._error = error_type
        self._opencv = OpenCvConverter()
        self._unknown: set[str] = set()
        self._lock = threading.Lock()

    def raw_to_rgb(self, image: EncodedImage, enc: RawEncoding) -> np.ndarray:
        """Full-size (H, W, 3) RGB uint8 through `imgmsg_to_cv2(msg, 'rgb8')`."""
        if (enc.sample_bytes > 1 and image.is_bigendian) or enc.name in self._unknown:
            return self._opencv.raw_to_rgb(image, enc)
        msg = SimpleNamespace(height=image.height, width=image.width, step=image.step,
                              encoding=_BRIDGE_NAMES.get(enc.name, enc.name),
                              is_bigendian=int(image.is_bigendian), data=image.data)
        try:
            return np.ascontiguousarray(self._bridge.imgmsg_to_cv2(msg, 'rgb8'))
        except (self._error, TypeError, ValueError) as err:
            with self._lock:
                first = enc.name not in self._unknown
                self._unknown.add(enc.name)
            if first:
                LOG.warning('cv_bridge cannot convert %s (%s); OpenCV converts it instead',
                            enc.name, err)
            return self._opencv.raw_to_rgb(image, enc)

    def compressed_to_rgb(self, data: bytes, reduction: int = 1) -> np.ndarray:
        """`compressed_imgmsg_to_cv2` at full scale; OpenCV's reduced DCT scale otherwise."""
        if reduction != 1:
            return self._opencv.compressed_to_rgb(data, reduction)
        try:
            px = self._bridge.compressed_imgmsg_to_cv2(SimpleNamespace(data=data), 'passthrough')
        except (self._error, cv2.error) as err:
            raise ConversionError(str(err).strip().splitlines()[-1]) from err
        return _decoded_to_rgb(px)


Converter = OpenCvConverter | CvBridgeConverter


@dataclass(frozen=True)
class ConverterChoice:
    """The conversion path in use and why it was chosen."""

    converter: Converter
    reason: str


def choose_converter() -> ConverterChoice:
    """Take cv_bridge when it imports, else OpenCV; log the choice and its reason."""
    try:
        from cv_bridge import CvBridge, CvBridgeError  # noqa: PLC0415 - optional, ROS installs only
        bridge = CvBridge()
    except Exception as err:  # noqa: BLE001 - ImportError, or a broken ROS install's errors
        choice = ConverterChoice(
            OpenCvConverter(), f'cv_bridge is not importable ({type(err).__name__}: {err}); '
                               f'converting with OpenCV {cv2.__version__}')
    else:
        choice = ConverterChoice(CvBridgeConverter(bridge, CvBridgeError),
                                 'cv_bridge imported: converting as ROS does')
    LOG.info('image conversion: %s (%s)', choice.converter.path, choice.reason)
    return choice


@functools.cache
def converter() -> Converter:
    """Return the process's converter, chosen (and logged) on first use."""
    return choose_converter().converter
