"""`predict-rows`: re-predict every measured row of bench runs from their profiles.

Reads `bench_workloads` folders (rows.jsonl and profile_*.json: the profiles the rows were
planned with) and `bench_compress --plan-from` folders (rows.json and profile.json), told apart
by their files. Prices each row's own placement (its resident layers, kept-compressed layers and
embedding placement; preload: every layer resident) with the predictor at the bench's workload,
as the bench did, and prints per phase predicted against measured ms and the prediction's error
(predicted / measured - 1), with the phase's predicted copy, compute and host time in the JSON
and whether it is CPU-sensitive (its host issue work nearly bounds it, so it follows the CPU's
speed of the moment).

Where a row probed the pinned copy rate and the CPU's kernel-issue speed around its runs
(`row_link_gbps`, `row_host_issue_us`), a second line prices it at those (the profile's host
terms scaled by the row's issue speed against the profile's, its copy rate the row's): what is
left is the model's error, not the machine's drift between the profile and the row.

`--profile` prices the rows from another profile (a file; for a bench_workloads folder also a
folder of profile_*.json). `--decompress-host-ms SEQ=MS,...` prices each decompression's host
enqueue at MS for SEQ instead of the profile's value: a what-if for a profile that did not time
it, never a substitute for measuring it. Pure: no GPU, no torch.

    python -m bench.diag predict-rows --runs docs/results/2026-12-02d-h200/wl2s \\
        docs/results/2026-12-02-h200/compress
    python -m bench.diag predict-rows --runs docs/results/2026-12-02-h200/compress \\
        --decompress-host-ms lm=0.45,expert=0.45,vit=0.45
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alpamayo_offload.planning import Prediction, Profile, ProfileFormatError, predict
from bench.bench_planner import at_cpu_speed, at_link_rate
from bench.diag.common import add_subcommand
from bench.diag.measured_rows import MeasuredRow, Pricing, measured_rows, parse_host_ms

PHASES = ('vision', 'prefill', 'decode', 'diffusion')


def register(sub: Any) -> None:
    """Add the `predict-rows` sub-command."""
    p = add_subcommand(sub, 'predict-rows', 're-predict bench_workloads and bench_compress rows '
                       'from their profiles (CPU)', __doc__)
    p.add_argument('--runs', type=Path, nargs='+', required=True,
                   help='bench_workloads (rows.jsonl, profile_*.json) or bench_compress '
                        '(rows.json, profile.json) output folders')
    p.add_argument('--profile', type=Path, default=None,
                   help="price from this profile instead of each run's own")
    p.add_argument('--decompress-host-ms', default='', metavar='SEQ=MS,...',
                   help='what-if: price each decompression host enqueue of SEQ at MS')
    p.add_argument('--decode-tokens', type=int, default=None,
                   help="decode passes to price (default: the bench's, 21)")
    p.add_argument('--diffusion-steps', type=int, default=None,
                   help="diffusion steps to price (default: the bench's, 10)")
    p.add_argument('--json', type=Path, default=None, help='also write the table as JSON here')
    p.set_defaults(func=run)


def at_row_machine(profile: Profile, row: Mapping[str, Any]) -> Profile | None:
    """The profile at the copy rate and CPU issue speed probed around the row (None: no probes).

    Host terms scale by the mean of the row's issue probes over the mean of the profile's
    (`host_issue_probe_us`, taken around its host-timed calls).
    """
    at_cpu = at_cpu_speed(profile, row.get('row_host_issue_us') or [])
    links = row.get('row_link_gbps') or []
    if at_cpu is None and not links:
        return None
    return at_link_rate(at_cpu or profile, links) or at_cpu


def phase_table(prediction: Prediction,
                measured: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """Per phase (and 'total'): predicted and measured ms, error, copy/compute/host terms."""
    out: dict[str, dict[str, Any]] = {}
    for name in PHASES:
        try:
            p = prediction.phase(name)
        except KeyError:
            continue
        meas = 1000.0 * measured[name] if name in measured else None
        out[name] = {'predicted_ms': p.wall_ms, 'measured_ms': meas,
                     'error': None if not meas else p.wall_ms / meas - 1.0,
                     'copy_ms': p.copy_ms, 'compute_ms': p.compute_ms, 'host_ms': p.host_ms,
                     'cpu_sensitive': p.cpu_sensitive}
    meas = 1000.0 * measured['total'] if 'total' in measured else None
    out['total'] = {'predicted_ms': prediction.total_ms, 'measured_ms': meas,
                    'error': None if not meas else prediction.total_ms / meas - 1.0}
    return out


def record(measured: MeasuredRow) -> dict[str, Any]:
    """One row's label, its table, and (where it probed the machine) the table at its machine."""
    row = measured.row
    out = {'run': str(measured.run), 'workload': measured.name, 'kind': measured.kind,
           'budget_gib': measured.budget_gib, 'runs_s': row.get('runs_s'),
           'phases': phase_table(predict(measured.profile, measured.placement,
                                         measured.workload), measured.measured_s())}
    there = at_row_machine(measured.profile, row)
    if there is not None:
        out['at_row_machine'] = phase_table(predict(there, measured.placement,
                                                    measured.workload), measured.measured_s())
    return out


def repredict(run_dir: Path, pricing: Pricing | None = None) -> list[dict[str, Any]]:
    """One record per measured row of a run folder (see `record`)."""
    return [record(m) for m in measured_rows(run_dir, pricing or Pricing())]


def _fmt(cell: Mapping[str, Any]) -> str:
    meas = cell['measured_ms']
    err = '   -  ' if cell['error'] is None else f'{100 * cell["error"]:+6.1f}%'
    flag = '*' if cell.get('cpu_sensitive') else ' '
    return f'{cell["predicted_ms"]:8.0f}/{meas if meas is None else round(meas):>6} {err}{flag}'


def render(records: list[dict[str, Any]]) -> str:
    """The table: predicted/measured ms and error per phase; * marks a CPU-sensitive phase."""
    head = f'{"row":27} ' + ' '.join(f'{n:>23}' for n in (*PHASES, 'total')) + '  runs (s)'
    lines = [head]
    for r in records:
        label = f'{Path(r["run"]).name} {r["workload"]} {r["kind"]} {r["budget_gib"] or "whole"}'
        for key, tag in (('phases', ''), ('at_row_machine', ' @row')):
            table = r.get(key)
            if table is None:
                continue
            cells = ' '.join(_fmt(table[n]) if n in table else f'{"-":>23}'
                             for n in (*PHASES, 'total'))
            runs = '' if tag else ' '.join(f'{x:.3f}' for x in r['runs_s'] or ())
            lines.append(f'{label + tag:27} {cells}  {runs}'.rstrip())
    lines.append('cells: predicted/measured ms, error of the prediction; * CPU-sensitive; '
                 '@row: at the copy rate and CPU speed probed around the row')
    return '\n'.join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the table (and write it as JSON with `--json`); 2 with a named reason on bad input."""
    try:
        pricing = Pricing(args.profile, parse_host_ms(args.decompress_host_ms),
                          args.decode_tokens, args.diffusion_steps)
        records = [r for d in args.runs for r in repredict(d, pricing)]
    except (OSError, ValueError, KeyError, ProfileFormatError) as err:
        print(f'predict-rows: {err}', file=sys.stderr)
        return 2
    print(render(records))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(records, indent=1) + '\n')
    return 0
