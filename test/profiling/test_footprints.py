"""The planner counts VRAM exactly as the runtime's budget check does (tiny engine, CPU).

A plan made from parameter bytes alone can be refused by the engine a few KiB over its budget:
the runtime rounds every resident tensor to the allocator's 512 B and aligns slots.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from alpamayo_offload.engine import Engine, EngineConfig, EngineError
from alpamayo_offload.planning import PlannerOptions, plan
from alpamayo_offload.planning.errors import ProfileFormatError
from alpamayo_offload.planning.planner import vram_needed
from alpamayo_offload.planning.predictor import Placement, Workload
from alpamayo_offload.planning.profile import MachineInfo, Profile, VramProfile
from alpamayo_offload.profiling.collect import build_profile, with_footprints
from alpamayo_offload.profiling.gpu_profile import engine_vram
from alpamayo_offload.runtime import LayerSequence, OffloadRuntime, ResidencyPlan, layer_footprint

DECODE, STEPS = 3, 2
REPS = {'vit': 1, 'lm': 1 + DECODE, 'expert': STEPS}


@pytest.fixture(scope='module')
def engine() -> Engine:
    return Engine.from_config(EngineConfig(model='tiny', mode='sequential', device='cpu',
                                           fixed_decode_tokens=DECODE, diffusion_steps=STEPS))


def _profile(engine: Engine) -> Profile:
    """A profile of the tiny engine: made-up times, the engine's own byte counts."""
    calls = [{'sequence': seq, 'layer': i, 'repetition': r, 'dma_ms': 1.0, 'exe_ms': 1.0,
              'bytes': sum(p.numel() * p.element_size() for p in layer.parameters())}
             for seq, layers in engine.model.layer_sequences().items()
             for r in range(REPS[seq]) for i, layer in enumerate(layers)]
    profile = build_profile(calls, {}, model_identity='preset:tiny', machine=MachineInfo('cpu'),
                            vram=engine_vram(engine))
    return with_footprints(profile, {
        name: [(f.resident_bytes, f.slot_bytes) for f in sizes]
        for name, sizes in engine.layer_footprints().items()})


@pytest.mark.parametrize('embed_on_host', [False, True])
def test_a_plan_packed_to_the_byte_is_accepted_and_counted_alike(engine: Engine,
                                                                 embed_on_host: bool) -> None:
    profile = _profile(engine)
    wanted = Placement.of({'vit': (0, 2), 'lm': (1,), 'expert': (0, 1)},
                          embed_on_host=embed_on_host)
    budget = vram_needed(profile, wanted).total
    got = plan(profile, budget, PlannerOptions(workload=Workload(DECODE, STEPS)))
    assert vram_needed(profile, got.placement).total <= budget
    engine.replan(resident={s: got.placement.indices(s) for s in ('vit', 'lm', 'expert')},
                  mode='pipelined', budget_bytes=budget,
                  embed_on_host=got.placement.embed_on_host)
    assert engine.info.required_bytes == got.vram.total
    engine.replan(resident={s: wanted.indices(s) for s in ('vit', 'lm', 'expert')},
                  mode='pipelined', budget_bytes=budget, embed_on_host=embed_on_host)
    assert engine.info.required_bytes == budget


def test_a_profile_built_without_footprints_counts_parameter_bytes(engine: Engine) -> None:
    """Profiles built in code without a runtime count parameter bytes; the profiler's count
    what the runtime allocates, which is more."""
    exact = _profile(engine)
    bare = dataclasses.replace(exact, sequences=tuple(
        dataclasses.replace(s, resident_bytes=(), slot_bytes=()) for s in exact.sequences))
    lm = bare.sequence('lm')
    assert [lm.resident_footprint(i) for i in range(lm.n_layers)] == list(lm.layer_bytes)
    assert [lm.slot_footprint(i) for i in range(lm.n_layers)] == list(lm.layer_bytes)
    placement = Placement.of({'lm': (0, 2), 'expert': (1,)})
    assert vram_needed(bare, placement).total < vram_needed(exact, placement).total


