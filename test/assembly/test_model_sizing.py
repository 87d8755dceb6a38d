"""Frames resized by the node's path to the model's own size give the model the full frame's pixels.

The node and replay resize each frame to the size the loaded model wants (`Engine.image_sizing`),
so the engine's preprocessing does not resize again. Without JPEG DCT scaling the model gets
exactly what it makes of the full-size frame: same `pixel_values`, grid and prompt, bit for bit;
with it (the default) a JPEG is decoded at a reduced scale first and the pixels stay within a
fraction of a grey level of those.
"""
from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import pytest
import torch
from PIL import Image

from alpamayo_offload.assembly import (
    AssemblyConfig,
    DecodeAheadBuffer,
    DecodeOptions,
    EncodedImage,
    OdometrySample,
    assemble,
    decode_image,
    decode_selection,
    select_inputs,
)
from alpamayo_offload.model import AlpamayoConfig, ImageSizing, SyntheticTextIds, tiny_config
from alpamayo_offload.model.inputs import prepare_inputs, preprocess_images

NS = 1_000_000_000
T_START = 1_000 * NS
SLOTS = (0, 1, 2, 6)
_CHANNELS = {'rgb8': 3, 'bgra8': 4, 'mono8': 1}
EXACT = DecodeOptions(dct_scaling=False)


