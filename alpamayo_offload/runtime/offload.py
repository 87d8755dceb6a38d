"""``OffloadRuntime``: attaches to layer sequences from outside and streams non-resident layers.

A forward pre-hook on each streamed layer makes compute wait until the layer sits in a slot
(copying it now if the prefetch guessed wrong), rebinds it if its slot changed and, when
pipelined, starts copying the next streamed layer of the global order into the other slot. The
forward post-hook records that the slot's compute is queued. Preload mode is the null strategy:
every layer moves to the device and no hook is installed (unless timing is on).

With a codec (``compression``), attach compresses each streamed layer's flat region once and
pins only the compressed bytes; layers the plan keeps compressed stay on the device in that form.
Both decompress into their slot before each pass (streamer.py orders the three streams).
With a :class:`CompressionCache`, a layer's compressed form is read from disk when a valid one
is there and written after compressing it when not, so a second start skips compression.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .accounting import VramPlan, device_bytes, layer_footprint
from .binding import LayerTensor, ResidentLayer, StreamedLayer, collect_tensors
from .codec import Codec, Compressed, Compression, select_codec
from .codec_cache import CompressionCache, CompressionStats
from .config import LayerSequence, Mode, ResidencyPlan
from .errors import LayerError, PlanError, StateError
from .host import HostArena
from .schedule import RepetitionCounter, StreamOrder, next_streamed
from .source import TensorSource
from .store import HostStore
from .streamer import SlotStreamer, slot_allocation_bytes, synchronize
from .timing import CallLog, CallMarks, Clock, RuntimeStats, totals

logger = logging.getLogger(__name__)

_SLOTS_PER_MODE = {Mode.PRELOAD: 0, Mode.SEQUENTIAL: 1, Mode.PIPELINED: 2}


@dataclass(frozen=True)
class _LayerInfo:
    sequence: str
    index: int
    module: nn.Module
    resident: bool
    qualified: tuple[str, ...]
    on_device: bool = False     # kept compressed on the device (with a codec)


def _default_device() -> torch.device:
    return torch.device('cuda') if torch.cuda.is_available() else torch.device('cpu')


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are the same (``cuda`` without an index means the current one)."""
    if a.type != b.type:
        return False
    if a.type != 'cuda' or a.index == b.index:
        return True
    ia = a.index if a.index is not None else torch.cuda.current_device()
    ib = b.index if b.index is not None else torch.cuda.current_device()
    return ia == ib


def check_origin(where: str, name: str, origin: torch.device, target: torch.device) -> None:
    """Raise :class:`LayerError` unless a tensor on ``origin`` may be attached for ``target``."""
    if origin.type in ('cpu', 'meta') or same_device(origin, target):
        return
    raise LayerError(
        f'tensor {name!r} of layer {where} is on {origin}; the runtime targets {target} and '
        f'accepts layers on cpu, meta or {target}: move the layer first'
    )


