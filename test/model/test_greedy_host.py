"""The host greedy pick (numpy argmax) chooses exactly torch's index: first maximum, first NaN."""
from __future__ import annotations

import torch

from alpamayo_offload.model.inference import DecodeOptions, _next_token


def test_host_argmax_matches_torch_on_ties_nan_and_inf() -> None:
    logits = torch.randn(3, 155697, generator=torch.Generator().manual_seed(0))
    logits[0, 11] = logits[0, 4000] = 50.0                 # tie: the first wins
    logits[1, 70] = logits[1, 9] = float('nan')            # NaN counts as the maximum
    logits[2] = float('-inf')                              # all masked: index 0
    with torch.inference_mode():
        got = _next_token(logits, DecodeOptions(), None)
    assert got.dtype == torch.long and got.shape == (3, 1)
    assert torch.equal(got, logits.argmax(dim=-1, keepdim=True))
    assert got[:, 0].tolist() == [11, 9, 0]
