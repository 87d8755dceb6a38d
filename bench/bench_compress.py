"""Raw vs compressed streaming vs preload, per VRAM budget, on Alpamayo-R1 and a Llama decoder.

One run measures, for each model (`--models r1,llama`): the preload reference; the start-up cost
of compression (`startup-cold`: every layer streamed compressed, compressed now and written to
the cache; `startup-cache`: the same plan attached again, every layer read from the cache, as a
second start does); and for each budget the raw plan (as many interleaved language-model layers
resident as fit, planning.interleaved_indices, the rest streamed raw) and the compressed plan
(the same layers, one fewer while the staging buffers do not fit, the rest streamed
compressed: runtime/codec.py, nvCOMP ANS on CUDA). Each row: one pass in strict deterministic
mode (`torch.use_deterministic_algorithms(True)`), whose outputs are compared bit for bit with
preload's, then the median of `--reps` inferences after `--warmup` in the default mode, each
started on an idle device, as `alpamayo-offload profile` and bench_workloads time theirs (strict
mode selects other kernels, deterministic cuDNN convolutions and no cuDNN attention, and fills
every fresh tensor with NaN; the profile that prices a plan is timed in the default mode). Per
phase its seconds, the uncompressed bytes delivered, the bytes copied over the host link and the
effective bandwidth (uncompressed bytes per second of the phase); pinned bytes, host RAM (RSS
and peak), attach seconds, compression and cache seconds, the strict pass's seconds and whether
its outputs equal preload's. Budgets are GiB, or `N%` of the model's preload footprint.
Weights are random N(0, 0.02) (BF16 on CUDA): say so in docs/benchmarks.md. The compressed
layers are cached under `--cache-dir` (default: a temporary directory, removed at the end; never
under `--out`, whose files are copied back).

`--plan-from PROFILE` instead plans each budget of R1 with the planner from a profile with
compression terms (`alpamayo-offload profile`): the raw plan (`PlannerOptions(compression='off')`),
the best compressed one (`compression='on'`) and the planned one (compression where it pays; not
measured again when it is one of the other two), and prints each row's predicted against
measured latency (the total in the table, each phase in rows.json). `--plan-from synthetic`
plans from a profile made up from the loaded model's layer sizes (`_SYNTHETIC`: a slow link, so
that compression pays): it exercises the command on the CPU, its predictions mean nothing.

    python -m bench.bench_compress --out $OUT --budget-s 580                # H200: R1 + Llama
    python -m bench.bench_compress --out /tmp/c --model tiny --llama-shape tiny --device cpu \
        --budgets 80% --decode-tokens 2 --diffusion-steps 2 --reps 1 --warmup 0   # CPU smoke
    python -m bench.bench_compress --out $OUT --plan-from profile.json --budgets 8,12,16
    python -m bench.bench_compress --out /tmp/c --model tiny --device cpu --plan-from synthetic \
        --budgets 0.5225,0.6 --reps 1 --warmup 0
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from alpamayo_offload.engine import Engine, EngineError
from alpamayo_offload.planning.errors import BudgetError, PlanningError
from alpamayo_offload.planning.planner import (
    PlannerOptions,
    PlanResult,
    interleaved_indices,
    plan,
)
from alpamayo_offload.planning.predictor import Placement, Workload
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
    check_profile,
    load_profile,
)

from .compress_subjects import (
    AttachStats,
    LlamaSubject,
    PlanRefusedError,
    R1Subject,
    Run,
    llama_settings,
)
from .peers.measure import deterministic, synchronize

LOG = logging.getLogger('bench_compress')
GIB = 2**30


class Subject(Protocol):
    """What the bench needs of a model (compress_subjects.py)."""

    name: str
    phases: tuple[str, ...]
    n_lm: int

    def attach(self, resident: dict[str, tuple[int, ...]], mode: str,
               budget_bytes: int | None, compression: str) -> None:
        """Attach a plan (PlanRefusedError when it does not fit)."""
        ...

    def infer(self) -> Run:
        """Run one inference."""
        ...

    def attach_stats(self) -> AttachStats:
        """What the last attach cost and holds."""
        ...

    def close(self) -> None:
        """Detach."""
        ...


def host_ram() -> dict[str, int]:
    """Return this process's resident and peak resident host bytes (Linux /proc; else 0)."""
    found = {'rss_bytes': 0, 'peak_rss_bytes': 0}
    try:
        text = Path('/proc/self/status').read_text(encoding='ascii')
    except OSError:
        return found
    for line in text.splitlines():
        key, _, value = line.partition(':')
        name = {'VmRSS': 'rss_bytes', 'VmHWM': 'peak_rss_bytes'}.get(key)
        if name and value.strip().endswith('kB'):
            found[name] = int(value.split()[0]) * 1024
    return found


