"""Damaged or mismatched bags fail with messages naming bag, topic and time; nothing is lost."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from replay_doubles import (
    PlantedPlannerDouble,
    cdr_stamp,
    replay_config,
    rewrite_bag,
    set_cdr_stamp,
)

from alpamayo_offload.cli import main as cli_main
from alpamayo_offload.replay.config import CameraTopic
from alpamayo_offload.replay.errors import BagError
from alpamayo_offload.replay.loop import prepare_bag
from alpamayo_offload.replay.session import replay_session

S = 10**9


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_bag(bag_factory, tmp_path: Path) -> None:
    _, drive = bag_factory()
    with pytest.raises(BagError, match=r"bag '.*nowhere': does not exist"):
        prepare_bag(tmp_path / 'nowhere', replay_config(drive))


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_truncated_bag_is_read_up_to_the_damage(bag_factory, tmp_path: Path, storage: str,
                                                caplog) -> None:
    src, drive = bag_factory(storage=storage)
    bag = _copy(src, tmp_path / 'cut')
    data = next(f for f in bag.iterdir() if f.suffix in ('.mcap', '.db3'))
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
    (bag / 'metadata.yaml').unlink()          # a killed recorder never writes it
    cfg = replay_config(drive)
    prepared = prepare_bag(bag, cfg)
    assert 'is damaged' in caplog.text and 'complete messages up to the damage' in caplog.text
    assert prepared.info.recovered.startswith('recovered: ')
    assert [a['kind'] for a in prepared.anomalies if a['kind'] == 'recording_damaged']
    end = prepared.odometry[-1].stamp_ns
    assert drive.start_ns + 3 * S < end < drive.start_ns + 8 * S and prepared.ticks
    res = replay_session([prepared], cfg, PlantedPlannerDouble(prepared, cfg.assembly),
                         tmp_path / 'r', model_info={}, progress=False, bev_count=0)
    assert res.exit_code == 0 and res.metrics['counts']['scored'] >= 1
    assert res.metrics['bags'][0]['recovered'].startswith('recovered: ')


def test_bag_cut_before_its_first_message_is_refused(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory()
    bag = _copy(src, tmp_path / 'stub')
    data = next(bag.glob('*.mcap'))
    data.write_bytes(data.read_bytes()[:200])
    with pytest.raises(BagError, match=r"bag '.*stub': cannot be opened .*truncated before its "
                       'first complete message'):
        prepare_bag(bag, replay_config(drive))


def test_corrupt_bag_file(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory(storage='sqlite3')
    bag = _copy(src, tmp_path / 'garbage')
    data = next(bag.glob('*.db3'))
    data.write_bytes(b'not a database' * 1000)
    with pytest.raises(BagError, match=r"bag '.*garbage': cannot be opened"):
        prepare_bag(bag, replay_config(drive))


def test_missing_topic(bag_factory) -> None:
    path, drive = bag_factory()
    cfg = replay_config(drive)
    cfg = type(cfg)(**{**cfg.__dict__, 'odometry_topic': '/localization/kinematic_state'})
    with pytest.raises(BagError, match=r"topic '/localization/kinematic_state': missing \(topics "
                       r"in the bag: .*/localization/odometry \[nav_msgs/msg/Odometry\]"):
        prepare_bag(path, cfg)


def test_topic_with_wrong_type(bag_factory) -> None:
    path, drive = bag_factory()
    cfg = replay_config(drive)
    cams = (CameraTopic(0, '/sensing/camera_0/image', True),) + cfg.cameras[1:]
    cfg = type(cfg)(**{**cfg.__dict__, 'cameras': cams})
    with pytest.raises(BagError, match=r"topic '/sensing/camera_0/image': has type "
                       r'sensor_msgs/msg/Image, expected sensor_msgs/msg/CompressedImage'):
        prepare_bag(path, cfg)


def test_clock_jump_back(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory()
    jump_at = drive.start_ns + 5 * S

    def jump(topic: str, log_ns: int, raw: bytes) -> tuple[int, bytes]:
        stamp = cdr_stamp(raw)
        if topic == drive.odom_topic and stamp >= jump_at:
            return log_ns, set_cdr_stamp(raw, stamp - 3 * S)
        return log_ns, raw

    bag = rewrite_bag(src, tmp_path / 'jump', jump)
    with pytest.raises(BagError, match=r"bag '.*jump', topic '/localization/odometry', "
                       r't=1700000002\.000000000 s: clock jumps back by 2\.980 s '
                       r'\(from t=1700000004\.980000000 s'):
        prepare_bag(bag, replay_config(drive))


def test_empty_topic(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory()
    bag = rewrite_bag(src, tmp_path / 'silent',
                      lambda t, n, raw: None if t == '/sensing/camera_2/image' else (n, raw))
    cfg = replay_config(drive)
    with pytest.raises(BagError, match=r"topic '/sensing/camera_2/image': has no messages"):
        prepare_bag(bag, cfg)


def test_gap_is_reported_and_samples_listed(bag_factory, tmp_path: Path) -> None:
    path, drive = bag_factory(fault='odometry_gap', fault_after_s=4.0, fault_duration_s=1.5)
    cfg = replay_config(drive)
    bag = prepare_bag(path, cfg)
    assert [a['topic'] for a in bag.anomalies] == [drive.odom_topic]
    assert bag.anomalies[0]['kind'] == 'gap' and bag.anomalies[0]['duration_s'] > 1.5
    res = replay_session([bag], cfg, PlantedPlannerDouble(bag, cfg.assembly), tmp_path / 'r',
                         model_info={}, progress=False, bev_count=0)
    gap_start, gap_end = bag.anomalies[0]['start_ns'], bag.anomalies[0]['end_ns']
    samples = res.metrics['samples']
    cut = [s for s in samples if s['t0_ns'] < gap_start < s['t0_ns'] + 64 * S // 10]
    assert cut and all(s['gt_limit'] == 'odometry_gap' and 6.4 not in s['horizons_s']
                       for s in cut)           # scored at the horizons before the gap only
    assert all(s['gt_limit'] != 'odometry_gap' for s in samples if s['t0_ns'] > gap_end)
    affected = res.metrics['anomalies'][0]['affected']
    assert affected['samples'] >= len(cut) and set(affected['ticks_ns']) >= {
        s['tick_ns'] for s in cut}
    assert '| gap | `/localization/odometry` |' in (tmp_path / 'r' / 'report.md').read_text()


def test_damaged_message_mid_bag_is_skipped_and_listed(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory()
    broken_at = drive.start_ns + round(2.6 * S)

    def damage(topic: str, log_ns: int, raw: bytes) -> tuple[int, bytes]:
        if topic == '/sensing/camera_1/image' and cdr_stamp(raw) == broken_at:
            return log_ns, raw[:40]       # header intact, image fields cut off
        return log_ns, raw

    bag_path = rewrite_bag(src, tmp_path / 'damaged', damage)
    cfg = replay_config(drive)
    bag = prepare_bag(bag_path, cfg)
    unreadable = [a for a in bag.anomalies if a['kind'] == 'message_unreadable']
    assert [(a['topic'], a['start_ns']) for a in unreadable] == [
        ('/sensing/camera_1/image', broken_at)]
    out = tmp_path / 'r'
    res = replay_session([bag], cfg, PlantedPlannerDouble(bag, cfg.assembly), out,
                         model_info={}, progress=False, bev_count=0)
    assert res.exit_code == 0 and res.metrics['complete']
    doc = json.loads((out / 'metrics.json').read_text())
    hit = next(a for a in doc['anomalies'] if a['kind'] == 'message_unreadable')['affected']
    assert hit['samples'] >= 1 and sum(hit['outcome'].values()) == hit['samples']


def test_cli_names_the_bad_bag(bag_factory, tmp_path: Path, caplog) -> None:
    _, drive = bag_factory()
    params = tmp_path / 'p.yaml'
    params.write_text('/**:\n  ros__parameters:\n    cameras:\n      topics: ['
                      + ', '.join(drive.topic_for(s) for s in drive.camera_slots)
                      + ']\n    odometry:\n      topic: /nope\n')
    bag, _ = bag_factory()
    code = cli_main(['replay', str(bag), '--params', 'config/alpamayo_offload.yaml',
                     '--params', str(params), '--out', str(tmp_path / 'r'), '--no-progress'])
    assert code == 2
    assert "topic '/nope': missing" in caplog.text
    assert not (tmp_path / 'r').exists()


def test_unstamped_topic(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory()
    bag = rewrite_bag(src, tmp_path / 'unstamped', lambda t, n, raw: (
        n, set_cdr_stamp(raw, 0) if t == drive.odom_topic else raw))
    with pytest.raises(BagError, match=r"topic '/localization/odometry': every header stamp is "
                       r'zero'):
        prepare_bag(bag, replay_config(drive))


@pytest.mark.parametrize(('fault', 'image_format', 'reason'), [
    ('too_large', 'raw', 'image_too_large'), ('too_large', 'jpeg', 'image_too_large'),
    ('step', 'raw', 'image_step_invalid'), ('truncated', 'raw', 'image_truncated'),
    ('truncated', 'jpeg', 'image_truncated'), ('corrupt', 'jpeg', 'image_corrupt'),
])
def test_bad_images_are_rejections_with_their_reason(bag_factory, tmp_path: Path, fault: str,
                                                     image_format: str, reason: str) -> None:
    """A bad frame rejects the samples that select it, with the decoder's reason; no crash."""
    path, drive = bag_factory(fault=fault, image_format=image_format, fault_after_s=3.0,
                              fault_duration_s=1.0)
    cfg = replay_config(drive)
    bag = prepare_bag(path, cfg)
    res = replay_session([bag], cfg, PlantedPlannerDouble(bag, cfg.assembly), tmp_path / 'r',
                         model_info={}, progress=False, bev_count=0)
    counts = res.metrics['counts']
    assert res.state.error is None and counts['by_reason'].get(reason, 0) > 0, counts
    assert counts['done'] > 0, counts
