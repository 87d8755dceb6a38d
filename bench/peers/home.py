"""The model's home copy in host RAM, and host-memory readings (RSS, pinned bytes).

Every runtime in the benchmark wraps the same module tree. Peers re-point parameters at GPU
copies, `meta` tensors or pinned copies; `HomeCopy.restore` puts back the very host tensors the
model had before (no copy, so the weights are bit-for-bit the same for every row).
"""
from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Entry:
    module: nn.Module
    name: str
    tensor: torch.Tensor
    is_param: bool
    requires_grad: bool


class HomeCopy:
    """Every parameter and buffer of a module tree, held as host tensors, restorable exactly."""

    def __init__(self, model: nn.Module) -> None:
        entries = []
        for module in model.modules():
            for name, param in module._parameters.items():
                if param is not None:
                    entries.append(_Entry(module, name, param.detach(), True, param.requires_grad))
            for name, buf in module._buffers.items():
                if buf is not None:
                    entries.append(_Entry(module, name, buf.detach(), False, False))
        off_host = sorted({str(e.tensor.device) for e in entries} - {'cpu'})
        if off_host:
            raise ValueError(f'HomeCopy needs every tensor on the host; found {off_host}: move '
                             "the model to 'cpu' first")
        self._entries = tuple(entries)
        self.nbytes = sum(e.tensor.numel() * e.tensor.element_size() for e in entries)

    def restore(self) -> None:
        """Re-point every parameter and buffer at its home tensor and free what peers left."""
        for e in self._entries:
            if e.is_param:
                e.module._parameters[e.name] = nn.Parameter(e.tensor,
                                                            requires_grad=e.requires_grad)
            else:
                e.module._buffers[e.name] = e.tensor
        release_memory()

    def matches(self, model: nn.Module) -> bool:
        """Whether every tensor of `model` is its home tensor again (same storage)."""
        current = {(id(m), n): t for m in model.modules()
                   for n, t in [*m._parameters.items(), *m._buffers.items()] if t is not None}
        return all(
            (id(e.module), e.name) in current
            and current[(id(e.module), e.name)].data_ptr() == e.tensor.data_ptr()
            and current[(id(e.module), e.name)].device == e.tensor.device
            for e in self._entries)


def release_memory() -> None:
    """Collect garbage, return cached GPU blocks and cached pinned host blocks."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        for owner, name in ((torch.accelerator, 'empty_host_cache'),
                            (torch._C, '_accelerator_emptyHostCache'),
                            (torch._C, '_host_emptyCache')):
            empty_host = getattr(owner, name, None)
            if empty_host is not None:   # the name moved between torch releases
                empty_host()
                break


def status_kib(field: str) -> int | None:
    """Return a `/proc/self/status` field in KiB (Linux; None elsewhere or when absent)."""
    try:
        for line in Path('/proc/self/status').read_text().splitlines():
            if line.startswith(field + ':'):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """Resident set size of this process now (includes pinned pages)."""
    kib = status_kib('VmRSS')
    return None if kib is None else kib * 1024


def rss_peak_bytes() -> int | None:
    """Peak resident set size since the last `reset_rss_peak` (or process start)."""
    kib = status_kib('VmHWM')
    return None if kib is None else kib * 1024


def reset_rss_peak() -> bool:
    """Reset the kernel's peak-RSS counter (Linux `clear_refs` 5); False where not allowed."""
    try:
        Path('/proc/self/clear_refs').write_text('5')
    except OSError:
        return False
    return True


def caching_pinned_bytes() -> int:
    """Pinned bytes held by PyTorch's caching host allocator (`pin_memory()`, diffusers)."""
    if not torch.cuda.is_available():
        return 0
    stats_fn = getattr(torch.cuda, 'host_memory_stats', None)
    if stats_fn is None:
        return 0
    try:
        stats = stats_fn()
    except RuntimeError:
        return 0
    for key in ('reserved_bytes.current', 'allocated_bytes.current'):
        if key in stats:
            return int(stats[key])
    return 0
