"""Workloads (samples, navigation guidance) at VRAM budgets, planned against the whole GPU.

Full-size random weights (`--model 1.5` or `2super`), fixed example input (the family's release
cameras x 4 frames, presized as the node delivers them), 21 fixed decode tokens, 10 diffusion
steps. The engine is built once with every layer packed into one pinned host store
(`pin_all_layers`), so every row re-plans the loaded model (`Engine.replan`) without re-copying.
Per workload (`--workloads`: s1, s16 = 1 or 16 samples; nav1, nav16 = the same with navigation
classifier-free guidance, weight 1.5, route text in the input):

1. a profile of that workload (profiles and plans are workload-aware: a plan for another
   workload is refused), measured here as `alpamayo-offload profile` does (`profile_engine` +
   `add_host_terms`) and saved as profile_<workload>.json, or read with `--profile FILE|DIR`;
2. preload (whole GPU, uncapped): the reference;
3. per budget (`--budgets`, GiB): the planner's plan under a VRAM cap emulated with
   `torch.cuda.set_per_process_memory_fraction`.

Each row: one deterministic pass (strict `torch.use_deterministic_algorithms(True)`,
CUBLAS_WORKSPACE_CONFIG=:4096:8, set before the first cuBLAS call), compared bit for bit with
the preload row's (every sample's trajectory, the decoded token ids), then `--warmup` and
`--runs` timed inferences in the default mode (the latency figure; the deterministic pass's
time is reported beside it), all through `bench.peers.measure.measure`. Peak VRAM is
`torch.cuda.max_memory_allocated` since a reset at the row's start; host RSS and pinned bytes
(the store, the runtime's, torch's caching host allocator, and what a process holding only
this plan's streamed layers would pin) per row. `--accelerate GiB` adds Accelerate
`device_map="auto"` at that cap (s1), last, on the same model (`bench.workloads_accelerate`):
the engine hands its weights over (`Engine.host_model`: the layers become views of the store,
its pages pageable again, so the model is never held twice in host RAM) and bench_peers'
Alpamayo bench runs its Accelerate row on them, compared bit for bit with s1's preload. Its
time is estimated from Accelerate's placement; when a full inference no longer fits the time
left, it runs prefill and fewer decode passes and extrapolates (labelled in the row and the
table); it times only its deterministic pass when a second inference would not fit. Host RSS:
the peak of every stage (build, profiles, each row's re-plan and inferences, the hand-over and
Accelerate's set-up), each since the stage's start.

Time: `--budget-s` skips (with the reason, in rows.jsonl) any profile or row whose estimate
would end past it; estimates are printed before each part and refined from what was measured.
Every row is appended to rows.jsonl at once, so a cut run keeps them; `--report` rebuilds the
table and bench_workloads.json from --out (and `--merge DIR`s) on any machine, without torch.
The table comes last on stdout: measured against each target's bound, a verdict per target.

GPU machine (PYTHONPATH = the repository root). 1.5, one command (~40 s build, ~90 s a
workload's profile, ~30 s its rows):
    PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout 590 python3 -m bench.bench_workloads \
        --model 1.5 --out $OUT/wl15 --budget-s 540
2 Super (71.6 GB): the build (~100 s) and its one profile (~300 s) leave too little of a
command for the rows, so a first command profiles and a second measures every row from that
profile (build/ is git-ignored and stays on a warm machine; else carry it):
    PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout 590 python3 -m bench.bench_workloads \
        --model 2super --out $OUT/wl2s --parts profile --budget-s 540; mkdir -p build/wl2s && \
        cp $OUT/wl2s/profile_*.json build/wl2s/
    PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout 590 python3 -m bench.bench_workloads \
        --model 2super --out $OUT/wl2s_rows --profile build/wl2s --parts rows,accelerate \
        --budget-s 540
The second, estimated: build ~100 s; preload ~10 s; 48 / 32 / 24 GiB ~30 / ~50 / ~65 s
(3 inferences each, ~25 / 42 / 51 GB of LM layers streamed per pass at ~55 GB/s); Accelerate
at 32 GiB ~15 s of set-up and ~165 s an inference (38.7 GB of LM layers and head offloaded x 22
passes, 4.8 GB of expert x 10 steps, at ~5.5 GB/s): its deterministic pass only, ~440 s in all.
CPU smoke (tiny presets, tiny frames, synthetic profile):
    .venv/bin/python -m bench.bench_workloads --smoke --model tiny-1.5 --out /tmp/wl
Report from the rows of one or more runs:
    python -m bench.bench_workloads --report --out DIR [--merge DIR2 ...]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')   # before the first cuBLAS call

from alpamayo_offload.planning import (  # noqa: E402  (planning is pure: no torch)
    BudgetError,
    Pipeline,
    Placement,
    PlannerOptions,
    Profile,
    ProfiledWorkload,
    Workload,
    load_profile,
    plan,
    predict,
    save_profile,
)

LOG = logging.getLogger('bench_workloads')
GIB = 2**30
DECODE_TOKENS, DIFFUSION_STEPS = 21, 10
GUIDANCE_WEIGHT = 1.5


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload: trajectories per inference and whether navigation guidance runs."""

    name: str
    num_samples: int
    guidance: bool

    def planner_workload(self) -> Workload:
        """The planner's workload (cameras as profiled)."""
        return Workload(DECODE_TOKENS, DIFFUSION_STEPS, self.num_samples, self.guidance)

    def profiled(self) -> ProfiledWorkload:
        """The profile record of this workload (for a synthetic profile)."""
        return ProfiledWorkload(num_samples=self.num_samples, guidance=self.guidance)


WORKLOADS = {w.name: w for w in (WorkloadSpec('s1', 1, False), WorkloadSpec('s16', 16, False),
                                 WorkloadSpec('nav1', 1, True), WorkloadSpec('nav16', 16, True))}
# Per preset: budgets (GiB), workloads, the Accelerate cap (GiB or None) and the VRAM it keeps
# free of max_memory (bench_peers' 4 GiB; scaled down for the tiny presets), the targets
# judged, and a first guess of the build's seconds (random weights drawn on the GPU, packed and
# pinned).
_TARGETS_15 = ('bit_exact', 'peak_vram', 'predictor', 'samples_ratio', 'guidance_ratio')
_TARGETS_2S = ('bit_exact', 'peak_vram', 'copy_bound', 'predictor', 'host_rss',
               'vs_accelerate')
