"""Every accepted encoding converts to the RGB frame it was made from (OpenCV path).

The test encodes one synthetic RGB frame into each format itself, from first principles:
- packed YUV 4:2:2 with the BT.601 limited-range formula OpenCV's `COLOR_YUV2RGB_UYVY/_YUY2`
  invert (Y = 16 + 0.257 R + 0.504 G + 0.098 B, U = 128 - 0.148 R - 0.291 G + 0.439 B,
  V = 128 + 0.439 R - 0.368 G - 0.071 B), on a frame whose pixel pairs share one colour (4:2:2
  stores one chroma sample per pair); rounding Y/U/V to integers and OpenCV's fixed-point
  arithmetic allow 2 levels;
- Bayer mosaics by sampling each pixel's colour from the pattern; the frame's channels are linear
  in x and y, which bilinear demosaicing reproduces exactly away from the 2-pixel border
  (1 level of rounding allowed);
- 16-bit forms as v * 257 (8 -> 16 bits), expected back as round(v16 * 255 / 65535) (exact);
- JPEG (quality 95: mean error below 2 levels) and PNG (exact).
"""
from __future__ import annotations

import logging
import struct
import sys
import types
import zlib

import cv2
import numpy as np
import pytest

from alpamayo_offload.assembly import (
    RAW_ENCODINGS,
    DecodeOptions,
    EncodedImage,
    InputError,
    choose_converter,
    compressed_codec,
    decode_image,
)
from alpamayo_offload.assembly import convert as convert_mod
from alpamayo_offload.assembly import decode as decode_mod

H, W = 24, 40
_YY, _XX = np.mgrid[0:H, 0:W].astype(np.float64)
# Linear in x and y, inside 20..235 (no clipping in YUV, exact for bilinear demosaicing).
LINEAR = np.dstack([40 + 3 * _XX + 2 * _YY, 200 - 2 * _XX + _YY, 30 + _XX + 4 * _YY])
RGB = np.rint(LINEAR).astype(np.uint8)
PAIRED = np.repeat(RGB[:, ::2], 2, axis=1)        # pixel pairs share one colour (4:2:2)
BAYER = {'rggb': ('RG', 'GB'), 'bggr': ('BG', 'GR'), 'gbrg': ('GB', 'RG'), 'grbg': ('GR', 'BG')}


def raw(encoding: str, samples: np.ndarray, pad: int = 6, big_endian: bool = False,
        ) -> EncodedImage:
    """A raw message of `samples` (H, W[, C]) with `pad` bytes of padding per row."""
    dtype = np.dtype('>u2' if big_endian else '<u2') if samples.dtype == np.uint16 else np.uint8
    rows = samples.astype(dtype).reshape(H, -1).view(np.uint8)
    padded = np.zeros((H, rows.shape[1] + pad), np.uint8)
    padded[:, :rows.shape[1]] = rows
    return EncodedImage(1, 'cam', padded.tobytes(), False, encoding, H, W, padded.shape[1],
                        big_endian)


