"""The replay loop: scan each bag, pick evaluation times, assemble as the node does, plan, score.

Time axis: header stamps. A bag is first scanned without decoding images (integrity, clock jumps,
gaps, the whole odometry for ground truth); then messages are fed in recording order into the same
buffers the node uses, and an evaluation time T fires just before the first message stamped after
T, i.e. with everything a node on the sensors' clock would have had at T.
"""
from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from alpamayo_offload.app.route import RouteMessage, choose_route, latest_before
from alpamayo_offload.assembly import (
    InputError,
    ModelInput,
    OdometrySample,
    StampedBuffer,
    assemble,
    image_from_msg,
    odometry_from_msg,
)
from alpamayo_offload.replay.bag_reader import STRING_TYPE, BagInfo, BagReader
from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.errors import BagError, format_time
from alpamayo_offload.replay.ground_truth import ground_truth
from alpamayo_offload.replay.metrics import (
    HORIZONS_S,
    sample_metrics,
    scored_horizons,
    yaw_from_rot,
)
from alpamayo_offload.replay.recording_scan import scan_recording
from alpamayo_offload.replay.sample_store import SampleStore

_LOG = logging.getLogger(__name__)
_NS = 1_000_000_000

Planner = Callable[[ModelInput], Any]
"""Anything mapping a ModelInput to a result with `xyz` ((K,) 64, 3), `rot` ((K,) 64, 3, 3) in the
t0 ego frame (or every sample as `samples_xyz`/`samples_rot`) and `timings` (stage -> seconds);
`Engine.infer` is the real one."""


@dataclass(frozen=True)
class PreparedBag:
    """A bag that passed the scan: odometry, evaluation times, topic statistics and anomalies."""

    key: str
    info: BagInfo
    odometry: tuple[OdometrySample, ...]
    ticks: tuple[int, ...]
    anomalies: tuple[dict[str, Any], ...]
    note: str = ''
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    odometry_log_ns: tuple[int, ...] = ()
    damaged: str | None = None
    routes: tuple[RouteMessage, ...] = ()   # route texts at their recording times


@dataclass
class RunState:
    """What the loop reports back besides the stored records."""

    bags: list[PreparedBag] = field(default_factory=list)
    scored: int = 0          # samples scored by this process (the first one is the warm-up)
    interrupted: bool = False
    error: str | None = None
    traceback: str | None = None
    wall_s: dict[str, float] = field(default_factory=dict)
    """Wall seconds per phase of this run: 'samples' (the evaluation loop) and, for a sharded
    run, 'workers_start' (actors up, engines built); the bench separates start-up from rate."""


def evaluation_span_ns(cfg: ReplayConfig) -> tuple[int, int]:
    """How far before and after an evaluation time its inputs and ground truth reach (ns)."""
    a = cfg.assembly
    before = round((a.history_steps * a.history_dt_s + a.selectable_age_s) * _NS)
    return before, round(a.future_steps * a.history_dt_s * _NS)


def prepare_bag(path: Path | str, cfg: ReplayConfig) -> PreparedBag:
    """Open and scan one bag; a `BagError` names bag, topic and time when it cannot be used.

    Evaluation times run from the end of the history warm-up to the last time whose ground
    truth still covers the shortest horizon: samples near the end are scored at the horizons
    the recording covers.
    """
    path = Path(path)
    with BagReader(path, cfg.expected_topics()) as reader:
        info = reader.info()
        scan = scan_recording(reader, cfg)
        routes = read_routes(reader, cfg.navigation_topic)
    first, odometry = scan.first_stamp, scan.odometry
    a = cfg.assembly
    # One model step (0.1 s) of margin: t0 (the oldest newest frame) trails the evaluation time by
    # up to a camera period, and its history must still start after the first odometry.
    start = max(first[cfg.odometry_topic] + round(a.history_steps * a.history_dt_s * _NS),
                max(first[c.topic] for c in cfg.cameras)
                + round((max(a.frame_offsets_s) + a.history_dt_s) * _NS))
    end = odometry[-1].stamp_ns - round(HORIZONS_S[0] * _NS) if odometry else start - 1
    ticks = tuple(range(start, end + 1, cfg.period_ns)) if end >= start else ()
    note = ''
    if not ticks:
        span = ((odometry[-1].stamp_ns if odometry else start) - start) / _NS
        note = (f'no evaluation time: inputs span {span:.2f} s after the history warm-up, the '
                f'shortest scored horizon needs {HORIZONS_S[0]} s of ground truth')
        _LOG.warning('bag %r: %s', str(path), note)
    for e in scan.anomalies:
        _LOG.warning('bag %r, %s%s: %s %s', str(path), f'topic {e["topic"]!r}, ' if e['topic']
                     else '', format_time(e['start_ns']), e['kind'], e['detail'])
    return PreparedBag(str(path.resolve()), info, odometry, ticks, scan.anomalies, note,
                       scan.topics, scan.odometry_log_ns, scan.damaged, routes)


