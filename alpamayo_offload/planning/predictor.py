"""Latency of any residency plan, from a profile, by replaying the two-engine pipeline.

The GPU has a copy engine and a compute engine. With two slots shared by all sequences
(the runtime's double buffer), for the j-th streamed layer invocation of an inference:

1. its copy starts when the copy engine is free and its slot is free, i.e. the compute of
   streamed invocation j-2 (the slot's previous user) has finished (write-after-read);
2. its compute starts when its copy has finished (read-after-write) and the previous compute
   has finished; a resident layer and non-layer work only wait for the previous compute.

Prefetch crosses pass and phase boundaries (the runtime's hints), so the first layer of the next
decode pass copies while the current pass still computes. `Pipeline.COLD_PASSES` instead starts
every pass with an empty pipeline, as the authors' hooks do; in it the replay reduces exactly to
the paper's Eq. 1, 2, 5, 6 and 7 (proved in test/planning/test_closed_forms.py).
`Pipeline.SEQUENTIAL` is the runtime's sequential mode: every copy waits for all compute before it.
In both of the runtime's modes a layer still in its slot from its previous pass is not copied
again: a sequence streaming no more layers than there are slots streams nothing after its first
pass (a near-resident plan that streams two LM layers copies them once, not every decode pass).

A third engine is the host thread that issues the work: a layer's compute cannot start before the
host reached its call, nor end before the host issued its last kernel; a prefetch copy cannot start
before the host issued it (in the previous streamed layer's hook); a pass that reads a device value
on the host (`host_waits`, or the host-side embedding gather) first waits for the compute engine.
With everything resident, a pass therefore costs its host issue time when that is longer than its
compute (a decode pass of small kernels on a slow host). A resident call costs the host its layer's
issue time as timed on resident layers (`host_layer_ms`; a graphed call where the engine replays
resident layers as CUDA graphs); a streamed call costs its own issue time as the profile's engine
ran streamed calls (`host_streamed_layer_ms`: eager, several times a graphed one, or replayed by
slot, which also takes the slot's graph key and clones the output) plus the runtime's streaming
hooks (`host_stream_ms`). Without host terms (zeros) the host never delays anything and the replay
is the two-engine one above. A pass that waits only for the host-side gather waits right before the
model's forward, so only the gather and the forward's prologue (`host_prologue_ms`) follow the
wait; the rest of the lead overlaps the previous pass's compute.

Compression adds a fourth engine, the decompression stream, and four placements per layer:
resident raw; kept compressed in VRAM (`Placement.compressed`: no copy, its decompression into
a slot waits only for the slot's previous reader); streamed compressed (`Placement.compression`:
the copy moves the layer's compressed bytes, then the decompression waits for that copy, and the
compute for the decompression, so the copy of layer i+1 runs while layer i decompresses and
layer i-1 computes); streamed raw (a layer the codec does not shrink streams raw, as the runtime
does, and everything streams raw without `compression`). A decompression running alongside a
compute slows it by the sequence's measured SM contention times their overlap, and enqueueing it
costs the host the sequence's measured `decompress_host_ms`, which adds up in host-bound
decode passes.

The LM head (`Placement.head_streamed`, where the profile tells its bytes apart) may stream
instead of staying resident: every pass of an LM phase (prefill, decode) ends with it, so after
the pass's last layer its pieces (`Profile.head_chunks`) stream through the two slots like
layers whose compute is part of the pass's non-layer tail. The tail waits for the last piece,
and a slot holding a piece is free again only when the tail (which runs the head) has ended.
The token embedding is never streamed: it is resident or kept in host RAM, where the gather runs
on the host and only the rows the pass uses cross PCIe (`PhaseProfile.embed_host_ms`);
streaming the whole table to read a few rows would move 1.6 GB per decode pass for 2 Super.

A batch is priced as the profile measured it (`Workload`): a pass of S samples reads each
streamed layer once, so its copies are those of one sample and only its compute (measured at S)
is larger. Navigation guidance's profile has two more LM phases after decode ('unguided': the
unguided prompt's prefill; 'refeed': the guided tokens fed to the unguided cache), one pass
each, streaming the LM's layers like any other pass; its diffusion compute is that of the
stacked guided and unguided rows.

Per-layer compute is the median over the profiled passes, never the mean (one stalled call would
be charged to every pass). In pipelined mode a copy runs at the machine's pinned host-to-device
peak when the profile has one: the runtime's double buffer keeps the copy engine at 100 % of it
(`bench/bench_runtime.py`), while copies timed one by one in the profiler's instrumented
sequential run come out a few per cent slower.
"""
from __future__ import annotations

