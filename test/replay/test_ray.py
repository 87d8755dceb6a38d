"""Replay sharded over a local Ray cluster (2 CPU actors, tiny engine) equals the serial replay."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from alpamayo_offload.replay.distributed import (
    EngineFactory,
    make_shards,
    run_sharded,
    start_local_cluster,
)
from alpamayo_offload.replay.params import load_replay_config, parse_remaps
from alpamayo_offload.replay.report import DETERMINISTIC_KEYS
from alpamayo_offload.replay.session import prepare, replay_session

ray = pytest.importorskip('ray')
ROOT = Path(__file__).resolve().parents[2]
NODE_YAML = ROOT / 'config' / 'alpamayo_offload.yaml'


@pytest.fixture(scope='module')
def cluster():
    """A local two-CPU Ray cluster whose workers import this checkout and the test helpers."""
    old = os.environ.get('PYTHONPATH')
    os.environ['PYTHONPATH'] = os.pathsep.join([str(ROOT), str(Path(__file__).parent),
                                                *([old] if old else [])])
    start_local_cluster(ray, num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()
    if old is None:
        os.environ.pop('PYTHONPATH')
    else:
        os.environ['PYTHONPATH'] = old


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Serial and actor engines compute with one CPU thread, as the actors' `threads=1` does."""
    import torch

    before, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    torch.use_deterministic_algorithms(det)


def _setup(bag_factory, tmp_path: Path):
    bag, drive = bag_factory(image_format='jpeg', duration_s=5.0)
    fast = tmp_path / 'fast.yaml'
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 4\n')
    remaps = [f'~/input/camera_{s}/image:={drive.topic_for(s)}' for s in drive.camera_slots]
    cfg = load_replay_config(
        [NODE_YAML, fast], remaps=parse_remaps([*remaps, f'~/input/odometry:={drive.odom_topic}']),
        rate_hz=1.0, overrides={'cameras.transports': ['compressed'] * 4},
        engine_overrides={'deterministic': True})
    return cfg, prepare([bag], cfg)


@dataclass(frozen=True)
class DyingFactory(EngineFactory):
    """The tiny engine, in an actor that exits on its second sample unless `marker` exists."""

    marker: str = ''

    def __call__(self):
        infer, info, sizing, errors = super().__call__()
        marker = Path(self.marker)
        calls = []

        def planner(model_input):
            calls.append(1)
            if len(calls) == 2 and not marker.exists():
                marker.write_text('died once')
                os._exit(1)
            return infer(model_input)
        return planner, info, sizing, errors


def _deterministic(doc: dict) -> dict:
    return {k: doc[k] for k in DETERMINISTIC_KEYS}


def test_sharded_replay_equals_serial_and_survives_a_killed_worker(
        bag_factory, tmp_path: Path, cluster) -> None:
    cfg, bags = _setup(bag_factory, tmp_path)
    assert len(make_shards(bags, set(), 8)) >= 2
    planner, info, sizing, errors = EngineFactory(cfg.engine, threads=1)()
    serial = replay_session(bags, cfg.with_model_sizing(sizing), planner, tmp_path / 'serial',
                            model_info=info, progress=False, planner_errors=errors, bev_count=0)
    assert serial.exit_code == 0 and serial.metrics['counts']['scored'] >= 3

    # One worker dies on its second sample; its shard runs again on a fresh actor.
    marker = tmp_path / 'died'
    sharded = run_sharded(bags, cfg, DyingFactory(cfg.engine, 1, marker=str(marker)),
                          tmp_path / 'ray', workers=2, progress=False, bev_count=0)
    assert marker.exists()                              # a worker did die mid-run
    assert sharded.exit_code == 0 and sharded.metrics['complete']
    assert _deterministic(sharded.metrics) == _deterministic(serial.metrics)
    a = json.loads((tmp_path / 'serial' / 'metrics.json').read_text())
    b = json.loads((tmp_path / 'ray' / 'metrics.json').read_text())
    assert _deterministic(a) == _deterministic(b)      # bit for bit, through JSON too


def test_local_cluster_workers_run_at_normal_priority(cluster) -> None:
    @ray.remote(num_cpus=1)
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == 0     # as a serial replay in this process runs


def test_without_ray_the_option_says_how_to_install(monkeypatch) -> None:
    from alpamayo_offload.replay import distributed
    from alpamayo_offload.replay.errors import ReplayConfigError

    monkeypatch.setitem(sys.modules, 'ray', None)
    with pytest.raises(ReplayConfigError, match=r"pip install -e '\.\[ray\]'"):
        distributed.import_ray()
