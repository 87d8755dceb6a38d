"""images.decode_ahead through the real node (real rclpy, player, tiny engine on the CPU)."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.session import SessionResult, run_session
from testkit.side_by_side import run_side_by_side

pytestmark = pytest.mark.slow


# decode-ahead: 'processes' (the default), 'threads' or 'off'
CASES = [
    ('processes', '96x160'), ('off', '96x160'),
    ('processes', 'model'),    # images.height/width 0 (the default): the tiny model's 64x96
    ('threads', 'model'),
]


def _session(tmp_path: Path, ahead: str, size: str, domain_id: int) -> SessionResult:
    drive = DriveConfig(duration_s=3.5, image_format='jpeg', width=640, height=360)
    overrides = {'cameras.transports': '[compressed, compressed, compressed, compressed]',
                 'inference.period_s': '0.25',
                 'images.decode_ahead': str(ahead != 'off').lower(),
                 'images.decode_ahead_processes': str(ahead == 'processes').lower(),
                 'diagnostics.period_s': '0.25'}   # a status sample per inference or so
    if size != 'model':
        overrides |= dict(zip(('images.height', 'images.width'), size.split('x'), strict=True))
    return run_session(write_drive(tmp_path / 'bag', drive), remaps=remaps_for(drive),
                       overrides=overrides, domain_id=domain_id)


@pytest.fixture(scope='module')
def sessions(tmp_path_factory: pytest.TempPathFactory
             ) -> dict[tuple[str, str], Future[SessionResult]]:
    """Every case's session, two at a time (`testkit.side_by_side`)."""
    def job(case: tuple[str, str]) -> Callable[[int], SessionResult]:
        where = tmp_path_factory.mktemp('decode_ahead')
        return lambda domain: _session(where, *case, domain)

    return run_side_by_side({case: job(case) for case in CASES})


@pytest.mark.parametrize(('ahead', 'size'), CASES)
def test_frames_decoded_ahead_reach_the_model(
        sessions: dict[tuple[str, str], Future[SessionResult]], ahead: str, size: str) -> None:
    res = sessions[ahead, size].result()
    assert res.node_alive_at_end, res.node_output[-3000:]
    done = {s.values['inferences']: s.values for s in res.status('inference')
            if s.message == 'path published'}
    assert len(done) >= 2, res.node_output[-3000:]
    expected_hw = '64,96' if size == 'model' else size.replace('x', ',')
    assert {v['input_image_hw'] for v in done.values()} == {expected_hw}
    ready = [int(v['frames_decoded_ahead']) for v in done.values()]
    faults = {s.values['decode_worker_faults'] for s in res.status('input')}
    assert faults == {'0'}, faults
    if ahead != 'off':
        # frames at t0-0.1 s and older arrived >= 100 ms before the tick; t0's own frame may
        # still be in flight (then decoded on demand), so at least 12 of 16 were ready
        assert max(ready) >= 12, ready
        # the node's thread CPU per frame (with workers: the checks and the pipe only)
        assert all(0 < float(v['decode_ahead_cpu_ms_per_frame']) < 1e3 for v in done.values())
    else:
        assert ready == [0] * len(ready)
        assert all(v['decode_ahead_cpu_ms_per_frame'] == 'nan' for v in done.values())
