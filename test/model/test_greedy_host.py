"""The host greedy pick and row-end tracking choose exactly what the torch/device versions do."""
from __future__ import annotations

import torch

from alpamayo_offload.model.config import IM_END_ID, PAD_ID, TRAJ_FUTURE_START_ID
from alpamayo_offload.model.inference import (
    DecodeOptions,
    _DeviceRowEnds,
    _HostRowEnds,
    _token_picker,
)

EXCLUDED = (range(151669, 155669),)
# 2 Super's trajectory decoding also masks the text end <|im_end|>.
EXCLUDED_2SUPER = (*EXCLUDED, range(IM_END_ID, IM_END_ID + 1))


def _torch_pick(logits: torch.Tensor, excluded: tuple[range, ...]) -> torch.Tensor:
    masked = logits.clone()
    for r in excluded:
        masked[:, r.start:r.stop] = float('-inf')
    return masked.argmax(dim=-1, keepdim=True)


def _host_pick(logits: torch.Tensor, excluded: tuple[range, ...] = EXCLUDED) -> torch.Tensor:
    return _token_picker(DecodeOptions(), None, excluded, logits)(logits)


def test_host_argmax_matches_torch_on_ties_nan_and_inf() -> None:
    logits = torch.randn(3, 155697, generator=torch.Generator().manual_seed(0))
    logits[0, 11] = logits[0, 4000] = 50.0                 # tie: the first wins
    logits[1, 70] = logits[1, 9] = float('nan')            # NaN counts as the maximum
    logits[2] = float('-inf')                              # all masked: index 0
    want = _torch_pick(logits, EXCLUDED)
    with torch.inference_mode():
        got = _host_pick(logits)
    assert got.dtype == torch.long and got.shape == (3, 1)
    assert torch.equal(got, want)
    assert got[:, 0].tolist() == [11, 9, 0]


def test_host_argmax_never_picks_an_excluded_id() -> None:
    """Excluded maxima, NaN and ties around the excluded range: the pick of the masked logits."""
    rows = torch.randn(6, 155697, generator=torch.Generator().manual_seed(1))
    rows[0, 152000] = 99.0                                        # an excluded id is the maximum
    rows[1, 152000] = float('nan')                                # excluded NaN: ignored
    rows[2, 152000] = rows[2, 155669] = rows[2, 151668] = 70.0    # ties both sides of the range
    rows[3, 152000] = float('nan')
    rows[3, 155690] = float('nan')                                # the NaN after the range counts
    rows[4, :151669] = rows[4, 155669:] = float('-inf')           # only excluded ids are finite
    rows[5, 1] = 80.0                                             # ordinary row in the same batch
    for batch in (rows, *(rows[i:i + 1] for i in range(rows.shape[0]))):
        want = _torch_pick(batch, EXCLUDED)
        got = _host_pick(batch.clone())
        assert torch.equal(got, want)
    assert _host_pick(rows.clone())[:, 0].tolist() == \
        [int(rows[0, :151669].argmax()), int(rows[1, :151669].argmax()), 151668, 155690, 0, 1]


def test_host_argmax_masks_every_excluded_range() -> None:
    rows = torch.randn(2, 155776, generator=torch.Generator().manual_seed(2))
    rows[0, IM_END_ID] = 99.0
    rows[1, 152000] = rows[1, IM_END_ID] = 99.0
    want = _torch_pick(rows, EXCLUDED_2SUPER)
    got = _host_pick(rows.clone(), EXCLUDED_2SUPER)
    assert torch.equal(got, want) and IM_END_ID not in got[:, 0].tolist()


def test_host_row_ends_match_device_row_ends() -> None:
    """Pad after <|im_end|>, stop after <|traj_future_start|>: the same tokens and answers."""
    script = [[5, 6, IM_END_ID], [TRAJ_FUTURE_START_ID, IM_END_ID, 7], [8, 9, 10],
              [11, IM_END_ID, TRAJ_FUTURE_START_ID], [12, 13, 14]]
    for stop_on_im_end in (True, False):
        first = torch.tensor(script[0])[:, None]
        host, device = _HostRowEnds(first, stop_on_im_end), _DeviceRowEnds(first, stop_on_im_end)
        for ids in script[1:]:
            token = torch.tensor(ids)[:, None]
            got, want = host.add(token), device.add(token)
            assert got.dtype == want.dtype and torch.equal(got, want)
            for latest in (False, True):
                assert host.all_done(latest) == device.all_done(latest)
        assert host.add(torch.tensor([[1], [2], [3]]))[:, 0].tolist() == \
            ([1, PAD_ID, PAD_ID] if stop_on_im_end else [1, 2, 3])
