"""config.json and vlm_config.json of a released checkpoint: every field honoured, or refused.

Each JSON object of the two files is read by a `_Section` that knows three kinds of field:

- read: the value goes into `AlpamayoConfig` (and from there into the transformers configs and our
  modules), or it must hold the one value this implementation supports (`fixed`) -- a field set
  to anything else is refused with `UnsupportedConfigError` naming it, its value and what works;
- ignored on purpose: fields that cannot change the numbers, each with its reason (metadata,
  training-only settings, transformers' generic config attributes);
- anything else is refused by name: a newer checkpoint may add a field that changes the numbers,
  and running it as if the field were absent would silently give another trajectory.

Absent fields take the official code's default where it has one (`diffusion_cfg` without
`num_inference_steps` runs 10 steps, as the release does); the few without one are required.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from transformers.activations import ACT2FN

from .alpamayo import ACTION_DIM
from .config import (
    FIRST_SPECIAL_ID,
    IMAGE_PAD_ID,
    MODEL_FAMILIES,
    MODEL_TYPE_1_5,
    MODEL_TYPE_2SUPER,
    QWEN3VL_8B_NAMES,
    VIDEO_PAD_ID,
    VISION_END_ID,
    VISION_START_ID,
    ActionConfig,
    AlpamayoConfig,
    ExpertConfig,
    TextConfig,
    TokenConfig,
    VisionConfig,
    traj_token_ids,
)
from .errors import ConfigError, UnsupportedConfigError

HISTORY_TOKENS = 48  # 16 history poses x (x, y, z) deltas, one token each (no yaw)
DTYPE_NAMES = (None, "bfloat16", "float16", "float32")
# Any of these runs as SDPA: the expert's 4-D additive mask needs SDPA or eager, and flash
# attention cannot take it (the released wrapper runs SDPA too, spec pitfall 4).
ATTENTION_NAMES = (None, "sdpa", "eager", "flash_attention_2", "flash_attention_3")

# transformers' generic PretrainedConfig attributes (4.x and 5.x): metadata, output switches,
# labels, and the legacy generation defaults -- decoding here is set by `DecodeOptions`.
GENERIC_IGNORED = frozenset({
    "_name_or_path", "_commit_hash", "_attn_implementation_autoset", "architectures", "auto_map",
    "transformers_version", "output_hidden_states", "output_attentions", "return_dict",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
    "cross_attention_hidden_size", "tie_encoder_decoder", "id2label", "label2id", "problem_type",
    "finetuning_task", "prefix", "tokenizer_class", "task_specific_params", "torchscript",
    "pruned_heads", "tf_legacy_loss", "use_bfloat16", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "decoder_start_token_id", "sep_token_id", "pad_token_id",
    "bos_token_id", "eos_token_id", "use_cache",
})

# Ignored on purpose, per section, beyond GENERIC_IGNORED: field -> why it cannot change numbers.
TOP_IGNORED = {
    "tie_word_embeddings": "the VLM's own tie_word_embeddings (vlm_config.json) is the one read",
}
TEXT_IGNORED = {
    "attention_dropout": "dropout is off at inference",
    "initializer_range": "random initialisation only",
}
VISION_IGNORED = {"initializer_range": "random initialisation only",
                  "tie_word_embeddings": "the vision encoder has no word embeddings"}
EXPERT_IGNORED = {
    "vocab_size": "the expert has no token embedding (deleted, as in the official constructor)",
    "initializer_range": "random initialisation only",
    "attention_dropout": "dropout is off at inference",
    "attn_implementation": "the expert runs SDPA (its 4-D mask needs it)",
    "_attn_implementation": "the expert runs SDPA (its 4-D mask needs it)",
    "tie_word_embeddings": "the expert has no token embedding",
}
DIFFUSION_IGNORED = {"train_timestep_sampler": "training only"}
# Fields only Alpamayo 1.5 configs have (a R1 config naming them is refused as unknown).
TOP_IGNORED_1_5 = {
    "include_camera_ids": "stored but never read by the official 1.5 code: the camera names in "
                          "the prompt follow the cameras given (helper.create_message)",
    "include_frame_nums": "stored but never read by the official 1.5 code: frame numbers are "
                          "always written with the camera names",
}
DIFFUSION_READ_1_5 = ("inference_guidance_weight", "use_classifier_free_guidance")
HIST_TOKENIZER_IGNORED = {
    "ego_yaw_min": "used only with predict_yaw, which is refused",
    "ego_yaw_max": "used only with predict_yaw, which is refused",
    "load_weights": "the tokenizer has no weights",
}
TRAJ_TOKENIZER_IGNORED = {
    "_recursive_": "hydra instantiation switch",
    "action_space_cfg": "future-trajectory tokens are never decoded at inference",
    "dims_min": "future-trajectory tokens are never decoded at inference",
    "dims_max": "future-trajectory tokens are never decoded at inference",
    "load_weights": "the tokenizer has no weights",
}

_REQUIRED = object()


class _Section:
    """One JSON object of a config file, read field by field; unknown fields are refused."""

    def __init__(self, where: str, data: object, read: Iterable[str],
                 ignored: Mapping[str, str] | None = None, generic: bool = False) -> None:
        if not isinstance(data, dict):
            raise UnsupportedConfigError(where, data, "must be a JSON object")
        self.where, self.data = where, data
        known = set(read) | set(ignored or {}) | (GENERIC_IGNORED if generic else set())
        unknown = sorted(k for k in data if k not in known)
        if unknown:
            others = f" (also unknown: {unknown[1:]})" if len(unknown) > 1 else ""
            kinds = "; ignored on purpose: " + str(sorted(ignored)) if ignored else ""
            generic_note = " and transformers' generic config metadata" if generic else ""
            raise UnsupportedConfigError(
                self.field(unknown[0]), data[unknown[0]],
                f"unknown field{others}, which could change the model's numbers; this "
                f"implementation reads {sorted(read)}{kinds}{generic_note}. Update "
                "alpamayo_offload for this checkpoint, or remove the field if it is known "
                "not to change the numbers")

    def field(self, key: str) -> str:
        """Return the field's name as messages give it, e.g. `config.json expert_cfg.dtype`."""
        return f"{self.where}.{key}" if not self.where.endswith(".json") else f"{self.where} {key}"

    def get(self, key: str, default: Any = _REQUIRED) -> Any:
        """Return the field's value, or `default` when absent (absent and required: refused)."""
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            raise ConfigError(f"{self.field(key)} is missing; it must be an Alpamayo config as "
                              "released")
        return default

    def fixed(self, key: str, supported: tuple[Any, ...], default: Any = _REQUIRED,
              why: str = "") -> Any:
        """Return the field's value, refused unless it is one of `supported`."""
        value = self.get(key, default)
        if not any(value == s and type(value) is type(s) for s in supported):  # 1 is not True
            shown = supported[0] if len(supported) == 1 else list(supported)
            raise UnsupportedConfigError(self.field(key), value,
                                         f"this implementation supports {shown!r}{why}")
        return value

    def equal(self, key: str, expected: Any, why: str) -> None:
        """Refuse the field unless absent or equal to `expected` (a value fixed elsewhere)."""
        value = self.data.get(key, expected)
        if value != expected:
            raise UnsupportedConfigError(self.field(key), value, f"must be {expected!r}: {why}")

    def target(self, class_name: str) -> None:
        """Refuse a hydra `_target_` naming another class (the module path may differ)."""
        value = self.get("_target_")
        if not isinstance(value, str) or value.rsplit(".", 1)[-1] != class_name:
            raise UnsupportedConfigError(self.field("_target_"), value,
                                         f"this implementation builds only {class_name}")

    def activation(self, key: str, default: str | None) -> str | None:
        """Return an activation name transformers knows (ACT2FN), or refuse it."""
        value = self.get(key, default)
        if value is not None and value not in ACT2FN:
            raise UnsupportedConfigError(self.field(key), value,
                                         f"transformers' activations are {sorted(ACT2FN)}")
        return value

    def dtype(self, *keys: str) -> None:
        """Check storage dtype names; the tensors' own dtypes come from the safetensors files."""
        for key in keys:
            self.fixed(key, DTYPE_NAMES, None)


