"""Decode one encoded frame to an RGB uint8 array, validating everything a sender can get wrong."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from .errors import IMAGE_CORRUPT, IMAGE_ENCODING, IMAGE_STEP, IMAGE_TRUNCATED, InputError
from .messages import RAW_ENCODINGS, EncodedImage

Decoded = tuple[np.ndarray, tuple[int, int]]

_CHANNELS = {'rgb8': 3, 'bgr8': 3, 'rgba8': 4, 'bgra8': 4, 'mono8': 1}


def decode_image(image: EncodedImage, size_hw: tuple[int, int] | None) -> Decoded:
    """Decode to (H, W, 3) RGB uint8, resized to `size_hw` when given.

    Returns the pixels and the frame's *source* size (height, width), which the assembler compares
    across the frames of one camera. JPEGs are decoded at reduced scale through `Image.draft` when
    the target is much smaller (the DCT scaling makes 1080p decodes several times cheaper).
    """
    if image.compressed:
        return _decode_compressed(image, size_hw)
    return _decode_raw(image, size_hw)


def _decode_raw(image: EncodedImage, size_hw: tuple[int, int] | None) -> Decoded:
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
    if size_hw is not None and (h, w) != size_hw:
        resized = Image.fromarray(np.ascontiguousarray(px)).resize(
            (size_hw[1], size_hw[0]), Image.Resampling.BILINEAR)
        return np.asarray(resized), (h, w)
    return np.ascontiguousarray(px), (h, w)


def _decode_compressed(image: EncodedImage, size_hw: tuple[int, int] | None) -> Decoded:
    fmt = image.encoding.lower()
    if 'jpeg' not in fmt and 'jpg' not in fmt and 'png' not in fmt:
        raise InputError(IMAGE_ENCODING, f'compressed format {image.encoding!r} at stamp '
                         f'{image.stamp_ns} is not supported; publish jpeg or png')
    try:
        img = Image.open(io.BytesIO(image.data))
        src_hw = (img.height, img.width)
        if size_hw is not None and img.format == 'JPEG':
            img.draft('RGB', (size_hw[1], size_hw[0]))
        img = img.convert('RGB')
    except OSError as err:  # PIL raises OSError subclasses for both truncated and corrupt data
        reason = IMAGE_TRUNCATED if 'truncated' in str(err).lower() else IMAGE_CORRUPT
        raise InputError(reason, f'{image.encoding} frame at stamp {image.stamp_ns} '
                         f'({len(image.data)} bytes) does not decode: {err}') from err
    except (ValueError, SyntaxError) as err:  # PIL's PNG chunk parser raises SyntaxError
        raise InputError(IMAGE_CORRUPT, f'{image.encoding} frame at stamp {image.stamp_ns} '
                         f'does not decode: {err}') from err
    if size_hw is not None and (img.height, img.width) != size_hw:
        img = img.resize((size_hw[1], size_hw[0]), Image.Resampling.BILINEAR)
    return np.asarray(img), src_hw
