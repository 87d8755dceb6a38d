"""The last prefill reading the vision outputs frees them, and no bit of the rollout changes.

The plain rollout's prefill and navigation guidance's unguided prefill take the image
embeddings and DeepStack features (`VisionOutputs.take`): by the prefill's last layers no
reference is left. The reference run keeps them (`take` replaced by `peek`); every comparison
is exact.
"""
from __future__ import annotations

import weakref
from typing import Any
from unittest import mock

import pytest
import torch

from alpamayo_offload.model import (
    DecodeOptions,
    build_random,
    generate_text,
    run_inference,
    tiny_1_5_config,
    tiny_config,
)
from alpamayo_offload.model.inference import Rollout, VisionOutputs
from testkit.rollouts import drive_inputs

CASES = {
    'r1': (tiny_config, 1, None, None),
    '1.5, 3 samples': (tiny_1_5_config, 3, None, None),
    '1.5, nav guidance, 2 samples': (tiny_1_5_config, 2, 1.5, 'turn left in 50 m'),
}


def _watch(model) -> tuple[list[weakref.ref], list[tuple[int, bool]], Any]:
    """Weak references to every vision output; per final-norm call: (tokens, all freed); the
    patch recording them."""
    refs: list[weakref.ref] = []
    calls: list[tuple[int, bool]] = []
    vision = Rollout.vision

    def recorded(self, *args):
        embeds, deepstack = vision(self, *args)
        refs.extend(weakref.ref(x) for x in (embeds, *deepstack))
        return embeds, deepstack

    norm = model.vlm.model.language_model.norm
    norm.register_forward_pre_hook(
        lambda _m, args: calls.append((args[0].shape[1], all(r() is None for r in refs))))
    return refs, calls, mock.patch.object(Rollout, 'vision', recorded)


@pytest.mark.parametrize('case', list(CASES))
def test_last_prefill_frees_the_vision_outputs_and_changes_no_bit(case: str) -> None:
    make, samples, weight, nav = CASES[case]
    torch.set_num_threads(1)
    model = build_random(make(), seed=4)
    inputs = drive_inputs(model.cfg, nav, seed=2, speed=6.0)
    opts = DecodeOptions(max_decode_tokens=6, sample=True, seed=2, num_samples=samples,
                         guidance_weight=weight, diffusion_steps=2)
    with mock.patch.object(VisionOutputs, 'take', VisionOutputs.peek):
        ref = run_inference(model, inputs, 'cpu', opts)
    refs, calls, patch = _watch(model)
    with patch:
        got = run_inference(model, inputs, 'cpu', opts)
    assert torch.equal(got.xyz, ref.xyz) and torch.equal(got.rot, ref.rot)
    assert torch.equal(got.new_token_ids, ref.new_token_ids)
    prompt = inputs.input_ids.shape[1]
    prefills = [freed for tokens, freed in calls if tokens > 8]
    if weight is None:        # one prefill: its end holds no vision output
        assert refs and prefills == [True]
    else:                     # the guided prefill keeps them for the unguided one, which frees
        assert calls[0] == (prompt, False) and prefills[-1] and len(prefills) == 2


def test_generate_text_frees_the_vision_outputs_and_changes_no_bit() -> None:
    torch.set_num_threads(1)
    model = build_random(tiny_1_5_config(), seed=4)
    inputs = drive_inputs(model.cfg, None, seed=2, speed=6.0)
    opts = DecodeOptions(max_decode_tokens=5, sample=True, seed=1, num_samples=2)
    with mock.patch.object(VisionOutputs, 'take', VisionOutputs.peek):
        ref = generate_text(model, inputs, 'cpu', opts)
    refs, calls, patch = _watch(model)
    with patch:
        got = generate_text(model, inputs, 'cpu', opts)
    assert torch.equal(got.token_ids, ref.token_ids)
    assert refs and calls[0][1]


def test_taken_vision_outputs_cannot_be_read_again() -> None:
    vision = VisionOutputs(torch.zeros(2, 3), [torch.zeros(2, 3)])
    vision.take()
    with pytest.raises(RuntimeError, match='already taken'):
        vision.peek()
