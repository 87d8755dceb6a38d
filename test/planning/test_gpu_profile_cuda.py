"""`alpamayo-offload profile` on a real GPU: the host terms split the streaming hooks off."""
from __future__ import annotations

import pytest


@pytest.mark.cuda
def test_profile_times_layer_issue_and_streaming_hooks_apart() -> None:
    from alpamayo_offload.planning.gpu_profile import run_profile

    profile = run_profile(model='tiny', device='cuda', decode_tokens=4, diffusion_steps=2,
                          warmup=1, seed=0)
    assert profile.host_issue_measured
    for phase in profile.phases:
        assert all(ms > 0 for ms in phase.host_layer_ms), phase.name
        assert phase.host_stream_ms > 0, phase.name   # every call of the host run is streamed
