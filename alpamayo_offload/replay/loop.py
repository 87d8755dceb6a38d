"""The replay loop: scan each bag, pick evaluation times, assemble as the node does, plan, score.

Time axis: header stamps. A bag is first scanned without decoding images (integrity, clock jumps,
gaps, the whole odometry for ground truth); then messages are fed in recording order into the same
buffers the node uses, and an evaluation time T fires just before the first message stamped after
T, i.e. with everything a node on the sensors' clock would have had at T.
"""
from __future__ import annotations

import logging
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from alpamayo_offload.assembly import (
    InputError,
    ModelInput,
    OdometrySample,
    StampedBuffer,
    assemble,
    image_from_msg,
    odometry_from_msg,
)
from alpamayo_offload.replay.bag_reader import BagInfo, BagReader
from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.errors import BagError, format_time
from alpamayo_offload.replay.ground_truth import ground_truth
from alpamayo_offload.replay.metrics import sample_metrics, yaw_from_rot
from alpamayo_offload.replay.sample_store import SampleStore

_LOG = logging.getLogger(__name__)
_NS = 1_000_000_000

Planner = Callable[[ModelInput], Any]
"""Anything mapping a ModelInput to a result with `xyz` ((K,) 64, 3), `rot` ((K,) 64, 3, 3) in the
t0 ego frame (or every sample as `samples_xyz`/`samples_rot`) and `timings` (stage -> seconds);
`Engine.infer` is the real one."""


@dataclass(frozen=True)
class PreparedBag:
    """A bag that passed the scan: its odometry, evaluation times and reported anomalies."""

    key: str
    info: BagInfo
    odometry: tuple[OdometrySample, ...]
    ticks: tuple[int, ...]
    anomalies: tuple[dict[str, Any], ...]
    note: str = ''


@dataclass
class RunState:
    """What the loop reports back besides the stored records."""

    bags: list[PreparedBag] = field(default_factory=list)
    scored: int = 0          # samples scored by this process (the first one is the warm-up)
    interrupted: bool = False
    error: str | None = None


def _cdr_stamp(raw: bytes | memoryview) -> int:
    """Header stamp of a CDR message whose first field is std_msgs/Header (no deserialising)."""
    little = raw[1] & 1
    sec, nsec = struct.unpack_from('<iI' if little else '>iI', raw, 4)
    return sec * _NS + nsec


def _scan_stamps(reader: BagReader, cfg: ReplayConfig
                 ) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Check every input message's stamp for clock jumps and gaps; return first stamp per topic."""
    topics = list(cfg.expected_topics())
    conns = [c for c in reader.reader.connections if c.topic in topics]
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    anomalies: list[dict[str, Any]] = []
    topic: str | None = None
    stamp: int | None = None
    try:
        for conn, _, raw in reader.reader.messages(connections=conns):
            topic = conn.topic
            stamp = _cdr_stamp(raw)
            prev = last.get(topic)
            if prev is not None and prev - stamp > cfg.max_backward_jump_s * _NS:
                raise BagError(reader.path, f'clock jumps back by {(prev - stamp) / _NS:.3f} s '
                               f'(from {format_time(prev)}; limit max_backward_jump_s = '
                               f'{cfg.max_backward_jump_s}); split the bag at this time (ros2 bag '
                               'convert) and replay the parts', topic=topic, stamp_ns=stamp)
            if prev is not None and stamp - prev > cfg.gap_warning_s * _NS:
                gap = (stamp - prev) / _NS
                _LOG.warning('bag %r, topic %r, %s: gap of %.3f s (no message since %s)',
                             str(reader.path), topic, format_time(stamp), gap, format_time(prev))
                anomalies.append({'kind': 'gap', 'topic': topic, 'stamp_ns': prev,
                                  'duration_s': gap})
            first.setdefault(topic, stamp)
            last[topic] = max(stamp, prev) if prev is not None else stamp
    except BagError:
        raise
    except Exception as err:  # the boundary: damaged data while scanning
        raise BagError(reader.path, f'unreadable after the last good message ({type(err).__name__}:'
                       f' {err}); the bag is corrupt or truncated', topic=topic,
                       stamp_ns=stamp) from err
    for t in topics:
        if t not in first:
            raise BagError(reader.path, 'has no messages; check that it was recorded', topic=t)
        if first[t] == last[t] == 0:
            raise BagError(reader.path, 'every header stamp is zero; replay times inputs by '
                           'header stamps, so the publisher must stamp its messages', topic=t)
    return first, anomalies


