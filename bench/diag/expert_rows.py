"""`expert-rows`: one preloaded diffusion of the full-size expert at 1 row and at many, and its ops.

Builds Alpamayo 1.5 with its release expert (36 layers at the release widths) beside a language
model cut to a sliver (32 wide; its K/V heads and head size, which the expert reads, kept), all
on the device, and gives the expert a synthetic cache as the decode of `--rows` samples leaves
it: a prompt of `--prompt` tokens shared by every row (`SharedPrefixCache`) and `--decoded`
tokens of each row's own. A diffusion runs as `run_inference` runs it: the mask cast once, then
`--steps` Euler steps of `Rollout.expert_step`, under autocast in BF16, on the model as the
engine loads it by default (fused norms, rolled rotary) with the expert layers' CUDA graphs
unless `--no-graphs` (they take inputs of at most 256 tokens: 1 row, not 16).
Times `--runs` diffusions at 1 row and at `--rows`, each set after a warm-up, synchronised; then
the `--rows` diffusion under each `--chunk-caps` cap and with the fixed-shape parts graphed up to
`--graph-tokens` (each variant checked bit for bit against the default first: whether fewer chunks
or graphs at many rows pay, and what such graphs keep allocated); one step's wall time against its
kernels' device time (host-bound when the wall is longer); then, only after timing (CUPTI left
attached slows later launches; Kineto is asked to tear it down), profiles one step at `--rows` with
`torch.profiler` and prints its `--top` kernels by their own device time (ops by own host time on
the CPU) with their calls and the bytes they allocated, and the step's aten op calls and bytes.
Last, it checks the bits: the diffusion at `--rows` again with transformers' own attention (its
rotary, `repeat_kv`, SDPA casting the float mask and the promoted float32 keys on every call; no
graphs, no row chunks) must give the same actions bit for bit. Writes expert_rows.json under --out;
no trace file. Exits 1 if the bits differ.
Runs on the CPU too (`--device cpu --layers 2 --prompt 500`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextAttention

from alpamayo_offload.model import (
    AlpamayoR1,
    LayerGraphs,
    RolledRotaryAttention,
    Rollout,
    SharedPrefixCache,
    build_random,
    fuse_rms_norms,
    graph_decoder_layers,
    roll_rotary,
)
from alpamayo_offload.model import layer_graphs as graphs_module
from alpamayo_offload.model.class_swap import swap_class
from alpamayo_offload.model.config import (
    TRAJ_FUTURE_START_ID,
    AlpamayoConfig,
    full_1_5_config,
    tiny_config,
)
from bench.diag.common import add_out, add_subcommand, at_least_one, out_dir

_DTYPE = torch.bfloat16


def register(sub: Any) -> None:
    """Add the `expert-rows` sub-command."""
    p = add_subcommand(sub, 'expert-rows', 'time and profile the diffusion of many expert rows',
                       __doc__)
    add_out(p, runs=3)
    p.add_argument('--rows', type=at_least_one, default=16,
                   help='expert rows (samples, 2 per sample with guidance; default %(default)s)')
    p.add_argument('--device', default='cuda')
    p.add_argument('--layers', type=at_least_one, default=full_1_5_config().text.num_layers,
                   help='expert (and language model) layers (default %(default)s)')
    p.add_argument('--prompt', type=at_least_one, default=3100,
                   help='prompt tokens shared by every row (default %(default)s)')
    p.add_argument('--decoded', type=at_least_one, default=21,
                   help="each row's own tokens (default %(default)s)")
    p.add_argument('--steps', type=at_least_one, default=10,
                   help='Euler steps (default %(default)s)')
    p.add_argument('--top', type=at_least_one, default=10,
                   help='ops printed (default %(default)s)')
    p.add_argument('--graphs', action=argparse.BooleanOptionalAction, default=True,
                   help='CUDA graphs of the expert layers, as a preloaded engine has them')
    p.add_argument('--chunk-caps', type=_mib_list, default=(),
                   help='also time the --rows diffusion with these row-chunk caps, MiB, '
                        'comma-separated (e.g. 128,2048: fewer chunks, fewer calls)')
    p.add_argument('--graph-tokens', type=at_least_one, default=None,
                   help="also time it with the layers' fixed-shape parts graphed up to this "
                        f'many tokens (the library graphs up to '
                        f'{graphs_module.MAX_GRAPHED_TOKENS}); prints what the graphs keep '
                        'allocated')
    p.set_defaults(func=run)


def _mib_list(text: str) -> tuple[int, ...]:
    """Parse '128,2048' (MiB) -> bytes; every value at least 1."""
    try:
        caps = tuple(int(v) * 2**20 for v in text.split(',') if v.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f'not a list of MiB: {text!r}') from err
    if not caps or min(caps) < 2**20:
        raise argparse.ArgumentTypeError(f'every cap must be at least 1 MiB: {text!r}')
    return caps


def expert_config(layers: int) -> AlpamayoConfig:
    """Alpamayo 1.5 at its release expert, with a 32-wide language model and a tiny ViT."""
    base, tiny = full_1_5_config(), tiny_config()
    text = dataclasses.replace(base.text, hidden_size=tiny.text.hidden_size,
                               intermediate_size=tiny.text.intermediate_size, num_layers=layers)
    vision = dataclasses.replace(tiny.vision, deepstack_visual_indexes=tuple(
        i for i in tiny.vision.deepstack_visual_indexes if i < layers))
    return dataclasses.replace(base, text=text, vision=vision, vlm_name_or_path='expert-rows')


class Diffusion:
    """One diffusion's inputs at a number of rows, and the diffusion as `run_inference` runs it."""

    def __init__(self, ro: Rollout, rows: int, prompt: int, decoded: int, steps: int) -> None:
        cfg = ro.model.cfg
        gen = torch.Generator(device=ro.device).manual_seed(rows)

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, device=ro.device).to(_DTYPE)

        t = cfg.text
        self.cache = SharedPrefixCache()
        for layer in range(t.num_layers):
            self.cache.update(randn(1, t.num_kv_heads, prompt, t.head_dim),
                              randn(1, t.num_kv_heads, prompt, t.head_dim), layer)
        if rows > 1:
            self.cache.batch_repeat_interleave(rows)
        for layer in range(t.num_layers):
            self.cache.update(randn(rows, t.num_kv_heads, decoded, t.head_dim),
                              randn(rows, t.num_kv_heads, decoded, t.head_dim), layer)
        sequences = torch.zeros(rows, prompt + decoded, dtype=torch.long)
        sequences[:, -1] = TRAJ_FUTURE_START_ID
        self.ro, self.steps = ro, steps
        self.pos, self.mask = ro.expert_conditioning(
            sequences, prompt + decoded, torch.zeros(rows, 1, dtype=torch.long))
        self.x0 = torch.randn(rows, cfg.action.n_waypoints, 2, generator=gen, device=ro.device)
        self.t = torch.full((rows, 1, 1), 0.5, device=ro.device)

    def run(self, cast_mask: bool = True) -> torch.Tensor:
        """Every Euler step, the mask cast once first as `run_inference` does (`cast_mask`)."""
        with torch.no_grad(), self.ro.autocast():
            mask = self.ro.sdpa_mask(self.mask) if cast_mask else self.mask
            return self.ro.model.heads.diffusion.sample(
                self.x0, lambda x, t: self.ro.expert_step(x, t, self.cache, self.pos, mask)[0],
                self.steps)

    def step(self) -> torch.Tensor:
        """One velocity evaluation (`Rollout.expert_step`) on the cast mask."""
        with torch.no_grad(), self.ro.autocast():
            return self.ro.expert_step(self.x0, self.t, self.cache, self.pos,
                                       self.ro.sdpa_mask(self.mask))[0]


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], Any], runs: int, device: torch.device) -> list[float]:
    """Wall ms of `runs` calls of `fn` after one warm-up, each between two synchronisations."""
    fn()
    times = []
    for _ in range(runs):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _device_us(event: Any) -> float:
    """An event's own device time in us: a kernel's, none of an op's (its kernels have it)."""
    return getattr(event, 'self_device_time_total', getattr(event, 'self_cuda_time_total', 0.0))


