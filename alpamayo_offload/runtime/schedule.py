"""The global prefetch order, as pure index arithmetic over the streamed layers.

After streamed layer ``i`` of sequence ``S`` runs, the next streamed layer of ``S`` is wanted;
after the last streamed layer of a repetition of ``S``, the first streamed layer of the hinted
next sequence (default: ``S`` again, e.g. the next decode token or diffusion step).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

LayerKey = tuple[str, int]


@dataclass(frozen=True)
class StreamOrder:
    """Streamed layer indices per sequence, ascending (the order a repetition calls them)."""

    streamed: Mapping[str, tuple[int, ...]]

    def __post_init__(self) -> None:
        clean: dict[str, tuple[int, ...]] = {}
        for name, indices in dict(self.streamed).items():
            values = tuple(indices)
            if list(values) != sorted(set(values)):
                raise ValueError(
                    f'StreamOrder.streamed[{name!r}] = {values} must be strictly ascending'
                )
            clean[name] = values
        object.__setattr__(self, 'streamed', clean)

    def first(self, sequence: str) -> int | None:
        """First streamed layer of ``sequence`` (None when it streams nothing)."""
        indices = self.streamed.get(sequence, ())
        return indices[0] if indices else None

    def next_within(self, sequence: str, index: int) -> int | None:
        """Return the streamed layer after ``index`` in the same repetition, if any."""
        for candidate in self.streamed.get(sequence, ()):
            if candidate > index:
                return candidate
        return None


def next_streamed(order: StreamOrder, key: LayerKey, hint: str | None) -> LayerKey | None:
    """Return the layer to prefetch while streamed layer ``key`` computes.

    ``hint`` names the sequence that runs after this repetition of ``key``'s sequence.
    """
    sequence, index = key
    within = order.next_within(sequence, index)
    if within is not None:
        return (sequence, within)
    target = sequence if hint is None else hint
    first = order.first(target)
    return None if first is None else (target, first)


def choose_slot(n_slots: int, in_use: int | None, issued_at: Sequence[int]) -> int:
    """Slot for a new copy: never the slot in use, else the one written longest ago."""
    candidates = [s for s in range(n_slots) if s != in_use]
    if not candidates:
        raise ValueError(f'no free slot: n_slots={n_slots}, in_use={in_use}')
    return min(candidates, key=lambda s: issued_at[s])


@dataclass
class RepetitionCounter:
    """Numbers the repetitions of each sequence from the order its layers are called.

    A call starts a new repetition when another sequence ran in between or its index does not
    exceed the previous call's (a new token, a new diffusion step, a second vision pass).
    """

    _rep: dict[str, int] = field(default_factory=dict)
    _last_index: dict[str, int] = field(default_factory=dict)
    _last_sequence: str | None = None

    def observe(self, sequence: str, index: int) -> int:
        """Record a call of layer ``index`` of ``sequence``; return its repetition number."""
        last = self._last_index.get(sequence)
        if last is None or self._last_sequence != sequence or index <= last:
            self._rep[sequence] = self._rep.get(sequence, -1) + 1
        self._last_index[sequence] = index
        self._last_sequence = sequence
        return self._rep[sequence]

    def reset(self) -> None:
        """Forget every sequence (repetitions count from 0 again)."""
        self._rep.clear()
        self._last_index.clear()
        self._last_sequence = None
