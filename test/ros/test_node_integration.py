"""The node from its real entry point + parameter file, fed by the player, through real rclpy.

Uses the real Engine with the tiny preset (CPU).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

from alpamayo_offload.app.param_file import default_params_file
from alpamayo_offload.app.synthetic_drive import ODOMETRY_FAULTS, DriveConfig, Fault, write_drive
from alpamayo_offload.assembly import AssemblyConfig, InputError, assemble, check_resolution
from alpamayo_offload.planning import PREDICTED_STAGES, PlanParams, write_plan_params
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.diagnostics import STAGE_KEYS
from alpamayo_offload.ros.session import SessionResult, run_session
from testkit.drive_bags import read_drive
from testkit.side_by_side import run_side_by_side

pytestmark = pytest.mark.slow
NS = 1_000_000_000


def session(tmp_path: Path, drive: DriveConfig, domain_id: int | None = None,
            **overrides: str) -> SessionResult:
    bag = write_drive(tmp_path / 'bag', drive)
    remaps = remaps_for(drive)
    if drive.image_format != 'raw':
        # same node topic names, remapped to the bag's .../compressed topics
        overrides.setdefault('cameras.transports', '[' + ', '.join(['compressed'] * 4) + ']')
    overrides = {'inference.period_s': '0.1', 'images.height': '64', 'images.width': '96',
                 'diagnostics.period_s': '0.25',   # a status sample per inference or two
                 **overrides}
    return run_session(bag, remaps=remaps, overrides=overrides, domain_id=domain_id)


def test_paths_stamped_with_t0_in_frame_with_all_stage_keys(
        drives: dict[str, Future[SessionResult]]) -> None:
    res = drives['paths'].result()
    assert res.node_alive_at_end, res.node_output[-3000:]
    ego = [p for p in res.paths if p.topic.endswith('/path')]
    odom = [p for p in res.paths if p.topic.endswith('/path_odom')]
    assert ego and odom, res.node_output[-3000:]
    # each t0 the inference status reports (sampled each diagnostics period) was published
    reported = {int(s.values['last_t0_ns']) for s in res.status('inference')
                if s.message == 'path published'}
    assert reported and reported <= {p.stamp_ns for p in ego}
    for p in ego:
        assert p.frame_id == 'base_link' and p.xyz.shape == (64, 3)
        assert np.isfinite(p.xyz).all() and np.isfinite(p.quat_xyzw).all()
        np.testing.assert_allclose(np.linalg.norm(p.quat_xyzw, axis=1), 1.0, atol=1e-6)
        # t0 is a camera stamp: 10 Hz frames, so all t0s share the phase of the first one
        assert (p.stamp_ns - ego[0].stamp_ns) % (NS // 10) == 0
    assert all(p.frame_id == 'odom' for p in odom)
    assert sorted(p.stamp_ns for p in ego) == [p.stamp_ns for p in ego]
    done = [s for s in res.status('inference') if s.message == 'path published']
    assert done
    for key in STAGE_KEYS:
        assert math.isfinite(float(done[-1].values[key])), key
    model = res.status('model')[-1].values
    assert model['model_state'] == 'ready' and 'vram_budget_bytes' in model


def test_inputs_faster_than_inference_build_no_backlog(tmp_path: Path) -> None:
    # Ticks at 20 Hz, four times the tiny model's inference rate here. At 50 Hz the node's
    # executor falls behind the bag's 100 Hz odometry on two loaded cores (odometry_stale), which
    # is a separate limit (docs/ros.md), not the latest-only behaviour this test checks.
    res = session(tmp_path, DriveConfig(duration_s=5.0), **{'inference.period_s': '0.05'})
    done = {s.values['inferences']: s for s in res.status('inference')
            if s.message == 'path published'}
    assert len(done) >= 3, res.node_output[-3000:]
    ages = [float(s.values['input_age_ms']) for s in done.values()]
    totals = [float(s.values['t_total_ms']) for s in done.values()]
    dropped = int(res.status('inference')[-1].values['ticks_dropped'])
    assert dropped > 0
    # latest-only: age = wait for the next tick/frame + this inference, never a queue of them.
    # A queue would make the wait before each inference grow with every inference; on this
    # shared 2-core machine a single inference can also find its frames late (the player
    # competes for the CPU), so the bound is on the typical wait and on its growth.
    waits = [age - total for age, total in zip(ages, totals, strict=True)]
    assert statistics.median(waits) < 350.0, (ages, totals)
    assert max(waits) < 1500.0, (ages, totals)
    third = max(1, len(waits) // 3)
    assert statistics.mean(waits[-third:]) < statistics.mean(waits[:third]) + 300.0, waits


# Faults one drive injects one after another (case: fault), each for FAULT_S on camera slot 0,
# then CLEAN_S of valid input (odometry faults: also the span the broken samples stay in the ego
# history) in which the node recovers and publishes paths before the next. One session per image
# format serves all its cases: each fault gives its case's reason, and no other fault does
# (test_shared_fault_drives_give_each_reason_in_its_own_stretch).
WARM_UP_S, FAULT_S, CLEAN_S = 1.8, 1.2, 1.5
EGO_HISTORY_S = 1.6        # 16 poses 0.1 s apart, and the sample before the oldest
RAW_FAULTS = {'encoding': 'encoding', 'truncated': 'truncated', 'step': 'step',
              'too_large': 'too_large', 'size': 'size', 'nan_odometry': 'nan_odometry',
              'odometry_gap': 'odometry_gap'}
JPEG_FAULTS = {'corrupt_jpeg': 'corrupt', 'truncated_jpeg': 'truncated',
               'too_large_jpeg': 'too_large'}
CAMERA_STOP_S = 2.0        # camera slot 2 stops this long before the raw drive ends


def _fault_sequence(faults: dict[str, str], **drive: object) -> DriveConfig:
    """A drive with `faults` one after another; camera slot 2 stops at its end (raw only)."""
    injected, t = [], WARM_UP_S
    for kind in faults.values():
        injected.append(Fault(kind, t, FAULT_S))
        t = round(t + FAULT_S + CLEAN_S + (EGO_HISTORY_S if kind in ODOMETRY_FAULTS else 0.0), 3)
    if drive.get('image_format', 'raw') != 'raw':
        return DriveConfig(duration_s=t, faults=tuple(injected), **drive)
    return DriveConfig(duration_s=t + CAMERA_STOP_S, faults=tuple(injected), dropout_slot=2,
                       dropout_after_s=t, **drive)


# Camera families (case: session): packed YUV, Bayer and 16-bit, one camera slot each in one
# drive (slot 6 stays rgb8), and image_transport's compressed format string in its own.
RAW_FAMILIES = ('yuv422', 'bayer_rggb8', 'mono16')
ENCODING_CASES = {**dict.fromkeys(RAW_FAMILIES, 'encoding raw'),
                  'jpeg_format_string': 'encoding jpeg_format_string'}
SESSION_DRIVES = {
    'paths': DriveConfig(duration_s=4.0),
    'faults raw': _fault_sequence(RAW_FAULTS),
    'faults jpeg': _fault_sequence(JPEG_FAULTS, image_format='jpeg'),
    'camera missing': DriveConfig(duration_s=4.0, camera_slots=(0, 1, 2)),
    'encoding raw': DriveConfig(duration_s=3.0, slot_encodings=(*RAW_FAMILIES, 'rgb8')),
    'encoding jpeg_format_string': DriveConfig(duration_s=3.0, image_format='jpeg',
                                               compressed_format='rgb8; jpeg compressed bgr8'),
}
# case: (session, reason). Faults that end are followed by paths again; camera_stops ends the raw
# drive, camera_missing has its own drive (a camera set without slot 6), and stale_after_end is
# the plain 'paths' session after its bag ended.
FAULT_CASES = {
    **{case: ('faults raw', reason) for case, reason in (
        ('encoding', 'image_encoding'), ('truncated', 'image_truncated'),
        ('step', 'image_step_invalid'), ('too_large', 'image_too_large'),
        ('size', 'image_size_mismatch'), ('nan_odometry', 'odometry_nonfinite'),
        ('odometry_gap', 'odometry_gap'), ('camera_stops', 'camera_stopped'))},
    **{case: ('faults jpeg', reason) for case, reason in (
        ('corrupt_jpeg', 'image_corrupt'), ('truncated_jpeg', 'image_truncated'),
        ('too_large_jpeg', 'image_too_large'))},
    'camera_missing': ('camera missing', 'camera_missing'),
    'stale_after_end': ('paths', 'input_stale'),
}


def _drive(name: str) -> DriveConfig:
    """The drive session `name` plays ('plan warn': the plain drive, with its own parameters)."""
    return SESSION_DRIVES['paths' if name == 'plan warn' else name]


# The session each test reads from `drives` (a parametrized test: one per parameter). The slow
# decode warning and the plan's stage warning are reported in different statuses ('input' and
# 'plan'), so one session with both settings serves both tests.
SESSION_OF = {
    'test_paths_stamped_with_t0_in_frame_with_all_stage_keys': lambda _: 'paths',
    'test_bad_input_gives_diagnostic_and_node_survives': lambda p: FAULT_CASES[p['case']][0],
    'test_camera_encoding_families_give_paths': lambda p: ENCODING_CASES[p['name']],
    'test_slow_frame_decode_is_warned_and_inference_goes_on': lambda _: 'plan warn',
    'test_stages_over_the_plans_prediction_warn_in_the_plan_status': lambda _: 'plan warn',
}


def _session_job(name: str) -> Callable[[Path, int], SessionResult]:
    """What the session `name` runs: a drive through the node, in a folder and a ROS domain."""
    if name == 'plan warn':
        return _plan_warn_session
    return lambda where, domain: session(where, _drive(name), domain)


@pytest.fixture(scope='module')
def drives(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, Future[SessionResult]]:
    """The sessions of this run's tests that read them, two at a time (`testkit.side_by_side`).

    Each still has its own node process, bag and ROS domain; the longest drives start first, so
    the short ones fill the other place beside them. All have ended when the first of those
    tests starts, so none overlaps a session another test runs by itself.
    """
    names = {SESSION_OF[item.originalname](getattr(item, 'callspec', None) and
                                           item.callspec.params): None
             for item in request.session.items
             if getattr(item, 'module', None) is request.module
             and getattr(item, 'originalname', '') in SESSION_OF}

    def job(name: str) -> Callable[[int], SessionResult]:
        where, run = tmp_path_factory.mktemp(name.replace(' ', '_')), _session_job(name)
        return lambda domain: run(where, domain)

    longest_first = sorted(names, key=lambda name: -_drive(name).duration_s)
    return run_side_by_side({name: job(name) for name in longest_first})


@pytest.mark.parametrize('case', list(FAULT_CASES))
def test_bad_input_gives_diagnostic_and_node_survives(drives: dict[str, Future[SessionResult]],
                                                      case: str) -> None:
    name, reason = FAULT_CASES[case]
    res = drives[name].result()
    assert res.node_alive_at_end, res.node_output[-3000:]
    hits = [s for s in res.status('input') if s.values.get('reason') == reason]
    assert hits, (sorted({s.values.get('reason') for s in res.status('input')}),
                  res.node_output[-3000:])
    assert all(s.level >= 1 and reason in s.message for s in hits)
    if case == 'camera_stops':
        assert any('camera slot 2 ' in s.message for s in hits), [s.message for s in hits]
    if case in RAW_FAULTS or case in JPEG_FAULTS:
        # the fault ended: the node recovered and published paths again before the next one
        ego = [p for p in res.paths if p.topic.endswith('/path')]
        assert any(p.received_ns > hits[-1].received_ns for p in ego), res.node_output[-3000:]


def test_shared_fault_drives_give_each_reason_in_its_own_stretch(tmp_path: Path) -> None:
    """Assembled tick by tick as the node does (same selection, decoding and resolution check),
    a shared fault drive gives each case's reason only from that fault's start to the next one's:
    in the shared session a reason is the one its case injected, not another fault's."""
    acfg = AssemblyConfig(image_size_hw=(64, 96))
    for name in ('faults raw', 'faults jpeg'):
        drive = SESSION_DRIVES[name]
        cases = [case for case, (session_name, _) in FAULT_CASES.items() if session_name == name]
        starts = [f.after_s for f in drive.faults] + \
            ([drive.dropout_after_s] if drive.dropout_slot >= 0 else [])
        assert len(starts) == len(cases), (name, cases)
        stretches = dict(zip(cases, zip(starts, [*starts[1:], drive.duration_s + 1.0],
                                        strict=True), strict=True))
        seen: dict[str, list[float]] = {case: [] for case in cases}
        cams, odom = read_drive(write_drive(tmp_path / name.replace(' ', '_'), drive))
        known_hw: dict[int, tuple[int, int]] = {}
        for k in range(int(drive.duration_s * 10) + 1):
            now = drive.start_ns + k * NS // 10
            try:
                check_resolution(known_hw, assemble(
                    {slot: [f for f in frames if f.stamp_ns <= now]
                     for slot, frames in cams.items()},
                    [o for o in odom if o.stamp_ns <= now], acfg))
                continue
            except InputError as err:
                reason = err.reason
            for case in cases:
                if FAULT_CASES[case][1] == reason:
                    seen[case].append(k / 10)
        for case, (start, end) in stretches.items():
            assert seen[case] and all(start <= t < end for t in seen[case]), (case, seen[case])