def profile_step(diffusion: Diffusion, device: torch.device, top: int) -> dict[str, Any]:
    """Profile one step: its `top` kernels by own device time (ops by host time on the CPU).

    Also its aten op calls and the bytes they allocated.
    """
    cuda = device.type == 'cuda'
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _sync(device)
    with torch.profiler.profile(activities=activities, record_shapes=True,
                                profile_memory=True) as prof:
        diffusion.step()
        _sync(device)
    events = prof.key_averages()

    def ms(event: Any) -> float:
        return (_device_us(event) if cuda else event.self_cpu_time_total) / 1e3

    def allocated(event: Any) -> int:
        if not cuda:
            return max(0, event.self_cpu_memory_usage)
        return max(0, getattr(event, 'self_device_memory_usage',
                              getattr(event, 'self_cuda_memory_usage', 0)))

    ops = [e for e in events if e.key.startswith('aten::')]
    ranked = sorted(events, key=ms, reverse=True)[:top]
    # Kernels and copies only: an op's device time repeats its kernels'.
    device_ms = sum(_device_us(e) for e in events if not e.key.startswith('aten::')) / 1e3
    return {'time': 'device' if cuda else 'host',
            'device_ms_total': round(device_ms, 3) if cuda else None,
            'aten_calls': sum(e.count for e in ops),
            'allocated_bytes': sum(allocated(e) for e in ops),
            'top': [{'name': e.key, 'calls': e.count, 'ms': round(ms(e), 3),
                     'allocated_mb': round(allocated(e) / 2**20, 1)} for e in ranked]}


