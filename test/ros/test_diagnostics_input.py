"""The node's `input` status: a refusal for broken data stays visible for the hold window."""
from __future__ import annotations

from typing import Any

from alpamayo_offload.app.health import ERROR, OK, WARN, Rate
from alpamayo_offload.assembly import errors as input_errors
from alpamayo_offload.ros import diagnostics as diag


def _input_status(st: diag.NodeStatus, now_s: float) -> tuple[int, str, dict[str, str]]:
    rate = Rate(float('nan'), 0, 0.0, 0)
    snap = diag.Snapshot(
        hardware_id='cpu', expected_path_hz=1.0, rate_tolerance=0.2, path_rate=rate,
        max_input_age_s=1.0, input_ages_s={}, input_rates={}, timing={}, timed_inferences=0,
        gpu_memory={}, plan_info={}, monotonic_s=now_s)
    (status,) = [s for s in diag.build('n', 0, st, snap).status if s.name == 'n: input']
    return status.level[0], status.message, {kv.key: kv.value for kv in status.values}


def _evaluate(st: diag.NodeStatus, serial: int, now_s: float, err: Any = None) -> None:
    """What the node does for one input evaluation: valid, or refused with a reason."""
    if err is None:
        st.report_input(serial, OK, 'inputs valid', '')
        return
    reason, message = err
    level = diag.input_level(reason)
    st.report_input(serial, level, message, reason)
    st.refused(level, message, reason, now_s)


def test_a_broken_input_stays_in_the_status_between_good_evaluations() -> None:
    st = diag.NodeStatus()
    nan = (input_errors.ODOMETRY_NONFINITE, 'odometry_nonfinite: NaN in the pose')
    for serial, now in enumerate([10.0, 10.25, 10.5, 10.75], start=1):   # every other one bad
        _evaluate(st, serial, now, nan if serial % 2 else None)
        level, message, values = _input_status(st, now)
        assert level == ERROR and message.startswith('odometry_nonfinite: NaN in the pose')
        assert values['reason'] == ('odometry_nonfinite' if serial % 2 else '')
        assert values['last_refusal_reason'] == 'odometry_nonfinite'
        assert values['refused_in_hold.odometry_nonfinite'] == str((serial + 1) // 2)
    assert '(refused in the last 5 s: odometry_nonfinite x2)' in message
    assert _input_status(st, 15.4)[0] == ERROR   # the last refusal (at 10.5 s) still held
    level, message, values = _input_status(st, 15.5)   # 5 s after the last refusal, all good
    assert (level, message) == (OK, 'inputs valid') and values['refused_in_hold'] == '0'
    assert 'last_refusal_reason' not in values


def test_timing_reasons_are_not_held_and_a_failed_evaluation_keeps_its_message() -> None:
    st = diag.NodeStatus()
    _evaluate(st, 1, 10.0, (input_errors.INPUT_STALE, 'input_stale: 0.6 s old'))
    _evaluate(st, 2, 10.1, (input_errors.CAMERA_MISSING, 'camera_missing: no frame of camera 1'))
    assert _input_status(st, 10.1)[0] == ERROR   # reported as it is ...
    _evaluate(st, 3, 10.25)
    assert _input_status(st, 10.25)[:2] == (OK, 'inputs valid')   # ... a state, not a refusal
    st.messages_refused += 1   # as `_message_refused`: a camera message that does not parse
    st.refused(ERROR, 'camera_0: image_malformed: short', input_errors.IMAGE_MALFORMED, 10.3)
    _evaluate(st, 4, 10.5, (input_errors.ODOMETRY_GAP, 'odometry_gap: 0.4 s'))
    level, message, values = _input_status(st, 10.5)   # the evaluation's own reason, raised
    assert level == ERROR and message == ('odometry_gap: 0.4 s (refused in the last 5 s: '
                                          'image_malformed x1)')
    _evaluate(st, 5, 10.75, (input_errors.IMAGE_CORRUPT, 'image_corrupt: bad JPEG'))
    level, message, values = _input_status(st, 10.75)
    assert level == ERROR and message == ('image_corrupt: bad JPEG (refused in the last 5 s: '
                                          'image_corrupt x1, image_malformed x1)')
    assert values['messages_refused'] == '1' and values['refused_in_hold'] == '2'
    assert WARN == diag.input_level(input_errors.ODOMETRY_GAP)
