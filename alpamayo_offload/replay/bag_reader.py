"""Read one ROS 2 bag (mcap or sqlite3), turning every failure into a `BagError` or a recovery.

`rosbags` reads intact bags. A bag it cannot open (a killed recorder: an mcap without its summary
and footer, a .db3 cut short, no metadata.yaml) is read by the storage's own maintained reader up
to the damage: the `mcap` package's stream reader (no summary needed; chunks are CRC-checked) or
sqlite3 row by row. `recovered` then says what was lost. Messages are deserialised with the
rosbags typestore either way.
"""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.replay.errors import BagError

_LOG = logging.getLogger(__name__)

IMAGE_TYPE = 'sensor_msgs/msg/Image'
COMPRESSED_IMAGE_TYPE = 'sensor_msgs/msg/CompressedImage'
ODOMETRY_TYPE = 'nav_msgs/msg/Odometry'
STRING_TYPE = 'std_msgs/msg/String'

RawMessage = tuple[str, str, int, bytes]
"""(topic, message type, recording (log) time in ns, CDR bytes)."""


@dataclass(frozen=True)
class BagMessage:
    """One deserialised message with its topic and recording (log) time."""

    topic: str
    log_ns: int
    msg: Any


@dataclass(frozen=True)
class BagInfo:
    """What the report says about an input bag; `recovered` describes what a damage cost."""

    path: str
    storage: str
    start_ns: int
    end_ns: int
    message_counts: dict[str, int]
    recovered: str | None = None

    @property
    def duration_s(self) -> float:
        """Recorded span in seconds."""
        return (self.end_ns - self.start_ns) / 1e9


def _data_files(path: Path) -> list[Path]:
    files = [path] if path.is_file() else sorted(path.iterdir())
    return [f for f in files if f.suffix in ('.mcap', '.db3')]


def _storage(path: Path) -> str:
    """'mcap' or 'sqlite3', from the file name or the directory's files."""
    suffixes = {f.suffix for f in _data_files(path)}
    return 'mcap' if '.mcap' in suffixes else 'sqlite3' if '.db3' in suffixes else 'unknown'


