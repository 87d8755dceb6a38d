from __future__ import annotations

import io
import math

import numpy as np
import pytest
from PIL import Image

from alpamayo_offload.assembly import (
    AssemblyConfig,
    EncodedImage,
    InputError,
    OdometrySample,
    StampedBuffer,
    assemble,
    check_resolution,
    decode_image,
    future_ground_truth,
    select_inputs,
)
from alpamayo_offload.assembly.poses import matrix_to_quat, quat_to_matrix, slerp

NS = 1_000_000_000
T_START = 1_000 * NS


def yaw_quat(yaw: float) -> tuple[float, float, float, float]:
    return (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))


def odometry(duration_s: float = 3.0, rate: float = 50.0, yaw_rate: float = 0.2,
             speed: float = 5.0, skip: tuple[float, float] | None = None) -> list[OdometrySample]:
    out = []
    for k in range(int(duration_s * rate) + 1):
        t = k / rate
        if skip and skip[0] <= t < skip[1]:
            continue
        out.append(OdometrySample(T_START + round(t * NS), 'odom', 'base_link',
                                  (speed * t, 0.0, 0.0), yaw_quat(yaw_rate * t)))
    return out


def raw_frame(stamp_ns: int, w: int = 32, h: int = 16, value: int = 7) -> EncodedImage:
    data = np.full((h, w, 3), value, np.uint8).tobytes()
    return EncodedImage(stamp_ns, 'cam', data, False, 'rgb8', h, w, w * 3)


def cameras(duration_s: float = 3.0, rate: float = 10.0, slots=(0, 1, 2, 6),
            offsets: dict[int, float] | None = None) -> dict[int, list[EncodedImage]]:
    offsets = offsets or {}
    return {s: [raw_frame(T_START + round((k / rate + offsets.get(s, 0.0)) * NS))
                for k in range(int(duration_s * rate) + 1)] for s in slots}


CFG = AssemblyConfig(image_size_hw=None)


def test_t0_is_oldest_newest_and_frames_are_nearest() -> None:
    cams = cameras(offsets={1: 0.02, 2: -0.03})       # camera 2 lags, camera 1 leads
    sel = select_inputs(cams, odometry(), CFG)
    newest = {s: f[-1].stamp_ns for s, f in cams.items()}
    assert sel.t0_ns == min(newest.values()) == newest[2]
    for slot, frames in zip(sel.camera_slots, sel.frames, strict=True):
        for off, frame in zip(CFG.frame_offsets_s, frames, strict=True):
            target = sel.t0_ns - round(off * NS)
            best = min(cams[slot], key=lambda f: abs(f.stamp_ns - target))
            assert frame is best


def test_frame_beyond_tolerance_is_rejected() -> None:
    cams = cameras()
    del cams[1][-3]                                    # the frame at t0-0.2 s is gone
    with pytest.raises(InputError) as err:
        select_inputs(cams, odometry(), CFG)
    assert err.value.reason == 'frame_mismatch'
    loose = AssemblyConfig(image_size_hw=None, frame_tolerance_s=0.11)
    assert select_inputs(cams, odometry(), loose).t0_ns == cams[0][-1].stamp_ns


@pytest.mark.parametrize(('case', 'reason'), [
    ('missing', 'camera_missing'), ('stopped', 'camera_stopped'), ('stale', 'input_stale'),
    ('nan', 'odometry_nonfinite'), ('gap', 'odometry_gap'), ('short', 'odometry_insufficient'),
    ('odom_stale', 'odometry_stale'), ('no_odom', 'odometry_missing'),
])
def test_input_errors(case: str, reason: str) -> None:
    cams, odom, now = cameras(), odometry(), None
    if case == 'missing':
        cams[6] = []
    elif case == 'stopped':
        cams[2] = cams[2][:-8]
    elif case == 'stale':
        now = cams[0][-1].stamp_ns + 2 * NS
    elif case == 'nan':
        s = odom[-10]
        odom[-10] = OdometrySample(s.stamp_ns, 'odom', 'base_link', (math.nan, 0, 0),
                                   s.orientation_xyzw)
    elif case == 'gap':
        odom = odometry(skip=(2.0, 2.5))
    elif case == 'short':
        odom = [o for o in odom if o.stamp_ns > T_START + 2 * NS]
    elif case == 'odom_stale':
        odom = odom[:-10]
    elif case == 'no_odom':
        odom = []
    with pytest.raises(InputError) as err:
        select_inputs(cams, odom, CFG, now)
    assert err.value.reason == reason
    assert reason in str(err.value)