PRESETS: dict[str, dict[str, Any]] = {
    '1.5': {'budgets': '16,12', 'workloads': 's1,s16,nav1,nav16', 'accelerate': None,
            'accelerate_headroom_gib': 4.0, 'targets': _TARGETS_15, 'build_s': 40.0, 'runs': 3},
    '2super': {'budgets': '48,32,24', 'workloads': 's1', 'accelerate': 32.0,
               'accelerate_headroom_gib': 4.0, 'targets': _TARGETS_2S, 'build_s': 100.0,
               'runs': 2},
    'tiny-1.5': {'budgets': '0.6,0.58', 'workloads': 's1,s16,nav1,nav16', 'accelerate': None,
                 'accelerate_headroom_gib': 0.05, 'targets': _TARGETS_15, 'build_s': 1.0,
                 'runs': 1},
    'tiny-2super': {'budgets': '0.8,0.65', 'workloads': 's1', 'accelerate': 0.65,
                    'accelerate_headroom_gib': 0.05, 'targets': _TARGETS_2S, 'build_s': 1.0,
                    'runs': 1},
}
SMOKE = {'device': 'cpu', 'profile': ['synthetic'], 'height': 64, 'width': 96}
PARTS = ('profile', 'rows', 'accelerate')
# The kind of a planned row re-run with its streamed layers eager (`--eager-streams`).
EAGER_STREAMS = 'eager-streams'
# Ratios the targets allow.
BOUNDS = {'samples_ratio': 1.3, 'guidance_ratio': 1.3, 'copy_bound': 1.05, 'predictor': 0.02,
          'host_rss': 1.15, 'vs_accelerate': 10.0}
# First guess of the pinned link (GB/s) until a profile measures it; the profiler's inferences
# per profile in units of one nothing-resident sequential inference (warm-up and profiled
# run, the pipelined warm-up, 3 host-timed runs synchronised per layer, the final warm-up and
# runs), and a margin for re-attaches and the resident-layer part.
GUESS_LINK_GBPS = 50.0
PROFILE_INFERENCES = 2 + 1 + 3 * 1.3 + 1
ESTIMATE_MARGIN = 1.2


# ---------------------------------------------------------------- command line
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line; the preset and `--smoke` fill what is not given."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', type=Path, required=True)
    p.add_argument('--model', default='1.5', help=f'preset with random weights: {list(PRESETS)}')
    p.add_argument('--smoke', action='store_true', help=f'CPU smoke run: {SMOKE}')
    p.add_argument('--device', help='default cuda')
    p.add_argument('--budgets', help='VRAM budgets in GiB, comma separated (preset default)')
    p.add_argument('--workloads', help=f'comma separated, of {list(WORKLOADS)} (preset default)')
    p.add_argument('--profile', action='append', default=None, metavar='FILE|DIR|synthetic',
                   help='profile(s) to plan from, matched to the workloads by what they '
                        'measured; a directory gives its profile_*.json; "synthetic": made up '
                        '(CPU smoke only); workloads without one are profiled here')
    p.add_argument('--parts', default=','.join(PARTS),
                   help='profile (workloads without a --profile), rows (preload and planned), '
                        'accelerate (the --accelerate row); comma separated')
    p.add_argument('--profile-runs', type=int, default=2,
                   help='plain inferences per plan in add_host_terms (fitted tails, host time)')
    p.add_argument('--accelerate', type=float, default=-1.0, metavar='GiB',
                   help='Accelerate device_map="auto" row at this cap (0: none; default: the '
                        "preset's)")
    p.add_argument('--runs', type=int, help="timed inferences per row (preset default)")
    p.add_argument('--warmup', type=int,
                   help='untimed inferences after the deterministic pass (default 0: that pass '
                        'warms up)')
    p.add_argument('--height', type=int, help='camera frame height before presizing (1080)')
    p.add_argument('--width', type=int, help='camera frame width before presizing (1920)')
    p.add_argument('--trace', default='', metavar='WORKLOADS',
                   help='comma separated workloads: one more inference of each of their rows '
                        'under the torch profiler, inside its cap, after every timed row of the '
                        'run (trace_<workload>_<row>.json.gz and the ops owning the most device '
                        'time, .txt)')
    p.add_argument('--eager-streams', action='store_true',
                   help='after each planned row (streamed layers replayed as CUDA graphs by '
                        'slot, the default), the same plan with its streamed layers eager '
                        '(EngineConfig.stream_graphs off), bit for bit against preload; priced '
                        'by the same profile')
    p.add_argument('--compression', choices=('off', 'auto'), default='off',
                   help='auto: profile the compression terms too (nvCOMP) and let the planner '
                        'keep or stream layers compressed where that pays (the copy bound then '
                        'prices only the bytes crossing PCIe, not the decompressions: not a '
                        'bound for such rows); off: raw plans')
    p.add_argument('--budget-s', type=float, default=540.0,
                   help='skip a part whose estimate would end past this many seconds')
    p.add_argument('--report', action='store_true',
                   help='no GPU: rebuild the table and JSON from --out (and --merge) rows.jsonl')
    p.add_argument('--merge', action='append', default=[], type=Path, metavar='DIR',
                   help='with --report: also the rows of this earlier run')
    args = p.parse_args(argv)
    if args.report:
        return args
    if args.model not in PRESETS:
        p.error(f'--model {args.model!r}: one of {list(PRESETS)}')
    preset = PRESETS[args.model]
    defaults = {'device': 'cuda', 'budgets': preset['budgets'], 'workloads': preset['workloads'],
                'runs': preset['runs'], 'warmup': 0, 'height': 1080, 'width': 1920,
                **(SMOKE if args.smoke else {})}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.accelerate < 0:
        args.accelerate = preset['accelerate'] or 0.0
    args.trace_set = {w for w in args.trace.split(',') if w}
    unknown = [w for w in {*args.workloads.split(','), *args.trace_set} if w not in WORKLOADS]
    args.part_set = set(args.parts.split(','))
    if not args.part_set <= set(PARTS):
        p.error(f'--parts {args.parts!r}: of {list(PARTS)}, comma separated')
    if unknown or args.runs < 1 or args.warmup < 0 or args.profile_runs < 1:
        p.error(f'--workloads {args.workloads} and --trace {args.trace!r} (of {list(WORKLOADS)}), '
                f'--runs {args.runs} >= 1, '
                f'--warmup {args.warmup} >= 0, --profile-runs {args.profile_runs} >= 1')
    try:
        args.budget_list = sorted({float(b) for b in args.budgets.split(',')}, reverse=True)
    except ValueError:
        p.error(f'--budgets {args.budgets!r}: give GiB numbers, comma separated')
    if not args.budget_list or min(args.budget_list) <= 0:
        p.error(f'--budgets {args.budgets!r}: give positive GiB numbers')
    return args