# ---- config.json ----------------------------------------------------------------------------
TOP_READ = (
    "action_in_proj_cfg", "action_out_proj_cfg", "action_space_cfg", "add_special_tokens",
    "attn_implementation", "diffusion_cfg", "dtype", "expert_cfg", "expert_non_causal_attention",
    "hist_traj_tokenizer_cfg", "keep_same_dtype", "max_pixels", "min_pixels", "model_dtype",
    "model_type", "tokens_per_future_traj", "tokens_per_history_traj", "traj_token_ids",
    "traj_token_start_idx", "traj_tokenizer_cfg", "traj_vocab_size", "vlm_backend",
    "vlm_name_or_path", "vocab_size", "torch_dtype",
)
ACTION_SPACE_READ = (
    "_target_", "a_lambda", "a_ridge", "accel_bounds", "accel_mean", "accel_std",
    "curvature_bounds", "curvature_mean", "curvature_std", "dt", "kappa_lambda", "kappa_ridge",
    "n_waypoints", "theta_lambda", "theta_ridge", "v_lambda", "v_ridge",
)
EXPERT_READ = (
    "hidden_size", "intermediate_size", "num_attention_heads", "head_dim", "hidden_act",
    "attention_bias", "rms_norm_eps", "num_hidden_layers", "num_key_value_heads", "rope_theta",
    "rope_scaling", "rope_parameters", "max_position_embeddings", "model_type", "dtype",
    "torch_dtype",
)


