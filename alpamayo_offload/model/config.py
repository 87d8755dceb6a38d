"""Alpamayo-R1 configuration: frozen dataclasses, the `full`/`tiny` presets, and config.json I/O.

One `AlpamayoConfig` describes the whole model; `to_qwen3vl_config()` and `expert_text_config()`
turn it into the transformers configs the modules are built from. Values marked [inferred] in the
architecture spec are fields here (never constants in code), so a real checkpoint can override them.
Reading and writing the release files, field by field, is `release_config.py`'s job.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import Qwen3VLConfig, Qwen3VLTextConfig
from transformers.activations import ACT2FN

from .errors import ConfigError

MODEL_TYPE = "alpamayo_r1"
MODEL_TYPE_1_5 = "alpamayo1_5"
MODEL_TYPE_2SUPER = "alpamayo2_super"
# config.json `model_type` -> the family's name as presets and reports give it.
MODEL_FAMILIES = {MODEL_TYPE: "r1", MODEL_TYPE_1_5: "1.5", MODEL_TYPE_2SUPER: "2super"}
# 2 Super pads the vocabulary to a multiple of 128: 155,697 tokens -> 155,776 rows (no token
# behind the last 79, and decoding does not mask them).
VOCAB_2SUPER = 155776
# Names whose VLM is the Qwen3-VL-8B shape; a checkpoint naming one needs no vlm_config.json.
QWEN3VL_8B_NAMES = ("Qwen/Qwen3-VL-8B-Instruct", "nvidia/Cosmos-Reason2-8B")


def _activation(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if value is not None and value not in ACT2FN:
        raise ConfigError(f"{type(obj).__name__}.{name} = {value!r}: not one of transformers' "
                          f"activations {sorted(ACT2FN)}")


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{type(obj).__name__}.{name} = {value!r}: must be an integer >= 1")


@dataclass(frozen=True)
class TextConfig:
    """The Qwen3-VL language model (and, via `ExpertConfig`, the expert's inherited fields)."""

    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_layers: int = 36
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 5_000_000.0
    mrope_section: tuple[int, int, int] = (24, 20, 20)
    max_position_embeddings: int = 262144
    vocab_size: int = 155697
    hidden_act: str = "silu"
    attention_bias: bool = False

    def __post_init__(self) -> None:
        _positive(self, "hidden_size", "intermediate_size", "num_layers", "num_heads",
                  "num_kv_heads", "head_dim", "vocab_size")
        _activation(self, "hidden_act")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"TextConfig.num_heads = {self.num_heads} must be a multiple of "
                              f"num_kv_heads = {self.num_kv_heads}")
        if sum(self.mrope_section) != self.head_dim // 2:
            raise ConfigError(f"TextConfig.mrope_section = {self.mrope_section} must sum to "
                              f"head_dim / 2 = {self.head_dim // 2}")


@dataclass(frozen=True)
class VisionConfig:
    """The Qwen3-VL vision encoder."""

    depth: int = 27
    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_heads: int = 16
    out_hidden_size: int = 4096
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    hidden_act: str = "gelu_pytorch_tanh"

    def __post_init__(self) -> None:
        _positive(self, "depth", "hidden_size", "intermediate_size", "num_heads",
                  "out_hidden_size", "num_position_embeddings", "patch_size",
                  "temporal_patch_size", "spatial_merge_size")
        _activation(self, "hidden_act")
        side = round(self.num_position_embeddings ** 0.5)
        if side * side != self.num_position_embeddings:
            raise ConfigError(f"VisionConfig.num_position_embeddings = "
                              f"{self.num_position_embeddings} must be a perfect square")
        if any(not 0 <= i < self.depth for i in self.deepstack_visual_indexes):
            raise ConfigError(f"VisionConfig.deepstack_visual_indexes = "
                              f"{self.deepstack_visual_indexes} must lie in [0, {self.depth})")


@dataclass(frozen=True)
class ExpertConfig:
    """Free fields of the expert; layers, KV heads and RoPE come from the text model.

    `hidden_act`, `attention_bias` and `rms_norm_eps` set to None are the text model's, as the
    official code inherits every field `expert_cfg` does not set.
    """

    hidden_size: int = 2048
    intermediate_size: int = 8256
    num_heads: int = 16
    head_dim: int = 128
    hidden_act: str | None = None
    attention_bias: bool | None = None
    rms_norm_eps: float | None = None

    def __post_init__(self) -> None:
        _positive(self, "hidden_size", "intermediate_size", "num_heads", "head_dim")
        _activation(self, "hidden_act")


