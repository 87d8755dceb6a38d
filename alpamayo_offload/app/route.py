"""Which navigation (route) text an inference uses: the latest one, unless it is stale or cleared.

The node and replay share this rule. `std_msgs/String` has no header, so a route text is placed
on the time axis by when it arrived: the node's clock at reception, or the recording time in a
bag. At an inference time `now_ns` the latest text received at or before it is used when it is
at most `max_age_s` old (0: never stale); an empty (or blank) text clears the route. Stale,
cleared or absent text means no route text: the model runs its plain prompt.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

ROUTE_NONE = 'none'                # no route text received yet
ROUTE_FRESH = 'fresh'              # the text is used
ROUTE_STALE = 'stale'              # older than max_age_s: not used
ROUTE_CLEARED = 'cleared'          # the latest text is empty: no route
ROUTE_UNSUPPORTED = 'unsupported'  # the model takes no route text (Alpamayo-R1)
_NS = 1_000_000_000


@dataclass(frozen=True)
class RouteMessage:
    """One received route text and when it arrived (node clock or bag recording time, ns)."""

    text: str
    stamp_ns: int


@dataclass(frozen=True)
class RouteChoice:
    """The route text an inference uses (None: none) and why."""

    text: str | None
    state: str                 # one of the ROUTE_* states
    age_s: float = math.nan    # age of the latest text at the inference time (nan: none)
    latest: str | None = None  # the latest text received, used or not


def choose_route(latest: RouteMessage | None, now_ns: int, max_age_s: float,
                 supported: bool = True) -> RouteChoice:
    """Apply the staleness rule (module docstring) to the latest text received by `now_ns`."""
    if latest is None:
        return RouteChoice(None, ROUTE_NONE)
    age_s = (now_ns - latest.stamp_ns) / _NS
    if not latest.text.strip():
        return RouteChoice(None, ROUTE_CLEARED, age_s, latest.text)
    if max_age_s > 0 and age_s > max_age_s:
        return RouteChoice(None, ROUTE_STALE, age_s, latest.text)
    if not supported:
        return RouteChoice(None, ROUTE_UNSUPPORTED, age_s, latest.text)
    return RouteChoice(latest.text, ROUTE_FRESH, age_s, latest.text)


def latest_before(messages: Sequence[RouteMessage], now_ns: int) -> RouteMessage | None:
    """Return the last of `messages` (sorted by `stamp_ns`) arrived at or before `now_ns`."""
    i = bisect.bisect_right([m.stamp_ns for m in messages], now_ns)
    return messages[i - 1] if i else None
