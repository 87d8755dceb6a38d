"""Recordings shaped like real drives: each scores what it can, names its anomalies, and says why.

The truncated-mcap shape is `test_bad_bags.test_truncated_bag_is_read_up_to_the_damage`.
"""
from __future__ import annotations

import io
import json
import logging
from pathlib import Path

from PIL import Image
from replay_doubles import PlantedPlannerDouble, cdr_stamp, replay_config, rewrite_bag
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.replay import loop
from alpamayo_offload.replay.commands import topic_overrides
from alpamayo_offload.replay.params import load_replay_config
from alpamayo_offload.replay.session import (
    EXIT_FAILED,
    EXIT_NOTHING_SCORED,
    EXIT_OK,
    prepare,
    replay_session,
)

S = 10**9
NODE_YAML = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'


def _replay(path: Path, cfg, out: Path, planner=None):
    bags = prepare([path], cfg)
    planner = planner or PlantedPlannerDouble(bags[0], cfg.assembly)
    return bags, replay_session(bags, cfg, planner, out, model_info={}, progress=False,
                                bev_count=1)


def test_jitter_nan_gap_and_dying_camera(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory(duration_s=12.0, camera_rate_hz=15.0, jitter_s=0.01,
                             odom_rate_hz=100.0, fault='nan_odometry', fault_after_s=3.0,
                             fault_duration_s=0.005, dropout_slot=6, dropout_after_s=9.0)
    gap = (drive.start_ns + 6 * S, drive.start_ns + round(6.6 * S))
    path = rewrite_bag(src, tmp_path / 'drive', lambda t, n, raw: None if (
        t == drive.odom_topic and gap[0] <= cdr_stamp(raw) < gap[1]) else (n, raw))
    bags, res = _replay(path, replay_config(drive), tmp_path / 'r')
    doc = res.metrics
    assert res.exit_code == EXIT_OK and doc['counts']['scored'] >= 4
    kinds = {(a['kind'], a['topic']) for a in doc['anomalies']}
    assert {('odometry_nonfinite', drive.odom_topic), ('gap', drive.odom_topic),
            ('topic_stops', '/sensing/camera_6/image')} <= kinds
    nan = next(a for a in doc['anomalies'] if a['kind'] == 'odometry_nonfinite')
    assert nan['count'] == 1 and nan['affected']['samples'] >= 1
    limited = {s['gt_limit'] for s in doc['samples']}
    assert {'odometry_nonfinite', 'odometry_gap'} <= limited     # cut short, still scored
    by_h = doc['counts']['scored_by_horizon_s']
    assert by_h['0.5'] > by_h['6.4'] and doc['counts']['partial_horizons'] >= 2
    assert doc['accuracy']['min_ade/by_t=0.5']['count'] == by_h['0.5']
    stopped = next(a for a in doc['anomalies'] if a['kind'] == 'topic_stops')
    assert stopped['affected']['outcome'].get('camera_stopped', 0) >= 1
    md = (tmp_path / 'r' / 'report.md').read_text()
    assert '## Anomalies' in md and 'odometry_nonfinite' in md and 'topic_stops' in md
    assert doc['bags'][0]['topics'][drive.odom_topic]['rate_hz'] > 90


def test_eight_second_carla_recording_scores_partial_horizons(bag_factory, tmp_path: Path
                                                             ) -> None:
    path, drive = bag_factory(duration_s=8.0, image_format='jpeg', camera_rate_hz=20.0,
                              odom_rate_hz=20.0, camera_topic='/carla/ego_vehicle/rgb_{slot}/image',
                              odom_topic='/carla/ego_vehicle/odometry')
    cams = [f'{s}={drive.topic_for(s)}:compressed' for s in drive.camera_slots]
    cfg = load_replay_config([NODE_YAML], overrides=topic_overrides(cams, drive.odom_topic))
    _, res = _replay(path, cfg, tmp_path / 'r')
    c = res.metrics['counts']
    assert res.exit_code == EXIT_OK and c['scored'] >= 2 and c['rejected'] == 0
    assert c['partial_horizons'] >= c['scored'] - 1 and c['scored_by_horizon_s']['6.4'] <= 1
    assert c['scored_by_horizon_s']['0.5'] == c['scored']


def test_nothing_scorable_exits_non_zero_with_reasons(bag_factory, tmp_path: Path,
                                                      caplog) -> None:
    path, drive = bag_factory(duration_s=1.8)
    caplog.set_level(logging.ERROR)
    _, res = _replay(path, replay_config(drive), tmp_path / 'r')
    assert res.exit_code == EXIT_NOTHING_SCORED
    assert 'nothing was scored at any horizon' in caplog.text and 'no evaluation time' in \
        caplog.text
    assert json.loads((tmp_path / 'r' / 'metrics.json').read_text())['counts']['scored'] == 0


def _bomb_jpeg() -> bytes:
    """A small JPEG whose header claims 16000 x 12000 pixels (what a decoder must refuse)."""
    buf = io.BytesIO()
    Image.new('RGB', (160, 96)).save(buf, format='JPEG')
    data = bytearray(buf.getvalue())
    sof = data.index(b'\xff\xc0')
    data[sof + 5:sof + 9] = (12000).to_bytes(2, 'big') + (16000).to_bytes(2, 'big')
    return bytes(data)


def test_oversized_jpeg_is_a_rejection_not_a_crash(bag_factory, tmp_path: Path) -> None:
    src, drive = bag_factory(image_format='jpeg')
    ts = get_typestore(Stores.ROS2_JAZZY)
    at = drive.start_ns + 3 * S
    topic = drive.topic_for(0)

    def bomb(t: str, n: int, raw: bytes):
        if t == topic and cdr_stamp(raw) == at:
            msg = ts.deserialize_cdr(raw, 'sensor_msgs/msg/CompressedImage')
            msg.data = __import__('numpy').frombuffer(_bomb_jpeg(), dtype='uint8')
            return n, bytes(ts.serialize_cdr(msg, 'sensor_msgs/msg/CompressedImage'))
        return n, raw

    path = rewrite_bag(src, tmp_path / 'bomb', bomb)
    _, res = _replay(path, replay_config(drive), tmp_path / 'r')
    doc = res.metrics
    assert res.exit_code == EXIT_OK and doc['counts']['by_reason'].get('image_too_large', 0) >= 1
    odd = [a for a in doc['anomalies'] if a['kind'] == 'image_unexpected']
    assert odd and odd[0]['topic'] == topic and odd[0]['start_ns'] == at


def test_unexpected_errors_are_recorded_and_the_report_survives(bag_factory, tmp_path: Path,
                                                                monkeypatch) -> None:
    path, drive = bag_factory()
    cfg = replay_config(drive)
    bags = prepare([path], cfg)
    planted = PlantedPlannerDouble(bags[0], cfg.assembly)

    def flaky(model_input):
        if planted.calls == 1:
            planted.calls += 1
            raise RuntimeError('forced failure in one sample')
        return planted(model_input)

    res = replay_session(bags, cfg, flaky, tmp_path / 'a', model_info={}, progress=False,
                         bev_count=0)
    assert res.exit_code == EXIT_OK and res.metrics['complete']
    failed = [json.loads(line) for line in (tmp_path / 'a' / 'samples.jsonl').read_text()
              .splitlines()[1:] if 'unexpected_error' in line]
    assert len(failed) == 1 and 'forced failure in one sample' in failed[0]['traceback']

    def broken(*args, **kwargs):
        raise RuntimeError('forced failure of the run')

    monkeypatch.setattr(loop, 'replay_bag', broken)
    res = replay_session(bags, cfg, planted, tmp_path / 'b', model_info={}, progress=False,
                         bev_count=0)
    assert res.exit_code == EXIT_FAILED
    doc = json.loads((tmp_path / 'b' / 'metrics.json').read_text())
    assert 'forced failure of the run' in doc['error'] and 'Traceback' in doc['error_traceback']
    assert 'forced failure of the run' in (tmp_path / 'b' / 'report.md').read_text()
