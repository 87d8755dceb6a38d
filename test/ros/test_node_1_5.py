"""Alpamayo 1.5 in the node through real rclpy: route text, several samples and questions.

One node process (tiny 1.5 preset, CPU) driven by the bag player: a route text published once,
latched, before the node starts (used while fresh, then stale), three trajectory samples per
inference with navigation guidance, and two questions answered greedily between inferences.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.session import SessionResult, run_session

pytestmark = pytest.mark.slow
NAV = 'turn left at the next intersection'
SAMPLES = 3


@pytest.fixture(scope='module')
def session(tmp_path_factory: pytest.TempPathFactory) -> SessionResult:
    drive = DriveConfig(duration_s=9.0)
    bag = write_drive(tmp_path_factory.mktemp('bag') / 'drive', drive)
    overrides = {'model': 'tiny-1.5', 'decode.num_samples': str(SAMPLES),
                 'decode.max_tokens': '8', 'decode.diffusion_steps': '3',
                 'navigation.guidance_weight': '1.5', 'navigation.max_age_s': '5.0',
                 'vqa.max_tokens': '6', 'inference.period_s': '0.1',
                 'images.height': '64', 'images.width': '96', 'diagnostics.period_s': '0.25'}
    return run_session(bag, remaps=remaps_for(drive), overrides=overrides, navigation=NAV,
                       questions=('What is ahead?', 'Is the road clear?'))


def test_all_samples_under_the_path_stamp_sample_zero_is_the_path(session) -> None:
    res = session
    assert res.node_alive_at_end, res.node_output[-3000:]
    ego = {p.stamp_ns: p for p in res.paths if p.topic.endswith('/path')}
    by_stamp = defaultdict(list)
    for s in res.samples:
        by_stamp[s.stamp_ns].append(s)
    assert ego and set(by_stamp) == set(ego), res.node_output[-3000:]
    for stamp, samples in by_stamp.items():
        assert len(samples) == SAMPLES
        assert all(s.frame_id == 'base_link' and s.xyz.shape == (64, 3) for s in samples)
        np.testing.assert_array_equal(samples[0].xyz, ego[stamp].xyz)
        assert not np.array_equal(samples[0].xyz, samples[1].xyz)   # own noise per sample
    done = [s for s in res.status('inference') if s.message == 'path published']
    assert done and done[-1].values['samples'] == str(SAMPLES)


def test_route_used_while_fresh_then_stale_and_reported(session) -> None:
    nav = session.status('navigation')
    assert nav, session.node_output[-3000:]
    fresh = [s for s in nav if s.values['route_state'] == 'fresh']
    stale = [s for s in nav if s.values['route_state'] == 'stale']
    assert fresh and stale, [s.values['route_state'] for s in nav]
    assert all(s.level == 0 and s.values['route_text'] == NAV for s in fresh)
    assert all(s.level == 1 and 'navigation.max_age_s' in s.message for s in stale)
    assert fresh[0].received_ns < stale[0].received_ns
    used = [s.values for s in nav if s.values['last_inference_route_state'] == 'fresh']
    assert used and all(v['last_inference_route_text'] == NAV and
                        v['last_inference_guided'] == 'True' for v in used)
    later = [s.values for s in nav if s.values['last_inference_route_state'] == 'stale']
    assert later and all(v['last_inference_route_text'] == '' and
                         v['last_inference_guided'] == 'False' for v in later)


def test_questions_answered_greedily_between_inferences(session) -> None:
    res = session
    assert len(res.answers) == 2, res.node_output[-3000:]
    for answer in res.answers:   # no tokenizer_dir: the answer's token ids
        assert all(word.isdigit() for word in answer.split()) and len(answer.split()) <= 6
    last = res.status('questions')[-1]
    assert last.level == 0 and last.message == 'answer published'
    assert last.values['questions_answered'] == '2' and last.values['question_errors'] == '0'
    assert float(last.values['t_answer_ms']) > 0
