"""Building the model from a preset or a checkpoint, and the runtime's tensor source over it.

Checkpoint layers stay on `meta` here; the runtime reads them into place through `_LayerSource`.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..model import (
    AlpamayoConfig,
    AlpamayoR1,
    CheckpointTensorSource,
    ModelError,
    build_meta,
    materialize_random,
    preset,
)
from ..model.host_memory import require_host_memory, tensor_bytes
from ..runtime import TensorSpec
from .config import EngineConfig, EngineError


def _module_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in
               [*module.parameters(), *module.buffers()])


def _resolve_dtype(config: EngineConfig, device: torch.device) -> torch.dtype | None:
    if config.dtype is not None:
        return getattr(torch, config.dtype)
    return None


class _LayerSource:
    """The runtime's `TensorSource` over a checkpoint: reads layer tensors straight into place.

    Tensors arrive as stored; only an explicit `EngineConfig.dtype` casts (through a temporary
    of one tensor).
    """

    def __init__(self, checkpoint: CheckpointTensorSource, dtype: torch.dtype | None) -> None:
        self._checkpoint = checkpoint
        self._dtype = dtype

    def keys(self) -> list[str]:
        """Names of every tensor in the checkpoint."""
        return self._checkpoint.keys()

    def spec(self, name: str) -> TensorSpec:
        """Shape and (target) dtype of tensor `name`."""
        stored = self._checkpoint.dtype(name)
        dtype = self._dtype if (self._dtype is not None and stored.is_floating_point) else stored
        return TensorSpec(tuple(self._checkpoint.shape(name)), dtype)

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Copy tensor `name` into `out` (pinned region or device storage)."""
        if out.dtype == self._checkpoint.dtype(name):
            self._checkpoint.read_into(name, out)
        else:
            out.copy_(self._checkpoint.read(name))


def _load_model(config: EngineConfig, device: torch.device,
                available_host_bytes: int | None = None,
                ) -> tuple[AlpamayoR1, _LayerSource | None]:
    """Build a preset with random weights (home in host RAM), or a checkpoint, layers on meta.

    Checkpoint layers stay on `meta`: the runtime fills each straight into its pinned region or
    its resident GPU storage from the safetensors source, so the weights are never held twice.
    Before allocating, the host bytes the weights need are checked against
    `available_host_bytes` (default MemAvailable): the whole model where the host holds the
    streamed layers (every mode but preload, and every random build), and refused with both
    numbers (`HostMemoryError`) when it does not fit.
    """
    path = Path(config.model)
    if path.is_dir():
        cfg = AlpamayoConfig.from_dir(path, config.vlm_config)
        source = CheckpointTensorSource(path)
        dtype = _resolve_dtype(config, device)
        model = build_meta(cfg, dtype or source.dtype(
            'vlm.model.language_model.norm.weight'))
        prefixes = tuple(model.sequence_prefixes().values())
        host = [t for k, t in model.state_dict().items()
                if config.mode != 'preload' or not k.startswith(prefixes)]
        require_host_memory(tensor_bytes(host), f'{cfg.family} checkpoint {path}',
                            available_host_bytes)
        _load_non_layer(model, source, dtype)
        return model.eval(), _LayerSource(source, dtype)
    try:
        cfg = preset(config.model)
    except (ModelError, ValueError) as err:
        raise EngineError(f'model {config.model!r} is neither a checkpoint directory nor a '
                          f"preset ('tiny', 'full', 'layers=N[,vit=M]'): {err}") from err
    dtype = _resolve_dtype(config, device) or (
        torch.bfloat16 if device.type == 'cuda' else torch.float32)
    # Drawn on the target device (fast on a GPU, same weights as a GPU-built model), one tensor
    # at a time, straight into the weights' home in host RAM: fits any card the model runs on.
    model = materialize_random(build_meta(cfg, dtype), config.seed, device, home='cpu',
                               available_host_bytes=available_host_bytes)
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    return model.eval(), None


def _load_non_layer(model: AlpamayoR1, source: CheckpointTensorSource,
                    dtype: torch.dtype | None) -> None:
    """Materialise every tensor outside the layer sequences from the checkpoint, on the host."""
    layer_prefixes = tuple(model.sequence_prefixes().values())
    stats = f'{model.heads_prefix}action_space.'
    state = {}
    available = set(source.keys())
    for key, meta in model.state_dict().items():
        if key.startswith(layer_prefixes) or key not in available:
            continue
        value = source.read(key)
        if dtype is not None and value.is_floating_point() and not key.startswith(stats):
            value = value.to(dtype)
        state[key] = value
        del meta
    model.load_state_dict(state, strict=False, assign=True)
    missing = {k for k, t in model.state_dict().items()
               if t.is_meta and not k.startswith(layer_prefixes)}
    freqs_dtype = model.heads.action_in_proj.encoder.trunk[0].weight.dtype
    model.rebuild_buffers(torch.device('cpu'), freqs_dtype, names=missing)
