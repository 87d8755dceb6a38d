"""The real Engine (tiny preset) end to end through the `replay` command, twice for determinism."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alpamayo_offload.cli import main as cli_main

NODE_YAML = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'
MEASURED = ('latency_s', 'warmup')    # timing fields; everything else must repeat exactly
ENGINE_STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'total')


@pytest.fixture(autouse=True)
def _restore_determinism_flag():
    """Replay turns on torch's process-wide deterministic mode; don't leak it to other tests."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


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
    # as in the node: frames resized to the model's own size (images.height/width 0)
    assembly = doc['config']['assembly']
    assert assembly['image_size_hw'] is None and assembly['model_sizing']['factor'] == 32
    assert (tmp_path / 'a' / 'report.md').exists()
    assert list((tmp_path / 'a' / 'result_bags').iterdir())

    one_thread = tmp_path / 'one_thread.yaml'   # run a decoded with a thread per core
    one_thread.write_text('/**:\n  ros__parameters:\n    images:\n      decode_threads: 1\n')
    assert _replay(bag, drive, fast, tmp_path / 'b', '--params', str(one_thread)) == 0
    recs = []
    for run in ('a', 'b'):
        lines = (tmp_path / run / 'samples.jsonl').read_text().splitlines()[1:]
        recs.append([{k: v for k, v in json.loads(x).items() if k not in MEASURED}
                     for x in lines])
    assert recs[0] == recs[1]        # same bag and config, any decode threads: bit-identical


@pytest.mark.slow
def test_replay_loads_the_engine_as_the_node_does(bag_factory, tmp_path: Path) -> None:
    """A plan over the budget falls back as in the node, and the report says so."""
    from alpamayo_offload.app.config import config_from_values
    from alpamayo_offload.app.engine_loader import load_engine

    bag, drive = bag_factory()
    fast = tmp_path / 'fast.yaml'
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 8\n')
    streaming = config_from_values({'decode.max_tokens': 8, 'embed_on_host': True}).engine
    floor = load_engine(streaming, '').engine.info.required_bytes
    plan = tmp_path / 'plan.yaml'      # all resident: does not fit a budget just above streaming
    plan.write_text(f"/**:\n  ros__parameters:\n    vram_budget: '{floor + 1000}'\n"
                    '    resident_layers:\n      vit: [0, 1, 2, 3]\n      lm: [0, 1, 2]\n'
                    '      expert: [0, 1, 2]\n')
    assert _replay(bag, drive, fast, tmp_path / 'r', '--plan', str(plan)) == 0
    doc = json.loads((tmp_path / 'r' / 'metrics.json').read_text())
    assert doc['model']['start']['plan_source'] == 'stream everything, embedding in host RAM'
    assert 'does not fit' in doc['model']['start_warning']
    assert doc['model']['budget_bytes'] == floor + 1000 and doc['config']['vram_budget'] == \
        str(floor + 1000)


@pytest.mark.slow
def test_ctrl_c_keeps_samples_and_resume_finishes(bag_factory, tmp_path: Path) -> None:
    bag, drive = bag_factory()
    fast = tmp_path / 'fast.yaml'
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 8\n')
    out = tmp_path / 'r'
    remaps = [f'--remap=~/input/camera_{s}/image:={drive.topic_for(s)}'
              for s in drive.camera_slots] + [f'--remap=~/input/odometry:={drive.odom_topic}']
    cmd = [sys.executable, '-m', 'alpamayo_offload.cli', 'replay', str(bag), '--params',
           str(NODE_YAML), '--params', str(fast), *remaps, '--rate', '5', '--out', str(out),
           '--bev-plots', '0']
    # 5 Hz: enough samples (~40) that the run is still going when the interrupt lands (polled
    # every 50 ms), however fast the machine scores them.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = out / 'samples.jsonl'
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if store.exists() and len(store.read_text().splitlines()) >= 3:   # header + 2 samples
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert 'interrupted' in err and 'rerun with --resume' in err
    kept = store.read_text().splitlines()[1:]
    doc = json.loads((out / 'metrics.json').read_text())
    assert doc['interrupted'] and doc['counts']['done'] == len(kept) >= 2
    assert '%' in err                       # the tqdm progress bar went to stderr

    done = subprocess.run([*cmd, '--resume', '--no-progress'], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / 'metrics.json').read_text())
    assert doc['complete'] and doc['counts']['done'] == doc['counts']['evaluation_times']
    lines = store.read_text().splitlines()[1:]
    assert lines[:len(kept)] == kept        # finished samples were kept, not redone


@pytest.mark.cuda
def test_tiny_engine_on_cuda_is_deterministic(bag_factory, tmp_path: Path) -> None:
    bag, drive = bag_factory()
    fast = tmp_path / 'fast.yaml'
    fast.write_text('/**:\n  ros__parameters:\n    decode:\n      max_tokens: 8\n')
    for run in ('a', 'b'):
        assert _replay(bag, drive, fast, tmp_path / run, '--device', 'cuda') == 0
    docs = [json.loads((tmp_path / r / 'metrics.json').read_text()) for r in ('a', 'b')]
    assert docs[0]['model']['device'].startswith('cuda') and docs[0]['complete']
    assert docs[0]['machine']['gpu']['name']
    assert docs[0]['accuracy'] == docs[1]['accuracy'] and docs[0]['samples'] == docs[1]['samples']
