"""Choose the resident layers of every module that minimise predicted latency within a VRAM budget.

The objective is the pipeline replay (`predictor.predict`), so position effects (first and last
layer, runs of consecutive resident layers, prefetch across passes) are priced exactly rather
than by rule. The search is a lazy greedy knapsack on benefit per byte, i.e. the paper's
B = R * dC / M measured on the replay against the current plan, with ties broken towards the
layer that joins the shortest run of consecutive residents and lies farthest from the others
(the interleaving of Eq. 8, generalised). It runs
once with the token embedding on the GPU and once with it on the host, and the result is never
worse than the paper's interleaved VLM-only plan for the same budget (that plan is a candidate).

The token embedding and the LM head are placed too (0.8 G parameters each for Alpamayo 2
Super). The embedding is resident or in host RAM, where only the rows a pass uses cross PCIe
(never streamed whole): the search runs once with each. The LM head, where the profile tells its
bytes apart and `PlannerOptions.allow_head_streamed` allows it, starts streamed (through the
slots, once per LM pass) and is one more greedy item: keeping it resident costs its bytes and
saves what the predictor says its copies cost, priced per byte against the layers.

Where the profile measured compression, the search also runs with compression on: streamed
layers then stream compressed (staging buffers join the slots), and each step may move a layer
from streamed to kept compressed in VRAM or to resident raw, or from kept compressed to resident
raw, whichever saves the most time per byte. The compressed plan is chosen over the best raw
one only when it is predicted faster by `PlannerOptions.compression_margin` (10 %). Without
measured compression terms it never compresses.
"""
from __future__ import annotations

import dataclasses
import heapq
import logging
from dataclasses import dataclass

from alpamayo_offload.planning.errors import BudgetError, PlanningError
from alpamayo_offload.planning.predictor import (
    HEAD,
    Pipeline,
    Placement,
    Prediction,
    Workload,
    check_workload,
    predict,
)
from alpamayo_offload.planning.profile import Profile
from alpamayo_offload.planning.units import format_bytes

LOG = logging.getLogger(__name__)
_MIB = 2**20
_TIE_MS = 1e-6      # benefits closer than this (ms per MiB) are treated as equal
COMPRESSION_CHOICES = ('auto', 'off', 'on')
# As the runtime's VRAM accounting counts a device buffer: the caching allocator's 512-byte
# blocks, and a slot's staging buffer with room to align its start.
_ALLOCATOR_ROUND = 512
_TENSOR_ALIGN = 256


