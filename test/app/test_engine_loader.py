"""Start-up planning of the node: budget resolved, configured plan kept, re-planned or degraded.

The real tiny engine on CPU (the runtime accounts a CPU "device" budget the same way).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from alpamayo_offload.app.config import config_from_values
from alpamayo_offload.app.engine_loader import LoadedEngine, _replan, load_engine
from alpamayo_offload.app.vram import ResolvedBudget
from alpamayo_offload.engine import EngineBudgetError
from alpamayo_offload.planning import PlannerOptions, plan, save_profile
from alpamayo_offload.planning.params import profile_ref
from alpamayo_offload.planning.planner import vram_needed
from alpamayo_offload.planning.predictor import Placement
from alpamayo_offload.planning.profile import load_profile
from testkit.paper import table3_profile

# The kernel settings the node runs by default, as its loader passes them on.
KERNELS = dict(fused_norms=True, stream_graphs=True)

ALL_RESIDENT = {'resident_layers.vit': [0, 1, 2, 3], 'resident_layers.lm': [0, 1, 2],
                'resident_layers.expert': [0, 1, 2]}


def load(**values: object) -> LoadedEngine:
    """Load as the node does from these parameter values (the rest at their defaults)."""
    cfg = config_from_values(values)
    return load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info, torch_threads=cfg.torch_threads)


@pytest.fixture(scope='module')
def streaming_bytes() -> int:
    """VRAM the tiny engine needs with nothing resident and the embedding in host RAM."""
    loaded = load(embed_on_host=True)
    return int(loaded.engine.info.required_bytes)


def test_configured_plan_within_budget_is_kept() -> None:
    loaded = load(vram_budget='1GiB', **ALL_RESIDENT)
    assert loaded.warning == '' and loaded.report['plan_source'] == 'configured'
    assert loaded.engine.info.resident_layers == {'vit': (0, 1, 2, 3), 'lm': (0, 1, 2),
                                                  'expert': (0, 1, 2)}
    assert loaded.report['vram_budget_resolved_bytes'] == 2**30
    assert loaded.report['inference_threads'] == 1


def test_plan_over_budget_degrades_to_streaming_with_the_reason(streaming_bytes: int) -> None:
    budget = streaming_bytes + 1000          # streaming fits, all-resident does not
    loaded = load(vram_budget=str(budget), **ALL_RESIDENT)
    info = loaded.engine.info
    assert info.resident_layers == {'vit': (), 'lm': (), 'expert': ()}
    assert info.embed_on_host is True and info.required_bytes <= budget == info.budget_bytes
    assert loaded.report['plan_source'] == 'stream everything, embedding in host RAM'
    assert 'does not fit' in loaded.warning and 'alpamayo-offload plan --budget' in loaded.warning


def test_a_refused_plan_costs_no_reload(streaming_bytes: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The model is loaded once; the fallback plan is attached to the same loaded model."""
    from alpamayo_offload.engine import core

    loads = []
    real = core._load_model
    monkeypatch.setattr(core, '_load_model', lambda *a: loads.append(a) or real(*a))
    loaded = load(vram_budget=str(streaming_bytes + 1000), **ALL_RESIDENT)
    assert loaded.report['plan_source'] == 'stream everything, embedding in host RAM'
    assert len(loads) == 1
    assert loaded.engine.infer(loaded.engine.example_input(108, 192)).xyz.shape == (64, 3)


