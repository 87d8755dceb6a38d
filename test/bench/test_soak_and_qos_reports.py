"""The soak and QoS benches' arithmetic: growth slopes after warm-up, /proc sampling, loss table."""
from __future__ import annotations

import math
import os

import pytest

from bench.bench_qos import Case, Outcome, table
from bench.bench_soak import Sample, proc_status, slope_per_10min, summarize


def _sample(t_s: float, rss: float, fds: int = 18, paths_per_s: float = 2.0) -> Sample:
    return Sample(t_s, rss, fds, 19, round(paths_per_s * 10), paths_per_s, 0, '')


def test_growth_is_a_slope_per_10_minutes_after_warm_up() -> None:
    # 200 MiB during warm-up, then +1 MiB per minute: 10 MiB per 10 min.
    samples = [_sample(t, 200.0) for t in (10.0, 20.0)] + \
        [_sample(t, 400.0 + t / 60.0, paths_per_s=1.5 if t == 60.0 else 2.0)
         for t in (30.0, 60.0, 90.0, 120.0)]
    s = summarize(samples, warmup_s=30.0)
    assert s['samples_after_warmup'] == 4
    assert s['rss_mib_slope_per_10min'] == pytest.approx(10.0)
    assert s['fds_slope_per_10min'] == pytest.approx(0.0, abs=1e-9)
    assert s['paths_per_s_min'] == 1.5 and s['paths_per_s_mean'] == pytest.approx(1.875)
    assert math.isnan(slope_per_10min([1.0], [1.0]))   # one sample: no slope


def test_proc_status_reads_this_process() -> None:
    rss, fds, threads = proc_status(os.getpid())
    assert rss > 1.0 and fds >= 3 and threads >= 1


def test_qos_table_has_one_row_per_case_with_loss() -> None:
    case = Case('raw', 4, 10.0, 'best_effort')
    row = Outcome(case, 320, 51, 84.06, 10.0, 1.6, 29.5, 40.2, 50.0, 4.03, 6220800)
    text = table([row])
    assert text.splitlines()[0].startswith('| payload | cameras | rate Hz | subscription')
    assert '| raw | 4 | 10 | best_effort | 320 | 51 | 84.1 | 1.6 | 29.5 | 40.2 | 4.03 |' in text
