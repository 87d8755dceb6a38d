"""`python -m bench.diag predict-rows`: re-predicting committed bench rows on the CPU.

Both kinds of folder: `bench_workloads` runs (rows.jsonl, profile_*.json) and a
`bench_compress --plan-from` run (rows.json, profile.json), with its what-if enqueue time.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from alpamayo_offload.planning import load_profile
from bench.diag.__main__ import main
from bench.diag.measured_rows import (
    Pricing,
    folder_kind,
    measured_rows,
    parse_host_ms,
    with_host_ms,
)
from bench.diag.predict_rows import repredict

RESULTS = Path(__file__).resolve().parents[2] / 'docs' / 'results'
RUNS = RESULTS / '2026-12-02d-h200'
COMPRESS = RESULTS / '2026-12-02-h200' / 'compress'


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


def test_the_folder_kind_is_told_by_its_files(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert folder_kind(RUNS / 'wl2s') == 'bench_workloads'
    assert folder_kind(COMPRESS) == 'bench_compress'
    (tmp_path / 'rows.json').write_text('[]')       # no profile.json beside it
    with pytest.raises(ValueError, match='neither a bench_workloads run'):
        folder_kind(tmp_path)
    assert main(['predict-rows', '--runs', str(tmp_path)]) == 2
    assert 'rows.json and profile.json' in capsys.readouterr().err


def test_the_profile_reprices_each_compress_row_as_the_run_predicted_it() -> None:
    rows = measured_rows(COMPRESS, Pricing())
    assert [m.kind for m in rows] == ['raw', 'compressed'] * 3
    for record, m in zip(repredict(COMPRESS), rows, strict=True):
        assert record['phases']['total']['predicted_ms'] == pytest.approx(
            1000 * m.row['predicted_s'], rel=1e-9)
        for phase, seconds in m.row['predicted_phases_s'].items():
            assert record['phases'][phase]['predicted_ms'] == pytest.approx(
                1000 * seconds, rel=1e-9)


def test_another_profile_prices_the_rows(tmp_path: Path) -> None:
    data = json.loads((COMPRESS / 'profile.json').read_text())
    data['machine']['pinned_h2d_gbps'] /= 2
    (tmp_path / 'slow.json').write_text(json.dumps(data))
    own = repredict(COMPRESS)
    slow = repredict(COMPRESS, Pricing(profile=tmp_path / 'slow.json'))
    for mine, theirs in zip(own, slow, strict=True):
        assert theirs['phases']['total']['predicted_ms'] > mine['phases']['total']['predicted_ms']


def test_a_decompression_enqueue_prices_compressed_plans_only() -> None:
    before = repredict(COMPRESS)
    after = repredict(COMPRESS, Pricing(host_ms=parse_host_ms('lm=0.45, expert=0.45,vit=0.45')))
    rows = measured_rows(COMPRESS, Pricing())
    for row, old, new in zip(rows, before, after, strict=True):
        if row.row['compression']:
            assert new['phases']['decode']['predicted_ms'] > old['phases']['decode']['predicted_ms']
        else:
            assert new['phases']['total']['predicted_ms'] == old['phases']['total']['predicted_ms']


def test_bad_what_ifs_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="'lm=x'"):
        parse_host_ms('lm=x')
    with pytest.raises(ValueError, match="'lm=-1'"):
        parse_host_ms('lm=-1')
    profile, _ = load_profile(COMPRESS / 'profile.json')
    with pytest.raises(ValueError, match=r"\['llm'\]"):
        with_host_ms(profile, {'llm': 0.4})
    assert main(['predict-rows', '--runs', str(COMPRESS), '--decompress-host-ms', 'vit']) == 2
    assert 'SEQUENCE=MS' in capsys.readouterr().err
    assert main(['predict-rows', '--runs', str(COMPRESS), '--decompress-host-ms', 'llm=1']) == 2
    assert "['llm']" in capsys.readouterr().err


def test_main_prints_both_kinds_one_line_per_measured_row(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['predict-rows', '--runs', str(RUNS / 'wl2s'), str(COMPRESS)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 4 + 6 + 1              # head, 4 wl2s rows, 6 compress rows, key
    assert lines[1].startswith('wl2s s1 preload whole')
    assert lines[5].startswith('compress r1 raw 16.0')
    # the 12 GiB compressed plan: predicted 1.597 s against 2.316 s measured (45 % over)
    assert lines[8].startswith('compress r1 compressed 12.0')
    assert lines[8].endswith('1597/  2316  -31.0%')
