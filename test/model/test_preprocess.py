"""The vectorised `preprocess_images` against the transformers processor, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from alpamayo_offload.model import tiny_config
from alpamayo_offload.model.config import AlpamayoConfig
from alpamayo_offload.model.errors import ModelInputError
from alpamayo_offload.model.inputs import (
    lookup_pixels,
    model_image_size_hw,
    preprocess_images,
    preprocess_images_reference,
)


def _frames(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (4, 4, h, w, 3), dtype=np.uint8)


def _assert_same(images: np.ndarray | torch.Tensor, cfg: AlpamayoConfig) -> None:
    fast, fast_grid = preprocess_images(images, cfg)
    ref, ref_grid = preprocess_images_reference(images, cfg)
    assert fast.dtype == ref.dtype == torch.float32 and fast.is_contiguous()
    assert torch.equal(fast, ref)
    assert torch.equal(fast_grid, ref_grid) and fast_grid.dtype == torch.long


@pytest.mark.parametrize('hw', [(64, 96), (96, 64), (64, 64), (64, 128)])
def test_frames_at_target_size_match_processor(hw: tuple[int, int]) -> None:
    cfg = tiny_config()
    assert model_image_size_hw(*hw, cfg) == hw     # the no-resize path
    _assert_same(_frames(*hw), cfg)


@pytest.mark.parametrize('hw', [(320, 576), (81, 144), (70, 101)])
def test_frames_resized_match_processor(hw: tuple[int, int]) -> None:
    cfg = tiny_config()
    assert model_image_size_hw(*hw, cfg) != hw     # the PIL bicubic path
    _assert_same(_frames(*hw, seed=1), cfg)


def test_release_size_frames_match_processor() -> None:
    cfg = AlpamayoConfig()
    assert model_image_size_hw(1080, 1920, cfg) == (320, 576)
    assert model_image_size_hw(320, 576, cfg) == (320, 576)
    _assert_same(_frames(320, 576, seed=2)[:1, :2], cfg)


def test_extreme_levels_and_non_contiguous_tensor() -> None:
    frames = _frames(64, 96, seed=3)
    frames[0, 0] = 0
    frames[0, 1] = 255
    nchw = torch.from_numpy(frames).permute(0, 1, 4, 2, 3).contiguous()
    _assert_same(nchw.permute(0, 1, 3, 4, 2), tiny_config())   # a strided view, like the fixture


def test_fixture_images_match_processor_and_goldens(official_model, e2e) -> None:
    inp, _ = e2e
    images = inp['images_uint8'].permute(0, 1, 3, 4, 2)
    _assert_same(images, official_model.cfg)
    pixels, _ = preprocess_images(images, official_model.cfg)
    assert torch.equal(pixels, inp['pixel_values'])


def test_wrong_dtype_is_rejected() -> None:
    with pytest.raises(ModelInputError, match='uint8'):
        preprocess_images(_frames(64, 96).astype(np.float32), tiny_config())


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
def test_pixels_in_the_model_dtype_are_the_processor_values_cast(dtype: torch.dtype) -> None:
    images, cfg = _frames(64, 96, seed=4), tiny_config()
    got, _ = preprocess_images(images, cfg, dtype=dtype)
    ref, _ = preprocess_images_reference(images, cfg)
    assert got.dtype == dtype and torch.equal(got, ref.to(dtype))


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_device_lookup_equals_the_host_lookup_per_channel(dtype: torch.dtype) -> None:
    """The lookup a GPU runs, run here: a cast table looked up == the looked-up values cast,
    each channel through its own row (three different rows, unlike the release's)."""
    rng = np.random.default_rng(5)
    patches = rng.integers(0, 256, (50, 3, 1, 16), dtype=np.uint8)
    table = torch.from_numpy(rng.standard_normal((3, 256)).astype(np.float32))
    got = lookup_pixels(torch.from_numpy(patches), table.to(dtype), temporal=2)
    want = torch.stack([table[c][torch.from_numpy(patches[:, c]).long()] for c in range(3)], 1)
    want = want.expand(50, 3, 2, 16).reshape(50, -1).to(dtype)
    assert got.shape == (50, 3 * 2 * 16) and got.dtype == dtype and torch.equal(got, want)


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_cuda_pixels_match_the_processor_bit_for_bit(dtype: torch.dtype) -> None:
    """On the GPU only the uint8 patches travel; the values are still the processor's."""
    cfg = AlpamayoConfig()
    images = _frames(320, 576, seed=6)
    got, grid = preprocess_images(images, cfg, device='cuda', dtype=dtype)
    ref, ref_grid = preprocess_images(images, cfg)
    assert got.device.type == 'cuda' and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got.cpu(), ref.to(dtype)) and torch.equal(grid, ref_grid)