@dataclass(frozen=True)
class ActionConfig:
    """Action head, flow matching and the unicycle action space (release values by default)."""

    in_proj_hidden_size: int = 512
    in_proj_num_layers: int = 2
    num_fourier_feats: int = 20
    max_freq: float = 100.0
    n_waypoints: int = 64
    dt: float = 0.1
    accel_mean: float = 0.02902694707164455
    accel_std: float = 0.6810426736454882
    curvature_mean: float = 0.0002692167976330542
    curvature_std: float = 0.026148280660833106
    accel_bounds: tuple[float, float] = (-9.8, 9.8)
    curvature_bounds: tuple[float, float] = (-0.33, 0.33)
    theta_lambda: float = 1e-6
    theta_ridge: float = 1e-8
    v_lambda: float = 1e-6
    v_ridge: float = 1e-4
    a_lambda: float = 1e-4
    a_ridge: float = 1e-4
    kappa_lambda: float = 1e-4
    kappa_ridge: float = 1e-4
    diffusion_steps: int = 10  # the model's own Euler steps (diffusion_cfg.num_inference_steps)
    # 1.5 diffusion_cfg.inference_guidance_weight: nav guidance's w when a call gives none.
    guidance_weight: float = 1.0

    def __post_init__(self) -> None:
        _positive(self, "in_proj_hidden_size", "in_proj_num_layers", "num_fourier_feats",
                  "n_waypoints", "diffusion_steps")
        if self.num_fourier_feats % 2:
            raise ConfigError(f"ActionConfig.num_fourier_feats = {self.num_fourier_feats} "
                              "must be even (sin and cos halves)")
        if self.dt <= 0:
            raise ConfigError(f"ActionConfig.dt = {self.dt} must be > 0 seconds")


@dataclass(frozen=True)
class TokenConfig:
    """Token ids and history tokenisation. Ids are fixed by the release, not by a tokenizer."""

    traj_token_start_idx: int = 151669
    traj_vocab_size: int = 4000
    # [inferred] num_bins of the release's traj_tokenizer_cfg: history tokens start after it.
    future_traj_num_bins: int = 3000
    hist_num_bins: int = 1000
    ego_xyz_min: tuple[float, float, float] = (-4.0, -4.0, -10.0)
    ego_xyz_max: tuple[float, float, float] = (4.0, 4.0, 10.0)
    tokens_per_history_traj: int = 48
    tokens_per_future_traj: int = 64
    # Image processor pixel budget (release: 163,840 / 196,608 -> 320x576 for 1080x1920 frames).
    min_pixels: int = 163840
    max_pixels: int = 196608
    # 2 Super: history tokens `<i0..i999>` start at `traj_token_start_idx` (history_id0 151669),
    # and its history holds only the 15 consecutive deltas (no origin delta, 45 tokens).
    history_first: bool = False
    history_origin_delta: bool = True

    def __post_init__(self) -> None:
        _positive(self, "traj_vocab_size", "hist_num_bins", "tokens_per_history_traj",
                  "min_pixels", "max_pixels")
        if self.future_traj_num_bins + self.hist_num_bins > self.traj_vocab_size:
            raise ConfigError(f"TokenConfig: future_traj_num_bins + hist_num_bins = "
                              f"{self.future_traj_num_bins + self.hist_num_bins} exceeds "
                              f"traj_vocab_size = {self.traj_vocab_size}")
        if self.min_pixels > self.max_pixels:
            raise ConfigError(f"TokenConfig.min_pixels = {self.min_pixels} exceeds "
                              f"max_pixels = {self.max_pixels}")

    @property
    def hist_token_start_idx(self) -> int:
        """First vocabulary id of the history bins (R1 [inferred] 151669 + 3000, 2 Super 151669)."""
        if self.history_first:
            return self.traj_token_start_idx
        return self.traj_token_start_idx + self.future_traj_num_bins


