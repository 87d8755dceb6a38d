"""Shared fixtures of the model tests: the official-tiny fixture and a tiny random model."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from alpamayo_offload.model import (
    AlpamayoR1,
    ModelInputs,
    SyntheticTextIds,
    build_random,
    load_checkpoint,
    prepare_inputs,
    tiny_config,
)


def shared_fixture(name: str) -> Path:
    """A fixture folder under shared/fixtures: $ALPAMAYO_SHARED_DIR, shared/ beside the clone
    (or beside the worktrees' parent), else skip."""
    here = Path(__file__).resolve().parents[2]
    roots = [Path(os.environ['ALPAMAYO_SHARED_DIR'])] if os.environ.get('ALPAMAYO_SHARED_DIR') \
        else []
    roots += [here.parent / 'shared', here.parent.parent / 'shared']
    for root in roots:
        if (root / 'fixtures' / name / 'model.safetensors').is_file():
            return root / 'fixtures' / name
    pytest.skip(f'fixture {name} not found under {[str(r) for r in roots]} '
                '(shared/ beside the clone, or set ALPAMAYO_SHARED_DIR)')


def fixture_dir() -> Path:
    return shared_fixture('alpamayo-official-tiny')


@pytest.fixture(scope='session')
def official_dir() -> Path:
    return fixture_dir()


@pytest.fixture(scope='session')
def official_model(official_dir: Path) -> AlpamayoR1:
    torch.set_num_threads(1)
    return load_checkpoint(official_dir, dtype=torch.float32)


@pytest.fixture(scope='session')
def goldens(official_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(official_dir / 'goldens.safetensors')


@pytest.fixture(scope='session')
def e2e(official_dir: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    return load_file(official_dir / 'e2e_inputs.safetensors'), load_file(
        official_dir / 'e2e_outputs.safetensors')


@pytest.fixture(scope='session')
def official15_dir() -> Path:
    return shared_fixture('alpamayo1_5-official-tiny')


@pytest.fixture(scope='session')
def official15_model(official15_dir: Path) -> AlpamayoR1:
    torch.set_num_threads(1)
    return load_checkpoint(official15_dir, dtype=torch.float32)


@pytest.fixture(scope='session')
def goldens15(official15_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(official15_dir / 'goldens.safetensors')


@pytest.fixture(scope='session')
def e2e15(official15_dir: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    return load_file(official15_dir / 'e2e_inputs.safetensors'), load_file(
        official15_dir / 'e2e_outputs.safetensors')


@pytest.fixture(scope='session')
def tiny_model() -> AlpamayoR1:
    return build_random(tiny_config(), seed=0)


@pytest.fixture(scope='session')
def tiny_inputs() -> ModelInputs:
    """Prepared inputs for the tiny preset: 16 small random frames, a straight 8 m/s history."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(4, 4, 81, 144, 3), dtype=np.uint8)
    xyz = np.stack([np.arange(-15, 1) * 0.8, np.zeros(16), np.zeros(16)], -1)
    rot = np.broadcast_to(np.eye(3), (16, 3, 3)).copy()
    return prepare_inputs(images, xyz, rot, tiny_config(), SyntheticTextIds())


@pytest.fixture(scope='session')
def official2s_dir() -> Path:
    return shared_fixture('alpamayo2_super-official-tiny')


@pytest.fixture(scope='session')
def official2s_model(official2s_dir: Path) -> AlpamayoR1:
    torch.set_num_threads(1)
    return load_checkpoint(official2s_dir, dtype=torch.float32)


@pytest.fixture(scope='session')
def goldens2s(official2s_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(official2s_dir / 'goldens.safetensors')


@pytest.fixture(scope='session')
def e2e2s(official2s_dir: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    return load_file(official2s_dir / 'e2e_inputs.safetensors'), load_file(
        official2s_dir / 'e2e_outputs.safetensors')
