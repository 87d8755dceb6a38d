"""Every layer's weights packed once into (page-locked) host memory, for attach after attach.

Without a store, :meth:`OffloadRuntime.attach` packs the streamed layers into a fresh arena and
:meth:`~OffloadRuntime.detach` copies them back out, so re-planning a loaded model re-pins and
re-copies every streamed byte (14-19 GB of Alpamayo-R1, which takes longer than the inferences
that follow a re-plan).
:meth:`HostStore.adopt` packs every layer of the sequences once, in the layout the runtime
streams it in, and leaves the layers on ``meta``. Attached with the store as its source, a
runtime streams each streamed layer straight from the store's region (no copy, no arena of its
own) and fills each resident one by one host-to-device copy; detach drops the device copies.
The cost: every layer's bytes stay pinned while the store lives, resident layers' too.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .binding import LayerTensor, collect_tensors
from .config import LayerSequence
from .errors import LayerError
from .host import HostArena, HostRegion
from .layout import LayerLayout, pack, view
from .source import StateDictSource, TensorSource, check_spec


class HostStore(StateDictSource):
    """The layers' weights in one host arena, region per layer.

    A :class:`TensorSource` over views of it, named as the sequences' prefixes say.
    """

    def __init__(self, layouts: dict[tuple[str, int], LayerLayout],
                 prefixes: dict[str, str]) -> None:
        self._layouts = layouts
        self._arena = HostArena([layout.nbytes for layout in layouts.values()], pin=False)
        self._regions = dict(zip(layouts, self._arena.regions, strict=True))
        super().__init__({f'{prefixes[seq]}{index}.{entry.name}': view(region.tensor, entry)
                          for (seq, index), region in self._regions.items()
                          for entry in layouts[(seq, index)].entries})

    @classmethod
    def adopt(cls, sequences: Sequence[LayerSequence], source: TensorSource | None = None,
              pin: bool = False) -> HostStore:
        """Pack every layer of `sequences` into a new store and leave the layers on ``meta``.

        Tensors already on ``meta`` are read from `source` (named as the sequences' prefixes
        say); the others are copied from the layer and then dropped, one layer at a time, and
        the arena is pinned only once filled (`pin`), so the weights are never held twice, not
        even while pinning touches every page. Layers must not be attached to a runtime.
        """
        tensors = {(seq.name, i): collect_tensors(layer) for seq in sequences
                   for i, layer in enumerate(seq.layers)}
        layouts = {key: pack((t.name, t.spec) for t in found)
                   for key, found in tensors.items() if found}
        store = cls(layouts, {seq.name: seq.prefix for seq in sequences})
        by_name = {seq.name: seq for seq in sequences}
        with torch.no_grad():       # else each copy's graph would keep the layer's copy alive
            store._fill(tensors, by_name, source)
        if pin:
            store._arena.pin()
        return store

    def _fill(self, tensors: dict[tuple[str, int], tuple[LayerTensor, ...]],
              by_name: dict[str, LayerSequence], source: TensorSource | None) -> None:
        for seq, index in list(tensors):
            for t in tensors.pop((seq, index)):      # popped: its host copies go as it is done
                qualified = by_name[seq].qualified_name(index, t.name)
                out = self._tensors[qualified]
                if t.on_meta:
                    if source is None:
                        raise LayerError(f'tensor {qualified!r} is on the meta device and no '
                                         'source was given to fill the store from')
                    check_spec(source, qualified, t.spec)
                    source.read_into(qualified, out)
                else:
                    out.copy_(t.original)
                meta = torch.empty(t.spec.shape, dtype=t.spec.dtype, device='meta')
                new = torch.nn.Parameter(meta, requires_grad=False) if t.is_param else meta
                for module, attr in t.owners:
                    (module._parameters if t.is_param else module._buffers)[attr] = new

    def unpin(self) -> None:
        """Make the store's memory pageable again (same pages, no copy)."""
        self._arena.unpin()

    def restore_layers(self, sequences: Sequence[LayerSequence]) -> None:
        """Point every tensor of `sequences`' layers at its view in the store: host tensors.

        The inverse of `adopt`'s hand-off to ``meta``, without a copy: for a caller that runs
        the module tree without a runtime (another offloader, a forward on the host). The
        layers then share the store's memory. A layer attached to a runtime (its tensors on the
        device) is refused with `LayerError`; one already restored stays as it is.
        """
        found = [(t, seq.qualified_name(index, t.name)) for seq in sequences
                 for index, layer in enumerate(seq.layers) for t in collect_tensors(layer)]
        for t, name in found:              # every layer checked before any is changed
            check_spec(self, name, t.spec)
            if not t.on_meta and t.original.data_ptr() != self._get(name).data_ptr():
                raise LayerError(f'{name!r} holds a tensor of its own on {t.origin} (attached '
                                 'to a runtime?): detach first')
        for t, name in found:
            value = self._get(name)
            new = torch.nn.Parameter(value, requires_grad=False) if t.is_param else value
            for module, attr in t.owners:
                (module._parameters if t.is_param else module._buffers)[attr] = new

    def region(self, sequence: str, index: int, layout: LayerLayout) -> HostRegion:
        """Return layer `index` of `sequence`'s region, refusing a layer packed otherwise."""
        stored = self._layouts.get((sequence, index))
        if stored != layout:
            raise LayerError(f'layer {sequence}[{index}] is not in the host store in this layout '
                             f'(stored: {stored is not None}); build the store from the same '
                             'layer sequences the runtime attaches')
        return self._regions[(sequence, index)]

    def layer_bytes(self, sequence: str, index: int) -> torch.Tensor:
        """Layer `index` of `sequence` as stored: its packed bytes (uint8, host, a view)."""
        layout = self._layouts[(sequence, index)]
        return self._regions[(sequence, index)].tensor[:layout.nbytes]

    @property
    def pinned(self) -> bool:
        """Whether the store's memory is page-locked."""
        return self._arena.pinned

    @property
    def nbytes(self) -> int:
        """Host bytes the store holds (each layer rounded up to a page)."""
        return self._arena.span

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Copy tensor `name` into `out` (a resident layer's device storage).

        From pinned memory to a GPU without blocking the host.
        """
        out.copy_(self._get(name), non_blocking=out.device.type == 'cuda' and self.pinned)
