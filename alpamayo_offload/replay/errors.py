"""Typed replay errors; each message names the bag, topic and time where it applies, and the fix."""
from __future__ import annotations

from pathlib import Path


def format_time(stamp_ns: int | None) -> str:
    """Seconds with ns precision, as `ros2 bag info` prints them."""
    if stamp_ns is None:
        return 'unknown time'
    sign, ns = ('-', -stamp_ns) if stamp_ns < 0 else ('', stamp_ns)  # exact: no float rounding
    return f't={sign}{ns // 1_000_000_000}.{ns % 1_000_000_000:09d} s'


class ReplayError(Exception):
    """Base of every error the replay raises on purpose."""


class BagError(ReplayError):
    """A bag cannot be read as configured: missing, corrupt, truncated, wrong topic or type."""

    def __init__(self, bag: Path | str, message: str, *, topic: str | None = None,
                 stamp_ns: int | None = None) -> None:
        where = [f'bag {str(bag)!r}']
        if topic is not None:
            where.append(f'topic {topic!r}')
        if stamp_ns is not None:
            where.append(format_time(stamp_ns))
        super().__init__(f'{", ".join(where)}: {message}')
        self.bag = str(bag)
        self.topic = topic
        self.stamp_ns = stamp_ns


class ReplayConfigError(ReplayError):
    """The parameter or plan file cannot configure a replay."""


class ResultStoreError(ReplayError):
    """The output directory holds results that do not belong to this run."""
