"""Decode one encoded frame to an RGB uint8 array, validating everything a sender can get wrong."""
from __future__ import annotations

import io
from typing import Protocol

import numpy as np
from PIL import Image

from .errors import IMAGE_CORRUPT, IMAGE_ENCODING, IMAGE_STEP, IMAGE_TRUNCATED, InputError
from .messages import RAW_ENCODINGS, EncodedImage

Decoded = tuple[np.ndarray, tuple[int, int]]

_CHANNELS = {'rgb8': 3, 'bgr8': 3, 'rgba8': 4, 'bgra8': 4, 'mono8': 1}


class FrameSizing(Protocol):
    """The loaded model's own frame sizing (the engine's `image_sizing`; assembly imports no model).

    A value: two sizings of the same model compare equal.
    """

    def size_hw(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) the model's processor resizes a height x width frame to."""

    def resize(self, image: Image.Image) -> Image.Image:
        """Resize a full RGB frame exactly as the model's processor does."""


# (H, W): a fixed size; FrameSizing: the model's size; None: the native size.
FrameSize = tuple[int, int] | FrameSizing | None


def decode_image(image: EncodedImage, size: FrameSize) -> Decoded:
    """Decode to (H, W, 3) RGB uint8, resized by `size`.

    - (H, W), a fixed size (`images.height/width`): bilinear, and JPEGs are decoded at reduced
      scale through `Image.draft` when the target is much smaller (the DCT scaling makes 1080p
      decodes several times cheaper); the model then resizes this frame again if it wants another
      size.
    - a `FrameSizing`, the model's: the full frame is decoded and resized by the model's own
      resize to its input size, so the model gets the very pixels it would make of the full
      frame (and does not resize again).
    - None: the native size.

    Returns the pixels and the frame's *source* size (height, width), which the assembler compares
    across the frames of one camera.
    """
    if image.compressed:
        return _decode_compressed(image, size)
    return _decode_raw(image, size)


def _decode_raw(image: EncodedImage, size: FrameSize) -> Decoded:
    if image.encoding not in _CHANNELS:
        raise InputError(IMAGE_ENCODING,
                         f'raw encoding {image.encoding!r} at stamp {image.stamp_ns} is not '
                         'supported; '
                         f'publish one of {list(RAW_ENCODINGS)} or CompressedImage jpeg/png')
    h, w, c = image.height, image.width, _CHANNELS[image.encoding]
    if h <= 0 or w <= 0:
        raise InputError(IMAGE_STEP, f'image size {w}x{h} at stamp {image.stamp_ns} is empty')
    if image.step < w * c:
        raise InputError(IMAGE_STEP, f'step {image.step} < width {w} x {c} channels for '
                         f'{image.encoding} at stamp {image.stamp_ns}; the sender sets a wrong '
                         'step')
    need = image.step * h
    if len(image.data) < need:
        raise InputError(IMAGE_TRUNCATED, f'{len(image.data)} bytes < step {image.step} x '
                         f'height {h} '
                         f'= {need} at stamp {image.stamp_ns}; the message is truncated')
    if len(image.data) > need:
        raise InputError(IMAGE_STEP, f'{len(image.data)} bytes > step {image.step} x height {h} '
                         f'= {need} at stamp {image.stamp_ns}; step or height is wrong')
    rows = np.frombuffer(image.data, dtype=np.uint8).reshape(h, image.step)[:, :w * c]
    px = rows.reshape(h, w, c)
    if image.encoding == 'mono8':
        px = np.repeat(px, 3, axis=2)
    elif image.encoding.startswith('bgr'):
        px = px[:, :, 2::-1]
    else:
        px = px[:, :, :3]
    if isinstance(size, tuple):
        if (h, w) != size:
            resized = Image.fromarray(np.ascontiguousarray(px)).resize(
                (size[1], size[0]), Image.Resampling.BILINEAR)
            return np.asarray(resized), (h, w)
    elif size is not None and size.size_hw(h, w) != (h, w):
        return np.asarray(size.resize(Image.fromarray(np.ascontiguousarray(px)))), (h, w)
    return np.ascontiguousarray(px), (h, w)


def _decode_compressed(image: EncodedImage, size: FrameSize) -> Decoded:
    fmt = image.encoding.lower()
    if 'jpeg' not in fmt and 'jpg' not in fmt and 'png' not in fmt:
        raise InputError(IMAGE_ENCODING, f'compressed format {image.encoding!r} at stamp '
                         f'{image.stamp_ns} is not supported; publish jpeg or png')
    try:
        img = Image.open(io.BytesIO(image.data))
        src_hw = (img.height, img.width)
        if isinstance(size, tuple) and img.format == 'JPEG':
            img.draft('RGB', (size[1], size[0]))
        img = img.convert('RGB')
    except OSError as err:  # PIL raises OSError subclasses for both truncated and corrupt data
        reason = IMAGE_TRUNCATED if 'truncated' in str(err).lower() else IMAGE_CORRUPT
        raise InputError(reason, f'{image.encoding} frame at stamp {image.stamp_ns} '
                         f'({len(image.data)} bytes) does not decode: {err}') from err
    except (ValueError, SyntaxError) as err:  # PIL's PNG chunk parser raises SyntaxError
        raise InputError(IMAGE_CORRUPT, f'{image.encoding} frame at stamp {image.stamp_ns} '
                         f'does not decode: {err}') from err
    if isinstance(size, tuple):
        if (img.height, img.width) != size:
            img = img.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    elif size is not None:
        img = size.resize(img)
    return np.asarray(img), src_hw
