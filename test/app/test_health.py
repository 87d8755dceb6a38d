"""Rolling timings, event rates and input ages (diagnostic_updater conventions) without ROS."""
from __future__ import annotations

import math

from alpamayo_offload.app.health import (
    ERROR,
    OK,
    WARN,
    EventRate,
    RollingWindow,
    StageTimings,
    StreamMonitor,
    judge_ages,
    judge_rate,
    judge_stream_rates,
)


def test_rolling_window_last_median_p90_over_the_newest_values() -> None:
    window = RollingWindow(10)
    assert all(math.isnan(v) for v in window.summary())
    for v in [*range(100, 110), *range(1, 11)]:   # the first ten fall out
        window.add(float(v))
    window.add(float('nan'))                     # a stage that did not run: skipped
    assert window.summary() == (10.0, 5.0, 9.0) and len(window) == 10


def test_stage_timings_flat_keys_and_count() -> None:
    timings = StageTimings(('t_total_ms', 't_decode_ms'), size=3)
    for v in (1.0, 2.0, 3.0, 4.0):
        timings.add({'t_total_ms': v, 'other': 9.0})
    summary = timings.summary()
    assert (summary['t_total_ms.last'], summary['t_total_ms.p50'],
            summary['t_total_ms.p90']) == (4.0, 3.0, 4.0)
    assert math.isnan(summary['t_decode_ms.p50']) and timings.count == 3


def test_event_rate_over_the_window_and_its_verdicts() -> None:
    rate = EventRate(window=2)
    assert math.isnan(rate.sample(0.0).hz)
    for _ in range(4):
        rate.event()
    r = rate.sample(1.0)
    assert (r.hz, r.events_in_window, r.total) == (4.0, 4, 4)
    assert judge_rate(r, 4.0, 0.2) == (OK, 'desired frequency met')
    assert judge_rate(r, 10.0, 0.2)[0] == WARN and 'too low' in judge_rate(r, 10.0, 0.2)[1]
    assert 'too high' in judge_rate(r, 2.0, 0.2)[1]
    rate.sample(2.0)
    silent = rate.sample(3.0)          # window: samples at 1, 2, 3 s, no events since 1 s
    assert silent.hz == 0.0 and judge_rate(silent, 4.0, 0.2)[0] == ERROR
    rate.reset_window()
    assert math.isnan(rate.sample(4.0).hz) and rate.sample(4.0).total == 4


def test_stream_monitor_ages_rates_and_verdicts() -> None:
    streams = StreamMonitor(['camera_0', 'odometry'])
    streams.rates(0.0)
    streams.received('camera_0', 2_000_000_000)
    streams.received('camera_0', 1_000_000_000)   # older (reordered): newest kept
    ages = streams.ages_s(2_500_000_000)
    assert ages['camera_0'] == 0.5 and math.isnan(ages['odometry'])
    level, message = judge_ages(ages, 1.0)
    assert level == WARN and 'never received: odometry' in message
    assert judge_ages({'camera_0': 1.5}, 1.0)[1] == 'older than 1 s: camera_0 1.50 s'
    rates = streams.rates(1.0)
    assert rates['camera_0'].hz == 2.0 and rates['odometry'].hz == 0.0
    assert judge_stream_rates(rates) == (WARN, 'nothing received in the last 1.0 s on: odometry')
