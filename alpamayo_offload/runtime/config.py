"""What the caller hands the runtime: the layer sequences, the residency plan and the mode."""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from torch import nn


class Mode(str, enum.Enum):
    """How non-resident layers reach the device."""

    PRELOAD = 'preload'        # every layer on the device: the reference, no hooks
    SEQUENTIAL = 'sequential'  # copy a layer right before it runs, one slot, no overlap
    PIPELINED = 'pipelined'    # copy the next layer while the current one computes, two slots


@dataclass(frozen=True)
class LayerSequence:
    """Layers that run in this order, one repetition at a time (e.g. the decoder layers).

    ``prefix`` turns a layer's parameter name into the name a :class:`TensorSource` knows:
    ``f'{prefix}{index}.{param_name}'`` (e.g. ``'vlm.model.language_model.layers.'``).
    """

    name: str
    layers: Sequence[nn.Module]
    prefix: str = ''

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f'LayerSequence.name must be a non-empty str, got {self.name!r}')
        layers = tuple(self.layers)
        for i, layer in enumerate(layers):
            if not isinstance(layer, nn.Module):
                raise ValueError(
                    f'LayerSequence {self.name!r}: layers[{i}] is {type(layer).__name__}, '
                    'expected an nn.Module'
                )
        object.__setattr__(self, 'layers', layers)

    def qualified_name(self, index: int, tensor_name: str) -> str:
        """Name of one of layer ``index``'s tensors in a tensor source."""
        return f'{self.prefix}{index}.{tensor_name}'


@dataclass(frozen=True)
class ResidencyPlan:
    """Layer indices per sequence that stay on the device; every other layer streams.

    ``compressed`` names layers kept compressed on the device and decompressed into a slot
    before each pass (with a codec; without one they stream). Streamed layers stream
    compressed when the runtime has a codec, raw otherwise.
    """

    resident: Mapping[str, Sequence[int]] = field(default_factory=dict)
    compressed: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        resident = self._clean('resident', self.resident)
        compressed = self._clean('compressed', self.compressed)
        for name, indices in compressed.items():
            both = sorted(set(indices) & set(resident.get(name, ())))
            if both:
                raise ValueError(f'ResidencyPlan: layers {both} of {name!r} are both resident '
                                 'and compressed; give each layer one placement')
        object.__setattr__(self, 'resident', resident)
        object.__setattr__(self, 'compressed', compressed)

    @staticmethod
    def _clean(field_name: str, given: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
        clean: dict[str, tuple[int, ...]] = {}
        for name, indices in dict(given).items():
            values = tuple(indices)
            for value in values:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(
                        f'ResidencyPlan.{field_name}[{name!r}] holds {value!r}; '
                        'expected layer indices as ints >= 0'
                    )
            if len(set(values)) != len(values):
                raise ValueError(
                    f'ResidencyPlan.{field_name}[{name!r}] = {values} lists an index twice'
                )
            clean[name] = tuple(sorted(values))
        return clean

    @classmethod
    def all_of(cls, sequences: Sequence[LayerSequence]) -> ResidencyPlan:
        """Build the plan that keeps every layer resident."""
        return cls({s.name: tuple(range(len(s.layers))) for s in sequences})

    def indices(self, sequence: str) -> tuple[int, ...]:
        """Resident indices of one sequence (empty when the plan does not name it)."""
        return tuple(self.resident.get(sequence, ()))

    def compressed_indices(self, sequence: str) -> tuple[int, ...]:
        """Return the indices of one sequence kept compressed on the device."""
        return tuple(self.compressed.get(sequence, ()))
