"""Where an engine caches its compressed layers on disk, and the key that names its weights.

The runtime reads a cached layer instead of the weights, so the key must change whenever the
bytes could: for a checkpoint, the hash of its config and index (`planning.model_identity`)
plus each safetensors file's name, size, modification time and header (a checkpoint rewritten
in place with the same shapes has another time); for a random preset, its name, seed, dtype,
the device its weights were drawn on and torch's version (the random streams). An explicit
`EngineConfig.dtype` casts at load, so it is part of the key too.

`EngineConfig.compression_cache`: 'off'; a directory; or 'auto': next to a checkpoint
(`<checkpoint>/.compression-cache`) where that is writable, else the user's cache directory
(`$XDG_CACHE_HOME/alpamayo-offload/compression`, default `~/.cache/...`); presets have no
checkpoint to sit beside, so 'auto' caches nothing for them.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from ..planning.identity import model_identity
from ..runtime import CompressionCache
from .config import EngineConfig

NEXT_TO_CHECKPOINT = '.compression-cache'
USER_CACHE = Path('alpamayo-offload') / 'compression'


def _safetensors_header(path: Path) -> bytes:
    """Return a safetensors file's length prefix and JSON header (b'' where unreadable)."""
    try:
        with path.open('rb') as f:
            prefix = f.read(8)
            length = int.from_bytes(prefix, 'little') if len(prefix) == 8 else 0
            return prefix + f.read(min(length, 100 << 20))
    except OSError:
        return b''


def checkpoint_weights_digest(path: Path) -> str:
    """Hash every safetensors file's name, size, modification time and header."""
    digest = hashlib.sha256()
    for file in sorted(path.glob('*.safetensors')):
        stat = file.stat()
        digest.update(f'{file.name}:{stat.st_size}:{stat.st_mtime_ns}:'.encode())
        digest.update(hashlib.sha256(_safetensors_header(file)).digest())
    return digest.hexdigest()[:32]


def weights_key(config: EngineConfig, dtype: torch.dtype, device: torch.device) -> dict[str, str]:
    """Return what names the layers' bytes of this engine (see the module docstring)."""
    path = Path(config.model)
    if path.is_dir():
        return {'model': model_identity(config.model),
                'weights': checkpoint_weights_digest(path),
                'dtype': config.dtype or 'as stored'}
    return {'model': f'preset:{config.model}', 'seed': str(config.seed),
            'dtype': str(dtype).removeprefix('torch.'), 'drawn_on': device.type,
            'torch': torch.__version__.split('+')[0]}


def user_cache_dir() -> Path:
    """Return the user's cache directory for compressed layers (XDG base directory spec)."""
    base = os.environ.get('XDG_CACHE_HOME') or str(Path.home() / '.cache')
    return Path(base) / USER_CACHE


def cache_root(setting: str, model: str) -> Path | None:
    """Return the directory `EngineConfig.compression_cache` names for `model`, or None."""
    if setting == 'off':
        return None
    if setting != 'auto':
        return Path(setting).expanduser()
    path = Path(model)
    if not path.is_dir():
        return None
    beside = path / NEXT_TO_CHECKPOINT
    if beside.is_dir() or os.access(path, os.W_OK):
        return beside
    return user_cache_dir()


def compression_cache(config: EngineConfig, dtype: torch.dtype,
                      device: torch.device) -> CompressionCache | None:
    """Return the engine's compression cache, or None where the setting gives none."""
    root = cache_root(config.compression_cache, config.model)
    if root is None:
        return None
    return CompressionCache(root, weights_key(config, dtype, device))