@dataclass(frozen=True)
class AlpamayoConfig:
    """The whole model. Constraints of the expert design are checked here."""

    text: TextConfig = field(default_factory=TextConfig)
    vision: VisionConfig = field(default_factory=VisionConfig)
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    action: ActionConfig = field(default_factory=ActionConfig)
    tokens: TokenConfig = field(default_factory=TokenConfig)
    expert_non_causal_attention: bool = True
    vlm_name_or_path: str = QWEN3VL_8B_NAMES[0]
    # `alpamayo_r1` or `alpamayo1_5` (config.json `model_type`): 1.5 writes camera and frame text
    # and the route span into the prompt, rebuilds the action buffers at load (not stored) and
    # feeds the action head without upcasting.
    model_type: str = MODEL_TYPE

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_FAMILIES:
            raise ConfigError(f"AlpamayoConfig.model_type = {self.model_type!r}: must be one of "
                              f"{sorted(MODEL_FAMILIES)}")
        if self.expert.head_dim != self.text.head_dim:
            raise ConfigError(f"ExpertConfig.head_dim = {self.expert.head_dim} must equal the "
                              f"VLM's head_dim = {self.text.head_dim} (shared KV cache)")
        if self.expert.num_heads % self.text.num_kv_heads:
            raise ConfigError(f"ExpertConfig.num_heads = {self.expert.num_heads} must be a "
                              f"multiple of the inherited num_kv_heads = {self.text.num_kv_heads}")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise ConfigError(f"VisionConfig.out_hidden_size = {self.vision.out_hidden_size} must "
                              f"equal TextConfig.hidden_size = {self.text.hidden_size}")
        if len(self.vision.deepstack_visual_indexes) > self.text.num_layers:
            raise ConfigError("VisionConfig.deepstack_visual_indexes has more entries than "
                              f"TextConfig.num_layers = {self.text.num_layers}")
        first_special = self.tokens.traj_token_start_idx + self.tokens.traj_vocab_size
        needed = first_special + len(SPECIAL_TOKEN_NAMES)
        if needed > self.text.vocab_size:
            raise ConfigError(f"TextConfig.vocab_size = {self.text.vocab_size} is too small for "
                              f"the trajectory and special tokens (needs >= {needed})")

    # ---- transformers configs -------------------------------------------------------------
    def to_qwen3vl_config(self) -> Qwen3VLConfig:
        """Return the VLM `Qwen3VLConfig`, every field explicit (transformers defaults differ)."""
        cfg = Qwen3VLConfig(
            text_config=self._text_dict(), vision_config=self._vision_dict(),
            image_token_id=IMAGE_PAD_ID, video_token_id=VIDEO_PAD_ID,
            vision_start_token_id=VISION_START_ID, vision_end_token_id=VISION_END_ID,
            tie_word_embeddings=False,
        )
        cfg._attn_implementation = "sdpa"  # flash-attn breaks on the expert's 4-D mask (spec 7.4)
        cfg.text_config._attn_implementation = "sdpa"
        cfg.vision_config._attn_implementation = "sdpa"
        return cfg

    def expert_text_config(self) -> Qwen3VLTextConfig:
        """Return the expert config: the VLM text config with `expert_cfg` overrides."""
        d = self._text_dict()
        e = self.expert
        d.update(hidden_size=e.hidden_size, intermediate_size=e.intermediate_size,
                 num_attention_heads=e.num_heads, head_dim=e.head_dim)
        for key in ("hidden_act", "attention_bias", "rms_norm_eps"):
            if getattr(e, key) is not None:
                d[key] = getattr(e, key)
        cfg = Qwen3VLTextConfig(**d)
        cfg._attn_implementation = "sdpa"
        return cfg

    def _text_dict(self) -> dict[str, Any]:
        t = self.text
        return dict(
            hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
            num_hidden_layers=t.num_layers, num_attention_heads=t.num_heads,
            num_key_value_heads=t.num_kv_heads, head_dim=t.head_dim, hidden_act=t.hidden_act,
            rms_norm_eps=t.rms_norm_eps, attention_bias=t.attention_bias, attention_dropout=0.0,
            max_position_embeddings=t.max_position_embeddings, vocab_size=t.vocab_size,
            rope_theta=t.rope_theta, bos_token_id=PAD_ID, eos_token_id=IM_END_ID,
            rope_scaling={"rope_type": "default", "mrope_section": list(t.mrope_section),
                          "mrope_interleaved": True},
            tie_word_embeddings=False, initializer_range=0.02,
        )

    def _vision_dict(self) -> dict[str, Any]:
        v = self.vision
        return dict(
            depth=v.depth, hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
            num_heads=v.num_heads, out_hidden_size=v.out_hidden_size,
            num_position_embeddings=v.num_position_embeddings,
            deepstack_visual_indexes=list(v.deepstack_visual_indexes), patch_size=v.patch_size,
            temporal_patch_size=v.temporal_patch_size, spatial_merge_size=v.spatial_merge_size,
            hidden_act=v.hidden_act, in_channels=3, initializer_range=0.02,
        )

    # ---- release config.json (release_config.py) -------------------------------------------
    def to_release_dict(self) -> dict[str, Any]:
        """config.json in the released layout (the fields the official loader reads)."""
        from .release_config import release_dict
        return release_dict(self)

    def to_vlm_dict(self) -> dict[str, Any]:
        """vlm_config.json: the Qwen3VLConfig in effect (written when it is not the 8B shape)."""
        from .release_config import vlm_dict
        return vlm_dict(self)

    @property
    def is_1_5(self) -> bool:
        """True for Alpamayo 1.5 (`model_type` alpamayo1_5)."""
        return self.model_type == MODEL_TYPE_1_5

    @property
    def is_2super(self) -> bool:
        """True for Alpamayo 2 Super (`model_type` alpamayo2_super)."""
        return self.model_type == MODEL_TYPE_2SUPER

    @property
    def camera_text(self) -> bool:
        """True when the prompt names each camera and frame (1.5 and 2 Super)."""
        return self.model_type in (MODEL_TYPE_1_5, MODEL_TYPE_2SUPER)

    @property
    def family(self) -> str:
        """`r1`, `1.5` or `2super`."""
        return MODEL_FAMILIES[self.model_type]

    @property
    def is_qwen3vl_8b_shape(self) -> bool:
        """True when text and vision configs are the release (Qwen3-VL-8B) shape."""
        return self.text == TextConfig() and self.vision == VisionConfig()

    @classmethod
    def from_release_dicts(cls, release: dict[str, Any],
                           vlm: dict[str, Any] | None) -> AlpamayoConfig:
        """Parse config.json (+ vlm_config.json, or the 8B shape for a known VLM name).

        Every field is honoured or refused (`UnsupportedConfigError`): `release_config.py`.
        """
        from .release_config import parse_release
        return parse_release(release, vlm)

    @classmethod
    def from_dir(cls, path: str | Path, vlm_config: str | Path | None = None) -> AlpamayoConfig:
        """Read `config.json` (+ `vlm_config.json` if present or given) from a checkpoint dir."""
        path = Path(path)
        release = _read_json(path / "config.json")
        vlm_path = Path(vlm_config) if vlm_config is not None else path / "vlm_config.json"
        vlm = _read_json(vlm_path) if vlm_path.is_file() or vlm_config is not None else None
        return cls.from_release_dicts(release, vlm)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise ConfigError(f"{path} does not exist: a checkpoint directory needs it") from err
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return data


