"""`alpamayo-offload replay --ray local --workers 2` end to end: the CLI starts a local Ray cluster,
shards the tiny engine's samples over two CPU actors and writes the report the serial CLI writes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from alpamayo_offload import cli
from alpamayo_offload.replay.report import DETERMINISTIC_KEYS

ray = pytest.importorskip('ray')
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_workers_import_this_checkout(monkeypatch):
    """Workers of the cluster the CLI starts import this checkout; the cluster stops after."""
    old = os.environ.get('PYTHONPATH')
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join([str(ROOT), *([old] if old else [])]))
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Serial run and actors compute with the same thread count (bit-identical results)."""
    import torch

    before, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    torch.use_deterministic_algorithms(det)


def test_cli_ray_local_two_workers_equals_the_serial_cli(bag_factory, tmp_path: Path,
                                                          ray_workers_import_this_checkout
                                                          ) -> None:
    bag, drive = bag_factory(image_format='jpeg', duration_s=5.0)
    fast = tmp_path / 'fast.yaml'
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 4\n')
    common = [str(bag), '--params', str(ROOT / 'config' / 'alpamayo_offload.yaml'),
              '--params', str(fast), '--odometry', drive.odom_topic, '--rate', '1',
              '--no-progress', '--bev-plots', '0',
              *(f'--camera={s}={drive.topic_for(s)}:compressed' for s in drive.camera_slots)]
    assert cli.main(['replay', *common, '--out', str(tmp_path / 'serial')]) == 0
    assert not ray.is_initialized()
    assert cli.main(['replay', *common, '--ray', 'local', '--workers', '2',
                     '--out', str(tmp_path / 'ray')]) == 0
    assert ray.is_initialized()                      # the CLI started the local cluster
    serial = json.loads((tmp_path / 'serial' / 'metrics.json').read_text())
    sharded = json.loads((tmp_path / 'ray' / 'metrics.json').read_text())
    assert sharded['complete'] and sharded['counts']['scored'] >= 3
    assert {k: sharded[k] for k in DETERMINISTIC_KEYS} == {k: serial[k] for k in DETERMINISTIC_KEYS}
    assert (tmp_path / 'ray' / 'report.md').is_file()
