"""Replay fixtures: real bags written by the synthetic-drive generator, cached per session."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from replay_doubles import DURATION_S

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive


@pytest.fixture(scope='session')
def bag_factory(tmp_path_factory: pytest.TempPathFactory
                ) -> Callable[..., tuple[Path, DriveConfig]]:
    """Write (once per session and variant) a synthetic drive bag; returns its path and config."""
    cache: dict[tuple[tuple[str, Any], ...], tuple[Path, DriveConfig]] = {}

    def make(**kw: Any) -> tuple[Path, DriveConfig]:
        kw.setdefault('duration_s', DURATION_S)
        key = tuple(sorted(kw.items()))
        if key not in cache:
            cfg = DriveConfig(**kw)
            path = tmp_path_factory.mktemp('bag') / 'drive'
            cache[key] = (write_drive(path, cfg), cfg)
        return cache[key]
    return make
