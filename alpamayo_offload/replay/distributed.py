"""Replay sharded over Ray actors: one engine per actor, one sample store, one report.

The driver scans the bags (as the serial replay does), cuts every bag's evaluation times not yet
in the sample store into shards of consecutive times, and hands shards to actors as they become
free, each actor first on a lane of consecutive shards. Each actor holds one engine (`num_gpus=1`
on CUDA, one CPU otherwise), reads the bag where it lies (a path every node sees) from its
shard's time window on, keeping the stream open into the next consecutive shard, and returns the
records; the driver appends them to `samples.jsonl`, so a run stopped at any point resumes with
`--resume`. A shard whose actor dies is handed to another actor (a fresh one replaces the dead),
and the report is built from the records in replay order: on the CPU it equals the serial run's
bit for bit (the measured latencies aside). Ray is an optional extra; it is imported only here.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from alpamayo_offload.engine import EngineConfig
from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.errors import ReplayConfigError
from alpamayo_offload.replay.loop import (
    BagStream,
    Planner,
    PreparedBag,
    RunState,
    window_start_log_ns,
)
from alpamayo_offload.replay.sample_store import SampleStore
from alpamayo_offload.replay.session import (
    ResultBagOptions,
    SessionResult,
    fingerprint,
    finish_session,
)

_LOG = logging.getLogger(__name__)

RAY_MISSING = ("replay --ray needs Ray, an optional extra: pip install -e '.[ray]' (or "
               "pip install 'ray>=2.9') on every machine of the cluster")
SHARDS_PER_WORKER = 4     # enough shards to balance actors of unequal speed
WORKER_NICENESS_ENV = 'RAY_worker_niceness'


def start_local_cluster(ray: Any, **options: Any) -> None:
    """Start a local Ray cluster (no dashboard) whose workers run at normal CPU priority.

    Ray starts its workers at niceness 15 unless `RAY_worker_niceness` says otherwise; on a host
    shared with other processes the actors' engines then get less CPU than a serial replay. A
    value already in the environment is kept. `options` go to `ray.init`.
    """
    os.environ.setdefault(WORKER_NICENESS_ENV, '0')
    ray.init(include_dashboard=False, **options)


def import_ray() -> Any:
    """Return the `ray` module, or raise `ReplayConfigError` saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ReplayConfigError(RAY_MISSING) from err
    return ray


PlannerFactory = Callable[[], tuple[Planner, Mapping[str, Any], Any, tuple[type[Exception], ...]]]
"""Builds, inside an actor: (planner, model info, image sizing or None, planner error types)."""


@dataclass(frozen=True)
class EngineFactory:
    """Builds the engine as the serial replay does: the app loader, budget and plan fallbacks.

    `threads` sets torch's CPU threads, so CPU actors compute as the serial run did.
    """

    engine: EngineConfig
    threads: int | None = None
    vram_budget: str = ''
    plan_info: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> tuple[Planner, Mapping[str, Any], Any, tuple[type[Exception], ...]]:
        """Build the engine; returns its infer, info, image sizing and error type."""
        from alpamayo_offload.app.engine_loader import load_engine
        from alpamayo_offload.engine import EngineError

        loaded = load_engine(self.engine, self.vram_budget, self.plan_info,
                             torch_threads=self.threads or 0)
        engine = loaded.engine
        info = {**engine.info.as_dict(), 'start': loaded.report}
        return engine.infer, info, engine.image_sizing, (EngineError,)


@dataclass(frozen=True)
class Shard:
    """Consecutive evaluation times of one bag."""

    bag: int
    ticks: tuple[int, ...]


def make_shards(bags: Sequence[PreparedBag], done: set[tuple[str, int]], count: int
                ) -> list[Shard]:
    """Cut the evaluation times not done into about `count` shards of consecutive times."""
    todo = [(i, t) for i, b in enumerate(bags) for t in b.ticks if (b.key, t) not in done]
    size = max(1, math.ceil(len(todo) / max(count, 1)))
    shards: list[Shard] = []
    for i in range(len(bags)):
        mine = [t for j, t in todo if j == i]
        shards += [Shard(i, tuple(mine[k:k + size])) for k in range(0, len(mine), size)]
    return shards


