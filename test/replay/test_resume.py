"""Ctrl-C keeps finished samples, --resume continues them, and equal runs give equal results."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from replay_doubles import PlantedPlannerDouble, replay_config

from alpamayo_offload.replay.errors import ResultStoreError
from alpamayo_offload.replay.report import DETERMINISTIC_KEYS
from alpamayo_offload.replay.session import EXIT_INTERRUPTED, EXIT_OK, prepare, replay_session

OFFSET = ((0.1, -0.2, 0.0), (0.4, 0.1, 0.0))


def _records(out: Path) -> list[dict]:
    lines = (out / 'samples.jsonl').read_text().splitlines()[1:]
    recs = [json.loads(line) for line in lines]
    for r in recs:
        r.pop('latency_s', None)      # measured time: the non-deterministic fields
        r.pop('warmup', None)
    return recs


def _session(bag_factory, out: Path, *, interrupt_at=None, resume=False, rate_hz=4.0):
    path, drive = bag_factory(fault='odometry_gap', fault_after_s=9.0, fault_duration_s=0.5)
    cfg = replay_config(drive, rate_hz=rate_hz)
    bags = prepare([path], cfg)
    planner = PlantedPlannerDouble(bags[0], cfg.assembly, OFFSET, interrupt_at=interrupt_at)
    return replay_session(bags, cfg, planner, out, model_info={'model': 'planted'},
                          resume=resume, progress=False, bev_count=1)


def test_interrupt_then_resume_equals_one_run(bag_factory, tmp_path: Path) -> None:
    full = _session(bag_factory, tmp_path / 'full')
    assert full.exit_code == EXIT_OK
    n = full.metrics['counts']['evaluation_times']
    assert full.metrics['counts']['rejected'] >= 1      # the gap: listed, and resumed alike

    out = tmp_path / 'cut'
    cut = _session(bag_factory, out, interrupt_at=3)
    assert cut.exit_code == EXIT_INTERRUPTED and cut.state.interrupted
    assert len(_records(out)) == 2
    doc = json.loads((out / 'metrics.json').read_text())
    assert doc['interrupted'] and not doc['complete'] and doc['counts']['done'] == 2
    assert 'INTERRUPTED' in (out / 'report.md').read_text()

    resumed = _session(bag_factory, out, resume=True)
    assert resumed.exit_code == EXIT_OK and resumed.metrics['complete']
    assert resumed.metrics['counts']['done'] == n
    assert _records(out) == _records(tmp_path / 'full')
    for key in DETERMINISTIC_KEYS:
        assert resumed.metrics[key] == full.metrics[key], key


def test_two_runs_are_bit_identical(bag_factory, tmp_path: Path) -> None:
    a = _session(bag_factory, tmp_path / 'a')
    b = _session(bag_factory, tmp_path / 'b')
    assert _records(tmp_path / 'a') == _records(tmp_path / 'b')
    ja = json.loads((tmp_path / 'a' / 'metrics.json').read_text())
    jb = json.loads((tmp_path / 'b' / 'metrics.json').read_text())
    assert {k: ja[k] for k in DETERMINISTIC_KEYS} == {k: jb[k] for k in DETERMINISTIC_KEYS}
    assert a.metrics['accuracy'] == b.metrics['accuracy']


def test_existing_results_need_resume(bag_factory, tmp_path: Path) -> None:
    _session(bag_factory, tmp_path / 'r')
    with pytest.raises(ResultStoreError, match=r'already holds replay results; pass --resume'):
        _session(bag_factory, tmp_path / 'r')


def test_resume_refuses_another_configuration(bag_factory, tmp_path: Path) -> None:
    _session(bag_factory, tmp_path / 'r', interrupt_at=2)
    with pytest.raises(ResultStoreError, match=r'different configuration or bags \(differs in: '
                       r'config\)'):
        _session(bag_factory, tmp_path / 'r', resume=True, rate_hz=3.0)


def test_resume_drops_a_half_written_line(bag_factory, tmp_path: Path, caplog) -> None:
    out = tmp_path / 'r'
    _session(bag_factory, out, interrupt_at=4)
    with (out / 'samples.jsonl').open('a') as f:
        f.write('{"bag": "half a rec')            # what a kill during a write leaves
    res = _session(bag_factory, out, resume=True)
    assert 'dropping an unfinished last line' in caplog.text
    assert res.metrics['complete']
    assert _records(out) == _records(out)          # parses: every line is whole again


def test_replay_config_validation_names_field() -> None:
    from alpamayo_offload.app.synthetic_drive import DriveConfig
    cfg = replay_config(DriveConfig())
    with pytest.raises(ValueError, match=r'rate_hz = 0.0 must be a finite number > 0'):
        dataclasses.replace(cfg, rate_hz=0.0)
    with pytest.raises(ValueError, match=r'must be distinct absolute names'):
        dataclasses.replace(cfg, odometry_topic='odom')
