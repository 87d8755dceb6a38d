"""`prefix-copy`: how fast is one layer's K/V built for every row of a shared prompt prefix?

Several samples share the prompt's K/V (`SharedPrefixCache`); each attention call of a decode or
diffusion step builds the layer's full (rows, kv heads, length, head_dim) K/V from the one
prefix and the rows' suffixes. This times that join, as the cache does it
(`SharedPrefixLayer.update`: the prefix broadcast through wide integer views), against
`torch.cat` of the expanded BF16 prefix (a strided copy of one 2-byte element per thread) and
against `torch.cat` of an already repeated cache (what `DynamicCache` does per step), at
Alpamayo 1.5's sizes by default; every result is compared bit for bit. Prints ms per join of
the keys and the values.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch

from alpamayo_offload.model import SharedPrefixCache
from bench.diag.common import add_out, add_subcommand, at_least_one, out_dir


def register(sub: Any) -> None:
    """Add the `prefix-copy` sub-command."""
    p = add_subcommand(sub, 'prefix-copy', "time the join of a shared prefix and the rows' K/V",
                       __doc__)
    add_out(p, runs=20)
    p.add_argument('--rows', type=at_least_one, default=16,
                   help='rows (samples; default %(default)s)')
    p.add_argument('--kv-heads', type=at_least_one, default=8)
    p.add_argument('--prefix', type=at_least_one, default=3100,
                   help='prompt tokens (default %(default)s)')
    p.add_argument('--suffix', type=at_least_one, default=21,
                   help="rows' own tokens, the step's included (default %(default)s)")
    p.add_argument('--head-dim', type=at_least_one, default=128)
    p.add_argument('--device', default='cuda')
    p.set_defaults(func=run)


def _time_ms(fn: Callable[[], Any], runs: int, device: str) -> float:
    """Median wall ms of `fn` over `runs` calls after one warm-up, synchronised on CUDA."""
    def sync() -> None:
        if device.startswith('cuda'):
            torch.cuda.synchronize()
    fn()
    times = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def run(args: argparse.Namespace) -> int:
    """Time the three joins, check their bits, print a table and write prefix_copy.json."""
    out = out_dir(args)
    r, h, p, s, d = args.rows, args.kv_heads, args.prefix, args.suffix, args.head_dim
    gen = torch.Generator(device=args.device).manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=args.device).to(torch.bfloat16)

    prefix, suffix, new = randn(1, h, p, d), randn(r, h, s - 1, d), randn(r, h, 1, d)
    repeated = torch.cat([prefix.expand(r, -1, -1, -1), suffix], dim=-2)
    want = torch.cat([repeated, new], dim=-2)

    cache = SharedPrefixCache()
    cache.update(prefix, prefix, 0)
    cache.batch_repeat_interleave(r)
    cache.layers[0].append(suffix, suffix)

    def shared() -> torch.Tensor:
        """One step's update (the join), then the step's token dropped again."""
        keys = cache.update(new, new, 0)[0]
        cache.layers[0].crop(-1)
        return keys

    def expanded() -> torch.Tensor:
        """The keys and values as `torch.cat` of the expanded prefix builds them."""
        return [torch.cat([prefix.expand(r, -1, -1, -1), suffix, new], dim=-2)
                for _ in range(2)][0]

    def dynamic() -> torch.Tensor:
        """The keys and values as `DynamicCache` grows a repeated cache."""
        return [torch.cat([repeated, new], dim=-2) for _ in range(2)][0]

    joins = {'shared cache (wide integer copy)': shared,
             'cat of the expanded prefix (BF16)': expanded,
             'cat of a repeated cache (DynamicCache)': dynamic}
    rows = []
    for name, fn in joins.items():
        exact = torch.equal(fn().view(torch.uint8), want.view(torch.uint8))
        rows.append({'join': name, 'ms': _time_ms(fn, args.runs, args.device), 'exact': exact})
    size = 2 * 2 * r * h * (p + s) * d
    print(f'{r} rows x {h} kv heads x {p}+{s} tokens x {d}, BF16: {size / 1e6:.0f} MB per join '
          f'(K and V), {args.device}')
    for row in rows:
        print(f"  {row['join']:42s} {row['ms']:8.3f} ms  {size / row['ms'] / 1e6:7.0f} GB/s  "
              f"bit-exact {row['exact']}")
    (out / 'prefix_copy.json').write_text(json.dumps(
        {'rows': r, 'kv_heads': h, 'prefix': p, 'suffix': s, 'head_dim': d,
         'device': args.device, 'joins': rows}, indent=1))
    return 0 if all(row['exact'] for row in rows) else 1