import dataclasses
import enum
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from alpamayo_offload.planning.errors import WorkloadError
from alpamayo_offload.planning.profile import MAX_CAMERAS, Profile


class Pipeline(enum.Enum):
    """Which copy/compute ordering the replay models."""

    PIPELINED = 'pipelined'        # our runtime: two slots, prefetch across boundaries
    COLD_PASSES = 'cold-passes'    # two slots, each pass starts cold (the paper's closed forms)
    SEQUENTIAL = 'sequential'      # copy, then compute, no overlap


@dataclass(frozen=True)
class Workload:
    """The inference to price: pass counts, and the batch, guidance and cameras it runs.

    Pass counts may differ from the profile's: every decode pass and diffusion step repeats
    the profiled per-pass terms (the paper's N). `num_samples`, `guidance` and `cameras` may
    not (None: as profiled): a batch of S rows reads each streamed layer once, so its bytes do
    not grow with S, but its compute does, by a measured amount that is not linear in S (a
    decode pass of 16 rows costs far less than 16 of one row); guidance adds the unguided
    passes and doubles the expert's rows; the cameras set the prompt length. A workload
    differing in any of them is refused (`check_workload`): profile at it instead.
    """

    decode_passes: int = 21
    diffusion_steps: int = 10
    num_samples: int | None = None
    guidance: bool | None = None
    cameras: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.decode_passes <= 4096:
            raise ValueError(f'Workload.decode_passes = {self.decode_passes}; allowed 0..4096')
        if not 0 <= self.diffusion_steps <= 1000:
            raise ValueError(f'Workload.diffusion_steps = {self.diffusion_steps}; allowed 0..1000')
        if self.num_samples is not None and self.num_samples < 1:
            raise ValueError(f'Workload.num_samples = {self.num_samples}; give >= 1, or None '
                             '(as profiled)')
        if self.cameras is not None and not 1 <= self.cameras <= MAX_CAMERAS:
            raise ValueError(f'Workload.cameras = {self.cameras}; allowed 1..{MAX_CAMERAS}, or '
                             'None (as profiled)')

    def passes(self, repeats: str) -> int:
        """How many passes a phase with this `repeats` kind makes."""
        return {'once': 1, 'decode': self.decode_passes,
                'diffusion': self.diffusion_steps}[repeats]

    def resolved(self, profile: Profile) -> Workload:
        """Return this workload with the profile's batch, guidance and cameras where None."""
        measured = profile.workload
        return dataclasses.replace(
            self, num_samples=measured.num_samples if self.num_samples is None
            else self.num_samples,
            guidance=measured.guidance if self.guidance is None else self.guidance,
            cameras=(measured.cameras or None) if self.cameras is None else self.cameras)


# The `alpamayo-offload profile` option that sets each workload term, for refusal messages.
_PROFILE_OPTION = {'num_samples': '--num-samples {}', 'guidance': '--guidance-weight W',
                   'cameras': '--cameras {}'}


def check_workload(profile: Profile, workload: Workload) -> None:
    """Refuse (`WorkloadError`, naming the term) a workload the profile did not measure.

    Batch, guidance and cameras must be the profile's (None: as profiled); a profile that did
    not record its cameras (0) is not checked for them.
    """
    measured = profile.workload
    wanted = {'num_samples': workload.num_samples, 'guidance': workload.guidance,
              'cameras': workload.cameras}
    have = {'num_samples': measured.num_samples, 'guidance': measured.guidance,
            'cameras': measured.cameras or None}
    for name, value in wanted.items():
        if value is None or have[name] is None or value == have[name]:
            continue
        if name == 'guidance':
            fix = '--guidance-weight W' if value else 'no --guidance-weight'
        else:
            fix = _PROFILE_OPTION[name].format(value)
        raise WorkloadError(
            f'workload {name} {value!r} differs from the profile\'s {have[name]!r}: layer '
            f'compute is measured at the profile\'s workload and not scaled to another (a '
            f'batch reads the same streamed bytes but computes more); profile at this one with '
            f'`alpamayo-offload profile {fix}`')


