"""The real Engine (tiny preset) end to end through the `replay` command, twice for determinism."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from alpamayo_offload.cli import main as cli_main

NODE_YAML = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'
MEASURED = ('latency_s', 'warmup')    # timing fields; everything else must repeat exactly
ENGINE_STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'total')


def _replay(bag: Path, drive, fast: Path, out: Path, *extra: str) -> int:
    remaps = [f'--remap=~/input/camera_{s}/image:={drive.topic_for(s)}'
              for s in drive.camera_slots] + [f'--remap=~/input/odometry:={drive.odom_topic}']
    return cli_main(['replay', str(bag), '--params', str(NODE_YAML), '--params', str(fast),
                     *remaps, '--rate', '1', '--out', str(out), '--no-progress',
                     '--bev-plots', '1', *extra])


@pytest.mark.slow
def test_tiny_engine_end_to_end_is_deterministic(bag_factory, tmp_path: Path) -> None:
    bag, drive = bag_factory(image_format='jpeg', duration_s=9.0)
    fast = tmp_path / 'fast.yaml'     # fewer decode tokens keep two runs well under a minute
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 8\n'
                    '    cameras:\n      transports: [compressed, compressed, compressed, '
                    'compressed]\n')
    assert _replay(bag, drive, fast, tmp_path / 'a', '--result-bag') == 0
    doc = json.loads((tmp_path / 'a' / 'metrics.json').read_text())
    assert doc['complete'] and doc['counts']['scored'] == doc['counts']['evaluation_times'] >= 2
    assert math.isfinite(doc['accuracy']['min_ade']['mean'])
    assert set(ENGINE_STAGES) <= set(doc['latency_ms'])
    assert doc['model']['model'] == 'tiny' and doc['config']['engine']['max_decode_tokens'] == 8
    assert (tmp_path / 'a' / 'report.md').exists()
    assert list((tmp_path / 'a' / 'result_bags').iterdir())

    assert _replay(bag, drive, fast, tmp_path / 'b') == 0
    recs = []
    for run in ('a', 'b'):
        lines = (tmp_path / run / 'samples.jsonl').read_text().splitlines()[1:]
        recs.append([{k: v for k, v in json.loads(x).items() if k not in MEASURED}
                     for x in lines])
    assert recs[0] == recs[1]        # same bag, same config: bit-identical predictions
