"""Turn one instrumented sequential run (runtime stats + phase wall times) into a `Profile`.

Pure: it reads the runtime's per-call records duck-typed (`sequence`, `layer`, `repetition`,
`dma_ms`, `exe_ms`, `bytes`), so it is tested on CPU with records built by hand. The mapping of
sequence repetitions to phases is Alpamayo's: the ViT runs once (vision), the language model
once for prefill and then once per decode pass (with navigation guidance then once more for the
unguided prompt's prefill and once for the refeed of the guided tokens), the expert once per
diffusion step.

`with_host_terms` adds what a second, host-timed run measured: the CPU time to issue each layer
call and the CPU time of each pass outside its layers. `with_footprints` adds each layer's
device bytes as the runtime's budget check counts them. `with_fitted_tails`
fits the phases' non-layer time to a pipelined run with layers resident.
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from alpamayo_offload.planning.errors import ProfileFormatError
from alpamayo_offload.planning.predictor import Placement, Workload, predict
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    ProfiledWorkload,
    SequenceProfile,
    VramProfile,
)

LOG = logging.getLogger(__name__)

# One phase of a sequence's repetitions: (phase, repeats kind, number of repetitions in order,
# or None for those the sequence's other phases leave).
_PhaseSlice = tuple[str, str, int | None]
# sequence -> its phases, in the order their repetitions run.
PHASES_OF_SEQUENCE: Mapping[str, tuple[_PhaseSlice, ...]] = {
    'vit': (('vision', 'once', None),),
    'lm': (('prefill', 'once', 1), ('decode', 'decode', None)),
    'expert': (('diffusion', 'diffusion', None),),
}
# With navigation guidance the language model runs two more passes after decode: the unguided
# prompt's prefill and the refeed of the guided tokens (model/inference.py `unguided_context`).
GUIDED_PHASES_OF_SEQUENCE: Mapping[str, tuple[_PhaseSlice, ...]] = {
    **PHASES_OF_SEQUENCE,
    'lm': (('prefill', 'once', 1), ('decode', 'decode', None), ('unguided', 'once', 1),
           ('refeed', 'once', 1)),
}

# Phases whose passes start by reading a device value on the host, whatever the plan: a prefill
# checks the image-token count (`int(image_mask.sum())` in model/inference.py), the guided one
# and the unguided one alike. Decode passes do so only with the embedding on the host (the
# predictor adds that wait with the gather).
HOST_WAITS = frozenset({'prefill', 'unguided'})


def phases_of_sequence(guidance: bool) -> Mapping[str, tuple[_PhaseSlice, ...]]:
    """Return each sequence's phases for a run with or without navigation guidance."""
    return GUIDED_PHASES_OF_SEQUENCE if guidance else PHASES_OF_SEQUENCE


def _split(order: list[Any], phases: Sequence[_PhaseSlice]) -> list[tuple[str, str, list[Any]]]:
    """Deal a sequence's repetitions, in order, to its phases: (phase, repeats, repetitions)."""
    fixed = sum(count for _, _, count in phases if count is not None)
    rest = max(0, len(order) - fixed)
    out = []
    for phase, repeats, count in phases:
        n = rest if count is None else count
        out.append((phase, repeats, order[:n]))
        order = order[n:]
    return out
# A fitted phase whose replay exceeds its measured wall by more than this share is reported.
_FIT_TOLERANCE = 0.01
# A call whose compute exceeds this many times its layer's median over passes is reported.
_OUTLIER_FACTOR = 5.0


def _field(record: Any, name: str) -> Any:
    return record[name] if isinstance(record, Mapping) else getattr(record, name)


def _has(record: Any, name: str) -> bool:
    return name in record if isinstance(record, Mapping) else hasattr(record, name)