class _Recovered:
    """The complete messages of damaged data files, read in file order up to the damage."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)
        self.types: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.start_ns = self.end_ns = 0
        self.lost: list[str] = []
        self._position = 0   # bytes (mcap) or row id (sqlite3) of the last complete message
        for _ in self.raw(None, None):
            pass   # one pass: topics, types, counts and what was lost

    def raw(self, topics: set[str] | None, start_ns: int | None) -> Iterator[RawMessage]:
        first = not self.counts and not self.lost
        for f in self.files:
            reader = self._mcap if f.suffix == '.mcap' else self._sqlite
            try:
                for topic, msgtype, log_ns, data in reader(f):
                    if first:
                        self.types.setdefault(topic, msgtype)
                        self.counts[topic] = self.counts.get(topic, 0) + 1
                        self.start_ns = min(self.start_ns or log_ns, log_ns)
                        self.end_ns = max(self.end_ns, log_ns)
                    if (topics is None or topic in topics) and (start_ns is None
                                                                or log_ns >= start_ns):
                        yield topic, msgtype, log_ns, data
            except Exception as err:  # the damage: everything before it was yielded
                if first:
                    self.lost.append(f'{f.name}: unreadable after position {self._position}'
                                     f' of {f.stat().st_size} bytes ({type(err).__name__}: {err})')

    def _mcap(self, f: Path) -> Iterator[RawMessage]:
        from mcap.records import Channel, Message, Schema
        from mcap.stream_reader import StreamReader

        schemas: dict[int, str] = {}
        channels: dict[int, tuple[str, str]] = {}
        with f.open('rb') as stream:
            for rec in StreamReader(stream, validate_crcs=True).records:
                self._position = stream.tell()
                if isinstance(rec, Schema):
                    schemas[rec.id] = rec.name
                elif isinstance(rec, Channel):
                    channels[rec.id] = (rec.topic, schemas.get(rec.schema_id, ''))
                elif isinstance(rec, Message) and rec.channel_id in channels:
                    topic, msgtype = channels[rec.channel_id]
                    yield topic, msgtype, rec.log_time, bytes(rec.data)

    def _sqlite(self, f: Path) -> Iterator[RawMessage]:
        con = sqlite3.connect(f'file:{f}?mode=ro', uri=True)
        # A file shorter than its header says is refused as malformed unless the schema is
        # writable; then SQLite reads the pages that exist (the connection stays read-only).
        con.execute('PRAGMA writable_schema=ON')
        try:
            topics = {i: (name, msgtype) for i, name, msgtype in
                      con.execute('SELECT id, name, type FROM topics')}
            for rowid, topic_id, log_ns, data in con.execute(
                    'SELECT id, topic_id, timestamp, data FROM messages'):
                self._position = rowid
                if topic_id in topics:
                    yield *topics[topic_id], int(log_ns), bytes(data)
        finally:
            con.close()


class BagReader:
    """An open bag whose configured topics exist with the expected message types."""

    def __init__(self, path: Path | str, expected: Mapping[str, Sequence[str]]) -> None:
        """Remember the bag; `expected` maps each needed topic to the message types it accepts."""
        self.path = Path(path)
        self._expected = {topic: tuple(types) for topic, types in expected.items()}
        self._reader: AnyReader | None = None
        self._recovered: _Recovered | None = None
        self._typestore = get_typestore(Stores.ROS2_JAZZY)

    def __enter__(self) -> BagReader:
        if not self.path.exists():
            raise BagError(self.path, 'does not exist; pass the bag directory or its '
                           '.mcap/.db3 file')
        try:
            reader = AnyReader([self.path], default_typestore=self._typestore)
            reader.open()
            self._reader = reader
        except Exception as err:  # the boundary: rosbags cannot open it, try the storage's reader
            self._recover(err)
        try:
            self._check_topics()
        except BagError:
            self.__exit__()
            raise
        return self

    def _recover(self, err: Exception) -> None:
        files = _data_files(self.path)
        recovered = _Recovered(files) if files else None
        if recovered is None or not recovered.counts:
            raise BagError(self.path, f'cannot be opened ({type(err).__name__}: {err}); it is '
                           'corrupt, truncated before its first complete message, or not a ROS 2 '
                           'bag') from err
        self._recovered = recovered
        _LOG.warning('bag %r is damaged (%s: %s); read %d complete messages up to the damage: %s',
                     str(self.path), type(err).__name__, err, sum(recovered.counts.values()),
                     '; '.join(recovered.lost) or 'no loss found')

    def __exit__(self, *exc: object) -> None:
        self._recovered = None
        if self._reader is not None:
            reader, self._reader = self._reader, None
            try:
                reader.close()
            except Exception as err:  # closing a damaged bag must not hide the cause
                _LOG.debug('closing %s failed: %s', self.path, err)

    def _types(self) -> dict[str, str]:
        if self._recovered is not None:
            return dict(self._recovered.types)
        if self._reader is None:
            raise RuntimeError(f'{self.path} is not open; use BagReader as a context manager')
        return {c.topic: c.msgtype for c in self._reader.connections}

    def _check_topics(self) -> None:
        found = self._types()
        for topic, types in self._expected.items():
            if topic not in found:
                have = ', '.join(f'{t} [{m}]' for t, m in sorted(found.items())) or 'none'
                raise BagError(self.path, f'missing (topics in the bag: {have}); fix the topic '
                               'names (--camera, --odometry or the parameter file)', topic=topic)
            if found[topic] not in types:
                raise BagError(self.path, f'has type {found[topic]}, expected '
                               f'{" or ".join(types)}; check the camera transport (raw or '
                               'compressed) and the topic names', topic=topic)

    def msgtype(self, topic: str) -> str | None:
        """Return the message type of `topic` in the bag (None: the bag has no such topic)."""
        return self._types().get(topic)

    def info(self) -> BagInfo:
        """Storage, recorded span, per-topic message counts and what a recovery lost."""
        if self._recovered is not None:
            r = self._recovered
            lost = '; '.join(r.lost) or 'the index/summary is missing, no message data lost'
            return BagInfo(str(self.path), _storage(self.path), r.start_ns, r.end_ns,
                           dict(sorted(r.counts.items())), f'recovered: {lost}')
        counts: dict[str, int] = {}
        reader = self._reader
        assert reader is not None
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
        return BagInfo(str(self.path), _storage(self.path), reader.start_time, reader.end_time,
                       dict(sorted(counts.items())))

    def raw_messages(self, topics: Sequence[str], start_log_ns: int | None = None
                     ) -> Iterator[RawMessage]:
        """Yield serialized messages of `topics` in recording order, from `start_log_ns` if given.

        Damage after the start raises `BagError` naming the last good message.
        """
        wanted = set(topics)
        last_topic: str | None = None
        last_ns: int | None = None
        if self._recovered is not None:
            yield from self._recovered.raw(wanted, start_log_ns)
            return
        reader = self._reader
        assert reader is not None
        conns = [c for c in reader.connections if c.topic in wanted]
        it = reader.messages(connections=conns, start=start_log_ns)
        while True:
            try:
                item = next(it, None)
            except Exception as err:  # the boundary: damaged data mid-stream
                where = 'after the last good message' if last_ns is not None else 'at the start'
                raise BagError(self.path, f'unreadable {where} ({type(err).__name__}: {err}); the '
                               'bag is corrupt or truncated, samples before this point are kept',
                               topic=last_topic, stamp_ns=last_ns) from err
            if item is None:
                return
            conn, log_ns, raw = item
            last_topic, last_ns = conn.topic, log_ns
            yield conn.topic, conn.msgtype, log_ns, bytes(raw)

    def deserialize(self, raw: bytes, msgtype: str) -> Any:
        """Deserialize CDR bytes (with the bag's own type definitions when it has them)."""
        if self._reader is not None:
            return self._reader.deserialize(raw, msgtype)
        return self._typestore.deserialize_cdr(raw, msgtype)

    def messages(self, topics: Sequence[str], start_log_ns: int | None = None
                 ) -> Iterator[BagMessage]:
        """Deserialised messages of `topics` in recording order; damaged data is a `BagError`.

        A single message that does not deserialise is skipped (the recording scan lists it as
        the anomaly `message_unreadable`); the samples that needed it are rejected by assembly.
        """
        for topic, msgtype, log_ns, raw in self.raw_messages(topics, start_log_ns):
            try:
                msg = self.deserialize(raw, msgtype)
            except Exception as err:  # noqa: BLE001 - one bad message: skipped, listed by the scan
                _LOG.debug('bag %r topic %r at %d: skipped (%s)', str(self.path), topic, log_ns,
                           err)
                continue
            yield BagMessage(topic, log_ns, msg)