def yuv422(rgb: np.ndarray, order: str) -> np.ndarray:
    """(H, W, 2) packed 4:2:2 in byte order `order` ('UYVY' or 'YUYV')."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = np.rint(16 + 0.257 * r + 0.504 * g + 0.098 * b)
    u = np.rint(128 - 0.148 * r - 0.291 * g + 0.439 * b)[:, ::2]
    v = np.rint(128 + 0.439 * r - 0.368 * g - 0.071 * b)[:, ::2]
    planes = {'Y0': y[:, ::2], 'Y1': y[:, 1::2], 'U': u, 'V': v}
    names = ('U', 'Y0', 'V', 'Y1') if order == 'UYVY' else ('Y0', 'U', 'Y1', 'V')
    return np.stack([planes[n] for n in names], axis=2).reshape(H, W, 2).astype(np.uint8)


def mosaic(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """(H, W) Bayer samples: each pixel keeps the channel the 2x2 pattern puts there."""
    rows = BAYER[pattern]
    out = np.empty(rgb.shape[:2], rgb.dtype)
    for dy in range(2):
        for dx in range(2):
            out[dy::2, dx::2] = rgb[dy::2, dx::2, 'RGB'.index(rows[dy][dx])]
    return out


def decoded(image: EncodedImage) -> np.ndarray:
    px, src, seconds = decode_image(image, None)
    assert src == (H, W) and px.shape == (H, W, 3) and px.dtype == np.uint8 and seconds > 0
    return px


def reference_case(encoding: str) -> tuple[EncodedImage, np.ndarray, int, int]:
    """(message, expected RGB, border excluded, tolerance in levels) for one raw encoding."""
    to16 = RGB.astype(np.uint16) * 257
    if encoding in ('rgb8', 'bgr8', 'rgba8', 'bgra8'):
        px = RGB[..., ::-1] if encoding.startswith('bgr') else RGB
        if encoding.endswith('a8'):
            px = np.dstack([px, np.full((H, W), 7, np.uint8)])
        return raw(encoding, px), RGB, 0, 0
    if encoding == 'mono8':
        return raw(encoding, RGB[..., 1]), np.repeat(RGB[..., 1:2], 3, 2), 0, 0
    if encoding == 'mono16':
        v = np.random.default_rng(0).integers(0, 65536, (H, W), dtype=np.uint16)
        want = np.floor(v.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
        return raw(encoding, v), np.repeat(want[..., None], 3, 2), 0, 0
    if encoding in ('yuv422', 'uyvy', 'yuv422_yuy2', 'yuyv'):
        order = 'UYVY' if encoding in ('yuv422', 'uyvy') else 'YUYV'
        return raw(encoding, yuv422(PAIRED, order)), PAIRED, 0, 2
    pattern, bits = encoding[6:10], encoding[10:]
    samples = mosaic(to16 if bits == '16' else RGB, pattern)
    return raw(encoding, samples), RGB, 2, 1


@pytest.mark.parametrize('encoding', sorted(RAW_ENCODINGS))
def test_raw_encoding_converts_to_its_reference(encoding: str) -> None:
    image, want, border, tol = reference_case(encoding)
    got = decoded(image).astype(int)
    inner = (slice(border, H - border or None), slice(border, W - border or None))
    diff = np.abs(got[inner] - want[inner].astype(int))
    assert diff.max() <= tol, (encoding, diff.max(), np.argwhere(diff > tol)[:5])


@pytest.mark.parametrize('encoding', ['mono16', 'bayer_grbg16'])
def test_big_endian_16_bit_samples_give_the_same_frame(encoding: str) -> None:
    image, _, _, _ = reference_case(encoding)
    little = decoded(image)
    samples = np.frombuffer(image.data, np.uint8).reshape(H, image.step)[:, :W * 2]
    big = raw(encoding, samples.view('<u2').reshape(H, W), big_endian=True)
    np.testing.assert_array_equal(decoded(big), little)


def test_table_codes_follow_cv_bridge_bayer_naming() -> None:
    """OpenCV names a pattern by its second row: ROS rggb is OpenCV BayerBG (as in cv_bridge)."""
    assert RAW_ENCODINGS['bayer_rggb8'].cv_code == cv2.COLOR_BayerBG2RGB
    assert RAW_ENCODINGS['bayer_bggr16'].cv_code == cv2.COLOR_BayerRG2RGB
    assert RAW_ENCODINGS['bayer_gbrg8'].cv_code == cv2.COLOR_BayerGR2RGB
    assert RAW_ENCODINGS['bayer_grbg8'].cv_code == cv2.COLOR_BayerGB2RGB
    assert RAW_ENCODINGS['yuv422'].cv_code == cv2.COLOR_YUV2RGB_UYVY


@pytest.mark.parametrize(('fmt', 'codec'), [
    ('jpeg', 'jpeg'), ('jpg', 'jpeg'), ('png', 'png'), ('rgb8; jpeg compressed bgr8', 'jpeg'),
    ('bgr8; png compressed bgr8', 'png'), ('mono8; jpeg compressed mono8', 'jpeg'),
    ('16UC1; compressedDepth png', None), ('webp', None), ('rgb8; tiff compressed bgr8', None),
])
def test_compressed_format_strings(fmt: str, codec: str | None) -> None:
    assert compressed_codec(fmt) == codec


@pytest.mark.parametrize('fmt', ['jpeg', 'png', 'rgb8; jpeg compressed bgr8',
                                 'bgr8; png compressed bgr8'])
def test_compressed_decodes_to_its_reference(fmt: str) -> None:
    ext = '.png' if 'png' in fmt else '.jpg'
    ok, data = cv2.imencode(ext, RGB[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    got = decoded(EncodedImage(1, 'cam', data.tobytes(), True, fmt)).astype(int)
    err = np.abs(got - RGB.astype(int))
    assert (err.max() == 0) if ext == '.png' else (err.mean() < 2), err.mean()


def test_unknown_encodings_are_refused_with_the_supported_list() -> None:
    for image in (EncodedImage(1, 'c', b'\0' * 16, False, '32FC1', 2, 2, 8),
                  EncodedImage(1, 'c', b'\0' * 16, True, 'webp')):
        with pytest.raises(InputError) as err:
            decode_image(image, None)
        assert err.value.reason == 'image_encoding'
        assert 'bayer_rggb16' in err.value.message and 'yuv422' in err.value.message


# --- bad images: each with its reason, checked before decoding where the header allows -------

def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height (no pixel data)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack('>I', len(body)) + kind + body + \
            struct.pack('>I', zlib.crc32(kind + body))
    ihdr = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    return b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IEND', b'')


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A real small JPEG whose frame header (SOF0) is edited to claim width x height."""
    data = bytearray(cv2.imencode('.jpg', RGB)[1].tobytes())
    sof = data.index(b'\xff\xc0')
    data[sof + 5:sof + 9] = struct.pack('>HH', height, width)
    return bytes(data)


