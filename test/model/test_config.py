from __future__ import annotations

import dataclasses

import pytest

from alpamayo_offload.model import ConfigError, build_meta, full_config, preset, tiny_config


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_full_config_parameter_and_tensor_counts_on_meta() -> None:
    m = build_meta(full_config())
    assert _count(m) == 11_078_526_194
    assert _count(m.vlm.model.visual) == 576_388_336
    assert _count(m.vlm.model.language_model.layers[0]) == 192_946_432
    assert _count(m.expert.layers[0]) == 63_312_128
    assert _count(m.action_in_proj) == 1_349_632
    assert _count(m.action_out_proj) == 4_098
    sd = m.state_dict()
    assert sum(k.startswith('vlm.model.visual.') for k in sd) == 351
    assert sum(k.startswith('vlm.model.language_model.') for k in sd) == 398
    assert sum(k.startswith('vlm.') for k in sd) == 750
    assert sum(k.startswith('expert.') for k in sd) == 397
    assert sum(k.startswith('action_in_proj.') for k in sd) == 13  # 10 learned + 3 freqs
    assert sum(k.startswith('action_out_proj.') for k in sd) == 2
    assert sum(k.startswith('action_space.') for k in sd) == 4
    assert 'expert.embed_tokens.weight' not in sd
    assert m.vlm.lm_head.weight is not m.vlm.model.language_model.embed_tokens.weight


def test_layer_sequences_and_non_layer_modules_cover_every_tensor() -> None:
    m = build_meta(tiny_config())
    seqs = m.layer_sequences()
    assert [len(seqs[k]) for k in ('vit', 'lm', 'expert')] == [4, 3, 3]
    seen = {id(t) for mods in seqs.values() for mod in mods
            for t in mod.state_dict(keep_vars=True).values()}
    for mod in m.non_layer_modules().values():
        ids = {id(t) for t in mod.state_dict(keep_vars=True).values()}
        assert not ids & seen
        seen |= ids
    assert {id(t) for t in m.state_dict(keep_vars=True).values()} <= seen


def test_presets_and_constraints() -> None:
    assert preset('layers=4,vit=3').text.num_layers == 4
    assert preset('layers=4,vit=3').vision.deepstack_visual_indexes[-1] < 3
    with pytest.raises(ConfigError, match='unknown preset'):
        preset('huge')
    cfg = tiny_config()
    with pytest.raises(ConfigError, match='head_dim'):
        dataclasses.replace(cfg, expert=dataclasses.replace(cfg.expert, head_dim=8))
    with pytest.raises(ConfigError, match='mrope_section'):
        dataclasses.replace(cfg.text, mrope_section=(4, 4, 4))


def test_release_config_without_vlm_config_is_the_full_shape() -> None:
    from alpamayo_offload.model import AlpamayoConfig

    cfg = full_config()
    assert AlpamayoConfig.from_release_dicts(cfg.to_release_dict(), None) == cfg
    unknown = dict(cfg.to_release_dict(), vlm_name_or_path='someone/other-vlm')
    with pytest.raises(ConfigError, match='vlm_config.json'):
        AlpamayoConfig.from_release_dicts(unknown, None)


def test_random_init_is_deterministic_from_seed() -> None:
    import torch

    from alpamayo_offload.model import build_random

    a, b = build_random(tiny_config(), seed=5), build_random(tiny_config(), seed=5)
    c = build_random(tiny_config(), seed=6)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa['vlm.lm_head.weight'], sc['vlm.lm_head.weight'])
    assert not any(t.is_meta for t in sa.values())
    assert torch.equal(a.vlm.model.language_model.rotary_emb.inv_freq,
                       type(a.vlm.model.language_model.rotary_emb)(a.vlm.config.text_config).inv_freq)