def read_routes(reader: BagReader, topic: str) -> tuple[RouteMessage, ...]:
    """Every route text of `topic` at its recording time (none: no topic, or '' given).

    Read whole before any evaluation (a few short strings): a window read from the middle of the
    bag (a Ray shard) still sees a route recorded once at its start.
    """
    msgtype = reader.msgtype(topic) if topic else None
    if msgtype is None:
        return ()
    if msgtype != STRING_TYPE:
        raise BagError(reader.path, f'has type {msgtype}, expected {STRING_TYPE} (the route text); '
                       'name the route topic with --navigation, or --no-navigation', topic=topic)
    return tuple(sorted((RouteMessage(str(m.msg.data), m.log_ns)
                         for m in reader.messages([topic])), key=lambda r: r.stamp_ns))


def window_start_log_ns(bag: PreparedBag, first_tick: int, cfg: ReplayConfig) -> int | None:
    """Return the recording time from which reading gives a tick its whole-bag inputs.

    Everything assembly selects for `first_tick` is stamped after `first_tick - before`; the
    recording time is taken from the odometry sample stamped just before that, less a second for
    messages recorded late. None: read from the start.
    """
    before, _ = evaluation_span_ns(cfg)
    i = bisect.bisect_right([s.stamp_ns for s in bag.odometry], first_tick - before - _NS) - 1
    if i <= 0 or len(bag.odometry_log_ns) != len(bag.odometry):
        return None
    return bag.odometry_log_ns[i] - _NS


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
    """One evaluation time -> one record (scored, or rejected with its reason); never raises.

    `warmup` marks the first planner call of a process (one-time costs); its latency is kept in
    the record but left out of the latency statistics. `pool` decodes the frames in parallel. An
    exception nobody expected is a rejection `unexpected_error` with its traceback, so one bad
    sample never ends a run.
    """
    try:
        return _evaluate(bag, tick, cameras, odometry, cfg, planner, planner_errors, warmup, pool)
    except Exception as err:  # noqa: BLE001 - the per-sample boundary; the record keeps the trace
        _LOG.error('bag %r %s: unexpected %s: %s', bag.key, format_time(tick),
                   type(err).__name__, err)
        rec = _rejected(bag.key, tick, 'unexpected_error', f'{type(err).__name__}: {err}')
        rec['traceback'] = traceback.format_exc()
        return rec


def _evaluate(bag: PreparedBag, tick: int, cameras: dict[int, list[Any]],
              odometry: Sequence[OdometrySample], cfg: ReplayConfig, planner: Planner,
              planner_errors: tuple[type[Exception], ...], warmup: bool,
              pool: Executor | None) -> dict[str, Any]:
    t_start = time.perf_counter()
    try:
        model_input = assemble(cameras, odometry, cfg.assembly, now_ns=tick, pool=pool)
    except InputError as err:
        return _rejected(bag.key, tick, err.reason, err.message)
    except Image.DecompressionBombError as err:
        return _rejected(bag.key, tick, 'image_too_large', f'a frame does not decode: {err}')
    except Exception as err:  # noqa: BLE001 - a decoder failing in a way assembly did not name
        rec = _rejected(bag.key, tick, 'image_decode_failed', f'{type(err).__name__}: {err}')
        rec['traceback'] = traceback.format_exc()
        return rec
    route = choose_route(latest_before(bag.routes, tick), tick, cfg.navigation_max_age_s)
    if route.text is not None:
        model_input = dataclasses.replace(model_input, nav_text=route.text)
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
        'horizons_s': list(scored_horizons(gt.steps)), 'gt_steps': gt.steps,
        'gt_limit': gt.limit, 'gt_limit_message': gt.limit_message,
        'pred_xyz': xyz.tolist(), 'pred_yaw': yaw.tolist(),
        'gt_xyz': gt.xyz.tolist(), 'gt_yaw': gt.yaw.tolist(),
        'coc_text': getattr(result, 'coc_text', None),
        'decode_tokens': getattr(result, 'decode_tokens', None),
        'route_text': route.text, 'route_state': route.state,
        'route_age_s': None if math.isnan(route.age_s) else route.age_s,
        'guided': getattr(result, 'guided', False),
    }


