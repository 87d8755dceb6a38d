"""A layer's tensors and their binding: a device copy (resident) or slot views (streamed).

Streamed layers get views of every slot built once at attach; switching slots is one ``.data``
assignment per parameter (and one dict store per buffer), done only when a layer's slot changes.
A streamed layer's bytes are raw or compressed, in a host region or (kept compressed in VRAM)
in a device tensor; its :class:`~.streamer.Transfer` says which.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .codec import Codec, Compressed
from .errors import LayerError
from .host import HostRegion
from .layout import LayerLayout, TensorSpec, pack, view
from .source import TensorSource, check_spec
from .streamer import Transfer

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
        self.transfer = Transfer(torch.empty(0, dtype=torch.uint8), ())
        self._codec: Codec | None = None
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
        if not filled:
            self.pack_into(region.tensor, source)
        self.region = region
        self._bind_views(slots, Transfer(region.tensor.narrow(0, 0, self.nbytes),
                                         self._dsts(slots)))

    def pack_into(self, flat: torch.Tensor, source: TensorSource | None) -> None:
        """Write the layer's weights into ``flat`` (uint8, at least :attr:`nbytes` long)."""
        for t, entry, name in zip(self.tensors, self.layout.entries, self.qualified, strict=True):
            _fill(t, view(flat, entry), source, name)

    def attach_compressed(self, slots: Sequence[torch.Tensor], compressed: Compressed,
                          region: HostRegion | None, codec: Codec) -> None:
        """Hold the layer as ``compressed`` bytes and bind it to slot 0's views.

        With a ``region`` the bytes go into it (streamed compressed); without one they stay on
        the codec's device (kept compressed in VRAM) and only decompress per pass.
        """
        n = compressed.index.nbytes
        if region is not None:
            region.tensor.narrow(0, 0, n).copy_(compressed.data.narrow(0, 0, n))
            src = region.tensor.narrow(0, 0, n)
        else:
            src = compressed.data.narrow(0, 0, n).to(codec.device)
        self.region = region
        self._codec = codec
        self._bind_views(slots, Transfer(src, self._dsts(slots), compressed.index,
                                         on_device=region is None))

    def _dsts(self, slots: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return tuple(slot.narrow(0, 0, self.nbytes) for slot in slots)

    def _bind_views(self, slots: Sequence[torch.Tensor], transfer: Transfer) -> None:
        self.transfer = transfer
        views = [[view(slot, e) for e in self.layout.entries] for slot in slots]
        for t, v in zip(self.tensors, views[0], strict=True):
            _set(t, v, replace=t.on_meta or not t.is_param)
        live = [self._live(t) for t in self.tensors]
        self._param_views = [[(p, v) for p, t, v in zip(live, self.tensors, vs, strict=True)
                              if t.is_param] for vs in views]
        self._buffer_views = [[(m._buffers, a, v) for t, v in zip(self.tensors, vs, strict=True)
                               if not t.is_param for m, a in t.owners] for vs in views]
        self.bound_slot = 0

    @property
    def compressed(self) -> bool:
        """Whether the layer's bytes are held compressed."""
        return self.transfer.index is not None

    @property
    def device_bytes(self) -> int:
        """Device bytes its compressed copy holds when kept in VRAM (0 otherwise)."""
        return self.transfer.src.numel() if self.transfer.on_device else 0

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
        host store keeps its own; its layers go back to ``meta``). A compressed layer is decoded
        once more to hand its weights back, unless every tensor goes back to ``meta`` (a layer
        filled from a source: nothing to hand back, so nothing is decoded and no device memory
        is taken, which matters when a smaller cap is already in force).
        """
        flat = None if all(t.on_meta for t in self.tensors) else self._raw_bytes()
        for t, entry in zip(self.tensors, self.layout.entries, strict=True):
            _restore(t, None if flat is None else view(flat, entry).to(t.origin, copy=True))
        self._param_views, self._buffer_views = [], []
        self.transfer = Transfer(torch.empty(0, dtype=torch.uint8), ())
        self.bound_slot, self.region, self._codec = -1, None, None

    def _raw_bytes(self) -> torch.Tensor:
        """Return the layer's flat raw bytes (decoded if held compressed)."""
        tr = self.transfer
        if tr.index is None:
            assert self.region is not None, 'detach of a streamed layer that was never attached'
            return self.region.tensor
        codec = self._codec
        assert codec is not None
        out = torch.empty(self.nbytes, dtype=torch.uint8, device=codec.device)
        src = tr.src.to(codec.device)
        if codec.device.type == 'cuda':
            stream = torch.cuda.current_stream(codec.device)
            codec_stream = getattr(codec, 'stream', stream)
            codec_stream.wait_stream(stream)
            codec.decompress_into(src, tr.index, out)
            codec_stream.synchronize()
        else:
            codec.decompress_into(src, tr.index, out)
        return out.cpu()
