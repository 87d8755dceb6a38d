"""Resolve the `vram_budget` spec to bytes at start-up ("12GiB", "free-2GiB", "0.8free").

The relative forms let the node share a GPU with a simulator: they are measured once, when the
engine loader starts, from `torch.cuda.mem_get_info` on the node's device (after this process's CUDA
context exists, so the context is already off the free figure). They have no meaning on a CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..planning import BudgetError, parse_budget
from ..planning.units import is_free_relative
from .errors import ParameterError

# Stands in for the free VRAM when only the spelling of a relative spec is checked.
_SYNTAX_CHECK_FREE = 2**62


@dataclass(frozen=True)
class ResolvedBudget:
    """A budget spec and what it meant when the node started."""

    spec: str                  # as given; '' = no budget
    budget_bytes: int | None   # None: no budget
    free_bytes: int | None     # free VRAM measured at start-up (CUDA only)


def check_budget_spec(spec: str, device: str) -> None:
    """Reject a spec that can never resolve on `device`, without touching CUDA."""
    if not spec:
        return
    try:
        parse_budget(spec, _SYNTAX_CHECK_FREE)
    except BudgetError as err:
        raise ParameterError(f'vram_budget {spec!r}: {err}') from err
    if is_free_relative(spec) and not device.startswith('cuda'):
        raise ParameterError(
            f'vram_budget {spec!r} is relative to free VRAM, which exists only on a CUDA device, '
            f'but device is {device!r}; set device to cuda (e.g. device:=cuda) or give an '
            'absolute budget such as "12GiB", or "" for none')


def free_vram_bytes(device: str) -> int:
    """Free bytes of the CUDA device `device` now (creates this process's context if needed)."""
    import torch

    if not torch.cuda.is_available():
        raise ParameterError(f'device {device!r} needs CUDA, but torch sees no CUDA device '
                             f'(torch {torch.__version__}); set device to cpu')
    return int(torch.cuda.mem_get_info(torch.device(device))[0])


def resolve_budget(spec: str, device: str) -> ResolvedBudget:
    """Resolve `spec` for `device`; relative forms measure the free VRAM now (CUDA only)."""
    check_budget_spec(spec, device)
    if not spec:
        return ResolvedBudget(spec, None, None)
    free = free_vram_bytes(device) if is_free_relative(spec) else None
    try:
        return ResolvedBudget(spec, parse_budget(spec, free), free)
    except BudgetError as err:
        raise ParameterError(f'vram_budget {spec!r} with {free} bytes free at start-up: {err}; '
                             'free VRAM on the GPU or lower the margin') from err