class BagStream:
    """One bag read in recording order into the node's buffers, evaluated tick by tick.

    Evaluation time T fires once the first message stamped after T has been pushed, as in a
    whole-bag read; the stream then pauses, so later times of the same bag continue from there
    with the very buffers a whole-bag read has (a Ray actor replays consecutive shards this way
    without reading their windows again). `start_log_ns` starts reading at a window
    (`window_start_log_ns` of the first time to evaluate); None reads from the start.
    """

    def __init__(self, bag: PreparedBag, cfg: ReplayConfig, start_log_ns: int | None = None
                 ) -> None:
        """Open the bag at `start_log_ns`; close with `close()` or use as a context manager."""
        self.bag, self.cfg = bag, cfg
        self.start_log_ns = start_log_ns
        self.position_log_ns = -1 if start_log_ns is None else start_log_ns
        self.last_tick: int | None = None
        self._cams = {c.topic: (c.slot, StampedBuffer(cfg.camera_depth)) for c in cfg.cameras}
        self._odom: StampedBuffer[OdometrySample] = StampedBuffer(cfg.odometry_depth)
        self._last_stamp: int | None = None
        self._ended = False
        self._stack = ExitStack()
        try:
            reader = self._stack.enter_context(BagReader(bag.info.path, cfg.expected_topics()))
            self._pool = self._stack.enter_context(ThreadPoolExecutor(
                cfg.decode_threads, thread_name_prefix='replay-decode')) \
                if cfg.decode_threads > 1 else None
            self._messages = reader.messages(list(cfg.expected_topics()), start_log_ns)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> BagStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the bag and the decoding threads."""
        self._messages.close()
        self._stack.close()

    def continues_to(self, bag: PreparedBag, cfg: ReplayConfig, first_tick: int) -> bool:
        """Whether evaluating `first_tick` here reads no more than a fresh window would."""
        if bag.key != self.bag.key or cfg != self.cfg or \
                (self.last_tick is not None and first_tick <= self.last_tick):
            return False
        start = window_start_log_ns(bag, first_tick, cfg)
        return start is None or start <= self.position_log_ns

    def evaluate(self, ticks: Sequence[int], planner: Planner, store: Any, bar: Any,
                 state: RunState, planner_errors: tuple[type[Exception], ...] = ()) -> None:
        """Evaluate ascending `ticks` (after any evaluated before) into `store`, one record each."""
        for tick in ticks:
            while not self._ended and (self._last_stamp is None or tick >= self._last_stamp):
                self._read_one()
            snapshot = {slot: buf.snapshot() for slot, buf in self._cams.values()}
            record = evaluate_tick(self.bag, tick, snapshot, self._odom.snapshot(), self.cfg,
                                   planner, planner_errors, warmup=state.scored == 0,
                                   pool=self._pool)
            store.append(record)
            state.scored += record['status'] == 'ok'
            if record['status'] != 'ok':
                _LOG.debug('bag %r %s rejected: %s', self.bag.key, format_time(tick),
                           record['message'])
            bar.update(1)
            self.last_tick = tick

    def _read_one(self) -> None:
        try:
            m = next(self._messages, None)
        except BagError:
            if self.bag.damaged is None:
                raise
            m = None   # the scan found this damage: later ticks use what was read before it
        if m is None:
            self._ended = True
            return
        self.position_log_ns = m.log_ns
        if m.topic == self.cfg.odometry_topic:
            item: Any = odometry_from_msg(m.msg)
            self._odom.push(item)
        else:
            item = image_from_msg(m.msg)
            self._cams[m.topic][1].push(item)
        self._last_stamp = item.stamp_ns


def replay_bag(bag: PreparedBag, cfg: ReplayConfig, planner: Planner, store: Any,
               bar: Any, state: RunState, planner_errors: tuple[type[Exception], ...] = (),
               ticks: Sequence[int] | None = None) -> None:
    """Stream one scanned bag through the node's buffers and store a record per evaluation time.

    `ticks` (default: every evaluation time of the bag) restricts the run to some times; reading
    then starts at the window that gives the first of them the inputs a whole-bag read gives it.
    `store` needs `done()` and `append(record)`; `bar` needs `update(n)`.
    """
    done = store.done()
    todo = [t for t in (bag.ticks if ticks is None else ticks) if (bag.key, t) not in done]
    if not todo:
        return
    start_log_ns = None if ticks is None else window_start_log_ns(bag, todo[0], cfg)
    with BagStream(bag, cfg, start_log_ns) as stream:
        stream.evaluate(todo, planner, store, bar, state, planner_errors)


def run_replay(bags: Sequence[PreparedBag], cfg: ReplayConfig, planner: Planner,
               store: SampleStore, *, progress: bool = True,
               planner_errors: tuple[type[Exception], ...] = ()) -> RunState:
    """Replay scanned bags into `store`; Ctrl-C, a damaged bag or a failure stop it, samples kept.

    Never raises for those: the state says `interrupted` or carries the error text (and a
    failure's traceback), so the caller still writes the report of what is done.
    """
    state = RunState(bags=list(bags))
    total = sum(len(b.ticks) for b in state.bags)
    done = store.done()
    initial = sum(1 for b in state.bags for t in b.ticks if (b.key, t) in done)
    with tqdm(total=total, initial=initial, unit='sample', file=sys.stderr, disable=not progress,
              dynamic_ncols=True) as bar:
        started = time.perf_counter()
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
        except Exception as err:  # noqa: BLE001 - the run's boundary: the report is still written
            state.error = f'{type(err).__name__}: {err}'
            state.traceback = traceback.format_exc()
            _LOG.error('replay failed: %s\n%s', state.error, state.traceback)
        finally:
            state.wall_s['samples'] = time.perf_counter() - started
    return state