def parse_release(release: dict[str, Any], vlm: dict[str, Any] | None) -> AlpamayoConfig:
    """Parse config.json (+ vlm_config.json, or the 8B shape for a known VLM name)."""
    model_type = release.get("model_type") if isinstance(release, dict) else None
    if model_type not in MODEL_FAMILIES:
        raise ConfigError(f"config.json model_type = {model_type!r}: expected one of "
                          f"{sorted(MODEL_FAMILIES)} (Alpamayo-R1, 1.5 or 2 Super)")
    if model_type == MODEL_TYPE_2SUPER:
        if vlm is not None:
            raise ConfigError("a 2 Super config.json embeds its VLM config (vlm_config); "
                              "remove the separate vlm_config.json")
        from .release_config_2super import parse_release_2super
        return parse_release_2super(release)
    is_1_5 = model_type == MODEL_TYPE_1_5
    top = _Section("config.json", release, TOP_READ,
                   {**TOP_IGNORED, **(TOP_IGNORED_1_5 if is_1_5 else {})}, generic=True)
    top.fixed("add_special_tokens", (True,), False,
              ": the special-token ids (e.g. <|traj_future_start|> = 155681) assume it")
    top.fixed("keep_same_dtype", (True,), True,
              ": the action heads run in the expert's dtype")
    top.fixed("vlm_backend", ("qwenvl3",), "qwenvl3")
    top.fixed("attn_implementation", ATTENTION_NAMES, None, " (each runs as SDPA)")
    top.dtype("dtype", "model_dtype", "torch_dtype")
    name = top.get("vlm_name_or_path", QWEN3VL_8B_NAMES[0])
    vocab_size = top.get("vocab_size")
    if vlm is None:
        if name not in QWEN3VL_8B_NAMES:
            raise ConfigError(f"config.json vlm_name_or_path = {name!r} is not a known "
                              "Qwen3-VL-8B name and no vlm_config.json was given: put the "
                              "VLM's Qwen3VLConfig as vlm_config.json beside config.json")
        text, vision = TextConfig(vocab_size=vocab_size), VisionConfig()
    else:
        text, vision = parse_vlm(vlm, vocab_size)
    expert = _expert(_Section("config.json expert_cfg", top.get("expert_cfg"), EXPERT_READ,
                              EXPERT_IGNORED, generic=True), text)
    return AlpamayoConfig(text=text, vision=vision, expert=expert,
                          action=_action(top, expert.hidden_size, is_1_5), tokens=_tokens(top),
                          vlm_name_or_path=name, model_type=model_type,
                          expert_non_causal_attention=top.fixed(
                              "expert_non_causal_attention", (True, False), True))