def _cleaned(table: Mapping[str, Iterable[int]] | None) -> dict[str, frozenset[int]]:
    """Sorted by sequence, indices as frozensets, empty sequences dropped."""
    sets = {k: frozenset(int(i) for i in v) for k, v in (table or {}).items()}
    return {k: v for k, v in sorted(sets.items()) if v}


HEAD = 'head'
"""Step name of the LM head's pieces when it streams (not a layer sequence)."""


@dataclass(frozen=True)
class Placement:
    """Each layer's placement, per sequence, and where the embedding and the LM head are.

    `resident` layers stay raw in VRAM; `compressed` ones stay compressed in VRAM and decompress
    into a slot each pass; the others stream, compressed when `compression` is on (the runtime
    then compresses every streamed layer that shrinks), raw otherwise. Keeping a layer
    compressed needs the codec, so `compressed` needs `compression`. `embed_on_host` keeps the
    token embedding in host RAM (gathered there); `head_streamed` streams the LM head through
    the slots each LM pass instead of keeping it in VRAM.
    """

    resident: Mapping[str, frozenset[int]]
    embed_on_host: bool = False
    compressed: Mapping[str, frozenset[int]] = field(default_factory=dict)
    compression: bool = False
    head_streamed: bool = False

    @classmethod
    def of(cls, resident: Mapping[str, Iterable[int]] | None = None,
           embed_on_host: bool = False, compressed: Mapping[str, Iterable[int]] | None = None,
           compression: bool = False, head_streamed: bool = False) -> Placement:
        """Build from plain index lists; empty sequences are dropped."""
        return cls(_cleaned(resident), embed_on_host, _cleaned(compressed), compression,
                   head_streamed)

    def indices(self, sequence: str) -> tuple[int, ...]:
        """Sorted resident indices of one sequence."""
        return tuple(sorted(self.resident.get(sequence, ())))

    def compressed_indices(self, sequence: str) -> tuple[int, ...]:
        """Sorted indices of one sequence kept compressed in VRAM."""
        return tuple(sorted(self.compressed.get(sequence, ())))

    def with_layer(self, sequence: str, index: int) -> Placement:
        """Return a copy with one more resident (raw) layer, no longer kept compressed."""
        new = dict(self.resident)
        new[sequence] = frozenset(new.get(sequence, frozenset()) | {index})
        kept = {k: v - {index} if k == sequence else v for k, v in self.compressed.items()}
        return Placement(dict(sorted(new.items())), self.embed_on_host,
                         {k: v for k, v in kept.items() if v}, self.compression,
                         self.head_streamed)

    def with_compressed(self, sequence: str, index: int) -> Placement:
        """Return a copy with one more layer kept compressed in VRAM (compression on)."""
        new = dict(self.compressed)
        new[sequence] = frozenset(new.get(sequence, frozenset()) | {index})
        return Placement(self.resident, self.embed_on_host, dict(sorted(new.items())), True,
                         self.head_streamed)

    def with_head_resident(self) -> Placement:
        """Return a copy with the LM head kept in VRAM."""
        return dataclasses.replace(self, head_streamed=False)

    def count(self) -> int:
        """Total number of resident (raw) layers."""
        return sum(len(v) for v in self.resident.values())

    def compressed_count(self) -> int:
        """Total number of layers kept compressed in VRAM."""
        return sum(len(v) for v in self.compressed.values())

    def validate(self, profile: Profile) -> None:
        """Raise ValueError naming an unknown sequence, a bad index or an unmeasured codec."""
        for kind, table in (('resident', self.resident), ('compressed', self.compressed)):
            for name, idx in table.items():
                n = profile.sequence(name).n_layers
                bad = sorted(i for i in idx if not 0 <= i < n)
                if bad:
                    raise ValueError(f'{kind} indices {bad} of {name!r} are outside 0..{n - 1}')
        for name, idx in self.compressed.items():
            both = sorted(idx & self.resident.get(name, frozenset()))
            if both:
                raise ValueError(f'layers {both} of {name!r} are both resident and kept '
                                 'compressed; give each layer one placement')
        if self.compressed and not self.compression:
            raise ValueError('layers kept compressed need compression on (the codec)')
        if self.head_streamed and not profile.head_chunks():
            raise ValueError('the LM head cannot stream: the profile does not tell its bytes '
                             'apart (vram.head_bytes 0) or has no LM sequence')
        if self.compression and not profile.compression_measured:
            raise ValueError('the profile did not measure compression (compressed bytes, '
                             'decompression rate); re-profile where nvCOMP imports, or plan '
                             'without compression')


