"""Decode one encoded frame to an RGB uint8 array, validating everything a sender can get wrong.

Every check that the header allows runs before any pixel is decoded: the encoding is one of
`encodings.RAW_ENCODINGS` / JPEG / PNG (`image_encoding`), the pixel count is at most
`DecodeOptions.max_pixels` (`image_too_large`; for JPEG/PNG read from the file header), a raw
frame's `step` holds a row (`image_step_invalid`) and its data holds `step x height` bytes
(`image_truncated`; more bytes: `image_step_invalid`, step or height is wrong), a JPEG/PNG ends
with its end marker (`image_truncated`). A payload the codec then cannot decode is
`image_corrupt`.

Pillow is used for two things only: reading a JPEG/PNG header (size, format) without decoding,
which also catches its decompression-bomb error, and the model's own resize (`FrameSizing`,
which must match the model processor's Pillow resize). Pixels are converted by `convert.py`.
"""
from __future__ import annotations

import functools
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import cv2
import numpy as np
from PIL import Image

from .convert import REDUCTIONS, ConversionError, converter
from .encodings import RAW_ENCODINGS, compressed_codec, supported_encodings
from .errors import (
    IMAGE_CORRUPT,
    IMAGE_ENCODING,
    IMAGE_STEP_INVALID,
    IMAGE_TOO_LARGE,
    IMAGE_TRUNCATED,
    InputError,
)
from .messages import EncodedImage

# 8K (7680 x 4320 = 33.2 M pixels) passes; a 16000 x 12000 "bomb" (192 M) does not.
DEFAULT_MAX_PIXELS = 40_000_000
_HEADER_FORMATS = {'JPEG': 'jpeg', 'MPO': 'jpeg', 'PNG': 'png'}
_PNG_END = b'IEND\xaeB`\x82'


class Decoded(NamedTuple):
    """A decoded frame: pixels, the size it was sent at, and how long decoding it took."""

    pixels: np.ndarray               # (H, W, 3) uint8 RGB, resized
    source_hw: tuple[int, int]       # (height, width) as sent
    seconds: float                   # wall time of decode + resize


class FrameSizing(Protocol):
    """The loaded model's own frame sizing (the engine's `image_sizing`; assembly imports no model).

    A value: two sizings of the same model compare equal. A frame is resized to `size_hw` of
    its full size with Pillow's `resample` filter, the model processor's own method.
    """

    resample: int   # a Pillow filter (PIL.Image.Resampling)

    def size_hw(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) the model's processor resizes a height x width frame to."""


class JpegDecoder(Protocol):
    """A JPEG decoder other than the CPU one (the GPU's, provided outside assembly)."""

    name: str

    def decode(self, data: bytes) -> np.ndarray:
        """Full-size (H, W, 3) RGB uint8 on the host; raises on data it cannot decode."""