def build_profile(calls: Iterable[Any], phase_wall_ms: Mapping[str, float], *,
                  model_identity: str, machine: MachineInfo, vram: VramProfile,
                  host_ms: float = 0.0, embed_host_ms: Mapping[str, float] | None = None,
                  settings: Mapping[str, Any] | None = None, created_at: str = '',
                  workload: ProfiledWorkload | None = None) -> Profile:
    """Build a profile from per-call records of a sequential run with nothing resident.

    DMA per layer is the median over its calls (the copy does not depend on the phase);
    compute is kept per pass. A phase's non-layer time is its wall time minus its layers'
    copy and compute time, spread evenly over its passes. `workload` is what the run ran (None:
    one sample without guidance); with guidance its last two language-model passes are the
    phases 'unguided' and 'refeed'.
    """
    workload = workload or ProfiledWorkload()
    layout = phases_of_sequence(workload.guidance)
    table: dict[str, dict[int, dict[int, tuple[float, float, int]]]] = defaultdict(
        lambda: defaultdict(dict))
    for rec in calls:
        table[str(_field(rec, 'sequence'))][int(_field(rec, 'repetition'))][
            int(_field(rec, 'layer'))] = (float(_field(rec, 'dma_ms')),
                                          float(_field(rec, 'exe_ms')), int(_field(rec, 'bytes')))
    sequences, phases = [], []
    for name in (n for n in layout if n in table):
        reps = table[name]
        n_layers = 1 + max(max(r) for r in reps.values())
        for rep, layers in sorted(reps.items()):
            if sorted(layers) != list(range(n_layers)):
                raise ProfileFormatError(f'sequence {name!r} repetition {rep} recorded layers '
                                         f'{sorted(layers)}, expected 0..{n_layers - 1}; profile '
                                         f'in sequential mode with nothing resident')
        dma = tuple(statistics.median(reps[r][i][0] for r in reps) for i in range(n_layers))
        nbytes = tuple(max(reps[r][i][2] for r in reps) for i in range(n_layers))
        sequences.append(SequenceProfile(name, nbytes, dma))
        for phase, repeats, taken in _split(sorted(reps), layout[name]):
            if not taken:
                continue
            exe = tuple(tuple(reps[r][i][1] for i in range(n_layers)) for r in taken)
            _warn_outliers(phase, exe)
            layer_ms = sum(sum(row) for row in exe) + len(taken) * sum(dma)
            wall = float(phase_wall_ms.get(phase, layer_ms))
            other = max(0.0, wall - layer_ms) / len(taken)
            phases.append(PhaseProfile(phase, name, repeats, exe, (other,) * len(taken),
                                       float((embed_host_ms or {}).get(phase, 0.0)),
                                       host_waits=phase in HOST_WAITS))
    if not sequences:
        raise ProfileFormatError('no layer calls recorded; run the engine with instrument=True')
    return Profile(model_identity, machine, tuple(sequences), tuple(phases), vram, host_ms,
                   dict(settings or {}), created_at, workload)


def _warn_outliers(phase: str, exe: tuple[tuple[float, ...], ...]) -> None:
    """Log calls far above their layer's median (a host stall inside an instrumented call)."""
    if len(exe) < 3:
        return
    for i, col in enumerate(zip(*exe, strict=True)):
        typical = statistics.median(col)
        for rep, value in enumerate(col):
            if value > _OUTLIER_FACTOR * typical + 1.0:
                LOG.warning('%s pass %d layer %d computed %.1f ms against a median of %.2f ms; '
                            'the predictor uses the median', phase, rep, i, value, typical)


# Per layer call: issue ms without the streaming part, gap ms, stream ms, prologue ms or None.
_HostCall = tuple[float, float, float, float | None]


def _host_table(host_calls: Iterable[Any], guidance: bool, resident_only: bool = False
                ) -> dict[str, list[dict[int, _HostCall]]]:
    """Per phase, its passes of every run: layer -> its `_HostCall`.

    `guidance`: the runs ran navigation guidance (two more language-model phases).
    """
    table: dict[tuple[int, str], dict[int, dict[int, _HostCall]]] = defaultdict(
        lambda: defaultdict(dict))
    for rec in host_calls:
        if resident_only and not (_has(rec, 'resident') and _field(rec, 'resident')):
            continue
        stream = float(_field(rec, 'stream_ms')) if _has(rec, 'stream_ms') else 0.0
        prologue = _field(rec, 'prologue_ms') if _has(rec, 'prologue_ms') else None
        run = int(_field(rec, 'run')) if _has(rec, 'run') else 0
        table[(run, str(_field(rec, 'sequence')))][int(_field(rec, 'repetition'))][
            int(_field(rec, 'layer'))] = (float(_field(rec, 'issue_ms')) - stream,
                                          float(_field(rec, 'gap_ms')), stream,
                                          None if prologue is None else float(prologue))
    by_phase: dict[str, list[dict[int, _HostCall]]] = defaultdict(list)
    for (_run, name), reps in sorted(table.items()):
        order = [reps[r] for r in sorted(reps)]
        for phase, _repeats, taken in _split(order, phases_of_sequence(guidance).get(name, ())):
            by_phase[phase].extend(taken)
    return dict(by_phase)


