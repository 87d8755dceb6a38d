"""Lossless codecs for layers' flat regions: compressed once at attach, decompressed per pass.

A codec turns a layer's flat uint8 region into compressed bytes plus a :class:`CodecIndex`
(which chunks sit where) and decompresses them back into a slot, bit for bit. Two codecs:

- :class:`NvcompAnsCodec`: nvCOMP's ANS entropy coder on the GPU, reading the bytes as ``<f2``
  (16-bit symbols: the sign and exponent of a BF16 weight carry ~1.5 bits, so a layer shrinks
  to ~0.69 of its bytes). nvCOMP chunks the region itself; decompression is enqueued on the
  codec's stream with a configuration built from the uncompressed size, so it never
  synchronises the host.
- :class:`PlaneZlibCodec`: the CPU path. Each chunk is split into byte planes (a BF16 weight's
  high and low byte apart) and each plane deflated with the stdlib's zlib; a chunk that does not
  shrink is stored as is.

Without nvCOMP (CPU-only installs, CI) :func:`select_codec` falls back to raw streaming with
one log line. nvCOMP is an optional extra (``nvidia-nvcomp-cu13``), never needed on the CPU.
"""
from __future__ import annotations

import ctypes
import enum
import importlib.metadata
import logging
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .errors import OffloadError

logger = logging.getLogger(__name__)

# Bumped whenever a codec's compressed bytes change meaning: an on-disk cache written by
# another format version is never read (runtime/codec_cache.py).
CODEC_FORMAT_VERSION = 1

_STORED = 'stored'
_PLANES = 'planes-zlib'
_ANS = 'ans-f2'


class Compression(str, enum.Enum):
    """Whether the runtime compresses layers: never, where a GPU codec exists, or always."""

    OFF = 'off'
    AUTO = 'auto'   # nvCOMP on CUDA when it imports; raw otherwise (one log line)
    ON = 'on'       # nvCOMP on CUDA (refused without it); the zlib codec on the CPU


@dataclass(frozen=True)
class Chunk:
    """One chunk: ``raw_nbytes`` at ``raw_offset`` of the region, stored at ``offset``."""

    raw_offset: int
    raw_nbytes: int
    offset: int
    nbytes: int
    method: str


