"""What does a re-plan of a loaded model cost, with and without the pinned host store?

Loads a preset (`EngineConfig(pin_all_layers=...)`), times two re-plans (some LM layers
resident, then none) and reports the process's peak RSS. Without the store a re-plan copies
every streamed layer back out and packs (and, on CUDA, pins) them again; with it, layers are
re-pointed at their store regions and only resident ones are copied.

    .venv/bin/python bench/diag/replan.py --model layers=2,vit=2 --device cpu [--pin-all-layers]
"""
import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alpamayo_offload.engine import Engine, EngineConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--model', default='layers=2,vit=2')
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--pin-all-layers', action='store_true')
    args = ap.parse_args()
    t0 = time.perf_counter()
    engine = Engine.from_config(EngineConfig(
        model=args.model, device=args.device, mode='pipelined', dtype='bfloat16',
        pin_all_layers=args.pin_all_layers, max_decode_tokens=2, fixed_decode_tokens=2,
        diffusion_steps=1))
    loaded = time.perf_counter() - t0
    replans = []
    for resident in ({'lm': (0,)}, {}):
        t0 = time.perf_counter()
        engine.replan(resident=resident, mode='pipelined')
        replans.append(round(time.perf_counter() - t0, 3))
    info = engine.info
    print(json.dumps({'model': args.model, 'device': args.device,
                      'pin_all_layers': args.pin_all_layers, 'load_s': round(loaded, 1),
                      'replan_s': replans, 'peak_rss_gib': round(
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                      'host_store_gib': round(info.host_store_bytes / 2**30, 2)}))


if __name__ == '__main__':
    main()
