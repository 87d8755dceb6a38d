"""Profile collection at a workload on CPU: two samples with navigation guidance, tiny 1.5.

The instrumented sequential run of the real engine (CPU times, nothing resident) goes through
`build_profile` as `profile_engine` sends it on a GPU: the profile has guidance's two LM phases,
records its workload, and its replay streams exactly the bytes the engine streamed.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from alpamayo_offload.engine import Engine, EngineConfig
from alpamayo_offload.planning import PlanningError, Workload, WorkloadError
from alpamayo_offload.planning.predictor import Placement, predict
from alpamayo_offload.planning.profile import MachineInfo, Profile, ProfiledWorkload
from alpamayo_offload.profiling.collect import build_profile, with_host_terms
from alpamayo_offload.profiling.gpu_profile import (
    PROFILE_ROUTE,
    engine_vram,
    phase_walls_ms,
    profiling_input,
    run_workload,
)

DECODE, STEPS = 3, 2


def _engine(model: str = 'tiny-1.5', **config: Any) -> Engine:
    return Engine.from_config(EngineConfig(
        model=model, device='cpu', mode='sequential', instrument=True, max_decode_tokens=DECODE,
        fixed_decode_tokens=DECODE, diffusion_steps=STEPS, **config))


@pytest.fixture(scope='module')
def guided_run() -> tuple[Engine, Any, Any, Profile]:
    engine = _engine(num_samples=2, guidance_weight=1.5)
    model_input = profiling_input(engine)
    engine.runtime_stats(reset=True)
    result = engine.infer(model_input)
    calls = [c for c in engine.runtime_stats().calls if c.streamed]
    profile = build_profile(calls, phase_walls_ms(result), model_identity='preset:tiny-1.5',
                            machine=MachineInfo('cpu'), vram=engine_vram(engine),
                            workload=run_workload(engine, model_input, result))
    return engine, model_input, result, profile


def test_the_guided_input_carries_a_route_and_the_run_records_its_workload(
        guided_run: tuple[Engine, Any, Any, Profile]) -> None:
    engine, model_input, result, profile = guided_run
    assert model_input.nav_text == PROFILE_ROUTE and result.guided
    assert profile.workload == ProfiledWorkload(num_samples=2, guidance=True, cameras=4,
                                                decode_tokens=DECODE, diffusion_steps=STEPS)
    assert [p.name for p in profile.phases] == ['vision', 'prefill', 'decode', 'unguided',
                                                'refeed', 'diffusion']
    assert [p.measured_passes for p in profile.phases] == [1, 1, DECODE, 1, 1, STEPS]
    unguided = profile.phases[3]
    assert unguided.host_waits and unguided.sequence == profile.phases[4].sequence == 'lm'


def test_the_passes_walls_split_guidances_two_unguided_passes(
        guided_run: tuple[Engine, Any, Any, Profile]) -> None:
    _, _, result, _ = guided_run
    walls = phase_walls_ms(result)
    assert set(walls) == {'vision', 'prefill', 'decode', 'unguided', 'refeed', 'diffusion'}
    folded = 1000 * result.timings['prefill']
    assert walls['prefill'] + walls['unguided'] + walls['refeed'] == pytest.approx(folded)


def test_the_replay_streams_what_the_engine_streamed(
        guided_run: tuple[Engine, Any, Any, Profile]) -> None:
    engine, _, result, profile = guided_run
    prediction = predict(profile, Placement.of(), Workload(DECODE, STEPS))
    lm_pass = sum(profile.sequence('lm').layer_bytes)
    for name in ('unguided', 'refeed'):
        assert prediction.phase(name).bytes_streamed == lm_pass
    # The engine counts guidance's passes as prefill: three LM passes there, as predicted.
    streamed = result.streaming
    engine_lm_passes = streamed['bytes_streamed.prefill'] / streamed['bytes_streamed.decode']
    assert engine_lm_passes * DECODE == pytest.approx(3.0)
    predicted = sum(prediction.phase(p).bytes_streamed for p in ('prefill', 'unguided', 'refeed'))
    assert predicted == 3 * lm_pass == 3 * prediction.phase('decode').bytes_streamed / DECODE
    assert prediction.phase('diffusion').passes == STEPS == result.diffusion_steps
    with pytest.raises(WorkloadError, match='num_samples 1'):
        predict(profile, Placement.of(), Workload(DECODE, STEPS, num_samples=1))


def test_host_terms_follow_the_guided_layout(
        guided_run: tuple[Engine, Any, Any, Profile]) -> None:
    _, _, _, profile = guided_run
    records = [{'sequence': p.sequence, 'layer': i, 'repetition': r, 'issue_ms': 0.5,
                'gap_ms': 0.1}
               for p, first in zip(profile.phases, (0, 0, 1, 1 + DECODE, 2 + DECODE, 0),
                                   strict=True)
               for r in range(first, first + p.measured_passes)
               for i in range(len(p.exe_ms[0]))]
    timed = with_host_terms(profile, records)
    assert all(p.host_layer_ms for p in timed.phases)


def test_the_working_set_grows_with_samples_guidance_and_cameras() -> None:
    plain = engine_vram(_engine()).working_set_bytes
    assert engine_vram(_engine(num_samples=16)).working_set_bytes > plain
    assert engine_vram(_engine(guidance_weight=1.5)).working_set_bytes > plain
    assert engine_vram(_engine(num_cameras=7)).working_set_bytes > plain


def test_guidance_needs_a_model_that_reads_a_route() -> None:
    engine = _engine('tiny', guidance_weight=1.5)
    with pytest.raises(PlanningError, match="'tiny' does not"):
        profiling_input(engine)
    plain = dataclasses.replace(engine.config, guidance_weight=None)
    engine.config = plain
    assert profiling_input(engine).nav_text is None


def test_the_profile_command_says_the_workload_it_measured(
        guided_run: tuple[Engine, Any, Any, Profile]) -> None:
    from alpamayo_offload.profiling.commands import workload_line

    assert workload_line(guided_run[3]) == ('workload: 2 sample(s), navigation guidance on, 4 '
                                            f'cameras, {DECODE} decode passes, {STEPS} '
                                            'diffusion steps')
