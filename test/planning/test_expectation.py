"""The plan's promise to the node: predicted ms per stage and the CPU budget, in words."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from alpamayo_offload.planning.expectation import cpu_budget, predicted_stage_ms
from alpamayo_offload.planning.params import PREDICTED_STAGES, read_plan_params, write_plan_params
from alpamayo_offload.planning.planner import plan
from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
)
from alpamayo_offload.profiling.commands import plan_file_params

N = 4


def _profile(machine: MachineInfo, host_layer: float) -> Profile:
    """A 4-layer LM: prefill once, three decode passes, 1 ms compute and 2 ms copy per layer."""
    phases = tuple(PhaseProfile(name, 'lm', repeats, ((1.0,) * N,), (0.0,),
                                host_layer_ms=(host_layer,) * N)
                   for name, repeats in (('prefill', 'once'), ('decode', 'decode')))
    return Profile('preset:test', machine, (SequenceProfile('lm', (100,) * N, (2.0,) * N),),
                   phases, VramProfile(0, 0, 0), host_ms=7.5)


def test_stages_follow_the_prediction_and_add_up_to_its_total() -> None:
    profile = _profile(MachineInfo('gpu'), host_layer=0.1)
    pred = predict(profile, Placement.of({'lm': (0,)}), Workload(3, 0))
    stages = predicted_stage_ms(pred)
    assert tuple(stages) == PREDICTED_STAGES
    assert stages['prefill'] == pred.phase('prefill').wall_ms
    assert stages['vision'] == 0.0 and stages['host'] == 7.5
    assert stages['total'] == pytest.approx(sum(v for k, v in stages.items() if k != 'total'))


def test_the_cpu_budget_names_the_profiled_cpu_threads_and_cpu_bound_phases() -> None:
    machine = MachineInfo('gpu', cpu_name='Xeon 8480', cpu_cores=16, torch_threads=1)
    bound = _profile(machine, host_layer=5.0)   # issuing outlasts compute: decode follows it
    text = cpu_budget(bound, predict(bound, Placement.of({'lm': range(N)}), Workload(3, 0)), 1.5)
    assert 'Xeon 8480 (16 cores, torch threads 1)' in text and 'allowing it 1.5x slower' in text
    assert 'phases following the CPU: prefill, decode' in text and 'pre/postprocessing 7.5' in text
    old = dataclasses.replace(bound, machine=MachineInfo('gpu'))
    assert 'not recorded in the profile' in cpu_budget(old, predict(old, Placement.of()), 1.0)


def test_the_plan_command_writes_the_stages_and_the_budget(tmp_path: Path) -> None:
    profile = _profile(MachineInfo('gpu', cpu_name='Xeon', cpu_cores=2), host_layer=0.1)
    result = plan(profile, 10_000)
    path = tmp_path / 'plan.yaml'
    write_plan_params(path, plan_file_params(profile, result, 10_000, 'p.json#sha256=ab'))
    back = read_plan_params(path)
    assert back.predicted_ms['total'] == pytest.approx(result.prediction.total_ms, abs=1e-3)
    assert back.cpu_budget.startswith('one host thread') and 'Xeon (2 cores)' in back.cpu_budget
