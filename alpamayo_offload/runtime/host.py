"""Exactly sized, page-locked host regions: one per streamed layer.

``Tensor.pin_memory()`` goes through PyTorch's caching host allocator, which rounds every block
up to a power of two (up to 2x host RAM). Instead each region is an ordinary page-aligned
allocation registered in place with ``cudaHostRegister``, so the pinned bytes are the layer's
bytes rounded up to a page.
"""
from __future__ import annotations

import logging

import torch

from .errors import HostMemoryError
from .layout import PAGE_BYTES, align_up

logger = logging.getLogger(__name__)


class HostRegion:
    """A page-aligned uint8 buffer of ``nbytes`` (page-rounded), optionally page-locked."""

    def __init__(self, nbytes: int, pin: bool) -> None:
        if nbytes <= 0:
            raise ValueError(f'HostRegion nbytes must be > 0, got {nbytes}')
        self.span = align_up(nbytes, PAGE_BYTES)
        self._raw = torch.empty(self.span + PAGE_BYTES, dtype=torch.uint8)
        start = align_up(self._raw.data_ptr(), PAGE_BYTES) - self._raw.data_ptr()
        self.tensor = self._raw.narrow(0, start, self.span)
        self.pinned = False
        if pin:
            self._register()

    @property
    def allocated_bytes(self) -> int:
        """Host bytes this region holds (span plus the alignment page)."""
        return self._raw.numel()

    @property
    def pinned_bytes(self) -> int:
        """Bytes page-locked for this region (0 when not pinned)."""
        return self.span if self.pinned else 0

    def _register(self) -> None:
        cudart = torch.cuda.cudart()
        err = cudart.cudaHostRegister(self.tensor.data_ptr(), self.span, 0)
        if int(err) != 0:
            raise HostMemoryError(
                f'cudaHostRegister of {self.span} B failed with CUDA error {int(err)}; raise the '
                'memlock limit (ulimit -l) or stream fewer layers'
            )
        self.pinned = True

    def release(self) -> None:
        """Unregister (if pinned) and drop the memory; the region is unusable afterwards."""
        if self.pinned:
            err = torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())
            if int(err) != 0:
                logger.warning('cudaHostUnregister failed with CUDA error %d', int(err))
            self.pinned = False
        self.tensor = torch.empty(0, dtype=torch.uint8)
        self._raw = self.tensor