@pytest.mark.parametrize('name', list(ENCODING_CASES))
def test_camera_encoding_families_give_paths(drives: dict[str, Future[SessionResult]],
                                             name: str) -> None:
    res = drives[ENCODING_CASES[name]].result()
    assert res.node_alive_at_end, res.node_output[-3000:]
    ego = [p for p in res.paths if p.topic.endswith('/path')]
    assert ego and all(np.isfinite(p.xyz).all() for p in ego), res.node_output[-3000:]
    bad = {s.message for s in res.status('input') if s.values.get('reason', '').startswith('image')}
    assert not bad, sorted(bad)


def test_slow_frame_decode_is_warned_and_inference_goes_on(
        drives: dict[str, Future[SessionResult]]) -> None:
    res = drives['plan warn'].result()
    assert res.node_alive_at_end, res.node_output[-3000:]
    slow = [s for s in res.status('input') if s.values.get('reason') == 'image_decode_slow']
    assert slow and all(s.level == 1 and 'images.decode_warn_ms' in s.message for s in slow)
    assert [p for p in res.paths if p.topic.endswith('/path')], res.node_output[-3000:]
    done = [s for s in res.status('inference') if s.message == 'path published']
    assert float(done[-1].values['t_frame_decode_max_ms']) > 0.001


