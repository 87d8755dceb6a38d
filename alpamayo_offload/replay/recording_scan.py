"""One pass over a recording before any inference: per-topic statistics and anomalies.

Every input message's header stamp is read without deserialising (CDR: the header comes first);
odometry is deserialised (it is the ground truth), images only far enough to know their size and
encoding (raw: the message fields; compressed: the JPEG/PNG header, never the pixels). The pass
refuses a bag only for what makes it unusable (a topic without messages or stamps, a clock that
jumps back); everything else is an anomaly the report lists with its times: gaps, a topic that
starts late or stops early, non-finite odometry, clock jumps (header stamps against recording
time), out-of-order stamps, images of unexpected size or encoding, messages that do not
deserialise, and damage that ended reading.
"""
from __future__ import annotations

import io
import math
import struct
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from alpamayo_offload.assembly import OdometrySample, odometry_from_msg
from alpamayo_offload.replay.bag_reader import IMAGE_TYPE, BagReader
from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.errors import BagError, format_time

_NS = 1_000_000_000
GAP_PERIODS = 4.0        # an interval over this many median periods is a gap ...
MIN_GAP_S = 0.05         # ... but never one shorter than this
MERGE_S = 1.0            # repeated anomalies of one kind and topic closer than this are one entry


def cdr_stamp(raw: bytes | memoryview) -> int:
    """Header stamp of a CDR message whose first field is std_msgs/Header (no deserialising)."""
    little = raw[1] & 1
    sec, nsec = struct.unpack_from('<iI' if little else '>iI', raw, 4)
    return sec * _NS + nsec


@dataclass(frozen=True)
class RecordingScan:
    """What the pass found: statistics, anomalies, the whole odometry, and where reading ended."""

    topics: dict[str, dict[str, Any]]
    anomalies: tuple[dict[str, Any], ...]
    odometry: tuple[OdometrySample, ...]
    first_stamp: dict[str, int]
    odometry_log_ns: tuple[int, ...]     # recording time of each odometry sample (same order)
    damaged: str | None = None


def _image_shape(msg: Any, msgtype: str) -> str:
    """'WxH encoding' of an image message, decoding no pixels; unreadable headers say why."""
    if msgtype == IMAGE_TYPE:
        return f'{int(msg.width)}x{int(msg.height)} {msg.encoding}'
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(bytes(msg.data)))
            return f'{img.width}x{img.height} {str(msg.format).split(";")[0].strip()}'
    except Exception as err:  # noqa: BLE001 - any header failure is reported, never raised
        return f'unreadable {msg.format} ({type(err).__name__})'


def _event(kind: str, topic: str, start: int, end: int, detail: str, count: int = 1
           ) -> dict[str, Any]:
    return {'kind': kind, 'topic': topic, 'start_ns': int(start), 'end_ns': int(end),
            'duration_s': (int(end) - int(start)) / _NS, 'count': count, 'detail': detail}


def _merged(kind: str, topic: str, stamps: Sequence[int], detail: str) -> list[dict[str, Any]]:
    """One event per run of occurrences closer than MERGE_S."""
    out: list[dict[str, Any]] = []
    for s in sorted(stamps):
        if out and s - out[-1]['end_ns'] <= MERGE_S * _NS:
            e = out[-1]
            e.update(end_ns=s, duration_s=(s - e['start_ns']) / _NS, count=e['count'] + 1)
        else:
            out.append(_event(kind, topic, s, s, detail))
    return out


def gap_threshold_s(topic: str, median_period_s: float, cfg: ReplayConfig) -> float:
    """Interval above which a topic has a gap (odometry: never above the assembly's own limit)."""
    limit = min(cfg.gap_warning_s, max(GAP_PERIODS * median_period_s, MIN_GAP_S))
    if topic == cfg.odometry_topic:
        limit = min(limit, cfg.assembly.max_odometry_gap_s)
    return limit