def test_budget_below_the_minimum_fails_naming_the_shortfall(streaming_bytes: int) -> None:
    with pytest.raises(EngineBudgetError, match='over by'):
        load(vram_budget=str(streaming_bytes // 2), **ALL_RESIDENT)


def test_replan_takes_the_planner_placement_only_from_the_matching_profile(
        tmp_path: Path) -> None:
    profile = dataclasses.replace(table3_profile(), model_identity='preset:full')
    path = tmp_path / 'profile.json'
    ref = profile_ref(path, save_profile(profile, path))
    budget = ResolvedBudget('free-2GiB', 10 * 2**30, 12 * 2**30)
    got = _replan(ref, budget, 'full', None, **KERNELS)
    want = plan(profile, 10 * 2**30, PlannerOptions()).placement
    assert got is not None and got.source == f're-planned from {path}'
    assert {m: tuple(v) for m, v in got.resident.items()} == \
        {m: want.indices(m) for m in ('vit', 'lm', 'expert')}
    assert _replan(ref, budget, 'tiny', None, **KERNELS) is None   # another model
    assert _replan(str(path) + '#sha256=00', budget, 'full', None,
                   **KERNELS) is None                               # file changed
    assert _replan('', budget, 'full', None, **KERNELS) is None


def test_replan_keeps_the_plan_files_cpu_headroom(caplog: pytest.LogCaptureFixture) -> None:
    """Bench B's H200 profile: at 16 GiB headroom 3 takes decode off the CPU; the node's
    re-plan follows the plan file, and a headroom out of range is a warning, not a crash."""
    path = (Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200'
            / 'run12' / 'planner_b' / 'profile.json')
    profile, digest = load_profile(path)
    ref = profile_ref(path, digest)
    budget = ResolvedBudget('16GiB', 16 * 2**30, None)
    for headroom in (1.0, 3.0):
        got = _replan(ref, budget, 'full', None, **KERNELS, cpu_headroom=headroom)
        want = plan(profile, 16 * 2**30, PlannerOptions(cpu_headroom=headroom)).placement
        assert got is not None and {m: tuple(v) for m, v in got.resident.items()} == \
            {m: want.indices(m) for m in ('vit', 'lm', 'expert')}
    assert _replan(ref, budget, 'full', None, **KERNELS, cpu_headroom=0.5) is None
    assert 'plan.cpu_headroom 0.5' in caplog.text



def test_a_byte_tight_plan_from_a_shorter_decode_profile_is_re_planned_to_fit(
        tmp_path: Path) -> None:
    """The plan file's profile was taken with 3 decode tokens and the plan packed to the byte
    for them; the node allows 32 (its default), so its engine refuses that plan by the KV cache
    of 29 tokens. The node re-plans from the same profile for 32 tokens and that plan fits."""
    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.planning.predictor import Workload
    from alpamayo_offload.planning.profile import MachineInfo
    from alpamayo_offload.profiling.collect import build_profile, with_footprints
    from alpamayo_offload.profiling.gpu_profile import engine_vram

    profiled = Engine.from_config(EngineConfig(model='tiny', mode='sequential', device='cpu',
                                               max_decode_tokens=3))
    reps = {'vit': 1, 'lm': 4, 'expert': 2}
    calls = [{'sequence': s, 'layer': i, 'repetition': r, 'dma_ms': 1.0, 'exe_ms': 0.1 + i,
              'bytes': 1000} for s, layers in profiled.model.layer_sequences().items()
             for r in range(reps[s]) for i in range(len(layers))]
    profile = with_footprints(
        build_profile(calls, {}, model_identity='preset:tiny', machine=MachineInfo('cpu'),
                      vram=engine_vram(profiled)),
        {n: [(f.resident_bytes, f.slot_bytes) for f in sizes]
         for n, sizes in profiled.layer_footprints().items()})
    path = tmp_path / 'profile.json'
    ref = profile_ref(path, save_profile(profile, path))
    options = PlannerOptions(workload=Workload(3, 2))
    loose = plan(profile, vram_needed(profile, Placement.of({'lm': (0, 1)}, True)).total, options)
    tight = plan(profile, loose.vram.total, options)
    assert tight.vram.total == loose.vram.total and tight.placement.resident
    resident = {f'resident_layers.{s}': list(tight.placement.indices(s)) or [-1]
                for s in ('vit', 'lm', 'expert')}
    loaded = load(vram_budget=str(tight.vram.total), **resident,
                  embed_on_host=tight.placement.embed_on_host, **{'plan.profile': ref})
    assert loaded.report['plan_source'] == f're-planned from {path}'
    assert 'over by' in loaded.warning
    assert loaded.engine.info.required_bytes <= tight.vram.total
