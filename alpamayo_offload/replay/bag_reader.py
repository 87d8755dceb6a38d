"""Read one ROS 2 bag (mcap or sqlite3) through `rosbags`, turning every failure into a `BagError`.

`rosbags` raises many exception types for damaged files (its own reader errors, sqlite3, struct,
zstd, EOF); this module is the one boundary that catches them and names bag, topic and time.
"""
from __future__ import annotations

import logging
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


@dataclass(frozen=True)
class BagMessage:
    """One deserialised message with its topic and recording (log) time."""

    topic: str
    log_ns: int
    msg: Any


@dataclass(frozen=True)
class BagInfo:
    """What the report says about an input bag."""

    path: str
    storage: str
    start_ns: int
    end_ns: int
    message_counts: dict[str, int]

    @property
    def duration_s(self) -> float:
        """Recorded span in seconds."""
        return (self.end_ns - self.start_ns) / 1e9


def _storage(path: Path) -> str:
    """'mcap' or 'sqlite3', from the file name or the directory's files."""
    files = [path] if path.is_file() else sorted(path.iterdir())
    suffixes = {f.suffix for f in files}
    return 'mcap' if '.mcap' in suffixes else 'sqlite3' if '.db3' in suffixes else 'unknown'


class BagReader:
    """An open bag whose configured topics exist with the expected message types."""

    def __init__(self, path: Path | str, expected: Mapping[str, Sequence[str]]) -> None:
        """Remember the bag; `expected` maps each needed topic to the message types it accepts."""
        self.path = Path(path)
        self._expected = {topic: tuple(types) for topic, types in expected.items()}
        self._reader: AnyReader | None = None

    def __enter__(self) -> BagReader:
        if not self.path.exists():
            raise BagError(self.path, 'does not exist; pass the bag directory or its '
                           '.mcap/.db3 file')
        try:
            reader = AnyReader([self.path], default_typestore=get_typestore(Stores.ROS2_JAZZY))
            reader.open()
        except Exception as err:  # the boundary: any reader failure is a damaged bag
            raise BagError(self.path, f'cannot be opened ({type(err).__name__}: {err}); it is '
                           'corrupt, truncated or not a ROS 2 bag (try `ros2 bag reindex`)'
                           ) from err
        self._reader = reader
        try:
            self._check_topics()
        except BagError:
            reader.close()
            self._reader = None
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            try:
                reader.close()
            except Exception as err:  # closing a damaged bag must not hide the cause
                _LOG.debug('closing %s failed: %s', self.path, err)

    @property
    def reader(self) -> AnyReader:
        """The open `rosbags` reader."""
        if self._reader is None:
            raise RuntimeError(f'{self.path} is not open; use BagReader as a context manager')
        return self._reader

    def _check_topics(self) -> None:
        found = {c.topic: c.msgtype for c in self.reader.connections}
        for topic, types in self._expected.items():
            if topic not in found:
                have = ', '.join(f'{t} [{m}]' for t, m in sorted(found.items())) or 'none'
                raise BagError(self.path, f'missing (topics in the bag: {have}); fix the topic '
                               'names in the parameter file', topic=topic)
            if found[topic] not in types:
                raise BagError(self.path, f'has type {found[topic]}, expected '
                               f'{" or ".join(types)}; check the camera transport (raw or '
                               'compressed) and the topic names', topic=topic)

    def info(self) -> BagInfo:
        """Storage, recorded span and per-topic message counts."""
        counts: dict[str, int] = {}
        for c in self.reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
        return BagInfo(str(self.path), _storage(self.path), self.reader.start_time,
                       self.reader.end_time, dict(sorted(counts.items())))

    def messages(self, topics: Sequence[str]) -> Iterator[BagMessage]:
        """Deserialised messages of `topics` in recording order; damage is a `BagError`."""
        conns = [c for c in self.reader.connections if c.topic in set(topics)]
        last_topic: str | None = None
        last_ns: int | None = None
        it = self.reader.messages(connections=conns)
        while True:
            try:
                item = next(it, None)
                if item is None:
                    return
                conn, log_ns, raw = item
                last_topic, last_ns = conn.topic, log_ns
                msg = self.reader.deserialize(raw, conn.msgtype)
            except Exception as err:  # the boundary: damaged data mid-stream
                where = 'after the last good message' if last_ns is not None else 'at the start'
                raise BagError(self.path, f'unreadable {where} ({type(err).__name__}: {err}); the '
                               'bag is corrupt or truncated, samples before this point are kept',
                               topic=last_topic, stamp_ns=last_ns) from err
            yield BagMessage(conn.topic, log_ns, msg)