def _infer(subject: Subject) -> Run:
    """Run one inference started on an idle device (the profile's and bench_workloads' way)."""
    synchronize()
    return subject.infer()


def measure(subject: Subject, warmup: int, reps: int, ref: Run | None) -> tuple[dict[str, Any],
                                                                             Run]:
    """A strict deterministic pass, then the median of `reps` inferences after `warmup`.

    The strict pass's outputs are compared bit for bit with `ref` (preload's strict pass) and
    returned; the timed inferences run in the default mode, as the profile that prices the plan
    was timed.
    """
    strict = deterministic(lambda: _infer(subject))
    for _ in range(warmup):
        _infer(subject)
    runs = [_infer(subject) for _ in range(max(1, reps))]
    phases = {p: statistics.median(r.phases_s[p] for r in runs) for p in subject.phases}
    last = runs[-1]
    effective = {p: last.streamed[p] / phases[p] / 1e9 if phases[p] else 0.0
                 for p in subject.phases}
    streaming_s = sum(phases[p] for p in subject.phases if last.streamed[p])
    stats = subject.attach_stats()
    row = {'total_s': statistics.median(r.total_s for r in runs), 'reps': len(runs),
           'timing_mode': 'default', 'deterministic_pass_s': strict.total_s,
           'phases_s': phases, 'streamed_bytes': last.streamed, 'copied_bytes': last.copied,
           'effective_gb_s': effective,
           'effective_gb_s_streaming': sum(last.streamed.values()) / streaming_s / 1e9
           if streaming_s else 0.0,
           'bytes_streamed_raw': sum(last.streamed.values()),
           'bytes_copied': sum(last.copied.values()),
           'pinned_bytes': stats.pinned_bytes, 'required_bytes': stats.required_bytes,
           **host_ram(),
           'exact': ref is None or strict.same_as(ref)}
    return row, strict


def _attach(subject: Subject, resident: dict[str, tuple[int, ...]], budget: int | None,
            compression: str) -> dict[str, Any]:
    """Attach a pipelined plan; return its attach, compression and cache seconds."""
    start = time.perf_counter()
    subject.attach(resident, 'pipelined', budget, compression)
    stats = subject.attach_stats()
    return {'attach_s': time.perf_counter() - start, 'compress_s': stats.compress_s,
            'cache_hits': stats.cache_hits, 'cache_read_s': stats.cache_read_s}


def _fit(subject: Subject, budget: int, compression: str, start: int) -> tuple[int,
                                                                              dict[str, Any]]:
    """Attach the largest interleaved-LM plan (k <= start) that fits; return k and the row."""
    reason = ''
    for k in range(start, -1, -1):
        resident = interleaved_indices(k, subject.n_lm)
        try:
            attach = _attach(subject, {'lm': resident}, budget, compression)
            return k, {'resident_lm': len(resident), 'resident_lm_indices': list(resident),
                       **attach}
        except PlanRefusedError as err:
            reason = str(err)
            if 'nvCOMP' in reason:
                break
    raise PlanRefusedError(f'no plan fits {budget / GIB:.3f} GiB with compression='
                           f'{compression}: {reason}')


def _budget_bytes(spec: str, preload_bytes: int) -> int:
    """GiB (`12`), or percent of the preload footprint (`80%`)."""
    if spec.endswith('%'):
        return int(float(spec[:-1]) / 100 * preload_bytes)
    return int(float(spec) * GIB)


