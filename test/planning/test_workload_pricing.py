"""Pricing a workload: batched passes, navigation guidance's passes, and refusals by name.

Synthetic profiles from the paper's Table III: a batch of samples is the same profile with more
compute per pass (as a profile measured at that batch would be); guidance adds its two
language-model phases.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from alpamayo_offload.planning import (
    PlannerOptions,
    ProfiledWorkload,
    Workload,
    WorkloadError,
    plan,
)
from alpamayo_offload.planning.expectation import predicted_stage_ms
from alpamayo_offload.planning.predictor import Placement, check_workload, predict
from alpamayo_offload.planning.profile import PhaseProfile, Profile
from testkit.paper import VLM, table3_profile

WORKLOAD = Workload(21, 10)
LM_PASS_BYTES = sum(table3_profile().sequence('lm').layer_bytes)


def _scaled(phase: PhaseProfile, factor: float) -> PhaseProfile:
    return dataclasses.replace(phase, exe_ms=tuple(tuple(factor * x for x in row)
                                                   for row in phase.exe_ms))


def batched(samples: int = 16, guidance: bool = False) -> Profile:
    """Table III measured at `samples` rows: decode and diffusion compute more per pass."""
    base = table3_profile()
    factor = {'decode': 1.5, 'diffusion': 2.5}
    phases = [_scaled(p, factor.get(p.name, 1.0)) for p in base.phases]
    if guidance:   # the unguided prompt's prefill, then the refeed of the guided tokens
        n = VLM['layers']
        phases[3:3] = [PhaseProfile('unguided', 'lm', 'once', ((VLM['prefill'],) * n,), (0.0,)),
                       PhaseProfile('refeed', 'lm', 'once', ((2.0,) * n,), (0.0,))]
    return dataclasses.replace(base, phases=tuple(phases), workload=ProfiledWorkload(
        num_samples=samples, guidance=guidance, cameras=4, decode_tokens=21, diffusion_steps=10))


@pytest.mark.parametrize('placement', [Placement.of(), Placement.of({'lm': range(0, 36, 3)}),
                                       Placement.of({'vit': (0,), 'expert': (1, 2)}, True)])
def test_a_batch_streams_the_same_bytes_and_computes_more(placement: Placement) -> None:
    one = predict(table3_profile(), placement, WORKLOAD)
    many = predict(batched(), placement, WORKLOAD)
    for name in ('vision', 'prefill', 'decode', 'diffusion'):
        assert many.phase(name).bytes_streamed == one.phase(name).bytes_streamed
        assert many.phase(name).copy_ms == pytest.approx(one.phase(name).copy_ms)
        assert many.phase(name).passes == one.phase(name).passes
    for name in ('decode', 'diffusion'):
        assert many.phase(name).compute_ms > one.phase(name).compute_ms
    assert many.total_ms > one.total_ms


def test_each_unguided_pass_streams_one_lm_pass_of_bytes() -> None:
    plain = predict(batched(), Placement.of(), WORKLOAD)
    guided = predict(batched(guidance=True), Placement.of(), WORKLOAD)
    for name in ('unguided', 'refeed'):
        assert guided.phase(name).passes == 1
        assert guided.phase(name).bytes_streamed == LM_PASS_BYTES
    streamed = sum(p.bytes_streamed for p in guided.phases)
    assert streamed == sum(p.bytes_streamed for p in plain.phases) + 2 * LM_PASS_BYTES
    resident = Placement.of({'lm': range(10)})
    per_pass = sum(table3_profile().sequence('lm').layer_bytes[10:])
    assert predict(batched(guidance=True), resident, WORKLOAD).phase('unguided') \
        .bytes_streamed == per_pass
    assert guided.total_ms > plain.total_ms


def test_the_unguided_passes_count_as_prefill_in_the_stages() -> None:
    prediction = predict(batched(guidance=True), Placement.of(), WORKLOAD)
    stages = predicted_stage_ms(prediction)
    assert stages['prefill'] == pytest.approx(sum(prediction.phase(p).wall_ms
                                                  for p in ('prefill', 'unguided', 'refeed')))
    assert sum(stages[s] for s in ('vision', 'prefill', 'decode', 'diffusion', 'host')) == \
        pytest.approx(stages['total'])


@pytest.mark.parametrize(('workload', 'named', 'fix'), [
    (Workload(21, 10, num_samples=1), 'num_samples 1', '--num-samples 1'),
    (Workload(21, 10, guidance=True), 'guidance True', '--guidance-weight W'),
    (Workload(21, 10, cameras=6), 'cameras 6', '--cameras 6'),
])
def test_another_batch_guidance_or_camera_count_is_refused_by_name(
        workload: Workload, named: str, fix: str) -> None:
    profile = batched()
    with pytest.raises(WorkloadError, match=named) as err:
        predict(profile, Placement.of(), workload)
    assert fix in str(err.value) and 'not scaled' in str(err.value)
    with pytest.raises(WorkloadError, match=named):
        plan(profile, 12 * 2**30, PlannerOptions(workload=workload))


def test_pass_counts_may_differ_and_the_profiles_own_terms_are_implied() -> None:
    profile = batched()
    check_workload(profile, Workload(40, 5, num_samples=16, guidance=False, cameras=4))
    short = predict(profile, Placement.of(), Workload(5, 3))
    assert short.phase('decode').passes == 5 and short.phase('diffusion').passes == 3
    assert Workload(7, 3).resolved(profile) == Workload(7, 3, 16, False, 4)
    guided = predict(batched(guidance=True), Placement.of(), Workload(21, 10, guidance=True))
    assert guided.phase('refeed').passes == 1


def test_a_profile_without_recorded_cameras_is_not_checked_for_them() -> None:
    profile = table3_profile()                     # built in code: one sample, no guidance
    assert profile.workload == ProfiledWorkload()
    check_workload(profile, Workload(cameras=7, num_samples=1, guidance=False))
    assert Workload().resolved(profile).cameras is None
    with pytest.raises(WorkloadError, match='num_samples 2'):
        check_workload(profile, Workload(num_samples=2))


def test_the_workload_round_trips_and_older_profiles_read_as_one_sample() -> None:
    profile = batched(guidance=True)
    assert Profile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    older = table3_profile().to_dict()
    del older['workload']
    assert Profile.from_dict(older).workload == ProfiledWorkload(1, False, 0, 0, 0)


def test_guidance_phases_need_a_guided_workload_and_bad_terms_are_refused() -> None:
    guided = batched(guidance=True)
    with pytest.raises(ValueError, match=r"\['refeed', 'unguided'\] run only with navigation"):
        dataclasses.replace(guided, workload=ProfiledWorkload(16))
    with pytest.raises(ValueError, match='num_samples = 0'):
        ProfiledWorkload(num_samples=0)
    with pytest.raises(ValueError, match='cameras = 8'):
        ProfiledWorkload(cameras=8)
    with pytest.raises(ValueError, match='Workload.cameras = 0'):
        Workload(cameras=0)
    with pytest.raises(ValueError, match='Workload.num_samples = 0'):
        Workload(num_samples=0)
