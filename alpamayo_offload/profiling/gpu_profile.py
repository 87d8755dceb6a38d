"""The measuring half of `alpamayo-offload profile`: one instrumented engine run on a CUDA GPU.

Written against the engine contract in docs/design.md plus additions it needs:
`EngineConfig(instrument=True)`, `engine.example_input()`, `engine.runtime_stats(reset=False)`
(the runtime's `RuntimeStats`), `engine.layer_footprints()`, `engine.working_set_bytes(n)`,
`engine.config.max_decode_tokens` and the `engine.info` fields `embed_bytes`, `hidden_size`,
`prompt_tokens`, `driver`, `kernel_settings`.
Torch and the engine are imported on call, never at import time.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import platform
import statistics
import time
from collections import defaultdict
from typing import Any

from alpamayo_offload.planning.errors import PlanningError
from alpamayo_offload.planning.identity import model_identity
from alpamayo_offload.planning.predictor import Placement
from alpamayo_offload.planning.profile import MachineInfo, Profile, ProfiledWorkload, VramProfile
from alpamayo_offload.profiling.collect import (
    build_profile,
    with_fitted_tails,
    with_footprints,
    with_host_terms,
)
from alpamayo_offload.profiling.compression import add_compression_terms

LOG = logging.getLogger(__name__)
# The profile phases of navigation guidance's two 'unguided' passes, in the order they run.
_UNGUIDED_PHASES = ('unguided', 'refeed')
# VRAM left unused by the host-timing run with layers resident (allocator fragmentation).
_CALIBRATION_MARGIN = 2**30
# Host-timed inferences per plan the profiler times (`host_issue_calls`).
_HOST_TIMED_RUNS = 3


def pinned_h2d_gbps(torch: Any, nbytes: int = 512 * 2**20, repeats: int = 5) -> float:
    """Peak pinned host-to-device bandwidth, from one large copy (median of `repeats`)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device='cuda')
    dev.copy_(host, non_blocking=True)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return nbytes / (statistics.median(times) / 1000.0) / 1e9