# A phase whose host issue time reaches this share of its busiest GPU engine's time runs at the
# CPU's pace or close to it: on a shared VM such passes move with the host's speed between runs
# (by up to 16 %) while copy-bound ones hold within about 1.5 % (docs/benchmarks.md, section 3).
CPU_SENSITIVE_SHARE = 0.75


@dataclass(frozen=True)
class PhasePrediction:
    """One phase: wall time split into compute and bubble (compute engine waiting for copies)."""

    name: str
    passes: int
    wall_ms: float
    copy_ms: float        # copy-engine busy time for this phase's streamed layers
    compute_ms: float     # compute-engine busy time (layers + non-layer work)
    bubble_ms: float      # wall - compute: time the compute engine waited for copies
    bytes_streamed: int
    host_ms: float = 0.0  # host-thread issue time (leads, layer calls, streaming hooks)
    decompress_ms: float = 0.0  # decompression-stream busy time (compressed layers)

    @property
    def cpu_sensitive(self) -> bool:
        """Whether the host's issue work (nearly) bounds the phase: its latency follows the CPU."""
        gpu = max(self.copy_ms, self.compute_ms)
        return self.host_ms > 0 and self.host_ms >= CPU_SENSITIVE_SHARE * gpu


@dataclass(frozen=True)
class Prediction:
    """End-to-end latency of one plan and its per-phase breakdown."""

    total_ms: float
    host_ms: float
    phases: tuple[PhasePrediction, ...]

    @property
    def total_s(self) -> float:
        """End-to-end latency in seconds."""
        return self.total_ms / 1000.0

    def phase(self, name: str) -> PhasePrediction:
        """Return the breakdown of one phase."""
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)

    def as_dict(self) -> dict[str, object]:
        """JSON-able form for reports."""
        return {'total_ms': self.total_ms, 'host_ms': self.host_ms,
                'phases': [{**asdict(p), 'cpu_sensitive': p.cpu_sensitive}
                           for p in self.phases]}

    def cpu_sensitive_phases(self) -> tuple[str, ...]:
        """Names of the phases whose latency follows the CPU (`PhasePrediction.cpu_sensitive`)."""
        return tuple(p.name for p in self.phases if p.cpu_sensitive)


# One layer invocation of a pass: (sequence, layer index, exe ms, copy ms, bytes, host issue ms
# resident, host issue ms streamed).
_Step = tuple[str, int, float, float, int, float, float]


@dataclass(frozen=True)
class _Phase:
    """One phase's passes, all alike: the steps of one pass and how many passes there are."""

    steps: tuple[_Step, ...]
    passes: int
    lead_ms: float      # host time before the first layer (incl. a host-side embedding gather)
    tail_ms: float      # non-layer GPU time after the layers
    waits: bool         # the host first waits for the compute engine (reads a device value)
    stream_ms: float    # extra host time of a streamed call (the runtime's hooks)
    after_wait_ms: float  # the part of lead_ms after the wait (all of it for an inherent wait)


