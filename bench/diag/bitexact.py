"""`bitexact`: preload against each offload variant on one model, strict deterministic mode.

Every offload mode must reproduce the preload run bit for bit once the reference itself is
repeatable: deterministic algorithms in strict mode (`warn_only=False`; under `warn_only`
PyTorch still picks cuDNN and split-key attention, whose results vary run to run, without a
warning). The engine is built in default mode and deterministic mode is switched on around each
inference, as `bench.bench_peers` does; `--home` adds its teardown between rows (modules back to
the host, weights restored from the home copy). Variants: preload again, pipelined with nothing
resident, a mixed plan with the embedding on the host (`--plan` gives another), each also
under a 16 GiB VRAM cap, and preload once more at the end. Per variant: the trajectory's max
absolute difference from the reference, the first differing token and any warning.
"""
from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

import numpy as np
import torch

from alpamayo_offload.engine import Engine
from bench.diag.common import (
    Plan,
    add_out,
    add_plan,
    add_subcommand,
    out_dir,
    paper_engine,
    plan_from_file,
)

GIB = 2**30
# A plan with resident layers in every module and the embedding on the host.
MIXED_PLAN: Plan = ({'vit': (0,), 'lm': tuple(range(1, 29)), 'expert': (6, 28)}, True)
CAP = 16 * GIB


def register(sub: Any) -> None:
    """Add the `bitexact` sub-command."""
    p = add_subcommand(sub, 'bitexact', 'offload variants against preload, bit for bit', __doc__)
    add_out(p)
    add_plan(p)
    p.add_argument('--model', default='full', help='preset or checkpoint (default %(default)s)')
    p.add_argument('--home', action='store_true',
                   help="bench_peers' teardown between variants (weights from a home copy)")
    p.set_defaults(func=run)


def _variants(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    resident, on_host = plan
    planned = {'mode': 'pipelined', 'resident': resident, 'embed_on_host': on_host}
    return [('preload again', {'mode': 'preload'}),
            ('pipelined, nothing resident', {'mode': 'pipelined'}),
            ('pipelined, nothing resident, capped', {'mode': 'pipelined', 'cap': CAP}),
            ('pipelined, plan', planned),
            ('pipelined, plan, capped', {**planned, 'cap': CAP}),
            ('preload, after the others', {'mode': 'preload'})]


def _strict_infer(engine: Engine, model_input: Any) -> tuple[Any, list[str]]:
    """Run one inference in strict deterministic mode; return it and the warnings it raised."""
    torch.use_deterministic_algorithms(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            out = engine.infer(model_input)
    finally:
        torch.use_deterministic_algorithms(False)
    return out, sorted({str(w.message)[:160] for w in caught})


def run(args: argparse.Namespace) -> int:
    """Compare every variant with the reference; exit 1 if any differs."""
    out = out_dir(args)
    plan = plan_from_file(args.plan) if args.plan else MIXED_PLAN
    engine = paper_engine(model=args.model, device='cuda', mode='preload')
    home = None
    if args.home:
        from bench.peers.home import HomeCopy

        engine.close()
        for module in engine.model.non_layer_modules().values():
            module.to('cpu')
        home = HomeCopy(engine.model)
        home.restore()
        engine.replan(resident={}, mode='preload')
    model_input = engine.example_input()
    ref, warned = _strict_infer(engine, model_input)
    rows = [{'variant': 'reference (preload)', 'max_abs_dxyz': 0.0, 'first_token_diff': None,
             'warnings': warned}]
    total = torch.cuda.get_device_properties(0).total_memory
    for name, kw in _variants(plan):
        if home is not None:
            engine.close()
            home.restore()
        torch.cuda.set_per_process_memory_fraction(kw.get('cap', total) / total)
        engine.replan(resident=kw.get('resident', {}), mode=kw['mode'],
                      embed_on_host=kw.get('embed_on_host', False), budget_bytes=kw.get('cap'))
        got, warned = _strict_infer(engine, model_input)
        first = next((i for i, (a, b) in enumerate(zip(got.coc_token_ids, ref.coc_token_ids,
                                                        strict=False)) if a != b), None)
        rows.append({'variant': name,
                     'max_abs_dxyz': float(np.max(np.abs(got.samples_xyz - ref.samples_xyz))),
                     'first_token_diff': first, 'warnings': warned})
    (out / 'bitexact.json').write_text(json.dumps({'model': args.model, 'home': args.home,
                                                   'rows': rows}, indent=1) + '\n')
    print(f'{"variant":40s} {"max |dxyz|":>11s}  first differing token')
    for row in rows:
        print(f"{row['variant']:40s} {row['max_abs_dxyz']:11.3g}  {row['first_token_diff']}")
        for w in row['warnings']:
            print('  warning:', w)
    exact = all(r['max_abs_dxyz'] == 0.0 and r['first_token_diff'] is None for r in rows)
    print('all variants bit-exact with preload' if exact else 'MISMATCH against preload')
    return 0 if exact else 1
