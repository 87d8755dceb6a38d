"""The host thread as a third engine of the replay, and host terms collected from records."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

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
from alpamayo_offload.profiling.collect import with_host_terms
from alpamayo_offload.profiling.gpu_profile import calibration_placement

N = 4


def _profile(host_layer: float = 0.0, lead: float = 0.0, waits: bool = False,
             stream: float = 0.0) -> Profile:
    """One 4-layer sequence, 1 ms compute and 2 ms copy per layer, three decode passes."""
    phase = PhaseProfile('decode', 'lm', 'decode', ((1.0,) * N,), (0.0,),
                         host_layer_ms=(host_layer,) * N if host_layer else (),
                         host_lead_ms=lead, host_waits=waits, host_stream_ms=stream)
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


def test_a_phase_follows_the_cpu_when_its_issue_time_nears_the_busiest_engine() -> None:
    """Host 0.9 ms a call against 1 ms compute (resident) is flagged; against 2 ms copies
    (streamed) it is not; without host terms nothing is."""
    everything = Placement.of({'lm': range(N)})
    resident = predict(_profile(host_layer=0.9), everything, Workload(3, 0)).phase('decode')
    assert resident.host_ms == pytest.approx(3 * N * 0.9) and resident.cpu_sensitive
    streamed = predict(_profile(host_layer=0.9), Placement.of(), Workload(3, 0)).phase('decode')
    assert streamed.copy_ms == pytest.approx(3 * N * 2.0) and not streamed.cpu_sensitive
    assert not predict(_profile(), everything, Workload(3, 0)).phase('decode').cpu_sensitive
    assert predict(_profile(host_layer=0.9), everything,
                   Workload(3, 0)).cpu_sensitive_phases() == ('decode',)


def test_only_streamed_calls_pay_the_streaming_hooks() -> None:
    """A resident layer runs no runtime hook: a host-bound all-resident plan costs the layers'
    own issue time, whatever the streaming part; a host-bound streamed plan pays both."""
    everything = Placement.of({'lm': range(N)})
    resident = [predict(_profile(host_layer=3.0, lead=2.0, stream=s), everything,
                        Workload(3, 0)).total_ms for s in (0.0, 1.5)]
    assert resident == pytest.approx([3 * (2.0 + N * 3.0)] * 2)
    streamed = predict(_profile(host_layer=3.0, lead=2.0, stream=1.5), Placement.of(),
                       Workload(3, 0)).total_ms
    assert streamed == pytest.approx(3 * (2.0 + N * 4.5))


def test_with_host_terms_splits_off_the_streaming_hooks() -> None:
    calls = [{'sequence': 'lm', 'layer': i, 'repetition': r, 'issue_ms': 1.5 + 0.1 * i,
              'stream_ms': 0.5 + (r == 3) * 9, 'gap_ms': 0.1} for r in range(4) for i in range(N)]
    decode = with_host_terms(_profile(), calls).phases[0]
    assert decode.host_layer_ms == pytest.approx(tuple(1.0 + 0.1 * i for i in range(N)))
    assert decode.host_stream_ms == pytest.approx(0.5)


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


def test_without_host_terms_drops_only_the_host_terms() -> None:
    hosted = _profile(host_layer=3.0, lead=2.0, waits=True, stream=0.5)
    bare = hosted.without_host_terms()
    assert not bare.host_issue_measured and bare.phases[0].host_waits
    assert bare.phases[0].exe_ms == hosted.phases[0].exe_ms and bare.sequences == hosted.sequences
    everything = Placement.of({'lm': range(N)})
    assert predict(bare, everything, Workload(3, 0)).total_ms == pytest.approx(
        predict(_profile(waits=True), everything, Workload(3, 0)).total_ms)


def test_resident_calls_replace_the_issue_times() -> None:
    """Layers timed resident take their own time; the others the phase's resident/streamed
    ratio; hooks and lead stay those of the streamed run."""
    streamed = [{'sequence': 'lm', 'layer': i, 'repetition': r, 'issue_ms': 2.5 + 0.5 * i,
                 'stream_ms': 0.5, 'gap_ms': 0.1, 'resident': False}
                for r in range(4) for i in range(N)]
    resident = [{'sequence': 'lm', 'layer': i, 'repetition': r,
                 'issue_ms': 1.0 + 0.25 * i if i % 2 == 0 else 9.0, 'stream_ms': 0.0,
                 'gap_ms': 5.0, 'resident': i % 2 == 0} for r in range(4) for i in range(N)]
    decode = with_host_terms(_profile(), streamed, resident_calls=resident).phases[0]
    # streamed issue without hooks: 2.0, 2.5, 3.0, 3.5; resident 1.0 (layer 0), 1.5 (layer 2)
    assert decode.host_layer_ms == pytest.approx((1.0, 2.5 * 0.5, 1.5, 3.5 * 0.5))
    assert decode.host_stream_ms == pytest.approx(0.5)
    assert decode.host_lead_ms == pytest.approx(N * 0.1)
    untouched = with_host_terms(_profile(), streamed,
                                resident_calls=[dict(c, resident=False) for c in resident])
    assert untouched.phases[0].host_layer_ms == pytest.approx((2.0, 2.5, 3.0, 3.5))


def test_calibration_placement_keeps_what_the_spare_vram_holds() -> None:
    profile = _profile()             # 4 layers of 100 B, no footprints: + 16 KiB each
    layer = profile.sequences[0].resident_footprint(0)
    assert calibration_placement(profile, 4 * layer).indices('lm') == (0, 1, 2, 3)
    assert calibration_placement(profile, 4 * layer - 1).indices('lm') == (0, 2)
    assert calibration_placement(profile, layer).indices('lm') == (0,)
    assert calibration_placement(profile, layer - 1) is None


def test_graphed_resident_calls_and_eager_streamed_calls_cost_their_own_issue_time() -> None:
    """Schema 6: a streamed call is never graphed, so it pays `host_streamed_layer_ms`."""
    graphed = dataclasses.replace(_profile(host_layer=0.25, stream=0.5), phases=(
        dataclasses.replace(_profile(host_layer=0.25, stream=0.5).phases[0],
                            host_streamed_layer_ms=(4.0,) * N),))
    everything = Placement.of({'lm': range(N)})
    assert predict(graphed, everything, Workload(3, 0)).total_ms == pytest.approx(3 * N * 1.0)
    streamed = predict(graphed, Placement.of(), Workload(3, 0)).total_ms
    assert streamed == pytest.approx(3 * N * (4.0 + 0.5))       # host-bound on the eager calls


def test_with_host_terms_takes_eager_issue_times_and_the_prologue() -> None:
    """Eager resident calls give the streamed issue times; the first call's prologue its term."""
    streamed = [{'sequence': 'lm', 'layer': i, 'repetition': r, 'issue_ms': 2.5,
                 'stream_ms': 0.5, 'gap_ms': 0.1, 'prologue_ms': 0.4 + 0.1 * r if i == 0
                 else None, 'resident': False} for r in range(4) for i in range(N)]
    graphed = [dict(c, issue_ms=0.2, stream_ms=0.0, resident=True) for c in streamed]
    eager = [dict(c, issue_ms=1.2, stream_ms=0.0, resident=i % 2 == 0)
             for c, i in zip(streamed, [c['layer'] for c in streamed], strict=True)]
    decode = with_host_terms(_profile(), streamed, resident_calls=graphed,
                             eager_calls=eager).phases[0]
    assert decode.host_layer_ms == pytest.approx((0.2,) * N)
    assert decode.host_streamed_layer_ms == pytest.approx((1.2,) * N)   # odd ones by ratio
    assert decode.host_prologue_ms == pytest.approx(0.6)         # passes 1-3 (0 is prefill)
    # no prologue recorded and no eager run (an engine without graphs): neither term
    plain = with_host_terms(_profile(), [dict(c, prologue_ms=None) for c in streamed])
    assert plain.phases[0].host_prologue_ms is None
    assert plain.phases[0].host_streamed_layer_ms == ()


