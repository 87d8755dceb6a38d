from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.app.synthetic_drive import (
    DriveConfig,
    Fault,
    _parse_args,
    camera_frame,
    ego_pose,
    write_drive,
)
from alpamayo_offload.assembly import (
    AssemblyConfig,
    InputError,
    assemble,
    decode_image,
    future_ground_truth,
)
from alpamayo_offload.assembly.poses import quat_to_matrix
from testkit.drive_bags import read_drive

NS = 1_000_000_000


VARIANTS = {
    'default': DriveConfig(duration_s=2.0),
    'sqlite3_jpeg_30hz_jitter_100hz_odom': DriveConfig(
        duration_s=2.0, storage='sqlite3', image_format='jpeg', camera_rate_hz=30.0,
        jitter_s=0.005, odom_rate_hz=100.0),
    'png': DriveConfig(duration_s=2.0, image_format='png'),
    'carla_like_bgra8_20hz_map': DriveConfig(
        duration_s=2.0, encoding='bgra8', width=320, height=180, camera_rate_hz=20.0,
        odom_frame_id='map', child_frame_id='ego_vehicle',
        camera_topic='/carla/ego_vehicle/camera_{slot}/image',
        odom_topic='/carla/ego_vehicle/odometry'),
}


@pytest.mark.parametrize('name', list(VARIANTS))
def test_variant_bags_assemble_to_the_true_history(tmp_path: Path, name: str) -> None:
    cfg = VARIANTS[name]
    cams, odom = read_drive(write_drive(tmp_path / 'bag', cfg))
    assert sorted(cams) == list(cfg.camera_slots)
    acfg = AssemblyConfig(image_size_hw=(32, 48), rear_axle_offset=(-1.0, 0.0, 0.0))
    mi = assemble(cams, odom, acfg)
    assert mi.images.shape == (4, 4, 32, 48, 3) and mi.odom_frame_id == cfg.odom_frame_id
    for k in range(16):
        t = (mi.t0_ns - cfg.start_ns) / NS - (15 - k) * 0.1
        pos, q = ego_pose(cfg, t)
        rot = quat_to_matrix(q)
        np.testing.assert_allclose(mi.ego_history_rot[k], rot, atol=1e-6)
        # z and position are linear between samples of a smooth curve: a few mm at most
        np.testing.assert_allclose(mi.ego_history_xyz[k], pos + rot @ [-1.0, 0, 0], atol=5e-3)


def test_dropout_and_ground_truth(tmp_path: Path) -> None:
    cfg = DriveConfig(duration_s=8.0, dropout_slot=2, dropout_after_s=1.0, width=16, height=8)
    cams, odom = read_drive(write_drive(tmp_path / 'bag', cfg))
    assert max(f.stamp_ns for f in cams[2]) < cfg.start_ns + 1 * NS
    assert max(f.stamp_ns for f in cams[0]) > cfg.start_ns + 7 * NS
    xyz, _ = future_ground_truth(odom, cfg.start_ns + NS, AssemblyConfig())
    np.testing.assert_allclose(xyz[-1], ego_pose(cfg, 7.4)[0], atol=5e-3)


def test_deterministic(tmp_path: Path) -> None:
    cfg = DriveConfig(duration_s=0.5, jitter_s=0.01, storage='sqlite3')
    a, _ = read_drive(write_drive(tmp_path / 'a', cfg))
    b, _ = read_drive(write_drive(tmp_path / 'b', cfg))
    assert [f.stamp_ns for f in a[0]] == [f.stamp_ns for f in b[0]]
    assert a[6][-1].data == b[6][-1].data


