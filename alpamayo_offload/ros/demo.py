"""README demo: synthetic drive bag -> player -> node (tiny model, CPU) -> table of what came back.

`python -m alpamayo_offload.ros.demo`; exits non-zero when no path arrived.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

from ..app.schema import NODE_NAME
from ..app.synthetic_drive import DriveConfig, write_drive
from .session import SessionResult, run_session

_STAGES = ('t_image_decode_ms', 't_preprocess_ms', 't_vision_ms', 't_prefill_ms', 't_decode_ms',
           't_diffusion_ms', 't_postprocess_ms', 't_engine_total_ms', 't_total_ms',
           'input_age_ms')


def remaps_for(cfg: DriveConfig) -> dict[str, str]:
    """Node input names -> the bag's topics (what the launch file's remap arguments do)."""
    remaps = {f'~/input/camera_{s}/image': cfg.topic_for(s) for s in cfg.camera_slots}
    remaps['~/input/odometry'] = cfg.odom_topic
    return remaps


def report(result: SessionResult, out: object = sys.stdout) -> int:
    """Print the paths and per-inference stage timings; return the number of ego paths."""
    ego = [p for p in result.paths if p.topic.endswith('/path')]
    print(f'{"stamp (t0)":>22} {"frame":>10} {"poses":>5} {"final waypoint (x, y, z) m":>30}',
          file=out)
    for p in ego + [p for p in result.paths if p.topic.endswith('/path_odom')]:
        x, y, z = p.xyz[-1] if len(p.xyz) else (math.nan,) * 3
        print(f'{p.stamp_ns / 1e9:22.3f} {p.frame_id:>10} {len(p.xyz):5d} '
              f'{f"({x:7.2f}, {y:7.2f}, {z:5.2f})":>30}', file=out)
    done = [s for s in result.status('inference') if s.message == 'path published']
    seen: set[str] = set()
    print('\nper-inference stage timings (ms):', file=out)
    print(' '.join(f'{k[2:-3] if k.startswith("t_") else k:>12}' for k in _STAGES), file=out)
    for s in done:
        key = s.values.get('inferences', '')
        if key in seen:
            continue
        seen.add(key)
        print(' '.join(f'{s.values.get(k, "-"):>12}' for k in _STAGES), file=out)
    models = result.status('model')
    if models:
        print(f'\nmodel: {models[-1].message} ({models[-1].values})', file=out)
    skips = {s.values.get('last_skip_reason') for s in result.status('inference')} - {''}
    print(f'skip reasons seen: {sorted(r for r in skips if r)}', file=out)
    return len(ego)


def main(argv: list[str] | None = None) -> None:
    """Generate the bag in a temp dir, run the session, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=5.0, help='seconds of drive')
    parser.add_argument('--period', type=float, default=0.5, help='inference.period_s')
    args = parser.parse_args(argv)
    cfg = DriveConfig(duration_s=args.duration)
    with tempfile.TemporaryDirectory(prefix='alpamayo_demo_') as tmp:
        bag = write_drive(Path(tmp) / 'drive', cfg)
        print(f'bag: {bag} ({args.duration} s, {len(cfg.camera_slots)} cameras '
              f'{cfg.width}x{cfg.height} @ {cfg.camera_rate_hz} Hz, odometry @ '
              f'{cfg.odom_rate_hz} Hz); node: {NODE_NAME} (tiny model, CPU)')
        result = run_session(bag, remaps=remaps_for(cfg),
                             overrides={'inference.period_s': str(args.period)})
    n = report(result)
    if not n:
        print('\nno path received; node output:\n' + result.node_output[-4000:], file=sys.stderr)
        raise SystemExit(1)


if __name__ == '__main__':
    main()
