"""Sub-commands `profile`, `plan` and `predict` of `alpamayo-offload`.

`profile` runs the real inference once (engine, sequential mode, nothing resident, instrumented)
and writes a profile JSON. `plan` turns a profile and a VRAM budget into the residency parameter
file. `predict` prints predicted latency against budget, or the breakdown of one plan file.
The engine and torch are imported inside the handlers: they are only needed on the GPU machine.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from pathlib import Path
from typing import Any

from alpamayo_offload.planning.errors import PlanningError
from alpamayo_offload.planning.expectation import cpu_budget, predicted_stage_ms
from alpamayo_offload.planning.identity import model_identity
from alpamayo_offload.planning.params import (
    MODULES,
    PlanParams,
    PlanWorkload,
    profile_ref,
    read_plan_params,
    write_plan_params,
)
from alpamayo_offload.planning.planner import (
    COMPRESSION_CHOICES,
    PlannerOptions,
    PlanResult,
    interleaved_plan,
    minimum_budget,
    plan,
    vram_needed,
)
from alpamayo_offload.planning.predictor import Pipeline, Placement, Workload, predict
from alpamayo_offload.planning.profile import Profile, check_profile, load_profile, save_profile
from alpamayo_offload.planning.units import format_bytes, is_free_relative, parse_budget

LOG = logging.getLogger(__name__)
# The node's default decode.max_tokens (app/schema.py): profiling sits below the app layer and
# may not import it, so a test keeps the two equal.
NODE_MAX_DECODE_TOKENS = 32


def register(subparsers: Any) -> None:
    """Add `profile`, `plan` and `predict` to the top-level parser."""
    p = subparsers.add_parser('profile', help='measure per-layer copy/compute times (GPU)')
    p.add_argument('--model', default='tiny', help="preset name or checkpoint directory")
    p.add_argument('--device', default='cuda')
    p.add_argument('--decode-tokens', type=int, default=21, help='fixed decode token count')
    p.add_argument('--diffusion-steps', type=int, default=10)
    p.add_argument('--warmup', type=int, default=1, help='untimed runs before the measured one')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--num-samples', type=int, default=1,
                   help="trajectories per inference to profile (the node's decode.num_samples; "
                        'default %(default)s)')
    p.add_argument('--guidance-weight', type=float, default=None,
                   help="profile with navigation guidance at this weight (the node's "
                        'navigation.guidance_weight; Alpamayo 1.5 or 2 Super; default: off)')
    p.add_argument('--cameras', type=int, default=None,
                   help="cameras to profile (the length of the node's cameras.slots; default: "
                        "the model family's release cameras)")
    p.add_argument('--per-op-norms', action='store_true',
                   help="time transformers' op-by-op RMSNorm instead of the fused one (for a "
                        'node run with fused_norms: false)')
    p.add_argument('--out', default='profile.json')
    p.set_defaults(func=_cmd_profile)

    q = subparsers.add_parser('plan', help='choose resident layers for a VRAM budget')
    _add_common(q)
    q.add_argument('--budget', required=True,
                   help='"12GiB", "free-2GiB" or "0.8free" (free VRAM of this GPU)')
    q.add_argument('--out', default='config/residency.param.yaml')
    q.set_defaults(func=_cmd_plan)

    r = subparsers.add_parser('predict', help='predicted latency vs VRAM budget, or of a plan')
    _add_common(r)
    r.add_argument('--plan', help='predict this parameter file instead of a budget sweep')
    r.add_argument('--step', default='0.5GiB', help='budget step of the sweep')
    r.add_argument('--max-budget', default=None, help='end of the sweep (default: all resident)')
    r.add_argument('--json', dest='json_out', help='also write the result as JSON here')
    r.set_defaults(func=_cmd_predict)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument('--profile', required=True, help='profile JSON from `alpamayo-offload profile`')
    p.add_argument('--decode-passes', type=int, default=None,
                   help="decode passes to plan for (the paper's N; default: as profiled)")
    p.add_argument('--diffusion-steps', type=int, default=None, help='default: as profiled')
    p.add_argument('--modules', default='vit,lm,expert',
                   help='modules that may keep layers resident (comma separated)')
    p.add_argument('--no-embed-on-host', action='store_true',
                   help='keep the token embedding on the GPU')
    p.add_argument('--pipeline', choices=[m.value for m in Pipeline], default='pipelined')
    p.add_argument('--max-decode-tokens', type=int, default=NODE_MAX_DECODE_TOKENS,
                   help="the node's decode.max_tokens: its VRAM check counts the KV cache for "
                        'this many tokens, and so does the plan (default %(default)s, the '
                        "node's default)")
    p.add_argument('--cpu-headroom', type=float, default=1.0,
                   help='choose the plan as if the CPU issued work this many times slower than '
                        'profiled (e.g. 1.33 for a CPU shared with other nodes): avoids plans '
                        'that turn host-bound when it slows down; the prediction stays at the '
                        'profiled speed (default %(default)s)')
    p.add_argument('--model', default=None,
                   help='model in use (preset or checkpoint); refuses a profile of another one')
    p.add_argument('--force', action='store_true', help='use a profile from another GPU or model')
    p.add_argument('--num-samples', type=int, default=None,
                   help="the node's decode.num_samples; refused unless the profile measured "
                        'it (default: as profiled)')
    p.add_argument('--guidance', choices=('on', 'off'), default=None,
                   help="navigation guidance in the node (navigation.guidance_weight > 0); "
                        'refused unless the profile measured it (default: as profiled)')
    p.add_argument('--cameras', type=int, default=None,
                   help="the node's camera count (cameras.slots); refused unless the profile "
                        'measured it (default: as profiled)')
    p.add_argument('--compression', choices=COMPRESSION_CHOICES, default='auto',
                   help="auto: compress layers where the profile measured compression and it "
                        "pays; off: never; on: only compressed plans (default %(default)s)")


def _options(args: argparse.Namespace, profile: Profile) -> PlannerOptions:
    decode = args.decode_passes if args.decode_passes is not None else (
        profile.measured_passes('decode'))
    steps = args.diffusion_steps if args.diffusion_steps is not None else (
        profile.measured_passes('diffusion'))
    if args.max_decode_tokens < 1:
        raise PlanningError(f'--max-decode-tokens {args.max_decode_tokens}: give at least 1')
    if not 1.0 <= args.cpu_headroom <= 4.0:
        raise PlanningError(f'--cpu-headroom {args.cpu_headroom}: give 1 (the profiled CPU) to 4')
    try:
        workload = Workload(decode, steps, args.num_samples,
                            None if args.guidance is None else args.guidance == 'on',
                            args.cameras).resolved(profile)
    except ValueError as err:
        raise PlanningError(str(err)) from err
    return PlannerOptions(workload=workload, pipeline=Pipeline(args.pipeline),
                          allow_embed_on_host=not args.no_embed_on_host,
                          sequences=tuple(m.strip() for m in args.modules.split(',') if m.strip()),
                          max_decode_tokens=args.max_decode_tokens,
                          cpu_headroom=args.cpu_headroom,
                          compression=args.compression)


def _gpu() -> tuple[str | None, int | None, str | None]:
    """Name, free bytes and driver release of the current GPU, or Nones without one."""
    try:
        import torch
    except ImportError:
        return None, None, None
    if not torch.cuda.is_available():
        return None, None, None
    from alpamayo_offload.engine.identity import driver_version

    return (torch.cuda.get_device_name(), int(torch.cuda.mem_get_info()[0]),
            driver_version() or None)


def _load_checked(args: argparse.Namespace) -> tuple[Profile, str, int | None]:
    profile, digest = load_profile(args.profile)
    gpu_name, free, driver = _gpu()
    check_profile(profile, gpu_name=gpu_name,
                  model_identity=model_identity(args.model) if args.model else None,
                  driver=driver, force=args.force)
    return profile, digest, free


def _resolve_budget(spec: str, profile: Profile, free: int | None) -> int:
    # A relative budget is taken from free VRAM less the CUDA context the node will create.
    if is_free_relative(spec) and free is not None:
        free = max(0, free - profile.vram.context_bytes)
    return parse_budget(spec, free)


def plan_file_params(profile: Profile, result: PlanResult, budget: int, ref: str,
                     cpu_headroom: float = 1.0, workload: Workload | None = None) -> PlanParams:
    """Build the parameter file of a planner result: placement, prediction, CPU it assumes.

    The file records the workload planned for (`workload`, None: the profile's own passes;
    batch, guidance and cameras the profile's wherever the workload leaves them None).
    """
    placement, prediction = result.placement, result.prediction
    planned = (workload or Workload(profile.measured_passes('decode'),
                                    profile.measured_passes('diffusion'))).resolved(profile)
    return PlanParams(resident={m: placement.indices(m) for m in MODULES},
                      embed_on_host=placement.embed_on_host,
                      compressed={m: placement.compressed_indices(m) for m in MODULES},
                      compression='on' if placement.compression else 'off',
                      fused_norms=profile.machine.fused_norms,
                      vram_budget=format_bytes(budget),
                      predicted_latency_s=prediction.total_s, profile=ref,
                      cpu_sensitive_phases=','.join(prediction.cpu_sensitive_phases()),
                      cpu_headroom=cpu_headroom,
                      predicted_ms=predicted_stage_ms(prediction),
                      cpu_budget=cpu_budget(profile, prediction, cpu_headroom),
                      workload=PlanWorkload(num_samples=int(planned.num_samples or 1),
                                            guidance=bool(planned.guidance),
                                            cameras=planned.cameras or 0,
                                            decode_passes=planned.decode_passes,
                                            diffusion_steps=planned.diffusion_steps))


def _cmd_plan(args: argparse.Namespace) -> int:
    try:
        profile, digest, free = _load_checked(args)
        budget = _resolve_budget(args.budget, profile, free)
        options = _options(args, profile)
        result = plan(profile, budget, options)
    except PlanningError as err:
        LOG.error('%s', err)
        return 2
    params = plan_file_params(profile, result, budget, profile_ref(args.profile, digest),
                              args.cpu_headroom, options.workload)
    header = (f'Written by `alpamayo-offload plan --budget {args.budget}` '
              f'({result.strategy}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ})'
              f'\nVRAM needed {format_bytes(result.vram.total)} with decode.max_tokens '
              f'{args.max_decode_tokens}; chosen with CPU headroom '
              f'{args.cpu_headroom:g} (1: as profiled); '
              f'-1 in resident_layers (compressed_layers) means no layer of that module is '
              f'resident (kept compressed).')
    write_plan_params(args.out, params, header)
    sys.stdout.write(_describe(profile, result.placement, options) + '\n')
    sys.stdout.write(f'wrote {args.out}\n')
    return 0


# CPU slowdowns `_describe` prices a plan at: how far the plan's latency follows the host.
_SLOWER_CPU = (1.25, 1.5)


def _at_slower_cpu(profile: Profile, placement: Placement, options: PlannerOptions) -> str:
    """Say the plan's predicted latency with the CPU issuing work `_SLOWER_CPU` times slower."""
    if not profile.host_issue_measured:
        return 'not predicted (the profile has no host issue times)'
    slower = [predict(profile.with_host_scaled(f), placement, options.workload,
                      options.pipeline).total_s for f in _SLOWER_CPU]
    return ', '.join(f'x{f:g} {s:.3f} s' for f, s in zip(_SLOWER_CPU, slower, strict=True))


def _describe(profile: Profile, placement: Placement, options: PlannerOptions) -> str:
    pred = predict(profile, placement, options.workload, options.pipeline)
    vram = vram_needed(profile, placement, options.max_decode_tokens)
    packed = (f', kept compressed {format_bytes(vram.compressed)}, staging '
              f'{format_bytes(vram.staging)}' if placement.compression else '')
    lines = [f'predicted {pred.total_s:.3f} s, VRAM {format_bytes(vram.total)} '
             f'(resident {format_bytes(vram.resident)}, slots {format_bytes(vram.slots)}'
             f'{packed}, fixed {format_bytes(vram.fixed + vram.embed)}, '
             f'working set {format_bytes(vram.working_set)}), embed on host: '
             f'{placement.embed_on_host}, compression: '
             f'{"on" if placement.compression else "off"}',
             f'with a slower CPU: {_at_slower_cpu(profile, placement, options)}',
             f'{"phase":<10} {"passes":>6} {"wall ms":>10} {"copy ms":>10} {"compute ms":>10} '
             f'{"bubble ms":>10} {"host ms":>10} {"decomp ms":>10}  follows the CPU']
    lines += [f'{p.name:<10} {p.passes:>6} {p.wall_ms:>10.1f} {p.copy_ms:>10.1f} '
              f'{p.compute_ms:>10.1f} {p.bubble_ms:>10.1f} {p.host_ms:>10.1f} '
              f'{p.decompress_ms:>10.1f}  {"yes" if p.cpu_sensitive else "no"}'
              for p in pred.phases]
    for seq in profile.sequences:
        lines.append(f'resident {seq.name}: {list(placement.indices(seq.name))}')
        if placement.compression:
            lines.append(f'kept compressed {seq.name}: '
                         f'{list(placement.compressed_indices(seq.name))}')
    return '\n'.join(lines)


def plan_placement(params: PlanParams) -> Placement:
    """Return the placement a plan file describes (resident, kept compressed, compression)."""
    return Placement.of(params.resident, params.embed_on_host, params.compressed,
                        params.compression == 'on')


def _cmd_predict(args: argparse.Namespace) -> int:
    try:
        profile, _, _ = _load_checked(args)
        options = _options(args, profile)
        if args.plan:
            params = read_plan_params(args.plan)
            placement = plan_placement(params)
            sys.stdout.write(_describe(profile, placement, options) + '\n')
            return 0
        rows = _sweep(profile, options, parse_budget(args.step),
                      parse_budget(args.max_budget) if args.max_budget else None)
    except PlanningError as err:
        LOG.error('%s', err)
        return 2
    sys.stdout.write(f'{"budget":>11} {"planned s":>10} {"interleaved-lm s":>17} '
                     f'{"resident vit/lm/expert":>23} {"embed host":>10}\n')
    for row in rows:
        il = '-' if row['interleaved_s'] is None else f'{row["interleaved_s"]:.3f}'
        counts = '/'.join(str(row['resident'][m]) for m in ('vit', 'lm', 'expert'))
        sys.stdout.write(f'{row["budget"]:>11} {row["planned_s"]:>10.3f} {il:>17} '
                         f'{counts:>23} {str(row["embed_on_host"]):>10}\n')
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1) + '\n')
    return 0


