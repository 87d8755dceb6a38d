"""Start-up planning on the GPU, without ROS (the GPU machine has no rclpy)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alpamayo_offload.app.engine_loader import LoadedEngine, load_engine
from alpamayo_offload.engine import EngineConfig
from alpamayo_offload.planning import save_profile
from alpamayo_offload.planning.params import profile_ref

pytestmark = pytest.mark.cuda
ALL_RESIDENT = {'vit': (0, 1, 2, 3), 'lm': (0, 1, 2), 'expert': (0, 1, 2)}


def load(budget: str = '', resident: dict[str, Any] | None = None, embed_on_host: bool = False,
         plan: dict[str, str] | None = None) -> LoadedEngine:
    engine = EngineConfig(model='tiny', device='cuda', mode='pipelined', resident=resident or {},
                          embed_on_host=embed_on_host, max_decode_tokens=8, diffusion_steps=2)
    return load_engine(engine, budget, plan or {}, torch_threads=1)


def test_free_minus_margin_is_measured_at_start() -> None:
    loaded = load('free-1GiB')
    free = loaded.report['vram_free_at_start_bytes']
    assert free > 2**30 and loaded.report['vram_budget_resolved_bytes'] == free - 2**30
    assert loaded.engine.info.budget_bytes == free - 2**30 and loaded.warning == ''


def test_plan_over_the_start_budget_is_replanned_or_degraded(tmp_path: Path) -> None:
    from alpamayo_offload.profiling.gpu_profile import run_profile

    profile = run_profile(model='tiny', device='cuda', decode_tokens=4, diffusion_steps=2,
                          warmup=1, seed=0)
    path = tmp_path / 'profile.json'
    ref = profile_ref(path, save_profile(profile, path))
    minimal = load(embed_on_host=True)
    floor = int(minimal.engine.info.required_bytes)
    minimal.engine.close()
    loaded = load(str(floor + 4096), ALL_RESIDENT, plan={'plan.profile': ref})
    assert loaded.warning and loaded.report['plan_source'] != 'configured', loaded.report
    assert loaded.engine.info.required_bytes <= floor + 4096
