"""The Alpamayo-R1 module tree, with the release's attribute paths and checkpoint keys.

    AlpamayoR1
    |- vlm              Qwen3VLForConditionalGeneration (visual, language_model, lm_head)
    |- expert           Qwen3VLTextModel without embed_tokens; layer i reads/writes KV layer i
    |- action_space     UnicycleAccelCurvatureActionSpace (buffers only)
    |- diffusion        FlowMatching (no parameters)
    |- action_in_proj   PerWaypointActionInProjV2
    `- action_out_proj  Linear(expert hidden -> 2)

Alpamayo 2 Super keeps the expert transformer and the action modules in one `ExpertModel`
under `expert` (release keys `expert.expert.*`, `expert.action_in_proj.*`, ...). Code reaches
them through `expert_lm` (the transformer) and `heads` (the owner of `action_space`,
`diffusion`, `action_in_proj`, `action_out_proj`), the same for every family.

Construction is cheap under `torch.device("meta")`; `materialize_random` then fills weights on the
target device from a seed (never in host RAM for a GPU target), `checkpoint.load_checkpoint`
fills them from safetensors. Nothing here caches a device or a weight: the runtime may move layers.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import Qwen3VLForConditionalGeneration
from transformers.models.qwen3_vl.modeling_qwen3_vl import (
    Qwen3VLTextModel,
    Qwen3VLTextRotaryEmbedding,
    Qwen3VLVisionRotaryEmbedding,
)

from .action_proj import FourierEncoderV2, PerWaypointActionInProjV2
from .action_space import UnicycleAccelCurvatureActionSpace
from .config import AlpamayoConfig
from .flow_matching import FlowMatching
from .host_memory import require_host_memory, tensor_bytes

ACTION_DIM = 2  # (acceleration, curvature)
INIT_STD = 0.02  # transformers' initializer_range for Qwen3-VL


def _add_action_modules(owner: nn.Module, cfg: AlpamayoConfig) -> None:
    """Give `owner` the action space, sampler and action heads (release attribute names)."""
    owner.action_space = UnicycleAccelCurvatureActionSpace(cfg.action,
                                                           persistent=not cfg.is_1_5)
    owner.diffusion = FlowMatching((cfg.action.n_waypoints, ACTION_DIM),
                                   cfg.action.diffusion_steps)
    owner.action_in_proj = PerWaypointActionInProjV2(cfg.action, ACTION_DIM,
                                                     cfg.expert.hidden_size, cfg.is_1_5)
    owner.action_out_proj = nn.Linear(cfg.expert.hidden_size, ACTION_DIM)


def _expert_lm(cfg: AlpamayoConfig) -> Qwen3VLTextModel:
    lm = Qwen3VLTextModel(cfg.expert_text_config())
    del lm.embed_tokens  # the expert reads action embeddings, never token ids
    return lm


class ExpertModel(nn.Module):
    """Alpamayo 2 Super's expert: its transformer (`expert`) and the action modules."""

    def __init__(self, cfg: AlpamayoConfig) -> None:
        super().__init__()
        self.expert = _expert_lm(cfg)
        _add_action_modules(self, cfg)