def _action(top: _Section, expert_hidden: int, is_1_5: bool) -> ActionConfig:
    """action_space_cfg, action_in_proj_cfg, action_out_proj_cfg, diffusion_cfg -> ActionConfig.

    The heads' sizes the official code injects (`in_dims`, `out_dim`, `in_features`,
    `out_features`, `x_dims`) are refused where a config names other ones. 1.5's diffusion
    config adds the nav-guidance weight (read: the weight a guided rollout uses unless the call
    gives one) and `use_classifier_free_guidance`, which must stay off: the official standard
    rollout fails with it on, and guidance is switched per call (`DecodeOptions`).
    """
    s = _Section("config.json action_space_cfg", top.get("action_space_cfg"), ACTION_SPACE_READ)
    s.target("UnicycleAccelCurvatureActionSpace")
    ai = _Section("config.json action_in_proj_cfg", top.get("action_in_proj_cfg"),
                  ("_target_", "hidden_size", "max_freq", "num_enc_layers", "num_fourier_feats",
                   "in_dims", "out_dim"))
    ai.target("PerWaypointActionInProjV2")
    d = _Section("config.json diffusion_cfg", top.get("diffusion_cfg"),
                 ("_target_", "int_method", "num_inference_steps", "x_dims",
                  *(DIFFUSION_READ_1_5 if is_1_5 else ())), DIFFUSION_IGNORED)
    d.target("FlowMatching")
    d.fixed("int_method", ("euler",), "euler")
    d.fixed("use_classifier_free_guidance", (False,), False,
            ": guidance is chosen per inference (guidance_weight); the official standard "
            "rollout refuses to run with it on")
    weight = d.get("inference_guidance_weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise UnsupportedConfigError(d.field("inference_guidance_weight"), weight,
                                     "must be a number (1 = guided only, 0 = unguided only)")
    n_waypoints = s.get("n_waypoints")
    ai.equal("in_dims", [n_waypoints, ACTION_DIM], "(n_waypoints, 2) of the action space")
    ai.equal("out_dim", expert_hidden, "the expert's hidden_size")
    ao = _Section("config.json action_out_proj_cfg", top.get("action_out_proj_cfg"),
                  ("_target_", "bias", "in_features", "out_features"))
    ao.target("Linear")
    ao.fixed("bias", (True,), True)
    ao.equal("in_features", expert_hidden, "the expert's hidden_size")
    ao.equal("out_features", ACTION_DIM, "(acceleration, curvature)")
    x_dims = d.get("x_dims", None)
    if x_dims not in (None, "???", [n_waypoints, ACTION_DIM]):
        raise UnsupportedConfigError(d.field("x_dims"), x_dims,
                                     f"must be '???' (filled in) or [{n_waypoints}, 2]")
    steps = d.get("num_inference_steps", 10)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UnsupportedConfigError(d.field("num_inference_steps"), steps,
                                     "must be an integer >= 1 (Euler steps)")
    return ActionConfig(
        in_proj_hidden_size=ai.get("hidden_size"), in_proj_num_layers=ai.get("num_enc_layers"),
        num_fourier_feats=ai.get("num_fourier_feats"), max_freq=float(ai.get("max_freq")),
        n_waypoints=n_waypoints, dt=s.get("dt"), accel_mean=s.get("accel_mean"),
        accel_std=s.get("accel_std"), curvature_mean=s.get("curvature_mean"),
        curvature_std=s.get("curvature_std"), accel_bounds=tuple(s.get("accel_bounds")),
        curvature_bounds=tuple(s.get("curvature_bounds")), theta_lambda=s.get("theta_lambda"),
        theta_ridge=s.get("theta_ridge"), v_lambda=s.get("v_lambda"), v_ridge=s.get("v_ridge"),
        a_lambda=s.get("a_lambda"), a_ridge=s.get("a_ridge"),
        kappa_lambda=s.get("kappa_lambda"), kappa_ridge=s.get("kappa_ridge"),
        diffusion_steps=steps, guidance_weight=float(weight),
    )


