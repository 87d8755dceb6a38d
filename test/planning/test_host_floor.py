"""The host thread as a third engine of the replay, and host terms collected from records."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from alpamayo_offload.planning.collect import with_host_terms
from alpamayo_offload.planning.errors import ProfileFormatError
from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
    load_profile,
)

N = 4


def _profile(host_layer: float = 0.0, lead: float = 0.0, waits: bool = False) -> Profile:
    """One 4-layer sequence, 1 ms compute and 2 ms copy per layer, three decode passes."""
    phase = PhaseProfile('decode', 'lm', 'decode', ((1.0,) * N,), (0.0,),
                         host_layer_ms=(host_layer,) * N if host_layer else (),
                         host_lead_ms=lead, host_waits=waits)
    return Profile('preset:test', MachineInfo('test'), (SequenceProfile('lm', (100,) * N,
                                                                         (2.0,) * N),),
                   (phase,), VramProfile(0, 0, 0))


def test_without_host_terms_the_replay_is_the_two_engine_one() -> None:
    everything = Placement.of({'lm': range(N)})
    assert predict(_profile(), everything, Workload(3, 0)).total_ms == pytest.approx(3 * N * 1.0)


def test_host_bound_passes_cost_their_issue_time() -> None:
    everything = Placement.of({'lm': range(N)})
    got = predict(_profile(host_layer=3.0, lead=2.0), everything, Workload(3, 0)).total_ms
    assert got == pytest.approx(3 * (2.0 + N * 3.0))


def test_a_waiting_pass_adds_its_lead_to_the_compute_chain() -> None:
    everything = Placement.of({'lm': range(N)})
    free = predict(_profile(host_layer=0.1, lead=2.0), everything, Workload(3, 0)).total_ms
    waits = predict(_profile(host_layer=0.1, lead=2.0, waits=True), everything,
                    Workload(3, 0)).total_ms
    assert free == pytest.approx(2.0 + 3 * N * 1.0)        # the host runs ahead after pass 0
    assert waits == pytest.approx(3 * (2.0 + N * 1.0))     # each pass re-synchronises


def test_copy_bound_passes_hide_a_fast_host() -> None:
    streamed = predict(_profile(), Placement.of(), Workload(3, 0)).total_ms
    hosted = predict(_profile(host_layer=0.5, lead=0.5), Placement.of(), Workload(3, 0)).total_ms
    assert hosted == pytest.approx(streamed)    # the first copy is primed; the rest overlap


def test_with_host_terms_takes_medians_per_layer_and_pass() -> None:
    profile = _profile()
    calls = [{'sequence': 'lm', 'layer': i, 'repetition': r, 'issue_ms': 1.0 + (r == 2) * 50,
              'gap_ms': 0.5 if i == 0 else 0.1} for r in range(4) for i in range(N)]
    got = with_host_terms(profile, calls, host_ms=7.0)
    decode = got.phases[0]        # repetition 0 is the prefill in Alpamayo's mapping
    assert decode.host_layer_ms == pytest.approx((1.0,) * N)
    assert decode.host_lead_ms == pytest.approx(0.5 + 0.1 * (N - 1))
    assert got.host_ms == 7.0 and got.host_issue_measured
    with pytest.raises(ProfileFormatError, match='lack layer calls'):
        with_host_terms(profile, calls[:-1])


def test_schema_1_loads_without_host_terms(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    data = _profile(host_layer=1.0).to_dict()
    assert data['schema_version'] == 2
    data['schema_version'] = 1
    for phase in data['phases']:
        for key in ('host_layer_ms', 'host_lead_ms', 'host_waits'):
            del phase[key]
    (tmp_path / 'v1.json').write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        loaded, _ = load_profile(tmp_path / 'v1.json')
    assert 'host issue' in caplog.text and not loaded.host_issue_measured
    assert loaded == dataclasses.replace(_profile(), phases=loaded.phases)
