"""`bench_product --smoke`: engine, replay and the live node (real rclpy) on one tiny plan."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench import bench_product

pytestmark = pytest.mark.slow


def test_smoke_measures_every_path_beside_the_plan(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'out'
    assert bench_product.main(['--smoke', '--out', str(out), '--runs', '2', '--warmup', '1',
                               '--duration', '4', '--trace', '--work', str(tmp_path / 'w')]) == 0
    doc = json.loads((out / 'bench_product.json').read_text())
    (row,) = doc['budgets']
    assert row['budget_gib'] == 0.6 and row['predicted_ms']['total'] > 0
    assert 'predicted_ms:' in row['plan_file'] and 'cpu_budget:' in row['plan_file']
    for name in bench_product.PATHS:
        got = row['paths'][name]
        stages = got['stages_ms']
        assert set(bench_product.STAGES) <= set(stages), (name, got)
        assert all(stages[s]['n'] == 2 for s in bench_product.STAGES), (name, stages)
        assert stages['total']['p90'] >= stages['total']['median'] > 0
        with gzip.open(out / f'trace_{name}_0.6GiB.json.gz') as trace:
            assert json.load(trace)['traceEvents'], name
    node = row['paths']['node']
    assert node['state'] == 'active' and node['torch_threads'] == '1'
    assert node['plan_status']['values']['window'] == '2'
    assert float(node['plan_status']['values']['total.predicted_ms']) > 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-5].split()[:2] == ['GiB', 'path'] and printed[-4].split()[1] == 'plan'
    assert [line.split()[1] for line in printed[-3:]] == ['engine', 'replay', 'node']