def _expert(e: _Section, text: TextConfig) -> ExpertConfig:
    """expert_cfg: the official code sets each entry on a copy of the VLM text config."""
    e.fixed("model_type", ("qwen3_vl_text",), "qwen3_vl_text")
    e.dtype("dtype", "torch_dtype")
    shared = "expert layer i reads and writes the VLM's KV-cache layer i"
    e.equal("num_hidden_layers", text.num_layers, shared)
    e.equal("num_key_value_heads", text.num_kv_heads, shared)
    e.equal("max_position_embeddings", text.max_position_embeddings,
            "the expert's positions continue the VLM's")
    given = [k for k in ("rope_theta", "rope_scaling", "rope_parameters") if k in e.data]
    if given:
        inherited = {"rope_theta": text.rope_theta, "rope_scaling": {
            "rope_type": "default", "mrope_section": list(text.mrope_section),
            "mrope_interleaved": True}}
        theta, section = _rope(e, {**inherited, **e.data})
        if (theta, section) != (text.rope_theta, text.mrope_section):
            raise UnsupportedConfigError(
                e.field(given[0]), {"rope_theta": theta, "mrope_section": list(section)},
                f"must be the VLM's (rope_theta {text.rope_theta}, mrope_section "
                f"{list(text.mrope_section)}): the expert's positions continue the VLM's")
    eps = e.get("rms_norm_eps", None)
    return ExpertConfig(
        hidden_size=e.get("hidden_size", text.hidden_size),
        intermediate_size=e.get("intermediate_size", text.intermediate_size),
        num_heads=e.get("num_attention_heads", text.num_heads),
        head_dim=e.get("head_dim", text.head_dim),
        hidden_act=e.activation("hidden_act", None),
        attention_bias=e.fixed("attention_bias", (None, False, True), None),
        rms_norm_eps=float(eps) if eps is not None else None,
    )


def _tokens(top: _Section) -> TokenConfig:
    """Token ids, history tokenisation and the image pixel budget."""
    h = _Section("config.json hist_traj_tokenizer_cfg", top.get("hist_traj_tokenizer_cfg"),
                 ("_target_", "ego_xyz_min", "ego_xyz_max", "num_bins", "predict_yaw"),
                 HIST_TOKENIZER_IGNORED)
    h.target("DeltaTrajectoryTokenizer")
    h.fixed("predict_yaw", (False,), False, ": history tokens are xyz deltas only")
    traj = top.get("traj_tokenizer_cfg", None)
    future_bins = 0
    if traj is not None:
        t = _Section("config.json traj_tokenizer_cfg", traj, ("_target_", "num_bins"),
                     TRAJ_TOKENIZER_IGNORED)
        t.target("DiscreteTrajectoryTokenizer")
        future_bins = t.get("num_bins")
    start, size = top.get("traj_token_start_idx"), top.get("traj_vocab_size")
    if start + size != FIRST_SPECIAL_ID:
        raise UnsupportedConfigError(
            "config.json traj_token_start_idx + traj_vocab_size", start + size,
            f"must be {FIRST_SPECIAL_ID} (the release's 151669 + 4000): the special-token "
            "ids are fixed")
    top.equal("traj_token_ids", traj_token_ids(), "the release's special-token ids")
    top.fixed("tokens_per_history_traj", (HISTORY_TOKENS,), HISTORY_TOKENS,
              " (16 history poses x 3 axes)")
    return TokenConfig(
        traj_token_start_idx=start, traj_vocab_size=size, future_traj_num_bins=future_bins,
        hist_num_bins=h.get("num_bins"), ego_xyz_min=tuple(h.get("ego_xyz_min")),
        ego_xyz_max=tuple(h.get("ego_xyz_max")), tokens_per_history_traj=HISTORY_TOKENS,
        tokens_per_future_traj=top.get("tokens_per_future_traj", 64),
        min_pixels=top.get("min_pixels", None) or 163840,
        max_pixels=top.get("max_pixels", None) or 196608,
    )