# ---- presets ------------------------------------------------------------------------------
def full_config() -> AlpamayoConfig:
    """Return the released Alpamayo-R1-10B shape (11,078,526,194 parameters)."""
    return AlpamayoConfig()


def tiny_config() -> AlpamayoConfig:
    """Return the release structure at the official-tiny fixture's widths (CPU, < 1 s)."""
    return AlpamayoConfig(
        text=TextConfig(hidden_size=32, intermediate_size=64, num_layers=3, num_heads=8,
                        num_kv_heads=2, head_dim=16, mrope_section=(4, 2, 2)),
        vision=VisionConfig(depth=4, hidden_size=32, intermediate_size=64, num_heads=2,
                            out_hidden_size=32, num_position_embeddings=64,
                            deepstack_visual_indexes=(0, 1, 2)),
        expert=ExpertConfig(hidden_size=48, intermediate_size=96, num_heads=4, head_dim=16),
        action=ActionConfig(in_proj_hidden_size=64),
        tokens=TokenConfig(min_pixels=4096, max_pixels=8192),
        vlm_name_or_path="tiny",
    )


def full_1_5_config() -> AlpamayoConfig:
    """Return the released Alpamayo 1.5-10B shape (R1's backbone and expert sizes)."""
    return dataclasses.replace(full_config(), model_type=MODEL_TYPE_1_5)


