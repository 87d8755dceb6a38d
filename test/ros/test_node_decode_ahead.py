"""images.decode_ahead through the real node (real rclpy, player, tiny engine on the CPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.session import run_session

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(('decode_ahead', 'size'), [
    (True, '96x160'), (False, '96x160'),
    (True, 'model'),    # images.height/width 0 (the default): the tiny model's own 64x96
])
def test_frames_decoded_ahead_reach_the_model(tmp_path: Path, decode_ahead: bool,
                                              size: str) -> None:
    drive = DriveConfig(duration_s=3.5, image_format='jpeg', width=640, height=360)
    overrides = {'cameras.transports': '[compressed, compressed, compressed, compressed]',
                 'inference.period_s': '0.25', 'images.decode_ahead': str(decode_ahead).lower(),
                 'diagnostics.period_s': '0.25'}   # a status sample per inference or so
    if size != 'model':
        overrides |= dict(zip(('images.height', 'images.width'), size.split('x'), strict=True))
    res = run_session(write_drive(tmp_path / 'bag', drive), remaps=remaps_for(drive),
                      overrides=overrides)
    assert res.node_alive_at_end, res.node_output[-3000:]
    done = {s.values['inferences']: s.values for s in res.status('inference')
            if s.message == 'path published'}
    assert len(done) >= 2, res.node_output[-3000:]
    expected_hw = '64,96' if size == 'model' else size.replace('x', ',')
    assert {v['input_image_hw'] for v in done.values()} == {expected_hw}
    ahead = [int(v['frames_decoded_ahead']) for v in done.values()]
    if decode_ahead:
        # frames at t0-0.1 s and older arrived >= 100 ms before the tick; t0's own frame may
        # still be in flight (then decoded on demand), so at least 12 of 16 were ready
        assert max(ahead) >= 12, ahead
        assert all(0 < float(v['decode_ahead_cpu_ms_per_frame']) < 1e3 for v in done.values())
    else:
        assert ahead == [0] * len(ahead)
        assert all(v['decode_ahead_cpu_ms_per_frame'] == 'nan' for v in done.values())
