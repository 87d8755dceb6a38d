"""Exactly sized, page-locked host memory for the streamed layers: one arena, one region each.

``Tensor.pin_memory()`` goes through PyTorch's caching host allocator, which rounds every block
up to a power of two (up to 2x host RAM). Instead all streamed layers share one ordinary
page-aligned allocation registered once, in place, with ``cudaHostRegister``; each layer owns a
page-aligned region of it, so the pinned bytes are the layers' bytes rounded up to a page each.
One registration rather than one per layer: the driver maps registrations at a granularity
coarser than a page, and two small neighbouring registrations can collide
(``cudaErrorHostMemoryAlreadyRegistered`` with layers of 20-45 KiB).

The registration is undone by a finalizer as well as by :meth:`HostArena.release`: an arena
dropped without release would otherwise be unmapped while still registered, and the next arena
mapped at the same address would fail to register.
"""
from __future__ import annotations

import logging
import mmap
import weakref
from collections.abc import Sequence

import torch

from .errors import HostMemoryError
from .layout import PAGE_BYTES, align_up

logger = logging.getLogger(__name__)


class HostRegion:
    """One layer's page-aligned slice of a :class:`HostArena` (uint8 view)."""

    def __init__(self, arena: HostArena, tensor: torch.Tensor) -> None:
        self._arena = arena
        self.tensor = tensor
        self.span = tensor.numel()

    @property
    def pinned(self) -> bool:
        """Whether the arena holding this region is page-locked."""
        return self._arena.pinned

    @property
    def allocated_bytes(self) -> int:
        """Host bytes this region holds (the layer's bytes rounded up to a page)."""
        return self.span

    @property
    def pinned_bytes(self) -> int:
        """Bytes page-locked for this region (0 when not pinned)."""
        return self.span if self.pinned else 0


class HostArena:
    """Page-aligned regions of the given sizes in one allocation, optionally page-locked."""

    def __init__(self, nbytes: Sequence[int], pin: bool) -> None:
        if not nbytes or any(n <= 0 for n in nbytes):
            raise ValueError(f'HostArena needs region sizes > 0, got {list(nbytes)}')
        spans = [align_up(n, PAGE_BYTES) for n in nbytes]
        self.span = sum(spans)
        # An anonymous mapping: page-aligned at the storage's own start, so `is_pinned()` (which
        # looks up the storage base) sees the registered range, and no other allocation shares
        # its pages.
        self._map: mmap.mmap | None = mmap.mmap(-1, self.span)
        self.tensor = torch.frombuffer(self._map, dtype=torch.uint8)
        self.pinned = False
        offsets = [sum(spans[:i]) for i in range(len(spans))]
        self.regions = [HostRegion(self, self.tensor.narrow(0, o, s))
                        for o, s in zip(offsets, spans, strict=True)]
        if pin:
            self.pin()

    def pin(self) -> None:
        """Page-lock the whole arena in place (once; a store pins after filling it)."""
        if self.pinned:
            return
        ptr = self.tensor.data_ptr()
        err = int(torch.cuda.cudart().cudaHostRegister(ptr, self.span, 0))
        if err != 0:
            _consume_pending_cuda_error()
            raise HostMemoryError(
                f'cudaHostRegister of {self.span} B failed with CUDA error {err}; raise the '
                'memlock limit (ulimit -l) or stream fewer layers'
            )
        self._unregister = weakref.finalize(self, _unregister, ptr)
        self.pinned = True

    def unpin(self) -> None:
        """Make the arena pageable again: the same pages and contents, no longer page-locked."""
        if self.pinned:
            self._unregister()
            self.pinned = False

    def release(self) -> None:
        """Unregister (if pinned) and drop the memory; the regions are unusable afterwards."""
        if self.pinned:
            self._unregister()
            self.pinned = False
        empty = torch.empty(0, dtype=torch.uint8)
        for region in self.regions:
            region.tensor, region.span = empty, 0
        self.tensor = empty
        self._map = None   # unmapped once the last view of it is gone


def _unregister(ptr: int) -> None:
    err = int(torch.cuda.cudart().cudaHostUnregister(ptr))
    if err != 0:
        _consume_pending_cuda_error()
        logger.warning('cudaHostUnregister failed with CUDA error %d', err)


def _consume_pending_cuda_error() -> None:
    """Clear the error a failed cudaHost(Un)register leaves as CUDA's last error.

    PyTorch checks the last error after each kernel launch, so it would otherwise surface as a
    failure of whatever CUDA operation this process runs next (a tensor allocation raising
    cudaErrorHostMemoryAlreadyRegistered). A launch here takes it instead.
    """
    try:
        torch.zeros(1, device='cuda')
    except RuntimeError as err:   # torch.AcceleratorError is a RuntimeError
        logger.debug('cleared pending CUDA error: %s', err)