def next_shard(pending: deque[Shard], follows: Shard | None, lanes: Sequence[Shard]) -> Shard:
    """Take the shard an actor replays next from `pending`.

    `follows` (the shard after the actor's last one) continues its open bag stream; an actor
    without one starts the first of `lanes` (shards spread evenly over the run, so that each
    actor then follows on through consecutive shards) still pending; else the first pending.
    """
    for shard in ([follows] if follows else []) + list(lanes):
        if shard in pending:
            pending.remove(shard)
            return shard
    return pending.popleft()


class _Collect:
    """The store an actor's bag stream writes to: records kept for the driver."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def done(self) -> set[tuple[str, int]]:
        return set()

    def append(self, record: Mapping[str, Any]) -> None:
        self.records.append(dict(record))


class _NoBar:
    def update(self, n: int) -> None:
        """Progress is shown by the driver."""


class ShardWorker:
    """An actor's state: one planner, built once; replays shards on request.

    The bag stream stays open after a shard, so a following shard of the same bag continues
    reading where it stopped instead of reading its window again.
    """

    def __init__(self, factory: PlannerFactory) -> None:
        """Build the planner (the engine) in this process."""
        self.planner, self.info, self.sizing, self.errors = factory()
        self.scored = 0
        self.stream: BagStream | None = None

    def describe(self) -> tuple[dict[str, Any], Any]:
        """Model info and image sizing, for the driver's configuration and report."""
        return dict(self.info), self.sizing

    def run(self, bag: PreparedBag, ticks: tuple[int, ...], cfg: ReplayConfig
            ) -> list[dict[str, Any]]:
        """Replay `ticks` of `bag` and return the records.

        The open stream continues when these times follow it; otherwise the bag is read anew
        from the window of the first time.
        """
        if self.stream is not None and not self.stream.continues_to(bag, cfg, ticks[0]):
            self.stream.close()
            self.stream = None
        if self.stream is None:
            self.stream = BagStream(bag, cfg, window_start_log_ns(bag, ticks[0], cfg))
        store = _Collect()
        state = RunState(bags=[bag], scored=self.scored)
        try:
            self.stream.evaluate(ticks, self.planner, store, _NoBar(), state, self.errors)
        except BaseException:
            self.stream.close()
            self.stream = None
            raise
        self.scored = state.scored
        return store.records


def run_sharded(bags: Sequence[PreparedBag], cfg: ReplayConfig, factory: PlannerFactory,
                out_dir: Path, *, workers: int, resume: bool = False, progress: bool = True,
                result_bag: ResultBagOptions | None = None, bev_count: int = 4,
                on_gpu: bool = False) -> SessionResult:
    """Replay `bags` on `workers` actors of the connected Ray cluster; write the report.

    The report is written on every exit path, as in the serial replay.
    """
    ray = import_ray()
    options = {'num_gpus': 1} if on_gpu else {'num_cpus': 1}
    actor_cls = ray.remote(**options)(ShardWorker)
    started = time.perf_counter()
    actors = [actor_cls.remote(factory) for _ in range(workers)]
    described = ray.get([a.describe.remote() for a in actors])   # every engine is built
    info, sizing = described[0]
    cfg = cfg.with_model_sizing(sizing)
    state = RunState(bags=list(bags))
    state.wall_s['workers_start'] = time.perf_counter() - started
    with SampleStore.open(out_dir, fingerprint(cfg, bags), resume=resume) as store:
        started = time.perf_counter()
        try:
            _drive(ray, actors, actor_cls, factory, bags, cfg, store, state, progress)
        except KeyboardInterrupt:
            state.interrupted = True
            _LOG.warning('interrupted: %d samples are stored in %s; rerun with --resume',
                         len(store.persisted()), store.path)
        except Exception as err:  # noqa: BLE001 - the run's boundary: the report is still written
            state.error = f'{type(err).__name__}: {err}'
            state.traceback = traceback.format_exc()
            _LOG.error('sharded replay failed: %s', state.error)
        finally:
            state.wall_s['samples'] = time.perf_counter() - started
            for actor in actors:
                ray.kill(actor)
        records = store.persisted()
    return finish_session(bags, cfg, out_dir, records, state, model_info=info,
                          result_bag=result_bag, bev_count=bev_count)


