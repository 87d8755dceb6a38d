"""End-to-end replay on generated bags with a planted prediction: zero, offsets, reports."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from replay_doubles import PlantedPlannerDouble, replay_config
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.replay.report import DETERMINISTIC_KEYS, SCHEMA, SCHEMA_VERSION, _plan_line
from alpamayo_offload.replay.session import ResultBagOptions, prepare, replay_session

ZERO_KEYS = ('ade', 'fde', 'min_ade', 'min_fde', 'min_ade/by_t=3.0', 'lat_err/by_t=1.0',
             'lon_err/by_t=3.0', 'heading_err_deg')


def _run(bag_factory, tmp_path: Path, offsets=((0.0, 0.0, 0.0),), bev: int = 0,
         result_bag: ResultBagOptions | None = None, **drive):
    path, drive_cfg = bag_factory(**drive)
    cfg = replay_config(drive_cfg)
    bags = prepare([path], cfg)
    planner = PlantedPlannerDouble(bags[0], cfg.assembly, offsets)
    return replay_session(bags, cfg, planner, tmp_path / 'report', model_info={'model': 'planted'},
                          progress=False, result_bag=result_bag, bev_count=bev)


@pytest.mark.parametrize('drive', [
    {},
    {'storage': 'sqlite3'},
    {'image_format': 'jpeg'},
    {'camera_rate_hz': 30.0, 'jitter_s': 0.008},
    {'odom_rate_hz': 100.0},
], ids=['mcap-raw', 'sqlite3', 'compressed-jpeg', 'cam30hz-jitter', 'odom100hz'])
def test_planted_ground_truth_scores_zero(bag_factory, tmp_path: Path, drive: dict) -> None:
    res = _run(bag_factory, tmp_path, **drive)
    doc = res.metrics
    assert res.exit_code == 0 and doc['complete']
    assert doc['counts']['scored'] == doc['counts']['evaluation_times'] >= 4
    assert doc['counts']['rejected'] == 0
    for key in ZERO_KEYS:
        assert doc['accuracy'][key]['max'] == 0.0, key


def test_known_offset_is_measured_exactly(bag_factory, tmp_path: Path) -> None:
    res = _run(bag_factory, tmp_path, offsets=((0.3, -0.4, 0.0),), yaw_rate=0.0)
    acc = res.metrics['accuracy']
    for key in ('ade', 'fde', 'min_ade', 'min_fde', 'min_ade/by_t=0.5', 'min_fde/by_t=5.0'):
        assert acc[key]['mean'] == pytest.approx(0.5, abs=1e-9), key
        assert acc[key]['p90'] == pytest.approx(0.5, abs=1e-9), key
    assert acc['lon_err/by_t=1.0']['median'] == pytest.approx(0.3, abs=1e-9)
    assert acc['lat_err/by_t=3.0']['median'] == pytest.approx(0.4, abs=1e-9)
    assert acc['heading_err_deg']['max'] == 0.0


def test_several_samples_use_min_over_samples(bag_factory, tmp_path: Path) -> None:
    res = _run(bag_factory, tmp_path, offsets=((0, 2.0, 0), (0, 0.5, 0), (0, -1.0, 0)))
    acc = res.metrics['accuracy']
    assert acc['ade']['mean'] == pytest.approx(2.0)          # sample 0, Alpamayo's "top"
    assert acc['min_ade']['mean'] == pytest.approx(0.5)
    assert acc['min_fde/by_t=1.0']['max'] == pytest.approx(0.5)


def test_camera_dropout_is_counted_and_listed(bag_factory, tmp_path: Path) -> None:
    res = _run(bag_factory, tmp_path, dropout_slot=6, dropout_after_s=2.0)
    doc = res.metrics
    c = doc['counts']
    assert c['done'] == c['evaluation_times'] == c['scored'] + c['rejected']
    assert c['scored'] >= 1 and c['by_reason'].get('camera_stopped', 0) >= 1
    listed = [r for r in doc['rejected'] if r['reason'] == 'camera_stopped']
    assert listed and all('camera slot 6' in r['message'] for r in listed)
    report = (tmp_path / 'report' / 'report.md').read_text()
    assert 'camera_stopped' in report


def test_report_directory_contents(bag_factory, tmp_path: Path) -> None:
    res = _run(bag_factory, tmp_path, offsets=((0.0, 0.2, 0.0),), bev=2,
               result_bag=ResultBagOptions())
    out = tmp_path / 'report'
    doc = json.loads((out / 'metrics.json').read_text())
    assert doc['schema'] == SCHEMA and doc['schema_version'] == SCHEMA_VERSION
    assert set(DETERMINISTIC_KEYS) <= set(doc)
    assert {'mean', 'median', 'p90'} <= set(doc['latency_ms']['assembly'])
    assert doc['error_by_horizon_m']['t_s'][-1] == 6.4
    for png in ('bev_0.png', 'bev_1.png', 'error_vs_horizon.png', 'latency_per_stage.png'):
        assert (out / png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', png
    md = (out / 'report.md').read_text()
    for text in ('## Accuracy', '## Latency per stage', '## Configuration', '## Model and plan',
                 '## Machine', '`/sensing/camera_0/image`', 'planted', 'min_ade/by_t=3.0',
                 '![bev_0.png](bev_0.png)'):
        assert text in md, text
    assert res.exit_code == 0


def test_result_bag_holds_paths_stamped_at_t0(bag_factory, tmp_path: Path) -> None:
    opts = ResultBagOptions(storage='sqlite3')
    res = _run(bag_factory, tmp_path, result_bag=opts)
    bags = list((tmp_path / 'report' / 'result_bags').iterdir())
    assert len(bags) == 1
    samples = {s['t0_ns'] for s in res.metrics['samples']}
    with AnyReader(bags, default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        assert topics == {opts.path_topic: 'nav_msgs/msg/Path',
                          opts.diagnostics_topic: 'diagnostic_msgs/msg/DiagnosticArray'}
        paths = [(t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()
                 if c.topic == opts.path_topic]
    assert len(paths) == len(samples)
    for log_ns, msg in paths:
        stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        assert stamp == log_ns and stamp in samples
        assert msg.header.frame_id == 'base_link' and len(msg.poses) == 64
        last = msg.poses[-1].header.stamp
        assert last.sec * 10**9 + last.nanosec == stamp + 6_400_000_000
    xs = np.array([p.pose.position.x for p in paths[0][1].poses])
    assert np.all(np.diff(xs) > 0)   # the drive goes forward


def test_several_bags_in_one_run(bag_factory, tmp_path: Path) -> None:
    mcap, drive = bag_factory()
    sqlite, _ = bag_factory(storage='sqlite3')
    cfg = replay_config(drive)
    bags = prepare([mcap, sqlite], cfg)
    # Same drive in both storages: one odometry serves the planted double for both bags.
    planner = PlantedPlannerDouble(bags[0], cfg.assembly, ((0.0, 1.0, 0.0),))
    res = replay_session(bags, cfg, planner, tmp_path / 'r', model_info={}, progress=False,
                         result_bag=ResultBagOptions(), bev_count=0)
    doc = res.metrics
    assert [b['storage'] for b in doc['bags']] == ['mcap', 'sqlite3']
    assert doc['counts']['scored'] == sum(b['scored'] for b in doc['bags'])
    assert doc['counts']['scored'] == 2 * len(bags[0].ticks)
    assert doc['accuracy']['min_ade']['max'] == pytest.approx(1.0)
    assert len(list((tmp_path / 'r' / 'result_bags').iterdir())) == 2


def test_report_sets_the_plans_prediction_beside_the_measurement() -> None:
    doc = {'plan': {'plan.predicted_latency_s': 1.5, 'plan.cpu_sensitive_phases': 'decode'},
           'latency_ms': {'total': {'median': 1650.0}}}
    line = _plan_line(doc)[0]
    assert 'predicted 1.500 s' in line and '(+10.0%)' in line and 'follows the CPU' in line
    assert _plan_line({'plan': {}, 'latency_ms': {}}) == []
