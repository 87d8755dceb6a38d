"""The measured rows of a bench output folder, each with the profile and workload to price it at.

Two kinds of folder, told apart by the files in them:
- `bench_workloads`: rows.jsonl and profile_*.json (one profile per samples/guidance pair);
  its preload and planned rows that ran, each at its workload's profile;
- `bench_compress --plan-from`: rows.json and profile.json; its planned rows that were
  measured (not the preload reference, not the skipped ones).

`--profile` prices them from another profile instead; `--decompress-host-ms` prices each
decompression's host enqueue (nvCOMP's calls in a streaming hook) at a given time per sequence:
a what-if for a profile that did not time it (the term is then 0), never a substitute for
measuring it. Pure: no GPU, no torch.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alpamayo_offload.planning import Placement, Profile, Workload, load_profile
from bench.bench_workloads import WORKLOADS, all_resident, read_profiles, read_run
from bench.diag.common import DECODE_TOKENS, DIFFUSION_STEPS

WORKLOADS_RUN = 'bench_workloads'
COMPRESS_RUN = 'bench_compress'


@dataclasses.dataclass(frozen=True)
class Pricing:
    """How to price a folder's rows: another profile, a what-if enqueue time, pass counts.

    `profile`: a profile file (or, for a `bench_workloads` folder, a folder of profile_*.json)
    used instead of the run's own; `decode_tokens`/`diffusion_steps`: None keeps the bench's
    (21 and 10 for both benches).
    """

    profile: Path | None = None
    host_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    decode_tokens: int | None = None
    diffusion_steps: int | None = None

    def passes(self, workload: Workload) -> Workload:
        """`workload` with the pass counts asked for."""
        return dataclasses.replace(
            workload,
            decode_passes=(workload.decode_passes if self.decode_tokens is None
                           else self.decode_tokens),
            diffusion_steps=(workload.diffusion_steps if self.diffusion_steps is None
                             else self.diffusion_steps))


@dataclasses.dataclass(frozen=True)
class MeasuredRow:
    """One measured row: its label, the row, and the profile, placement and workload to price."""

    run: Path
    name: str           # bench_workloads: the workload; bench_compress: the model
    kind: str           # preload / planned, or the compress plan (raw / compressed)
    budget_gib: float | None
    row: Mapping[str, Any]
    profile: Profile
    placement: Placement
    workload: Workload

    def measured_s(self) -> dict[str, float]:
        """Measured seconds per phase and 'total'."""
        out = dict(self.row.get('phases_s', {}))
        if 'total_s' in self.row:
            out['total'] = self.row['total_s']
        return out


def parse_host_ms(text: str) -> dict[str, float]:
    """Parse `SEQ=MS,SEQ=MS` (e.g. `lm=0.45,expert=0.9`); raise ValueError naming a bad item."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(','))):
        name, sep, value = item.partition('=')
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not sep or not name or not ms >= 0:
            raise ValueError(f'--decompress-host-ms item {item!r}: give SEQUENCE=MS, MS >= 0')
        out[name] = ms
    return out


def with_host_ms(profile: Profile, host_ms: Mapping[str, float]) -> Profile:
    """Return `profile` with the named sequences' decompression enqueue priced at `host_ms`."""
    unknown = sorted(set(host_ms) - {s.name for s in profile.sequences})
    if unknown:
        raise ValueError(f'--decompress-host-ms names {unknown}; the profile has '
                         f'{[s.name for s in profile.sequences]}')
    return dataclasses.replace(profile, sequences=tuple(
        dataclasses.replace(s, decompress_host_ms=host_ms.get(s.name, s.decompress_host_ms))
        for s in profile.sequences))


def folder_kind(run_dir: Path) -> str:
    """Which bench wrote `run_dir`, by its files; ValueError naming what is missing."""
    if (run_dir / 'rows.jsonl').is_file() and any(run_dir.glob('profile_*.json')):
        return WORKLOADS_RUN
    if (run_dir / 'rows.json').is_file() and (run_dir / 'profile.json').is_file():
        return COMPRESS_RUN
    raise ValueError(f'{run_dir}: neither a bench_workloads run (rows.jsonl and '
                     'profile_*.json) nor a bench_compress run (rows.json and profile.json)')


def workloads_rows(run_dir: Path, pricing: Pricing) -> list[MeasuredRow]:
    """A `bench_workloads` run's preload and planned rows that ran, at their workload's profile."""
    rows, _meta = read_run(run_dir)
    profiles = read_profiles([str(pricing.profile or run_dir)])
    out = []
    for row in rows:
        if row.get('status') != 'ok' or row.get('kind') not in ('preload', 'planned'):
            continue
        spec = WORKLOADS[row['workload']]
        found = profiles.get((spec.num_samples, spec.guidance))
        if found is None:
            raise ValueError(f'{pricing.profile or run_dir}: no profile_*.json of '
                             f'{spec.num_samples} samples, guidance {spec.guidance} for row '
                             f'{row["workload"]} {row["kind"]} {row.get("budget_gib")}')
        profile = with_host_ms(found[0], pricing.host_ms)
        placement = (all_resident(profile) if row['kind'] == 'preload' else
                     Placement.of(row['resident'], bool(row.get('embed_on_host', False)),
                                  row.get('compressed'), bool(row.get('compression'))))
        out.append(MeasuredRow(run_dir, row['workload'], row['kind'], row.get('budget_gib'), row,
                               profile, placement, pricing.passes(spec.planner_workload())))
    return out


def compress_rows(run_dir: Path, pricing: Pricing) -> list[MeasuredRow]:
    """A `bench_compress` run's measured planned rows, at its profile."""
    profile, _ = load_profile(pricing.profile or run_dir / 'profile.json')
    profile = with_host_ms(profile, pricing.host_ms)
    workload = pricing.passes(Workload(DECODE_TOKENS, DIFFUSION_STEPS))
    rows = json.loads((run_dir / 'rows.json').read_text())
    return [MeasuredRow(run_dir, row.get('model', '-'), row['plan'], row['budget_gib'], row,
                        profile, Placement.of(row['resident'], bool(row['embed_on_host']),
                                              row.get('compressed'),
                                              bool(row.get('compression'))), workload)
            for row in rows if 'resident' in row and 'phases_s' in row and 'total_s' in row]


def measured_rows(run_dir: Path, pricing: Pricing) -> list[MeasuredRow]:
    """The measured rows of either kind of folder (see the module docstring)."""
    if folder_kind(run_dir) == WORKLOADS_RUN:
        return workloads_rows(run_dir, pricing)
    return compress_rows(run_dir, pricing)
