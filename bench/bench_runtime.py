"""Benchmark the offload runtime on a synthetic Qwen3-8B-shaped layer stack.

36 x 368 MiB BF16 decoder blocks (hidden 4096, intermediate 12288, 32 q / 8 kv heads, head_dim
128), built on ``meta`` and filled straight into pinned regions / device storage from a seeded
random source. For decode-like (1 token) and prefill-like work sizes and 0/12/24 resident layers
it measures sequential and pipelined runs against preload and prints, per row: measured time,
the bound ``max(sum EXE, sum DMA of streamed layers) + one layer's DMA`` from the same runs'
profile, their ratio, achieved copy bandwidth against the machine's pinned H2D peak, peak VRAM
against the budget, and bit-exactness (deterministic algorithms on).

    python -m bench.bench_runtime --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

import torch  # noqa: E402
from torch import nn  # noqa: E402

from alpamayo_offload.runtime import (  # noqa: E402
    LayerSequence,
    Mode,
    OffloadRuntime,
    ResidencyPlan,
    TensorSpec,
)
from alpamayo_offload.runtime.host import HostRegion  # noqa: E402
from testkit.toy_model import ToyConfig, build_stack, run_stack  # noqa: E402

GB = 1e9
GIB = float(2**30)


class RandomSource:
    """Seeded random weights per tensor name, generated on the device (no host copy of the model).

    Resident tensors are generated in place; streamed ones are generated in a device scratch
    tensor and copied once into their pinned region. The same name always yields the same values.
    """

    def __init__(self, specs: dict[str, TensorSpec], device: torch.device, cfg: ToyConfig) -> None:
        self._specs = specs
        self._device = device
        self._cfg = cfg

    def keys(self) -> Iterable[str]:
        return self._specs.keys()

    def spec(self, name: str) -> TensorSpec:
        return self._specs[name]

    def read_into(self, name: str, out: torch.Tensor) -> None:
        spec = self._specs[name]
        target = out if out.device.type == self._device.type else torch.empty(
            spec.shape, dtype=spec.dtype, device=self._device)
        if name.endswith('inv_freq'):
            hd = self._cfg.head_dim
            exponent = torch.arange(0, hd, 2, dtype=torch.float32, device=self._device) / hd
            target.copy_(1.0 / (self._cfg.rope_theta ** exponent))
        else:
            gen = torch.Generator(device=self._device).manual_seed(zlib.crc32(name.encode()))
            target.normal_(generator=gen)
            if name.endswith('norm.weight'):
                target.mul_(0.1).add_(1.0)
            else:
                target.mul_(0.5 / spec.shape[-1] ** 0.5)
        if target is not out:
            out.copy_(target)


def specs_of(layers: nn.ModuleList, prefix: str) -> dict[str, TensorSpec]:
    return {f'{prefix}{i}.{name}': TensorSpec(tuple(t.shape), t.dtype)
            for i, layer in enumerate(layers) for name, t in layer.state_dict().items()}


def strided(count: int, total: int) -> tuple[int, ...]:
    """``count`` resident indices spread evenly over ``total`` layers (0 included)."""
    return tuple(sorted({(i * total) // count for i in range(count)})) if count else ()


def sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


class Stopwatch:
    """Per-run wall time on the compute stream: CUDA events, or perf_counter without CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == 'cuda'

    def mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, start: object, end: object) -> float:
        if self.cuda:
            return float(start.elapsed_time(end))  # type: ignore[attr-defined]
        return (end - start) * 1e3  # type: ignore[operator]


def pinned_peak(device: torch.device, nbytes: int, repeats: int = 5) -> float:
    """H2D GB/s of one large copy from a cudaHostRegister'ed buffer (median of ``repeats``)."""
    if device.type != 'cuda':
        return float('nan')
    region = HostRegion(nbytes, pin=True)
    region.tensor.fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    watch = Stopwatch(device)
    dst.copy_(region.tensor, non_blocking=True)
    times = []
    for _ in range(repeats):
        start = watch.mark()
        dst.copy_(region.tensor, non_blocking=True)
        end = watch.mark()
        sync(device)
        times.append(watch.ms(start, end))
    region.release()
    del dst
    return nbytes / GB / (statistics.median(times) / 1e3)


@dataclass
class Row:
    mode: str
    resident: int
    work: str
    tokens: int
    measured_ms: float
    sum_exe_ms: float
    sum_dma_ms: float
    layer_dma_ms: float
    bound_ms: float
    ratio: float
    stall_ms: float
    copy_gbps: float
    copy_pct_of_peak: float
    bytes_per_run: int
    peak_vram_gib: float
    budget_gib: float | None
    within_budget: bool
    bit_exact: bool