def _resident_issue(streamed: tuple[float, ...],
                    passes: list[dict[int, _HostCall]]) -> tuple[float, ...]:
    """Return each layer's issue time as a resident call.

    Measured where the layer was resident, else its streamed time scaled by the phase's median
    resident/streamed ratio (the layers of one sequence have one shape).
    """
    measured = {i: statistics.median(calls[i][0] for calls in passes if i in calls)
                for i in sorted({i for calls in passes for i in calls})}
    ratio = statistics.median(measured[i] / streamed[i] for i in measured if streamed[i] > 0)
    return tuple(measured.get(i, streamed[i] * ratio) for i in range(len(streamed)))


def with_host_terms(profile: Profile, host_calls: Iterable[Any], *,
                    host_ms: float | None = None, resident_calls: Iterable[Any] = (),
                    eager_calls: Iterable[Any] = (), streamed_graphed: bool = False) -> Profile:
    """Return `profile` with the host issue terms of a host-timed run (and a steady host_ms).

    Each record has `sequence`, `layer`, `repetition` (as in the runtime's calls), `issue_ms`
    (CPU time from the layer's first hook to its last, device waits excluded), `gap_ms` (CPU
    time since the previous layer call ended, device waits excluded; for the first call of an
    inference, since the vision pass began) and optionally `stream_ms` (the part of `issue_ms`
    spent in the runtime's streaming hooks; the run streams every layer) and optionally `run`
    (records of several timed inferences pool their passes). Per phase: the median
    over passes of each layer's issue time without its streaming part, the median of the
    streaming part over all its calls, and the median over passes of the pass's summed gaps
    (its non-layer host work).

    `resident_calls`, from a run with some layers resident (records with `resident` true),
    replace the issue times: a call of a resident layer costs the host less than the same call
    streamed, beyond the hooks (about a quarter less a decode pass on the H200), and the issue
    time only binds near-resident plans.

    `eager_calls`, from the same plan with its resident layers run eagerly, where
    `resident_calls` replayed them as CUDA graphs: they give the issue times of streamed calls
    (`host_streamed_layer_ms`) for an engine that runs its streamed layers eagerly.
    `streamed_graphed`: the engine replays its streamed layers as CUDA graphs by slot, as
    `host_calls` ran them, so their issue times (hooks excluded) are `host_streamed_layer_ms`:
    a streamed graphed call also takes its slot's graph key and clones the graph's output,
    which a resident graphed call does not. The first call of a pass recording `prologue_ms` in
    every pass gives `host_prologue_ms` (their median).
    """
    eager_calls = list(eager_calls)
    if streamed_graphed and eager_calls:
        raise ValueError('eager_calls time streamed calls that run eagerly; with '
                         'streamed_graphed the streamed run itself times them')
    guidance = profile.workload.guidance
    by_phase = _host_table(host_calls, guidance)
    resident_by_phase = _host_table(resident_calls, guidance, resident_only=True)
    eager_by_phase = _host_table(eager_calls, guidance, resident_only=True)
    phases = []
    for phase in profile.phases:
        passes = by_phase.get(phase.name)
        if not passes:
            phases.append(phase)
            continue
        n = len(phase.exe_ms[0])
        missing = [k for k, calls in enumerate(passes) if sorted(calls) != list(range(n))]
        if missing:
            raise ProfileFormatError(f'host-timed run: {phase.name!r} passes {missing} lack '
                                     f'layer calls (expected layers 0..{n - 1} in every pass)')
        issue = tuple(statistics.median(calls[i][0] for calls in passes) for i in range(n))
        lead = statistics.median(sum(c[1] for c in calls.values()) for calls in passes)
        stream = statistics.median(c[2] for calls in passes for c in calls.values())
        prologues = [calls[0][3] for calls in passes]
        eager: tuple[float, ...] = issue if streamed_graphed else ()
        if any(eager_by_phase.get(phase.name, ())):
            eager = _resident_issue(issue, eager_by_phase[phase.name])
        if any(resident_by_phase.get(phase.name, ())):
            issue = _resident_issue(issue, resident_by_phase[phase.name])
        phases.append(dataclasses.replace(
            phase, host_layer_ms=issue, host_lead_ms=lead, host_stream_ms=stream,
            host_streamed_layer_ms=eager,
            host_prologue_ms=None if None in prologues else statistics.median(prologues)))
    return dataclasses.replace(profile, phases=tuple(phases),
                               host_ms=profile.host_ms if host_ms is None else host_ms)