def test_history_interpolation_rear_axle_and_slerp() -> None:
    # 7 Hz odometry: history times fall between samples, so interpolation is exercised.
    odom = odometry(rate=7.0, yaw_rate=0.3)
    cfg = AssemblyConfig(image_size_hw=None, max_odometry_gap_s=0.2,
                         rear_axle_offset=(-1.5, 0.0, 0.0))
    sel = select_inputs(cameras(), odom, cfg)
    times = (sel.t0_ns - T_START) / NS - np.arange(15, -1, -1) * 0.1
    yaw = 0.3 * times
    rot_true = quat_to_matrix(np.array([yaw_quat(y) for y in yaw]))
    np.testing.assert_allclose(sel.ego_history_rot, rot_true, atol=1e-9)
    axle = np.stack([5.0 * times, 0 * times, 0 * times], 1) + rot_true @ np.array([-1.5, 0, 0])
    np.testing.assert_allclose(sel.ego_history_xyz, axle, atol=1e-9)


def test_slerp_midpoint_and_quat_roundtrip() -> None:
    q = slerp(np.array(yaw_quat(0.0)), np.array(yaw_quat(1.0)), 0.5)
    np.testing.assert_allclose(q, yaw_quat(0.5), atol=1e-12)
    q = slerp(np.array(yaw_quat(0.1)), -np.array(yaw_quat(0.3)), 0.5)   # sign-flipped input
    np.testing.assert_allclose(np.abs(q), np.abs(yaw_quat(0.2)), atol=1e-12)
    rng = np.random.default_rng(0)
    qs = rng.normal(size=(20, 4))
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    qs[qs[:, 3] < 0] *= -1
    np.testing.assert_allclose(matrix_to_quat(quat_to_matrix(qs)), qs, atol=1e-12)


def test_future_ground_truth() -> None:
    odom = odometry(duration_s=9.0)
    t0 = T_START + 2 * NS
    xyz, rot = future_ground_truth(odom, t0, AssemblyConfig())
    assert xyz.shape == (64, 3) and rot.shape == (64, 3, 3)
    np.testing.assert_allclose(xyz[:, 0], 5.0 * (2.0 + 0.1 * np.arange(1, 65)), atol=1e-9)
    with pytest.raises(InputError, match='odometry_insufficient'):
        future_ground_truth(odom, T_START + 4 * NS, AssemblyConfig())


def encode(fmt: str, rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format=fmt)
    return buf.getvalue()


RGB = np.dstack([np.tile(np.arange(40, dtype=np.uint8) * 6, (24, 1)),
                 np.full((24, 40), 100, np.uint8), np.full((24, 40), 200, np.uint8)])


@pytest.mark.parametrize('encoding', ['rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8'])
def test_decode_raw_encodings_with_padding(encoding: str) -> None:
    ch = {'rgb8': 3, 'bgr8': 3, 'rgba8': 4, 'bgra8': 4, 'mono8': 1}[encoding]
    if encoding == 'mono8':
        px, want = RGB[..., :1], np.repeat(RGB[..., :1], 3, 2)
    else:
        px = RGB[..., ::-1] if encoding.startswith('bgr') else RGB
        if ch == 4:
            px = np.dstack([px, np.full((24, 40), 255, np.uint8)])
        want = RGB
    step = 40 * ch + 8                                    # row padding must be skipped
    rows = np.zeros((24, step), np.uint8)
    rows[:, :40 * ch] = px.reshape(24, -1)
    img = EncodedImage(1, 'c', rows.tobytes(), False, encoding, 24, 40, step)
    out, src, _ = decode_image(img, None)
    assert src == (24, 40)
    np.testing.assert_array_equal(out, want)
    small, _, _ = decode_image(img, (12, 20))
    assert small.shape == (12, 20, 3) and small.dtype == np.uint8


@pytest.mark.parametrize('fmt', ['jpeg', 'png'])
def test_decode_compressed(fmt: str) -> None:
    img = EncodedImage(1, 'c', encode(fmt.upper(), RGB), True, fmt)
    out, src, _ = decode_image(img, None)
    assert src == (24, 40) and out.shape == (24, 40, 3)
    assert np.abs(out.astype(int) - RGB).mean() < (4 if fmt == 'jpeg' else 0.01)


