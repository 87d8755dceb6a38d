"""Alpamayo 2 Super's config.json: every field honoured, or refused (as `release_config`).

2 Super writes one file: the VLM's Qwen3VLConfig (`vlm_config`) and the expert's own
transformer config (`expert_config.llm_config`) are embedded. The expert's action heads,
action space and sampler sit under `expert_config`; the history tokenizer drops the origin
delta (`pad_origin_at_beginning` false: 45 tokens) and its `<i0..i999>` start at 151669.
"""
from __future__ import annotations

from typing import Any

from .config import (
    FIRST_SPECIAL_ID,
    MODEL_TYPE_2SUPER,
    SPECIAL_IDS,
    AlpamayoConfig,
    TokenConfig,
)
from .release_config import (
    EXPERT_IGNORED,
    EXPERT_READ,
    HIST_TOKENIZER_IGNORED,
    TEXT_IGNORED,
    TRAJ_TOKENIZER_IGNORED,
    _action,
    _expert,
    _Section,
    parse_vlm,
)

TOP_READ = (
    "dtype", "enable_expert", "expert_config", "frame_label", "future_traj_tokenizer_cfg",
    "future_vocab_size", "hist_traj_tokenizer_cfg", "history_vocab_size", "include_camera_ids",
    "include_frame_nums", "max_pixels", "min_pixels", "model_type", "padding_side",
    "token_layout", "tokens_per_future_traj", "tokens_per_history_traj", "traj_ids",
    "traj_vocab_size", "vlm_class", "vlm_config", "vlm_name_or_path", "torch_dtype",
)
TOP_IGNORED = {
    "cotrain_expert_vlm": "training only",
    "loss_weights": "training only",
}
EXPERT_CONFIG_READ = ("action_in_proj_cfg", "action_out_proj_cfg", "action_space_cfg",
                      "diffusion_cfg", "expert_non_causal_attention", "llm_config",
                      "model_type")
LLM_IGNORED = {**EXPERT_IGNORED, **TEXT_IGNORED}
HISTORY_TOKENS = 45  # 15 consecutive deltas x (x, y, z), no origin delta
# The official `traj_ids` (config.py:174-185): history <i0..i999>, future <i1000..i3999>.
TRAJ_IDS = {
    "history_id0": 151669, "future_id0": 152669,
    "history_start": SPECIAL_IDS["traj_history_start"],
    "history_end": SPECIAL_IDS["traj_history_end"],
    "future_start": SPECIAL_IDS["traj_future_start"],
    "future_end": SPECIAL_IDS["traj_future_end"],
    "history_pad": SPECIAL_IDS["traj_history"], "future_pad": SPECIAL_IDS["traj_future"],
}


def parse_release_2super(release: dict[str, Any]) -> AlpamayoConfig:
    """Parse a 2 Super config.json (VLM and expert configs embedded)."""
    top = _Section("config.json", release, TOP_READ, TOP_IGNORED, generic=True)
    top.fixed("model_type", (MODEL_TYPE_2SUPER,))
    top.fixed("vlm_class", ("Qwen3VLForConditionalGeneration",),
              "Qwen3VLForConditionalGeneration")
    top.fixed("enable_expert", (True,), True, ": trajectories need the expert")
    top.fixed("padding_side", ("left",), "left", ": one prompt per inference, never padded")
    top.fixed("token_layout", ("camera_ts",), "camera_ts",
              " (images camera-major, frames in time order)")
    top.fixed("frame_label", ("frame_num",), "frame_num", ' ("frame k " before each image)')
    top.fixed("include_camera_ids", (True,), True, " (camera names before their frames)")
    top.fixed("include_frame_nums", (True,), True, " (frame numbers before each image)")
    top.dtype("dtype", "torch_dtype")
    top.fixed("history_vocab_size", (1000,), 1000, " (<i0..i999>, history_id0 151669)")
    top.fixed("future_vocab_size", (3000,), 3000, " (<i1000..i3999>)")
    top.fixed("traj_vocab_size", (FIRST_SPECIAL_ID - 151669,), FIRST_SPECIAL_ID - 151669,
              ": the special-token ids are fixed")
    top.equal("traj_ids", TRAJ_IDS, "the release's token ids")
    vlm = top.get("vlm_config")
    text_cfg = vlm.get("text_config") if isinstance(vlm, dict) else None
    vocab = text_cfg.get("vocab_size") if isinstance(text_cfg, dict) else None
    text, vision = parse_vlm(vlm, vocab)
    ec = _Section("config.json expert_config", top.get("expert_config"), EXPERT_CONFIG_READ)
    ec.fixed("model_type", ("alpamayo2_super_expert",), "alpamayo2_super_expert")
    expert = _expert(_Section("config.json expert_config.llm_config", ec.get("llm_config"),
                              EXPERT_READ, LLM_IGNORED, generic=True), text)
    return AlpamayoConfig(
        text=text, vision=vision, expert=expert,
        action=_action(ec, expert.hidden_size, True), tokens=_tokens(top),
        vlm_name_or_path=top.get("vlm_name_or_path", "Qwen/Qwen3-VL-32B-Instruct"),
        model_type=MODEL_TYPE_2SUPER,
        expert_non_causal_attention=ec.fixed("expert_non_causal_attention", (True, False), True))