# ---- vlm_config.json ------------------------------------------------------------------------
VLM_READ = ("text_config", "vision_config", "image_token_id", "video_token_id",
            "vision_start_token_id", "vision_end_token_id", "tie_word_embeddings", "model_type",
            "vocab_size", "dtype", "torch_dtype")
TEXT_READ = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "attention_bias",
    "max_position_embeddings", "vocab_size", "rope_theta", "rope_scaling", "rope_parameters",
    "tie_word_embeddings", "model_type", "dtype", "torch_dtype",
)
VISION_READ = (
    "depth", "hidden_size", "intermediate_size", "num_heads", "out_hidden_size",
    "num_position_embeddings", "deepstack_visual_indexes", "patch_size", "temporal_patch_size",
    "spatial_merge_size", "hidden_act", "in_channels", "rope_parameters", "model_type", "dtype",
    "torch_dtype",
)


def parse_vlm(vlm: dict[str, Any], vocab_size: int) -> tuple[TextConfig, VisionConfig]:
    """Qwen3VLConfig dict (as saved by transformers 4.57 or 5.x) -> our text/vision configs.

    `vocab_size` is config.json's: the official code sets the VLM's vocabulary to it.
    """
    top = _Section("vlm_config.json", vlm, VLM_READ, generic=True)
    top.fixed("model_type", ("qwen3_vl",), "qwen3_vl")
    top.dtype("dtype", "torch_dtype")
    for key, fixed_id in (("image_token_id", IMAGE_PAD_ID), ("video_token_id", VIDEO_PAD_ID),
                          ("vision_start_token_id", VISION_START_ID),
                          ("vision_end_token_id", VISION_END_ID)):
        top.fixed(key, (fixed_id,), fixed_id, ": the prompt builder uses the release's ids")
    untied = ": the checkpoint holds lm_head apart from embed_tokens"
    top.fixed("tie_word_embeddings", (False,), False, untied)
    t = _Section("vlm_config.json text_config", top.get("text_config"), TEXT_READ, TEXT_IGNORED,
                 generic=True)
    t.fixed("model_type", ("qwen3_vl_text",), "qwen3_vl_text")
    t.fixed("tie_word_embeddings", (False,), False, untied)
    t.dtype("dtype", "torch_dtype")
    theta, section = _rope(t, t.data)
    text = TextConfig(
        hidden_size=t.get("hidden_size"), intermediate_size=t.get("intermediate_size"),
        num_layers=t.get("num_hidden_layers"), num_heads=t.get("num_attention_heads"),
        num_kv_heads=t.get("num_key_value_heads"), head_dim=t.get("head_dim"),
        rms_norm_eps=t.get("rms_norm_eps"), rope_theta=theta, mrope_section=section,
        max_position_embeddings=t.get("max_position_embeddings"), vocab_size=vocab_size,
        hidden_act=t.activation("hidden_act", "silu"),
        attention_bias=t.fixed("attention_bias", (False, True), False),
    )
    v = _Section("vlm_config.json vision_config", top.get("vision_config"), VISION_READ,
                 VISION_IGNORED, generic=True)
    v.fixed("model_type", ("qwen3_vl", "qwen3_vl_vision"), "qwen3_vl_vision")
    v.fixed("in_channels", (3,), 3, ": frames are RGB")
    v.dtype("dtype", "torch_dtype")
    rope = v.get("rope_parameters", None)
    if rope is not None and rope != {"rope_type": "axial", "rope_theta": 10000.0}:
        raise UnsupportedConfigError(v.field("rope_parameters"), rope,
                                     "this implementation supports {'rope_type': 'axial', "
                                     "'rope_theta': 10000.0} (Qwen3-VL's vision RoPE)")
    vision = VisionConfig(
        depth=v.get("depth"), hidden_size=v.get("hidden_size"),
        intermediate_size=v.get("intermediate_size"), num_heads=v.get("num_heads"),
        out_hidden_size=v.get("out_hidden_size"),
        num_position_embeddings=v.get("num_position_embeddings"),
        deepstack_visual_indexes=tuple(v.get("deepstack_visual_indexes")),
        patch_size=v.get("patch_size"), temporal_patch_size=v.get("temporal_patch_size"),
        spatial_merge_size=v.get("spatial_merge_size"),
        hidden_act=v.activation("hidden_act", "gelu_pytorch_tanh"),
    )
    return text, vision


