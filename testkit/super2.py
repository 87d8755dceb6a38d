"""An illustrative profile of Alpamayo 2 Super's full preset: its sizes, made-up compute times.

Layer, embedding and LM-head bytes follow the preset's shape (`full_2super_config`, bf16) by the
same formulas the official constructor's sizes were checked with; nothing is built. The other
VRAM terms are fixed numbers of the preset: the non-layer modules besides embedding and head
(vision patch and position embeddings, mergers, norms, action projections) as a meta-device
build of the preset counts them, and the engine's working-set estimate for six cameras and 32
decode tokens (`test/engine/test_engine_2super.py` checks that one). Copies run at the pinned
rate measured on the H200 (PCIe Gen5); compute times are invented, small enough that streaming is
copy-bound, so plans can be checked but their latencies mean nothing.
"""
from __future__ import annotations

from alpamayo_offload.model import full_2super_config
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
)

BF16 = 2
# Meta-device build of the preset: patch_embed 3,541,248 + pos_embed 5,308,416 + merger
# 89,677,312 + deepstack mergers 269,073,408 + LM norm 10,240 + expert norm 3,072 +
# action_in_proj 9,585,664 + action_out_proj 6,148 bytes.
OTHER_NON_LAYER_BYTES = 377_205_508
# engine.estimate_working_set(full_2super_config(), 2, EngineConfig(model='2super')).
WORKING_SET_BYTES = 2_443_823_104
PINNED_H2D_GBPS = 55.5          # H200, PCIe Gen5 (docs/results run12 profile)
_EXE_MS = {'vit': 0.5, 'prefill': 10.0, 'decode': 0.5, 'expert': 0.3}   # invented


def layer_bytes() -> dict[str, int]:
    """Bytes of one ViT block, LM layer and expert layer of the full preset (bf16)."""
    cfg = full_2super_config()
    t, v, e = cfg.text, cfg.vision, cfg.expert
    attn = t.hidden_size * t.head_dim * (2 * t.num_heads + 2 * t.num_kv_heads)
    lm = attn + 3 * t.hidden_size * t.intermediate_size + 2 * t.head_dim + 2 * t.hidden_size
    e_attn = e.hidden_size * e.head_dim * (2 * e.num_heads + 2 * t.num_kv_heads)
    expert = e_attn + 3 * e.hidden_size * e.intermediate_size + 2 * e.head_dim \
        + 2 * e.hidden_size
    h, m = v.hidden_size, v.intermediate_size
    vit = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * m + m) + (m * h + h)
    return {'vit': BF16 * vit, 'lm': BF16 * lm, 'expert': BF16 * expert}


def table_bytes() -> int:
    """Bytes of the token embedding, and as many of the (untied) LM head: vocab x hidden."""
    t = full_2super_config().text
    return BF16 * t.vocab_size * t.hidden_size


def super2_profile(head_apart: bool = True) -> Profile:
    """Build the profile; `head_apart` False lumps the LM head into the fixed bytes."""
    cfg = full_2super_config()
    sizes = layer_bytes()
    counts = {'vit': cfg.vision.depth, 'lm': cfg.text.num_layers,
              'expert': cfg.text.num_layers}   # expert layer i extends cache layer i
    sequences = tuple(
        SequenceProfile(name, (sizes[name],) * n, (sizes[name] / (PINNED_H2D_GBPS * 1e6),) * n)
        for name, n in counts.items())

    def phase(name: str, seq: str, repeats: str, exe: float) -> PhaseProfile:
        return PhaseProfile(name, seq, repeats, ((exe,) * counts[seq],), (0.5,))

    head = table_bytes()
    return Profile(
        model_identity='preset:2super', machine=MachineInfo('illustrative H200', pinned_h2d_gbps=
                                                            PINNED_H2D_GBPS),
        sequences=sequences,
        phases=(phase('vision', 'vit', 'once', _EXE_MS['vit']),
                phase('prefill', 'lm', 'once', _EXE_MS['prefill']),
                phase('decode', 'lm', 'decode', _EXE_MS['decode']),
                phase('diffusion', 'expert', 'diffusion', _EXE_MS['expert'])),
        vram=VramProfile(fixed_bytes=OTHER_NON_LAYER_BYTES + head, embed_bytes=table_bytes(),
                         working_set_bytes=WORKING_SET_BYTES,
                         head_bytes=head if head_apart else 0))