# ---------------------------------------------------------------- bookkeeping
class Clock:
    """The command's time budget: elapsed seconds, and whether a part still fits."""

    def __init__(self, budget_s: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s

    def elapsed(self) -> float:
        """Seconds since the start."""
        return time.perf_counter() - self.start

    def refuse(self, need_s: float) -> str | None:
        """The skip reason when `need_s` more seconds would overrun the budget, else None."""
        left = self.budget_s - self.elapsed()
        if need_s <= left:
            return None
        return f'skipped: time budget (needs ~{need_s:.0f} s, {max(0.0, left):.0f} s left)'


class Log:
    """rows.jsonl (one line a row, appended at once) and meta.json under --out."""

    def __init__(self, out: Path, meta: dict[str, Any]) -> None:
        self.out = out
        self.meta = meta
        self.rows: list[dict[str, Any]] = []
        (out / 'rows.jsonl').write_text('')
        self.save_meta()

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """Append one row."""
        self.rows.append(row)
        with open(self.out / 'rows.jsonl', 'a') as f:
            f.write(json.dumps(row, default=str) + '\n')
        LOG.info('row %s %s %s: %s', row.get('workload'), row.get('kind'),
                 _gib_label(row.get('budget_gib')), _row_brief(row))
        return row

    def save_meta(self) -> None:
        """Rewrite meta.json."""
        (self.out / 'meta.json').write_text(json.dumps(self.meta, indent=1, default=str) + '\n')


def _gib_label(gib: float | None) -> str:
    return 'whole GPU' if gib is None else f'{gib:g} GiB'


def _row_brief(row: Mapping[str, Any]) -> str:
    if row.get('status') != 'ok':
        return str(row.get('status'))
    return (f"{row['e2e_s']:.3f} s (predicted {row.get('predicted_s') or 0:.3f}), "
            f"exact {row.get('bit_exact')}, "
            f"peak {(row.get('peak_allocated_bytes') or 0) / GIB:.2f} GiB")


def host_memory() -> dict[str, int | None]:
    """This process's resident bytes now and at their peak so far (Linux /proc; else None)."""
    from bench.peers.home import status_kib

    rss, hwm = status_kib('VmRSS'), status_kib('VmHWM')
    return {'rss_bytes': None if rss is None else rss * 1024,
            'peak_rss_bytes': None if hwm is None else hwm * 1024}


def host_total_bytes() -> int | None:
    """MemTotal of this machine (Linux /proc; else None)."""
    try:
        for line in Path('/proc/meminfo').read_text().splitlines():
            if line.startswith('MemTotal:'):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# ---------------------------------------------------------------- profiles
def read_profiles(paths: list[str]) -> dict[tuple[int, bool], tuple[Profile, str]]:
    """Profiles from files or directories (profile_*.json), keyed by (samples, guidance)."""
    found: dict[tuple[int, bool], tuple[Profile, str]] = {}
    for given in paths:
        path = Path(given)
        files = sorted(path.glob('profile_*.json')) if path.is_dir() else [path]
        if not files:
            raise SystemExit(f'--profile {given}: no profile_*.json in that directory')
        for f in files:
            profile, _ = load_profile(f)
            w = profile.workload
            found[(w.num_samples, w.guidance)] = (profile, str(f))
    return found


def synthetic_for(engine: Any, spec: WorkloadSpec) -> Profile:
    """The made-up profile of `bench_compress` (CPU smoke only), recorded at this workload."""
    from bench.bench_compress import synthetic_profile

    engine.replan(resident={}, mode='pipelined')      # its VRAM terms are the attached plan's
    return dataclasses.replace(synthetic_profile(engine), workload=spec.profiled())


def nothing_resident_s(profile: Profile | None, spec: WorkloadSpec,
                       layer_bytes: Mapping[str, int]) -> float:
    """Seconds of one sequential inference with nothing resident (the profiler's unit)."""
    if profile is not None:
        return predict(profile, Placement.of(), spec.planner_workload(),
                       Pipeline.SEQUENTIAL).total_s
    lm_passes = 1 + DECODE_TOKENS + (2 if spec.guidance else 0)
    moved = (layer_bytes.get('vit', 0) + lm_passes * layer_bytes.get('lm', 0)
             + DIFFUSION_STEPS * layer_bytes.get('expert', 0))
    return moved / (GUESS_LINK_GBPS * 1e9) + 0.5


def measure_profile(engine: Any, spec: WorkloadSpec, args: argparse.Namespace,
                    model_input: Any) -> Profile:
    """Profile the loaded engine at `spec`, as `alpamayo-offload profile` does."""
    import torch

    from alpamayo_offload.profiling.gpu_profile import add_host_terms, profile_engine

    torch.cuda.set_per_process_memory_fraction(1.0)
    engine.replan(resident={}, mode='sequential', budget_bytes=None, instrument=True)
    torch.cuda.synchronize()
    profile = profile_engine(engine, model=args.model, loaded_bytes=torch.cuda.memory_allocated(),
                             warmup=1, settings={'decode_tokens': DECODE_TOKENS,
                                                 'diffusion_steps': DIFFUSION_STEPS})
    profile = add_host_terms(engine, model_input, profile, runs=args.profile_runs)
    if args.compression == 'off':
        return profile
    from alpamayo_offload.profiling.compression import add_compression_terms

    return add_compression_terms(engine, model_input, profile)


# ---------------------------------------------------------------- rows
def with_engine_vram(engine: Any, profile: Profile, record: dict[str, Any]) -> Profile:
    """A given profile with this engine's own working-set estimate (not a measurement).

    A profile's layer timings stay valid across code changes that only move memory (e.g. how
    the KV cache is held); its VRAM terms are the engine's estimates when it was profiled. The
    rows plan with the current engine's, and `record` keeps both working sets.
    """
    tokens = int(engine.config.max_decode_tokens)
    vram = dataclasses.replace(
        profile.vram, working_set_bytes=engine.working_set_bytes(), working_set_tokens=tokens,
        working_set_per_token_bytes=engine.working_set_bytes(tokens + 1)
        - engine.working_set_bytes(tokens))
    record['working_set_bytes'] = {'profile': profile.vram.working_set_bytes,
                                   'engine': vram.working_set_bytes}
    return dataclasses.replace(profile, vram=vram)


def use_workload(engine: Any, spec: WorkloadSpec) -> None:
    """Make the loaded engine run `spec` (its decode options and working set follow)."""
    engine.config = dataclasses.replace(
        engine.config, num_samples=spec.num_samples,
        guidance_weight=GUIDANCE_WEIGHT if spec.guidance else None)


def workload_input(engine: Any, spec: WorkloadSpec, args: argparse.Namespace) -> Any:
    """The fixed example input, presized; with a route text where guidance runs."""
    from alpamayo_offload.profiling.gpu_profile import PROFILE_ROUTE

    model_input = engine.example_input(args.height, args.width, presized=True)
    return dataclasses.replace(model_input, nav_text=PROFILE_ROUTE) if spec.guidance \
        else model_input


def cap_vram(device: str, budget: int | None) -> None:
    """Cap CUDA allocations at `budget` bytes (None: the whole GPU); no-op on the CPU."""
    if device.startswith('cuda'):
        from bench.peers.runner import cap_vram as cap
        cap(budget)


def plan_facts(profile: Profile, placement: Placement, spec: WorkloadSpec) -> dict[str, Any]:
    """Prediction, copy bound and pinned bytes of one placement under `profile`."""
    pred = predict(profile, placement, spec.planner_workload())
    streamed = sum(p.bytes_streamed for p in pred.phases)
    link = profile.machine.pinned_h2d_gbps
    layers = {s.name: [i for i in range(s.n_layers) if i not in placement.indices(s.name)]
              for s in profile.sequences}
    return {'predicted_s': pred.total_s,
            'predicted_ms': {p.name: p.wall_ms for p in pred.phases},
            'streamed_bytes': streamed, 'link_gbps': link,
            'copy_bound_s': streamed / (link * 1e9) if link else None,
            'plan_pinned_bytes': sum(profile.sequence(n).layer_bytes[i]
                                     for n, idx in layers.items() for i in idx),
            'resident': {s: list(placement.indices(s)) for s in ('vit', 'lm', 'expert')},
            'compressed': {s: list(placement.compressed_indices(s))
                           for s in ('vit', 'lm', 'expert')},
            'compression': placement.compression, 'embed_on_host': placement.embed_on_host}


def all_resident(profile: Profile) -> Placement:
    """Every layer resident (what preload runs), for its prediction."""
    return Placement.of({s.name: range(s.n_layers) for s in profile.sequences})


def attach_row(engine: Any, kind: str, budget: int | None, placement: Placement,
               args: argparse.Namespace) -> float:
    """Cap VRAM to the row's budget and attach its plan; the re-plan's seconds."""
    cap_vram(args.device, budget)
    t0 = time.perf_counter()
    engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                  mode='preload' if kind == 'preload' else 'pipelined', budget_bytes=budget,
                  embed_on_host=placement.embed_on_host,
                  compressed={s: placement.compressed_indices(s) for s in placement.compressed},
                  compression='on' if placement.compression else 'off',
                  stream_graphs=False if kind == EAGER_STREAMS else None)
    return time.perf_counter() - t0


