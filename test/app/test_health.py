"""Rolling timings, event rates and input ages (diagnostic_updater conventions) without ROS."""
from __future__ import annotations

import math

import pytest

from alpamayo_offload.app.health import (
    ERROR,
    OK,
    WARN,
    EventRate,
    PlanMonitor,
    RefusalWindow,
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


PLAN = {'plan.predicted_ms.vision': 58.0, 'plan.predicted_ms.prefill': 100.0,
        'plan.predicted_ms.decode': 204.0, 'plan.predicted_ms.diffusion': 804.0,
        'plan.predicted_ms.host': 10.0, 'plan.predicted_ms.total': 1176.0,
        'plan.cpu_budget': 'one host thread on Xeon (16 cores)'}


def _stages(decode_ms: float) -> dict[str, float]:
    """One inference's node stage values: on plan except decode."""
    return {'t_vision_ms': 58.0, 't_prefill_ms': 100.0, 't_decode_ms': decode_ms,
            't_diffusion_ms': 804.0, 't_preprocess_ms': 4.0, 't_postprocess_ms': 6.0,
            't_engine_total_ms': 972.0 + decode_ms + 10.0}


def test_plan_monitor_warns_only_for_a_stage_over_the_tolerance_for_a_whole_window() -> None:
    monitor = PlanMonitor.from_plan_info(PLAN, window=3, tolerance=0.1)
    monitor.add(_stages(450.0))
    level, message, values = monitor.judge()
    assert (level, message) == (OK, 'measuring: 1 of 3 inferences')   # one slow run: no verdict
    monitor.add(_stages(220.0))
    monitor.add(_stages(450.0))
    level, message, values = monitor.judge()
    assert level == WARN and 'decode 450.0 ms against 204.0 (+121%)' in message
    assert 'total' in message and 'prefill' not in message and 'Xeon (16 cores)' in message
    assert values['decode.over'] == pytest.approx(450.0 / 204.0 - 1)
    assert values['host.p50_ms'] == 10.0 and values['window'] == 3
    for _ in range(2):   # two of three within 10 %: the median is back on plan
        monitor.add(_stages(210.0))
    level, message, _ = monitor.judge()
    assert level == OK and message.startswith('every stage within 10% of the plan')


def test_plan_monitor_without_predictions_says_so_and_ignores_bad_values() -> None:
    level, message, values = PlanMonitor.from_plan_info({}, 3, 0.1).judge()
    assert level == OK and 'plan.predicted_ms' in message and values == {}
    partial = PlanMonitor.from_plan_info({'plan.predicted_ms.decode': 'fast',
                                          'plan.predicted_ms.total': 100.0}, 1, 0.1)
    partial.add({'t_engine_total_ms': 200.0, 't_decode_ms': 1.0})
    level, message, values = partial.judge()
    assert level == WARN and 'total 200.0 ms' in message and 'decode.over' not in values
    with pytest.raises(ValueError, match='tolerance'):
        PlanMonitor({}, 3, 0.0)


def test_a_refusal_is_held_with_counts_per_reason_until_the_window_passes_without_one() -> None:
    window = RefusalWindow(hold_s=5.0)
    assert window.held(100.0) is None
    window.record('odometry_nonfinite', 'odometry: NaN', 100.0)
    window.record('image_corrupt', 'camera_0: bad JPEG', 101.0)
    window.record('image_corrupt', 'camera_1: bad JPEG', 102.0)
    held = window.held(104.9)   # good inputs in between change nothing
    assert held is not None and held.reason == 'image_corrupt'
    assert held.message == 'camera_1: bad JPEG' and held.hold_s == 5.0
    assert list(held.counts.items()) == [('image_corrupt', 2), ('odometry_nonfinite', 1)]
    held = window.held(105.5)   # the odometry refusal left the window
    assert held is not None and dict(held.counts) == {'image_corrupt': 2}
    assert window.held(107.0) is None   # 5 s without a refusal: cleared
    window.record('image_corrupt', 'again', 200.0)
    held = window.held(200.0)
    assert held is not None and dict(held.counts) == {'image_corrupt': 1}
    with pytest.raises(ValueError, match='hold_s'):
        RefusalWindow(0.0)
