"""A layer's tensors and their binding: a device copy (resident) or slot views (streamed).

Streamed layers get views of every slot built once at attach; switching slots is one ``.data``
assignment per parameter (and one dict store per buffer), done only when a layer's slot changes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .errors import LayerError
from .host import HostRegion
from .layout import LayerLayout, TensorSpec, pack, view
from .source import TensorSource, check_spec

_DROPPED = torch.empty(0)


@dataclass
class LayerTensor:
    """One unique parameter or buffer of a layer, with every (module, attribute) that holds it.

    ``original`` is the object to hand back at detach: the Parameter itself (its ``.data`` is
    swapped), or a meta tensor. A materialised buffer is dropped once copied, so its old storage
    is freed (detach restores a fresh tensor with the same values).
    """

    name: str
    owners: tuple[tuple[nn.Module, str], ...]
    is_param: bool
    original: torch.Tensor
    spec: TensorSpec
    origin: torch.device

    @property
    def on_meta(self) -> bool:
        """Whether the tensor had no data at attach (to be filled from a source)."""
        return self.origin.type == 'meta'


def collect_tensors(layer: nn.Module) -> tuple[LayerTensor, ...]:
    """Parameters, then buffers, of ``layer`` in definition order; shared ones listed once."""
    found: dict[int, tuple[str, list[tuple[nn.Module, str]], bool, torch.Tensor]] = {}
    for is_param in (True, False):
        for prefix, module in layer.named_modules(remove_duplicate=True):
            table = module._parameters if is_param else module._buffers
            for attr, tensor in table.items():
                if tensor is None:
                    continue
                name = f'{prefix}.{attr}' if prefix else attr
                entry = found.setdefault(id(tensor), (name, [], is_param, tensor))
                entry[1].append((module, attr))
    return tuple(
        LayerTensor(name, tuple(owners), is_param, tensor,
                    TensorSpec(tuple(tensor.shape), tensor.dtype), tensor.device)
        for name, owners, is_param, tensor in found.values()
    )


def _set(t: LayerTensor, value: torch.Tensor, replace: bool) -> None:
    """Point every holder of ``t`` at ``value``; ``replace`` swaps the object (meta tensors)."""
    if t.is_param and not replace:
        t.original.data = value
        return
    new = nn.Parameter(value, requires_grad=t.original.requires_grad) if t.is_param else value
    for module, attr in t.owners:
        table = module._parameters if t.is_param else module._buffers
        table[attr] = new


def _restore(t: LayerTensor, value: torch.Tensor | None) -> None:
    """Give every holder of ``t`` back its original object, holding ``value`` if given."""
    if value is not None and t.is_param:
        t.original.data = value
    for module, attr in t.owners:
        table = module._parameters if t.is_param else module._buffers
        table[attr] = t.original if (t.is_param or value is None) else value


def _fill(t: LayerTensor, out: torch.Tensor, source: TensorSource | None, qualified: str) -> None:
    """Write ``t``'s values into ``out``: from the tensor itself, or from the source if on meta."""
    if not t.on_meta:
        out.copy_(t.original)
        if not t.is_param:
            t.original = _DROPPED
        return
    if source is None:
        raise LayerError(
            f'tensor {qualified!r} is on the meta device and no source was given; pass '
            'attach(source=...) or materialise the layer first'
        )
    check_spec(source, qualified, t.spec)
    source.read_into(qualified, out)