@dataclass(frozen=True)
class DecodeOptions:
    """Limits, the JPEG decoder and its scaling; from `AssemblyConfig.decode_options`.

    `dct_scaling`: the CPU decodes a JPEG at the largest DCT scale (1/2, 1/4, 1/8) whose frame
    still covers the size it is resized to (`images.jpeg_dct_scaling`).
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    jpeg_decoder: JpegDecoder | None = None     # None: the CPU (cv_bridge / OpenCV)
    dct_scaling: bool = True


# (H, W): a fixed size; FrameSizing: the model's size; None: the native size.
FrameSize = tuple[int, int] | FrameSizing | None


@dataclass(frozen=True)
class PixelJob:
    """The pixel work on a validated JPEG/PNG frame: decode, then resize; plain data.

    What a decode worker process is handed (`decode_workers.py`), so the checks that name a bad
    frame (`decode_image`) always run in the caller's process.
    """

    data: bytes
    reduction: int                    # JPEG DCT scale-down (1: full size)
    target_hw: tuple[int, int]
    resample: int | None              # a Pillow filter (the model's sizing); None: OpenCV


class PixelWorkerError(RuntimeError):
    """A pixel worker (another process) could not run a job: it says nothing about the frame."""


def run_pixel_job(job: PixelJob) -> np.ndarray:
    """Decode and resize in this thread (any decode error: `ConversionError` or `cv2.error`)."""
    return resize_pixels(converter().compressed_to_rgb(job.data, job.reduction), job.target_hw,
                         job.resample)


def resize_pixels(px: np.ndarray, target: tuple[int, int], resample: int | None) -> np.ndarray:
    """Resize (H, W, 3) uint8 to `target`: Pillow's `resample` filter, else OpenCV.

    OpenCV (a fixed `images.height/width`) area-averages when shrinking, bilinear when growing.
    """
    h, w = px.shape[:2]
    if (h, w) == target:
        return px
    if resample is None:
        shrink = target[0] <= h and target[1] <= w
        return cv2.resize(px, (target[1], target[0]),
                          interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return _rgb_array(Image.fromarray(px).resize((target[1], target[0]), resample))


def _resample(size: FrameSize) -> int | None:
    return None if size is None or isinstance(size, tuple) else size.resample


def _rgb_array(image: Image.Image) -> np.ndarray:
    """(H, W, 3) uint8 of an RGB Pillow image, copied with the GIL released.

    `np.asarray(image)` goes through `Image.tobytes`, whose encoder runs with the GIL held (~0.1
    ms for a 576x320 frame, which an inference thread in the same process waits for). Instead
    Pillow pastes the image (in C, GIL released) into an RGBX image mapped onto a NumPy buffer
    (Pillow keeps RGB as 4 bytes per pixel, so the paste is a copy of its rows) and OpenCV drops
    the padding byte (GIL released): the same bytes as `np.asarray`. The mapped image is
    read-only to Pillow's Python API; its core `paste` writes the buffer it maps. Where the
    installed Pillow does not map the buffer that way (checked once, on a small image), the
    frame goes through `np.asarray`.
    """
    if not _mapped_paste_works():
        return np.array(image)
    return _mapped_paste(image)


def _mapped_paste(image: Image.Image, fill: int | None = None) -> np.ndarray:
    w, h = image.size
    padded = np.empty((h, w, 4), np.uint8) if fill is None else np.full((h, w, 4), fill, np.uint8)
    Image.frombuffer('RGBX', (w, h), padded, 'raw', 'RGBX', 0, 1).im.paste(image.im,
                                                                            (0, 0, w, h))
    return cv2.cvtColor(padded, cv2.COLOR_RGBA2RGB)


@functools.cache
def _mapped_paste_works() -> bool:
    """Return whether `_mapped_paste` gives `np.asarray`'s bytes with the installed Pillow.

    It does where `Image.frombuffer` maps the buffer (not copies it) and the core image has
    `paste`.
    """
    probe = Image.fromarray(np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3))
    try:
        # a filled buffer: an empty one may hold a freed buffer's equal bytes by chance
        return bool(np.array_equal(_mapped_paste(probe, fill=255), np.asarray(probe)))
    except (AttributeError, TypeError, ValueError):
        return False


def decode_image(image: EncodedImage, size: FrameSize,
                 options: DecodeOptions = DecodeOptions(),  # noqa: B008 - frozen
                 pixels: Callable[[PixelJob], np.ndarray] = run_pixel_job) -> Decoded:
    """Decode to (H, W, 3) RGB uint8, resized by `size`.

    - (H, W), a fixed size (`images.height/width`): area-averaged when shrinking (bilinear when
      growing); the model then resizes this frame again if it wants another size.
    - a `FrameSizing`, the model's: resized by the model's own resize to the size it gives the
      full frame, so the model does not resize again.
    With `options.dct_scaling` the CPU decodes a JPEG at the largest DCT scale (1/2, 1/4, 1/8)
    whose frame still covers the target (a 1080p frame for a 576x320 model decodes at 1/2,
    about 2x cheaper; for a 96x64 model at 1/8, about 5x): the scaled decode averages 8x8
    blocks, so the model's pixels differ from those it makes of the full frame by a fraction
    of a grey level on average (a few levels at sharp edges). Without it, the full frame is
    decoded and the model gets exactly the pixels of the full frame.
    - None: the native size.

    `pixels` runs the decode + resize of a validated JPEG/PNG on the CPU (default: in this
    thread; `DecodeWorkers.run`: in another process); raw frames and the GPU decoder stay here.
    A `PixelWorkerError` from it propagates (the frame was not judged).

    Returns the pixels, the frame's *source* size (height, width), which the assembler compares
    across the frames of one camera, and the time taken.
    """
    start = time.perf_counter()
    if image.compressed:
        px, src = _decode_compressed(image, size, options, pixels)
    else:
        src = (image.height, image.width)
        px = resize_pixels(_decode_raw(image, options), _target_hw(src, size), _resample(size))
    return Decoded(px, src, time.perf_counter() - start)


def _target_hw(src_hw: tuple[int, int], size: FrameSize) -> tuple[int, int]:
    """(H, W) a frame sent at `src_hw` ends at."""
    if isinstance(size, tuple):
        return size
    return src_hw if size is None else size.size_hw(*src_hw)


def _check_pixels(image: EncodedImage, h: int, w: int, max_pixels: int) -> None:
    if h * w > max_pixels:
        raise InputError(IMAGE_TOO_LARGE, f'{image.encoding} frame at stamp {image.stamp_ns} is '
                         f'{w}x{h} = {h * w} pixels > images.max_pixels {max_pixels}; not '
                         'decoded (raise images.max_pixels if the camera really sends this)')


def _decode_raw(image: EncodedImage, options: DecodeOptions) -> np.ndarray:
    enc = RAW_ENCODINGS.get(image.encoding)
    if enc is None:
        raise InputError(IMAGE_ENCODING, f'raw encoding {image.encoding!r} at stamp '
                         f'{image.stamp_ns} is not supported; publish one of '
                         f'{supported_encodings()}')
    h, w, step, at = image.height, image.width, image.step, f'at stamp {image.stamp_ns}'
    if h <= 0 or w <= 0:
        raise InputError(IMAGE_STEP_INVALID, f'image size {w}x{h} {at} is empty')
    _check_pixels(image, h, w, options.max_pixels)
    row = w * enc.bytes_per_pixel
    if step < row:
        raise InputError(IMAGE_STEP_INVALID, f'step {step} < width {w} x {enc.bytes_per_pixel} '
                         f'bytes per pixel = {row} for {enc.name} {at}; the sender sets a wrong '
                         'step')
    if step % enc.sample_bytes or (enc.channels == 2 and w % 2):
        raise InputError(IMAGE_STEP_INVALID, f'{enc.name} {w}x{h} with step {step} {at}: '
                         f'{enc.name} needs a step in whole {enc.sample_bytes}-byte samples'
                         + (' and an even width (pixel pairs share chroma)'
                            if enc.channels == 2 else ''))
    need = step * h
    if len(image.data) < need:
        raise InputError(IMAGE_TRUNCATED, f'{len(image.data)} bytes < step {step} x height {h} '
                         f'= {need} {at}; the message is truncated')
    if len(image.data) > need:
        raise InputError(IMAGE_STEP_INVALID, f'{len(image.data)} bytes > step {step} x height '
                         f'{h} = {need} {at}; step or height is wrong')
    try:
        return converter().raw_to_rgb(image, enc)
    except (ConversionError, cv2.error) as err:
        raise InputError(IMAGE_CORRUPT, f'{enc.name} frame {at} does not convert: '
                         f'{err}') from err


def _header(image: EncodedImage, codec: str, max_pixels: int) -> tuple[int, int]:
    """(height, width) from the JPEG/PNG header; nothing is decoded."""
    what = f'{image.encoding!r} frame at stamp {image.stamp_ns} ({len(image.data)} bytes)'
    try:
        head = Image.open(io.BytesIO(image.data))
    except Image.DecompressionBombError as err:
        raise InputError(IMAGE_TOO_LARGE, f'{what}: {err}; not decoded') from err
    except (OSError, SyntaxError, ValueError) as err:  # PIL's PNG parser raises SyntaxError
        reason = IMAGE_TRUNCATED if 'truncated' in str(err).lower() else IMAGE_CORRUPT
        raise InputError(reason, f'{what} has no valid {codec} header: {err}') from err
    if _HEADER_FORMATS.get(head.format or '') != codec:
        raise InputError(IMAGE_CORRUPT, f'{what} holds {head.format} data, not {codec}')
    _check_pixels(image, head.height, head.width, max_pixels)
    return head.height, head.width


def _check_complete(image: EncodedImage, codec: str) -> None:
    data = image.data.rstrip(b'\x00') if codec == 'jpeg' else image.data
    end = b'\xff\xd9' if codec == 'jpeg' else _PNG_END
    if not data.endswith(end):
        raise InputError(IMAGE_TRUNCATED, f'{image.encoding!r} frame at stamp {image.stamp_ns} '
                         f'({len(image.data)} bytes) lacks the {codec} end marker; the data is '
                         'truncated')


def _reduction(src_hw: tuple[int, int], size: FrameSize) -> int:
    """Largest JPEG DCT scale-down after which the frame still covers its target size."""
    th, tw = _target_hw(src_hw, size)
    fits = [r for r in REDUCTIONS if -(-src_hw[0] // r) >= th and -(-src_hw[1] // r) >= tw]
    return max(fits, default=1)


def _decode_compressed(image: EncodedImage, size: FrameSize, options: DecodeOptions,
                       pixels: Callable[[PixelJob], np.ndarray]
                       ) -> tuple[np.ndarray, tuple[int, int]]:
    codec = compressed_codec(image.encoding)
    if codec is None:
        raise InputError(IMAGE_ENCODING, f'compressed format {image.encoding!r} at stamp '
                         f'{image.stamp_ns} is not supported; publish one of '
                         f'{supported_encodings()}')
    src_hw = _header(image, codec, options.max_pixels)
    _check_complete(image, codec)
    gpu = options.jpeg_decoder if codec == 'jpeg' else None
    target = _target_hw(src_hw, size)
    try:
        if gpu is not None:
            return resize_pixels(gpu.decode(image.data), target, _resample(size)), src_hw
        scale = (_reduction(src_hw, size) if codec == 'jpeg' and options.dct_scaling else 1)
        return pixels(PixelJob(image.data, scale, target, _resample(size))), src_hw
    except PixelWorkerError:
        raise
    except Exception as err:  # noqa: BLE001 - any codec failure on validated data is corruption
        decoder = gpu.name if gpu is not None else converter().path
        raise InputError(IMAGE_CORRUPT, f'{image.encoding!r} frame at stamp {image.stamp_ns} '
                         f'({len(image.data)} bytes) does not decode ({decoder}): '
                         f'{err}') from err