@dataclass(frozen=True)
class CodecIndex:
    """Where a compressed region's chunks sit, and which codec wrote them."""

    codec: str
    raw_nbytes: int
    chunks: tuple[Chunk, ...]

    @property
    def nbytes(self) -> int:
        """Compressed bytes (what a copy of the layer moves)."""
        return sum(c.nbytes for c in self.chunks)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (an on-disk cache's index)."""
        return {'codec': self.codec, 'raw_nbytes': self.raw_nbytes,
                'chunks': [[c.raw_offset, c.raw_nbytes, c.offset, c.nbytes, c.method]
                           for c in self.chunks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CodecIndex:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data['codec']), int(data['raw_nbytes']),
                   tuple(Chunk(int(a), int(b), int(c), int(d), str(m))
                         for a, b, c, d, m in data['chunks']))


@dataclass(frozen=True)
class Compressed:
    """A compressed region: its bytes (uint8, on the host or the device) and its index."""

    data: torch.Tensor
    index: CodecIndex


class Codec(Protocol):
    """Compresses a flat uint8 region and decompresses it into a slot, bit for bit."""

    name: str
    device: torch.device      # where decompression reads its input and writes its output

    @property
    def params(self) -> dict[str, str]:
        """Everything that decides its compressed bytes (name, version, chunking): a cache key."""
        ...

    def compress(self, flat: torch.Tensor) -> Compressed:
        """Compress ``flat`` (uint8, any device); the result's data lies on the host."""
        ...

    def decompress_into(self, src: torch.Tensor, index: CodecIndex, out: torch.Tensor) -> None:
        """Write the region ``index`` describes, read from ``src``, into ``out`` (uint8).

        ``src`` and ``out`` lie on :attr:`device`. On CUDA the work is enqueued on the codec's
        stream; the caller orders that stream with events.
        """
        ...


class CodecError(OffloadError):
    """A compressed region cannot be decoded (wrong codec, corrupt bytes) or no codec exists."""


def _host_bytes(t: torch.Tensor) -> bytes:
    """Return the bytes of a contiguous CPU uint8 tensor."""
    return ctypes.string_at(t.data_ptr(), t.numel()) if t.numel() else b''


class PlaneZlibCodec:
    """CPU codec: byte planes of ``element_size``-byte words, each deflated, chunk by chunk."""

    device = torch.device('cpu')

    def __init__(self, element_size: int = 2, chunk_bytes: int = 1 << 20, level: int = 1) -> None:
        if element_size < 1 or chunk_bytes % element_size or chunk_bytes <= 0:
            raise ValueError(f'PlaneZlibCodec: chunk_bytes {chunk_bytes} must be a positive '
                             f'multiple of element_size {element_size}')
        self.element_size = element_size
        self.chunk_bytes = chunk_bytes
        self.level = level
        self.name = f'{_PLANES}-{element_size}'

    @property
    def params(self) -> dict[str, str]:
        """Name, format version, chunk size and zlib level: what decides its bytes."""
        return {'codec': self.name, 'format': str(CODEC_FORMAT_VERSION),
                'chunk_bytes': str(self.chunk_bytes), 'level': str(self.level)}

    def compress(self, flat: torch.Tensor) -> Compressed:
        """Compress ``flat`` chunk by chunk; chunks that do not shrink are stored."""
        flat = flat.detach().to('cpu').contiguous().view(torch.uint8).reshape(-1)
        parts: list[bytes] = []
        chunks: list[Chunk] = []
        offset = 0
        for start in range(0, flat.numel(), self.chunk_bytes):
            piece = flat.narrow(0, start, min(self.chunk_bytes, flat.numel() - start))
            blob, method = self._encode(piece)
            chunks.append(Chunk(start, piece.numel(), offset, len(blob), method))
            parts.append(blob)
            offset += len(blob)
        data = torch.frombuffer(bytearray(b''.join(parts)), dtype=torch.uint8) if offset \
            else torch.empty(0, dtype=torch.uint8)
        return Compressed(data, CodecIndex(self.name, flat.numel(), tuple(chunks)))

    def _encode(self, piece: torch.Tensor) -> tuple[bytes, str]:
        size = self.element_size
        if piece.numel() % size:
            return _host_bytes(piece), _STORED
        planes = piece.view(-1, size).t().contiguous()
        blobs = [zlib.compress(_host_bytes(planes[p]), self.level) for p in range(size)]
        header = b''.join(len(b).to_bytes(8, 'little') for b in blobs)
        blob = header + b''.join(blobs)
        if len(blob) >= piece.numel():
            return _host_bytes(piece), _STORED
        return blob, _PLANES

    def decompress_into(self, src: torch.Tensor, index: CodecIndex, out: torch.Tensor) -> None:
        """Decode every chunk of ``src`` into ``out`` (both on the CPU)."""
        if index.codec != self.name:
            raise CodecError(f'region compressed with {index.codec!r}, this codec is '
                             f'{self.name!r}')
        size = self.element_size
        for c in index.chunks:
            dst = out.narrow(0, c.raw_offset, c.raw_nbytes)
            blob = src.narrow(0, c.offset, c.nbytes)
            if c.method == _STORED:
                dst.copy_(blob)
                continue
            raw = _host_bytes(blob.contiguous())
            lengths = [int.from_bytes(raw[8 * p:8 * p + 8], 'little') for p in range(size)]
            pos = 8 * size
            planes = dst.view(-1, size)
            for p, length in enumerate(lengths):
                plane = zlib.decompress(raw[pos:pos + length])
                pos += length
                if len(plane) * size != c.raw_nbytes:
                    raise CodecError(f'chunk at {c.raw_offset}: plane {p} decoded to '
                                     f'{len(plane)} B, expected {c.raw_nbytes // size} B')
                planes[:, p].copy_(torch.frombuffer(bytearray(plane), dtype=torch.uint8))


def _nvcomp_version(nvcomp: Any) -> str:
    """Return the nvCOMP Python package's version ('unknown' where it names none)."""
    found = getattr(nvcomp, '__version__', None)
    if found:
        return str(found)
    for dist in ('nvidia-nvcomp-cu13', 'nvidia-nvcomp-cu12'):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return 'unknown'


def _import_nvcomp() -> Any:
    from nvidia import nvcomp  # optional extra: nvidia-nvcomp-cu13
    return nvcomp


class NvcompAnsCodec:
    """GPU codec: nvCOMP ANS over 16-bit symbols, one nvCOMP-chunked stream per region.

    Every call runs on ``stream`` (the runtime's decompression stream). Decoding uses a
    decompression config built from a compression config for the region's size (one per
    distinct size), the sync-free path of nvCOMP's Python API.
    """

    def __init__(self, nvcomp: Any, device: torch.device, stream: Any,
                 chunk_bytes: int = 1 << 16) -> None:
        self._nv = nvcomp
        self.device = device
        self.stream = stream
        self.name = _ANS
        self._codec = nvcomp.Codec(algorithm='ANS', data_type='<f2',
                                   device_id=device.index if device.index is not None
                                   else torch.cuda.current_device(),
                                   cuda_stream=stream.cuda_stream,
                                   uncomp_chunk_size=chunk_bytes)
        self._chunk_bytes = chunk_bytes
        self._configs: dict[int, tuple[Any, Any]] = {}

    @property
    def params(self) -> dict[str, str]:
        """Name, format version, nvCOMP's version and chunk size: what decides its bytes."""
        return {'codec': self.name, 'format': str(CODEC_FORMAT_VERSION),
                'chunk_bytes': str(self._chunk_bytes), 'nvcomp': _nvcomp_version(self._nv)}

    def _config(self, nbytes: int) -> tuple[Any, Any]:
        found = self._configs.get(nbytes)
        if found is None:
            comp = self._codec.compression_config(nbytes)
            found = (comp, self._codec.decompression_config(comp))
            self._configs[nbytes] = found
        return found

    def _array(self, t: torch.Tensor) -> Any:
        return self._nv.as_array(t, cuda_stream=self.stream.cuda_stream)

    def compress(self, flat: torch.Tensor) -> Compressed:
        """Compress ``flat`` on the GPU; blocks until the compressed bytes are on the host."""
        flat = flat.reshape(-1).view(torch.uint8)
        if flat.numel() % 2:
            raise CodecError(f'NvcompAnsCodec compresses 16-bit words; got {flat.numel()} B')
        with torch.cuda.stream(self.stream):
            src = flat.to(self.device, non_blocking=False)
            comp_cfg, _ = self._config(src.numel())
            encoded = self._codec.encode(self._array(src.view(torch.float16)),
                                         compression_config=comp_cfg)
            dev = torch.as_tensor(encoded, device=self.device).reshape(-1).view(torch.uint8)
            host = dev.cpu()
        self.stream.synchronize()
        del encoded
        chunk = Chunk(0, flat.numel(), 0, host.numel(), _ANS)
        return Compressed(host, CodecIndex(self.name, flat.numel(), (chunk,)))

    def decompress_into(self, src: torch.Tensor, index: CodecIndex, out: torch.Tensor) -> None:
        """Enqueue decoding of ``src`` into ``out`` on the codec's stream (no host sync)."""
        if index.codec != self.name:
            raise CodecError(f'region compressed with {index.codec!r}, this codec is '
                             f'{self.name!r}')
        (chunk,) = index.chunks
        _, decomp_cfg = self._config(index.raw_nbytes)
        blob = src.narrow(0, chunk.offset, chunk.nbytes)
        dst = out.narrow(0, 0, index.raw_nbytes)
        self._codec.decode(self._array(blob), out=self._array(dst),
                           decompression_config=decomp_cfg)


_logged: set[str] = set()


def _log_once(message: str, *args: Any) -> None:
    if message not in _logged:
        _logged.add(message)
        logger.warning(message, *args)


def select_codec(compression: Compression | str, device: torch.device,
                 stream: Any = None) -> Codec | None:
    """Return the codec for ``compression`` on ``device``, or None for raw streaming.

    ``stream`` is the CUDA stream decompression runs on (required on CUDA).
    """
    choice = Compression(compression)
    if choice is Compression.OFF:
        return None
    if device.type != 'cuda':
        return PlaneZlibCodec() if choice is Compression.ON else None
    try:
        nvcomp = _import_nvcomp()
    except ImportError as err:
        if choice is Compression.ON:
            raise CodecError(f'compression=on needs nvCOMP on CUDA ({err}); install '
                             'nvidia-nvcomp-cu13 and nvidia-libnvcomp-cu13, or set '
                             'compression to auto or off') from err
        _log_once('nvCOMP is not importable (%s): layers stream uncompressed', err)
        return None
    return NvcompAnsCodec(nvcomp, device, stream)
