"""The report counts what is on disk: Ctrl-C between a line's write and its in-memory append."""
from __future__ import annotations

from pathlib import Path

from alpamayo_offload.replay.sample_store import SampleStore


def test_persisted_holds_a_record_written_but_not_yet_remembered(tmp_path: Path) -> None:
    with SampleStore.open(tmp_path, {'a': 1}, resume=False) as store:
        store.append({'bag': 'b', 'tick_ns': 1, 'status': 'ok'})
        store.records.pop()      # as if the interrupt landed after the write, before the append
        assert [r['tick_ns'] for r in store.persisted()] == [1]
    with SampleStore.open(tmp_path, {'a': 1}, resume=True) as again:
        assert again.records == again.persisted() == [{'bag': 'b', 'tick_ns': 1, 'status': 'ok'}]