def model_rows(subject: Subject, budgets: list[str], args: argparse.Namespace,
               start: float) -> list[dict[str, Any]]:
    """Preload, start-up (cold and cached) and raw/compressed rows per budget of one model."""
    base = {'model': subject.name}
    rows: list[dict[str, Any]] = []

    def late() -> bool:
        return time.perf_counter() - start > args.budget_s

    subject.attach({}, 'preload', None, 'off')
    preload_bytes = subject.attach_stats().required_bytes
    ref_row, ref = measure(subject, args.warmup, args.reps, None)
    rows.append({**base, 'budget_gib': None, 'plan': 'preload', **ref_row})
    LOG.info('%s', rows[-1])
    for plan_name in ('startup-cold', 'startup-cache') if args.startup else ():
        if late():
            rows.append({**base, 'budget_gib': None, 'plan': plan_name,
                         'skipped': 'time budget'})
            continue
        try:
            attach = _attach(subject, {}, None, 'on')
        except PlanRefusedError as err:
            rows.append({**base, 'budget_gib': None, 'plan': plan_name, 'skipped': str(err)})
            continue
        row, _ = measure(subject, 0, 1, ref)
        rows.append({**base, 'budget_gib': None, 'plan': plan_name, 'resident_lm': 0,
                     **attach, **row})
        LOG.info('%s', rows[-1])
    for spec in budgets:
        budget = _budget_bytes(spec, preload_bytes)
        gib = round(budget / GIB, 3)
        k_raw = subject.n_lm
        for compression in ('off', 'on'):
            name = 'raw' if compression == 'off' else 'compressed'
            head = {**base, 'budget_gib': gib, 'budget': spec, 'plan': name}
            if late():
                rows.append({**head, 'skipped': 'time budget'})
                continue
            try:
                k, attach = _fit(subject, budget, compression, k_raw)
            except PlanRefusedError as err:
                rows.append({**head, 'skipped': str(err)})
                continue
            k_raw = k if compression == 'off' else k_raw
            row, _ = measure(subject, args.warmup, args.reps, ref)
            rows.append({**head, 'k': k, **attach, **row})
            LOG.info('%s', rows[-1])
    return rows


# What `--plan-from synthetic` assumes: link GB/s, compressed/raw, decompression GB/s, layer ms.
_SYNTHETIC = (1.0, 0.69, 300.0, 0.01)
_PHASES = (('vision', 'vit', 'once'), ('prefill', 'lm', 'once'), ('decode', 'lm', 'decode'),
           ('diffusion', 'expert', 'diffusion'))


def synthetic_profile(engine: Engine) -> Profile:
    """A made-up profile of the loaded model's layer sizes (`_SYNTHETIC`), for a dry run."""
    link, ratio, decode, layer_ms = _SYNTHETIC
    sequences = []
    for name, sizes in engine.layer_footprints().items():
        packed = tuple(f.packed_bytes for f in sizes)
        sequences.append(SequenceProfile(
            name=name, layer_bytes=packed, dma_ms=tuple(b / (link * 1e6) for b in packed),
            resident_bytes=tuple(f.resident_bytes for f in sizes),
            slot_bytes=tuple(f.slot_bytes for f in sizes),
            compressed_bytes=tuple(max(1, int(b * ratio)) for b in packed),
            decompress_gbps=decode, decompress_contention=0.1))
    lengths = {s.name: s.n_layers for s in sequences}
    phases = tuple(PhaseProfile(name, seq, repeats, ((layer_ms,) * lengths[seq],), (0.0,))
                   for name, seq, repeats in _PHASES)
    info = engine.info
    return Profile(model_identity='synthetic',
                   machine=MachineInfo('synthetic', pinned_h2d_gbps=link),
                   sequences=tuple(sequences), phases=phases,
                   vram=VramProfile(info.fixed_bytes, info.embed_bytes, info.working_set_bytes))


def _apply(engine: Engine, placement: Placement, budget: int) -> float:
    """Attach `placement` under `budget`; return the attach (and compression) time in s."""
    t0 = time.perf_counter()
    engine.replan(resident={s: placement.indices(s) for s in placement.resident},
                  compressed={s: placement.compressed_indices(s) for s in placement.compressed},
                  compression='on' if placement.compression else 'off', mode='pipelined',
                  budget_bytes=budget, embed_on_host=placement.embed_on_host)
    return time.perf_counter() - t0


