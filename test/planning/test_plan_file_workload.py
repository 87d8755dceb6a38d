"""Plan files record the workload they were made for (`plan.workload.*`)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from alpamayo_offload.app.param_file import flatten_parameters
from alpamayo_offload.planning import PlannerOptions, ProfiledWorkload, Workload, plan
from alpamayo_offload.planning.errors import PlanFileError
from alpamayo_offload.planning.params import (
    WORKLOAD_KEYS,
    PlanParams,
    PlanWorkload,
    read_plan_params,
    write_plan_params,
)
from alpamayo_offload.profiling.commands import plan_file_params
from testkit.paper import table3_profile


def test_the_workload_round_trips_under_plan_workload(tmp_path: Path) -> None:
    workload = PlanWorkload(num_samples=16, guidance=True, cameras=6, decode_passes=21,
                            diffusion_steps=10)
    path = tmp_path / 'plan.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (1,)}, workload=workload))
    flat = flatten_parameters(yaml.safe_load(path.read_text())['/**']['ros__parameters'])
    assert tuple(k for k in flat if k.startswith('plan.workload.')) == WORKLOAD_KEYS
    assert flat['plan.workload.num_samples'] == 16 and flat['plan.workload.guidance'] is True
    assert read_plan_params(path).workload == workload


def test_older_plan_files_have_no_workload(tmp_path: Path) -> None:
    path = tmp_path / 'old.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (1,)}))
    assert 'workload' not in path.read_text()
    assert read_plan_params(path).workload is None


@pytest.mark.parametrize(('edit', 'match'), [
    ('num_samples: 16', 'plan.workload.num_samples = True must be a int'),
    ('guidance: true', "plan.workload.guidance = 1 must be a bool"),
    ('cameras: 6', 'plan.workload.cameras = 9; allowed 1..7'),
])
def test_bad_workload_terms_are_named(tmp_path: Path, edit: str, match: str) -> None:
    path = tmp_path / 'bad.yaml'
    write_plan_params(path, PlanParams(workload=PlanWorkload(16, True, 6, 21, 10)))
    bad = {'num_samples: 16': 'num_samples: true', 'guidance: true': 'guidance: 1',
           'cameras: 6': 'cameras: 9'}[edit]
    path.write_text(path.read_text().replace(edit, bad))
    with pytest.raises(PlanFileError, match=match):
        read_plan_params(path)
    path.write_text(re.sub(r'\n *cameras: 6', '', path.read_text().replace(bad, edit)))
    with pytest.raises(PlanFileError, match='plan.workload lacks cameras'):
        read_plan_params(path)


def test_the_plan_command_records_the_workload_planned_for() -> None:
    profile = dataclasses.replace(table3_profile(), workload=ProfiledWorkload(
        num_samples=4, cameras=4, decode_tokens=21, diffusion_steps=10))
    options = PlannerOptions(workload=Workload(12, 8))
    result = plan(profile, 12 * 2**30, options)
    params = plan_file_params(profile, result, 12 * 2**30, 'p.json#sha256=ab', 1.0,
                              options.workload)
    assert params.workload == PlanWorkload(4, False, 4, 12, 8)
    older = plan_file_params(table3_profile(), plan(table3_profile(), 12 * 2**30),
                             12 * 2**30, 'p.json#sha256=ab')
    assert older.workload == PlanWorkload(1, False, 0, 1, 1)
