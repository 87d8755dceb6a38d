"""Price measured plans again from a profile: per phase, predicted against measured.

Reads a `bench_compress --plan-from` run's `rows.json` (each row: its placement, the latency it
was predicted, the latency measured per phase) and predicts every measured row's placement again
from a profile with today's predictor, printing per phase predicted / measured seconds and the
end-to-end error. So a predictor change, or a profile measured again, can be checked against the
hardware without running it.

`--decompress-host-ms SEQ=MS,...` prices each decompression's host enqueue (nvCOMP's calls in a
streaming hook) at MS for SEQ instead of the profile's value: a what-if for a profile that did not
time it (the term is then 0), never a substitute for measuring it.

    python -m bench.repredict_rows docs/results/2026-12-02-h200/compress
    python -m bench.repredict_rows docs/results/2026-12-02-h200/compress \
        --decompress-host-ms lm=0.45,expert=0.45,vit=0.45
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alpamayo_offload.planning.errors import ProfileFormatError
from alpamayo_offload.planning.predictor import Placement, Prediction, Workload, predict
from alpamayo_offload.planning.profile import Profile, load_profile


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


def placement_of(row: Mapping[str, Any]) -> Placement:
    """The placement a bench row measured."""
    return Placement.of(row['resident'], bool(row['embed_on_host']), row.get('compressed'),
                        bool(row.get('compression')))


def measured_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that were planned and measured (not the preload reference, not skipped ones)."""
    return [r for r in rows if 'resident' in r and 'phases_s' in r and 'total_s' in r]


def repredict(profile: Profile, row: Mapping[str, Any], workload: Workload) -> Prediction:
    """Predict one measured row's placement from `profile`."""
    return predict(profile, placement_of(row), workload)


def report(profile: Profile, rows: list[dict[str, Any]], workload: Workload) -> list[str]:
    """One line per measured row: total and per phase predicted / measured seconds, error."""
    lines = []
    for row in measured_rows(rows):
        got = repredict(profile, row, workload)
        phases = ' '.join(f'{name} {got.phase(name).wall_ms / 1e3:.3f}/{seconds:.3f}'
                          for name, seconds in row['phases_s'].items())
        error = row['total_s'] / got.total_s - 1
        lines.append(f"{row['budget_gib']!s:>5} {row['plan']:>10}  pred {got.total_s:.3f} "
                     f"meas {row['total_s']:.3f} {error:+7.1%}  | {phases}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the re-predicted rows of a run directory (profile.json and rows.json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('run', type=Path, help='directory holding profile.json and rows.json')
    parser.add_argument('--profile', type=Path, help='another profile (default: RUN/profile.json)')
    parser.add_argument('--decompress-host-ms', default='', metavar='SEQ=MS,...')
    parser.add_argument('--decode-tokens', type=int, default=21)
    parser.add_argument('--diffusion-steps', type=int, default=10)
    args = parser.parse_args(argv)
    try:
        profile, _ = load_profile(args.profile or args.run / 'profile.json')
        profile = with_host_ms(profile, parse_host_ms(args.decompress_host_ms))
        rows = json.loads((args.run / 'rows.json').read_text())
    except (OSError, ValueError, ProfileFormatError) as err:
        print(f'repredict_rows: {err}', file=sys.stderr)
        return 2
    print('budget       plan  predicted / measured s, error  | per phase predicted/measured s')
    for line in report(profile, rows, Workload(args.decode_tokens, args.diffusion_steps)):
        print(line)
    return 0


if __name__ == '__main__':
    sys.exit(main())
