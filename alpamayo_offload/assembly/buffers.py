"""Bounded, thread-safe, stamp-sorted buffers: callbacks push, the timer takes snapshots."""
from __future__ import annotations

import bisect
import threading
from typing import Generic, Protocol, TypeVar


class Stamped(Protocol):
    """Anything with an integer nanosecond stamp."""

    @property
    def stamp_ns(self) -> int: ...  # noqa: D102


T = TypeVar('T', bound=Stamped)


class StampedBuffer(Generic[T]):
    """Keeps the newest `depth` records sorted by stamp; duplicates of a stamp are dropped.

    Bounded so a stalled consumer never grows memory, and sorted so that a late (reordered) message
    still lands in the right place for nearest-frame selection and interpolation.
    """

    def __init__(self, depth: int) -> None:
        if depth < 2:
            raise ValueError(f'buffer depth {depth} must be at least 2')
        self._depth = depth
        self._items: list[T] = []
        self._stamps: list[int] = []
        self._lock = threading.Lock()

    def push(self, item: T) -> bool:
        """Insert `item`; returns False when a record with the same stamp is already held."""
        with self._lock:
            i = bisect.bisect_left(self._stamps, item.stamp_ns)
            if i < len(self._stamps) and self._stamps[i] == item.stamp_ns:
                return False
            self._stamps.insert(i, item.stamp_ns)
            self._items.insert(i, item)
            if len(self._items) > self._depth:
                del self._items[0], self._stamps[0]
            return True

    def snapshot(self) -> list[T]:
        """Return the held records, oldest first (a shallow copy: records are immutable)."""
        with self._lock:
            return list(self._items)

    def newest_stamp(self) -> int | None:
        """Stamp of the newest record, or None when empty."""
        with self._lock:
            return self._stamps[-1] if self._stamps else None

    def clear(self) -> None:
        """Forget everything (e.g. after a time jump in replay)."""
        with self._lock:
            self._items.clear()
            self._stamps.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
