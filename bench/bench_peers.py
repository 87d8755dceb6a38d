"""Side-by-side benchmark against the offloading peers (Accelerate, diffusers) on one model.

Full-size Alpamayo-R1 with random BF16 weights (built once on the GPU from a seed, home copy in
host RAM), 21 fixed decode tokens, 10 diffusion steps, fixed inputs. Every runtime wraps the
same module tree under a per-process VRAM cap (`torch.cuda.set_per_process_memory_fraction`):
preload (no cap), ours (planned, pipelined with nothing resident, sequential), Accelerate
`device_map="auto"` with `max_memory` = cap - headroom and `cpu_offload`, and diffusers group
offloading with a side stream (block- and leaf-level). Per row: end-to-end and per-phase
latency (median of the timed runs; the deterministic correctness pass and warm-up are not
timed), peak `max_memory_reserved`, host RSS and pinned bytes, set-up time, the trajectory's max
abs difference from preload (deterministic pass), and our predictor's figure.
Rows run most important first and are skipped ('skipped: time budget') once `--budget-s` would
be overrun; each finished row is appended to `--out/rows.jsonl` at once.

    python -m bench.bench_peers --out $OUT --budget-s 520
    python -m bench.bench_peers --out $OUT --parts llama --cap 6,8,10     # second model
    python -m bench.bench_peers --out DIR --report-only                    # rebuild the report

diffusers is not a dependency: bring its wheel (.whl/) and put it on PYTHONPATH (docs/peers.md).
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any, Protocol

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')   # before the first cuBLAS call

import torch  # noqa: E402

from bench.peers.measure import Deadline  # noqa: E402
from bench.peers.rows import (  # noqa: E402
    RUNTIMES,
    Estimator,
    RowLog,
    RowSpec,
    alpamayo_schedule,
    llama_schedule,
    parse_caps,
    plot,
    read_rows,
    speedup_table,
    speedups,
    table,
)
from bench.peers.runner import Repeats  # noqa: E402

LOG = logging.getLogger('bench_peers')


class Bench(Protocol):
    """What the driver needs of a model's bench."""

    def passes(self, spec: RowSpec) -> int: ...
    def reuses(self, spec: RowSpec) -> bool: ...
    def run(self, spec: RowSpec) -> dict[str, Any]: ...
    def close(self) -> None: ...


def drive(bench: Bench, specs: list[RowSpec], log: RowLog, deadline: Deadline,
          estimator: Estimator) -> None:
    """Run `specs` in order, skipping those the time budget cannot fit."""
    for spec in specs:
        estimate = estimator.seconds(spec, bench.passes(spec), bench.reuses(spec))
        if not deadline.allows(estimate):
            log.write({'model': spec.model, 'runtime': spec.runtime, 'cap_gib': spec.cap_gib,
                       'status': 'skipped: time budget', 'estimated_s': estimate,
                       'elapsed_s': deadline.elapsed()})
            LOG.info('%s: skipped (time budget; needs ~%.0f s)', spec.label(), estimate)
            continue
        row = bench.run(spec)
        row['elapsed_s'] = deadline.elapsed()
        if row.get('status') == 'ok':
            estimator.record(spec, 0.0 if row.get('setup_reused') else row.get('setup_s', 0.0),
                             max(row['runs_s']))
        log.write(row)
        LOG.info('%s: %s, %s s (elapsed %.0f s)', spec.label(), row.get('status'),
                 f"{row['e2e_s']:.3f}" if 'e2e_s' in row else '-', deadline.elapsed())


def machine() -> dict[str, Any]:
    """Machine, versions, date and command, for the report."""
    info: dict[str, Any] = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'command': 'python3 ' + shlex.join(sys.argv), 'host': platform.node(),
        'python': platform.python_version(), 'torch': torch.__version__,
        'gpu': torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}
    for package in ('transformers', 'accelerate', 'diffusers'):
        try:
            info[package] = __import__(package).__version__
        except ImportError:
            info[package] = 'not installed'
    return info


