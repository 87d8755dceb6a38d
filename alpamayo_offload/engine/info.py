"""Typed records of the engine's attached plan and of what it reports about itself.

`PlanState` is what `Engine.replan` attached (the runtime's VRAM terms included, so a planner
budgets exactly as the runtime checks); `EngineInfo` is `Engine.info`: model identity, device,
VRAM and plan for diagnostics, reports and profiles, with `as_dict` for JSON.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PlanState:
    """The plan `Engine.replan` attached and the VRAM terms the runtime checked it with."""

    mode: str
    budget_bytes: int | None             # None: no budget
    embed_on_host: bool
    resident: Mapping[str, tuple[int, ...]]
    required_bytes: int                  # what the runtime's budget check counted
    fixed_bytes: int                     # non-layer modules on the device, embedding aside
    working_set_bytes: int               # activations + KV cache term
    layer_graphs: bool                   # resident layers replayed as CUDA graphs
    stream_graphs: bool = True           # streamed layers too, by slot
    compressed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # kept compressed
    compression: str = 'off'             # how streamed layers travel: 'off', 'auto' or 'on'


@dataclass(frozen=True)
class EngineInfo:
    """Model identity, device, VRAM and plan of a loaded engine (`Engine.info`)."""

    model: str
    model_identity: str
    device: str
    dtype: str
    mode: str
    budget_bytes: int | None
    required_bytes: int
    embed_on_host: bool
    resident_layers: Mapping[str, tuple[int, ...]]   # every sequence, () where none
    layers: Mapping[str, int]                        # layer count per sequence
    embed_bytes: int
    fixed_bytes: int
    working_set_bytes: int
    hidden_size: int
    prompt_tokens: int
    model_family: str                    # 'r1', '1.5' or '2super' (config.json model_type)
    num_samples: int                     # trajectories per inference
    guidance_weight: float | None        # navigation classifier-free guidance (None: off)
    diffusion_steps: int                 # flow-matching steps run: the override, else the model's
    pinned_bytes: int
    compression: str                     # 'off', 'auto' or 'on' (EngineConfig.compression)
    compressed_layers: Mapping[str, tuple[int, ...]]  # kept compressed in VRAM, per sequence
    layer_graphs: int                    # (layer, input shape) pairs captured as CUDA graphs
    host_store_bytes: int
    torch: str
    host: str
    kernel_settings: str                 # what a plan's profile must have been timed with
    vram_used_bytes: int = 0             # CUDA only
    driver: str = ''                     # CUDA only
    gpu: str = ''                        # CUDA only
    compression_cache: str = ''          # the cache's directory at the last attach ('' none)
    compress_s: float = 0.0              # seconds compressing layers at the last attach
    compression_cache_hits: int = 0      # layers read from the cache at the last attach
    compression_cache_read_s: float = 0.0  # seconds reading them

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (layer indices as lists)."""
        out = asdict(self)
        out['resident_layers'] = {k: list(v) for k, v in self.resident_layers.items()}
        out['compressed_layers'] = {k: list(v) for k, v in self.compressed_layers.items()}
        out['layers'] = dict(self.layers)
        return out