def camera_rgb(seed: int, h: int = 1080, w: int = 1920) -> np.ndarray:
    """Camera-like texture: gradients, edges and sensor noise (resampling has work to do)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.dstack([(xx // 7 + 13 * seed) % 256, (yy // 5) % 256, ((xx + yy) // 11) % 256])
    return np.clip(base + rng.normal(0.0, 8.0, base.shape), 0, 255).astype(np.uint8)


def encoded(rgb: np.ndarray, transport: str, stamp_ns: int = T_START) -> EncodedImage:
    h, w = rgb.shape[:2]
    if transport in ('jpeg', 'png'):
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format=transport.upper(), quality=90)
        return EncodedImage(stamp_ns, 'cam', buf.getvalue(), True, transport)
    c = _CHANNELS[transport]
    px = {'rgb8': rgb, 'bgra8': np.dstack([rgb[..., ::-1], np.full((h, w), 255, np.uint8)]),
          'mono8': rgb[..., :1]}[transport]
    return EncodedImage(stamp_ns, 'cam', np.ascontiguousarray(px).tobytes(), False, transport,
                        h, w, w * c)


def odometry() -> list[OdometrySample]:
    """3 s of straight driving at 50 Hz from T_START."""
    return [OdometrySample(T_START + k * NS // 50, 'odom', 'base_link', (0.1 * k, 0.0, 0.0),
                           (0.0, 0.0, 0.0, 1.0)) for k in range(151)]


def pixels(frames: np.ndarray, cfg: AlpamayoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return preprocess_images(frames[None], cfg)


@pytest.mark.parametrize('transport', ['jpeg', 'png', 'bgra8', 'rgb8', 'mono8'])
def test_each_transport_resized_to_the_tiny_model_size_is_the_full_frame(transport: str) -> None:
    cfg = tiny_config()
    sizing = ImageSizing.of(cfg)
    images = [encoded(camera_rgb(seed), transport) for seed in range(2)]
    full = np.stack([decode_image(im, None)[0] for im in images])
    small, src, _ = zip(*(decode_image(im, sizing, EXACT) for im in images), strict=True)
    assert set(src) == {(1080, 1920)} and full.shape[1:3] == (1080, 1920)
    assert np.stack(small).shape[1:3] == sizing.size_hw(1080, 1920) == (64, 96)
    (a, grid_a), (b, grid_b) = pixels(full, cfg), pixels(np.stack(small), cfg)
    assert torch.equal(a, b) and torch.equal(grid_a, grid_b)


def test_release_model_size_is_the_full_frame_and_a_two_stage_resize_is_not() -> None:
    cfg = AlpamayoConfig()
    sizing = ImageSizing.of(cfg)
    image = encoded(camera_rgb(7), 'jpeg')
    full, _, _ = decode_image(image, None)
    small, _, _ = decode_image(image, sizing, EXACT)
    assert small.shape == (320, 576, 3)
    assert torch.equal(pixels(full[None], cfg)[0], pixels(small[None], cfg)[0])
    # why the node resizes straight to the model's size: 1080p -> 320x576 -> 64x96 (what the
    # node did for every model) is not what the tiny model makes of the 1080p frame
    tiny = tiny_config()
    via_release, _, _ = decode_image(image, ImageSizing.of(tiny), EXACT)
    two_stage = np.asarray(ImageSizing.of(tiny).resize(Image.fromarray(small)))
    assert two_stage.shape == via_release.shape == (64, 96, 3)
    assert not np.array_equal(two_stage, via_release)


def test_frames_decoded_ahead_at_the_model_size_give_prepare_inputs_the_full_frames() -> None:
    """Raw 1080p JPEG frames through `prepare_inputs` vs the node's path (decode-ahead)."""
    cfg = tiny_config()
    sizing = ImageSizing.of(cfg)
    cams = {slot: [encoded(camera_rgb(10 * c + k), 'jpeg', T_START + 2 * NS + k * NS // 10)
                   for k in range(4)] for c, slot in enumerate(SLOTS)}
    odom = odometry()
    # images.height/width 0/0, model loaded, images.jpeg_dct_scaling false
    node_cfg = AssemblyConfig(model_sizing=sizing, jpeg_dct_scaling=False)
    assert node_cfg.frame_size == sizing
    with ThreadPoolExecutor(2) as pool:
        bufs = {s: DecodeAheadBuffer(20, pool, 0.08) for s in SLOTS}
        for slot, frames in cams.items():
            for frame in frames:
                bufs[slot].push(frame, node_cfg)
        wait([e.future for b in bufs.values() for e in b._decodes.values()])
        sel = select_inputs({s: b.snapshot() for s, b in bufs.items()}, odom, node_cfg)
        node = decode_selection(sel, node_cfg, pool,
                                lambda s, f: bufs[s].ready(f, node_cfg))
    assert sum(b.stats.hits for b in bufs.values()) == 16
    native = assemble(cams, odom, AssemblyConfig())   # no model sizing: the frames as sent
    assert native.images.shape == (4, 4, 1080, 1920, 3)
    assert node.images.shape == (4, 4, 64, 96, 3)
    assert node.source_hw == native.source_hw == ((1080, 1920),) * 4
    a = prepare_inputs(native.images, native.ego_history_xyz, native.ego_history_rot, cfg,
                       SyntheticTextIds())
    b = prepare_inputs(node.images, node.ego_history_xyz, node.ego_history_rot, cfg,
                       SyntheticTextIds())
    assert torch.equal(a.pixel_values, b.pixel_values)
    assert torch.equal(a.image_grid_thw, b.image_grid_thw)
    assert torch.equal(a.input_ids, b.input_ids)


@pytest.mark.parametrize(('cfg', 'scale'), [(tiny_config(), 8), (AlpamayoConfig(), 2)],
                         ids=['tiny', 'release'])
def test_dct_scaled_jpeg_is_the_model_resize_of_the_reduced_frame(cfg: AlpamayoConfig,
                                                                  scale: int) -> None:
    """The default decodes at the largest DCT scale covering the model's size, then resizes."""
    sizing = ImageSizing.of(cfg)
    image = encoded(camera_rgb(3), 'jpeg')
    target = sizing.size_hw(1080, 1920)
    scaled, src, _ = decode_image(image, sizing)
    exact, _, _ = decode_image(image, sizing, EXACT)
    reduced, _, _ = decode_image(image, (1080 // scale, 1920 // scale))
    assert src == (1080, 1920) and scaled.shape[:2] == exact.shape[:2] == target
    half_again = (-(-1080 // (2 * scale)), -(-1920 // (2 * scale)))   # the next DCT scale
    assert scale == 8 or half_again[0] < target[0] or half_again[1] < target[1]
    assert np.array_equal(scaled, np.asarray(sizing.resize(Image.fromarray(reduced), target)))
    diff = np.abs(scaled.astype(int) - exact.astype(int))
    assert diff.mean() < 0.5 and not np.array_equal(scaled, exact)


def test_nothing_decoded_ahead_before_the_size_is_known() -> None:
    """While the model loads (no sizing yet) frames are only buffered; later ones are decoded."""
    sizing = ImageSizing.of(tiny_config())
    frames = [encoded(camera_rgb(k, 180, 320), 'jpeg', T_START + k * NS // 10) for k in range(4)]
    with ThreadPoolExecutor(1) as pool:
        buf = DecodeAheadBuffer(20, pool, 0.08)
        for frame in frames[:2]:
            buf.push(frame, AssemblyConfig())
        assert buf.decodes_held() == 0 and buf.stats.skipped == 2
        loaded = AssemblyConfig(model_sizing=sizing)
        for frame in frames[2:]:
            buf.push(frame, loaded)
        wait([e.future for e in buf._decodes.values()])
        assert buf.decodes_held() == 2
        assert buf.ready(frames[0], loaded) is None     # decoded on demand
        equal = AssemblyConfig(model_sizing=ImageSizing.of(tiny_config()))   # an equal sizing
        ready = buf.ready(frames[3], equal)
        assert ready is not None and ready.result()[0].shape == (64, 96, 3)
        other = AssemblyConfig(model_sizing=ImageSizing.of(AlpamayoConfig()))   # another model
        assert buf.ready(frames[2], other) is None


@pytest.mark.parametrize('hw', [(320, 576), (64, 96), (37, 53), (1, 1)])
def test_resized_frame_leaves_pillow_as_np_asarray_would(hw: tuple[int, int]) -> None:
    """The GIL-free copy out of Pillow (paste into a mapped RGBX buffer) is `np.asarray`'s bytes."""
    from alpamayo_offload.assembly.decode import _rgb_array

    image = Image.fromarray(camera_rgb(5, 2 * hw[0] + 3, 2 * hw[1] + 1)).resize(
        (hw[1], hw[0]), Image.Resampling.BICUBIC)
    out = _rgb_array(image)
    ref = np.asarray(image)
    assert out.dtype == np.uint8 and out.flags['C_CONTIGUOUS'] and out.flags['WRITEABLE']
    assert out.shape == ref.shape == (*hw, 3) and np.array_equal(out, ref)


def test_the_mapped_paste_is_checked_once_and_falls_back_where_pillow_copies() -> None:
    """This Pillow maps the buffer (the GIL-free copy is used); one that copied the buffer
    instead (the paste would then miss the array) is detected and `np.array` is used."""
    from unittest import mock

    from alpamayo_offload.assembly import decode

    assert decode._mapped_paste_works()
    image = Image.fromarray(camera_rgb(2, 30, 40))
    frombuffer = Image.frombuffer

    def copying(mode, size, data, *args):
        return frombuffer(mode, size, bytes(np.asarray(data)), *args)

    decode._mapped_paste_works.cache_clear()
    try:
        with mock.patch.object(decode.Image, 'frombuffer', copying):
            assert not decode._mapped_paste_works()
            out = decode._rgb_array(image)
        assert np.array_equal(out, np.asarray(image)) and out.flags['WRITEABLE']
    finally:
        decode._mapped_paste_works.cache_clear()