@pytest.mark.parametrize(('encoding', 'fmt'), [
    ('yuv422', ''), ('yuyv', ''), ('bayer_rggb8', ''), ('bayer_gbrg16', ''), ('mono16', ''),
    ('rgb8', 'rgb8; jpeg compressed bgr8'),
])
def test_camera_encodings_decode_back_to_the_drawn_frame(tmp_path: Path, encoding: str,
                                                         fmt: str) -> None:
    """Each encoding the drive writes decodes (through its bag messages) to the frame drawn."""
    cfg = DriveConfig(duration_s=0.2, encoding=encoding, image_format='jpeg' if fmt else 'raw',
                      compressed_format=fmt)
    cams, _ = read_drive(write_drive(tmp_path / 'bag', cfg))
    frame = cams[1][0]
    assert frame.encoding == (fmt or encoding)
    got = decode_image(frame, None).pixels.astype(float)
    want = camera_frame(cfg, 1, 0.0).astype(float)
    if encoding.startswith('mono'):
        want = np.repeat(want @ np.array([[0.299], [0.587], [0.114]]), 3, axis=2)
    # demosaicing and 4:2:2 chroma blur the frame's sharp bar edges; the rest matches closely
    assert np.abs(got - want).mean() < 6.0, np.abs(got - want).mean()


def test_slot_encodings_give_each_camera_its_own(tmp_path: Path) -> None:
    """Each camera slot's frames are in its own raw encoding and decode to the frame drawn."""
    cfg = DriveConfig(duration_s=0.2, slot_encodings=('yuv422', 'bayer_rggb8', 'mono16', 'rgb8'))
    cams, _ = read_drive(write_drive(tmp_path / 'bag', cfg))
    for slot, encoding in zip(cfg.camera_slots, cfg.slot_encodings, strict=True):
        assert {f.encoding for f in cams[slot]} == {encoding} == {cfg.encoding_of(slot)}
        got = decode_image(cams[slot][0], None).pixels.astype(float)
        want = camera_frame(cfg, slot, 0.0).astype(float)
        if encoding.startswith('mono'):
            want = np.repeat(want @ np.array([[0.299], [0.587], [0.114]]), 3, axis=2)
        assert np.abs(got - want).mean() < 6.0, (encoding, np.abs(got - want).mean())
    for bad in ({'slot_encodings': ('yuv422',)}, {'slot_encodings': ('rgb8',) * 4,
                                                  'image_format': 'jpeg'},
                {'slot_encodings': ('rgb8', 'rgb8', 'rgb8', 'mono9')},
                {'slot_encodings': ('rgb8', 'rgb8', 'rgb8', 'yuv422'), 'width': 161}):
        with pytest.raises(ValueError, match='slot_encodings|must be one of|must be even'):
            DriveConfig(**bad)


@pytest.mark.parametrize(('fmt', 'encoding'), [('raw', 'rgb8'), ('jpeg', 'rgb8')])
def test_too_large_fault_is_rejected_from_the_header(tmp_path: Path, fmt: str,
                                                     encoding: str) -> None:
    cfg = DriveConfig(duration_s=0.2, image_format=fmt, fault='too_large', fault_slot=1,
                      fault_after_s=0.0)
    cams, _ = read_drive(write_drive(tmp_path / 'bag', cfg))
    with pytest.raises(InputError) as err:
        decode_image(cams[1][0], None)
    assert err.value.reason == 'image_too_large'