def host_issue_us(torch: Any, ops: int = 2000, repeats: int = 3) -> float:
    """Host time to issue one tiny CUDA kernel, in µs (median over `repeats` runs of `ops`).

    What a host-bound pass pays per kernel, without the model: the CPU's speed of the moment,
    probed around the host-timed calls and around every bench row, since on a shared VM that
    speed moves within minutes (a decode layer call's host time by up to half).
    """
    x = torch.zeros(1, device='cuda')
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        times.append((time.perf_counter() - t0) / ops * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def embed_host_ms(torch: Any, rows: int, hidden: int, repeats: int = 5) -> float:
    """Time to gather `rows` embedding rows on the host and copy them to the GPU.

    Gathering cost depends on the rows taken, not on the table size, so a 32k-row table stands
    in for the 155k-row one.
    """
    table = torch.randn(32768, hidden, dtype=torch.bfloat16)
    ids = torch.randint(0, table.shape[0], (rows,))
    staging = torch.empty(rows, hidden, dtype=torch.bfloat16, pin_memory=True)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.index_select(table, 0, ids, out=staging)
        staging.to('cuda', non_blocking=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times[1:])


def run_profile(*, model: str, device: str, decode_tokens: int, diffusion_steps: int,
                warmup: int, seed: int, fused_norms: bool = True, num_samples: int = 1,
                guidance_weight: float | None = None, cameras: int | None = None) -> Profile:
    """Build the engine in sequential mode with nothing resident and profile one inference.

    Then the host terms (`add_host_terms`) and the compression terms
    (`compression.add_compression_terms`; "not measured" where nvCOMP does not import).

    The input is the fixed example with its frames already at the model's size, as the node
    delivers them, so the profile's host pre/postprocessing is the node's, not a 1080p resize.
    The inference is the workload to plan for: `num_samples` trajectories, navigation guidance
    with `guidance_weight` (None or 0: off), `cameras` cameras (None: the family's release
    cameras); the profile records it (`Profile.workload`).
    """
    import torch

    if not device.startswith('cuda') or not torch.cuda.is_available():
        raise PlanningError(f'profile needs a CUDA GPU (device {device!r}, CUDA available: '
                            f'{torch.cuda.is_available()}); run it on the target machine')
    from alpamayo_offload.engine import Engine, EngineConfig  # the engine imports planning

    if guidance_weight is not None and not guidance_weight >= 0:
        raise PlanningError(f'--guidance-weight {guidance_weight}: give a weight > 0, or 0 (no '
                            "guidance, as the node's navigation.guidance_weight 0)")
    guidance_weight = guidance_weight or None
    try:
        config = EngineConfig(
            model=model, device=device, mode='sequential', budget_bytes=None, resident={},
            max_decode_tokens=decode_tokens, fixed_decode_tokens=decode_tokens,
            diffusion_steps=diffusion_steps, seed=seed, fused_norms=fused_norms,
            num_samples=num_samples, guidance_weight=guidance_weight, num_cameras=cameras,
            pin_all_layers=True, instrument=True)   # nothing resident pins it all anyway
    except ValueError as err:
        raise PlanningError(f'cannot profile this workload: {err}') from err
    engine = Engine.from_config(config)
    torch.cuda.synchronize()
    profile = profile_engine(engine, model=model, loaded_bytes=torch.cuda.memory_allocated(),
                             warmup=warmup, settings={'decode_tokens': decode_tokens,
                                                      'diffusion_steps': diffusion_steps,
                                                      'seed': seed})
    model_input = profiling_input(engine)
    profile = add_host_terms(engine, model_input, profile, runs=3)
    return add_compression_terms(engine, model_input, profile)


# The route text of a profiled input with navigation guidance (its length barely matters: the
# prompt holds a few route tokens among thousands of image tokens).
PROFILE_ROUTE = 'turn left at the next intersection, then continue straight'


def profiling_input(engine: Any) -> Any:
    """Return the engine's fixed input, presized, with a route text where it runs guidance.

    Guidance runs only for an input with a route text, which needs a model that reads one.
    """
    model_input = engine.example_input(presized=True)   # as the node delivers frames
    if engine.config.guidance_weight is None:
        return model_input
    if not engine.model.cfg.camera_text:
        raise PlanningError(f'--guidance-weight needs a model that reads a route text (Alpamayo '
                            f'1.5 or 2 Super); {engine.config.model!r} does not')
    return dataclasses.replace(model_input, nav_text=PROFILE_ROUTE)


def run_workload(engine: Any, model_input: Any, result: Any) -> ProfiledWorkload:
    """Return the workload of a profiled inference: batch, guidance, cameras, passes."""
    return ProfiledWorkload(num_samples=int(engine.config.num_samples),
                            guidance=bool(result.guided), cameras=len(model_input.images),
                            decode_tokens=int(result.decode_tokens),
                            diffusion_steps=int(result.diffusion_steps))


def phase_walls_ms(result: Any) -> dict[str, float]:
    """Return each profile phase's wall in one engine result (ms), from its passes.

    Navigation guidance's two 'unguided' passes are the phases 'unguided' (the unguided
    prompt's prefill) and 'refeed', in that order; the result's timings count both as prefill.
    """
    walls: dict[str, float] = {}
    unguided = 0
    for phase, seconds in result.passes:
        if phase == 'unguided':
            phase = _UNGUIDED_PHASES[min(unguided, len(_UNGUIDED_PHASES) - 1)]
            unguided += 1
        walls[phase] = walls.get(phase, 0.0) + 1000.0 * float(seconds)
    return walls


def host_cpu_name() -> str:
    """Return the host CPU's model name (`/proc/cpuinfo`, else the platform's processor)."""
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile_engine(engine: Any, *, model: str, loaded_bytes: int, warmup: int,
                   settings: dict[str, Any]) -> Profile:
    """Profile an engine already attached in sequential mode, nothing resident, instrumented.

    `loaded_bytes` is `torch.cuda.memory_allocated()` right after attaching (non-layer modules,
    embedding and the two slots), from which the fixed VRAM is derived.
    """
    import torch

    model_input = profiling_input(engine)
    for _ in range(warmup):
        engine.infer(model_input)
    engine.runtime_stats(reset=True)
    torch.cuda.reset_peak_memory_stats()
    result = engine.infer(model_input)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    stats = engine.runtime_stats()
    info = engine.info
    calls = [c for c in stats.calls if c.streamed]
    if not calls:
        raise PlanningError('the profiling run streamed no layer; profile in sequential mode with '
                            'nothing resident and instrument=True')
    if not info.embed_bytes:
        LOG.warning('engine.info has no embed_bytes; the plan cannot move the embedding')
    free, total = torch.cuda.mem_get_info()
    hidden = info.hidden_size
    prompt = info.prompt_tokens
    timings = result.timings
    workload = run_workload(engine, model_input, result)
    rows = workload.num_samples
    gathers = {'prefill': embed_host_ms(torch, prompt, hidden),
               'decode': embed_host_ms(torch, rows, hidden)}
    if workload.guidance:   # the unguided prompt, then every row's generated tokens at once
        gathers.update(unguided=gathers['prefill'],
                       refeed=embed_host_ms(torch, rows * (workload.decode_tokens + 1), hidden))
    profile = build_profile(
        calls, phase_walls_ms(result),
        model_identity=model_identity(model),
        machine=MachineInfo(gpu_name=torch.cuda.get_device_name(),
                            driver=info.driver,
                            torch_version=torch.__version__,
                            cuda_version=str(torch.version.cuda),
                            pinned_h2d_gbps=pinned_h2d_gbps(torch),
                            kernel_settings=info.kernel_settings,
                            cpu_name=host_cpu_name(), cpu_cores=os.cpu_count() or 0,
                            torch_threads=torch.get_num_threads()),
        vram=engine_vram(engine, context_bytes=max(0, total - free - torch.cuda.memory_reserved())),
        host_ms=1000.0 * (float(timings.get('preprocess', 0.0))
                          + float(timings.get('postprocess', 0.0))),
        embed_host_ms=gathers,
        settings={**settings, 'decode_tokens_measured': result.decode_tokens,
                  'measured_working_set_bytes': max(0, peak - loaded_bytes),
                  'prompt_tokens': prompt, 'mode': 'sequential'},
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        workload=workload)
    return with_footprints(profile, {name: [(f.resident_bytes, f.slot_bytes) for f in sizes]
                                     for name, sizes in engine.layer_footprints().items()})


def engine_vram(engine: Any, context_bytes: int = 0) -> VramProfile:
    """Return the engine's own VRAM terms: what its budget check counts besides the layers."""
    info = engine.info
    tokens = int(engine.config.max_decode_tokens)
    return VramProfile(fixed_bytes=info.fixed_bytes, embed_bytes=info.embed_bytes,
                       working_set_bytes=info.working_set_bytes,
                       context_bytes=context_bytes, working_set_tokens=tokens,
                       working_set_per_token_bytes=engine.working_set_bytes(tokens + 1)
                       - engine.working_set_bytes(tokens))


def host_issue_calls(engine: Any, model_input: Any, runs: int = 1) -> list[dict[str, Any]]:
    """Time the host around every layer call of `runs` inferences (`collect.with_host_terms`).

    Each record says whether its layer was `resident` in the engine's current plan. Where the
    engine streams a layer, the device lags the host by the copies, so the device is
    synchronised before each forward and after it (waits subtracted): each call's host time is
    taken with nothing queued. Timed without those waits, a call's host time also holds the
    queue's back-pressure and over-states what a near-resident pass costs the host. A streamed
    call still over-states a resident layer's call, which is why `add_host_terms` also times the
    calls with layers resident. The gap before a pass holds its host work and only short waits.

    A prepended pre-hook starts a call's clock; the time until the hook after the runtime's
    pre-hook, plus the runtime's post-hook (after a prepended post-hook marks the forward's end),
    is the streaming part (`stream_ms`), which a resident layer does not spend. The first call of
    each language-model and expert pass also records `prologue_ms`, the host time from the start
    of the model's forward to it (what follows a host-side embedding gather). Each record names
    its `run`; the terms are medians over the passes of all runs, so one run on a slow CPU
    moment does not set them (the CPU's speed on a shared VM moves by a third within minutes).
    """
    import torch

    if runs < 1:
        raise PlanningError(f'runs = {runs} must be >= 1')
    records: list[dict[str, Any]] = []
    resident = {seq: set(idx) for seq, idx in engine.info.resident_layers.items()}
    state: dict[str, Any] = {'last': None, 'open': None, 'model_start': None, 'run': 0}
    reps: dict[tuple[str, int], int] = defaultdict(int)

    def wait() -> float:
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def begin(module: Any, args: Any) -> None:
        now = time.perf_counter()
        gap = 0.0 if state['last'] is None else 1000 * (now - state['last'])
        prologue = None if state['model_start'] is None else 1000 * (now - state['model_start'])
        state['model_start'] = None
        state['open'] = {'start': now, 'gap': gap, 'waited': 0.0, 'stream': 0.0,
                         'forward_end': now, 'prologue': prologue}

    def settle(module: Any, args: Any) -> None:
        call = state['open']
        call['stream'] += time.perf_counter() - call['start']   # the runtime's pre-hook
        call['waited'] += wait()

    def forward_done(module: Any, args: Any, output: Any) -> None:
        state['open']['forward_end'] = time.perf_counter()

    def end(seq: str, idx: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            now = time.perf_counter()
            call = state['open']
            stream = call['stream'] + now - call['forward_end']  # + the runtime's post-hook
            records.append({'run': state['run'], 'sequence': seq, 'layer': idx,
                            'repetition': reps[(seq, idx)],
                            'issue_ms': 1000 * (now - call['start'] - call['waited']),
                            'stream_ms': 1000 * stream, 'gap_ms': call['gap'],
                            'prologue_ms': call['prologue'],
                            'resident': idx in resident.get(seq, ())})
            reps[(seq, idx)] += 1
            wait()
            state['last'] = time.perf_counter()
        return hook

    def vision_starts(module: Any, args: Any) -> None:
        wait()
        state['last'] = time.perf_counter()

    def model_starts(module: Any, args: Any, kwargs: Any) -> None:
        state['model_start'] = time.perf_counter()

    handles = [engine.model.vlm.model.visual.register_forward_pre_hook(vision_starts)]
    handles += [m.register_forward_pre_hook(model_starts, with_kwargs=True)
                for m in (engine.model.vlm.model.language_model, engine.model.expert_lm)]
    for seq, layers in engine.model.layer_sequences().items():
        for idx, layer in enumerate(layers):
            handles += [layer.register_forward_pre_hook(begin, prepend=True),
                        layer.register_forward_pre_hook(settle),
                        layer.register_forward_hook(forward_done, prepend=True),
                        layer.register_forward_hook(end(seq, idx))]
    try:
        for run in range(runs):
            state.update(last=None, open=None, model_start=None, run=run)
            reps.clear()
            engine.infer(model_input)
    finally:
        for handle in handles:
            handle.remove()
    return records


def _synced_infer(torch: Any, engine: Any, model_input: Any) -> Any:
    """Run one inference started on an idle GPU; return the engine's result (timings in s).

    As the node (one inference a timer tick) and `bench_planner.py`'s rows run it.
    """
    torch.cuda.synchronize()
    return engine.infer(model_input)


def _pre_post_ms(result: Any) -> float:
    return 1000 * (result.timings['preprocess'] + result.timings['postprocess'])


def _phase_walls_ms(results: list[Any], decode_passes: int) -> dict[str, float]:
    """Return each phase's median wall (ms) over `results`.

    Decode only if every run made the profile's `decode_passes`: a checkpoint that stops at its
    own end token may not, and the fit replays the profile's pass count.
    """
    each = [phase_walls_ms(r) for r in results]
    walls = {p: statistics.median(w[p] for w in each) for p in each[0]
             if all(p in w for w in each)}
    if any(r.decode_tokens != decode_passes for r in results):
        LOG.warning('decode made %s passes, the profile %d: its non-layer time is not fitted',
                    sorted({r.decode_tokens for r in results}), decode_passes)
        walls.pop('decode', None)
    return walls


def calibration_placement(profile: Profile, spare_bytes: int) -> Placement | None:
    """Choose the layers to keep resident while timing host calls on resident layers.

    Every layer if `spare_bytes` of VRAM beyond the nothing-resident plan allow it, else every
    2nd, 4th, ... layer of each sequence, down to one each; None if not even that fits.
    """
    names = [s.name for s in profile.sequences]
    stride = 1
    while True:
        resident = {n: range(0, profile.sequence(n).n_layers, stride) for n in names}
        extra = sum(profile.sequence(n).resident_footprint(i) for n in names for i in resident[n])
        if extra <= spare_bytes:
            return Placement.of(resident)
        if all(profile.sequence(n).n_layers <= stride for n in names):
            return None
        stride *= 2


def add_host_terms(engine: Any, model_input: Any, profile: Profile, runs: int) -> Profile:
    """Return `profile` with steady host terms, fitted non-layer times and a settled link rate.

    Measured on `engine` re-attached pipelined (no VRAM cap): the streaming hooks' time with
    nothing resident; with as many layers resident as the free VRAM allows
    (`calibration_placement`), the phase walls of `runs` plain inferences (kept in
    `settings['calibration_walls_ms']`, the host-bound phases' too), to which the phases' non-layer
    times are fitted (`collect.with_fitted_tails`), and each layer call's own time
    (`collect.with_host_terms` says why), replayed as CUDA graphs when the engine graphs its
    resident layers and then once more eagerly, as streamed calls run (unless the engine graphs its
    streamed layers too, `stream_graphs`: the run with nothing resident then times the streamed
    calls as plans run them); then the pre/postprocessing, nothing resident again: timed last,
    after the process has settled, it matches what later inferences measure (timed first, right
    after the instrumented run, it came out 30-60 % high). The pinned copy rate is probed again
    after the resident runs and at the end, and the highest of the three probes kept: single probes
    dip by up to 1.4 % for a while, which would predict every copy-bound phase that much slow. The
    CPU's kernel-issue speed is probed before and after the resident layers' host calls
    (`host_issue_us`), so a later run can tell how fast the CPU was then. The engine is left
    pipelined with nothing resident (a second `host_issue_calls` may follow).
    """
    if profile.workload.guidance and getattr(model_input, 'nav_text', None) is None:
        raise PlanningError('the profile ran navigation guidance but this input has no route '
                            'text, so its runs would not; time the input of '
                            '`profiling_input(engine)`')
    import torch

    torch.cuda.set_per_process_memory_fraction(1.0)
    engine.replan(resident={}, mode='pipelined', budget_bytes=None, embed_on_host=False)
    engine.infer(model_input)                                  # warm-up of this attach
    streamed = host_issue_calls(engine, model_input, _HOST_TIMED_RUNS)
    # Free now, plus the allocator's cached blocks, less what the next inference needs of them.
    free, _total = torch.cuda.mem_get_info()
    spare = (free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
             - profile.vram.working_set_bytes - _CALIBRATION_MARGIN)
    placement = calibration_placement(profile, spare)
    resident_calls: list[dict[str, Any]] = []
    eager_calls: list[dict[str, Any]] = []
    walls: dict[str, float] = {}
    issue: list[float] = []
    probes = [profile.machine.pinned_h2d_gbps]
    if placement is None:
        LOG.warning('no VRAM to time host calls on resident layers: the profile charges every '
                    'layer its streamed host time (over-states near-resident plans)')
    else:
        engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                      mode='pipelined', budget_bytes=None, embed_on_host=False)
        engine.infer(model_input)                              # warm-up of this attach
        walls = _phase_walls_ms([_synced_infer(torch, engine, model_input)
                                 for _ in range(max(1, runs))], profile.measured_passes('decode'))
        probes.append(pinned_h2d_gbps(torch))
        issue = [host_issue_us(torch)]
        resident_calls = host_issue_calls(engine, model_input, _HOST_TIMED_RUNS)
        issue.append(host_issue_us(torch))
        if engine.config.layer_graphs and not engine.config.stream_graphs:
            # streamed calls run eagerly: time that too
            engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                          mode='pipelined', budget_bytes=None, embed_on_host=False,
                          layer_graphs=False)
            engine.infer(model_input)                          # warm-up of this attach
            eager_calls = host_issue_calls(engine, model_input, _HOST_TIMED_RUNS)
        engine.replan(resident={}, mode='pipelined', budget_bytes=None, embed_on_host=False)
        engine.infer(model_input)                              # warm-up of this attach
        profile = dataclasses.replace(profile, settings={
            **profile.settings, 'host_timed_resident_layers': {
                s: len(placement.indices(s)) for s in placement.resident}})
    host = [_pre_post_ms(_synced_infer(torch, engine, model_input)) for _ in range(max(1, runs))]
    probes.append(pinned_h2d_gbps(torch))
    LOG.info('host pre/postprocess %s ms (profiled run: %.0f ms); pinned copy probes %s GB/s',
             [round(h) for h in host], profile.host_ms, [round(p, 2) for p in probes])
    profile = dataclasses.replace(
        profile, machine=dataclasses.replace(profile.machine, pinned_h2d_gbps=max(probes)),
        settings={**profile.settings, 'host_pre_post_runs_ms': host,
                  'calibration_walls_ms': walls,
                  'pinned_h2d_gbps_probes': probes, 'host_issue_probe_us': issue})
    profile = with_host_terms(profile, streamed, host_ms=statistics.median(host),
                              resident_calls=resident_calls, eager_calls=eager_calls,
                              streamed_graphed=bool(engine.config.layer_graphs
                                                    and engine.config.stream_graphs))
    return profile if placement is None else with_fitted_tails(profile, placement, walls)