class MachineProbes:
    """The pinned copy rate and the CPU's kernel-issue speed, probed before and after a row.

    The profile's copy rate and host issue terms were measured at another moment (or on another
    VM) and both drift: the copy rate by a few per cent, the CPU's issue speed by up to a third
    within minutes. Recorded with the row (`row_link_gbps`, `row_host_issue_us`), they let
    `python -m bench.diag predict-rows` price the row at the machine it ran on. No-ops on the CPU.
    """

    def __init__(self, device: str) -> None:
        self._cuda = device.startswith('cuda')
        self.link_gbps: list[float] = []
        self.issue_us: list[float] = []
        self.take()

    def take(self) -> None:
        """Probe both once more."""
        if not self._cuda:
            return
        import torch

        from alpamayo_offload.profiling.gpu_profile import host_issue_us, pinned_h2d_gbps
        from bench.peers.home import release_memory

        self.link_gbps.append(pinned_h2d_gbps(torch))
        self.issue_us.append(host_issue_us(torch))
        release_memory()    # the probe's device and pinned buffers are no row's

    def record(self) -> dict[str, list[float]]:
        """The probes as row fields (none on the CPU)."""
        if not self._cuda:
            return {}
        return {'row_link_gbps': self.link_gbps, 'row_host_issue_us': self.issue_us}


def run_row(engine: Any, model_input: Any, spec: WorkloadSpec, kind: str, budget: int | None,
            placement: Placement, args: argparse.Namespace, reference: Any,
            ) -> tuple[dict, Any]:
    """Attach one plan under its cap, then `measure` (deterministic pass, warm-up, timed runs)."""
    import numpy as np

    from bench.peers.home import reset_rss_peak
    from bench.peers.measure import Deadline, RunOutput, measure

    def infer() -> RunOutput:
        r = engine.infer(model_input)
        return RunOutput({'xyz': r.samples_xyz, 'rot': r.samples_rot,
                          'tokens': np.asarray(r.coc_token_ids, dtype=np.int64)},
                         dict(r.timings))

    probes = MachineProbes(args.device)     # uncapped: the link probe's buffer is no plan's
    reset_rss_peak()
    replan_s = attach_row(engine, kind, budget, placement, args)
    replan_peak = host_memory()['peak_rss_bytes']      # measure resets the peak
    figures, det, last = measure(infer, warmup=args.warmup, runs=args.runs,
                                 deadline=Deadline(float('inf')), reference=reference,
                                 reference_timed=None)
    cap_vram(args.device, None)
    probes.take()
    info = engine.info
    row: dict[str, Any] = {**figures, **probes.record(), 'replan_s': replan_s,
                           'replan_peak_rss_bytes': replan_peak,
                           'store_pinned_bytes': info.host_store_bytes
                           if args.device.startswith('cuda') else 0,
                           'runtime_pinned_bytes': info.pinned_bytes}
    row['pinned_bytes'] = (row['store_pinned_bytes'] + row['runtime_pinned_bytes']
                           + row['caching_pinned_bytes'])
    if reference is not None:
        row['exact_trajectory'] = all(np.array_equal(det.arrays[k], reference.arrays[k])
                                      for k in ('xyz', 'rot'))
        row['exact_tokens'] = np.array_equal(det.arrays['tokens'], reference.arrays['tokens'])
        row['bit_exact'] = row['exact_trajectory'] and row['exact_tokens']
    del last
    return row, det


