"""Alpamayo-R1 rebuilt on transformers' Qwen3-VL classes: model, checkpoint I/O, inference.

Never imports the runtime: the engine connects the two through `layer_sequences()`,
`non_layer_modules()`, `CheckpointTensorSource` and the `PhaseObserver` protocol.
"""
from __future__ import annotations

from .alpamayo import AlpamayoR1, build_meta, build_random, materialize_random
from .checkpoint import CheckpointTensorSource, load_checkpoint, save_checkpoint
from .config import (
    AlpamayoConfig,
    full_1_5_config,
    full_2super_config,
    full_config,
    preset,
    scaled_config,
    tiny_1_5_config,
    tiny_2super_config,
    tiny_config,
)
from .errors import (
    CheckpointError,
    ConfigError,
    HostMemoryError,
    ModelError,
    ModelInputError,
)
from .inference import (
    DecodeOptions,
    InferenceResult,
    Rollout,
    TextResult,
    generate_text,
    run_inference,
)
from .inputs import (
    ImageSizing,
    ModelInputs,
    inputs_from_processed,
    prepare_inputs,
    prepare_vqa_inputs,
    release_camera_slots,
    to_t0_frame,
)
from .layer_graphs import GraphedDecoderLayer, LayerGraphs, graph_decoder_layers
from .norms import FusedRMSNorm, fuse_rms_norms
from .observer import NullObserver, PhaseObserver
from .rope import RolledRotaryAttention, roll_rotary
from .shared_prefix_cache import SharedPrefixCache, stack_caches
from .tokens import SyntheticTextIds, TextEncoder, TokenizerDirEncoder
from .vision_attention import OneSyncVisionAttention, sync_vision_once

__all__ = [
    "AlpamayoConfig", "AlpamayoR1", "CheckpointError", "CheckpointTensorSource", "ConfigError",
    "DecodeOptions", "FusedRMSNorm", "GraphedDecoderLayer", "HostMemoryError", "ImageSizing",
    "InferenceResult", "LayerGraphs", "ModelError", "ModelInputError", "ModelInputs",
    "NullObserver", "OneSyncVisionAttention", "PhaseObserver", "RolledRotaryAttention",
    "Rollout", "SharedPrefixCache", "SyntheticTextIds", "TextEncoder", "TextResult",
    "TokenizerDirEncoder",
    "build_meta", "build_random", "full_1_5_config", "full_2super_config", "full_config",
    "fuse_rms_norms", "generate_text", "graph_decoder_layers", "inputs_from_processed",
    "load_checkpoint", "materialize_random", "prepare_inputs", "prepare_vqa_inputs", "preset",
    "release_camera_slots", "roll_rotary", "run_inference", "save_checkpoint", "scaled_config",
    "stack_caches", "sync_vision_once",
    "tiny_1_5_config", "tiny_2super_config", "tiny_config", "to_t0_frame",
]
