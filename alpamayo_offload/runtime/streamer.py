"""The one owner of the copy stream, the device slots and the event protocol between them.

Streamed layers take turns in ``n_slots`` flat device buffers (two when pipelined, one when
sequential), each sized to the largest streamed layer. Per slot ``s`` there are two events:

1. ``slot_free[s]`` is recorded on the compute stream after the layer using slot ``s`` has been
   enqueued (compute-done). A copy into slot ``s`` first makes the copy stream wait on it, so a
   copy never overwrites weights a queued kernel still reads (write-after-read).
2. ``copy_done[s]`` is recorded on the copy stream after the host-to-device copy into slot ``s``.
   Before a layer in slot ``s`` runs, the compute stream waits on it, so no kernel reads weights
   before they have arrived (read-after-write).

Both waits are device-side (``wait_event``); nothing here blocks the host in steady state. Each
slot records which layer it holds, so a wrong prefetch guess costs a copy, never correctness.

A compressed layer takes one more step on a third stream, the decompression stream: its
compressed bytes are copied into slot ``s``'s staging buffer on the copy stream (one DMA, as for
a raw layer), the decompression stream waits on ``copy_done[s]``, decodes staging into the slot
and records ``decoded[s]``, and compute waits on that instead. So the copy of layer i+1 runs
while layer i decodes and layer i-1 computes. A layer kept compressed in VRAM skips the copy:
the decompression stream waits on ``slot_free[s]`` itself. Staging ``s`` is reused only by the
next copy into slot ``s``, which waits on ``slot_free[s]``, recorded after compute that waited
for the decode that read staging ``s``.

No other module creates streams or waits on events. On a device without CUDA the same logic
runs with synchronous copies and decodes into CPU slot buffers and no events.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .codec import Codec, CodecIndex
from .errors import StateError
from .layout import TENSOR_ALIGN, align_up
from .schedule import choose_slot
from .timing import Clock

_EMPTY = -1


def slot_allocation_bytes(slot_bytes: int) -> int:
    """Device bytes one slot of ``slot_bytes`` takes (room to align its start)."""
    return slot_bytes + TENSOR_ALIGN


def _aligned_empty(nbytes: int, device: torch.device) -> torch.Tensor:
    """Allocate a uint8 buffer starting at a ``TENSOR_ALIGN`` boundary (CPU allocs are not)."""
    raw = torch.empty(slot_allocation_bytes(nbytes), dtype=torch.uint8, device=device)
    start = align_up(raw.data_ptr(), TENSOR_ALIGN) - raw.data_ptr()
    return raw.narrow(0, start, nbytes)


@dataclass(frozen=True)
class Transfer:
    """How one layer reaches a slot: its source bytes and, if compressed, how to decode them.

    ``dsts[s]`` is the layer-sized view of slot ``s``. ``src`` is the layer's host region (raw
    or compressed bytes) or, with ``on_device``, its compressed bytes kept in VRAM.
    """

    src: torch.Tensor
    dsts: tuple[torch.Tensor, ...]
    index: CodecIndex | None = None
    on_device: bool = False

    @property
    def copy_bytes(self) -> int:
        """Bytes one transfer moves over the host link (0 for a layer kept in VRAM)."""
        return 0 if self.on_device else self.src.numel()


class SlotStreamer:
    """Copies layers' flat host regions into device slots, ordered by per-slot events."""

    def __init__(self, device: torch.device, slot_bytes: int, n_slots: int,
                 clock: Clock | None = None) -> None:
        if n_slots not in (1, 2):
            raise ValueError(f'n_slots must be 1 (sequential) or 2 (pipelined), got {n_slots}')
        if slot_bytes <= 0:
            raise ValueError(f'slot_bytes must be > 0, got {slot_bytes}')
        self.device = device
        self.n_slots = n_slots
        self.slots = tuple(_aligned_empty(slot_bytes, device) for _ in range(n_slots))
        self._cuda = device.type == 'cuda'
        self._copy_stream: Any = torch.cuda.Stream(device) if self._cuda else None
        self._copy_done: list[Any] = [torch.cuda.Event() if self._cuda else None
                                      for _ in range(n_slots)]
        self._slot_free: list[Any] = [torch.cuda.Event() if self._cuda else None
                                      for _ in range(n_slots)]
        self._decoded: list[Any] = [torch.cuda.Event() if self._cuda else None
                                    for _ in range(n_slots)]
        self._ready: list[Any] = list(self._copy_done)
        self.decode_stream: Any = torch.cuda.Stream(device) if self._cuda else None
        self.staging: tuple[torch.Tensor, ...] = ()
        self.codec: Codec | None = None
        self._holder = [_EMPTY] * n_slots
        self._fresh = [False] * n_slots        # copied, not yet used by a layer
        self._issued_at = [0] * n_slots
        self._dma_marks: list[tuple[Any, Any] | None] = [None] * n_slots
        self._issue_count = 0
        self._in_use: int | None = None
        self._clock = clock
        self.copies = 0
        self.wasted_copies = 0
        self.wasted_bytes = 0
        self.last_dma: tuple[Any, Any] | None = None
        self.last_wait: tuple[Any, Any] | None = None

    def add_staging(self, nbytes: int, codec: Codec) -> None:
        """Give each slot a staging buffer of ``nbytes`` for compressed copies ``codec`` decodes."""
        self.codec = codec
        if nbytes > 0:
            self.staging = tuple(_aligned_empty(nbytes, self.device) for _ in range(self.n_slots))

    def holds(self, layer_id: int) -> int | None:
        """Return the slot holding (or receiving) ``layer_id``, if any."""
        for s in range(self.n_slots):
            if self._holder[s] == layer_id:
                return s
        return None

    def acquire(self, layer_id: int, transfer: Transfer) -> int:
        """Make the compute stream wait until ``layer_id`` sits in a slot; return that slot.

        Copies (and decodes) now if no slot holds the layer (a cold start or a wrong guess).
        """
        if self._in_use is not None:
            raise StateError(
                f'streamed layer {layer_id} started while the layer in slot {self._in_use} is '
                'still running: streamed layers must not call each other (nesting is unsupported)'
            )
        slot = self.holds(layer_id)
        if slot is None:
            slot = choose_slot(self.n_slots, None, self._issued_at)
            self._issue(slot, layer_id, transfer)
        self.last_dma = self._dma_marks[slot] if self._fresh[slot] else None
        self._fresh[slot] = False
        if self._cuda:
            compute = torch.cuda.current_stream(self.device)
            before = self._clock.mark(compute) if self._clock else None
            compute.wait_event(self._ready[slot])
            after = self._clock.mark(compute) if self._clock else None
            self.last_wait = (before, after) if self._clock else None
        elif self._clock:
            now = self._clock.mark(None)
            self.last_wait = (now, now)
        self._in_use = slot
        return slot

    def prefetch(self, layer_id: int, transfer: Transfer) -> None:
        """Start copying ``layer_id`` into a slot other than the one in use (no-op if held)."""
        if self.n_slots < 2 or self.holds(layer_id) is not None:
            return
        slot = choose_slot(self.n_slots, self._in_use, self._issued_at)
        self._issue(slot, layer_id, transfer)

    def release(self) -> None:
        """Record compute-done for the slot in use: later copies into it wait for this point."""
        slot = self._in_use
        if slot is None:
            return
        if self._cuda:
            self._slot_free[slot].record(torch.cuda.current_stream(self.device))
        self._in_use = None

    def _issue(self, slot: int, layer_id: int, tr: Transfer) -> None:
        dst = tr.dsts[slot]
        if self._fresh[slot]:
            self.wasted_copies += 1
            self.wasted_bytes += tr.copy_bytes
        self._issue_count += 1
        self._issued_at[slot] = self._issue_count
        self._holder[slot] = layer_id
        self._fresh[slot] = True
        self.copies += 1
        if tr.index is None:
            self._dma_marks[slot] = self._copy(slot, tr.src, dst)
            self._ready[slot] = self._copy_done[slot]
            return
        codec = self.codec
        if codec is None:
            raise StateError(f'layer {layer_id} is compressed but the streamer has no codec')
        if tr.on_device:
            src = tr.src
            self._dma_marks[slot] = None
            after = self._slot_free[slot]
        else:
            src = self.staging[slot].narrow(0, 0, tr.src.numel())
            self._dma_marks[slot] = self._copy(slot, tr.src, src)
            after = self._copy_done[slot]
        if self._cuda:
            stream = self.decode_stream
            with torch.cuda.stream(stream):
                stream.wait_event(after)
                codec.decompress_into(src, tr.index, dst)
                self._decoded[slot].record(stream)
            self._ready[slot] = self._decoded[slot]
        else:
            codec.decompress_into(src, tr.index, dst)

    def _copy(self, slot: int, src: torch.Tensor, dst: torch.Tensor) -> tuple[Any, Any] | None:
        """Copy host bytes into ``dst`` after the slot's last compute; return the DMA marks."""
        if self._cuda:
            stream = self._copy_stream
            with torch.cuda.stream(stream):
                stream.wait_event(self._slot_free[slot])
                start = self._clock.mark(stream) if self._clock else None
                dst.copy_(src, non_blocking=True)
                end = self._clock.mark(stream) if self._clock else None
                self._copy_done[slot].record(stream)
        else:
            start = self._clock.mark(None) if self._clock else None
            dst.copy_(src)
            end = self._clock.mark(None) if self._clock else None
        return (start, end) if self._clock else None

    def forget(self) -> None:
        """Mark every slot empty (their contents stay valid but will be copied again)."""
        self._holder = [_EMPTY] * self.n_slots
        self._fresh = [False] * self.n_slots

    def drain(self) -> None:
        """Block the host until all copies and queued compute finished (off the hot path only)."""
        if self._cuda:
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Wait for outstanding work, then drop the slots."""
        self.drain()
        self.slots = ()
        self.staging = ()
        self._holder = [_EMPTY] * self.n_slots


def synchronize(device: torch.device) -> None:
    """Block the host until ``device`` is idle; for stats and teardown, never the hot path."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
