"""`strict-mode`: what strict deterministic mode costs each phase, and which vision ops pay it.

Loads the model preloaded (the whole device) and, in each mode (`default`, and `strict`:
`torch.use_deterministic_algorithms(True)`), runs a warm-up and `--runs` inferences on the
presized example input, each started on an idle device, keeping each phase's median
milliseconds. Only after both modes are timed does it profile one more inference's vision tower
in each (`torch.profiler`, started and stopped by hooks on the tower; Kineto is asked to tear
CUPTI down, which would otherwise slow every later launch) and keep its `--top` ops by device
time (host time on the CPU) and how many times it filled a fresh tensor (`aten::fill_`: strict
mode fills every fresh tensor with NaN). Strict mode also selects deterministic cuDNN
convolutions (the patch embedding is one) and refuses cuDNN attention; the op table shows which
of these the vision pays for.
Runs on the CPU too (`--model tiny --device cpu`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

import torch

from bench.diag.common import add_out, add_subcommand, at_least_one, out_dir, paper_engine
from bench.peers.measure import deterministic, synchronize

PHASES = ('vision', 'prefill', 'decode', 'diffusion')


def register(sub: Any) -> None:
    """Add the `strict-mode` sub-command."""
    p = add_subcommand(sub, 'strict-mode', 'phase times and vision ops, default vs strict mode',
                       __doc__)
    add_out(p, runs=3)
    p.add_argument('--model', default='full', help='preset or checkpoint (default %(default)s)')
    p.add_argument('--device', default='cuda')
    p.add_argument('--top', type=at_least_one, default=15,
                   help='vision ops kept (default %(default)s)')
    p.set_defaults(func=run)


def _ms(event: Any, cuda: bool) -> float:
    """An op's total device time (host time without CUDA), in ms."""
    total = getattr(event, 'device_time_total', getattr(event, 'cuda_time_total', 0.0)) \
        if cuda else event.cpu_time_total
    return total / 1000.0


def vision_ops(engine: Any, model_input: Any, cuda: bool, top: int) -> dict[str, Any]:
    """Profile the vision tower of one inference: its `top` ops and its count of fills."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=activities)

    def stop(*_: Any) -> None:
        synchronize()
        prof.stop()

    visual = engine.model.vlm.model.visual
    handles = [visual.register_forward_pre_hook(lambda *_: prof.start()),
               visual.register_forward_hook(stop)]
    try:
        synchronize()
        engine.infer(model_input)
    finally:
        for handle in handles:
            handle.remove()
    ops = sorted(prof.key_averages(), key=lambda e: _ms(e, cuda), reverse=True)
    fills = next((e.count for e in ops if e.key == 'aten::fill_'), 0)
    return {'fills': fills, 'ops': [{'name': e.key, 'count': e.count, 'ms': round(_ms(e, cuda), 3)}
                                    for e in ops[:top]]}


def phase_ms(engine: Any, model_input: Any, runs: int) -> dict[str, float]:
    """Each phase's median ms over `runs` inferences after one warm-up, each on an idle device."""
    results = []
    for _ in range(1 + runs):
        synchronize()
        results.append(engine.infer(model_input).timings)
    return {p: 1000 * statistics.median(t[p] for t in results[1:]) for p in PHASES}


def run(args: argparse.Namespace) -> int:
    """Measure both modes; print one line per mode and write strict_mode.json."""
    out = out_dir(args)
    engine = paper_engine(model=args.model, device=args.device, mode='preload')
    model_input = engine.example_input(presized=True)
    cuda = engine.device.type == 'cuda'
    report: dict[str, Any] = {'model': args.model, 'device': args.device, 'runs': args.runs}

    def in_mode(mode: str, call: Any) -> Any:
        return deterministic(call) if mode == 'strict' else call()

    modes = ('default', 'strict')
    for mode in modes:          # timed before any profiler attaches to the process
        report[mode] = {'phases_ms': in_mode(mode, lambda: phase_ms(engine, model_input,
                                                                    args.runs))}
    os.environ.setdefault('TEARDOWN_CUPTI', '1')
    for mode in modes:
        report[mode]['vision'] = in_mode(mode, lambda: vision_ops(engine, model_input, cuda,
                                                                  args.top))
    for mode in modes:
        found = report[mode]
        print(f"{mode}: " + ', '.join(f'{p} {ms:.1f} ms' for p, ms in found['phases_ms'].items())
              + f"; vision fills {found['vision']['fills']}; top vision ops: "
              + '; '.join(f"{o['name']} x{o['count']} {o['ms']:.2f} ms"
                          for o in found['vision']['ops'][:5]))
    (out / 'strict_mode.json').write_text(json.dumps(report, indent=1) + '\n')
    return 0
