"""The engine loader holds the node's workload against the plan's (`plan.workload.*`).

The real tiny engine on CPU for loading; the checks themselves need no engine.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.app.engine_loader import (
    _replan,
    check_plan_workload,
    load_engine,
    node_workload,
)
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.app.vram import ResolvedBudget
from alpamayo_offload.engine import EngineConfig
from alpamayo_offload.planning import ProfiledWorkload, Workload, save_profile
from alpamayo_offload.planning.params import profile_ref
from testkit.paper import table3_profile

# The kernel settings the node runs by default, as its loader passes them on.
KERNELS = dict(fused_norms=True, stream_graphs=True)

PLANNED = {'plan.workload.num_samples': 1, 'plan.workload.guidance': False,
           'plan.workload.cameras': 4, 'plan.workload.decode_passes': 21,
           'plan.workload.diffusion_steps': 10}


def test_the_nodes_workload_comes_from_its_parameters() -> None:
    cfg = config_from_values({'decode.num_samples': 16, 'navigation.guidance_weight': 1.5,
                              'cameras.slots': [0, 1, 2, 3, 5, 6],
                              'cameras.topics': [f'/c{i}' for i in range(6)],
                              'cameras.transports': ['raw'] * 6})
    assert node_workload(cfg.engine) == Workload(num_samples=16, guidance=True, cameras=6)


@pytest.mark.parametrize(('change', 'parameter', 'said'), [
    ({'num_samples': 16}, 'decode.num_samples', 'the node runs 16 sample(s), the plan file was '
                                                'made for 1 sample(s)'),
    ({'guidance_weight': 1.5}, 'navigation.guidance_weight', 'the node runs on, the plan file '
                                                             'was made for off'),
    ({'num_cameras': 6}, 'cameras.slots', 'the node runs 6 camera(s), the plan file was made '
                                          'for 4 camera(s)'),
])
def test_a_plan_for_another_workload_is_refused_naming_the_parameter(
        change: dict[str, object], parameter: str, said: str) -> None:
    config = dataclasses.replace(EngineConfig(num_cameras=4), **change)
    with pytest.raises(ParameterError, match=parameter) as err:
        check_plan_workload(config, PLANNED)
    assert said in str(err.value) and 'alpamayo-offload profile' in str(err.value)


def test_matching_older_and_unrecorded_workloads_pass() -> None:
    check_plan_workload(EngineConfig(num_cameras=4), PLANNED)
    check_plan_workload(EngineConfig(num_samples=16, num_cameras=6), {})      # an older file
    check_plan_workload(EngineConfig(num_cameras=6), {**PLANNED, 'plan.workload.cameras': 0})


def test_loading_refuses_the_plan_before_the_model_loads(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    from alpamayo_offload.engine import Engine

    def no_load(config: EngineConfig) -> None:
        raise AssertionError('the model must not load for a refused plan')

    monkeypatch.setattr(Engine, 'load', staticmethod(no_load))
    cfg = config_from_values({'decode.num_samples': 2, **PLANNED})
    with pytest.raises(ParameterError, match='decode.num_samples: the node runs 2 sample'):
        load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info)


def test_a_plan_for_the_nodes_workload_loads() -> None:
    cfg = config_from_values({'decode.num_samples': 2,
                              **{**PLANNED, 'plan.workload.num_samples': 2}})
    loaded = load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info)
    assert loaded.report['plan_source'] == 'configured'
    assert loaded.engine.info.num_samples == 2


def test_the_re_plan_asks_for_the_nodes_workload(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    profile = dataclasses.replace(table3_profile(), model_identity='preset:full',
                                  workload=ProfiledWorkload(cameras=4))
    path = tmp_path / 'profile.json'
    ref = profile_ref(path, save_profile(profile, path))
    budget = ResolvedBudget('16GiB', 16 * 2**30, None)
    same = _replan(ref, budget, 'full', None, **KERNELS,
                   workload=Workload(num_samples=1, guidance=False, cameras=4))
    assert same is not None and same.resident
    with caplog.at_level(logging.WARNING):
        other = _replan(ref, budget, 'full', None, **KERNELS,
                        workload=Workload(num_samples=16, guidance=False, cameras=4))
    assert other is None
    assert 'workload num_samples 16 differs from the profile' in caplog.text
