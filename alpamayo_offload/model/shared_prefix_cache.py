"""A KV cache holding one copy of each shared prompt prefix and the rows' own suffixes.

Several samples of one prompt attend to the same prompt K/V: transformers' `DynamicCache` copies
it per row (`batch_repeat_interleave`), ~0.46 GB per sample for Alpamayo 1.5's ~3,100-token
prompt, and navigation guidance adds the unguided prompt's per row. Here each layer keeps groups
of rows: a group's prefix (one row shared by all its rows, or one per row) and its rows' suffix
(whatever was appended since: decoded tokens, the unguided refeed, the expert's action tokens,
the zero padding of stacked contexts). Repeating rows repeats only the suffix.

`update` returns the layer's full (rows, kv heads, length, head_dim) K/V built for that call
alone, contiguous, with the values `DynamicCache`'s concatenation holds, so the attention gets
the same tensors and its output is bit-identical; only one layer's full K/V exists at a time.
An attention run in chunks of rows (model/row_chunks.py) instead `append`s and then reads
`rows_kv` per chunk: the same values, row for row, and the full K/V never exists.
A layer of one group and no sharing (one sample) grows as `DynamicCache` does, op for op:
host-bound decode passes issue no more kernels than before.
Everything stored is a copy: an update's K/V may be a CUDA graph's static output
(model/layer_graphs.py), overwritten by the next replay.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .wide_copy import copy_into

KV = tuple[torch.Tensor, torch.Tensor]


def _copy(kv: KV) -> KV:
    """Contiguous copies of a key/value pair (never views of the caller's tensors)."""
    return (kv[0].clone(memory_format=torch.contiguous_format),
            kv[1].clone(memory_format=torch.contiguous_format))


@dataclass
class RowGroup:
    """Rows sharing one prefix: prefix K/V (1 or `rows`, H, P, D), suffix (rows, H, S, D)."""

    prefix: KV
    rows: int
    suffix: KV | None = None

    @property
    def length(self) -> int:
        """Tokens per row: the prefix's plus the suffix's."""
        return self.prefix[0].shape[-2] + (0 if self.suffix is None else self.suffix[0].shape[-2])

    def append(self, kv: KV) -> KV:
        """Append tokens (rows, H, q, D) to every row's suffix (a copy); return the suffix."""
        if self.suffix is None:
            self.suffix = _copy(kv)
        else:
            self.suffix = (torch.cat([self.suffix[0], kv[0]], dim=-2),
                           torch.cat([self.suffix[1], kv[1]], dim=-2))
        return self.suffix

    def extend(self, kv: KV) -> KV:
        """Append tokens (rows, H, q, D) and return every row's full K/V, in the fewest ops.

        Nothing shared (one prefix row per row, e.g. one sample): the prefix grows by
        concatenation, as `DynamicCache` does, and is returned. Shared: the suffix grows, and
        the shared prefix, expanded over the rows, is concatenated with it.
        """
        if self.suffix is None and self.prefix[0].shape[0] == self.rows:
            self.prefix = (torch.cat([self.prefix[0], kv[0]], dim=-2),
                           torch.cat([self.prefix[1], kv[1]], dim=-2))
            return self.prefix
        suffix = self.append(kv)
        return self._joined(0, suffix[0]), self._joined(1, suffix[1])

    def _joined(self, which: int, suffix: torch.Tensor) -> torch.Tensor:
        """Return the shared prefix over every row, then `suffix`, as one contiguous tensor."""
        prefix = self.prefix[which]
        p = prefix.shape[-2]
        out = suffix.new_empty(self.rows, suffix.shape[1], p + suffix.shape[-2], suffix.shape[3],
                               dtype=torch.promote_types(prefix.dtype, suffix.dtype))
        copy_into(out[:, :, :p], prefix)            # the shared prefix broadcasts
        copy_into(out[:, :, p:], suffix)
        return out

    def drop_last(self, n: int) -> None:
        """Remove the last `n` tokens of every row (suffix first, then prefix)."""
        if not 0 <= n <= self.length:
            raise ValueError(f'drop_last({n}) of a {self.length}-token layer')
        kept = self.length - n
        p = self.prefix[0].shape[-2]
        if kept < p:
            self.prefix = (self.prefix[0][..., :kept, :], self.prefix[1][..., :kept, :])
            self.suffix = None
        elif self.suffix is not None:
            s = kept - p
            self.suffix = (self.suffix[0][..., :s, :], self.suffix[1][..., :s, :])

    def repeat_rows(self, repeats: int) -> None:
        """Repeat each row `repeats` times in place (interleaved); a shared prefix stays one."""
        if self.prefix[0].shape[0] > 1:
            self.prefix = (self.prefix[0].repeat_interleave(repeats, dim=0),
                           self.prefix[1].repeat_interleave(repeats, dim=0))
        if self.suffix is not None:
            self.suffix = (self.suffix[0].repeat_interleave(repeats, dim=0),
                           self.suffix[1].repeat_interleave(repeats, dim=0))
        self.rows *= repeats

    def pad_to(self, length: int) -> None:
        """Append zero K/V until every row holds `length` tokens (hidden by the mask)."""
        missing = length - self.length
        if missing > 0:
            key = self.prefix[0]
            zeros = key.new_zeros(self.rows, key.shape[1], missing, key.shape[3])
            self.append((zeros, zeros))


class SharedPrefixLayer(CacheLayerMixin):
    """One decoder layer's K/V as row groups (module docstring)."""

    is_sliding = False
    is_croppable = True

    def __init__(self) -> None:
        # no CacheLayerMixin.__init__: `keys` and `values` are read-only views of the groups
        self.groups: list[RowGroup] = []
        self.is_initialized = False

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Record the dtype and device of the first update."""
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    @property
    def rows(self) -> int:
        """Rows (batch entries) the layer holds."""
        return sum(g.rows for g in self.groups)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
               *args: object, **kwargs: object) -> KV:
        """Append (rows, H, q, D) K/V; return the full K/V of every row (built for this call).

        The first update becomes the prefix of one group of all its rows.
        """
        if not self.groups:
            self.append(key_states, value_states)
            return self.groups[0].prefix
        if len(self.groups) == 1:
            self._check_rows(key_states)
            return self.groups[0].extend((key_states, value_states))
        self.append(key_states, value_states)
        return self.rows_kv(0, self.rows)

    def append(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Store (rows, H, q, D) K/V after every row's tokens, building no row's full K/V.

        The first call becomes the prefix of one group of all its rows.
        """
        if not self.groups:
            self.lazy_initialization(key_states, value_states)
            self.groups = [RowGroup(_copy((key_states, value_states)), key_states.shape[0])]
            return
        self._check_rows(key_states)
        start = 0
        for group in self.groups:
            stop = start + group.rows
            group.append((key_states[start:stop], value_states[start:stop]))
            start = stop

    def _check_rows(self, key_states: torch.Tensor) -> None:
        if key_states.shape[0] != self.rows:
            raise ValueError(f'cache update of {key_states.shape[0]} rows for a cache of '
                             f'{self.rows}')

    def rows_kv(self, start: int, stop: int, heads_repeat: int = 1) -> KV:
        """Build rows `start`..`stop`'s full K/V, each contiguous (stop - start, H, length, D).

        `heads_repeat` r > 1 builds them at r times the heads instead, each head repeated r
        times in place (n, H * r, length, D): the values and layout of repeating the heads of
        the K/V built with r = 1 (`wide_copy.repeat_heads`), without building those first.
        """
        return (self._fill(self._buffer(0, stop - start, heads_repeat), 0, start, stop),
                self._fill(self._buffer(1, stop - start, heads_repeat), 1, start, stop))

    def chunks_kv(self, step: int, heads_repeat: int = 1) -> Iterator[tuple[int, int, KV]]:
        """Yield every chunk of `step` rows in order: (start, stop, K/V as `rows_kv` builds it).

        The chunks are written into one buffer per K and V, sized for `step` rows (a shorter
        last chunk takes its leading rows). A row slot whose previous chunk left the same shared
        prefix there keeps it, and only the rows' own tokens are written again: a shared prefix
        is copied into at most `step` rows of a call, not into every row. The caller is done
        with a chunk before it takes the next (the next one's writes are ordered after its
        reads, as on one CUDA stream).
        """
        step = max(1, min(step, self.rows))
        buffers = [self._buffer(which, step, heads_repeat) for which in (0, 1)]
        held: list[list[torch.Tensor | None]] = [[None] * step, [None] * step]
        for start in range(0, self.rows, step):
            stop = min(start + step, self.rows)
            yield start, stop, (self._fill(buffers[0][:stop - start], 0, start, stop, held[0]),
                                self._fill(buffers[1][:stop - start], 1, start, stop, held[1]))

    def _buffer(self, which: int, rows: int, heads_repeat: int) -> torch.Tensor:
        """Return an empty (rows, H, r, length, D) tensor for keys (0) or values (1) of `rows`."""
        parts = [t[which] for g in self.groups for t in (g.prefix, g.suffix) if t is not None]
        dtype = functools.reduce(torch.promote_types, (t.dtype for t in parts))
        ref = parts[0]
        return torch.empty(rows, ref.shape[1], heads_repeat, self.get_seq_length(), ref.shape[3],
                           dtype=dtype, device=ref.device)

    def _fill(self, out: torch.Tensor, which: int, start: int, stop: int,
              held: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """Write rows `start`..`stop`'s prefix then suffix into `out` -> (n, H * r, length, D).

        `held`, per row slot of `out`, names the shared prefix the slot already holds (kept up
        to date here); a group's rows whose slots all hold its prefix skip writing it.
        """
        first = 0
        for group in self.groups:
            lo, hi = max(start, first), min(stop, first + group.rows)
            if lo < hi:
                block = out[lo - start:hi - start]
                prefix = group.prefix[which]
                shared = prefix.shape[0] == 1
                if not shared:                              # one prefix row per row
                    prefix = prefix[lo - first:hi - first]
                p = prefix.shape[-2]
                slots = range(lo - start, hi - start)
                if held is None or not shared or any(held[j] is not prefix for j in slots):
                    # a shared prefix broadcasts over the rows, each K/V head over its r copies
                    copy_into(block[..., :p, :], prefix[:, :, None])
                    if held is not None:
                        for j in slots:
                            held[j] = prefix if shared else None
                if group.suffix is not None:
                    suffix = group.suffix[which][lo - first:hi - first]
                    copy_into(block[..., p:, :], suffix[:, :, None])
            first += group.rows
        rows, heads, r, length, dim = out.shape
        return out.view(rows, heads * r, length, dim)

    @property
    def keys(self) -> torch.Tensor | None:
        """Every row's keys (rows, H, length, D), built on each read (tests, inspection)."""
        return self._fill(self._buffer(0, self.rows, 1), 0, 0, self.rows) if self.groups else None

    @property
    def values(self) -> torch.Tensor | None:
        """Every row's values (rows, H, length, D), built on each read."""
        return self._fill(self._buffer(1, self.rows, 1), 1, 0, self.rows) if self.groups else None

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """Return the key length and offset of a query of `query_length` tokens."""
        return self.get_seq_length() + query_length, 0

    def get_seq_length(self) -> int:
        """Tokens per row (every group holds as many)."""
        return self.groups[0].length if self.groups else 0

    def get_max_length(self) -> int:
        """No maximum: -1."""
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last `-tokens_to_remove` tokens of every row.

        Only the negative form is taken: transformers' `crop(n)` with n > 0 has meant "keep n"
        in some releases and "remove n" in others, so a positive count is refused.
        """
        if tokens_to_remove > 0:
            raise ValueError(f'crop({tokens_to_remove}): give the tokens to remove as a '
                             'negative count')
        for group in self.groups:
            group.drop_last(-tokens_to_remove)

    def reset(self) -> None:
        """Drop every row's tokens; the next update starts a new prefix."""
        self.groups = []
        self.is_initialized = False

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Refused: reordering rows (beam search) would split a shared prefix."""
        raise NotImplementedError('SharedPrefixCache does not reorder rows (beam search)')

    def offload(self) -> None:
        """Refused: the K/V stays on its device (the runtime streams weights, not K/V)."""
        raise NotImplementedError('SharedPrefixCache does not offload its K/V')

    def prefetch(self) -> None:
        """Refused, as `offload`."""
        raise NotImplementedError('SharedPrefixCache does not offload its K/V')

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row `repeats` times, interleaved; shared prefixes are not copied."""
        for group in self.groups:
            group.repeat_rows(repeats)

    def take_groups(self, length: int) -> list[RowGroup]:
        """Hand over the groups zero-padded to `length` tokens; the layer is left empty."""
        groups, self.groups = self.groups, []
        for group in groups:
            group.pad_to(length)
        return groups


class SharedPrefixCache(Cache):
    """A transformers `Cache` of `SharedPrefixLayer`s, one per layer, created on first update."""

    def __init__(self) -> None:
        super().__init__(layer_class_to_replicate=SharedPrefixLayer)


def stack_caches(a: SharedPrefixCache, b: SharedPrefixCache) -> SharedPrefixCache:
    """Stack the rows of `a` then those of `b` into one cache; each source layer is emptied.

    The shorter one's rows get zero K/V at their end up to the longer length, so a mask that
    hides those columns leaves each row attending to exactly what it did alone. No prefix is
    copied.
    """
    width = max(a.get_seq_length(), b.get_seq_length())
    stacked = SharedPrefixCache()
    for la, lb in zip(a.layers, b.layers, strict=True):
        layer = SharedPrefixLayer()
        layer.lazy_initialization(la.groups[0].prefix[0], la.groups[0].prefix[1])
        layer.groups = la.take_groups(width) + lb.take_groups(width)
        stacked.layers.append(layer)
    return stacked