def test_footprints_must_cover_every_profiled_layer(engine: Engine) -> None:
    profile = _profile(engine)
    with pytest.raises(ProfileFormatError, match="'lm': 1 footprints"):
        with_footprints(profile, {'vit': [(1, 1)] * 4, 'lm': [(1, 1)], 'expert': [(1, 1)] * 3})
    with pytest.raises(ProfileFormatError, match="no device footprints for sequence 'vit'"):
        with_footprints(profile, {})


def test_runtime_accounting_is_the_sum_of_footprints() -> None:
    """Odd tensor sizes: the runtime's terms are exactly the footprints of its layers."""
    layers = [nn.Sequential(nn.Linear(5, 3), nn.LayerNorm(3)) for _ in range(3)]
    layers.append(nn.Linear(7, 11))
    runtime = OffloadRuntime([LayerSequence('s', layers)], ResidencyPlan({'s': (0, 3)}),
                             mode='pipelined', device=torch.device('cpu'))
    sizes = [layer_footprint(m) for m in layers]
    assert runtime.vram_plan.resident_bytes == sizes[0].resident_bytes + sizes[3].resident_bytes
    assert runtime.vram_plan.slot_bytes == max(sizes[1].slot_bytes, sizes[2].slot_bytes)
    params = sum(p.numel() * p.element_size() for p in layers[0].parameters())
    assert sizes[0].resident_bytes == 4 * 512 > params       # four tensors, each one block


def test_the_plan_counts_the_kv_cache_of_the_nodes_decode_limit(engine: Engine) -> None:
    """A profile taken with a 3-token limit, a node that allows 64 (the node's default is 32):
    packed to the byte for the profile's limit, the node's engine refuses the plan; planned for
    the node's limit, it accepts it and counts the same total."""
    profiled = Engine.from_config(EngineConfig(model='tiny', mode='sequential', device='cpu',
                                               max_decode_tokens=3, fixed_decode_tokens=DECODE,
                                               diffusion_steps=STEPS))
    profile = _profile(profiled)
    assert profile.vram.working_set_tokens == 3 and profile.vram.working_set_per_token_bytes > 0
    node = Engine.from_config(EngineConfig(model='tiny', mode='sequential', device='cpu',
                                           max_decode_tokens=64, fixed_decode_tokens=DECODE,
                                           diffusion_steps=STEPS))
    assert profile.vram.working_set_for(64) == node.working_set_bytes()
    wanted = Placement.of({'vit': (1,), 'lm': (0, 2)}, embed_on_host=True)
    for tokens, accepted in ((None, False), (64, True)):
        options = PlannerOptions(workload=Workload(DECODE, STEPS), max_decode_tokens=tokens)
        budget = plan(profile, vram_needed(profile, wanted, tokens).total, options).vram.total
        got = plan(profile, budget, options)              # packed to the byte
        assert got.vram.total == budget
        resident = {s: got.placement.indices(s) for s in ('vit', 'lm', 'expert')}
        if not accepted:
            with pytest.raises(EngineError, match='over by'):
                node.replan(resident=resident, mode='pipelined', budget_bytes=budget,
                            embed_on_host=got.placement.embed_on_host)
            continue
        node.replan(resident=resident, mode='pipelined', budget_bytes=budget,
                    embed_on_host=got.placement.embed_on_host)
        assert node.info.required_bytes == budget


def test_working_set_for_another_decode_limit() -> None:
    vram = VramProfile(0, 0, working_set_bytes=1000, working_set_tokens=21,
                       working_set_per_token_bytes=10)
    assert vram.working_set_for(None) == 1000 and vram.working_set_for(32) == 1110
    assert vram.working_set_for(1) == 800
    assert VramProfile(0, 0, 1000).working_set_for(32) == 1000    # not measured: as profiled