def _device_bytes(nbytes: int) -> int:
    return max(_ALLOCATOR_ROUND, -(-nbytes // _ALLOCATOR_ROUND) * _ALLOCATOR_ROUND)


@dataclass(frozen=True)
class VramBreakdown:
    """What a placement needs on the GPU, in bytes; `total` is compared with the budget."""

    fixed: int
    embed: int
    working_set: int
    slots: int
    resident: int
    staging: int = 0        # both slots' staging buffers for compressed copies
    compressed: int = 0     # layers kept compressed in VRAM

    @property
    def total(self) -> int:
        """Everything the inference holds in the torch allocator at its peak."""
        return (self.fixed + self.embed + self.working_set + self.slots + self.resident
                + self.staging + self.compressed)


@dataclass(frozen=True)
class PlannerOptions:
    """What the planner may change and for which workload it optimises."""

    workload: Workload = Workload()
    pipeline: Pipeline = Pipeline.PIPELINED
    allow_embed_on_host: bool = True
    sequences: tuple[str, ...] | None = None     # may hold resident layers; None: all
    max_decode_tokens: int | None = None         # the engine's limit, for VRAM; None: as profiled
    # Choose as if the CPU issued work this many times slower than profiled (1: as profiled).
    cpu_headroom: float = 1.0
    # 'auto': compress where the profile measured compression and it pays; 'off': never;
    # 'on': only plans with compression (a benchmark's compressed row; needs measured terms).
    compression: str = 'auto'
    # With 'auto', a compressed plan is chosen only if its prediction times (1 + this) still
    # beats the best raw plan: the predictor prices compressed plans less surely than raw ones
    # (decompression's contention with the compute, nvCOMP's host calls), and a near tie is
    # better left raw (no compression at attach, no decompression on the GPU's SMs).
    compression_margin: float = 0.10
    # Let the LM head stream (where the profile tells its bytes apart). Off by default: the
    # engine keeps the head on the GPU, so a plan for it must too.
    allow_head_streamed: bool = False

    def __post_init__(self) -> None:
        if not 1.0 <= self.cpu_headroom <= 4.0:
            raise ValueError(f'PlannerOptions.cpu_headroom = {self.cpu_headroom}; give 1 (the '
                             f'profiled CPU) to 4')
        if self.sequences is not None and not self.sequences:
            raise ValueError('PlannerOptions.sequences is empty; give None (all) or a name')
        if not 0.0 <= self.compression_margin <= 1.0:
            raise ValueError(f'PlannerOptions.compression_margin = {self.compression_margin}; '
                             f'give 0 (the lowest prediction wins) to 1')
        if self.compression not in COMPRESSION_CHOICES:
            raise ValueError(f'PlannerOptions.compression = {self.compression!r}; allowed: '
                             f'{COMPRESSION_CHOICES}')
        if self.max_decode_tokens is not None and self.max_decode_tokens < 1:
            raise ValueError(f'PlannerOptions.max_decode_tokens = {self.max_decode_tokens}; '
                             f'give at least 1, or None (as profiled)')


@dataclass(frozen=True)
class PlanResult:
    """A chosen placement with its predicted latency and VRAM."""

    placement: Placement
    prediction: Prediction
    vram: VramBreakdown
    budget_bytes: int
    strategy: str


def _streamed_sequences(profile: Profile) -> tuple[str, ...]:
    used = {p.sequence for p in profile.phases}
    return tuple(s.name for s in profile.sequences if s.name in used)


def vram_needed(profile: Profile, placement: Placement,
                max_decode_tokens: int | None = None) -> VramBreakdown:
    """VRAM of a placement: non-layer modules, working set, two slots, resident layers.

    With compression, also the layers kept compressed (their compressed bytes) and one staging
    buffer per slot sized to the largest compressed layer that streams. A layer the codec does
    not shrink streams raw even when the plan keeps it compressed, as the runtime does.
    The working set is counted for an engine that decodes at most `max_decode_tokens` (None: as
    profiled), as that engine's budget check will count it.
    """
    resident = 0
    largest_streamed = 0
    kept = 0
    largest_packed = 0
    for name in _streamed_sequences(profile):
        seq = profile.sequence(name)
        chosen = placement.resident.get(name, frozenset())
        compressed = placement.compressed.get(name, frozenset())
        for i in range(seq.n_layers):
            if i in chosen:
                resident += seq.resident_footprint(i)
                continue
            largest_streamed = max(largest_streamed, seq.slot_footprint(i))
            if not (placement.compression and seq.shrinks(i)):
                continue
            if i in compressed:
                kept += _device_bytes(seq.compressed_bytes[i])
            else:
                largest_packed = max(largest_packed, seq.compressed_bytes[i])
    v = profile.vram
    fixed = v.fixed_bytes
    if placement.head_streamed:     # its pieces pass through the slots instead
        fixed -= v.head_bytes
        largest_streamed = max(largest_streamed, *profile.head_chunks())
    staging = 2 * _device_bytes(largest_packed + _TENSOR_ALIGN) if largest_packed else 0
    return VramBreakdown(fixed, 0 if placement.embed_on_host else v.embed_bytes,
                         v.working_set_for(max_decode_tokens), 2 * largest_streamed, resident,
                         staging, kept)


def _vram(profile: Profile, placement: Placement, options: PlannerOptions) -> VramBreakdown:
    return vram_needed(profile, placement, options.max_decode_tokens)


def _head_streams(profile: Profile, allow: bool) -> bool:
    return allow and bool(profile.head_chunks())


def minimum_budget(profile: Profile, allow_embed_on_host: bool = True,
                   max_decode_tokens: int | None = None,
                   allow_head_streamed: bool = False) -> int:
    """Return the smallest budget any plan fits: nothing resident, embedding on host if allowed.

    Streaming raw needs no staging buffers, so the raw plan is the smallest; with
    `allow_head_streamed` (and a head the profile tells apart) the LM head streams too.
    """
    return vram_needed(profile, Placement.of(
        embed_on_host=allow_embed_on_host,
        head_streamed=_head_streams(profile, allow_head_streamed)), max_decode_tokens).total


def _check_budget(profile: Profile, budget_bytes: int, options: PlannerOptions) -> None:
    floor = minimum_budget(profile, options.allow_embed_on_host, options.max_decode_tokens,
                           options.allow_head_streamed)
    if budget_bytes < floor:
        parts = _vram(profile, Placement.of(
            embed_on_host=options.allow_embed_on_host,
            head_streamed=_head_streams(profile, options.allow_head_streamed)), options)
        raise BudgetError(
            f'VRAM budget {format_bytes(budget_bytes)} is below the minimum {format_bytes(floor)} '
            f'(two slots {format_bytes(parts.slots)} + non-layer modules '
            f'{format_bytes(parts.fixed + parts.embed)} + working set '
            f'{format_bytes(parts.working_set)}); give --budget {format_bytes(floor)} or more')


def _crowding(placement: Placement, name: str, index: int, n_layers: int) -> tuple[int, int]:
    """Rank how much adding `index` bunches the residents of its sequence.

    First the run of consecutive residents it would join (shorter is better), then minus the
    distance to the nearest resident (farther is better).
    """
    chosen = placement.resident.get(name, frozenset())
    left = next(k for k in range(index + 1) if index - 1 - k not in chosen)
    right = next(k for k in range(n_layers - index) if index + 1 + k not in chosen)
    return 1 + left + right, -min((abs(index - i) for i in chosen), default=n_layers)


# A greedy search's heap key: minus the benefit per MiB (rounded to `_TIE_MS`), crowding, the
# sequence's position, the layer index, the move's target.
_Key = tuple[float, tuple[int, int], int, int, int]

# A greedy move: resident raw (`_RAW`), kept compressed (`_KEEP`), or the LM head resident
# (`_HEAD`, on the step name `HEAD`).
_RAW = 0
_KEEP = 1
_HEAD = 2


def _moved(placement: Placement, name: str, index: int, target: int) -> Placement:
    if target == _HEAD:
        return placement.with_head_resident()
    if target == _RAW:
        return placement.with_layer(name, index)
    return placement.with_compressed(name, index)


def _placed(placement: Placement, name: str, index: int, target: int) -> bool:
    """Whether the move's item already sits there (or better)."""
    if target == _HEAD:
        return not placement.head_streamed
    return index in placement.resident.get(name, frozenset()) or (
        target == _KEEP and index in placement.compressed.get(name, frozenset()))


def _greedy(profile: Profile, budget_bytes: int, options: PlannerOptions,
            embed_on_host: bool, compression: bool = False) -> PlanResult | None:
    head_streamed = _head_streams(profile, options.allow_head_streamed)
    placement = Placement.of(embed_on_host=embed_on_host, compression=compression,
                             head_streamed=head_streamed)
    if _vram(profile, placement, options).total > budget_bytes:
        return None
    names = [n for n in _streamed_sequences(profile)
             if options.sequences is None or n in options.sequences]
    current = predict(profile, placement, options.workload, options.pipeline).total_ms
    used = _vram(profile, placement, options).total
    version = 0

    def entry(name: str, index: int, target: int) -> tuple[_Key, int, str, int, int, float, int]:
        """Return the heap entry of a move against the current plan.

        Its key (smaller pops first: density, crowding, then a stable order), the plan's
        version, the move, and the latency and VRAM of the plan with the move made (kept for
        when the move is taken).
        """
        trial = _moved(placement, name, index, target)
        total = predict(profile, trial, options.workload, options.pipeline).total_ms
        need = _vram(profile, trial, options).total
        extra = need - used
        density = float('inf') if extra <= 0 else (current - total) / (extra / _MIB)
        rounded = round(density / _TIE_MS) * _TIE_MS if density != float('inf') else density
        if target == _HEAD:
            k = (-rounded, (1, 0), len(names), index, target)
        else:
            k = (-rounded, _crowding(placement, name, index, profile.sequence(name).n_layers),
                 names.index(name), index, target)
        return k, version, name, index, target, total, need

    targets = (_RAW, _KEEP) if compression else (_RAW,)
    heap = [entry(n, i, t) for n in names
            for i in range(profile.sequence(n).n_layers) for t in targets
            if t == _RAW or profile.sequence(n).shrinks(i)]
    if head_streamed:
        heap.append(entry(HEAD, 0, _HEAD))
    # Keys are unique per move, so entries compare by their key alone.
    heapq.heapify(heap)
    while heap:
        k, stamp, name, index, target, total, need = heapq.heappop(heap)
        if _placed(placement, name, index, target):
            continue                                # already placed so (or better)
        if stamp != version:
            fresh = entry(name, index, target)
            if heap and fresh[0] > heap[0][0]:
                heapq.heappush(heap, fresh)
                continue
            k, _, _, _, _, total, need = fresh
        if -k[0] <= 0:
            break                                   # nothing left that saves time
        if need > budget_bytes:
            continue                                # does not fit; smaller layers may
        placement = _moved(placement, name, index, target)
        used, current, version = need, total, version + 1
    prediction = predict(profile, placement, options.workload, options.pipeline)
    return PlanResult(placement, prediction, _vram(profile, placement, options), budget_bytes,
                      'greedy-compressed' if compression else 'greedy')


def interleaved_indices(k: int, n_layers: int) -> tuple[int, ...]:
    """Return the paper's Eq. 8: k resident layers evenly spaced over 0..L-2 (first one in)."""
    span = n_layers - 1
    if k <= 0:
        return ()
    if k >= span:
        return tuple(range(span))
    return tuple(sorted({(i * span) // k for i in range(k)}))


def interleaved_plan(profile: Profile, budget_bytes: int, options: PlannerOptions,
                     sequence: str = 'lm', embed_on_host: bool = False) -> PlanResult | None:
    """Apply the paper's policy: as many Eq. 8 interleaved layers of one sequence as fit."""
    seq = profile.sequence(sequence)
    best = None
    for k in range(seq.n_layers):
        placement = Placement.of({sequence: interleaved_indices(k, seq.n_layers)}, embed_on_host)
        if _vram(profile, placement, options).total > budget_bytes:
            break
        best = placement
    if best is None:
        return None
    return PlanResult(best, predict(profile, best, options.workload, options.pipeline),
                      _vram(profile, best, options), budget_bytes, f'interleaved-{sequence}')


def _judged_ms(candidate: PlanResult, options: PlannerOptions) -> float:
    """Return the predicted latency a candidate is chosen by.

    A compressed candidate's is raised by `PlannerOptions.compression_margin` when the planner
    may choose either.
    """
    ms = candidate.prediction.total_ms
    if options.compression == 'auto' and candidate.placement.compression:
        return ms * (1.0 + options.compression_margin)
    return ms


def plan(profile: Profile, budget_bytes: int, options: PlannerOptions = PlannerOptions()
         ) -> PlanResult:
    """Find the placement with the lowest predicted latency that fits `budget_bytes`.

    With `options.cpu_headroom` h > 1 the search and the choice run on the profile with its
    host issue times times h, so a plan that turns host-bound when the CPU slows down (a decode
    with most LM layers resident) loses to one that stays copy-bound; the result's prediction
    is at the profiled CPU speed. With `options.compression` 'auto' a compressed plan must be
    predicted faster than the best raw one by `compression_margin`. A workload of another
    batch, guidance or camera count than the profile's is refused (`WorkloadError`).
    """
    check_workload(profile, options.workload)
    _check_budget(profile, budget_bytes, options)
    judged = profile if options.cpu_headroom == 1.0 else profile.with_host_scaled(
        options.cpu_headroom)
    host_options = (False, True) if options.allow_embed_on_host else (False,)
    if options.compression == 'on' and not profile.compression_measured:
        raise PlanningError('compression on needs a profile with compression terms (made where '
                            'nvCOMP imports); this one has none: plan with compression auto or '
                            'off, or re-profile')
    candidates: list[PlanResult | None] = []
    if options.compression != 'on':
        candidates += [_greedy(judged, budget_bytes, options, host) for host in host_options]
    if options.compression != 'off' and profile.compression_measured:
        candidates += [_greedy(judged, budget_bytes, options, host, compression=True)
                       for host in host_options]
    if options.compression != 'on' and 'lm' in _streamed_sequences(profile) and (
            options.sequences is None or 'lm' in options.sequences):
        candidates += [interleaved_plan(judged, budget_bytes, options, 'lm', host)
                       for host in host_options]
    found = [c for c in candidates if c is not None]
    if not found:
        raise BudgetError(f'no compressed plan fits {format_bytes(budget_bytes)} (the staging '
                          'buffers do not fit): plan with compression auto or off')
    best = min(found, key=lambda c: (_judged_ms(c, options), c.vram.total))
    if judged is not profile:
        best = dataclasses.replace(best, prediction=predict(
            profile, best.placement, options.workload, options.pipeline))
    LOG.info('plan for %s: %.3f s predicted (%s, %d resident layers, %d kept compressed, '
             'compression %s, embed on host: %s, LM head streamed: %s, CPU headroom %.2f)',
             format_bytes(budget_bytes), best.prediction.total_s, best.strategy,
             best.placement.count(), best.placement.compressed_count(),
             best.placement.compression, best.placement.embed_on_host,
             best.placement.head_streamed, options.cpu_headroom)
    return best