def tiny_1_5_config() -> AlpamayoConfig:
    """Return the 1.5 structure at the official-tiny 1.5 fixture's widths."""
    return dataclasses.replace(tiny_config(), model_type=MODEL_TYPE_1_5)


def scaled_config(num_layers: int, vision_depth: int | None = None,
                  base: AlpamayoConfig | None = None) -> AlpamayoConfig:
    """Scale `base` (default full) to `num_layers` LM/expert layers and `vision_depth` ViT blocks.

    Widths stay as in `base`, so per-layer bytes and timings are those of the release; DeepStack
    indexes that no longer fit are dropped evenly. Any other scale: `dataclasses.replace`.
    """
    base = base or full_config()
    depth = vision_depth or base.vision.depth
    stack = tuple(i for i in base.vision.deepstack_visual_indexes if i < depth)
    if len(stack) < len(base.vision.deepstack_visual_indexes):
        n = min(len(base.vision.deepstack_visual_indexes), depth, num_layers)
        stack = tuple(sorted({(k + 1) * depth // (n + 1) for k in range(n)}))
    return dataclasses.replace(
        base, text=dataclasses.replace(base.text, num_layers=num_layers),
        vision=dataclasses.replace(base.vision, depth=depth, deepstack_visual_indexes=stack),
        vlm_name_or_path=base.vlm_name_or_path
        if (num_layers, depth) == (base.text.num_layers, base.vision.depth) else "scaled",
    )


def tiny_2super_config() -> AlpamayoConfig:
    """Return the 2 Super structure at the official-tiny 2 Super fixture's widths.

    VLM text 32 wide (3 layers, 4 q / 2 KV heads x 16), ViT depth 4, expert 48 wide with 4
    q-heads (q width 64 != hidden, as in the release), padded vocabulary 155,776, 45 history
    tokens, guidance weight 2.0 (the fixture's choice).
    """
    base = tiny_config()
    return dataclasses.replace(
        base, text=dataclasses.replace(base.text, num_heads=4, vocab_size=VOCAB_2SUPER),
        vision=dataclasses.replace(base.vision, deepstack_visual_indexes=(1, 2, 3)),
        action=dataclasses.replace(base.action, guidance_weight=2.0),
        tokens=dataclasses.replace(base.tokens, tokens_per_history_traj=45,
                                   tokens_per_future_traj=128, history_first=True,
                                   history_origin_delta=False),
        model_type=MODEL_TYPE_2SUPER)


def full_2super_config() -> AlpamayoConfig:
    """Return the Alpamayo 2 Super shape (35,817,641,202 parameters, 71.6 GB in bf16).

    The release config.json is not in the official repository: these shapes are what the
    official constructor builds from the configuration third parties report reading from the
    gated checkpoint (high confidence, not confirmed). VLM: Qwen3-VL-32B -- text hidden 5120,
    64 layers (~975 MB each in bf16), 64 q / 8 KV heads x 128, MLP 25600, vocabulary 155,776
    untied; ViT 27 blocks, hidden 1152, deepstack (8, 16, 24). Expert: hidden 1536, 64 layers
    (~75.5 MB each), 16 q / 8 KV heads x 128, MLP 6144. action_in_proj 4 x 1024 (the official
    code's default; the release value is unknown). A real checkpoint's config.json wins.
    """
    return AlpamayoConfig(
        text=TextConfig(hidden_size=5120, intermediate_size=25600, num_layers=64, num_heads=64,
                        num_kv_heads=8, head_dim=128, vocab_size=VOCAB_2SUPER),
        vision=VisionConfig(out_hidden_size=5120),
        expert=ExpertConfig(hidden_size=1536, intermediate_size=6144, num_heads=16,
                            head_dim=128),
        action=ActionConfig(in_proj_hidden_size=1024, in_proj_num_layers=4),
        tokens=TokenConfig(tokens_per_history_traj=45, tokens_per_future_traj=128,
                           history_first=True, history_origin_delta=False),
        vlm_name_or_path="Qwen/Qwen3-VL-32B-Instruct", model_type=MODEL_TYPE_2SUPER)


PRESETS = ("full", "tiny", "1.5", "tiny-1.5", "2super", "tiny-2super")


def preset(name: str) -> AlpamayoConfig:
    """Return a preset by name (`PRESETS`, or `layers=N[,vit=M][,family=1.5|2super]`).

    Fixed: `full`, `tiny` (R1), `1.5`, `tiny-1.5`, `2super`, `tiny-2super`.
    `layers=` keeps full widths with N LM/expert layers and M ViT blocks.
    """
    fixed = {"full": full_config, "tiny": tiny_config, "1.5": full_1_5_config,
             "tiny-1.5": tiny_1_5_config, "2super": full_2super_config,
             "tiny-2super": tiny_2super_config}
    families = {"r1": full_config, "1.5": full_1_5_config, "2super": full_2super_config}
    if name in fixed:
        return fixed[name]()
    if name.startswith("layers="):
        parts = dict(p.split("=", 1) for p in name.split(","))
        try:
            base = families[parts.pop("family", "r1")]()
            return scaled_config(int(parts["layers"]),
                                 int(parts["vit"]) if "vit" in parts else None, base)
        except (KeyError, ValueError) as err:
            raise ConfigError(f"preset {name!r}: expected "
                              "'layers=N[,vit=M][,family=1.5|2super]'") from err
    raise ConfigError(f"unknown preset {name!r}: use one of {list(PRESETS)} or "
                      "'layers=N[,vit=M][,family=1.5|2super]'")


# ---- fixed token ids (spec 2.3): they never depend on a tokenizer ----------------------------
PAD_ID = 151643            # <|endoftext|>
IM_START_ID = 151644
IM_END_ID = 151645
VISION_START_ID = 151652
VISION_END_ID = 151653
IMAGE_PAD_ID = 151655
VIDEO_PAD_ID = 151656
# R1 names; 1.5 renamed nine unused ones `_padding_N` with the same ids (spec section 2).
SPECIAL_TOKEN_NAMES = (
    "prompt_start", "prompt_end", "image_start", "image_pre_tkn", "image_end",
    "traj_history_start", "traj_history_pre_tkn", "traj_history_end", "cot_start", "cot_end",
    "meta_action_start", "meta_action_end", "traj_future_start", "traj_future_pre_tkn",
    "traj_future_end", "traj_history", "traj_future", "vectorized_wm", "vectorized_wm_start",
    "vectorized_wm_end", "vectorized_wm_pre_tkn", "route_start", "route_pad", "route_end",
    "question_start", "question_end", "answer_start", "answer_end",
)
FIRST_SPECIAL_ID = 155669  # = traj_token_start_idx 151669 + traj_vocab_size 4000
SPECIAL_IDS = {name: FIRST_SPECIAL_ID + i for i, name in enumerate(SPECIAL_TOKEN_NAMES)}
COT_START_ID = SPECIAL_IDS["cot_start"]               # 155677
COT_END_ID = SPECIAL_IDS["cot_end"]                   # 155678
TRAJ_FUTURE_START_ID = SPECIAL_IDS["traj_future_start"]  # 155681: the decode stop token
TRAJ_HISTORY_START_ID = SPECIAL_IDS["traj_history_start"]
TRAJ_HISTORY_END_ID = SPECIAL_IDS["traj_history_end"]
TRAJ_HISTORY_ID = SPECIAL_IDS["traj_history"]         # 155684: the 48 history placeholders
ROUTE_START_ID = SPECIAL_IDS["route_start"]           # 155690: 1.5 navigation text span
ROUTE_END_ID = SPECIAL_IDS["route_end"]               # 155692
QUESTION_START_ID = SPECIAL_IDS["question_start"]     # 155693: 1.5 VQA prompt
QUESTION_END_ID = SPECIAL_IDS["question_end"]         # 155694
ANSWER_START_ID = SPECIAL_IDS["answer_start"]         # 155695
ANSWER_END_ID = SPECIAL_IDS["answer_end"]             # 155696


def traj_token_ids() -> dict[str, int]:
    """Return the `traj_token_ids` block of config.json."""
    return {"future": SPECIAL_IDS["traj_future"], "future_end": SPECIAL_IDS["traj_future_end"],
            "future_start": TRAJ_FUTURE_START_ID, "history": TRAJ_HISTORY_ID,
            "history_end": TRAJ_HISTORY_END_ID, "history_start": TRAJ_HISTORY_START_ID}