def test_streamed_graphed_calls_keep_their_own_issue_times() -> None:
    """An engine that replays streamed layers by slot: the streamed run times the streamed calls
    as plans run them, so their issue times (hooks excluded) stay `host_streamed_layer_ms`
    while resident calls take the resident run's."""
    streamed = [{'sequence': 'lm', 'layer': i, 'repetition': r, 'issue_ms': 0.9 + 0.1 * i,
                 'stream_ms': 0.5, 'gap_ms': 0.1, 'resident': False}
                for r in range(4) for i in range(N)]
    graphed = [dict(c, issue_ms=0.2, stream_ms=0.0, resident=True) for c in streamed]
    decode = with_host_terms(_profile(), streamed, resident_calls=graphed,
                             streamed_graphed=True).phases[0]
    assert decode.host_layer_ms == pytest.approx((0.2,) * N)
    assert decode.host_streamed_layer_ms == pytest.approx(tuple(0.4 + 0.1 * i for i in range(N)))
    assert decode.host_streamed_issue_ms() == decode.host_streamed_layer_ms
    with pytest.raises(ValueError, match='streamed_graphed'):
        with_host_terms(_profile(), streamed, resident_calls=graphed, eager_calls=graphed,
                        streamed_graphed=True)


def test_only_the_gather_and_the_prologue_follow_a_host_gather_wait() -> None:
    """Embedding on the host: the pass waits right before the forward; the lead before the
    gather overlaps the previous pass's compute. Without a measured prologue, all of it waits."""
    base = _profile(host_layer=0.1, lead=2.0)
    decode = dataclasses.replace(base.phases[0], embed_host_ms=0.5)
    everything = Placement.of({'lm': range(N)}, embed_on_host=True)
    unmeasured = predict(dataclasses.replace(base, phases=(decode,)), everything, Workload(3, 0))
    assert unmeasured.total_ms == pytest.approx(3 * (2.5 + N * 1.0))
    measured = dataclasses.replace(base, phases=(dataclasses.replace(decode,
                                                                     host_prologue_ms=0.3),))
    got = predict(measured, everything, Workload(3, 0)).total_ms
    assert got == pytest.approx(1.7 + 3 * (0.8 + N * 1.0))