def measure(rt: OffloadRuntime, layers: nn.ModuleList, x: torch.Tensor, warmup: int,
            reps: int, device: torch.device) -> tuple[torch.Tensor, list[float], list[dict]]:
    """Timed runs (no host sync between them) and the runtime's per-run profile."""
    watch = Stopwatch(device)
    with torch.inference_mode():
        for _ in range(warmup):
            out = run_stack(layers, x)
        sync(device)
        rt.reset_stats()
        marks = []
        for _ in range(reps):
            start = watch.mark()
            out = run_stack(layers, x)
            marks.append((start, watch.mark()))
        sync(device)
    stats = rt.stats()
    per_rep: list[dict] = [dict(exe=0.0, dma=0.0, stall=0.0, bytes=0, dmas=[])
                           for _ in range(reps)]
    for call in stats.calls:
        rep = per_rep[call.repetition]
        rep['exe'] += call.exe_ms
        rep['stall'] += call.stall_ms
        if call.bytes:
            rep['dma'] += call.dma_ms
            rep['bytes'] += call.bytes
            rep['dmas'].append(call.dma_ms)
    return out, [watch.ms(s, e) for s, e in marks], per_rep


def summarise(mode: str, resident: int, work: str, tokens: int, times: list[float],
              per_rep: list[dict], peak_gbps: float, peak_vram: int, budget: int | None,
              exact: bool) -> Row:
    exe = statistics.median(r['exe'] for r in per_rep)
    dma = statistics.median(r['dma'] for r in per_rep)
    dmas = [d for r in per_rep for d in r['dmas']]
    layer_dma = statistics.median(dmas) if dmas else 0.0
    bound = max(exe, dma) + layer_dma
    measured = statistics.median(times)
    nbytes = int(statistics.median(r['bytes'] for r in per_rep))
    gbps = nbytes / GB / (dma / 1e3) if dma > 0 else float('nan')
    return Row(mode, resident, work, tokens, measured, exe, dma, layer_dma, bound,
               measured / bound if bound else float('nan'),
               statistics.median(r['stall'] for r in per_rep), gbps, 100 * gbps / peak_gbps,
               nbytes, peak_vram / GIB, None if budget is None else budget / GIB,
               budget is None or peak_vram <= budget, exact)


def markdown(rows: list[Row], peak_gbps: float, header: str) -> str:
    peak = f'Pinned H2D peak (one large copy, cudaHostRegister): {peak_gbps:.1f} GB/s'
    lines = [header, '', peak, '',
             '| mode | resident | work | tokens | measured ms | sum EXE ms | sum DMA ms | '
             'bound ms | ratio | stall ms | copy GB/s | % peak | peak VRAM GiB | budget GiB | '
             'bit-exact |', '|' + '---|' * 15]
    for r in rows:
        budget = '-' if r.budget_gib is None else f'{r.budget_gib:.2f}'
        lines.append(
            f'| {r.mode} | {r.resident} | {r.work} | {r.tokens} | {r.measured_ms:.1f} | '
            f'{r.sum_exe_ms:.1f} | {r.sum_dma_ms:.1f} | {r.bound_ms:.1f} | {r.ratio:.3f} | '
            f'{r.stall_ms:.1f} | {r.copy_gbps:.1f} | {r.copy_pct_of_peak:.1f} | '
            f'{r.peak_vram_gib:.2f} | {budget} | {"yes" if r.bit_exact else "NO"} |')
    return '\n'.join(lines)