def _rope(section: _Section, data: Mapping[str, Any]) -> tuple[float, tuple[int, int, int]]:
    """M-RoPE from `rope_scaling` + `rope_theta` (4.57) or `rope_parameters` (5.x).

    -> (rope_theta, mrope_section); only the interleaved default M-RoPE is supported.
    """
    key = "rope_parameters" if data.get("rope_parameters") else "rope_scaling"
    rope = data.get(key) or {}
    if not isinstance(rope, dict):
        raise UnsupportedConfigError(section.field(key), rope, "must be a JSON object")
    extra = sorted(set(rope) - {"rope_type", "type", "mrope_section", "mrope_interleaved",
                                "rope_theta"})
    if extra:
        raise UnsupportedConfigError(section.field(f"{key}.{extra[0]}"), rope[extra[0]],
                                     "unknown RoPE field, which could change the positions")
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise UnsupportedConfigError(section.field(f"{key}.rope_type"), kind,
                                     "this implementation supports 'default' (M-RoPE)")
    if rope.get("mrope_interleaved", True) is not True:
        raise UnsupportedConfigError(section.field(f"{key}.mrope_interleaved"),
                                     rope["mrope_interleaved"],
                                     "this implementation supports True (Qwen3-VL's layout)")
    theta = rope.get("rope_theta", data.get("rope_theta", 5_000_000.0))
    return float(theta), tuple(rope.get("mrope_section", (24, 20, 20)))


