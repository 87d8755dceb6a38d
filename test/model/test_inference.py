from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from alpamayo_offload.model import (
    DecodeOptions,
    SyntheticTextIds,
    TokenizerDirEncoder,
    prepare_inputs,
    run_inference,
    tiny_config,
)
from alpamayo_offload.model.config import COT_START_ID, TRAJ_FUTURE_START_ID


class RecordingObserver:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        self.events.append(('start', phase, index, is_last))

    def phase_end(self, phase: str, index: int) -> None:
        self.events.append(('end', phase, index))


def _raw_inputs(h: int = 81, w: int = 144) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(4, 4, h, w, 3), dtype=np.uint8)
    t = np.arange(-15, 1) * 0.1
    yaw0 = 0.7
    xyz = np.stack([100 + 8 * t * math.cos(yaw0), -50 + 8 * t * math.sin(yaw0), 0 * t + 3], -1)
    c, s = math.cos(yaw0), math.sin(yaw0)
    rot = np.broadcast_to(np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]), (16, 3, 3)).copy()
    return images, xyz, rot


def test_tiny_inference_deterministic_finite_and_fast(tiny_model) -> None:
    images, xyz, rot = _raw_inputs()
    inputs = prepare_inputs(images, xyz, rot, tiny_model.cfg, SyntheticTextIds())
    assert inputs.input_ids.shape == (1, 222)  # the fixture's release-layout prompt length
    assert int(inputs.input_ids[0, -1]) == COT_START_ID
    obs = RecordingObserver()
    torch.set_num_threads(1)
    start = time.perf_counter()
    a = run_inference(tiny_model, inputs, 'cpu', DecodeOptions(fixed_decode_tokens=21), obs)
    elapsed = time.perf_counter() - start
    b = run_inference(tiny_model, inputs, 'cpu', DecodeOptions(fixed_decode_tokens=21))
    assert elapsed < 1.0
    assert a.xyz.shape == (1, 64, 3) and a.rot.shape == (1, 64, 3, 3)
    assert torch.isfinite(a.xyz).all() and torch.isfinite(a.rot).all()
    assert torch.equal(a.xyz, b.xyz) and torch.equal(a.new_token_ids, b.new_token_ids)
    assert a.decode_steps == 21 and a.new_token_ids.shape == (1, 22)
    assert not ((a.new_token_ids >= 151669) & (a.new_token_ids < 155669)).any()
    starts = [e for e in obs.events if e[0] == 'start']
    assert starts[0] == ('start', 'vision', 0, True) and starts[1] == ('start', 'prefill', 0, True)
    decode = [e for e in starts if e[1] == 'decode']
    assert [e[2] for e in decode] == list(range(21))
    assert [e[3] for e in decode] == [False] * 20 + [True]
    diff = [e for e in starts if e[1] == 'diffusion']
    assert [e[2] for e in diff] == list(range(10)) and [e[3] for e in diff] == [False] * 9 + [True]
    assert len(obs.events) == 2 * len(starts)


def test_stop_one_late_is_last_known_before_the_pass(official_model, e2e) -> None:
    from alpamayo_offload.model import inputs_from_processed

    inp, out = e2e
    mi = inputs_from_processed(inp['pixel_values'], inp['image_grid_thw'],
                               inp['ego_history_xyz'][:, 0], inp['ego_history_rot'][:, 0],
                               official_model.cfg, SyntheticTextIds(), prompt_ids=inp['input_ids'])
    obs = RecordingObserver()
    r = run_inference(official_model, mi, 'cpu', DecodeOptions(max_decode_tokens=8), obs,
                      diffusion_noise=out['a.diffusion_noise'])
    decode = [e for e in obs.events if e[0] == 'start' and e[1] == 'decode']
    # decode pass 0 emits <|traj_future_start|>; pass 1 feeds it (its K/V) and is the last
    assert decode == [('start', 'decode', 0, False), ('start', 'decode', 1, True)]
    assert int(r.new_token_ids[0, 1]) == TRAJ_FUTURE_START_ID
    assert r.coc_token_ids == [[int(r.new_token_ids[0, 0])]]


def test_sampling_is_seeded(tiny_model) -> None:
    images, xyz, rot = _raw_inputs()
    inputs = prepare_inputs(images, xyz, rot, tiny_model.cfg, SyntheticTextIds())
    opts = DecodeOptions(max_decode_tokens=6, sample=True, seed=7, num_samples=2)
    a = run_inference(tiny_model, inputs, 'cpu', opts)
    b = run_inference(tiny_model, inputs, 'cpu', opts)
    assert torch.equal(a.new_token_ids, b.new_token_ids) and torch.equal(a.xyz, b.xyz)
    assert a.xyz.shape == (2, 64, 3)