def with_footprints(profile: Profile,
                    footprints: Mapping[str, Sequence[tuple[int, int]]]) -> Profile:
    """Return `profile` with each layer's (resident bytes, slot bytes) from the runtime.

    The planner then counts VRAM exactly as the engine's budget check will, so a plan packed to
    the byte is never refused by it.
    """
    sequences = []
    for seq in profile.sequences:
        sizes = footprints.get(seq.name)
        if sizes is None:
            raise ProfileFormatError(f'no device footprints for sequence {seq.name!r} '
                                     f'(have {sorted(footprints)})')
        if len(sizes) != seq.n_layers:
            raise ProfileFormatError(f'sequence {seq.name!r}: {len(sizes)} footprints for '
                                     f'{seq.n_layers} profiled layers')
        sequences.append(dataclasses.replace(seq, resident_bytes=tuple(r for r, _ in sizes),
                                             slot_bytes=tuple(s for _, s in sizes)))
    return dataclasses.replace(profile, sequences=tuple(sequences))


def with_fitted_tails(profile: Profile, placement: Placement, phase_ms: Mapping[str, float],
                      rounds: int = 4) -> Profile:
    """Return `profile` with each phase's non-layer time fitted to a pipelined run of `placement`.

    The sequential run's non-layer time is its wall less its layers' copy and compute, so it
    also holds host time that a pipelined run overlaps with the GPU, and taken as is it
    over-predicts pipelined phases (vision by about 15 % on the H200). Fitted, it is what the
    predictor's replay of
    `placement` (measured phase walls `phase_ms`, the profile's own pass counts) leaves
    unexplained. A phase the host bounds in that run (`cpu_sensitive`) keeps the sequential
    figure: its wall follows the CPU, not the non-layer GPU work. Each round moves every fitted
    phase by its residual per pass; a phase's shift moves the next phase's start, hence rounds.
    The fit is recorded in `settings['fitted_tails']` (phase -> sequential and fitted ms, the
    measured wall and the fitted profile's replay of it). A phase whose run is faster than its
    layers' compute alone cannot be fitted below zero: its replay stays above the measured wall
    (resident layers replayed as CUDA graphs compute faster than the eager calls the profiler
    times), which the record shows and a warning names.
    """
    workload = Workload(profile.measured_passes('decode'), profile.measured_passes('diffusion'))
    first = predict(profile, placement, workload)
    fit = {p.name for p in first.phases if p.passes and p.name in phase_ms and not p.cpu_sensitive}
    before = {p.name: p.typical_other_ms() for p in profile.phases if p.name in fit}
    for _ in range(rounds):
        got = predict(profile, placement, workload)
        phases = []
        for phase in profile.phases:
            if phase.name in fit:
                pred = got.phase(phase.name)
                other = max(0.0, phase.typical_other_ms()
                            + (phase_ms[phase.name] - pred.wall_ms) / pred.passes)
                phase = dataclasses.replace(phase, other_ms=(other,) * len(phase.other_ms))
            phases.append(phase)
        profile = dataclasses.replace(profile, phases=tuple(phases))
    replayed = predict(profile, placement, workload)
    fitted = {p.name: {'sequential_ms': before[p.name], 'fitted_ms': p.typical_other_ms(),
                       'measured_wall_ms': float(phase_ms[p.name]),
                       'replayed_wall_ms': replayed.phase(p.name).wall_ms}
              for p in profile.phases if p.name in fit}
    over = {k: f"{v['replayed_wall_ms']:.1f} > {v['measured_wall_ms']:.1f} ms"
            for k, v in fitted.items()
            if v['replayed_wall_ms'] > (1 + _FIT_TOLERANCE) * v['measured_wall_ms']}
    if over:
        LOG.warning('non-layer time fitted to zero and the replay still over-states the '
                    'pipelined run (its layers compute faster there than timed one by one): %s',
                    over)
    LOG.info('non-layer time fitted to the pipelined run: %s',
             {k: f"{v['sequential_ms']:.1f} -> {v['fitted_ms']:.1f} ms" for k, v in fitted.items()})
    return dataclasses.replace(profile, settings={**profile.settings, 'fitted_tails': fitted})