def row_estimate_s(predicted_s: float, args: argparse.Namespace) -> float:
    """Seconds a row takes: deterministic pass, warm-up and timed runs, plus the re-plan."""
    return (1 + args.warmup + args.runs) * max(predicted_s, 0.05) * ESTIMATE_MARGIN + 2.0


@dataclass(frozen=True)
class TraceJob:
    """A measured row to trace once more after every timed figure of the run."""

    spec: WorkloadSpec
    kind: str
    budget: int | None
    placement: Placement
    path: Path


def trace_rows(engine: Any, jobs: list[TraceJob], args: argparse.Namespace) -> None:
    """One inference of each job's row under the profiler, each under its own cap.

    Runs after every timed row: a profile with CUDA activity can leave CUPTI attached to the
    process (`bench.peers.trace`), and a row timed after one would pay for it.
    """
    from bench.peers.trace import trace_call

    for job in jobs:
        use_workload(engine, job.spec)
        model_input = workload_input(engine, job.spec, args)
        attach_row(engine, job.kind, job.budget, job.placement, args)
        trace_call(functools.partial(engine.infer, model_input), job.path)
        cap_vram(args.device, None)
        print(f'trace {job.path.name}: written', flush=True)


def workload_rows(engine: Any, spec: WorkloadSpec, profile: Profile, args: argparse.Namespace,
                  log: Log, clock: Clock, traces: list[TraceJob],
                  ) -> tuple[Any, dict[str, Any] | None]:
    """Preload, then the planned row of each budget, for one workload; preload's deterministic
    output and row (None, None where it did not run). Rows of a traced workload join `traces`."""
    model_input = workload_input(engine, spec, args)
    options = PlannerOptions(workload=spec.planner_workload(), compression=args.compression,
                             max_decode_tokens=DECODE_TOKENS)
    todo: list[tuple[str, float | None, Placement | None, str | None, dict[str, Any]]] = []
    pre = plan_facts(profile, all_resident(profile), spec)
    todo.append(('preload', None, Placement.of(), None, {'predicted_s': pre['predicted_s']}))
    for gib in args.budget_list:
        try:
            result = plan(profile, int(gib * GIB), options)
        except BudgetError as err:
            todo.append(('planned', gib, None, f'does not fit: {err}', {}))
            continue
        facts = {**plan_facts(profile, result.placement, spec),
                 'planned_vram_bytes': result.vram.total, 'strategy': result.strategy}
        todo.append(('planned', gib, result.placement, None, facts))
        if args.eager_streams:
            todo.append((EAGER_STREAMS, gib, result.placement, None, facts))
    reference, preload_row = None, None
    for kind, gib, placement, refused, facts in todo:
        head = {'workload': spec.name, 'num_samples': spec.num_samples,
                'guidance': spec.guidance, 'kind': kind, 'budget_gib': gib,
                'budget_bytes': None if gib is None else int(gib * GIB), **facts}
        need = row_estimate_s(facts.get('predicted_s', 1.0), args)
        LOG.info('%s %s %s: estimated %.0f s', spec.name, kind, _gib_label(gib), need)
        if refused or placement is None:
            log.row({**head, 'status': refused or 'no plan'})
            continue
        if kind != 'preload' and reference is None:
            log.row({**head, 'status': 'skipped: no preload reference in this run'})
            continue
        skip = clock.refuse(need)
        if skip:
            log.row({**head, 'status': skip, 'estimated_s': need})
            continue
        t0 = time.perf_counter()
        try:
            got, det = run_row(engine, model_input, spec, kind, head['budget_bytes'], placement,
                               args, reference)
        except Exception as err:  # a failed row is reported, the others still run
            from bench.peers.runner import status_of

            cap_vram(args.device, None)
            log.row({**head, 'status': status_of(err), 'estimated_s': need})
            continue
        row = log.row({**head, **got, 'status': 'ok', 'estimated_s': need,
                       'seconds': time.perf_counter() - t0, 'elapsed_s': clock.elapsed()})
        if spec.name in args.trace_set:
            traces.append(TraceJob(spec, kind, head['budget_bytes'], placement,
                                   args.out / f'trace_{spec.name}_{kind}_'
                                   f'{_gib_label(gib).replace(" ", "")}.json.gz'))
        if kind == 'preload':
            reference, preload_row = det, row
    return reference, preload_row


