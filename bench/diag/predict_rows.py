"""`predict-rows`: re-predict every measured row of `bench_workloads` runs from their profiles.

Reads each run directory's rows.jsonl and profile_*.json (the profiles the rows were planned
with), prices each row's own placement (its resident layers and embedding placement; preload:
every layer resident) with the predictor at the bench's workload, as `bench_workloads` does,
and prints per phase predicted against measured ms and their error, with the phase's
predicted copy, compute and host time and whether it is CPU-sensitive (its host issue work
nearly bounds it, so it follows the CPU's speed of the moment).

Where a row probed the pinned copy rate and the CPU's kernel-issue speed around its runs
(`row_link_gbps`, `row_host_issue_us`), a second line prices it at those (the profile's host
terms scaled by the row's issue speed against the profile's, its copy rate the row's): what is
left is the model's error, not the machine's drift between the profile and the row.
Pure: no GPU, no torch.

    python -m bench.diag predict-rows --runs docs/results/2026-12-02d-h200/wl2s [DIR ...]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alpamayo_offload.planning import Placement, Prediction, Profile, predict
from bench.bench_workloads import WORKLOADS, all_resident, read_profiles, read_run
from bench.diag.common import add_subcommand

PHASES = ('vision', 'prefill', 'decode', 'diffusion')


def register(sub: Any) -> None:
    """Add the `predict-rows` sub-command."""
    p = add_subcommand(sub, 'predict-rows', 're-predict bench_workloads rows from their profiles',
                       __doc__)
    p.add_argument('--runs', type=Path, nargs='+', required=True,
                   help='bench_workloads output folders (rows.jsonl and profile_*.json)')
    p.add_argument('--json', type=Path, default=None, help='also write the table as JSON here')
    p.set_defaults(func=run)


def row_placement(profile: Profile, row: Mapping[str, Any]) -> Placement:
    """The placement a row ran: preload every layer resident, a planned row its own."""
    if row['kind'] == 'preload':
        return all_resident(profile)
    return Placement.of(row['resident'], bool(row.get('embed_on_host', False)))


def at_row_machine(profile: Profile, row: Mapping[str, Any]) -> Profile | None:
    """The profile at the copy rate and CPU issue speed probed around the row (None: no probes).

    Host terms scale by the mean of the row's issue probes over the mean of the profile's
    (`host_issue_probe_us`, taken around its host-timed calls).
    """
    issue, then = row.get('row_host_issue_us'), profile.settings.get('host_issue_probe_us')
    links = row.get('row_link_gbps')
    if not (issue and then) and not links:
        return None
    out = profile
    if issue and then:
        out = out.with_host_scaled(statistics.mean(issue) / statistics.mean(then))
    if links:
        out = dataclasses.replace(out, machine=dataclasses.replace(
            out.machine, pinned_h2d_gbps=statistics.mean(links)))
    return out


def phase_table(prediction: Prediction, row: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per phase (and 'total'): predicted and measured ms, error, copy/compute/host terms."""
    measured = row.get('phases_s', {})
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


def repredict(run_dir: Path) -> list[dict[str, Any]]:
    """One record per measured row of a run: its label, the table, and at the row's machine."""
    rows, _meta = read_run(run_dir)
    profiles = read_profiles([str(run_dir)])
    out = []
    for row in rows:
        if row.get('status') != 'ok' or row.get('kind') not in ('preload', 'planned'):
            continue
        spec = WORKLOADS[row['workload']]
        found = profiles.get((spec.num_samples, spec.guidance))
        if found is None:
            raise SystemExit(f'{run_dir}: no profile_*.json of {spec.num_samples} samples, '
                             f'guidance {spec.guidance} for row {row["workload"]} '
                             f'{row["kind"]} {row.get("budget_gib")}')
        profile = found[0]
        placement = row_placement(profile, row)
        workload = spec.planner_workload()
        record = {'run': str(run_dir), 'workload': row['workload'], 'kind': row['kind'],
                  'budget_gib': row.get('budget_gib'), 'runs_s': row.get('runs_s'),
                  'phases': phase_table(predict(profile, placement, workload), row)}
        there = at_row_machine(profile, row)
        if there is not None:
            record['at_row_machine'] = phase_table(predict(there, placement, workload), row)
        out.append(record)
    return out


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
            lines.append(f'{label + tag:27} {cells}  {runs}')
    lines.append('cells: predicted/measured ms, error of the prediction; * CPU-sensitive; '
                 '@row: at the copy rate and CPU speed probed around the row')
    return '\n'.join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the table (and write it as JSON with `--json`)."""
    records = [r for d in args.runs for r in repredict(d)]
    print(render(records))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(records, indent=1) + '\n')
    return 0