# ---- writing ---------------------------------------------------------------------------------
def release_dict(cfg: AlpamayoConfig) -> dict[str, Any]:
    """config.json in the released layout (the fields the official loader reads)."""
    a, tk, ex = cfg.action, cfg.tokens, cfg.expert
    pkg = "alpamayo1_5" if cfg.is_1_5 else "alpamayo_r1"
    space = {
        "_target_": f"{pkg}.action_space.UnicycleAccelCurvatureActionSpace",
        "a_lambda": a.a_lambda, "a_ridge": a.a_ridge, "accel_bounds": list(a.accel_bounds),
        "accel_mean": a.accel_mean, "accel_std": a.accel_std,
        "curvature_bounds": list(a.curvature_bounds), "curvature_mean": a.curvature_mean,
        "curvature_std": a.curvature_std, "dt": a.dt, "kappa_lambda": a.kappa_lambda,
        "kappa_ridge": a.kappa_ridge, "n_waypoints": a.n_waypoints,
        "theta_lambda": a.theta_lambda, "theta_ridge": a.theta_ridge,
        "v_lambda": a.v_lambda, "v_ridge": a.v_ridge,
    }
    expert: dict[str, Any] = {"dtype": "bfloat16", "head_dim": ex.head_dim,
                              "hidden_size": ex.hidden_size,
                              "intermediate_size": ex.intermediate_size,
                              "num_attention_heads": ex.num_heads}
    for key, value in (("hidden_act", ex.hidden_act), ("attention_bias", ex.attention_bias),
                       ("rms_norm_eps", ex.rms_norm_eps)):
        if value is not None:  # None: inherited from the VLM text config
            expert[key] = value
    diffusion: dict[str, Any] = {"_target_": f"{pkg}.diffusion.flow_matching.FlowMatching",
                                 "int_method": "euler", "num_inference_steps": a.diffusion_steps,
                                 "x_dims": "???"}
    family: dict[str, Any] = {}
    if cfg.is_1_5:
        diffusion.update(inference_guidance_weight=a.guidance_weight,
                         use_classifier_free_guidance=False)
        family = {"include_camera_ids": False, "include_frame_nums": False}
    release = {
        **family,
        "action_in_proj_cfg": {
            "_target_": f"{pkg}.models.action_in_proj.PerWaypointActionInProjV2",
            "hidden_size": a.in_proj_hidden_size, "max_freq": a.max_freq,
            "num_enc_layers": a.in_proj_num_layers, "num_fourier_feats": a.num_fourier_feats,
        },
        "action_out_proj_cfg": {"_target_": "torch.nn.Linear"},
        "action_space_cfg": space,
        "add_special_tokens": True,
        "architectures": ["Alpamayo1_5" if cfg.is_1_5 else "AlpamayoR1"],
        "attn_implementation": "sdpa",
        "diffusion_cfg": diffusion,
        "dtype": "bfloat16",
        "expert_cfg": expert,
        "expert_non_causal_attention": cfg.expert_non_causal_attention,
        "hist_traj_tokenizer_cfg": {
            "_target_": f"{pkg}.models.delta_tokenizer.DeltaTrajectoryTokenizer",
            "ego_xyz_max": list(tk.ego_xyz_max), "ego_xyz_min": list(tk.ego_xyz_min),
            "num_bins": tk.hist_num_bins, "predict_yaw": False,
        },
        "keep_same_dtype": True,
        "max_pixels": tk.max_pixels,
        "min_pixels": tk.min_pixels,
        "model_dtype": "bfloat16",
        "model_type": cfg.model_type,
        "tokens_per_future_traj": tk.tokens_per_future_traj,
        "tokens_per_history_traj": tk.tokens_per_history_traj,
        "traj_token_ids": traj_token_ids(),
        "traj_token_start_idx": tk.traj_token_start_idx,
        "traj_tokenizer_cfg": {
            "_recursive_": False,
            "_target_": f"{pkg}.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
            "action_space_cfg": dict(space), "dims_max": [10.0, 10.0],
            "dims_min": [-10.0, -10.0], "num_bins": tk.future_traj_num_bins,
        },
        "traj_vocab_size": tk.traj_vocab_size,
        "vlm_backend": "qwenvl3",
        "vlm_name_or_path": cfg.vlm_name_or_path,
        "vocab_size": cfg.text.vocab_size,
    }
    if cfg.is_2super:
        from .release_config_2super import release_dict_2super
        return release_dict_2super(cfg, release)
    return release


def vlm_dict(cfg: AlpamayoConfig) -> dict[str, Any]:
    """vlm_config.json: the Qwen3VLConfig in effect (written when it is not the 8B shape)."""
    d = cfg.to_qwen3vl_config().to_dict()
    d["architectures"] = ["Qwen3VLForConditionalGeneration"]
    return d
