"""Where weights of layers built on the ``meta`` device come from."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

import torch

from .errors import SourceError
from .layout import TensorSpec


@runtime_checkable
class TensorSource(Protocol):
    """Fills tensors by fully qualified name, straight into memory the runtime owns.

    ``read_into`` writes into ``out`` (pinned host region or resident device storage) so a model
    loads with one copy of its weights in host RAM. It must not cast: ``out`` has the dtype that
    :meth:`spec` reports.
    """

    def keys(self) -> Iterable[str]:
        """Names of every tensor the source holds."""
        ...

    def spec(self, name: str) -> TensorSpec:
        """Shape and dtype of tensor ``name``."""
        ...

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Copy tensor ``name`` into ``out`` (same shape and dtype)."""
        ...


class StateDictSource:
    """A :class:`TensorSource` over an in-memory state dict (tests, tiny models)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._tensors = dict(tensors)

    def keys(self) -> Iterable[str]:
        """Names of every tensor held."""
        return self._tensors.keys()

    def spec(self, name: str) -> TensorSpec:
        """Shape and dtype of tensor ``name``."""
        tensor = self._get(name)
        return TensorSpec(tuple(tensor.shape), tensor.dtype)

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Copy tensor ``name`` into ``out`` without casting."""
        out.copy_(self._get(name))

    def _get(self, name: str) -> torch.Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            sample = sorted(self._tensors)[:3]
            raise SourceError(
                f'tensor {name!r} is not in the source ({len(self._tensors)} tensors, e.g. '
                f'{sample}); check the LayerSequence prefix'
            ) from None


def check_spec(source: TensorSource, name: str, expected: TensorSpec) -> None:
    """Raise :class:`SourceError` unless the source holds ``name`` with ``expected`` shape/dtype."""
    got = source.spec(name)
    if tuple(got.shape) != tuple(expected.shape) or got.dtype != expected.dtype:
        raise SourceError(
            f'tensor {name!r}: source has shape {tuple(got.shape)} dtype {got.dtype}, the layer '
            f'expects shape {tuple(expected.shape)} dtype {expected.dtype}; nothing is cast, so '
            'fix the checkpoint or the layer definition'
        )