def verdicts(rows: list[Row]) -> dict[str, bool]:
    pipelined = [r for r in rows if r.mode == 'pipelined']
    return {
        'pipelined measured <= 1.05 x bound': all(r.ratio <= 1.05 for r in pipelined),
        'pipelined copy bandwidth >= 95% of pinned peak': all(
            r.copy_pct_of_peak >= 95 for r in pipelined if r.bytes_per_run),
        'sequential and pipelined bit-exact vs preload': all(r.bit_exact for r in rows),
        'peak VRAM within budget': all(r.within_budget for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--device', default='cuda')
    parser.add_argument('--layers', type=int, default=36)
    parser.add_argument('--hidden', type=int, default=4096)
    parser.add_argument('--intermediate', type=int, default=12288)
    parser.add_argument('--heads', type=int, default=32)
    parser.add_argument('--kv-heads', type=int, default=8)
    parser.add_argument('--head-dim', type=int, default=128)
    parser.add_argument('--work', default='decode:1,prefill:3072,long-prefill:12288',
                        help='name:tokens pairs (tokens per run, batch 1)')
    parser.add_argument('--resident', default='0,12,24')
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--reps', type=int, default=5)
    parser.add_argument('--peak-bytes', type=int, default=2**30)
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    device = torch.device(args.device)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = ToyConfig(hidden=args.hidden, intermediate=args.intermediate, n_heads=args.heads,
                    n_kv_heads=args.kv_heads, head_dim=args.head_dim)
    works = [(name, int(tokens)) for name, tokens in
             (item.split(':') for item in args.work.split(','))]
    residents = [int(r) for r in args.resident.split(',')]

    peak_gbps = pinned_peak(device, args.peak_bytes)
    print(f'pinned H2D peak: {peak_gbps:.1f} GB/s', flush=True)
    layers = build_stack(cfg, args.layers, device='meta')
    source = RandomSource(specs_of(layers, 'lm.'), device, cfg)
    seqs = [LayerSequence('lm', layers, 'lm.')]
    gen = torch.Generator(device=device).manual_seed(1234)
    xs = {name: torch.randn(1, tokens, cfg.hidden, generator=gen, device=device,
                            dtype=torch.bfloat16) for name, tokens in works}

    rows: list[Row] = []
    reference: dict[str, torch.Tensor] = {}
    base = torch.cuda.memory_allocated(device) if device.type == 'cuda' else 0
    working_set = 0
    configs = [(Mode.PRELOAD, args.layers)] + [(m, k) for k in residents
                                               for m in (Mode.SEQUENTIAL, Mode.PIPELINED)]
    for mode, k in configs:
        plan = ResidencyPlan({'lm': strided(k, args.layers)})
        sizing = OffloadRuntime(seqs, plan, mode=mode, device=device,
                                working_set_bytes=working_set)
        budget = sizing.vram_plan.required_bytes if mode is not Mode.PRELOAD else None
        rt = OffloadRuntime(seqs, plan, mode=mode, device=device, budget_bytes=budget,
                            working_set_bytes=working_set, instrument=True)
        t0 = time.perf_counter()
        rt.attach(source)
        print(f'{mode.value} resident={k}: attached in {time.perf_counter() - t0:.1f} s, '
              f'pinned {rt.pinned_bytes / GIB:.2f} GiB for {rt.streamed_param_bytes / GIB:.2f} '
              f'GiB streamed ({rt.pinned_bytes / max(rt.streamed_param_bytes, 1):.4f}x)',
              flush=True)
        for work, tokens in works:
            if device.type == 'cuda':
                torch.cuda.reset_peak_memory_stats(device)
                resident_after_attach = torch.cuda.memory_allocated(device)
            out, times, per_rep = measure(rt, layers, xs[work], args.warmup, args.reps, device)
            peak = (torch.cuda.max_memory_allocated(device) - base
                    if device.type == 'cuda' else 0)
            out_host = out.cpu()
            del out  # keep outputs off the device: the next run's peak must not count them
            if mode is Mode.PRELOAD:
                reference[work] = out_host
                if device.type == 'cuda':
                    activations = torch.cuda.max_memory_allocated(device) - resident_after_attach
                    working_set = max(working_set, int(1.25 * activations))
            exact = torch.equal(out_host, reference[work])
            row = summarise(mode.value, k, work, tokens, times, per_rep, peak_gbps, peak,
                            budget, exact)
            rows.append(row)
            print(f'  {work:<13} {row.measured_ms:9.1f} ms  bound {row.bound_ms:9.1f} ms  '
                  f'ratio {row.ratio:.3f}  copy {row.copy_gbps:5.1f} GB/s  '
                  f'exact {row.bit_exact}', flush=True)
        rt.detach()
        del rt, sizing

    elapsed = time.perf_counter() - t_start
    gpu = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'
    header = (f'# Offload runtime benchmark: {args.layers} x '
              f'{layers_bytes(cfg) / 2**20:.0f} MiB blocks on {gpu} (median of {args.reps} '
              f'runs after {args.warmup} warm-up; total {elapsed:.0f} s)')
    table = markdown(rows, peak_gbps, header)
    checks = verdicts(rows)
    summary = table + '\n\n' + '\n'.join(f'- {"PASS" if ok else "FAIL"}: {name}'
                                          for name, ok in checks.items())
    (args.out / 'bench_runtime.md').write_text(summary + '\n')
    (args.out / 'bench_runtime.json').write_text(json.dumps({
        'device': gpu, 'torch': torch.__version__, 'pinned_peak_gbps': peak_gbps,
        'config': {k: v for k, v in vars(args).items() if k != 'out'},
        'layer_bytes': layers_bytes(cfg), 'elapsed_s': elapsed,
        'rows': [asdict(r) for r in rows], 'checks': checks}, indent=2))
    print()
    print(summary)
    return 0 if checks['sequential and pipelined bit-exact vs preload'] else 1


def layers_bytes(cfg: ToyConfig) -> int:
    layer = build_stack(cfg, 1, device='meta')[0]
    return sum(t.numel() * t.element_size() for t in layer.state_dict().values())


if __name__ == '__main__':
    sys.exit(main())