def prepare_bag(path: Path | str, cfg: ReplayConfig) -> PreparedBag:
    """Open and scan one bag; a `BagError` names bag, topic and time when it cannot be used."""
    path = Path(path)
    with BagReader(path, cfg.expected_topics()) as reader:
        info = reader.info()
        first, anomalies = _scan_stamps(reader, cfg)
        odometry = sorted((odometry_from_msg(m.msg) for m in reader.messages([cfg.odometry_topic])),
                          key=lambda s: s.stamp_ns)
    a = cfg.assembly
    # One model step (0.1 s) of margin: t0 (the oldest newest frame) trails the evaluation time by
    # up to a camera period, and its history must still start after the first odometry.
    start = max(first[cfg.odometry_topic] + round(a.history_steps * a.history_dt_s * _NS),
                max(first[c.topic] for c in cfg.cameras)
                + round((max(a.frame_offsets_s) + a.history_dt_s) * _NS))
    end = odometry[-1].stamp_ns - round(a.future_steps * a.history_dt_s * _NS)
    ticks = tuple(range(start, end + 1, cfg.period_ns)) if end >= start else ()
    note = ''
    if not ticks:
        span = (odometry[-1].stamp_ns - start) / _NS
        note = (f'no evaluation time: inputs span {span:.2f} s after the history warm-up, '
                f'ground truth needs {a.future_steps * a.history_dt_s:.1f} s')
        _LOG.warning('bag %r: %s', str(path), note)
    key = str(path.resolve())
    return PreparedBag(key, info, tuple(odometry), ticks, tuple(anomalies), note)


def _rejected(bag: str, tick: int, reason: str, message: str, t0_ns: int | None = None
              ) -> dict[str, Any]:
    return {'bag': bag, 'tick_ns': tick, 'status': 'rejected', 'reason': reason,
            'message': message, 't0_ns': t0_ns}


def _as_stack(arr: Any, tail: int) -> np.ndarray:
    a = np.asarray(arr, dtype=np.float64)
    return a[None] if a.ndim == tail else a


def evaluate_tick(bag: PreparedBag, tick: int, cameras: dict[int, list[Any]],
                  odometry: Sequence[OdometrySample], cfg: ReplayConfig, planner: Planner,
                  planner_errors: tuple[type[Exception], ...], warmup: bool = False,
                  pool: Executor | None = None) -> dict[str, Any]:
    """One evaluation time -> one record (scored, or rejected with its reason).

    `warmup` marks the first planner call of a process (one-time costs); its latency is kept in
    the record but left out of the latency statistics. `pool` decodes the frames in parallel.
    """
    t_start = time.perf_counter()
    try:
        model_input = assemble(cameras, odometry, cfg.assembly, now_ns=tick, pool=pool)
    except InputError as err:
        return _rejected(bag.key, tick, err.reason, err.message)
    t_assembled = time.perf_counter()
    t0 = model_input.t0_ns
    try:
        gt = ground_truth(bag.odometry, t0, model_input.odom_pose_t0, cfg.assembly)
    except InputError as err:
        return _rejected(bag.key, tick, f'ground_truth_{err.reason}', err.message, t0)
    try:
        result = planner(model_input)
    except planner_errors as err:
        return _rejected(bag.key, tick, f'planner_{type(err).__name__}', str(err), t0)
    t_planned = time.perf_counter()
    # Every trajectory sample when the planner gives them (min-over-samples metrics), else one.
    xyz = _as_stack(getattr(result, 'samples_xyz', result.xyz), 2)
    yaw = yaw_from_rot(_as_stack(getattr(result, 'samples_rot', result.rot), 3))
    metrics = sample_metrics(xyz, yaw, gt.xyz, gt.yaw)
    latency = {'assembly': t_assembled - t_start, 'image_decode': model_input.decode_s,
               **{k: float(v) for k, v in dict(getattr(result, 'timings', {})).items()},
               'planner_call': t_planned - t_assembled}
    return {
        'bag': bag.key, 'tick_ns': tick, 'status': 'ok', 'reason': None, 'message': None,
        't0_ns': t0, 'metrics': metrics, 'latency_s': latency, 'warmup': warmup,
        'pred_xyz': xyz.tolist(), 'pred_yaw': yaw.tolist(),
        'gt_xyz': gt.xyz.tolist(), 'gt_yaw': gt.yaw.tolist(),
        'coc_text': getattr(result, 'coc_text', None),
        'decode_tokens': getattr(result, 'decode_tokens', None),
    }