@pytest.mark.parametrize(('image', 'max_pixels', 'reason'), [
    (EncodedImage(1, 'c', b'', False, 'rgb8', 6000, 8000, 24000), 40_000_000, 'image_too_large'),
    (EncodedImage(1, 'c', _jpeg_claiming(8000, 6000), True, 'jpeg'), 40_000_000,
     'image_too_large'),
    # 16000 x 12000: Pillow's own decompression-bomb error, whatever the limit
    (EncodedImage(1, 'c', _png_header_only(16000, 12000), True, 'png'), 10**9,
     'image_too_large'),
    (EncodedImage(1, 'c', bytes(40 * 3 * 24), False, 'rgb8', 24, 40, 100), 40_000_000,
     'image_step_invalid'),
    (EncodedImage(1, 'c', bytes(119 * 24), False, 'rgb8', 24, 40, 119), 40_000_000,
     'image_step_invalid'),
    (EncodedImage(1, 'c', bytes(80 * 24 - 1), False, 'yuv422', 24, 40, 80), 40_000_000,
     'image_truncated'),
    (EncodedImage(1, 'c', bytes(78 * 24), False, 'yuv422', 24, 39, 78), 40_000_000,
     'image_step_invalid'),
    (EncodedImage(1, 'c', bytes(81 * 24), False, 'mono16', 24, 40, 81), 40_000_000,
     'image_step_invalid'),
    (EncodedImage(1, 'c', b'\xff\xd8' + b'garbage' * 30 + b'\xff\xd9', True, 'jpeg'), 40_000_000,
     'image_corrupt'),
    (EncodedImage(1, 'c', cv2.imencode('.jpg', RGB)[1].tobytes()[:-40], True, 'jpeg'),
     40_000_000, 'image_truncated'),
    (EncodedImage(1, 'c', cv2.imencode('.png', RGB)[1].tobytes()[:-30], True, 'png'),
     40_000_000, 'image_truncated'),
    (EncodedImage(1, 'c', cv2.imencode('.png', RGB)[1].tobytes(), True, 'jpeg'), 40_000_000,
     'image_corrupt'),
])
def test_bad_images_get_their_reason(image: EncodedImage, max_pixels: int, reason: str) -> None:
    with pytest.raises(InputError) as err:
        decode_image(image, None, DecodeOptions(max_pixels=max_pixels))
    assert err.value.reason == reason, err.value.message


