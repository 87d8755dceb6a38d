"""Byte layout of one layer inside a flat region: the same offsets on the host and in a slot.

Every tensor starts at a multiple of ``TENSOR_ALIGN`` bytes, so a tensor bound to a slot view has
the alignment a freshly allocated one would have (cuBLAS may pick kernels by alignment; a
cumulative-numel layout would break bit-exactness against the preload run).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

TENSOR_ALIGN = 256
PAGE_BYTES = 4096


def align_up(value: int, alignment: int) -> int:
    """Smallest multiple of ``alignment`` that is >= ``value``."""
    if alignment <= 0:
        raise ValueError(f'alignment must be > 0, got {alignment}')
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one tensor, as the runtime sees it before anything is loaded."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data."""
        numel = 1
        for dim in self.shape:
            numel *= dim
        return numel * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class LayoutEntry:
    """One tensor of a layer: where its bytes sit in the layer's flat region."""

    name: str
    spec: TensorSpec
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies (without the alignment padding after it)."""
        return self.spec.nbytes


@dataclass(frozen=True)
class LayerLayout:
    """All tensors of one layer packed into ``nbytes`` bytes (a multiple of ``TENSOR_ALIGN``)."""

    entries: tuple[LayoutEntry, ...]
    nbytes: int

    @property
    def data_bytes(self) -> int:
        """Bytes of tensor data, without padding."""
        return sum(e.nbytes for e in self.entries)


def pack(specs: Iterable[tuple[str, TensorSpec]], align: int = TENSOR_ALIGN) -> LayerLayout:
    """Lay tensors out in the given order, each at an ``align``-byte boundary."""
    entries: list[LayoutEntry] = []
    offset = 0
    for name, spec in specs:
        entries.append(LayoutEntry(name, spec, offset))
        offset = align_up(offset + spec.nbytes, align)
    return LayerLayout(tuple(entries), offset)


def view(flat: torch.Tensor, entry: LayoutEntry) -> torch.Tensor:
    """Return the typed, shaped view of ``entry`` inside a flat uint8 buffer."""
    raw = flat.narrow(0, entry.offset, entry.nbytes)
    return raw.view(entry.spec.dtype).view(entry.spec.shape)