def test_several_faults_break_their_own_slot_and_window(tmp_path: Path) -> None:
    """`fault` and each of `faults` break only their stream (image faults: their slot), in their
    window; broken frames are still sent."""
    cfg = DriveConfig(duration_s=1.0, fault='step', fault_slot=0, fault_after_s=0.1,
                      fault_duration_s=0.3,
                      faults=(Fault('truncated', 0.2, 0.2, slot=1), Fault('encoding', 0.5, 0.2, 6),
                              Fault('nan_odometry', 0.3, 0.1), Fault('odometry_gap', 0.6, 0.1)))
    cams, odom = read_drive(write_drive(tmp_path / 'bag', cfg))
    want = {0: ((0.1, 0.4), 'image_step_invalid'), 1: ((0.2, 0.4), 'image_truncated'),
            6: ((0.5, 0.7), 'image_encoding'), 2: ((0.0, 0.0), '')}
    for slot, ((start, end), reason) in want.items():
        assert len(cams[slot]) == 11
        for frame in cams[slot]:
            t = (frame.stamp_ns - cfg.start_ns) / NS
            try:
                decode_image(frame, None)
                got = ''
            except InputError as err:
                got = err.reason
            assert got == (reason if start <= t < end - 1e-9 else ''), (slot, t, got)
    times = [(o.stamp_ns - cfg.start_ns) / NS for o in odom]
    assert not [t for t in times if 0.6 <= t < 0.7 - 1e-9]     # the gap
    assert len(times) == 51 - 5
    for t, sample in zip(times, odom, strict=True):
        assert np.isfinite(sample.position).all() == (not 0.3 <= t < 0.4 - 1e-9), t


def test_faults_that_would_break_the_same_messages_are_refused() -> None:
    """Overlapping windows on one stream, or a camera slot the drive lacks, are a ValueError."""
    DriveConfig(faults=(Fault('step', 1.0, 0.5, 0), Fault('step', 1.2, 0.5, 1),
                        Fault('nan_odometry', 1.0, 0.5)))    # other slot, other stream: fine
    for faults in ((Fault('step', 1.0, 0.5, 0), Fault('corrupt', 1.4, 0.5, 0)),
                   (Fault('nan_odometry', 1.0, 0.5), Fault('odometry_gap', 1.2, 0.5, 2)),
                   (Fault('size', 1.0, 0.5, 3),)):
        with pytest.raises(ValueError, match='would break the same messages|not one of'):
            DriveConfig(faults=faults)
    with pytest.raises(ValueError, match='would break the same messages'):
        DriveConfig(fault='truncated', fault_after_s=1.0, faults=(Fault('step', 1.2, 0.5),))
    with pytest.raises(ValueError, match='must be one of'):
        Fault('melted', 1.0, 0.5)


def test_faults_on_the_command_line() -> None:
    _, cfg = _parse_args(['out', '--faults', 'step,1.8,1.2,0', 'nan_odometry,4,1,0'])
    assert cfg.faults == (Fault('step', 1.8, 1.2, 0), Fault('nan_odometry', 4.0, 1.0))

@pytest.mark.parametrize('argv, reason', [
    (['--faults', 'step,1.8,1.2'], 'KIND,AFTER_S,DURATION_S,SLOT'),
    (['--faults', 'melted,1,1,0'], 'must be one of'),
    (['--faults', 'step,nan,1,0'], 'after_s = nan must be finite'),
    (['--faults', 'step,1,inf,0'], 'duration_s = inf must be finite'),
    (['--faults', 'step,1,1,9'], 'camera slot 9, not one of'),
    (['--routes', 'x=left'], '--routes:'),
])
def test_nonsense_on_the_command_line_is_refused_by_name(
        argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse_args(['out', *argv])
    assert reason in capsys.readouterr().err


def test_supplied_frames_are_written_as_given(tmp_path: Path) -> None:
    """A benchmark's own encoded frames (camera-like JPEGs) replace the drawn gradient."""
    cfg = DriveConfig(duration_s=0.5, image_format='jpeg')
    made = {(s, k): f'{s}:{k}'.encode() for s in cfg.camera_slots for k in range(6)}
    bag = write_drive(tmp_path / 'bag', cfg, lambda slot, k: made[(slot, k)])
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
        conns = [c for c in reader.connections if c.msgtype.endswith('CompressedImage')]
        got = [bytes(reader.deserialize(raw, c.msgtype).data)
               for c, _, raw in reader.messages(connections=conns)]
    assert sorted(got) == sorted(made.values())
    with pytest.raises(ValueError, match="image_format 'jpeg'"):
        write_drive(tmp_path / 'raw', DriveConfig(), lambda slot, k: b'')