def _drive(ray: Any, actors: list[Any], actor_cls: Any, factory: PlannerFactory,
           bags: Sequence[PreparedBag], cfg: ReplayConfig, store: SampleStore, state: RunState,
           progress: bool) -> None:
    """Hand shards to free actors until all are stored; re-run a dead actor's shard elsewhere."""
    done = store.done()
    shards = make_shards(bags, done, len(actors) * SHARDS_PER_WORKER)
    pending = deque(shards)
    lanes = [shards[i * len(shards) // len(actors)] for i in range(len(actors))] if shards else []
    successor = {a: b for a, b in zip(shards, shards[1:], strict=False) if a.bag == b.bag}
    bag_refs = [ray.put(b) for b in bags]
    cfg_ref = ray.put(cfg)
    idle: list[tuple[Any, Shard | None]] = [(a, None) for a in actors]
    running: dict[Any, tuple[Any, Shard]] = {}
    replacements = 2 * len(actors)    # a shard that kills every actor must not loop forever
    total = sum(len(b.ticks) for b in bags)
    with tqdm(total=total, initial=len(done & {(b.key, t) for b in bags for t in b.ticks}),
              unit='sample', file=sys.stderr, disable=not progress, dynamic_ncols=True) as bar:
        while pending or running:
            while idle and pending:
                actor, last = idle.pop(0)
                shard = next_shard(pending, successor.get(last) if last else None, lanes)
                ref = actor.run.remote(bag_refs[shard.bag], shard.ticks, cfg_ref)
                running[ref] = (actor, shard)
            ready, _ = ray.wait(list(running), num_returns=1)
            actor, shard = running.pop(ready[0])
            try:
                records = ray.get(ready[0])
            except ray.exceptions.RayActorError as err:
                if replacements == 0:
                    raise
                replacements -= 1
                _LOG.warning('a replay worker died (%s); its %d samples of %s run on another',
                             type(err).__name__, len(shard.ticks), Path(bags[shard.bag].key).name)
                pending.appendleft(shard)
                actors.remove(actor)
                fresh = actor_cls.remote(factory)
                actors.append(fresh)
                idle.append((fresh, None))
                continue
            for record in records:
                store.append(record)
            bar.update(len(records))
            idle.append((actor, shard))


def run_distributed_command(args: argparse.Namespace, cfg: ReplayConfig,
                            bags: Sequence[PreparedBag]) -> int:
    """`replay --ray`: connect (or start a local cluster), shard, report; the exit status."""
    from alpamayo_offload.replay.errors import ReplayError

    try:
        ray = import_ray()
    except ReplayError as err:
        _LOG.error('%s', err)
        return 2
    if not ray.is_initialized():
        if args.ray == 'local':
            start_local_cluster(ray)
        else:
            ray.init(address=args.ray)
    on_gpu = cfg.engine.device.startswith('cuda')
    gpus = int(ray.cluster_resources().get('GPU', 0))
    workers = args.workers or (gpus if on_gpu and gpus else 2)
    threads = None if on_gpu else _torch_threads()
    try:
        result = run_sharded(bags, cfg, EngineFactory(cfg.engine, threads, cfg.vram_budget,
                                                       dict(cfg.plan_info)), args.out,
                             workers=workers, resume=args.resume, progress=not args.no_progress,
                             result_bag=ResultBagOptions(storage=args.result_storage)
                             if args.result_bag else None, bev_count=args.bev_plots,
                             on_gpu=on_gpu)
    except ReplayError as err:
        _LOG.error('%s', err)
        return 2
    return result.exit_code


def _torch_threads() -> int:
    """Return torch's CPU thread count in this process (what a serial run would use)."""
    import torch

    return torch.get_num_threads()
