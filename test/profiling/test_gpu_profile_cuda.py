"""`alpamayo-offload profile` on a real GPU: host terms, device footprints, a plan that fits."""
from __future__ import annotations

import pytest


@pytest.mark.cuda
def test_profile_times_layer_issue_and_streaming_hooks_apart() -> None:
    import statistics

    import torch

    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.engine.identity import kernel_settings
    from alpamayo_offload.planning import PlannerOptions, plan
    from alpamayo_offload.planning.planner import minimum_budget
    from alpamayo_offload.planning.predictor import Workload
    from alpamayo_offload.profiling.gpu_profile import run_profile

    profile = run_profile(model='tiny', device='cuda', decode_tokens=4, diffusion_steps=2,
                          warmup=1, seed=0)
    assert profile.host_issue_measured
    assert profile.machine.driver            # the release, so a stale profile is detected
    assert profile.machine.kernel_settings == kernel_settings(fused_norms=True)
    runs = profile.settings['host_pre_post_runs_ms']       # each synced run, kept for diagnosis
    assert len(runs) == 3 and profile.host_ms == statistics.median(runs)
    probes = profile.settings['pinned_h2d_gbps_probes']    # a dip in one probe is not kept
    assert len(probes) == 3 and profile.machine.pinned_h2d_gbps == max(probes)
    assert set(profile.settings['fitted_tails']) <= {p.name for p in profile.phases}
    walls = profile.settings['calibration_walls_ms']    # every phase, fitted or host-bound
    assert set(walls) == {p.name for p in profile.phases} and all(ms > 0 for ms in walls.values())
    issue = profile.settings['host_issue_probe_us']      # around the resident-layer calls
    assert len(issue) == 2 and all(0 < us < 1000 for us in issue)
    for phase in profile.phases:
        assert all(ms > 0 for ms in phase.host_layer_ms), phase.name
        assert phase.host_stream_ms > 0, phase.name   # the hooks, from the streamed run
    # the tiny model fits: every layer's call was timed resident
    assert profile.settings['host_timed_resident_layers'] == {
        s.name: s.n_layers for s in profile.sequences}
    assert all(s.resident_bytes and s.slot_bytes for s in profile.sequences)
    # a plan for the minimum plus one layer, for an engine allowing 32 decode tokens (the
    # profile's allowed 4), is accepted by that engine as planned
    budget = (minimum_budget(profile, max_decode_tokens=32)
              + profile.sequence('lm').resident_footprint(0))
    got = plan(profile, budget, PlannerOptions(workload=Workload(4, 2), max_decode_tokens=32))
    engine = Engine.from_config(EngineConfig(model='tiny', device='cuda', mode='sequential',
                                             max_decode_tokens=32, fixed_decode_tokens=4,
                                             diffusion_steps=2))
    engine.replan(resident={s: got.placement.indices(s) for s in ('vit', 'lm', 'expert')},
                  mode='pipelined', budget_bytes=budget,
                  embed_on_host=got.placement.embed_on_host)
    assert engine.info.required_bytes == got.vram.total <= budget
    engine.close()
    torch.cuda.empty_cache()


@pytest.mark.cuda
def test_a_profile_at_two_samples_with_guidance_plans_that_workload() -> None:
    import torch

    from alpamayo_offload.engine import Engine, EngineConfig
    from alpamayo_offload.planning import PlannerOptions, Workload, WorkloadError, plan
    from alpamayo_offload.planning.planner import minimum_budget
    from alpamayo_offload.planning.profile import ProfiledWorkload
    from alpamayo_offload.profiling.gpu_profile import profiling_input, run_profile

    profile = run_profile(model='tiny-1.5', device='cuda', decode_tokens=4, diffusion_steps=2,
                          warmup=1, seed=0, num_samples=2, guidance_weight=1.5)
    assert profile.workload == ProfiledWorkload(2, True, 4, 4, 2)
    assert [p.name for p in profile.phases] == ['vision', 'prefill', 'decode', 'unguided',
                                                'refeed', 'diffusion']
    for phase in profile.phases:
        assert all(ms > 0 for ms in phase.host_layer_ms), phase.name
    with pytest.raises(WorkloadError, match='guidance'):
        plan(profile, 2**40, PlannerOptions(workload=Workload(4, 2, guidance=False)))
    budget = (minimum_budget(profile, max_decode_tokens=32)
              + profile.sequence('lm').resident_footprint(0))
    got = plan(profile, budget, PlannerOptions(workload=Workload(4, 2), max_decode_tokens=32))
    engine = Engine.from_config(EngineConfig(model='tiny-1.5', device='cuda', num_samples=2,
                                             guidance_weight=1.5, max_decode_tokens=32,
                                             fixed_decode_tokens=4, diffusion_steps=2))
    engine.replan(resident={s: got.placement.indices(s) for s in ('vit', 'lm', 'expert')},
                  mode='pipelined', budget_bytes=budget,
                  embed_on_host=got.placement.embed_on_host)
    assert engine.info.required_bytes == got.vram.total <= budget
    assert engine.infer(profiling_input(engine)).guided
    engine.close()
    torch.cuda.empty_cache()
