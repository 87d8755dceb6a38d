from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from alpamayo_offload.model import (
    CheckpointError,
    CheckpointTensorSource,
    build_random,
    load_checkpoint,
    save_checkpoint,
    tiny_config,
)


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    save_checkpoint(build_random(tiny_config(), seed=1, dtype=torch.bfloat16), tmp_path / 'ckpt')
    return tmp_path / 'ckpt'


def test_roundtrip_is_bit_exact(tmp_path: Path) -> None:
    model = build_random(tiny_config(), seed=3, dtype=torch.bfloat16)
    save_checkpoint(model, tmp_path / 'c')
    back = load_checkpoint(tmp_path / 'c')
    a, b = model.state_dict(), back.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_sharded_roundtrip_and_real_safetensors_reader(tmp_path: Path) -> None:
    from safetensors import safe_open

    model = build_random(tiny_config(), seed=4, dtype=torch.bfloat16)
    files = save_checkpoint(model, tmp_path / 'c', max_shard_bytes=4 * 10**6)
    assert len(files) > 1 and (tmp_path / 'c' / 'model.safetensors.index.json').is_file()
    sd = model.state_dict()
    with safe_open(str(files[0]), framework='pt') as f:
        for k in f.keys():
            assert torch.equal(f.get_tensor(k), sd[k])
    back = load_checkpoint(tmp_path / 'c')
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in sd.items())


def test_official_fixture_loads_as_stored(official_dir: Path) -> None:
    from safetensors.torch import load_file

    model = load_checkpoint(official_dir)
    ref = load_file(official_dir / 'model.safetensors')
    sd = model.state_dict()
    assert sd.keys() == ref.keys()
    assert all(sd[k].dtype == ref[k].dtype and torch.equal(sd[k], ref[k]) for k in ref)


def test_tensor_source_reads_into_buffers(saved: Path) -> None:
    ref = build_random(tiny_config(), seed=1, dtype=torch.bfloat16)
    src = CheckpointTensorSource(saved)
    name = 'vlm.model.language_model.layers.1.mlp.up_proj.weight'
    assert name in src.keys()
    out = torch.empty(src.shape(name), dtype=src.dtype(name))
    src.read_into(name, out)
    assert torch.equal(out, ref.state_dict()[name])
    with pytest.raises(CheckpointError, match='buffer is'):
        src.read_into(name, torch.empty(3, dtype=torch.bfloat16))


def test_missing_buffers_rebuilt_from_config(tmp_path: Path, tiny_model) -> None:
    save_checkpoint(tiny_model, tmp_path / 'c', include_buffers=False)
    back = load_checkpoint(tmp_path / 'c')
    for k, v in tiny_model.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k


def _rewrite(file: Path, drop: str | None = None, add: str | None = None,
             reshape: str | None = None) -> None:
    from safetensors.torch import load_file, save_file

    sd = load_file(file)
    if drop:
        del sd[drop]
    if add:
        sd[add] = torch.zeros(2)
    if reshape:
        sd[reshape] = torch.zeros(1, *sd[reshape].shape, dtype=sd[reshape].dtype)
    save_file(sd, file, metadata={'format': 'pt'})


KEY = 'vlm.model.language_model.layers.0.self_attn.q_proj.weight'


@pytest.mark.parametrize(('edit', 'match'), [
    ({'drop': KEY}, f"missing tensor '{KEY}'"),
    ({'add': 'vlm.extra.weight'}, "unexpected tensor 'vlm.extra.weight'"),
    ({'reshape': KEY}, f"'{KEY}' has shape"),
])
def test_mismatched_checkpoints_refused(saved: Path, edit: dict, match: str) -> None:
    _rewrite(saved / 'model.safetensors', **edit)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(saved)


def test_truncated_file_refused(saved: Path) -> None:
    f = saved / 'model.safetensors'
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match=r'model\.safetensors: truncated'):
        load_checkpoint(saved)


def test_bad_header_refused(saved: Path) -> None:
    f = saved / 'model.safetensors'
    data = bytearray(f.read_bytes())
    data[8:12] = b'\xff\xfe{{'
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r'model\.safetensors: bad header'):
        load_checkpoint(saved)
    f.write_bytes(struct.pack('<Q', 10**12) + bytes(data[8:]))
    with pytest.raises(CheckpointError, match=r'model\.safetensors: bad header'):
        load_checkpoint(saved)


def test_unknown_model_type_refused(saved: Path) -> None:
    cfg = json.loads((saved / 'config.json').read_text())
    cfg['model_type'] = 'llama'
    (saved / 'config.json').write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="model_type = 'llama'"):
        load_checkpoint(saved)


@pytest.mark.parametrize('name', ['pytorch_model.bin', 'weights.pt'])
def test_pickle_files_refused(saved: Path, name: str) -> None:
    marker = saved.parent / 'executed'
    (saved / name).write_bytes(b'not loaded')
    with pytest.raises(CheckpointError, match=name.replace('.', r'\.') + ': pickle'):
        load_checkpoint(saved)
    assert not marker.exists()


def test_missing_shard_refused(tmp_path: Path) -> None:
    model = build_random(tiny_config(), seed=4, dtype=torch.bfloat16)
    files = save_checkpoint(model, tmp_path / 'c', max_shard_bytes=4 * 10**6)
    files[-1].unlink()
    with pytest.raises(CheckpointError, match=files[-1].name + ': listed'):
        load_checkpoint(tmp_path / 'c')
    shutil.rmtree(tmp_path / 'c')
