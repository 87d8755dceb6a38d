"""The LM head and the embedding as planned items; Alpamayo 2 Super's budgets 24, 32, 48 GiB.

The 2 Super profile (`testkit/super2.py`) has the full preset's sizes and invented compute
times: the tests check what fits and what the predictor charges, not latencies.
"""
from __future__ import annotations

import dataclasses

import pytest

from alpamayo_offload.planning.errors import BudgetError
from alpamayo_offload.planning.planner import (
    PlannerOptions,
    minimum_budget,
    plan,
    vram_needed,
)
from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import VramProfile
from testkit.super2 import super2_profile, table_bytes

GIB = 2**30


@pytest.fixture(scope='module')
def profile():
    return super2_profile()


@pytest.fixture(scope='module')
def plans(profile):
    # A short workload keeps the three searches quick; the budgets decide what fits.
    options = PlannerOptions(workload=Workload(decode_passes=4, diffusion_steps=2),
                             allow_head_streamed=True)
    return {gib: plan(profile, gib * GIB, options) for gib in (24, 32, 48)}


def test_2super_budgets_give_plans_within_them(plans) -> None:
    latency = []
    for gib, result in plans.items():
        assert result.vram.total <= gib * GIB
        assert result.placement.count() > 0
        latency.append(result.prediction.total_ms)
    assert latency == sorted(latency, reverse=True)      # more VRAM, never slower
    lm = [len(r.placement.indices('lm')) for r in plans.values()]
    assert lm == sorted(lm) and lm[-1] > lm[0]


def test_head_pieces_fit_the_lm_slots(profile) -> None:
    chunks = profile.head_chunks()
    assert sum(chunks) == table_bytes() and len(chunks) == 2   # 1.6 GB through 0.98 GB slots
    assert max(chunks) <= profile.sequence('lm').slot_footprint(0)
    assert super2_profile(head_apart=False).head_chunks() == ()


def test_streaming_the_head_frees_its_bytes_and_lowers_the_floor(profile) -> None:
    resident = vram_needed(profile, Placement.of(embed_on_host=True))
    streamed = vram_needed(profile, Placement.of(embed_on_host=True, head_streamed=True))
    assert resident.total - streamed.total == table_bytes()   # slots unchanged: pieces fit them
    assert streamed.slots == resident.slots
    assert minimum_budget(profile, allow_head_streamed=True) == streamed.total
    assert minimum_budget(profile) == resident.total


def test_a_streamed_head_crosses_pcie_once_per_lm_pass(profile) -> None:
    base = predict(profile, Placement.of())
    head = predict(profile, Placement.of(head_streamed=True))
    for name, passes in (('prefill', 1), ('decode', 21)):
        extra = head.phase(name).bytes_streamed - base.phase(name).bytes_streamed
        assert extra == passes * table_bytes(), name
        assert head.phase(name).wall_ms > base.phase(name).wall_ms
    for name in ('vision', 'diffusion'):
        assert head.phase(name).bytes_streamed == base.phase(name).bytes_streamed
    # copy-bound streaming: each pass pays about the head's copy time on top
    per_pass = table_bytes() / (profile.machine.pinned_h2d_gbps * 1e6)
    assert head.phase('decode').wall_ms - base.phase('decode').wall_ms == pytest.approx(
        21 * per_pass, rel=0.05)


def test_planner_streams_the_head_only_where_it_must(profile) -> None:
    options = PlannerOptions(allow_head_streamed=True)
    floor = minimum_budget(profile, allow_head_streamed=True)
    tight = plan(profile, floor + 256 * 2**20, options)        # the resident head does not fit
    assert tight.placement.head_streamed and tight.placement.embed_on_host
    roomy = plan(profile, 7 * GIB, options)   # 1.6 GB of head saves more than 1.6 GB of layers
    assert not roomy.placement.head_streamed
    assert roomy.prediction.total_ms < predict(
        profile, dataclasses.replace(roomy.placement, head_streamed=True)).total_ms
    with pytest.raises(BudgetError, match='below the minimum'):
        plan(profile, floor + 256 * 2**20, PlannerOptions())   # the engine's default: resident


def test_head_placement_needs_a_profile_that_tells_it_apart() -> None:
    lumped = super2_profile(head_apart=False)
    with pytest.raises(ValueError, match='LM head cannot stream'):
        predict(lumped, Placement.of(head_streamed=True))
    floor = minimum_budget(lumped, allow_head_streamed=True)
    assert floor == minimum_budget(lumped)
    assert not plan(lumped, floor, PlannerOptions(allow_head_streamed=True)).placement.head_streamed
    with pytest.raises(ValueError, match='head_bytes'):
        VramProfile(fixed_bytes=1, embed_bytes=0, working_set_bytes=0, head_bytes=2)