def _sweep(profile: Profile, options: PlannerOptions, step: int, top: int | None
           ) -> list[dict[str, Any]]:
    """Plan every budget from the minimum to `top` (default: everything resident) by `step`."""
    low = minimum_budget(profile, options.allow_embed_on_host, options.max_decode_tokens)
    everything = Placement.of({s.name: range(s.n_layers) for s in profile.sequences})
    high = top if top is not None else vram_needed(profile, everything,
                                                   options.max_decode_tokens).total
    rows = []
    budget = low
    while budget <= high + step - 1:
        result = plan(profile, budget, options)
        il = (interleaved_plan(profile, budget, options)
              if any(s.name == 'lm' for s in profile.sequences) else None)
        rows.append({'budget': format_bytes(budget), 'budget_bytes': budget,
                     'planned_s': result.prediction.total_s,
                     'interleaved_s': il.prediction.total_s if il else None,
                     'resident': {m: len(result.placement.indices(m))
                                  for m in ('vit', 'lm', 'expert')},
                     'embed_on_host': result.placement.embed_on_host,
                     'breakdown': result.prediction.as_dict()})
        budget += step
    return rows


def _cmd_profile(args: argparse.Namespace) -> int:
    from alpamayo_offload.profiling import gpu_profile

    try:
        profile = gpu_profile.run_profile(
            model=args.model, device=args.device, decode_tokens=args.decode_tokens,
            diffusion_steps=args.diffusion_steps, warmup=args.warmup, seed=args.seed,
            fused_norms=not args.per_op_norms, num_samples=args.num_samples,
            guidance_weight=args.guidance_weight, cameras=args.cameras)
    except PlanningError as err:
        LOG.error('%s', err)
        return 2
    digest = save_profile(profile, args.out)
    sys.stdout.write(f'wrote {args.out} (sha256 {digest[:16]})\n{workload_line(profile)}\n'
                     f'{_summary(profile)}\n')
    return 0


