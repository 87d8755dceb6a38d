"""Alpamayo 1.5 through `replay` on real bags: route text from the bag, several samples.

The tiny 1.5 preset (CPU) with navigation guidance and three trajectory samples; the bag's
route texts (on the node's own topic name, no remap) are picked per evaluation time with the
node's staleness rule and recorded in samples.jsonl.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from alpamayo_offload.cli import main as cli_main
from alpamayo_offload.replay.bag_reader import BagReader
from alpamayo_offload.replay.errors import BagError
from alpamayo_offload.replay.loop import read_routes

NODE_YAML = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'
NS = 1_000_000_000
ROUTES = ((0.5, 'turn left'), (6.0, 'keep right'))
MAX_AGE_S = 3.0
FAST = f"""/**:
  ros__parameters:
    model: tiny-1.5
    decode: {{max_tokens: 8, diffusion_steps: 3}}
    navigation: {{max_age_s: {MAX_AGE_S}, guidance_weight: 1.5}}
    cameras:
      transports: [compressed, compressed, compressed, compressed]
"""


@pytest.fixture(autouse=True)
def _restore_determinism_flag():
    """Replay turns on torch's process-wide deterministic mode; don't leak it to other tests."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


def _expected(t_s: float) -> tuple[str | None, str]:
    """The route rule by hand: latest text by t_s, unused once older than MAX_AGE_S."""
    arrived = [(at, text) for at, text in ROUTES if at <= t_s]
    if not arrived:
        return None, 'none'
    at, text = arrived[-1]
    return (text, 'fresh') if t_s - at <= MAX_AGE_S else (None, 'stale')


@pytest.mark.slow
def test_tiny_1_5_replay_records_route_text_and_scores_real_samples(bag_factory,
                                                                     tmp_path: Path) -> None:
    bag, drive = bag_factory(image_format='jpeg', duration_s=9.0, routes=ROUTES)
    fast = tmp_path / 'fast.yaml'
    fast.write_text(FAST)
    remaps = [f'--remap=~/input/camera_{s}/image:={drive.topic_for(s)}'
              for s in drive.camera_slots] + [f'--remap=~/input/odometry:={drive.odom_topic}']
    out = tmp_path / 'r'
    assert cli_main(['replay', str(bag), '--params', str(NODE_YAML), '--params', str(fast),
                     *remaps, '--rate', '1', '--out', str(out), '--no-progress',
                     '--bev-plots', '0', '--num-samples', '3']) == 0
    records = [json.loads(x) for x in (out / 'samples.jsonl').read_text().splitlines()[1:]]
    assert records and all(r['status'] == 'ok' for r in records)
    for r in records:
        text, state = _expected((r['tick_ns'] - drive.start_ns) / NS)
        assert (r['route_text'], r['route_state']) == (text, state), r['tick_ns']
        assert r['guided'] == (text is not None)
        pred = np.asarray(r['pred_xyz'])
        assert pred.shape == (3, 64, 3) and not np.array_equal(pred[0], pred[1])
        gt = np.asarray(r['gt_xyz'])
        horizons = [k for k in r['metrics'] if k.startswith('min_fde/by_t=')]
        assert horizons
        for key in horizons:   # the minimum over the three recorded samples
            step = round(float(key.split('=')[1]) / 0.1) - 1
            assert r['metrics'][key] == pytest.approx(
                np.linalg.norm(pred[:, step, :2] - gt[step, :2], axis=-1).min())
    states = {(r['route_text'], r['route_state']) for r in records}
    assert {('turn left', 'fresh'), (None, 'stale'), ('keep right', 'fresh')} <= states
    doc = json.loads((out / 'metrics.json').read_text())
    assert doc['config']['navigation_topic'] == '/alpamayo_offload_node/input/navigation'
    assert doc['config']['engine']['num_samples'] == 3
    assert doc['model']['model_family'] == '1.5'


def test_route_topic_of_another_type_is_refused_by_name(bag_factory) -> None:
    bag, drive = bag_factory(routes=ROUTES)
    with BagReader(bag, {}) as reader:
        assert [r.text for r in read_routes(reader, drive.route_topic)] == ['turn left',
                                                                            'keep right']
        assert read_routes(reader, '/not/recorded') == ()
        with pytest.raises(BagError, match='std_msgs/msg/String'):
            read_routes(reader, drive.odom_topic)