def test_tokenizer_dir_encodes_prompt_and_decodes_coc(tmp_path: Path, tiny_model) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from alpamayo_offload.model.tokens import SYSTEM_TEXT, USER_TEXT

    words = sorted(set((SYSTEM_TEXT + ' ' + USER_TEXT).split()))
    vocab = {w: i + 10 for i, w in enumerate(words)} | {'[UNK]': 0}
    tok = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / 'tokenizer.json'))
    enc = TokenizerDirEncoder(tmp_path)
    images, xyz, rot = _raw_inputs()
    inputs = prepare_inputs(images, xyz, rot, tiny_model.cfg, enc)
    assert inputs.input_ids.shape[1] == 222 - 12 - 18 + len(SYSTEM_TEXT.split()) \
        + len(USER_TEXT.split())
    r = run_inference(tiny_model, inputs, 'cpu', DecodeOptions(max_decode_tokens=3), decoder=enc)
    assert r.coc_text is not None and len(r.coc_text) == 1
    assert enc.decode([TRAJ_FUTURE_START_ID, vocab['driving']]) == '<|traj_future_start|>driving'


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
@pytest.mark.parametrize('shape', [(1, 7), (3, 1)])
def test_host_gather_into_own_memory_is_the_embedding(dtype: torch.dtype, shape: tuple) -> None:
    """The embedding-on-host path gathers into (on CUDA pinned) memory of its own: same rows."""
    from alpamayo_offload.model.inference import gather_rows

    table = torch.nn.Embedding(50, 12).to(dtype)
    ids = torch.randint(0, 50, shape, generator=torch.Generator().manual_seed(1))
    got = gather_rows(table, ids, pin=False)
    assert got.shape == (*shape, 12) and got.dtype == dtype
    assert torch.equal(got, table(ids))


@pytest.mark.cuda
def test_cuda_bf16_with_embed_tokens_on_host() -> None:
    from alpamayo_offload.model import build_random

    model = build_random(tiny_config(), seed=0, device='cuda', dtype=torch.bfloat16)
    lm = model.vlm.model.language_model
    lm.embed_tokens.to('cpu')
    images, xyz, rot = _raw_inputs()
    inputs = prepare_inputs(images, xyz, rot, model.cfg, SyntheticTextIds())
    r = run_inference(model, inputs, 'cuda', DecodeOptions(fixed_decode_tokens=5))
    assert torch.isfinite(r.xyz).all() and r.decode_steps == 5
    assert lm.embed_tokens.weight.device.type == 'cpu'


def test_bf16_autocast_path_on_cpu() -> None:
    from alpamayo_offload.model import build_random

    model = build_random(tiny_config(), seed=0, dtype=torch.bfloat16)
    inputs = prepare_inputs(*_raw_inputs(), model.cfg, SyntheticTextIds())
    r = run_inference(model, inputs, 'cpu', DecodeOptions(fixed_decode_tokens=3))
    assert torch.isfinite(r.xyz).all() and r.xyz.dtype == torch.float32
    assert model.action_space.accel_mean.dtype == torch.float32


def test_bad_inputs_are_refused(tiny_model) -> None:
    from alpamayo_offload.model import ModelInputError

    images, xyz, rot = _raw_inputs()
    with pytest.raises(ModelInputError, match='uint8'):
        prepare_inputs(images.astype(np.float32), xyz, rot, tiny_model.cfg, SyntheticTextIds())
    with pytest.raises(ModelInputError, match='16'):
        prepare_inputs(images, xyz[:10], rot[:10], tiny_model.cfg, SyntheticTextIds())
    bad = xyz.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ModelInputError, match='NaN'):
        prepare_inputs(images, bad, rot, tiny_model.cfg, SyntheticTextIds())


@pytest.mark.cuda
def test_cuda_drawn_weights_stored_on_host_equal_a_gpu_built_model() -> None:
    """The engine builds presets drawn on the GPU but stored on the host (a 16 GB card cannot
    hold the full preset); the weights and buffers must be those of a model built on the GPU."""
    from alpamayo_offload.model import build_meta, build_random, materialize_random

    on_gpu = build_random(tiny_config(), seed=2, device='cuda', dtype=torch.bfloat16)
    on_host = materialize_random(build_meta(tiny_config(), torch.bfloat16), 2, 'cuda', home='cpu')
    gpu_state, host_state = on_gpu.state_dict(), on_host.state_dict()
    assert gpu_state.keys() == host_state.keys()
    for key, value in host_state.items():
        assert value.device.type == 'cpu', key
        assert torch.equal(value, gpu_state[key].cpu()), key
