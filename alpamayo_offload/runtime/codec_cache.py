"""An on-disk cache of compressed layer regions, so a second start skips compression.

The caller names what the weights are with a key (e.g. a checkpoint's hashes); the cache adds
the codec's parameters (name, format version, chunking) and keeps one directory per full key:
``<root>/<digest of the key>/<sequence>.<index>.bin``. Each file is plain binary: 8 magic bytes,
the header's length (8 bytes, little-endian), a UTF-8 JSON header, then the compressed bytes.
The header repeats the full key and holds the layer's name, a digest of its byte layout, the
:class:`CodecIndex`, the compressed size and a CRC-32 of the bytes.

A file is written to a temporary name in its directory and renamed into place, so a reader sees
a whole file or none. Read back, every field is checked against what the runtime expects; a
file that fails a check (truncated, corrupt, another key, another layout) is refused with one
log line naming it and why, and the layer is compressed again (and the file rewritten). A cache
that cannot be written (read-only, disk full) logs once and the runtime carries on without it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import tempfile
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .codec import Codec, CodecIndex, Compressed
from .layout import LayerLayout

logger = logging.getLogger(__name__)

MAGIC = b'AOCCACHE'
FORMAT = 'alpamayo-offload-compressed/1'
_PREFIX = len(MAGIC) + 8
_MAX_HEADER = 16 << 20


class CacheFileError(ValueError):
    """A cache file fails a check; the message says which (the file is not used)."""


@dataclass
class CompressionStats:
    """What compressing the layers cost at the last attach, and what the cache saved."""

    layers: int = 0           # layers whose compressed form was needed
    compressed: int = 0       # of those, compressed now (the rest came from the cache)
    cache_hits: int = 0
    cache_refused: int = 0    # cache files present but refused (and rewritten)
    cache_written: int = 0
    compress_s: float = 0.0   # seconds spent compressing
    cache_read_s: float = 0.0  # seconds spent reading and checking cache files


def layout_digest(layout: LayerLayout) -> str:
    """Return a digest of a layer's byte layout (names, shapes, dtypes, offsets, size)."""
    text = json.dumps([[e.name, list(e.spec.shape), str(e.spec.dtype), e.offset]
                       for e in layout.entries] + [layout.nbytes])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _buffer(t: torch.Tensor) -> memoryview:
    """Return a zero-copy view of a contiguous CPU uint8 tensor's bytes (keep ``t`` alive)."""
    if t.numel() == 0:
        return memoryview(b'')
    return memoryview((ctypes.c_ubyte * t.numel()).from_address(t.data_ptr())).cast('B')


def _check_index(index: CodecIndex, nbytes: int) -> None:
    """Raise :class:`CacheFileError` unless the chunks tile the raw region and the blob."""
    raw_end = 0
    for c in index.chunks:
        if c.raw_offset != raw_end or c.raw_nbytes <= 0:
            raise CacheFileError(f'index chunks do not tile the layer at byte {raw_end}')
        if c.offset < 0 or c.nbytes < 0 or c.offset + c.nbytes > nbytes:
            raise CacheFileError(f'index chunk at {c.raw_offset} lies outside the {nbytes} '
                                 'compressed bytes')
        raw_end += c.raw_nbytes
    if raw_end != index.raw_nbytes:
        raise CacheFileError(f'index chunks cover {raw_end} B of {index.raw_nbytes} B')
    if index.nbytes != nbytes:
        raise CacheFileError(f'index chunks hold {index.nbytes} B, the header says {nbytes} B')