def _copy_ms(profile: Profile, pipeline: Pipeline) -> dict[str, tuple[float, ...]]:
    """Copy time per layer: the pinned peak rate when pipelined and known, else as profiled."""
    peak = profile.machine.pinned_h2d_gbps
    if pipeline is not Pipeline.PIPELINED or peak <= 0:
        return {s.name: s.dma_ms for s in profile.sequences}
    return {s.name: tuple(b / (peak * 1e6) for b in s.layer_bytes) for s in profile.sequences}


# A compressed layer's terms: copy ms of its compressed bytes, those bytes, decompression ms,
# SM contention share, host ms to enqueue the decompression.
_Packed = tuple[float, int, float, float, float]


def _packed(profile: Profile, placement: Placement,
            pipeline: Pipeline) -> dict[tuple[str, int], _Packed]:
    """Terms of every layer that travels or stays compressed (none without compression)."""
    if not placement.compression:
        return {}
    peak = profile.machine.pinned_h2d_gbps
    out = {}
    for seq in profile.sequences:
        for i in range(seq.n_layers):
            if not seq.shrinks(i):
                continue
            nbytes = seq.compressed_bytes[i]
            dma = nbytes / (peak * 1e6) if pipeline is Pipeline.PIPELINED and peak > 0 \
                else seq.dma_ms[i] * nbytes / seq.layer_bytes[i]
            out[(seq.name, i)] = (dma, nbytes, seq.decompress_ms(i), seq.decompress_contention,
                                  seq.decompress_host_ms)
    return out


def _head_steps(profile: Profile, pipeline: Pipeline) -> tuple[_Step, ...]:
    """Return the streamed LM head's pieces as steps: copies, their compute in the tail."""
    lm = profile.sequence('lm')
    peak = profile.machine.pinned_h2d_gbps
    per_byte = 1 / (peak * 1e6) if pipeline is Pipeline.PIPELINED and peak > 0 \
        else sum(lm.dma_ms) / sum(lm.layer_bytes)
    return tuple((HEAD, k, 0.0, b * per_byte, b, 0.0, 0.0)
                 for k, b in enumerate(profile.head_chunks()))


# LM phases whose pass does not run the head: guidance's refeed only fills the unguided cache.
_HEADLESS = frozenset({'refeed'})


def _schedule(profile: Profile, workload: Workload, placement: Placement,
              pipeline: Pipeline) -> list[_Phase]:
    """Every phase in execution order with its passes' steps (its passes are all alike)."""
    copy = _copy_ms(profile, pipeline)
    head = _head_steps(profile, pipeline) if placement.head_streamed else ()
    out = []
    for phase in profile.phases:
        seq = profile.sequence(phase.sequence)
        exe, host = phase.typical_exe_ms(), phase.host_issue_ms()
        eager = phase.host_streamed_issue_ms()
        steps = tuple((seq.name, i, exe[i], copy[seq.name][i], seq.layer_bytes[i], host[i],
                       eager[i]) for i in range(seq.n_layers))
        if seq.name == 'lm' and phase.name not in _HEADLESS:
            steps += head        # an LM pass ends with the head (last logits, each token's)
        gather = phase.embed_host_ms if placement.embed_on_host else 0.0
        lead = phase.host_lead_ms + gather
        waits = phase.host_waits or gather > 0
        # A pass that only waits for the host-side gather waits right before the model's
        # forward: the gather and the forward's prologue follow the wait, the rest overlaps.
        after = lead if phase.host_waits or phase.host_prologue_ms is None \
            else min(phase.host_prologue_ms, phase.host_lead_ms) + gather
        out.append(_Phase(steps, workload.passes(phase.repeats), lead, phase.typical_other_ms(),
                          waits, phase.host_stream_ms, after))
    return out


# One step as the replay runs it under a placement: (resident, LM head piece, layer id, exe ms,
# copy ms, bytes, host issue ms, compressed terms or None, kept compressed in VRAM). The layer
# id is one small int per layer, what a slot records it holds.
_Run = tuple[bool, bool, int, float, float, int, float, _Packed | None, bool]