def _plan_warn_session(tmp_path: Path, domain_id: int) -> SessionResult:
    """A session with a plan file predicting far less than the CPU delivers, and a decode warning
    threshold every frame exceeds."""
    plan = tmp_path / 'plan.yaml'
    write_plan_params(plan, PlanParams(predicted_ms=dict.fromkeys(PREDICTED_STAGES, 1e-3),
                                       cpu_budget='a CPU far faster than this one'))
    drive = _drive('plan warn')
    return run_session(write_drive(tmp_path / 'bag', drive), remaps=remaps_for(drive),
                       param_files=[default_params_file(), plan],
                       overrides={'inference.period_s': '0.1', 'images.height': '64',
                                  'images.width': '96', 'diagnostics.period_s': '0.25',
                                  'diagnostics.plan_window': '2',
                                  'images.decode_warn_ms': '0.001'}, domain_id=domain_id)


def test_stages_over_the_plans_prediction_warn_in_the_plan_status(
        drives: dict[str, Future[SessionResult]]) -> None:
    """A plan file predicting far less than the CPU delivers: the plan status warns by stage."""
    res = drives['plan warn'].result()
    warned = [s for s in res.status('plan') if s.level == 1]
    assert warned, (res.status('plan')[-1:], res.node_output[-3000:])
    assert 'a CPU far faster than this one' in warned[-1].message
    assert float(warned[-1].values['total.over']) > 0.1
    assert warned[-1].values['cpu_budget'] == 'a CPU far faster than this one'
