"""Rewrite schema-6 profiles as schema 7 with the compression terms absent ("not measured").

Schema 7 adds per-sequence compression terms (`compressed_bytes`, `decompress_gbps`,
`decompress_contention`) that a schema-6 run never measured. This keeps every measured term as
it was and records the compression terms as not measured, so the planner prices raw plans exactly
as before and never chooses a compressed placement from the file; re-profile on the GPU to
measure them.

    python -m bench.migrate_profile docs/results/2026-11-30-h200/run12/planner_b/profile.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from alpamayo_offload.planning.errors import ProfileFormatError
from alpamayo_offload.planning.profile import SCHEMA, SCHEMA_VERSION, Profile

FROM_VERSION = 6
NOT_MEASURED = 'not measured (migrated from schema 6)'


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Return the schema-7 form of one schema-6 profile's JSON (validated by loading it)."""
    if data.get('schema') != SCHEMA or data.get('schema_version') != FROM_VERSION:
        raise ProfileFormatError(f'not a schema-{FROM_VERSION} profile (schema '
                                 f'{data.get("schema")!r}, version {data.get("schema_version")!r})')
    out = {**data, 'schema_version': SCHEMA_VERSION,
           'sequences': [{**s, 'compressed_bytes': [], 'decompress_gbps': 0.0,
                          'decompress_contention': 0.0} for s in data['sequences']],
           'settings': {**data['settings'], 'compression': NOT_MEASURED}}
    Profile.from_dict(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Migrate each named file in place; a file that is not schema 6 is named and left alone."""
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('paths', nargs='+', type=Path)
    args = ap.parse_args(argv)
    failed = 0
    for path in args.paths:
        try:
            data = migrate(json.loads(path.read_text()))
        except (OSError, ValueError, ProfileFormatError) as err:
            print(f'{path}: not migrated ({err})', file=sys.stderr)
            failed += 1
            continue
        path.write_text(json.dumps(data, indent=1, sort_keys=False) + '\n')
        print(f'{path}: schema {FROM_VERSION} -> {SCHEMA_VERSION}, compression {NOT_MEASURED}')
    return 1 if failed else 0


if __name__ == '__main__':
    raise SystemExit(main())
