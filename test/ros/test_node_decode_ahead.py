"""images.decode_ahead through the real node (real rclpy, player, tiny engine on the CPU)."""
from __future__ import annotations

import os
import signal
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest
import rclpy

from alpamayo_offload.app import schema
from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.assembly import PixelJob, PixelWorkerError
from alpamayo_offload.assembly.convert import ConversionError
from alpamayo_offload.ros import node as node_module
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


def test_decode_ahead_processes_default_is_on() -> None:
    spec = schema.PARAMETERS['images.decode_ahead_processes']
    assert spec.default is True and spec.restart
    assert config_from_values({}).decode_ahead_processes is True
    assert config_from_values({'images.decode_ahead_processes': False}
                              ).decode_ahead_processes is False


def test_workers_start_at_configure_report_faults_and_stop_at_cleanup() -> None:
    rclpy.init(args=['--ros-args', '-p', 'inference.period_s:=1000.0'])
    node = node_module.AlpamayoOffloadNode()
    try:
        node.trigger_configure()
        conf = node._conf
        assert conf is not None and conf.ahead_workers is not None
        pids = conf.ahead_workers.pids()
        assert len(pids) == min(conf.cfg.decode_threads, len(conf.cfg.cameras))
        os.kill(pids[0], signal.SIGKILL)
        failed = 0
        for _ in pids:   # one of these jobs reaches the dead worker
            try:
                conf.ahead_workers.run(PixelJob(b'', 1, (4, 4), None))
            except ConversionError:   # a live worker: an empty payload is no image
                pass
            except PixelWorkerError:
                failed += 1
        assert failed == 1
        faults = node_module._worker_faults(conf)
        assert faults.count == 1 and faults.last and faults.restarts == 1
        assert faults.backing_off == 0
        now = conf.ahead_workers.pids()
        node.trigger_cleanup()
        assert node._conf is None
        for pid in {*pids, *now}:
            with pytest.raises(ChildProcessError):   # exited and reaped
                os.waitpid(pid, os.WNOHANG)
    finally:
        node.close()
        node.destroy_node()
        rclpy.try_shutdown()