class OffloadRuntime:
    """Runs layer sequences with some layers resident and the rest streamed from pinned host RAM.

    Construction validates the plan and does the VRAM accounting (nothing is moved);
    :meth:`attach` moves/loads weights and installs hooks; :meth:`detach` undoes it exactly.
    """

    def __init__(self, sequences: Sequence[LayerSequence], plan: ResidencyPlan | None = None,
                 mode: Mode | str = Mode.PIPELINED, device: torch.device | str | None = None,
                 budget_bytes: int | None = None, fixed_bytes: int = 0,
                 working_set_bytes: int = 0, instrument: bool = False,
                 compression: Compression | str = Compression.OFF,
                 compression_cache: CompressionCache | None = None) -> None:
        self.mode = Mode(mode)
        self.compression = Compression(compression)
        self.compression_cache = compression_cache
        self.compression_stats = CompressionStats()
        self.device = torch.device(device) if device is not None else _default_device()
        self.sequences = tuple(sequences)
        plan = plan if plan is not None else ResidencyPlan()
        if self.mode is Mode.PRELOAD:
            plan = ResidencyPlan.all_of(self.sequences)
        self.plan = plan
        self._infos = self._validate(plan)
        sizes = [layer_footprint(i.module) for i in self._infos]
        streamed = [f for i, f in zip(self._infos, sizes, strict=True) if not i.resident]
        self._slot_bytes = max((f.packed_bytes for f in streamed), default=0)
        self.streamed_param_bytes = sum(f.param_bytes for f in streamed)
        self.vram_plan = VramPlan(
            resident_bytes=sum(f.resident_bytes for i, f in zip(self._infos, sizes, strict=True)
                               if i.resident),
            resident_layers=sum(1 for i in self._infos if i.resident),
            slot_bytes=max((f.slot_bytes for f in streamed), default=0),
            n_slots=_SLOTS_PER_MODE[self.mode] if streamed else 0,
            fixed_bytes=fixed_bytes,
            working_set_bytes=working_set_bytes,
            budget_bytes=budget_bytes,
        )
        self.vram_plan.check()
        self.instrument = instrument
        self._attached = False
        self._handles: list[RemovableHandle] = []
        self._resident: list[ResidentLayer] = []
        self._streamed: list[StreamedLayer] = []
        self._streamer: SlotStreamer | None = None
        self._arena: HostArena | None = None
        self._codec: Codec | None = None
        self._clock = Clock(self.device.type == 'cuda')
        self._log: CallLog | None = None
        self._reps = RepetitionCounter()
        self._current: CallMarks | None = None
        self._hint: str | None = None
        self._first: dict[str, StreamedLayer] = {}
        self._next: dict[tuple[int, str | None], StreamedLayer | None] = {}
        self._ends: dict[int, bool] = {}
        logger.info('offload plan (%s): %s', self.mode.value, self.vram_plan.describe())

    # ---------------------------------------------------------------- validation
    def _validate(self, plan: ResidencyPlan) -> tuple[_LayerInfo, ...]:
        names = [s.name for s in self.sequences]
        if len(set(names)) != len(names):
            raise PlanError(f'sequence names must be unique, got {names}')
        for kind, table in (('resident', plan.resident), ('compressed', plan.compressed)):
            for name, indices in table.items():
                if name not in names:
                    raise PlanError(f'residency plan names sequence {name!r}; known: {names}')
                length = len(next(s for s in self.sequences if s.name == name).layers)
                bad = [i for i in indices if i >= length]
                if bad:
                    raise PlanError(
                        f'{kind} indices {bad} of sequence {name!r} are out of range: it has '
                        f'{length} layers (valid 0..{length - 1})'
                    )
        infos = []
        owner_of: dict[Any, tuple[str, str]] = {}
        for seq in self.sequences:
            resident = set(plan.indices(seq.name))
            kept = set(plan.compressed_indices(seq.name))
            for index, module in enumerate(seq.layers):
                where = f'{seq.name}[{index}]'
                tensors = collect_tensors(module)
                for key, label in self._identity_keys(module, tensors):
                    other, other_label = owner_of.setdefault(key, (where, label))
                    if other != where:
                        raise LayerError(
                            f'layer {where} shares {label} with layer {other} ({other_label}): '
                            "tied weights or the same module twice; the runtime moves each "
                            "layer's tensors on its own, so untie them (clone) or pass the "
                            'layer once'
                        )
                for t in tensors:
                    self._check_device(where, t)
                # A layer without tensors has nothing to stream: it counts as resident.
                infos.append(_LayerInfo(seq.name, index, module, index in resident or not tensors,
                                        tuple(seq.qualified_name(index, t.name) for t in tensors),
                                        index in kept and bool(tensors)))
        return tuple(infos)

    @staticmethod
    def _identity_keys(module: nn.Module,
                       tensors: tuple[LayerTensor, ...]) -> list[tuple[Any, str]]:
        """Keys that two layers must never share: the module, its tensors and their storage."""
        keys: list[tuple[Any, str]] = [(('module', id(module)), 'the module itself')]
        for t in tensors:
            keys.append((('tensor', id(t.original)), f'tensor {t.name!r}'))
            if not t.on_meta and t.original.numel() > 0:
                storage = (str(t.origin), t.original.untyped_storage().data_ptr())
                keys.append((('storage', storage), f'the storage of tensor {t.name!r}'))
        return keys

    def _check_device(self, where: str, t: LayerTensor) -> None:
        check_origin(where, t.name, t.origin, self.device)
        if not t.on_meta and not t.original.is_contiguous():
            raise LayerError(
                f'tensor {t.name!r} of layer {where} is not contiguous; call .contiguous() on it '
                'before attaching (slot views and device copies are contiguous)'
            )

    # ---------------------------------------------------------------- lifecycle
    def attach(self, source: TensorSource | None = None) -> None:
        """Move resident layers to the device and pack streamed ones into pinned host regions.

        Layers with tensors on ``meta`` are filled from ``source`` straight into place. With a
        :class:`HostStore` as the source, streamed layers stream from the store's regions
        instead (nothing packed, nothing pinned here).
        """
        if self._attached:
            raise StateError('attach() called twice; call detach() first')
        try:
            self._attach(source)
        except BaseException:
            self._attached = True
            self.detach()
            raise
        self._attached = True
        if self.instrument:
            self.reset_stats()
        logger.info('attached: %d resident, %d streamed layers, %d pinned bytes',
                    len(self._resident), len(self._streamed), self.pinned_bytes)

    def _attach(self, source: TensorSource | None) -> None:
        with torch.no_grad():
            streamed_infos = [i for i in self._infos if not i.resident]
            if streamed_infos:
                self._streamer = SlotStreamer(
                    self.device, self._slot_bytes, self.vram_plan.n_slots,
                    self._clock if self.instrument else None)
                self._codec = select_codec(self.compression, self.device,
                                           self._streamer.decode_stream)
            pending = {id(info): StreamedLayer(n, collect_tensors(info.module), info.qualified)
                       for n, info in enumerate(streamed_infos)}
            store = source if isinstance(source, HostStore) else None
            packed, raw = self._compress(streamed_infos, pending, source, store)
            sizes = [self._host_bytes(i, pending[id(i)], packed, raw, store)
                     for i in streamed_infos]
            if any(sizes):
                self._arena = HostArena([n for n in sizes if n], pin=self.device.type == 'cuda')
            regions = iter(self._arena.regions if self._arena is not None else ())
            for info in self._infos:
                if info.resident:
                    layer = ResidentLayer(collect_tensors(info.module), info.qualified)
                    self._resident.append(layer)  # before attach: detach undoes a partial one
                    layer.attach(self.device, source)
                    if self.instrument:
                        self._hook_resident(info)
                    continue
                assert self._streamer is not None
                st = pending[id(info)]
                found = packed.pop(id(info), None)
                if found is not None:
                    assert self._codec is not None
                    region = None if info.on_device else next(regions)
                    st.attach_compressed(self._streamer.slots, found, region, self._codec)
                elif id(info) in raw:
                    region = next(regions)
                    region.tensor.narrow(0, 0, st.nbytes).copy_(raw.pop(id(info)))
                    st.attach(self._streamer.slots, region, None, filled=True)
                elif store is None:
                    st.attach(self._streamer.slots, next(regions), source)
                else:
                    st.attach(self._streamer.slots,
                              store.region(info.sequence, info.index, st.layout), None,
                              filled=True)
                self._streamed.append(st)
                self._hook_streamed(info, st)
            self._check_compressed_budget()
        self._link(streamed_infos)

    @staticmethod
    def _host_bytes(info: _LayerInfo, st: StreamedLayer, packed: dict[int, Compressed],
                    raw: dict[int, torch.Tensor], store: HostStore | None) -> int:
        """Host region bytes a streamed layer needs in the runtime's own arena (0: none)."""
        found = packed.get(id(info))
        if found is not None:
            return 0 if info.on_device else found.index.nbytes
        return st.nbytes if (store is None or id(info) in raw) else 0

    def _compress(self, infos: list[_LayerInfo], pending: dict[int, StreamedLayer],
                  source: TensorSource | None, store: HostStore | None
                  ) -> tuple[dict[int, Compressed], dict[int, torch.Tensor]]:
        """Compress each streamed layer's flat region once; keep those that shrink.

        A layer read from a host store is compressed from the store's region; any other is
        packed into a scratch buffer first. A layer the compression cache holds is read from
        it instead (nothing packed, nothing compressed); one compressed here is written to it.
        Returns the compressed layers and, for the rest packed here, their raw bytes (they
        stream raw); all on the host until attach places them.
        """
        codec, cache = self._codec, self.compression_cache
        stats = self.compression_stats = CompressionStats()
        packed: dict[int, Compressed] = {}
        raw: dict[int, torch.Tensor] = {}
        if codec is None:
            return packed, raw
        for info in infos:
            st = pending[id(info)]
            name = f'{info.sequence}.{info.index}'
            stats.layers += 1
            found = None if cache is None else cache.load(codec, name, st.layout, stats)
            if found is not None:
                packed[id(info)] = found
                continue
            if store is not None:
                flat = store.region(info.sequence, info.index, st.layout).tensor
            else:
                flat = torch.empty(st.nbytes, dtype=torch.uint8)
                st.pack_into(flat, source)
            start = time.perf_counter()
            found = codec.compress(flat.narrow(0, 0, st.nbytes))
            stats.compress_s += time.perf_counter() - start
            stats.compressed += 1
            if found.index.nbytes < st.nbytes:
                packed[id(info)] = found
                if cache is not None:
                    cache.save(codec, name, st.layout, found, stats)
            elif store is None:
                raw[id(info)] = flat
        if cache is not None:
            logger.info('compressed %d of %d layers in %.2f s; %d read from %s in %.2f s '
                        '(%d refused), %d written', stats.compressed, stats.layers,
                        stats.compress_s, stats.cache_hits, cache.directory(codec),
                        stats.cache_read_s, stats.cache_refused, stats.cache_written)
        return packed, raw

    def _check_compressed_budget(self) -> None:
        """Re-check the budget with the compressed layers' real sizes (known only now)."""
        staging = max((st.transfer.src.numel() for st in self._streamed
                       if st.compressed and not st.transfer.on_device), default=0)
        kept = sum(device_bytes(st.device_bytes) for st in self._streamed if st.device_bytes)
        if not (staging or kept):
            return
        assert self._streamer is not None and self._codec is not None
        self._streamer.add_staging(staging, self._codec)
        self.vram_plan = dataclasses.replace(
            self.vram_plan, compressed_bytes=kept,
            staging_bytes=device_bytes(slot_allocation_bytes(staging)) if staging else 0)
        self.vram_plan.check()

    def _link(self, streamed_infos: list[_LayerInfo]) -> None:
        """Tabulate :func:`next_streamed` for every streamed layer and every possible hint."""
        by_key = {(i.sequence, i.index): st
                  for i, st in zip(streamed_infos, self._streamed, strict=True)}
        order = StreamOrder({s.name: tuple(i.index for i in streamed_infos
                                           if i.sequence == s.name) for s in self.sequences})
        self._first = {name: by_key[(name, idx[0])] for name, idx in order.streamed.items()
                       if idx}
        hints: list[str | None] = [None, *(s.name for s in self.sequences)]
        self._next = {}
        for key, st in by_key.items():
            for hint in hints:
                nxt = next_streamed(order, key, hint)
                self._next[(st.layer_id, hint)] = None if nxt is None else by_key[nxt]
        # Whether a layer ends its sequence's repetition (the only place a hint is consumed).
        self._ends = {st.layer_id: order.next_within(*key) is None for key, st in by_key.items()}

    def detach(self) -> None:
        """Remove hooks and give every layer its weights back as before attach."""
        if not self._attached:
            raise StateError('detach() called without attach()')
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._streamer is not None:
            self._streamer.close()
            self._streamer = None
        with torch.no_grad():
            for st in self._streamed:
                st.detach()
            for layer in self._resident:
                layer.detach()
        if self._arena is not None:
            self._arena.release()
            self._arena = None
        self._codec = None
        self._streamed, self._resident = [], []
        self._first, self._next, self._ends = {}, {}, {}
        self._hint, self._current, self._log = None, None, None
        self._attached = False

    # ---------------------------------------------------------------- scheduling
    def hint_next(self, sequence: str) -> None:
        """After the current repetition of the running sequence, ``sequence`` runs next."""
        if sequence not in {s.name for s in self.sequences}:
            raise PlanError(f'hint_next({sequence!r}): no such sequence; known: '
                            f'{[s.name for s in self.sequences]}')
        self._hint = sequence

    def prime(self, sequence: str) -> None:
        """Start copying the first streamed layer of ``sequence`` now (e.g. before a new frame)."""
        st = self._first.get(sequence)
        if st is not None and self._streamer is not None and self.mode is Mode.PIPELINED:
            self._streamer.prefetch(st.layer_id, st.transfer)

    def _upcoming(self, st: StreamedLayer) -> StreamedLayer | None:
        hint = self._hint
        if self._ends[st.layer_id]:
            self._hint = None
        return self._next[(st.layer_id, hint)]

    # ---------------------------------------------------------------- hooks
    def _hook_streamed(self, info: _LayerInfo, st: StreamedLayer) -> None:
        streamer = self._streamer
        assert streamer is not None
        prefetch = self.mode is Mode.PIPELINED
        sequence, index = info.sequence, info.index

        def pre(module: nn.Module, args: Any) -> None:
            slot = streamer.acquire(st.layer_id, st.transfer)
            if st.bound_slot != slot:
                st.bind(slot)
            if self._log is not None:
                self._begin_streamed(sequence, index, st.transfer.copy_bytes, streamer)
            if prefetch:
                nxt = self._upcoming(st)
                if nxt is not None:
                    streamer.prefetch(nxt.layer_id, nxt.transfer)

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if self._log is not None:
                self._end_call()
            streamer.release()

        self._handles.append(info.module.register_forward_pre_hook(pre))
        self._handles.append(info.module.register_forward_hook(post, always_call=True))

    def _hook_resident(self, info: _LayerInfo) -> None:
        sequence, index = info.sequence, info.index

        def pre(module: nn.Module, args: Any) -> None:
            if self._log is not None:
                rep = self._reps.observe(sequence, index)
                self._current = CallMarks(sequence, index, rep, False,
                                          start=self._clock.mark(self._stream()))

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if self._log is not None:
                self._end_call()

        self._handles.append(info.module.register_forward_pre_hook(pre))
        self._handles.append(info.module.register_forward_hook(post, always_call=True))

    # ---------------------------------------------------------------- instrumentation
    def _stream(self) -> Any:
        return torch.cuda.current_stream(self.device) if self.device.type == 'cuda' else None

    def _begin_streamed(self, sequence: str, index: int, nbytes: int,
                        streamer: SlotStreamer) -> None:
        rep = self._reps.observe(sequence, index)
        dma, wait = streamer.last_dma, streamer.last_wait
        self._current = CallMarks(sequence, index, rep, True, nbytes if dma else 0, dma, wait,
                                  start=wait[1] if wait else self._clock.mark(self._stream()))

    def _end_call(self) -> None:
        current, log = self._current, self._log
        if current is None or log is None:
            return
        current.end = self._clock.mark(self._stream())
        log.calls.append(current)
        self._current = None

    def reset_stats(self) -> None:
        """Start a new recording (timing must have been enabled with ``instrument=True``)."""
        if not self.instrument:
            raise StateError('reset_stats() needs OffloadRuntime(..., instrument=True)')
        self._log = CallLog(self._clock)
        self._reps.reset()
        if self._streamer is not None:
            self._streamer.copies = self._streamer.wasted_copies = self._streamer.wasted_bytes = 0

    def stats(self) -> RuntimeStats:
        """Per-call and per-sequence timing since attach or the last :meth:`reset_stats`.

        Blocks until the device finished the recorded work (never call it on the hot path).
        """
        if not self.instrument or self._log is None:
            raise StateError('stats() needs instrument=True and an attached runtime')
        synchronize(self.device)
        calls = self._log.resolve()
        streamer = self._streamer
        return RuntimeStats(
            calls=tuple(calls), totals=totals(calls),
            copies=streamer.copies if streamer else 0,
            wasted_copies=streamer.wasted_copies if streamer else 0,
            wasted_bytes=streamer.wasted_bytes if streamer else 0,
            pinned_bytes=self.pinned_bytes, host_bytes=self.host_bytes,
            streamed_param_bytes=self.streamed_param_bytes,
        )

    # ---------------------------------------------------------------- accounting
    @property
    def pinned_bytes(self) -> int:
        """Host bytes page-locked for streamed layers (0 without CUDA)."""
        return sum(st.region.pinned_bytes for st in self._streamed if st.region is not None)

    def pass_bytes(self) -> dict[str, tuple[int, int]]:
        """Per sequence, the bytes one pass delivers into slots and copies over the host link.

        Delivered: the streamed layers' flat regions, uncompressed; copied: what crosses the
        link (compressed where compressed, nothing for layers kept compressed in VRAM).
        """
        if not self._attached:
            raise StateError('pass_bytes() needs an attached runtime')
        out = {s.name: (0, 0) for s in self.sequences}
        infos = [i for i in self._infos if not i.resident]
        for info, st in zip(infos, self._streamed, strict=True):
            raw, moved = out[info.sequence]
            out[info.sequence] = (raw + st.nbytes, moved + st.transfer.copy_bytes)
        return out

    @property
    def host_bytes(self) -> int:
        """Host bytes held by the streamed layers' regions (pinned or not)."""
        return sum(st.region.allocated_bytes for st in self._streamed if st.region is not None)

    @property
    def attached(self) -> bool:
        """Whether the runtime currently owns the layers' weights."""
        return self._attached