def _runs(phases: list[_Phase], placement: Placement, packed: dict[tuple[str, int], _Packed]
          ) -> list[tuple[_Run, ...]]:
    """Each phase's steps with the placement's choices looked up once, not at every pass."""
    ids: dict[tuple[str, int], int] = {}
    out = []
    for phase in phases:
        runs = []
        for name, index, exe, dma, nbytes, issue, eager_issue in phase.steps:
            key = (name, index)
            layer = ids.setdefault(key, len(ids))
            if index in placement.resident.get(name, ()):
                runs.append((True, name == HEAD, layer, exe, dma, nbytes, issue, None, False))
            else:                      # a streamed call is never graphed
                runs.append((False, name == HEAD, layer, exe, dma, nbytes, eager_issue,
                             packed.get(key), index in placement.compressed.get(name, ())))
        out.append(tuple(runs))
    return out


# Replays kept per profile: plans for several budgets (a plot, a sweep) walk the same greedy
# path until the smaller budget binds, so most of their candidate plans repeat.
_MEMO_SIZE = 4096
_memos: dict[int, dict[tuple[object, ...], Prediction]] = {}   # by id() of a live profile


def _memo(profile: Profile) -> dict[tuple[object, ...], Prediction]:
    """Return the profile's replays, dropped with the profile (so no id() is reused here)."""
    memo = _memos.get(id(profile))
    if memo is None:
        memo = _memos[id(profile)] = {}
        weakref.finalize(profile, _memos.pop, id(profile), None).atexit = False
    return memo


def predict(profile: Profile, placement: Placement, workload: Workload = Workload(),
            pipeline: Pipeline = Pipeline.PIPELINED) -> Prediction:
    """Replay one inference under `placement` and return its latency with per-phase terms.

    The planner calls this for every candidate move, so the replay is written for speed: the
    placement's choices are looked up once per phase, and `max`/`min` are spelled as
    comparisons that pick the same operand as the builtins (the first of equal values), so the
    result is the same float for float. A profile keeps its latest replays (profiles and
    predictions are immutable): planning it again, for another budget, repeats few of them.
    Refuses a workload of another batch, guidance or camera count (`check_workload`).
    """
    placement.validate(profile)
    check_workload(profile, workload)
    key = (workload, pipeline, placement.embed_on_host, placement.compression,
           placement.head_streamed, frozenset(placement.resident.items()),
           frozenset(placement.compressed.items()))
    memo = _memo(profile)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _replay(profile, placement, workload, pipeline)
        if len(memo) > _MEMO_SIZE:
            memo.pop(next(iter(memo)), None)        # the oldest
    return found