def build(device: torch.device, layers: int, graphs: bool) -> tuple[Rollout, LayerGraphs | None]:
    """The model on `device` as the engine loads it, its expert layers graphed (CUDA, `graphs`)."""
    model: AlpamayoR1 = build_random(expert_config(layers), seed=0, device=device, dtype=_DTYPE)
    fuse_rms_norms(model)               # as the engine's defaults load it
    roll_rotary(model)
    graph_decoder_layers(model)
    layer_graphs = None
    if graphs and device.type == 'cuda':
        layer_graphs = LayerGraphs(device)
        layer_graphs.enable(model.expert_lm.layers)
    return Rollout(model, device), layer_graphs


def same_bits_as_transformers(diffusion: Diffusion, graphs: LayerGraphs | None) -> bool:
    """Run the diffusion, then again with transformers' attention; tell whether the bits agree.

    The model keeps transformers' attention afterwards (its graphs released).
    """
    ours = diffusion.run()
    if graphs is not None:
        graphs.release()
    swap_class(diffusion.ro.model, RolledRotaryAttention, Qwen3VLTextAttention)
    theirs = diffusion.run(cast_mask=False)
    return torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8))


def time_variants(ro: Rollout, args: argparse.Namespace,
                  device: torch.device) -> dict[str, dict[str, Any]]:
    """Time the `--rows` diffusion under each `--chunk-caps` cap and with `--graph-tokens`.

    Each variant is checked bit for bit against the default run first; the model is left as
    it was (caps and the graphed-token limit restored).
    """
    diffusion = Diffusion(ro, args.rows, args.prompt, args.decoded, args.steps)
    reference = diffusion.run()
    attention = [m for m in ro.model.modules() if isinstance(m, RolledRotaryAttention)]
    default_cap = attention[0].row_chunk_bytes if attention else None
    out: dict[str, dict[str, Any]] = {}

    def timed(name: str) -> dict[str, Any]:
        same = torch.equal(diffusion.run().view(torch.uint8), reference.view(torch.uint8))
        runs = time_ms(diffusion.run, args.runs, device)
        out[name] = {'median_ms': round(statistics.median(runs), 2),
                     'runs_ms': [round(t, 2) for t in runs], 'same_bits': same}
        return out[name]

    for cap in args.chunk_caps:
        for module in attention:
            module.row_chunk_bytes = cap
        timed(f'chunk cap {cap // 2**20} MiB')
    for module in attention:
        module.row_chunk_bytes = default_cap
    if args.graph_tokens is not None and device.type == 'cuda':
        before = torch.cuda.memory_allocated(device)
        limit, graphs_module.MAX_GRAPHED_TOKENS = (graphs_module.MAX_GRAPHED_TOKENS,
                                                   args.graph_tokens)
        try:
            row = timed(f'graphed up to {args.graph_tokens} tokens')
        finally:
            graphs_module.MAX_GRAPHED_TOKENS = limit
        row['graph_mib'] = (torch.cuda.memory_allocated(device) - before) / 2**20
    return out