def test_jpeg_draft_decode_of_1080p_matches_full_decode() -> None:
    yy, xx = np.mgrid[0:1080, 0:1920]
    rgb = np.dstack([(xx // 8) % 256, (yy // 5) % 256, ((xx + yy) // 12) % 256]).astype(np.uint8)
    img = EncodedImage(1, 'c', encode('JPEG', rgb), True, 'jpeg')
    fast, src, _ = decode_image(img, (320, 576))
    full = np.asarray(Image.fromarray(rgb).resize((576, 320), Image.Resampling.BILINEAR))
    assert src == (1080, 1920) and fast.shape == (320, 576, 3)
    assert np.abs(fast.astype(int) - full).mean() < 6


@pytest.mark.parametrize(('mutate', 'reason'), [
    (lambda i: i.__class__(**{**i.__dict__, 'encoding': '32FC1'}), 'image_encoding'),
    (lambda i: i.__class__(**{**i.__dict__, 'step': 10}), 'image_step_invalid'),
    (lambda i: i.__class__(**{**i.__dict__, 'data': i.data[:-5]}), 'image_truncated'),
    (lambda i: i.__class__(**{**i.__dict__, 'data': i.data + b'xx'}), 'image_step_invalid'),
])
def test_decode_raw_rejects(mutate, reason: str) -> None:
    good = EncodedImage(1, 'c', RGB.tobytes(), False, 'rgb8', 24, 40, 120)
    with pytest.raises(InputError) as err:
        decode_image(mutate(good), None)
    assert err.value.reason == reason


@pytest.mark.parametrize('fmt', ['jpeg', 'png'])
def test_decode_corrupt_and_truncated_compressed(fmt: str) -> None:
    data = encode(fmt.upper(), RGB)
    with pytest.raises(InputError) as err:
        decode_image(EncodedImage(1, 'c', data[:len(data) // 2], True, fmt), None)
    assert err.value.reason == 'image_truncated'
    with pytest.raises(InputError) as err:
        decode_image(EncodedImage(1, 'c', b'\x00garbage' * 20, True, fmt), None)
    assert err.value.reason == 'image_corrupt'
    with pytest.raises(InputError) as err:
        decode_image(EncodedImage(1, 'c', data, True, 'webp'), None)
    assert err.value.reason == 'image_encoding'


def test_assemble_shapes_and_size_mismatch() -> None:
    cams = cameras()
    mi = assemble(cams, odometry(), AssemblyConfig(image_size_hw=(8, 16)))
    assert mi.images.shape == (4, 4, 8, 16, 3) and mi.images.dtype == np.uint8
    assert mi.camera_indices == (0, 1, 2, 6)
    assert mi.ego_history_xyz.shape == (16, 3) and mi.ego_history_rot.shape == (16, 3, 3)
    np.testing.assert_allclose(mi.odom_pose_t0.xyz, mi.ego_history_xyz[-1])
    cams[2][-2] = raw_frame(cams[2][-2].stamp_ns, w=48)   # one frame changes resolution
    with pytest.raises(InputError, match='image_size_mismatch'):
        assemble(cams, odometry(), AssemblyConfig(image_size_hw=(8, 16)))


def test_resolution_change_between_inputs_is_reported_once() -> None:
    cfg = AssemblyConfig(image_size_hw=(8, 16))
    known: dict[int, tuple[int, int]] = {}
    mi = assemble(cameras(), odometry(), cfg)
    assert mi.source_hw == ((16, 32),) * 4
    check_resolution(known, mi)
    check_resolution(known, mi)                       # same sizes: accepted
    cams = cameras()
    cams[6] = [raw_frame(f.stamp_ns, w=48, h=24) for f in cams[6]]   # all 4 frames: new size
    wider = assemble(cams, odometry(), cfg)           # consistent within the input, resized
    with pytest.raises(InputError, match='camera slot 6 changed resolution from 32x16 to 48x24'):
        check_resolution(known, wider)
    check_resolution(known, wider)                    # the new size is accepted from now on
    assert known[6] == (24, 48)


def test_buffer_is_bounded_sorted_and_deduplicated() -> None:
    buf: StampedBuffer[EncodedImage] = StampedBuffer(3)
    for s in (5, 1, 3, 3, 9):
        buf.push(raw_frame(s))
    assert [f.stamp_ns for f in buf.snapshot()] == [3, 5, 9]


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match='camera_slots'):
        AssemblyConfig(camera_slots=(0, 0))
    with pytest.raises(ValueError, match='frame_tolerance_s'):
        AssemblyConfig(frame_tolerance_s=0)
