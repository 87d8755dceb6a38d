"""Host RAM the weights need, checked against what the machine has before anything is allocated.

The weights' home is host RAM (a CPU model, or the copy an offloading runtime streams from);
loading fills it tensor by tensor with no second copy, so the need is the weights' bytes. The
check runs before the first allocation: a model that cannot fit is refused with both numbers,
instead of the kernel's OOM killer ending the process half-way through a 72 GB load.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from .errors import HostMemoryError

MEMINFO = Path("/proc/meminfo")


def tensor_bytes(tensors: Iterable[torch.Tensor], dtype: torch.dtype | None = None) -> int:
    """Bytes of `tensors` (meta tensors count too), floating ones counted in `dtype` if given."""
    total = 0
    for t in tensors:
        size = dtype.itemsize if dtype is not None and t.is_floating_point() else t.element_size()
        total += t.numel() * size
    return total


def available_host_bytes(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable of `meminfo` in bytes; None where the file or the field is missing."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def require_host_memory(needed: int, what: str, available: int | None = None) -> None:
    """Refuse with both numbers when `needed` host bytes exceed `available` (default MemAvailable).

    Unknown availability (no /proc/meminfo) lets the load go ahead.
    """
    source = "the given limit"
    if available is None:
        available, source = available_host_bytes(), "MemAvailable"
    if available is not None and needed > available:
        raise HostMemoryError(
            f"{what} needs {needed / 1e9:.2f} GB of host RAM for its weights ({needed} bytes); "
            f"this machine has {available / 1e9:.2f} GB available ({available} bytes, "
            f"{source}). Free host memory, use a machine with more RAM, or a smaller model")