def planned_rows(subject: R1Subject, profile: Profile, budgets: list[float], ref: Run,
                 args: argparse.Namespace, start: float) -> list[dict[str, Any]]:
    """Measure the raw and the planned plan of each budget against their predictions."""
    engine = subject.engine
    # The engine's budget check counts the working set for its own decode-token limit.
    options = PlannerOptions(workload=Workload(args.decode_tokens, args.diffusion_steps),
                             max_decode_tokens=engine.config.max_decode_tokens)
    rows: list[dict[str, Any]] = []
    for gib in budgets:
        budget = int(gib * GIB)
        try:
            raw = plan(profile, budget, dataclasses.replace(options, compression='off'))
            best = plan(profile, budget, options)
        except BudgetError as err:
            rows.append({'budget_gib': gib, 'plan': 'raw', 'skipped': str(err)})
            continue
        try:
            packed: PlanResult | None = plan(profile, budget,
                                             dataclasses.replace(options, compression='on'))
        except PlanningError as err:
            packed = None
            rows.append({'budget_gib': gib, 'plan': 'compressed', 'skipped': str(err)})
        for kind, result in (('raw', raw), ('compressed', packed), ('planned', best)):
            if result is None:
                continue
            placement = result.placement
            head = {'model': subject.name, 'budget_gib': gib, 'plan': kind,
                    'compression': placement.compression,
                    'resident': {s: list(placement.indices(s)) for s in placement.resident},
                    'compressed': {s: list(placement.compressed_indices(s))
                                   for s in placement.compressed},
                    'embed_on_host': placement.embed_on_host,
                    'predicted_s': result.prediction.total_s,
                    'predicted_phases_s': {p.name: p.wall_ms / 1000 for p in
                                           result.prediction.phases}}
            twin = next((k for k, r in (('raw', raw), ('compressed', packed))
                         if k != kind and r is not None and r.placement == placement), None)
            if kind == 'planned' and twin:
                rows.append({**head, 'skipped': f'same plan as {twin}'})
                continue
            if time.perf_counter() - start > args.budget_s:
                rows.append({**head, 'skipped': 'time budget'})
                continue
            try:
                attach_s = _apply(engine, placement, budget)
            except EngineError as err:
                rows.append({**head, 'skipped': str(err)})
                continue
            row, _ = measure(subject, args.warmup, args.reps, ref)
            rows.append({**head, 'attach_s': attach_s, **row,
                         'error': row['total_s'] / result.prediction.total_s - 1})
            LOG.info('%s', rows[-1])
    return rows


def _print_planned(rows: list[dict[str, Any]]) -> None:
    raw = {r['budget_gib']: r['total_s'] for r in rows if r['plan'] == 'raw' and 'total_s' in r}
    print(f"{'budget':>7} {'plan':>8} {'compr':>5} {'res/kept':>9} {'pred s':>7} {'meas s':>7} "
          f"{'error':>7} {'x raw':>6} {'GB/s eff':>8} exact")
    for r in rows:
        if 'predicted_s' not in r:
            print(f"{r['budget_gib']!s:>7} {r['plan']:>8} skipped: {r['skipped']}")
            continue
        counts = (f"{sum(map(len, r['resident'].values()))}/"
                  f"{sum(map(len, r['compressed'].values()))}")
        lead = (f"{r['budget_gib']!s:>7} {r['plan']:>8} {'on' if r['compression'] else 'off':>5} "
                f"{counts:>9} {r['predicted_s']:7.3f}")
        if 'skipped' in r:
            print(f"{lead} skipped: {r['skipped']}")
            continue
        ratio = r['total_s'] / raw[r['budget_gib']] if r['budget_gib'] in raw else float('nan')
        print(f"{lead} {r['total_s']:7.3f} {100 * r['error']:+6.2f}% {ratio:6.2f} "
              f"{r['effective_gb_s_streaming']:8.1f} {r['exact']}")


def print_table(rows: list[dict[str, Any]]) -> None:
    """The short table: one line a row, ratios against the raw plan of the same budget."""
    raw = {(r['model'], r['budget']): r['total_s'] for r in rows
           if r.get('plan') == 'raw' and 'total_s' in r}
    print(f"{'model':>6} {'budget':>7} {'plan':>13} {'lm res':>6} {'total s':>8} {'x raw':>6} "
          f"{'GB/s eff':>8} {'copied GB':>9} {'pinned GiB':>10} {'RSS GiB':>7} {'attach s':>8} "
          f"{'compr s':>7} {'cache':>5} exact")
    for r in rows:
        lead = f"{r['model']:>6} {r.get('budget') or '-':>7} {r['plan']:>13}"
        if 'skipped' in r:
            print(f'{lead} skipped: {r["skipped"]}')
            continue
        ratio = raw.get((r['model'], r.get('budget')))
        print(f"{lead} {r.get('resident_lm', '-')!s:>6} {r['total_s']:8.3f} "
              f"{r['total_s'] / ratio if ratio else float('nan'):6.2f} "
              f"{r['effective_gb_s_streaming']:8.1f} {r['bytes_copied'] / 1e9:9.2f} "
              f"{r['pinned_bytes'] / GIB:10.2f} {r['rss_bytes'] / GIB:7.2f} "
              f"{r.get('attach_s', 0.0):8.1f} {r.get('compress_s', 0.0):7.1f} "
              f"{r.get('cache_hits', 0):5d} {r['exact']}")