def test_pixel_limit_is_checked_before_any_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*args: object) -> None:
        raise AssertionError('decoded despite the limit')
    monkeypatch.setattr(cv2, 'imdecode', no_decoding)
    with pytest.raises(InputError) as err:
        decode_image(EncodedImage(1, 'c', _jpeg_claiming(1920, 1080), True, 'jpeg'), None,
                     DecodeOptions(max_pixels=1920 * 1080 - 1))
    assert err.value.reason == 'image_too_large' and 'images.max_pixels' in err.value.message


# --- which conversion path is taken, and why -------------------------------------------------

def test_opencv_is_taken_when_cv_bridge_is_not_importable(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, 'cv_bridge', None)   # import fails as on a pip-only install
    with caplog.at_level(logging.INFO, logger=convert_mod.__name__):
        choice = choose_converter()
    assert choice.converter.path == 'opencv'
    assert 'cv_bridge is not importable' in choice.reason and 'OpenCV' in choice.reason
    assert any('image conversion: opencv' in r.getMessage() and 'cv_bridge is not importable'
               in r.getMessage() for r in caplog.records)


class _FakeBridgeError(Exception):
    pass


def test_cv_bridge_is_used_when_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bridge gets message-shaped objects and 'rgb8'; an encoding it refuses goes to OpenCV."""
    calls: list[tuple[str, str]] = []
    opencv = convert_mod.OpenCvConverter()

    class FakeBridge:
        def imgmsg_to_cv2(self, msg: types.SimpleNamespace, desired: str) -> np.ndarray:
            calls.append((msg.encoding, desired))
            if msg.encoding == 'bayer_gbrg8':
                raise _FakeBridgeError('unsupported')
            image = EncodedImage(0, '', msg.data, False, msg.encoding, msg.height, msg.width,
                                 msg.step, bool(msg.is_bigendian))
            return opencv.raw_to_rgb(image, RAW_ENCODINGS[msg.encoding])

        def compressed_imgmsg_to_cv2(self, msg: types.SimpleNamespace,
                                     desired: str) -> np.ndarray:
            calls.append(('compressed', desired))
            return cv2.imdecode(np.frombuffer(msg.data, np.uint8), cv2.IMREAD_UNCHANGED)

    fake = types.ModuleType('cv_bridge')
    fake.CvBridge = FakeBridge          # type: ignore[attr-defined]
    fake.CvBridgeError = _FakeBridgeError   # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, 'cv_bridge', fake)
    choice = choose_converter()
    assert choice.converter.path == 'cv_bridge'
    monkeypatch.setattr(decode_mod, 'converter', lambda: choice.converter)
    for encoding in ('uyvy', 'bayer_gbrg8', 'bayer_gbrg8'):
        image, want, border, tol = reference_case(encoding)
        got = decoded(image).astype(int)[border:H - border or None, border:W - border or None]
        assert np.abs(got - want[border:H - border or None, border:W - border or None]).max() \
            <= tol
    # uyvy under its older name; gbrg refused once, then converted by OpenCV without asking
    assert calls == [('yuv422', 'rgb8'), ('bayer_gbrg8', 'rgb8')]
    png = cv2.imencode('.png', RGB[..., ::-1])[1].tobytes()
    np.testing.assert_array_equal(decoded(EncodedImage(1, 'c', png, True, 'png')), RGB)
    assert calls[-1] == ('compressed', 'passthrough')