class AlpamayoR1(nn.Module):
    """Alpamayo-R1 / 1.5 / 2 Super: Qwen3-VL reasoning + flow-matching action expert."""

    def __init__(self, cfg: AlpamayoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.vlm = Qwen3VLForConditionalGeneration(cfg.to_qwen3vl_config())
        if cfg.is_2super:
            self.expert = ExpertModel(cfg)
        else:
            self.expert = _expert_lm(cfg)
            _add_action_modules(self, cfg)

    @property
    def expert_lm(self) -> Qwen3VLTextModel:
        """The expert transformer (R1/1.5 `expert`, 2 Super `expert.expert`)."""
        return self.expert.expert if self.cfg.is_2super else self.expert

    @property
    def heads(self) -> nn.Module:
        """The module owning `action_space`, `diffusion`, `action_in_proj`, `action_out_proj`."""
        return self.expert if self.cfg.is_2super else self

    @property
    def expert_path(self) -> str:
        """Attribute path of the expert transformer (`expert` or `expert.expert`)."""
        return "expert.expert" if self.cfg.is_2super else "expert"

    @property
    def heads_prefix(self) -> str:
        """Key prefix of the action modules (`""` or `expert.`)."""
        return "expert." if self.cfg.is_2super else ""

    # ---- what the runtime plans and streams ----------------------------------------------
    def layer_sequences(self) -> dict[str, list[nn.Module]]:
        """Return the repeated blocks, in execution order: ViT blocks, LM layers, expert layers."""
        return {"vit": list(self.vlm.model.visual.blocks),
                "lm": list(self.vlm.model.language_model.layers),
                "expert": list(self.expert_lm.layers)}

    def sequence_prefixes(self) -> dict[str, str]:
        """Checkpoint key prefix of each layer sequence (layer i's keys follow it with `i.`)."""
        return {"vit": "vlm.model.visual.blocks.", "lm": "vlm.model.language_model.layers.",
                "expert": f"{self.expert_path}.layers."}

    def non_layer_modules(self) -> dict[str, nn.Module]:
        """Every other module with tensors, keyed by attribute path (disjoint from the layers)."""
        visual, lm = self.vlm.model.visual, self.vlm.model.language_model
        ex, heads, hp = self.expert_lm, self.heads, self.heads_prefix
        return {
            "vlm.model.visual.patch_embed": visual.patch_embed,
            "vlm.model.visual.pos_embed": visual.pos_embed,
            "vlm.model.visual.rotary_pos_emb": visual.rotary_pos_emb,
            "vlm.model.visual.merger": visual.merger,
            "vlm.model.visual.deepstack_merger_list": visual.deepstack_merger_list,
            "vlm.model.language_model.embed_tokens": lm.embed_tokens,
            "vlm.model.language_model.norm": lm.norm,
            "vlm.model.language_model.rotary_emb": lm.rotary_emb,
            "vlm.lm_head": self.vlm.lm_head,
            f"{self.expert_path}.norm": ex.norm,
            f"{self.expert_path}.rotary_emb": ex.rotary_emb,
            f"{hp}action_in_proj": heads.action_in_proj,
            f"{hp}action_out_proj": heads.action_out_proj,
            f"{hp}action_space": heads.action_space,
        }

    # ---- non-learned buffers ---------------------------------------------------------------
    def rebuild_buffers(self, device: torch.device, freqs_dtype: torch.dtype,
                        names: set[str] | None = None) -> None:
        """Recreate non-learned buffers from the config on `device`.

        Always the RoPE `inv_freq` tables (non-persistent, never in a checkpoint); R1's persistent
        `freqs` / `action_space.*` buffers only where `names` lists them (None = all). `freqs` are
        cast to `freqs_dtype` (a bf16 release stores them bf16-rounded, `keep_same_dtype`).
        Alpamayo 1.5 stores neither: both are always rebuilt as its constructor builds them --
        `freqs` rounded through the expert's bfloat16, the action-space constants rounded to the
        load dtype `freqs_dtype` (exact in float32).
        2 Super stores them in the checkpoint it writes, but the release omits them: the missing
        ones are rebuilt as its `from_pretrained` does, under the load dtype (bf16-rounded
        `freqs` and action-space constants for a bf16 load, exact for float32).
        """
        heads, hp = self.heads, self.heads_prefix
        if self.cfg.is_1_5:
            for enc in heads.action_in_proj.fourier_encoders():
                enc._buffers["freqs"] = _freqs(enc, device, torch.bfloat16).to(freqs_dtype)
            heads.action_space.rebuild_buffers(device, freqs_dtype)
            names = set()
        for module in self.modules():
            if isinstance(module, (Qwen3VLTextRotaryEmbedding, Qwen3VLVisionRotaryEmbedding)):
                with torch.device("cpu"):
                    fresh = type(module)(module.config)
                for key, buf in fresh.named_buffers(recurse=False):
                    module._buffers[key] = buf.to(device)
        for i, enc in enumerate(heads.action_in_proj.fourier_encoders()):
            key = (f"{hp}action_in_proj.sinus.{i}.freqs" if i < ACTION_DIM
                   else f"{hp}action_in_proj.timestep_fourier_encoder.freqs")
            if names is None or key in names:
                enc._buffers["freqs"] = _freqs(enc, device, freqs_dtype)
        if names is None or any(n.startswith(f"{hp}action_space.") for n in names):
            rounded = freqs_dtype if self.cfg.is_2super and names is not None else torch.float32
            heads.action_space.rebuild_buffers(device, rounded)


def _freqs(enc: FourierEncoderV2, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return enc.default_freqs(device).to(dtype)


def build_meta(cfg: AlpamayoConfig, dtype: torch.dtype = torch.bfloat16) -> AlpamayoR1:
    """Build the module tree on the `meta` device (no memory), parameters in `dtype`."""
    with torch.device("meta"):
        model = AlpamayoR1(cfg)
    return model.to(dtype)


@torch.no_grad()
def materialize_random(model: AlpamayoR1, seed: int, device: torch.device | str,
                       home: torch.device | str | None = None,
                       available_host_bytes: int | None = None) -> AlpamayoR1:
    """Allocate a meta-built model on `home` (default `device`) and fill it deterministically.

    Weights ~ N(0, 0.02), biases 0, norm scales 1 (transformers' Qwen3-VL init), drawn in
    parameter-name order from one generator on `device`: same seed + device -> same weights,
    wherever they are stored. With `home="cpu"` each weight is drawn on the GPU and moved out
    at once, so a model larger than the card (the full preset on a 16 GB GPU) can be built.
    A host home is first checked against `available_host_bytes` (default MemAvailable).
    """
    device = torch.device(device)
    home = device if home is None else torch.device(home)
    dtype = next(model.parameters()).dtype
    if home.type == "cpu":
        require_host_memory(tensor_bytes(model.state_dict().values()),
                            f"random {model.cfg.family} model", available_host_bytes)
    model.to_empty(device=home)
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            param.zero_()
        elif param.ndim == 1:
            param.fill_(1.0)
        elif home == device:
            param.normal_(0.0, INIT_STD, generator=gen)
        else:
            draw = torch.empty(param.shape, dtype=param.dtype, device=device)
            param.copy_(draw.normal_(0.0, INIT_STD, generator=gen))
    model.rebuild_buffers(device, dtype)  # computed where a GPU-built model computes them
    return model.to(home)


def build_random(cfg: AlpamayoConfig, seed: int = 0, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> AlpamayoR1:
    """Build a random-weight model of any scale, built on meta and initialised on `device`."""
    return materialize_random(build_meta(cfg, dtype), seed, device).eval()
