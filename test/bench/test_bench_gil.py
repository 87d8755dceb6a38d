"""`bench_gil --smoke`: the op loop timed alone and beside the real node under a live drive."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_gil

pytestmark = pytest.mark.slow


def test_smoke_times_the_op_loop_beside_each_node_configuration(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'gil.json'
    only = ['events, rclpy msgs', 'events, raw msgs', 'odometry only, raw msgs']
    assert bench_gil.main(['--smoke', '--only', *only, '--json', str(out)]) == 0
    rows = json.loads(out.read_text())['rows']
    assert [r['condition'].strip() for r in rows] == ['alone', *only]
    for row in rows:
        assert row['wall_s'] > 0 and row['cpu_s'] > 0 and len(row['loops']) == 2
    for row in rows[1:]:
        assert row['cpu_s_per_s']['executor'] >= 0
        assert row['received_hz']['odometry'] > 0, row
    assert rows[1]['received_total']['camera_0'] > 0
    assert rows[3]['received_total']['camera_0'] == 0
    table = capfd.readouterr().out.splitlines()
    assert table[2].split()[:3] == ['condition', 'op', 'loop']
    assert table[4].split()[0] == 'alone' and 'slowdown' in table[2]