def workload_line(profile: Profile) -> str:
    """Say the workload a profile measured in one line (what its plans are for)."""
    measured = profile.workload
    cameras = measured.cameras or "the family's release"
    return (f'workload: {measured.num_samples} sample(s), navigation guidance '
            f'{"on" if measured.guidance else "off"}, {cameras} cameras, '
            f'{profile.measured_passes("decode")} decode passes, '
            f'{profile.measured_passes("diffusion")} diffusion steps')


def _summary(profile: Profile) -> str:
    """Say what the profile measured in a few lines: layers, link, host terms, fitted times."""
    lines = [f'{seq.name}: {seq.n_layers} layers, {format_bytes(max(seq.layer_bytes))} max, '
             f'DMA {max(seq.dma_ms):.2f} ms max' for seq in profile.sequences]
    probes = profile.settings.get('pinned_h2d_gbps_probes')
    lines.append(f'pinned copy {profile.machine.pinned_h2d_gbps:.2f} GB/s'
                 + (f" (highest of {', '.join(f'{x:.2f}' for x in probes)})" if probes else ''))
    lines.append(f'host pre/postprocessing {profile.host_ms:.1f} ms')
    for phase, fit in profile.settings.get('fitted_tails', {}).items():
        lines.append(f"{phase}: non-layer time {fit['sequential_ms']:.1f} ms sequential, "
                     f"{fit['fitted_ms']:.1f} ms fitted to a pipelined run")
    for seq in profile.sequences:
        if seq.compression_measured:
            ratio = sum(seq.compressed_bytes) / sum(seq.layer_bytes)
            lines.append(f'{seq.name} compressed: {ratio:.3f} of its bytes, decompression '
                         f'{seq.decompress_gbps:.0f} GB/s, SM contention '
                         f'{seq.decompress_contention:.2f}')
    if not profile.compression_measured:
        lines.append(f"compression: {profile.settings.get('compression', 'not measured')}")
    return '\n'.join(lines)
