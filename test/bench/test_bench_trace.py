"""bench.peers.trace: a traced call's trace and op table; `bench_workloads --trace` names."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import torch

from bench import bench_workloads
from bench.peers.trace import trace_call, traced


def test_trace_call_writes_the_trace_and_its_op_table(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv('TEARDOWN_CUPTI', raising=False)
    path = tmp_path / 'call.json.gz'
    x = torch.randn(64, 64)
    assert torch.equal(trace_call(lambda: x @ x, path), x @ x)   # grouped by calling frames
    assert 'traceEvents' in json.loads(gzip.decompress(path.read_bytes()))
    assert 'aten::mm' in path.with_suffix('.txt').read_text()
    assert os.environ['TEARDOWN_CUPTI'] == '1'     # CUPTI leaves the process after the trace
    monkeypatch.setenv('TEARDOWN_CUPTI', '0')      # a caller's own choice stands
    trace_call(lambda: x @ x, path, stacks=False)
    assert 'aten::mm' in path.with_suffix('.txt').read_text()
    assert os.environ['TEARDOWN_CUPTI'] == '0'


def test_traced_records_only_the_given_call(tmp_path: Path) -> None:
    calls = traced(lambda v: v + 1, 2, tmp_path / 'second.json.gz')
    assert [calls(1), calls(2), calls(3)] == [2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ['second.json.gz', 'second.json.txt']


def test_workloads_refuse_to_trace_an_unknown_workload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_workloads.main(['--smoke', '--out', str(tmp_path), '--trace', 's3'])
    assert "--trace 's3'" in capsys.readouterr().err