def test_a_layer_still_in_its_slot_is_not_copied_again() -> None:
    """Two streamed layers and two slots: after the first pass nothing is copied (the runtime's
    prefetch finds them held); three streamed layers evict each other and copy every pass."""
    two = predict(_profile(), Placement.of({'lm': (1, 2)}), Workload(3, 0)).phase('decode')
    assert two.bytes_streamed == 2 * 100 and two.copy_ms == pytest.approx(2 * 2.0)
    assert two.wall_ms == pytest.approx(2.0 + 3 * N * 1.0)       # the first copy, then compute
    three = predict(_profile(), Placement.of({'lm': (1,)}), Workload(3, 0)).phase('decode')
    assert three.bytes_streamed == 3 * 3 * 100


def test_graph_terms_survive_json_and_scale_with_the_cpu(tmp_path: Path) -> None:
    phase = dataclasses.replace(_profile(host_layer=0.2).phases[0],
                                host_streamed_layer_ms=(1.0,) * N, host_prologue_ms=0.3)
    profile = dataclasses.replace(_profile(host_layer=0.2), phases=(phase,))
    (tmp_path / 'v6.json').write_text(json.dumps(profile.to_dict()))
    assert load_profile(tmp_path / 'v6.json')[0] == profile
    slower = profile.with_host_scaled(2.0).phases[0]
    assert slower.host_streamed_layer_ms == (2.0,) * N and slower.host_prologue_ms == 0.6
    bare = profile.without_host_terms().phases[0]
    assert bare.host_streamed_layer_ms == () and bare.host_prologue_ms is None
    with pytest.raises(ValueError, match='host_streamed_layer_ms'):
        dataclasses.replace(phase, host_streamed_layer_ms=(1.0,))


def test_host_terms_pool_the_passes_of_several_timed_runs() -> None:
    """One run on a slow CPU moment (3x) among three does not set the terms."""
    calls = [{'run': run, 'sequence': 'lm', 'layer': i, 'repetition': r,
              'issue_ms': (3.0 if run == 1 else 1.0), 'gap_ms': 0.1}
             for run in range(3) for r in range(3) for i in range(N)]
    decode = with_host_terms(_profile(), calls).phases[0]
    assert decode.host_layer_ms == pytest.approx((1.0,) * N)
    assert decode.host_lead_ms == pytest.approx(N * 0.1)
