"""Append-only JSONL store of finished samples: what Ctrl-C keeps and what `--resume` continues.

Line 1 is a header with the schema version and a fingerprint of the configuration and bags; every
further line is one sample record, written, flushed and fsync'ed before the next sample starts.
A line cut off by a crash is dropped on resume (it was never complete).
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alpamayo_offload.replay.errors import ResultStoreError

_LOG = logging.getLogger(__name__)

STORE_SCHEMA = 1
FILE_NAME = 'samples.jsonl'


def _dumps(obj: Mapping[str, Any]) -> str:
    """Compact JSON with exact float repr; key order is the (deterministic) insertion order."""
    return json.dumps(obj, separators=(',', ':'))


def _header(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """Build the header line's content, through JSON so tuples equal the lists read back."""
    return json.loads(_dumps({'kind': 'header', 'schema': STORE_SCHEMA,
                              'fingerprint': dict(fingerprint)}))


def _holds_results(path: Path, resume: bool) -> bool:
    """Whether `path` holds an earlier run's results; refused unless `resume`."""
    if not (path.exists() and path.stat().st_size > 0):
        return False
    if not resume:
        raise ResultStoreError(f'{path} already holds replay results; pass --resume to continue '
                               'that run or choose another output directory')
    return True


def _check_header(path: Path, line: str, header: Mapping[str, Any]) -> None:
    """Refuse a store whose header line is not this run's (schema, configuration, bags)."""
    try:
        found = json.loads(line) if line.strip() else {}
    except json.JSONDecodeError as err:
        raise ResultStoreError(f'{path}: first line is not a replay header ({err}); '
                               'choose another output directory') from err
    if found.get('schema') != STORE_SCHEMA:
        raise ResultStoreError(f'{path}: schema {found.get("schema")!r}, this replay writes '
                               f'{STORE_SCHEMA}; choose another output directory')
    old, new = found.get('fingerprint', {}), header['fingerprint']
    if old != new:
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise ResultStoreError(
            f'{path} was written with a different configuration or bags (differs in: '
            f'{", ".join(changed)}); rerun with the same ones or use another output directory')


class SampleStore:
    """Sample records of one replay run, persisted one line per sample."""

    def __init__(self, path: Path, header: Mapping[str, Any],
                 records: list[dict[str, Any]]) -> None:
        self.path = path
        self.records = records
        self._header = header
        self._file = path.open('a', encoding='utf-8')

    @classmethod
    def open(cls, out_dir: Path, fingerprint: Mapping[str, Any], *, resume: bool) -> SampleStore:
        """Create the store, or reopen it on `resume` after checking it belongs to this run."""
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / FILE_NAME
        header = _header(fingerprint)
        if _holds_results(path, resume):
            records = cls._load(path, header)
            _LOG.info('resuming %s: %d samples already done', path, len(records))
            return cls(path, header, records)
        path.write_text(_dumps(header) + '\n', encoding='utf-8')
        return cls(path, header, [])

    @staticmethod
    def check(out_dir: Path, fingerprint: Mapping[str, Any], *, resume: bool) -> None:
        """Raise the `ResultStoreError` that `open` would, reading only the header (no changes).

        Lets a run refuse a directory of another run before it spends time loading a model.
        """
        path = out_dir / FILE_NAME
        if _holds_results(path, resume):
            with path.open('rb') as f:
                first = f.readline()
            _check_header(path, first.decode('utf-8', 'replace'), _header(fingerprint))

    @staticmethod
    def _load(path: Path, header: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Read back finished records; cut a trailing partial line; refuse another run's file."""
        raw = path.read_bytes()
        complete = raw[:raw.rfind(b'\n') + 1]
        if len(complete) != len(raw):
            _LOG.warning('%s: dropping an unfinished last line (%d bytes) from an interrupted run',
                         path, len(raw) - len(complete))
            with path.open('r+b') as f:
                f.truncate(len(complete))
        lines = complete.decode('utf-8').splitlines()
        _check_header(path, lines[0] if lines else '', header)
        return [json.loads(line) for line in lines[1:] if line]

    def done(self) -> set[tuple[str, int]]:
        """(bag, tick_ns) of every finished record, accepted or rejected alike."""
        return {(r['bag'], int(r['tick_ns'])) for r in self.records}

    def append(self, record: Mapping[str, Any]) -> None:
        """Persist one record before returning, so an interrupt never loses it."""
        line = _dumps(record)
        self._file.write(line + '\n')
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records.append(json.loads(line))  # exactly what a resumed run would read back

    def persisted(self) -> list[dict[str, Any]]:
        """Return the records on disk, as a resumed run reads them back.

        The report counts these: Ctrl-C can land after a line is written and before `records`
        holds it, and the file is what `--resume` continues from.
        """
        self._file.flush()
        return self._load(self.path, self._header)

    def close(self) -> None:
        """Close the file (records stay readable in memory)."""
        self._file.close()

    def __enter__(self) -> SampleStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