# ---------------------------------------------------------------- the run
def build_engine(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Load the model once, every layer in one host store (pinned on CUDA); its build
    seconds, bytes and host RAM."""
    from alpamayo_offload.engine import Engine, EngineConfig

    t0 = time.perf_counter()
    engine = Engine.load(EngineConfig(
        model=args.model, device=args.device, mode='pipelined', resident={},
        max_decode_tokens=DECODE_TOKENS, fixed_decode_tokens=DECODE_TOKENS,
        diffusion_steps=DIFFUSION_STEPS, seed=0, pin_all_layers=True))
    layer_bytes = {name: sum(f.packed_bytes for f in sizes)
                   for name, sizes in engine.layer_footprints().items()}
    non_layer = sum(t.numel() * t.element_size() for m in engine.model.non_layer_modules().values()
                    for t in [*m.parameters(), *m.buffers()])
    source = getattr(engine, '_source', None)
    build = {'seconds': time.perf_counter() - t0, 'layer_bytes': layer_bytes,
             'non_layer_bytes': non_layer, 'model_bytes': sum(layer_bytes.values()) + non_layer,
             'store_bytes': getattr(source, 'nbytes', 0),
             'store_pinned': bool(getattr(source, 'pinned', False)),
             'host_total_bytes': host_total_bytes(), **host_memory()}
    return engine, build


def run(args: argparse.Namespace) -> int:
    """Profiles and rows within the time budget; then the table."""
    import torch

    from bench.peers.home import release_memory, reset_rss_peak
    from bench.workloads_accelerate import accelerate_row

    clock = Clock(args.budget_s)
    out: Path = args.out
    specs = [WORKLOADS[w] for w in args.workloads.split(',')]
    preset = PRESETS[args.model]
    meta: dict[str, Any] = {
        'command': 'python3 -m bench.bench_workloads ' + ' '.join(args.argv),
        'date': time.strftime('%Y-%m-%d %H:%M:%S %Z'), 'model': args.model,
        'device': args.device, 'targets': list(preset['targets']),
        'gpu': torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu',
        'torch': torch.__version__, 'cores': os.cpu_count(),
        'cublas_workspace_config': os.environ.get('CUBLAS_WORKSPACE_CONFIG'),
        'runs': args.runs, 'warmup': args.warmup, 'eager_streams': args.eager_streams,
        'budgets_gib': args.budget_list,
        'workloads': [s.name for s in specs], 'frames': [args.height, args.width],
        'timing': 'e2e: median of the timed runs, default mode; det: the deterministic pass',
        'estimates': {}, 'profiles': {}, 'nothing_resident_s': {}, 'build': {}}
    log = Log(out, meta)
    print(f"build: estimated {preset['build_s']:.0f} s", flush=True)
    from alpamayo_offload.engine import EngineError

    try:
        engine, meta['build'] = build_engine(args)
    except EngineError as err:          # e.g. host RAM, or the memlock limit for the store
        meta['build'] = {'status': f'failed: {err}'}
        log.save_meta()
        print(f'build failed: {err}', flush=True)
        return 1
    print(f"build: {meta['build']['seconds']:.1f} s, model {meta['build']['model_bytes'] / 1e9:.1f}"
          f" GB, peak host RSS {(meta['build']['peak_rss_bytes'] or 0) / 1e9:.1f} GB",
          flush=True)
    meta['host_rss_stages'] = {'build': {**host_memory(), 'peak_since': 'process start'}}
    log.save_meta()
    given = read_profiles([p for p in args.profile or [] if p != 'synthetic'])
    synthetic = 'synthetic' in (args.profile or [])
    calibration = 1.0                 # measured / estimated seconds of the profiles so far
    preloads: dict[str, tuple[Any, dict[str, Any] | None]] = {}   # workload: output, row
    traces: list[TraceJob] = []
    for spec in specs:
        use_workload(engine, spec)
        model_input = workload_input(engine, spec, args)
        profile, path = given.get((spec.num_samples, spec.guidance), (None, None))
        if profile is None and synthetic:
            profile = synthetic_for(engine, spec)
            path = 'synthetic'
        seq_s = nothing_resident_s(profile, spec, meta['build']['layer_bytes'])
        meta['nothing_resident_s'][spec.name] = seq_s
        if profile is None and 'profile' not in args.part_set:
            meta['profiles'][spec.name] = {'status': 'skipped: no --profile, and --parts has no '
                                                     'profile'}
            continue
        if profile is None:
            need = calibration * PROFILE_INFERENCES * seq_s * ESTIMATE_MARGIN \
                + args.profile_runs * seq_s + 10.0
            print(f'profile {spec.name}: estimated {need:.0f} s', flush=True)
            meta['estimates'][f'profile_{spec.name}'] = need
            skip = clock.refuse(need)
            if skip:
                meta['profiles'][spec.name] = {'status': skip}
                log.save_meta()
                log.row({'workload': spec.name, 'num_samples': spec.num_samples,
                         'guidance': spec.guidance, 'kind': 'profile', 'budget_gib': None,
                         'status': skip})
                continue
            t0 = time.perf_counter()
            since = 'stage start' if reset_rss_peak() else 'process start'
            profile = measure_profile(engine, spec, args, model_input)
            took = time.perf_counter() - t0
            meta['host_rss_stages'][f'profile {spec.name}'] = {**host_memory(),
                                                                'peak_since': since}
            path = str(out / f'profile_{spec.name}.json')
            save_profile(profile, path)
            seq_s = nothing_resident_s(profile, spec, meta['build']['layer_bytes'])
            calibration = took / (PROFILE_INFERENCES * seq_s * ESTIMATE_MARGIN
                                  + args.profile_runs * seq_s + 10.0)
            meta['profiles'][spec.name] = {'path': path, 'seconds': took, 'measured_here': True,
                                           'link_gbps': profile.machine.pinned_h2d_gbps}
            print(f'profile {spec.name}: {took:.0f} s', flush=True)
        else:
            meta['profiles'][spec.name] = {'path': path, 'measured_here': False,
                                           'link_gbps': profile.machine.pinned_h2d_gbps}
            if path != 'synthetic':
                profile = with_engine_vram(engine, profile, meta['profiles'][spec.name])
        log.save_meta()
        if 'rows' in args.part_set:
            preloads[spec.name] = workload_rows(engine, spec, profile, args, log, clock,
                                                traces)
            log.save_meta()
    if args.accelerate and 'accelerate' in args.part_set:
        s1 = WORKLOADS['s1']           # the row runs the s1 workload, last, on the same model
        use_workload(engine, s1)
        reference, preload_row = preloads.get('s1', (None, None))
        accelerate_row(engine, workload_input(engine, s1, args), args, log, clock, reference,
                       preload_row, decode_tokens=DECODE_TOKENS,
                       diffusion_steps=DIFFUSION_STEPS,
                       headroom_gib=preset['accelerate_headroom_gib'])
    trace_rows(engine, traces, args)
    engine.close()
    del engine
    gc.collect()
    release_memory()
    meta['wall_s'] = clock.elapsed()
    log.save_meta()
    return report(out, log.rows, meta)


# ---------------------------------------------------------------- report (no torch)
def _ratio_target(rows: list[dict[str, Any]], num: str, den: str, gib: float,
                  bound: float) -> dict[str, Any]:
    by = {(r['workload'], r['budget_gib']): r for r in rows
          if r.get('kind') == 'planned' and r.get('status') == 'ok'}
    a, b = by.get((num, gib)), by.get((den, gib))
    if a is None or b is None:
        return {'name': f'{num} / {den} at {gib:g} GiB', 'bound': f'<= {bound:g}x',
                'measured': None, 'verdict': 'not measured'}
    ratio = a['e2e_s'] / b['e2e_s']
    # Each plan's streaming named: a compressed and a raw plan compare unlike copy bounds.
    return {'name': f'{num} / {den} at {gib:g} GiB', 'bound': f'<= {bound:g}x',
            'measured': f"{ratio:.3f}x ({a['e2e_s']:.3f} s {_streaming(a)} / "
                        f"{b['e2e_s']:.3f} s {_streaming(b)})",
            'verdict': 'met' if ratio <= bound else 'missed'}


def _streaming(row: dict[str, Any]) -> str:
    """'compressed' for a row whose plan streams or keeps layers compressed, else 'raw'."""
    return 'compressed' if row.get('compression') else 'raw'


def _per_row(name: str, bound: str, rows: list[dict[str, Any]], value: Any, ok: Any,
             needs: tuple[str, ...] = ()) -> dict[str, Any]:
    """A target judged on every measured planned row that has the figures `needs` names."""
    kinds = ('planned',)
    got = [r for r in rows if r.get('kind') in kinds and r.get('status') == 'ok'
           and all(r.get(k) is not None for k in needs)]
    if not got:
        return {'name': name, 'bound': bound, 'measured': None, 'verdict': 'not measured'}
    values = [value(r) for r in got]
    missed = [f"{r['workload']}@{_gib_label(r.get('budget_gib'))}" for r in got if not ok(r)]
    return {'name': name, 'bound': bound, 'measured': ', '.join(values),
            'verdict': 'met' if not missed else f"missed: {', '.join(missed)}"}


_KIND_LABELS = {'accelerate-device-map': 'acc-dmap',     # the table's kind column: 8 wide
                EAGER_STREAMS: 'eager-st'}
# A row's host RSS readings: now, and the peaks of its stages (each since the stage's start).
_ROW_STAGES = {'handover_peak_rss_bytes': 'hand-over', 'setup_peak_rss_bytes': 'set-up'}
_RSS_KEYS = ('rss_bytes', 'peak_rss_bytes', 'rss_peak_bytes', 'replan_peak_rss_bytes',
             *_ROW_STAGES)


def host_peaks(rows: list[dict[str, Any]], meta: Mapping[str, Any]) -> dict[str, int]:
    """Peak host RSS per stage: build and profiles (meta), then every row (its re-plan and
    inferences; the Accelerate row's hand-over and set-up apart), in the order they ran."""
    stages = dict(meta.get('host_rss_stages') or {})
    stages.setdefault('build', meta.get('build') or {})
    peaks = {name: max((v.get(k) or 0 for k in _RSS_KEYS), default=0)
             for name, v in stages.items()}
    for r in rows:
        if r.get('status') != 'ok':
            continue
        name = f"{r.get('workload')} {_KIND_LABELS.get(r.get('kind'), r.get('kind'))} " \
               f"{_gib_label(r.get('budget_gib'))}"
        for key, stage in _ROW_STAGES.items():
            if r.get(key):
                peaks[f'{name} {stage}'] = r[key]
        peaks[name] = max(r.get(k) or 0 for k in _RSS_KEYS if k not in _ROW_STAGES)
    return peaks


def _vs_accelerate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours (planned) against Accelerate device_map at the same cap and workload."""
    bound = BOUNDS['vs_accelerate']
    ours = {(r['workload'], r['budget_gib']): r for r in rows
            if r.get('kind') == 'planned' and r.get('status') == 'ok'}
    found = []
    for a in rows:
        if a.get('kind') != 'accelerate-device-map':
            continue
        name = f"Accelerate device_map / ours at {_gib_label(a.get('budget_gib'))}"
        mine = ours.get((a.get('workload'), a.get('budget_gib')))
        if a.get('status') != 'ok' or mine is None:
            found.append({'name': name, 'bound': f'>= {bound:g}x', 'measured': None,
                          'verdict': 'not measured'})
            continue
        how = ' (Accelerate extrapolated)' if a.get('extrapolated') else \
            ' (Accelerate: deterministic pass)' if a.get('timing_mode') == 'deterministic pass' \
            else ''
        ratio = a['e2e_s'] / mine['e2e_s']
        found.append({'name': name, 'bound': f'>= {bound:g}x',
                      'measured': f"{ratio:.2f}x ({a['e2e_s']:.1f} / {mine['e2e_s']:.3f} s){how}",
                      'verdict': 'met' if ratio >= bound else 'missed'})
    return found


def targets(rows: list[dict[str, Any]], meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each target of the preset: measured against its bound, and a verdict."""
    wanted = meta.get('targets', [])
    gibs = sorted({r['budget_gib'] for r in rows if r.get('kind') == 'planned'}, reverse=True)
    top = gibs[0] if gibs else None
    found: list[dict[str, Any]] = []
    if 'bit_exact' in wanted:
        found.append(_per_row('bit-exact vs preload (deterministic pass: trajectories, tokens)',
                              'equal', rows, lambda r: str(r.get('bit_exact')),
                              lambda r: r.get('bit_exact') is True))
    if 'peak_vram' in wanted:
        found.append(_per_row('peak VRAM (max_memory_allocated) within the cap', '<= cap', rows,
                              lambda r: f"{r['peak_allocated_bytes'] / GIB:.2f}",
                              lambda r: r['peak_allocated_bytes'] <= r['budget_bytes'],
                              ('peak_allocated_bytes',)))
    if 'predictor' in wanted:
        found.append(_per_row('predictor: predicted vs measured median',
                              f"<= {BOUNDS['predictor']:.0%}", rows,
                              lambda r: f"{r['e2e_s'] / r['predicted_s'] - 1:+.2%}",
                              lambda r: abs(r['e2e_s'] / r['predicted_s'] - 1)
                              <= BOUNDS['predictor']))
    if 'copy_bound' in wanted:
        found.append(_per_row('measured / copy bound (streamed bytes / pinned link)',
                              f"<= {BOUNDS['copy_bound']:g}x", rows,
                              lambda r: f"{r['e2e_s'] / r['copy_bound_s']:.3f}x"
                              if r.get('copy_bound_s') else '-',
                              lambda r: bool(r.get('copy_bound_s')) and
                              r['e2e_s'] <= BOUNDS['copy_bound'] * r['copy_bound_s']))
    if 'samples_ratio' in wanted and top is not None:
        found.append(_ratio_target(rows, 's16', 's1', top, BOUNDS['samples_ratio']))
        found.append(_ratio_target(rows, 'nav16', 'nav1', top, BOUNDS['samples_ratio']))
    if 'guidance_ratio' in wanted and top is not None:
        found.append(_ratio_target(rows, 'nav1', 's1', top, BOUNDS['guidance_ratio']))
        found.append(_ratio_target(rows, 'nav16', 's16', top, BOUNDS['guidance_ratio']))
    if 'vs_accelerate' in wanted:
        found += _vs_accelerate(rows)
    if 'host_rss' in wanted:
        build = meta.get('build', {})
        peak, model = build.get('peak_rss_bytes'), build.get('model_bytes')
        run_peak = max(host_peaks(rows, meta).values(), default=0)
        found.append({'name': 'peak host RSS / model bytes (build, profiles, rows, hand-over)',
                      'bound': f"<= {BOUNDS['host_rss']:g}x",
                      'measured': f'{run_peak / model:.3f}x ({run_peak / 1e9:.1f} / '
                                  f'{model / 1e9:.1f} GB)' if peak and model else None,
                      'verdict': 'not measured' if not (peak and model) else
                      'met' if run_peak <= BOUNDS['host_rss'] * model else 'missed'})
    return found


def table(rows: list[dict[str, Any]]) -> str:
    """One line a row: plan, predicted, measured (default mode and deterministic pass), bounds;
    `*` after e2e: see the row's note below the table."""
    head = (f"{'wl':<6} {'budget':>9} {'kind':<8} {'v/l/e res':>9} {'pred s':>7} {'e2e s':>7} "
            f"{'det s':>7} {'err':>7} {'bound s':>7} {'x bnd':>6} {'peak GiB':>8} "
            f"{'exact':>5} {'RSS pk':>6} {'pin GB':>6} {'plan pin':>8}")
    lines = [head]
    for r in rows:
        kind = _KIND_LABELS.get(str(r.get('kind')), str(r.get('kind')))
        lead = f"{r.get('workload', '-'):<6} {_gib_label(r.get('budget_gib')):>9} {kind[:8]:<8}"
        if r.get('status') != 'ok':
            lines.append(f"{lead} {r.get('status')}")
            continue
        res = r.get('resident')
        counts = '/'.join(str(len(res.get(s, []))) for s in ('vit', 'lm', 'expert')) \
            if res else 'all' if r.get('kind') == 'preload' else '-'
        pred = r.get('predicted_s')
        bound = r.get('copy_bound_s')
        exact = 'ref' if r.get('kind') == 'preload' else \
            '-' if r.get('bit_exact') is None else str(r['bit_exact'])
        e2e = f"{r['e2e_s']:7.3f}" + ('*' if r.get('note') else ' ')
        lines.append(
            f"{lead} {counts:>9} {_num(pred, 7, 3)} {e2e}"
            f"{r['deterministic_pass_s']:7.3f} "
            f"{_pct(r['e2e_s'] / pred - 1 if pred else None):>7} {_num(bound, 7, 3)} "
            f"{_num(r['e2e_s'] / bound if bound else None, 6, 3)} "
            f"{r.get('peak_allocated_bytes', 0) / GIB:8.2f} "
            f"{exact:>5} {max(r.get(k) or 0 for k in _RSS_KEYS) / 1e9:6.1f} "
            f"{(r.get('pinned_bytes') or 0) / 1e9:6.1f} "
            f"{_num((r['plan_pinned_bytes'] / 1e9) if 'plan_pinned_bytes' in r else None, 8, 1)}")
    return '\n'.join(lines)


def _num(x: float | None, width: int, digits: int) -> str:
    return f'{"-":>{width}}' if x is None else f'{x:{width}.{digits}f}'


def _pct(x: float | None) -> str:
    return '-' if x is None else f'{100 * x:+.2f}%'


def report(out: Path, rows: list[dict[str, Any]], meta: Mapping[str, Any]) -> int:
    """Write bench_workloads.json and print the table and the targets last."""
    found = targets(rows, meta)
    text = table(rows)
    doc = {'meta': meta, 'rows': rows, 'targets': found, 'table': text}
    (out / 'bench_workloads.json').write_text(json.dumps(doc, indent=1, default=str) + '\n')
    print(f"{meta.get('command', '')}  ({meta.get('date', '?')}, {meta.get('gpu', '?')}, "
          f"wall {meta.get('wall_s') or 0:.0f} s)")
    build = meta.get('build') or {}
    if build:
        print(f"build {build.get('seconds', 0):.1f} s; model "
              f"{build.get('model_bytes', 0) / 1e9:.1f} GB; host RSS after build "
              f"{(build.get('rss_bytes') or 0) / 1e9:.1f} GB, peak "
              f"{(build.get('peak_rss_bytes') or 0) / 1e9:.1f} GB; host store "
              f"{build.get('store_bytes', 0) / 1e9:.1f} GB"
              f"{' (pinned)' if build.get('store_pinned', True) else ' (not pinned)'}")
    for name, p in (meta.get('profiles') or {}).items():
        print(f"profile {name}: {p.get('status') or p.get('path')}"
              + (f", {p['seconds']:.0f} s" if p.get('seconds') else ''))
    print('e2e: median of the timed runs in the default mode (the latency figure); det: the '
          'deterministic pass (strict mode), compared bit for bit with preload; err: e2e vs '
          'the plan\'s prediction; bound: streamed bytes / pinned link; RSS pk: peak host RSS '
          'of the row (re-plan or set-up, inferences); pin GB: pinned in this process (every '
          'layer: the store); plan pin: what this plan alone streams; *: see the note below')
    print(text)
    for r in rows:
        if r.get('note'):
            print(f"  {r.get('workload')} {r.get('kind')} {_gib_label(r.get('budget_gib'))}: "
                  f"{r['note']}")
    print('host RSS peak per stage, GB: ' + ', '.join(
        f'{name} {peak / 1e9:.1f}' for name, peak in host_peaks(rows, meta).items()))
    print('targets:')
    for t in found:
        print(f"  {t['name']}: {t['measured'] or '-'} (bound {t['bound']}) -> {t['verdict']}")
    return 0


def read_run(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and meta of one run directory."""
    rows_file = path / 'rows.jsonl'
    if not rows_file.is_file():
        raise SystemExit(f'--report: {rows_file} not found; point --out/--merge at a run')
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    meta_file = path / 'meta.json'
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    return rows, meta


def main(argv: list[str] | None = None) -> int:
    """Run the bench, or (`--report`) rebuild its report from rows.jsonl."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.argv = argv
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s: %(message)s')
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        rows, meta = read_run(args.out)
        for extra in args.merge:
            more, other = read_run(extra)
            rows += more
            meta.setdefault('merged', []).append(other.get('command'))
        return report(args.out, rows, meta)
    return run(args)


if __name__ == '__main__':
    raise SystemExit(main())