class CompressionCache:
    """Compressed layer regions on disk under ``root``, for weights named by ``key``."""

    def __init__(self, root: Path | str, key: Mapping[str, str]) -> None:
        self.root = Path(root)
        self.key = {str(k): str(v) for k, v in key.items()}
        self._write_failed = False

    def full_key(self, codec: Codec) -> dict[str, str]:
        """Return the caller's key joined with the codec's parameters."""
        return {**self.key, **{f'codec.{k}': v for k, v in codec.params.items()}}

    def directory(self, codec: Codec) -> Path:
        """Return the directory holding this key's layers compressed by ``codec``."""
        text = json.dumps(self.full_key(codec), sort_keys=True)
        return self.root / hashlib.sha256(text.encode()).hexdigest()[:16]

    def path(self, codec: Codec, layer: str) -> Path:
        """Return the file of one layer (``layer``: e.g. ``'lm.3'``)."""
        return self.directory(codec) / f'{layer}.bin'

    # ---------------------------------------------------------------- read
    def load(self, codec: Codec, layer: str, layout: LayerLayout,
             stats: CompressionStats | None = None) -> Compressed | None:
        """Return the cached compressed region of ``layer``, or None (absent or refused)."""
        path = self.path(codec, layer)
        start = time.perf_counter()
        try:
            found = self._read(path, codec, layer, layout)
        except FileNotFoundError:
            return None
        except (OSError, CacheFileError) as err:
            logger.warning('compression cache file %s refused (%s): compressing %s again',
                           path, err, layer)
            if stats is not None:
                stats.cache_refused += 1
            return None
        finally:
            if stats is not None:
                stats.cache_read_s += time.perf_counter() - start
        if stats is not None:
            stats.cache_hits += 1
        return found

    def _read(self, path: Path, codec: Codec, layer: str, layout: LayerLayout) -> Compressed:
        with path.open('rb') as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(_PREFIX)
            if len(prefix) < _PREFIX:
                raise CacheFileError(f'truncated: {size} B, shorter than its prefix')
            if prefix[:len(MAGIC)] != MAGIC:
                raise CacheFileError('not a compression cache file (magic bytes differ)')
            header_len = int.from_bytes(prefix[len(MAGIC):], 'little')
            if header_len > min(_MAX_HEADER, size - _PREFIX):
                raise CacheFileError(f'truncated: header of {header_len} B in a {size} B file')
            header = self._header(f.read(header_len))
            self._check_header(header, codec, layer, layout)
            nbytes = int(header['nbytes'])
            index = CodecIndex.from_dict(header['index'])
            _check_index(index, nbytes)
            expected = _PREFIX + header_len + nbytes
            if size != expected:
                raise CacheFileError(f'truncated or padded: {size} B, expected {expected} B')
            data = bytearray(nbytes)
            if f.readinto(data) != nbytes:
                raise CacheFileError('truncated while reading')
        if zlib.crc32(data) != int(header['crc32']):
            raise CacheFileError('corrupt: the CRC-32 of its bytes differs from the header')
        tensor = torch.frombuffer(data, dtype=torch.uint8) if nbytes \
            else torch.empty(0, dtype=torch.uint8)
        return Compressed(tensor, index)

    @staticmethod
    def _header(raw: bytes) -> dict[str, Any]:
        try:
            header = json.loads(raw.decode('utf-8'))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CacheFileError(f'unreadable header: {err}') from None
        if not isinstance(header, dict):
            raise CacheFileError('unreadable header: not a JSON object')
        return header

    def _check_header(self, header: dict[str, Any], codec: Codec, layer: str,
                      layout: LayerLayout) -> None:
        if header.get('format') != FORMAT:
            raise CacheFileError(f'format {header.get("format")!r}, expected {FORMAT!r}')
        key = header.get('key')
        expected = self.full_key(codec)
        if key != expected:
            differ = sorted(k for k in set(expected) | set(key if isinstance(key, dict) else {})
                            if not isinstance(key, dict) or key.get(k) != expected.get(k))
            raise CacheFileError(f'stale: written for another key ({", ".join(differ)} differ)')
        if header.get('layer') != layer:
            raise CacheFileError(f'stale: holds layer {header.get("layer")!r}, not {layer!r}')
        if header.get('layout') != layout_digest(layout):
            raise CacheFileError("stale: the layer's tensors (names, shapes, dtypes) differ")
        try:
            index = CodecIndex.from_dict(header['index'])
            nbytes, _ = int(header['nbytes']), int(header['crc32'])
        except (KeyError, TypeError, ValueError) as err:
            raise CacheFileError(f'unreadable index: {err!r}') from None
        if index.codec != codec.name or index.raw_nbytes != layout.nbytes:
            raise CacheFileError(f'stale: {index.codec} of {index.raw_nbytes} B, expected '
                                 f'{codec.name} of {layout.nbytes} B')
        if nbytes < 0:
            raise CacheFileError(f'unreadable index: nbytes {nbytes}')

    # ---------------------------------------------------------------- write
    def save(self, codec: Codec, layer: str, layout: LayerLayout, compressed: Compressed,
             stats: CompressionStats | None = None) -> None:
        """Write ``layer``'s compressed region atomically; a failure logs once and is ignored."""
        if self._write_failed:
            return
        path = self.path(codec, layer)
        data = compressed.data.detach().to('cpu').contiguous().reshape(-1)
        data = data.narrow(0, 0, compressed.index.nbytes)
        view = _buffer(data)
        header = json.dumps({'format': FORMAT, 'key': self.full_key(codec), 'layer': layer,
                             'layout': layout_digest(layout),
                             'index': compressed.index.to_dict(),
                             'nbytes': compressed.index.nbytes,
                             'crc32': zlib.crc32(view)}).encode()
        tmp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f'.{layer}.', suffix='.tmp', dir=path.parent)
            with os.fdopen(fd, 'wb') as f:
                f.write(MAGIC + len(header).to_bytes(8, 'little') + header)
                f.write(view)
            os.replace(tmp, path)
            tmp = None
        except OSError as err:
            self._write_failed = True
            logger.warning('compression cache: cannot write %s (%s); layers are compressed '
                           'again at the next start', path, err)
            return
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        if stats is not None:
            stats.cache_written += 1
