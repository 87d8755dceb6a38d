"""`python -m bench.diag predict-rows`: re-predicting committed bench_workloads rows on the CPU."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from bench.diag.__main__ import main
from bench.diag.predict_rows import repredict

RUNS = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-12-02d-h200'


@pytest.mark.parametrize('run', ['wl2s', 'wl15'])
def test_predict_rows_reproduces_the_bench_predictions(run: str) -> None:
    rows = [json.loads(line) for line in (RUNS / run / 'rows.jsonl').read_text().splitlines()]
    saved = [r for r in rows if r.get('status') == 'ok' and r['kind'] in ('preload', 'planned')]
    got = repredict(RUNS / run)
    assert len(got) == len(saved)
    for record, row in zip(got, saved, strict=True):
        assert math.isclose(record['phases']['total']['predicted_ms'],
                            1000 * row['predicted_s'], rel_tol=1e-9)
        for phase, ms in row.get('predicted_ms', {}).items():
            assert math.isclose(record['phases'][phase]['predicted_ms'], ms, rel_tol=1e-9)
        assert 'at_row_machine' not in record       # these rows probed nothing


def test_predict_rows_prices_a_row_at_its_probes(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(RUNS / 'wl15' / 'profile_s1.json', tmp_path)
    row = json.loads((RUNS / 'wl15' / 'rows.jsonl').read_text().splitlines()[1])
    then = json.loads((tmp_path / 'profile_s1.json').read_text())['settings'][
        'host_issue_probe_us']
    row.update(row_host_issue_us=[x / 2 for x in then], row_link_gbps=[row['link_gbps']])
    (tmp_path / 'rows.jsonl').write_text(json.dumps(row) + '\n')
    assert main(['predict-rows', '--runs', str(tmp_path), '--json',
                 str(tmp_path / 'out.json')]) == 0
    assert '@row' in capsys.readouterr().out
    record, = json.loads((tmp_path / 'out.json').read_text())
    plain, there = record['phases'], record['at_row_machine']
    # a CPU twice as fast: the host-bound phases get faster, the copy-bound diffusion barely
    assert there['vision']['predicted_ms'] < 0.9 * plain['vision']['predicted_ms']
    assert there['diffusion']['predicted_ms'] == pytest.approx(
        plain['diffusion']['predicted_ms'], rel=0.01)