def _tokens(top: _Section) -> TokenConfig:
    """History tokenisation (no origin delta), future bins, the image pixel budget."""
    h = _Section("config.json hist_traj_tokenizer_cfg", top.get("hist_traj_tokenizer_cfg"),
                 ("_target_", "ego_xyz_min", "ego_xyz_max", "num_bins", "predict_yaw",
                  "pad_origin_at_beginning"), HIST_TOKENIZER_IGNORED)
    h.target("DeltaTrajectoryTokenizer")
    h.fixed("predict_yaw", (False,), False, ": history tokens are xyz deltas only")
    h.fixed("pad_origin_at_beginning", (False,), False,
            ": the release's 15 consecutive deltas (45 tokens)")
    h.fixed("num_bins", (1000,), 1000, ": history_vocab_size")
    f = _Section("config.json future_traj_tokenizer_cfg", top.get("future_traj_tokenizer_cfg"),
                 ("_target_", "num_bins"), TRAJ_TOKENIZER_IGNORED)
    f.target("DiscreteTrajectoryTokenizer")
    f.fixed("num_bins", (3000,), 3000, ": future_vocab_size")
    top.fixed("tokens_per_history_traj", (HISTORY_TOKENS,), HISTORY_TOKENS,
              " (15 history deltas x 3 axes)")
    return TokenConfig(
        future_traj_num_bins=3000, hist_num_bins=1000,
        ego_xyz_min=tuple(h.get("ego_xyz_min")), ego_xyz_max=tuple(h.get("ego_xyz_max")),
        tokens_per_history_traj=HISTORY_TOKENS,
        tokens_per_future_traj=top.get("tokens_per_future_traj", 128),
        min_pixels=top.get("min_pixels", None) or 163840,
        max_pixels=top.get("max_pixels", None) or 196608,
        history_first=True, history_origin_delta=False)


def release_dict_2super(cfg: AlpamayoConfig, common: dict[str, Any]) -> dict[str, Any]:
    """2 Super's config.json from the R1-layout sections `common` (`release_config`)."""
    a, tk, ex, t = cfg.action, cfg.tokens, cfg.expert, cfg.text
    llm: dict[str, Any] = {
        "model_type": "qwen3_vl_text", "dtype": "bfloat16", "hidden_size": ex.hidden_size,
        "intermediate_size": ex.intermediate_size, "num_attention_heads": ex.num_heads,
        "head_dim": ex.head_dim, "num_hidden_layers": t.num_layers,
        "num_key_value_heads": t.num_kv_heads, "rope_theta": t.rope_theta,
        "rope_scaling": {"rope_type": "default", "mrope_section": list(t.mrope_section),
                         "mrope_interleaved": True},
        "max_position_embeddings": t.max_position_embeddings,
    }
    for key, value in (("hidden_act", ex.hidden_act), ("attention_bias", ex.attention_bias),
                       ("rms_norm_eps", ex.rms_norm_eps)):
        if value is not None:  # None: the VLM text config's value, as parsing reads absence
            llm[key] = value
    diffusion = {**common["diffusion_cfg"], "inference_guidance_weight": a.guidance_weight}
    hist = {**common["hist_traj_tokenizer_cfg"], "pad_origin_at_beginning": False}
    return {
        "architectures": ["Alpamayo2Super"], "dtype": "bfloat16", "enable_expert": True,
        "expert_config": {
            "action_in_proj_cfg": common["action_in_proj_cfg"],
            "action_out_proj_cfg": common["action_out_proj_cfg"],
            "action_space_cfg": common["action_space_cfg"], "diffusion_cfg": diffusion,
            "expert_non_causal_attention": cfg.expert_non_causal_attention,
            "llm_config": llm, "model_type": "alpamayo2_super_expert",
        },
        "frame_label": "frame_num", "future_traj_tokenizer_cfg": common["traj_tokenizer_cfg"],
        "future_vocab_size": 3000, "hist_traj_tokenizer_cfg": hist, "history_vocab_size": 1000,
        "include_camera_ids": True, "include_frame_nums": True,
        "max_pixels": tk.max_pixels, "min_pixels": tk.min_pixels,
        "model_type": MODEL_TYPE_2SUPER, "padding_side": "left", "token_layout": "camera_ts",
        "tokens_per_future_traj": tk.tokens_per_future_traj,
        "tokens_per_history_traj": tk.tokens_per_history_traj, "traj_ids": dict(TRAJ_IDS),
        "traj_vocab_size": tk.traj_vocab_size,
        "vlm_class": "Qwen3VLForConditionalGeneration", "vlm_config": cfg.to_vlm_dict(),
        "vlm_name_or_path": cfg.vlm_name_or_path,
    }