def scan_recording(reader: BagReader, cfg: ReplayConfig) -> RecordingScan:
    """Read every input message once; refuse the bag only when it cannot be used at all."""
    topics = list(cfg.expected_topics())
    stamps: dict[str, list[int]] = {t: [] for t in topics}
    logs: dict[str, list[int]] = {t: [] for t in topics}
    shapes: dict[str, list[tuple[int, str]]] = {c.topic: [] for c in cfg.cameras}
    odometry: list[tuple[OdometrySample, int]] = []
    unreadable: dict[str, list[int]] = {}
    newest: dict[str, int] = {}
    damaged: str | None = None
    jump: BagError | None = None
    try:
        for topic, msgtype, log_ns, raw in reader.raw_messages(topics):
            stamp = cdr_stamp(raw)
            prev = newest.get(topic, stamp)
            if prev - stamp > cfg.max_backward_jump_s * _NS:
                jump = BagError(reader.path, f'clock jumps back by {(prev - stamp) / _NS:.3f} s '
                               f'(from {format_time(prev)}; limit max_backward_jump_s = '
                               f'{cfg.max_backward_jump_s}); split the bag at this time (ros2 '
                               'bag convert) and replay the parts', topic=topic, stamp_ns=stamp)
                break
            newest[topic] = max(prev, stamp)
            stamps[topic].append(stamp)
            logs[topic].append(log_ns)
            try:
                msg = reader.deserialize(raw, msgtype)
            except Exception:  # noqa: BLE001 - listed; replay skips the message too
                unreadable.setdefault(topic, []).append(stamp)
                continue
            if topic == cfg.odometry_topic:
                odometry.append((odometry_from_msg(msg), log_ns))
            else:
                shapes[topic].append((stamp, _image_shape(msg, msgtype)))
    except BagError as err:
        damaged = str(err)   # intact index, damaged data: keep what was read
    if jump is not None:
        raise jump
    for t in topics:
        if not stamps[t]:
            raise BagError(reader.path, 'has no messages; check that it was recorded', topic=t)
        if not any(stamps[t]):
            raise BagError(reader.path, 'every header stamp is zero; replay times inputs by '
                           'header stamps, so the publisher must stamp its messages', topic=t)
    odometry.sort(key=lambda p: p[0].stamp_ns)
    stats, anomalies = _analyse(stamps, logs, cfg)
    nonfinite = [s.stamp_ns for s, _ in odometry
                 if not all(map(math.isfinite, (*s.position, *s.orientation_xyzw)))]
    anomalies += _merged('odometry_nonfinite', cfg.odometry_topic, nonfinite,
                         'odometry pose holds NaN/Inf')
    for topic, at in unreadable.items():
        anomalies += _merged('message_unreadable', topic, at,
                             'message does not deserialise; skipped')
    for topic, seen in shapes.items():
        usual, _ = Counter(shape for _, shape in seen).most_common(1)[0] if seen else ('', 0)
        stats[topic]['image'] = usual
        odd: dict[str, list[int]] = {}
        for stamp, shape in seen:
            if shape != usual:
                odd.setdefault(shape, []).append(stamp)
        for shape, at in odd.items():
            anomalies += _merged('image_unexpected', topic, at,
                                 f'{shape} (the topic\'s usual frames: {usual})')
    if damaged or reader.info().recovered:
        end = max(max(s) for s in stamps.values())
        anomalies.append(_event('recording_damaged', '', end, end,
                                damaged or str(reader.info().recovered)))
    anomalies.sort(key=lambda e: (e['start_ns'], e['kind'], e['topic']))
    return RecordingScan(stats, tuple(anomalies), tuple(s for s, _ in odometry),
                         {t: min(stamps[t]) for t in topics}, tuple(n for _, n in odometry),
                         damaged)


def _analyse(stamps: dict[str, list[int]], logs: dict[str, list[int]], cfg: ReplayConfig
             ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Per-topic count/rate and the timing anomalies: gaps, late start, early stop, order, clock."""
    start = min(min(s) for s in stamps.values())
    end = max(max(s) for s in stamps.values())
    stats: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    for topic, seq in stamps.items():
        arr = np.asarray(seq, dtype=np.int64)
        ordered = np.unique(arr)
        periods = np.diff(ordered)
        median = float(np.median(periods)) / _NS if periods.size else 0.0
        span = (int(ordered[-1]) - int(ordered[0])) / _NS
        stats[topic] = {'count': len(seq), 'first_ns': int(ordered[0]),
                        'last_ns': int(ordered[-1]),
                        'rate_hz': (len(ordered) - 1) / span if span > 0 else None,
                        'median_period_s': median}
        limit = gap_threshold_s(topic, median, cfg)
        for i in np.flatnonzero(periods > limit * _NS):
            events.append(_event('gap', topic, ordered[i], ordered[i + 1],
                                 f'no message for {periods[i] / _NS:.3f} s (gap limit '
                                 f'{limit:.3f} s)'))
        if ordered[0] - start > limit * _NS:
            events.append(_event('topic_starts_late', topic, start, ordered[0],
                                 f'first message {(ordered[0] - start) / _NS:.3f} s after the '
                                 'first input message'))
        if end - ordered[-1] > limit * _NS:
            events.append(_event('topic_stops', topic, ordered[-1], end,
                                 f'last message {(end - ordered[-1]) / _NS:.3f} s before the '
                                 'last input message'))
        back = np.flatnonzero(arr[1:] < np.maximum.accumulate(arr)[:-1]) + 1
        events += _merged('out_of_order', topic, arr[back].tolist(),
                          'header stamp older than an earlier message of the topic')
        offset = np.asarray(logs[topic], dtype=np.int64) - arr
        for i in np.flatnonzero(np.abs(np.diff(offset)) > cfg.gap_warning_s * _NS):
            events.append(_event('clock_jump', topic, arr[i], arr[i + 1],
                                 f'header stamps jump {(offset[i] - offset[i + 1]) / _NS:+.3f} s '
                                 'against the recording time'))
    return stats, events
