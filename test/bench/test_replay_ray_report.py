"""The Ray replay bench's arithmetic: best run per configuration, overhead, speed-up, table."""
from __future__ import annotations

import pytest

from bench.bench_replay_ray import best_rows, markdown_table, parse_args


def _run(config: str, rate: float, in_sample_s: float = 16.0, equal: bool | None = True
         ) -> dict:
    return {'config': config, 'samples': 36, 'samples_per_s': rate, 'samples_s': 36 / rate,
            'in_sample_s': in_sample_s, 'start_s': 1.0, 'end_to_end_samples_per_s': rate / 2,
            'equal_to_serial': None if config == 'serial' else equal}


def test_best_run_counts_and_overhead_is_time_per_sample_against_serial() -> None:
    runs = [_run('serial', 2.0), _run('ray x1', 1.6), _run('ray x2', 3.0),
            _run('serial', 1.5), _run('ray x1', 1.9, 16.5, equal=False), _run('ray x2', 2.5)]
    rows = {r['config']: r for r in best_rows(runs)}
    assert rows['serial']['samples_per_s'] == 2.0
    assert rows['ray x1']['samples_per_s'] == 1.9
    assert rows['ray x1']['overhead_pct'] == pytest.approx((2.0 / 1.9 - 1) * 100, abs=0.01)
    # Outside the samples: Ray's 36 / 1.9 - 16.5 s against serial's 36 / 2 - 16 s, of 18 s.
    assert rows['ray x1']['outside_overhead_pct'] == pytest.approx(
        ((36 / 1.9 - 16.5) - 2.0) / 18 * 100, abs=0.01)
    assert not rows['ray x1']['runs_equal_to_serial']          # one run differed: said so
    assert rows['ray x2']['speedup'] == 1.5 and 'overhead_pct' not in rows['ray x2']
    table = markdown_table(list(rows.values()))
    assert '+5.3 % (+2.5 %)' in table and '| NO |' in table and '1.50×' in table


def test_worker_counts_must_be_positive() -> None:
    assert parse_args(['--out', 'x', '--workers', '1,2']).workers == [1, 2]
    with pytest.raises(SystemExit):
        parse_args(['--out', 'x', '--workers', '0'])