def _replay(profile: Profile, placement: Placement, workload: Workload,
            pipeline: Pipeline) -> Prediction:
    phases = _schedule(profile, workload, placement, pipeline)
    programs = _runs(phases, placement, _packed(profile, placement, pipeline))
    n_phases = len(phases)
    end = [0.0] * n_phases            # compute-engine time when the phase's last pass ended
    copy = [0.0] * n_phases
    compute = [0.0] * n_phases
    moved = [0] * n_phases
    passes = [0] * n_phases
    issuing = [0.0] * n_phases        # host-thread busy time (not its waits)
    decoding = [0.0] * n_phases       # decompression-stream busy time
    copy_free = 0.0                   # copy engine idle from
    decode_free = 0.0                 # decompression stream idle from
    last_start = 0.0                  # start of the latest layer compute
    last_reader: int | None = None    # its slot (None: a resident layer)
    compute_free = 0.0                # compute engine idle from
    host = 0.0                        # host thread reaches this point of the issue order
    issued = 0.0                      # host time the next streamed layer's copy was issued
    slot_free = [0.0, 0.0]            # compute end of each slot's last reader
    ready = [0.0, 0.0]                # copy end of each slot's layer
    holder = [-1, -1]                 # the layer id each slot holds (-1: none)
    last_slot = 1                     # slot of the previous streamed call (the first uses 0)
    cold = pipeline is Pipeline.COLD_PASSES
    sequential = pipeline is Pipeline.SEQUENTIAL
    for k, (p, program) in enumerate(zip(phases, programs, strict=True)):
        lead, after_wait, stream_ms, tail = p.lead_ms, p.after_wait_ms, p.stream_ms, p.tail_ms
        issue_ms = copy_ms = decode_ms = compute_ms = 0.0
        nbytes_moved = 0
        for _ in range(p.passes):
            barrier = compute_free if cold else 0.0
            head_slots = []               # slots holding head pieces: free after the tail
            if p.waits:
                t = host + lead - after_wait
                host = (compute_free if compute_free > t else t) + after_wait
            else:
                host += lead
            if host > compute_free:
                compute_free = host
            busy = tail
            issue_ms += lead
            for is_resident, is_head, layer, exe, dma, nbytes, issue, terms, is_kept in program:
                if is_resident:
                    start = host if host > compute_free else compute_free
                else:
                    host += stream_ms      # the pre-hook binds the slot and issues the next copy
                    issue_ms += stream_ms
                    if not cold and (holder[0] == layer or (not sequential
                                                            and holder[1] == layer)):
                        # Still in its slot (a sequence streaming no more layers than there are
                        # slots): the runtime copies nothing (`SlotStreamer.prefetch`).
                        slot = 0 if holder[0] == layer else 1
                    else:
                        if sequential:
                            slot = 0
                            after = host if host > compute_free else compute_free
                        else:
                            slot = 1 - last_slot
                            after = slot_free[slot]
                            if barrier > after:
                                after = barrier
                            if issued > after:
                                after = issued
                        if terms is None:
                            copy_free = ready[slot] = (after if after > copy_free
                                                       else copy_free) + dma
                            copy_ms += dma
                            nbytes_moved += nbytes
                        else:
                            zdma, zbytes, decode, share, enqueue = terms
                            if not is_kept:  # streamed compressed: copy into staging first
                                copy_free = after = (after if after > copy_free
                                                     else copy_free) + zdma
                                copy_ms += zdma
                                nbytes_moved += zbytes
                            host += enqueue  # a streaming hook enqueues the decompression
                            issue_ms += enqueue
                            begin = after if after > decode_free else decode_free
                            decode_free = ready[slot] = begin + decode
                            decode_ms += decode
                            # SM contention with the compute running alongside the decompression.
                            overlap = (compute_free if compute_free < decode_free
                                       else decode_free) - (last_start if last_start > begin
                                                            else begin)
                            slowed = share * (overlap if overlap > 0.0 else 0.0)
                            compute_free += slowed
                            busy += slowed
                            if last_reader is not None:
                                slot_free[last_reader] = compute_free
                        holder[slot] = layer
                    issued = host          # this layer's hook issues the next streamed copy
                    last_slot = slot
                    start = compute_free
                    if ready[slot] > start:
                        start = ready[slot]
                    if host > start:
                        start = host
                host += issue
                issue_ms += issue
                last_start = start
                compute_free = start + exe
                if host > compute_free:
                    compute_free = host
                if is_resident:
                    last_reader = None
                else:
                    last_reader = last_slot
                    slot_free[last_slot] = compute_free
                if is_head:
                    head_slots.append(last_slot)
                busy += exe
            compute_free += tail
            for slot in head_slots:       # the tail runs the head: read until it has ended
                slot_free[slot] = compute_free
            compute_ms += busy
            end[k] = compute_free
            passes[k] += 1
        issuing[k], copy[k], decoding[k], compute[k] = issue_ms, copy_ms, decode_ms, compute_ms
        moved[k] = nbytes_moved
    out = []
    previous_end = 0.0
    for k, phase in enumerate(profile.phases):
        if passes[k] == 0:
            out.append(PhasePrediction(phase.name, 0, 0.0, 0.0, 0.0, 0.0, 0))
            continue
        wall = end[k] - previous_end
        previous_end = end[k]
        out.append(PhasePrediction(phase.name, passes[k], wall, copy[k], compute[k],
                                   max(0.0, wall - compute[k]), moved[k], issuing[k],
                                   decoding[k]))
    return Prediction(max(compute_free, host) + profile.host_ms, profile.host_ms, tuple(out))