def replay_bag(bag: PreparedBag, cfg: ReplayConfig, planner: Planner, store: SampleStore,
               bar: tqdm, state: RunState, planner_errors: tuple[type[Exception], ...] = ()
               ) -> None:
    """Stream one scanned bag through the node's buffers and store a record per evaluation time."""
    done = store.done()
    todo = [t for t in bag.ticks if (bag.key, t) not in done]
    if not todo:
        return
    cams = {c.topic: (c.slot, StampedBuffer(cfg.camera_depth)) for c in cfg.cameras}
    odom_buf: StampedBuffer[OdometrySample] = StampedBuffer(cfg.odometry_depth)
    pending = iter(todo)
    next_tick: int | None = next(pending, None)

    def fire_until(stamp: int | None) -> int | None:
        tick = next_tick
        while tick is not None and (stamp is None or tick < stamp):
            snapshot = {slot: buf.snapshot() for slot, buf in cams.values()}
            record = evaluate_tick(bag, tick, snapshot, odom_buf.snapshot(), cfg, planner,
                                   planner_errors, warmup=state.scored == 0, pool=pool)
            store.append(record)
            state.scored += record['status'] == 'ok'
            if record['status'] != 'ok':
                _LOG.debug('bag %r %s rejected: %s', bag.key, format_time(tick), record['message'])
            bar.update(1)
            tick = next(pending, None)
        return tick

    pool = ThreadPoolExecutor(cfg.decode_threads, thread_name_prefix='replay-decode') \
        if cfg.decode_threads > 1 else None
    with BagReader(bag.info.path, cfg.expected_topics()) as reader, pool or nullcontext():
        for m in reader.messages(list(cfg.expected_topics())):
            if m.topic == cfg.odometry_topic:
                item: Any = odometry_from_msg(m.msg)
                odom_buf.push(item)
            else:
                item = image_from_msg(m.msg)
                cams[m.topic][1].push(item)
            next_tick = fire_until(item.stamp_ns)
            if next_tick is None:
                return
    fire_until(None)


def run_replay(bags: Sequence[PreparedBag], cfg: ReplayConfig, planner: Planner,
               store: SampleStore, *, progress: bool = True,
               planner_errors: tuple[type[Exception], ...] = ()) -> RunState:
    """Replay scanned bags into `store`; Ctrl-C or a damaged bag stop it, finished samples kept.

    Never raises for those two: the state says `interrupted` or carries the `BagError` text, so the
    caller still writes the report of what is done.
    """
    state = RunState(bags=list(bags))
    total = sum(len(b.ticks) for b in state.bags)
    done = store.done()
    initial = sum(1 for b in state.bags for t in b.ticks if (b.key, t) in done)
    with tqdm(total=total, initial=initial, unit='sample', file=sys.stderr, disable=not progress,
              dynamic_ncols=True) as bar:
        try:
            for bag in state.bags:
                bar.set_description(Path(bag.info.path).name)
                replay_bag(bag, cfg, planner, store, bar, state, planner_errors)
        except KeyboardInterrupt:
            state.interrupted = True
            _LOG.warning('interrupted: %d samples are stored in %s; rerun with --resume',
                         len(store.persisted()), store.path)
        except BagError as err:
            state.error = str(err)
            _LOG.error('%s', err)
    return state