def run(args: argparse.Namespace) -> int:
    """Time 1 row and `--rows`, profile a step at `--rows`, print and write expert_rows.json."""
    out = out_dir(args)
    device = torch.device(args.device)
    ro, graphs = build(device, args.layers, args.graphs)
    timings = {}
    for rows in sorted({1, args.rows}):
        diffusion = Diffusion(ro, rows, args.prompt, args.decoded, args.steps)
        runs = time_ms(diffusion.run, args.runs, device)
        timings[rows] = {'median_ms': round(statistics.median(runs), 2),
                         'runs_ms': [round(t, 2) for t in runs]}
        del diffusion
    variants = time_variants(ro, args, device)
    step_ms = time_ms(Diffusion(ro, args.rows, args.prompt, args.decoded, 1).step, args.runs,
                      device)
    os.environ.setdefault('TEARDOWN_CUPTI', '1')     # before the profiler first starts
    profile = profile_step(Diffusion(ro, args.rows, args.prompt, args.decoded, args.steps),
                           device, args.top)
    exact = same_bits_as_transformers(
        Diffusion(ro, args.rows, args.prompt, args.decoded, args.steps), graphs)
    print(f'expert diffusion, {args.layers} layers, {args.steps} steps, prompt {args.prompt} + '
          f'{args.decoded} tokens, {device}, graphs {args.graphs and device.type == "cuda"}')
    for rows, timing in timings.items():
        print(f'  {rows:3d} rows: {timing["median_ms"]:9.2f} ms (median of {args.runs})')
    for name, timing in variants.items():
        print(f'  {args.rows:3d} rows, {name}: {timing["median_ms"]:9.2f} ms'
              + (f' (graphs keep {timing["graph_mib"]:.0f} MiB)' if 'graph_mib' in timing
                 else ''))
    device_ms = profile['device_ms_total']
    print(f'one step at {args.rows} rows: wall {statistics.median(step_ms):.2f} ms'
          + (f', kernels {device_ms:.2f} ms' if device_ms is not None else '')
          + f', {profile["aten_calls"]} aten calls, '
          f'{profile["allocated_bytes"] / 2**20:.0f} MiB allocated; top ops by '
          f'{profile["time"]} time:')
    print(f'  {"op":48s} {"calls":>6s} {"ms":>9s} {"alloc MiB":>10s}')
    for op in profile['top']:
        print(f'  {op["name"][:48]:48s} {op["calls"]:6d} {op["ms"]:9.3f} '
              f'{op["allocated_mb"]:10.1f}')
    print(f'{args.rows} rows, same bits as transformers\' attention: {exact}')
    (out / 'expert_rows.json').write_text(json.dumps(
        {'rows': args.rows, 'layers': args.layers, 'prompt': args.prompt,
         'decoded': args.decoded, 'steps': args.steps, 'device': str(device),
         'graphs': args.graphs and device.type == 'cuda', 'timings': timings,
         'variants': variants, 'step_wall_ms': [round(t, 3) for t in step_ms],
         'step_profile': profile, 'same_bits_as_transformers': exact}, indent=1))
    return 0 if exact and all(v['same_bits'] for v in variants.values()) else 1
