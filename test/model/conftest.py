"""Shared fixtures of the model tests: the official-tiny fixture and a tiny random model."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from alpamayo_offload.model import AlpamayoR1, build_random, load_checkpoint, tiny_config

FIXTURE = (Path(__file__).resolve().parents[2] / '..' / 'shared' / 'fixtures'
           / 'alpamayo-official-tiny')


def fixture_dir() -> Path:
    if not (FIXTURE / 'model.safetensors').is_file():
        pytest.skip(f'official-tiny fixture not found at {FIXTURE} (shared/ beside the clone)')
    return FIXTURE


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
def tiny_model() -> AlpamayoR1:
    return build_random(tiny_config(), seed=0)