def report(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Write bench_peers.{json,md,png} (and the LLM plot) and return the Markdown."""
    parts = [f"# Offloading peers: {meta.get('gpu', '?')}, {meta.get('date', '?')}", '',
             f"`{meta.get('command', '')}`", '',
             ', '.join(f'{k} {meta[k]}' for k in ('torch', 'transformers', 'accelerate',
                                                   'diffusers') if k in meta), '',
             table(rows), '']
    summary: dict[str, Any] = {}
    for model in ('alpamayo', 'llama'):
        entries = speedups(rows, model)
        if entries:
            summary[model] = entries
            parts += [f'## Speed-ups ({model}, ours planned vs peers at the same cap)', '',
                      speedup_table(entries), '']
        if any(r['model'] == model for r in rows):
            plot(rows, model, out / f'bench_peers_{model}.png',
                 f"{model}: latency vs VRAM ({meta.get('gpu', '?')})")
    text = '\n'.join(parts)
    (out / 'bench_peers.md').write_text(text + '\n')
    (out / 'bench_peers.json').write_text(json.dumps(
        {'machine': meta, 'rows': rows, 'speedups': summary}, indent=1, default=str) + '\n')
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--cap', default='8,10,12,14,16', help='VRAM caps in GiB (Alpamayo)')
    ap.add_argument('--llama-cap', default='6,8,10', help='VRAM caps in GiB (LLM)')
    ap.add_argument('--parts', default='alpamayo', help='alpamayo, llama or alpamayo,llama')
    ap.add_argument('--runtimes', default=','.join(RUNTIMES), help='subset of ' + ','.join(
        RUNTIMES))
    ap.add_argument('--budget-s', type=float, default=520.0, help='wall-clock budget')
    ap.add_argument('--model', default='full', help="Alpamayo preset ('full'; 'tiny' on CPU)")
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--decode-tokens', type=int, default=21)
    ap.add_argument('--diffusion-steps', type=int, default=10)
    ap.add_argument('--image-hw', default='1080x1920')
    ap.add_argument('--runs', type=int, default=3, help='timed runs: ours, preload')
    ap.add_argument('--peer-runs', type=int, default=2, help='timed runs: diffusers')
    ap.add_argument('--slow-runs', type=int, default=1, help='timed runs: Accelerate')
    ap.add_argument('--accel-headroom-gib', type=float, default=4.0)
    ap.add_argument('--profile', default=None, help='reuse a profile.json of this machine')
    ap.add_argument('--llama-layers', type=int, default=32)
    ap.add_argument('--llama-prompt', type=int, default=512)
    ap.add_argument('--llama-new-tokens', type=int, default=64)
    ap.add_argument('--deterministic-timing', action='store_true',
                    help='run the timed runs in strict deterministic mode (default mode otherwise)')
    ap.add_argument('--report-only', action='store_true', help='rebuild from rows.jsonl')
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(name)s: '
                        '%(message)s')
    args.out.mkdir(parents=True, exist_ok=True)
    meta_path = args.out / 'machine.json'
    if args.report_only:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        sys.stdout.write(report(args.out, read_rows(args.out / 'rows.jsonl'), meta) + '\n')
        return 0
    deadline = Deadline(args.budget_s)
    meta = machine()
    meta_path.write_text(json.dumps(meta, indent=1) + '\n')
    runtimes = [r for r in args.runtimes.split(',') if r]
    unknown = sorted(set(runtimes) - set(RUNTIMES))
    if unknown:
        ap.error(f'--runtimes: unknown {unknown}; choose from {list(RUNTIMES)}')
    log = RowLog(args.out)
    estimator = Estimator()
    parts = [p for p in args.parts.split(',') if p]
    repeats = Repeats(args.runs, args.peer_runs, args.slow_runs, args.deterministic_timing)
    if 'alpamayo' in parts:
        from bench.peers.alpamayo import AlpamayoBench, AlpamayoSettings

        h, w = (int(v) for v in args.image_hw.split('x'))
        bench = AlpamayoBench(AlpamayoSettings(
            model=args.model, device=args.device, decode_tokens=args.decode_tokens,
            diffusion_steps=args.diffusion_steps, image_hw=(h, w), repeats=repeats,
            accel_headroom_gib=args.accel_headroom_gib, profile_path=args.profile,
            out_dir=str(args.out)), deadline)
        meta['alpamayo_build_s'] = bench.build_s
        drive(bench, alpamayo_schedule(parse_caps(args.cap), runtimes), log, deadline,
              estimator)
        bench.close()
        del bench
    if 'llama' in parts:
        from bench.peers.llama import LlamaBench, LlamaSettings

        if deadline.allows(60.0):
            llama = LlamaBench(LlamaSettings(
                device=args.device, layers=args.llama_layers, prompt_tokens=args.llama_prompt,
                new_tokens=args.llama_new_tokens, repeats=repeats), deadline)
            meta['llama_build_s'] = llama.build_s
            drive(llama, llama_schedule(parse_caps(args.llama_cap), runtimes), log, deadline,
                  estimator)
            llama.close()
        else:
            LOG.info('llama: skipped (time budget)')
    meta['wall_s'] = deadline.elapsed()
    meta_path.write_text(json.dumps(meta, indent=1) + '\n')
    sys.stdout.write(report(args.out, log.rows, meta) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
