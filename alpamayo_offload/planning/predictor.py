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
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from alpamayo_offload.planning.profile import Profile


class Pipeline(enum.Enum):
    """Which copy/compute ordering the replay models."""

    PIPELINED = 'pipelined'        # our runtime: two slots, prefetch across boundaries
    COLD_PASSES = 'cold-passes'    # two slots, each pass starts cold (the paper's closed forms)
    SEQUENTIAL = 'sequential'      # copy, then compute, no overlap


@dataclass(frozen=True)
class Workload:
    """Pass counts the profile does not fix: decode passes (the paper's N), diffusion steps."""

    decode_passes: int = 21
    diffusion_steps: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.decode_passes <= 4096:
            raise ValueError(f'Workload.decode_passes = {self.decode_passes}; allowed 0..4096')
        if not 0 <= self.diffusion_steps <= 1000:
            raise ValueError(f'Workload.diffusion_steps = {self.diffusion_steps}; allowed 0..1000')

    def passes(self, repeats: str) -> int:
        """How many passes a phase with this `repeats` kind makes."""
        return {'once': 1, 'decode': self.decode_passes,
                'diffusion': self.diffusion_steps}[repeats]


@dataclass(frozen=True)
class Placement:
    """Which layers stay on the GPU, per sequence, and whether the embedding is on the host."""

    resident: Mapping[str, frozenset[int]]
    embed_on_host: bool = False

    @classmethod
    def of(cls, resident: Mapping[str, Iterable[int]] | None = None,
           embed_on_host: bool = False) -> Placement:
        """Build from plain index lists; empty sequences are dropped."""
        cleaned = {k: frozenset(int(i) for i in v) for k, v in (resident or {}).items()}
        return cls({k: v for k, v in sorted(cleaned.items()) if v}, embed_on_host)

    def indices(self, sequence: str) -> tuple[int, ...]:
        """Sorted resident indices of one sequence."""
        return tuple(sorted(self.resident.get(sequence, ())))

    def with_layer(self, sequence: str, index: int) -> Placement:
        """Return a copy with one more resident layer."""
        new = dict(self.resident)
        new[sequence] = frozenset(new.get(sequence, frozenset()) | {index})
        return Placement(dict(sorted(new.items())), self.embed_on_host)

    def count(self) -> int:
        """Total number of resident layers."""
        return sum(len(v) for v in self.resident.values())

    def validate(self, profile: Profile) -> None:
        """Raise ValueError naming an unknown sequence or out-of-range index."""
        for name, idx in self.resident.items():
            n = profile.sequence(name).n_layers
            bad = sorted(i for i in idx if not 0 <= i < n)
            if bad:
                raise ValueError(f'resident indices {bad} of {name!r} are outside 0..{n - 1}')


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
                'phases': [asdict(p) for p in self.phases]}


# One layer invocation of a pass: (sequence name, layer index, exe ms, dma ms, bytes).
_Step = tuple[str, int, float, float, int]


@dataclass(frozen=True)
class _Pass:
    phase: int
    steps: tuple[_Step, ...]
    lead_ms: float      # non-layer compute before the layers (host embedding gather)
    tail_ms: float      # non-layer compute after the layers


def _schedule(profile: Profile, workload: Workload, embed_on_host: bool) -> list[_Pass]:
    out = []
    for k, phase in enumerate(profile.phases):
        seq = profile.sequence(phase.sequence)
        exe = phase.mean_exe_ms()
        steps = tuple((seq.name, i, exe[i], seq.dma_ms[i], seq.layer_bytes[i])
                      for i in range(seq.n_layers))
        lead = phase.embed_host_ms if embed_on_host else 0.0
        tail = phase.mean_other_ms()
        out.extend(_Pass(k, steps, lead, tail) for _ in range(workload.passes(phase.repeats)))
    return out


def predict(profile: Profile, placement: Placement, workload: Workload = Workload(),
            pipeline: Pipeline = Pipeline.PIPELINED) -> Prediction:
    """Replay one inference under `placement` and return its latency with per-phase terms."""
    placement.validate(profile)
    resident = {(s, i) for s, idx in placement.resident.items() for i in idx}
    n_phases = len(profile.phases)
    end = [0.0] * n_phases            # compute-engine time when the phase's last pass ended
    copy = [0.0] * n_phases
    compute = [0.0] * n_phases
    moved = [0] * n_phases
    passes = [0] * n_phases
    copy_free = 0.0                   # copy engine idle from
    compute_free = 0.0                # compute engine idle from
    slot_free = [0.0, 0.0]            # compute end of each slot's last reader
    j = 0                             # streamed invocation counter (slot = j % 2)
    cold = pipeline is Pipeline.COLD_PASSES
    sequential = pipeline is Pipeline.SEQUENTIAL
    for p in _schedule(profile, workload, placement.embed_on_host):
        barrier = compute_free if cold else 0.0
        compute_free += p.lead_ms
        busy = p.lead_ms + p.tail_ms
        for name, index, exe, dma, nbytes in p.steps:
            if (name, index) in resident:
                compute_free += exe
            else:
                slot = j & 1
                if sequential:
                    start = max(copy_free, compute_free)
                else:
                    start = max(copy_free, slot_free[slot], barrier)
                copy_free = start + dma
                compute_free = max(compute_free, copy_free) + exe
                slot_free[slot] = compute_free
                copy[p.phase] += dma
                moved[p.phase] += nbytes
                j += 1
            busy += exe
        compute_free += p.tail_ms
        compute[p.phase] += busy
        end[p.phase] = compute_free
        passes[p.phase] += 1
    phases = []
    previous_end = 0.0
    for k, phase in enumerate(profile.phases):
        if passes[k] == 0:
            phases.append(PhasePrediction(phase.name, 0, 0.0, 0.0, 0.0, 0.0, 0))
            continue
        wall = end[k] - previous_end
        previous_end = end[k]
        phases.append(PhasePrediction(phase.name, passes[k], wall, copy[k], compute[k],
                                      max(0.0, wall - compute[k]), moved[k]))
    return Prediction(compute_free + profile.host_ms, profile.host_ms, tuple(phases))