def _subject(name: str, args: argparse.Namespace, cache_dir: Path) -> Subject:
    if name == 'r1':
        return R1Subject(args.model, args.device, cache_dir, args.decode_tokens,
                         args.diffusion_steps)
    if name == 'llama':
        return LlamaSubject(llama_settings(args.llama_shape, args.device), cache_dir)
    raise ValueError(f'--models: unknown model {name!r}; known: r1, llama')


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--models', default='r1,llama', help='r1, llama or r1,llama')
    ap.add_argument('--model', default='full', help='the R1 preset or checkpoint')
    ap.add_argument('--llama-shape', default='7b', choices=('7b', 'tiny'))
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--budgets', default='8,12,16',
                    help='VRAM budgets: GiB, or N%% of the preload footprint')
    ap.add_argument('--decode-tokens', type=int, default=21)
    ap.add_argument('--diffusion-steps', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=1)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--budget-s', type=float, default=580.0, help='wall-clock budget')
    ap.add_argument('--startup', action=argparse.BooleanOptionalAction, default=True,
                    help='the start-up rows (every layer compressed, then read from the cache); '
                         '--no-startup leaves the time to the budget rows')
    ap.add_argument('--cache-dir', type=Path, default=None,
                    help='compression cache (default: a temporary directory, removed at the end)')
    ap.add_argument('--plan-from', default=None,
                    help='plan each budget of R1 from this profile (or "synthetic") and print '
                         'predicted vs measured')
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the rows within the time budget; write rows.json and print a table last."""
    args = _parser().parse_args(argv)
    # What strict passes need, set before the first cuBLAS call, so that every inference of
    # the run (strict or not) uses the same cuBLAS workspace, as the profile records it.
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s')
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    owned = args.cache_dir is None
    cache_dir = Path(tempfile.mkdtemp(prefix='bench-compress-cache-')) if owned \
        else args.cache_dir
    rows: list[dict[str, Any]] = []
    try:
        if args.plan_from:
            return _planned(args, cache_dir, start)
        for name in args.models.split(','):
            subject = _subject(name, args, cache_dir)
            try:
                rows += model_rows(subject, args.budgets.split(','), args, start)
            finally:
                subject.close()
            (args.out / 'rows.json').write_text(json.dumps(rows, indent=2))
    finally:
        if owned:
            shutil.rmtree(cache_dir, ignore_errors=True)
    (args.out / 'rows.json').write_text(json.dumps(rows, indent=2))
    print_table(rows)
    return 0


def _planned(args: argparse.Namespace, cache_dir: Path, start: float) -> int:
    """`--plan-from`: R1's raw, compressed and planned plans against their predictions."""
    subject = R1Subject(args.model, args.device, cache_dir, args.decode_tokens,
                        args.diffusion_steps)
    try:
        subject.attach({}, 'preload', None, 'off')
        ref_row, ref = measure(subject, args.warmup, args.reps, None)
        rows = [{'model': subject.name, 'budget_gib': None, 'plan': 'preload', **ref_row}]
        if args.plan_from == 'synthetic':
            profile = synthetic_profile(subject.engine)
        else:
            profile = load_profile(args.plan_from)[0]
            # warns when the profile was timed under other kernel settings than the rows are
            check_profile(profile, kernel_settings=subject.engine.info.kernel_settings)
        planned = planned_rows(subject, profile, [float(b) for b in args.budgets.split(',')],
                               ref, args, start)
    finally:
        subject.close()
    (args.out / 'rows.json').write_text(json.dumps(rows + planned, indent=2))
    _print_planned(planned)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
