"""VRAM accounting done before anything is loaded: what a plan needs, and whether it fits."""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .binding import collect_tensors
from .errors import BudgetError
from .layout import pack
from .streamer import slot_allocation_bytes

GIB = float(2**30)

# The CUDA caching allocator hands out blocks in multiples of 512 bytes.
ALLOCATOR_ROUND = 512


def _gib(nbytes: int) -> str:
    return f'{nbytes / GIB:.3f} GiB ({nbytes} B)'


@dataclass(frozen=True)
class VramPlan:
    """The device bytes one runtime configuration needs, term by term."""

    resident_bytes: int
    resident_layers: int
    slot_bytes: int
    n_slots: int
    fixed_bytes: int
    working_set_bytes: int
    budget_bytes: int | None
    staging_bytes: int = 0       # per slot: room for a compressed layer's copy
    compressed_bytes: int = 0    # layers kept compressed on the device

    def __post_init__(self) -> None:
        for name in ('resident_bytes', 'resident_layers', 'slot_bytes', 'n_slots',
                     'fixed_bytes', 'working_set_bytes', 'staging_bytes', 'compressed_bytes'):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f'VramPlan.{name} must be >= 0, got {value}')
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ValueError(f'VramPlan.budget_bytes must be > 0 or None, got {self.budget_bytes}')

    @property
    def required_bytes(self) -> int:
        """Everything the plan puts on the device plus the stated working-set margin."""
        return (self.resident_bytes + self.n_slots * (self.slot_bytes + self.staging_bytes)
                + self.compressed_bytes + self.fixed_bytes + self.working_set_bytes)

    @property
    def fits(self) -> bool:
        """Whether the plan fits the budget (always true without a budget)."""
        return self.budget_bytes is None or self.required_bytes <= self.budget_bytes

    def describe(self) -> str:
        """Describe the accounting in one line, every term named."""
        budget = 'no budget' if self.budget_bytes is None else f'budget {_gib(self.budget_bytes)}'
        compressed = (f' + {self.n_slots} staging x {_gib(self.staging_bytes)} + compressed '
                      f'layers {_gib(self.compressed_bytes)}'
                      if self.staging_bytes or self.compressed_bytes else '')
        return (
            f'needs {_gib(self.required_bytes)} = {self.resident_layers} resident layers '
            f'{_gib(self.resident_bytes)} + {self.n_slots} slots x {_gib(self.slot_bytes)} '
            f'{compressed} + fixed {_gib(self.fixed_bytes)} '
            f'+ working set {_gib(self.working_set_bytes)}; '
            f'{budget}'
        )

    def check(self) -> None:
        """Raise :class:`BudgetError` naming every term if the plan does not fit."""
        if self.fits:
            return
        assert self.budget_bytes is not None
        excess = self.required_bytes - self.budget_bytes
        raise BudgetError(
            f'residency plan does not fit: {self.describe()}; over by {_gib(excess)}. '
            'Keep fewer layers resident or raise budget_bytes.'
        )


def device_bytes(nbytes: int) -> int:
    """Bytes a tensor of ``nbytes`` takes from the CUDA caching allocator."""
    return max(ALLOCATOR_ROUND, -(-nbytes // ALLOCATOR_ROUND) * ALLOCATOR_ROUND)


@dataclass(frozen=True)
class LayerFootprint:
    """Device bytes one layer takes, as :class:`VramPlan` counts them.

    Planners outside the runtime (a profile of the model) use these, not the parameter bytes:
    per-tensor allocator rounding and slot alignment add a few hundred bytes a layer, enough to
    make a plan packed to the byte exceed its budget (about 21 KB over 16 GiB for Alpamayo-R1).
    """

    resident_bytes: int     # resident: one allocator block per tensor
    slot_bytes: int         # streamed: a slot sized for this layer
    packed_bytes: int       # streamed: what one copy moves (the layer's aligned flat layout)
    param_bytes: int        # tensor data alone


def layer_footprint(layer: nn.Module) -> LayerFootprint:
    """Return the device bytes ``layer`` takes resident and the slot it needs streamed."""
    tensors = collect_tensors(layer)
    packed = pack((t.name, t.spec) for t in tensors).nbytes
    return LayerFootprint(resident_bytes=sum(device_bytes(t.spec.nbytes) for t in tensors),
                          slot_bytes=device_bytes(slot_allocation_bytes(packed)) if packed else 0,
                          packed_bytes=packed, param_bytes=sum(t.spec.nbytes for t in tensors))