class ResidentLayer:
    """A layer kept on the device for the whole attachment."""

    def __init__(self, tensors: tuple[LayerTensor, ...], qualified: Sequence[str]) -> None:
        self.tensors = tensors
        self.qualified = tuple(qualified)

    def attach(self, device: torch.device, source: TensorSource | None) -> None:
        """Move (or load) every tensor to ``device``."""
        for t, name in zip(self.tensors, self.qualified, strict=True):
            if t.on_meta:
                out = torch.empty(t.spec.shape, dtype=t.spec.dtype, device=device)
                _fill(t, out, source, name)
                _set(t, out, replace=True)
            else:
                moved = t.original.data.to(device)
                if not t.is_param:
                    t.original = _DROPPED
                _set(t, moved, replace=not t.is_param)

    def detach(self) -> None:
        """Put every tensor back on the device it came from (meta tensors back to meta)."""
        for t in self.tensors:
            if t.on_meta:
                _restore(t, None)
            else:
                current = t.original.data if t.is_param else t.owners[0][0]._buffers[t.owners[0][1]]
                _restore(t, current.to(t.origin))


class StreamedLayer:
    """A layer whose weights live in one host region and run from whichever slot holds them."""

    def __init__(self, layer_id: int, tensors: tuple[LayerTensor, ...],
                 qualified: Sequence[str]) -> None:
        self.layer_id = layer_id
        self.tensors = tensors
        self.qualified = tuple(qualified)
        self.layout: LayerLayout = pack((t.name, t.spec) for t in tensors)
        self.region: HostRegion | None = None
        self.src = torch.empty(0, dtype=torch.uint8)
        self.dsts: tuple[torch.Tensor, ...] = ()
        self.bound_slot = -1
        self._param_views: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        self._buffer_views: list[list[tuple[dict[str, torch.Tensor | None], str,
                                            torch.Tensor]]] = []

    @property
    def nbytes(self) -> int:
        """Bytes of the flat region (tensors plus alignment padding)."""
        return self.layout.nbytes

    def attach(self, slots: Sequence[torch.Tensor], region: HostRegion,
               source: TensorSource | None, filled: bool = False) -> None:
        """Pack the weights into its host region and bind the layer to slot 0's views.

        `filled`: the region is a host store's, which already holds the weights.
        """
        for t, entry, name in zip(self.tensors, self.layout.entries, self.qualified, strict=True):
            if not filled:
                _fill(t, view(region.tensor, entry), source, name)
        self.region = region
        self.src = region.tensor.narrow(0, 0, self.nbytes)
        self.dsts = tuple(slot.narrow(0, 0, self.nbytes) for slot in slots)
        views = [[view(slot, e) for e in self.layout.entries] for slot in slots]
        for t, v in zip(self.tensors, views[0], strict=True):
            _set(t, v, replace=t.on_meta or not t.is_param)
        live = [self._live(t) for t in self.tensors]
        self._param_views = [[(p, v) for p, t, v in zip(live, self.tensors, vs, strict=True)
                              if t.is_param] for vs in views]
        self._buffer_views = [[(m._buffers, a, v) for t, v in zip(self.tensors, vs, strict=True)
                               if not t.is_param for m, a in t.owners] for vs in views]
        self.bound_slot = 0

    @staticmethod
    def _live(t: LayerTensor) -> torch.Tensor:
        module, attr = t.owners[0]
        table = module._parameters if t.is_param else module._buffers
        live = table[attr]
        assert live is not None
        return live

    def bind(self, slot: int) -> None:
        """Point the layer's tensors at slot ``slot`` (a pointer swap per tensor)."""
        for param, v in self._param_views[slot]:
            param.data = v
        for table, attr, v in self._buffer_views[slot]:
            table[attr] = v
        self.bound_slot = slot

    def detach(self) -> None:
        """Give the weights back as ordinary tensors on their original devices.

        The region's memory belongs to the arena, which the runtime frees after every layer (a
        host store keeps its own; its layers go back to ``meta``).
        """
        region = self.region
        assert region is not None, 'detach of a streamed layer that was never attached'
        for t, entry in zip(self.tensors, self.layout.entries, strict=True):
            _restore(t, None if t.on_meta else view(region.tensor, entry).to(t.origin, copy=True))
        self._param_views, self._buffer_views = [], []
        self.src, self.dsts, self.bound_slot = torch.empty(0, dtype=torch.uint8), (), -1
        self.region = None
