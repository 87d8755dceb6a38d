"""Checkpoint I/O in the released layout: safetensors only, each tensor read straight into place.

Layout: `config.json` (+ `vlm_config.json` when the VLM is not the Qwen3-VL-8B shape) and either
`model.safetensors` or `model-0000i-of-0000n.safetensors` + `model.safetensors.index.json`.

Loading builds the model on `meta`, checks every key and shape against the checkpoint headers
(naming the first bad key or file), then allocates each tensor once on its target and fills it
with `readinto` from the file: no pickle, no second copy of the weights in host RAM (peak host
memory is the weights themselves when loading to the CPU, one tensor when loading to a GPU).
`CheckpointTensorSource` exposes the same reads to the runtime (`read_into` a pinned buffer).
"""
from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .alpamayo import AlpamayoR1, build_meta
from .config import AlpamayoConfig
from .errors import CheckpointError, ConfigError, UnsupportedConfigError
from .host_memory import require_host_memory

logger = logging.getLogger(__name__)

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
MAX_HEADER_BYTES = 100 * 2**20
DTYPES: dict[str, torch.dtype] = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies: file, absolute byte offset, byte length, dtype, shape."""

    file: Path
    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def read_header(file: Path) -> dict[str, TensorEntry]:
    """Parse and validate one safetensors header; refuse truncated or corrupt files by name."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{file}: truncated (shorter than the 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise CheckpointError(f"{file}: bad header (declares {n} header bytes, file has "
                                      f"{size}); the file is corrupt or not safetensors")
            raw = f.read(n)
    except OSError as err:
        raise CheckpointError(f"{file}: cannot read ({err})") from err
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{file}: bad header (not JSON: {err})") from err
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: bad header (not a JSON object)")
    data_start = 8 + n
    entries: dict[str, TensorEntry] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = DTYPES[meta["dtype"]]
            shape = tuple(int(d) for d in meta["shape"])
            begin, end = (int(o) for o in meta["data_offsets"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{file}: bad header entry for {name!r} ({err!r})") from err
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * dtype.itemsize or begin < 0:
            raise CheckpointError(f"{file}: bad header entry for {name!r}: {end - begin} bytes for "
                                  f"shape {shape} {meta['dtype']}")
        if data_start + end > size:
            raise CheckpointError(f"{file}: truncated: tensor {name!r} ends at byte "
                                  f"{data_start + end}, file has {size} bytes")
        entries[name] = TensorEntry(file, data_start + begin, end - begin, dtype, shape)
    return entries


def _read_bytes_into(entry: TensorEntry, out: torch.Tensor) -> None:
    """Fill the contiguous CPU tensor `out` with the entry's bytes (plain reads, no mmap)."""
    view = memoryview(out.reshape(-1).view(torch.uint8).numpy()) if entry.nbytes else None
    with open(entry.file, "rb", buffering=0) as f:
        f.seek(entry.offset)
        got = 0
        while view is not None and got < entry.nbytes:
            k = f.readinto(view[got:])
            if not k:
                raise CheckpointError(f"{entry.file}: truncated while reading ({got} of "
                                      f"{entry.nbytes} bytes)")
            got += k


def _reject_pickles(path: Path) -> None:
    for p in sorted(path.iterdir()):
        if p.suffix in PICKLE_SUFFIXES:
            raise CheckpointError(f"{p}: pickle checkpoints are refused (arbitrary code on load); "
                                  "convert it to safetensors")


def checkpoint_files(path: str | Path) -> list[Path]:
    """List the safetensors files of a checkpoint directory, validated against its index."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory: pass the checkpoint directory")
    _reject_pickles(path)
    index = path / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{index}: not a safetensors index ({err!r})") from err
        files = sorted({path / f for f in weight_map.values()})
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"{f}: listed in {INDEX_NAME} but missing")
        return files
    if (path / SINGLE_NAME).is_file():
        return [path / SINGLE_NAME]
    raise CheckpointError(f"{path}: neither {SINGLE_NAME} nor {INDEX_NAME} found")


class CheckpointTensorSource:
    """Read-only tensors of a checkpoint directory, by name, straight into caller buffers."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._entries: dict[str, TensorEntry] = {}
        for file in checkpoint_files(self.path):
            for name, entry in read_header(file).items():
                if name in self._entries:
                    raise CheckpointError(f"{file}: tensor {name!r} also in "
                                          f"{self._entries[name].file.name}")
                self._entries[name] = entry
        index = self.path / INDEX_NAME
        if index.is_file():
            for name, fname in json.loads(index.read_text())["weight_map"].items():
                entry = self._entries.get(name)
                if entry is None or entry.file.name != fname:
                    raise CheckpointError(f"{index}: {name!r} mapped to {fname}, not found there")

    def keys(self) -> list[str]:
        """All tensor names."""
        return list(self._entries)

    def entry(self, name: str) -> TensorEntry:
        """Location of one tensor."""
        try:
            return self._entries[name]
        except KeyError as err:
            raise CheckpointError(f"{self.path}: no tensor {name!r}") from err

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape as stored."""
        return self.entry(name).shape

    def dtype(self, name: str) -> torch.dtype:
        """Dtype as stored."""
        return self.entry(name).dtype

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Copy tensor `name` into `out` (same shape and dtype; CPU contiguous, or any device)."""
        e = self.entry(name)
        if tuple(out.shape) != e.shape or out.dtype != e.dtype:
            raise CheckpointError(f"{name!r}: buffer is {tuple(out.shape)} {out.dtype}, "
                                  f"checkpoint has {e.shape} {e.dtype}")
        if out.device.type == "cpu" and out.is_contiguous():
            _read_bytes_into(e, out)
        else:
            host = torch.empty(e.shape, dtype=e.dtype)
            _read_bytes_into(e, host)
            out.copy_(host)

    def read(self, name: str) -> torch.Tensor:
        """Return a new CPU tensor holding `name`."""
        e = self.entry(name)
        out = torch.empty(e.shape, dtype=e.dtype)
        _read_bytes_into(e, out)
        return out


# ---- loading -----------------------------------------------------------------------------
def _set_tensor(model: nn.Module, key: str, value: torch.Tensor) -> None:
    prefix, _, leaf = key.rpartition(".")
    module = model.get_submodule(prefix)
    if leaf in module._parameters:
        module._parameters[leaf] = nn.Parameter(value, requires_grad=False)
    else:
        module._buffers[leaf] = value


def _optional_buffers(model: AlpamayoR1) -> set[str]:
    """Return the persistent non-learned buffers a checkpoint may omit (rebuilt from config)."""
    hp = model.heads_prefix
    prefixes = (f"{hp}action_in_proj.", f"{hp}action_space.")
    return {k for k, _ in model.named_buffers() if k.startswith(prefixes)}


def check_keys(model: AlpamayoR1, source: CheckpointTensorSource) -> set[str]:
    """Compare checkpoint and model; raise on the first bad key. -> buffers to rebuild."""
    expected = model.state_dict()
    optional = _optional_buffers(model)
    have = set(source.keys())
    for key, ref in expected.items():
        if key not in have:
            if key in optional:
                continue
            raise CheckpointError(f"{source.path}: missing tensor {key!r} (shape "
                                  f"{tuple(ref.shape)}); the checkpoint does not match this model")
        if source.shape(key) != tuple(ref.shape):
            raise CheckpointError(f"{source.entry(key).file}: tensor {key!r} has shape "
                                  f"{source.shape(key)}, the model expects {tuple(ref.shape)}")
    extra = sorted(have - set(expected))
    if extra:
        raise CheckpointError(f"{source.entry(extra[0]).file}: unexpected tensor {extra[0]!r} "
                              f"({len(extra)} unknown keys); the checkpoint does not match")
    return {k for k in optional if k not in have}


def _load_bytes(model: AlpamayoR1, source: CheckpointTensorSource,
                dtype: torch.dtype | None) -> int:
    """Bytes the loaded tensors take: as stored, floating ones in `dtype` when it is given."""
    total, have = 0, set(source.keys())
    for key, ref in model.state_dict().items():
        if key not in have:
            continue
        e = source.entry(key)
        cast = dtype is not None and e.dtype.is_floating_point
        total += ref.numel() * dtype.itemsize if cast else e.nbytes
    return total


@torch.no_grad()
def load_checkpoint(path: str | Path, device: torch.device | str = "cpu",
                    dtype: torch.dtype | None = None,
                    vlm_config: str | Path | None = None,
                    available_host_bytes: int | None = None) -> AlpamayoR1:
    """Load a released-layout checkpoint into a new `AlpamayoR1` on `device`.

    `dtype=None` keeps every tensor as stored (bit for bit); a float dtype casts the parameters and
    `freqs` (the `action_space.*` buffers stay float32, as the release keeps them).
    Loading to the CPU first checks the weights' bytes against `available_host_bytes` (default:
    MemAvailable) and refuses with both numbers (`HostMemoryError`) before allocating.
    """
    path = Path(path)
    try:
        cfg = AlpamayoConfig.from_dir(path, vlm_config)
    except UnsupportedConfigError:
        raise   # already a CheckpointError, naming the field
    except ConfigError as err:
        raise CheckpointError(f"{path}: {err}") from err
    source = CheckpointTensorSource(path)
    device = torch.device(device)
    model = build_meta(cfg, dtype or torch.bfloat16)
    missing = check_keys(model, source)
    if device.type == "cpu":
        require_host_memory(_load_bytes(model, source, dtype),
                            f"{cfg.family} checkpoint {path}", available_host_bytes)
    stats = f"{model.heads_prefix}action_space."
    for key in model.state_dict():
        if key in missing:
            continue
        e = source.entry(key)
        target = dtype if (dtype is not None and e.dtype.is_floating_point
                           and not key.startswith(stats)) else e.dtype
        if device.type == "cpu" and target == e.dtype:
            value = source.read(key)
        else:
            value = source.read(key).to(device=device, dtype=target)
        _set_tensor(model, key, value)
    freqs_dtype = dtype or model.heads.action_in_proj.encoder.trunk[0].weight.dtype
    model.rebuild_buffers(device, freqs_dtype, names=missing)
    if missing:
        logger.info("rebuilt %d non-learned buffers from config: %s", len(missing), sorted(missing))
    leftover = [k for k, t in model.state_dict().items() if t.is_meta]
    if leftover:
        raise CheckpointError(f"{path}: tensor {leftover[0]!r} was not materialised")
    return model.eval()


# ---- saving ------------------------------------------------------------------------------
def _shards(items: list[tuple[str, torch.Tensor]], max_bytes: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for key, t in items:
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    return shards


def write_safetensors(file: Path, tensors: Iterable[tuple[str, torch.Tensor]],
                      metadata: dict[str, str] | None = None) -> int:
    """Stream tensors (any device) into one safetensors file, one host copy at a time -> bytes."""
    items = list(tensors)
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for key, t in items:
        nbytes = t.numel() * t.element_size()
        header[key] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as safetensors writes it
    tmp = file.with_name(file.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for _, t in items:
            host = t.detach().contiguous().cpu()
            if host.numel():
                f.write(memoryview(host.reshape(-1).view(torch.uint8).numpy()))
            del host
    os.replace(tmp, file)
    return offset


def save_checkpoint(model: AlpamayoR1, path: str | Path, max_shard_bytes: int = 5 * 10**9,
                    include_buffers: bool = True) -> list[Path]:
    """Write `model` in the released layout; tensors may live on any device.

    One shard -> `model.safetensors`; more -> `model-0000i-of-0000n.safetensors` + index.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg
    (path / "config.json").write_text(json.dumps(cfg.to_release_dict(), indent=2, sort_keys=True))
    if not cfg.is_qwen3vl_8b_shape and not cfg.is_2super:  # 2 Super embeds it in config.json
        (path / "vlm_config.json").write_text(json.dumps(cfg.to_vlm_dict(), indent=2))
    state = model.state_dict()
    optional = _optional_buffers(model)
    items = [(k, t) for k, t in state.items() if include_buffers or k not in optional]
    groups = _shards(items, max_shard_bytes)
    tensors = dict(items)
    if len(groups) == 1:
        names = [SINGLE_NAME]
    else:
        names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    total = 0
    for name, keys in zip(names, groups, strict=True):
        total += write_safetensors(path / name, ((k, tensors[k]) for k in keys))
        logger.info("wrote %s (%d tensors)", name, len(keys))
    if len(groups) > 1:
        weight_map = {k: name for name, keys in zip(names, groups, strict=True) for k in keys}
        (path / INDEX_NAME).write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    elif (path / INDEX_NAME).exists():
        (path / INDEX_NAME).unlink()
    return [path / n for n in names]


def weight_bytes(source: CheckpointTensorSource) -> int:
    """Total tensor bytes of a checkpoint."""
    return sum(source.entry(k).nbytes for k in source.keys())

