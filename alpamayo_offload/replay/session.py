"""One replay from bags to report directory; the CLI, the bench and the tests go through here."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.loop import Planner, PreparedBag, RunState, prepare_bag, run_replay
from alpamayo_offload.replay.report import write_report
from alpamayo_offload.replay.result_bag import write_result_bag
from alpamayo_offload.replay.sample_store import SampleStore

_LOG = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_BAG_ERROR, EXIT_NOTHING_SCORED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


@dataclass(frozen=True)
class ResultBagOptions:
    """Where the predicted paths and diagnostics go (one result bag per input bag)."""

    path_topic: str = '/alpamayo_offload/replay/path'
    diagnostics_topic: str = '/alpamayo_offload/replay/diagnostics'
    storage: str = 'mcap'

    def __post_init__(self) -> None:
        if self.storage not in ('mcap', 'sqlite3'):
            raise ValueError(f"storage {self.storage!r} must be 'mcap' or 'sqlite3'")
        if not (self.path_topic.startswith('/') and self.diagnostics_topic.startswith('/')) or \
                self.path_topic == self.diagnostics_topic:
            raise ValueError(f'result topics {self.path_topic!r}, {self.diagnostics_topic!r} must '
                             'be two different absolute names')


@dataclass(frozen=True)
class SessionResult:
    """Outcome of a replay: loop state, the metrics document, and the process exit status."""

    state: RunState
    metrics: dict[str, Any]
    exit_code: int


def fingerprint(cfg: ReplayConfig, bags: Sequence[PreparedBag]) -> dict[str, Any]:
    """Describe what must be equal for `--resume` to continue a run: configuration and bags.

    Decode threads are left out: they change how fast frames are decoded, not the pixels. So is
    the model's frame sizing, which follows from the model named in the configuration: the check
    runs before the engine loads (a mismatch fails in seconds) and equals the one after.
    """
    config = cfg.to_json()
    del config['decode_threads']
    del config['assembly']['model_sizing']
    return {'config': config,
            'bags': [{'key': b.key, 'start_ns': b.info.start_ns, 'end_ns': b.info.end_ns,
                      'message_counts': b.info.message_counts} for b in bags]}


def prepare(bag_paths: Sequence[Path | str], cfg: ReplayConfig) -> list[PreparedBag]:
    """Scan every bag before any inference, so a bad bag fails in seconds, not after hours."""
    return [prepare_bag(p, cfg) for p in bag_paths]


def replay_session(bags: Sequence[PreparedBag], cfg: ReplayConfig, planner: Planner,
                   out_dir: Path, *, model_info: Mapping[str, Any], resume: bool = False,
                   progress: bool = True, result_bag: ResultBagOptions | None = None,
                   planner_errors: tuple[type[Exception], ...] = (), bev_count: int = 4
                   ) -> SessionResult:
    """Replay into `out_dir/samples.jsonl`, then write the report (also after Ctrl-C or errors).

    Exit status: 0 when something was scored, 3 when a finished run scored nothing at any
    horizon (the reasons are logged), 2 after a bag error, 1 after a failure, 130 on Ctrl-C.
    """
    with SampleStore.open(out_dir, fingerprint(cfg, bags), resume=resume) as store:
        state = run_replay(bags, cfg, planner, store, progress=progress,
                           planner_errors=planner_errors)
        records = store.persisted()
    return finish_session(bags, cfg, out_dir, records, state, model_info=model_info,
                          result_bag=result_bag, bev_count=bev_count)


def finish_session(bags: Sequence[PreparedBag], cfg: ReplayConfig, out_dir: Path,
                   records: Sequence[Mapping[str, Any]], state: RunState, *,
                   model_info: Mapping[str, Any], result_bag: ResultBagOptions | None = None,
                   bev_count: int = 4) -> SessionResult:
    """Write the report (and result bags) of finished records and pick the exit status."""
    doc = write_report(out_dir, records, state, cfg, model_info, bev_count=bev_count)
    if result_bag is not None:
        for i, bag in enumerate(bags):
            target = out_dir / 'result_bags' / f'{i:02d}_{Path(bag.info.path).name}'
            if target.exists():  # rosbags never overwrites; this is our own earlier output
                shutil.rmtree(target)
            n = write_result_bag(target, (r for r in records if r['bag'] == bag.key),
                                 frame_id=cfg.output_frame_id, path_topic=result_bag.path_topic,
                                 diagnostics_topic=result_bag.diagnostics_topic,
                                 storage=result_bag.storage)
            _LOG.info('result bag %s: %d messages', target, n)
    c = doc['counts']
    _LOG.info('%d scored, %d rejected of %d evaluation times; report in %s', c['scored'],
              c['rejected'], c['evaluation_times'], out_dir)
    if state.interrupted:
        code = EXIT_INTERRUPTED
    elif state.error:
        code = EXIT_FAILED if state.traceback else EXIT_BAG_ERROR
    elif c['scored'] == 0:
        code = EXIT_NOTHING_SCORED
        reasons = ', '.join(f'{k}: {v}' for k, v in c['by_reason'].items())
        notes = '; '.join(b.note for b in bags if b.note)
        _LOG.error('nothing was scored at any horizon (%s); see %s', '; '.join(
            x for x in (reasons and f'rejections {reasons}', notes) if x) or 'no evaluation time',
            out_dir / 'report.md')
    else:
        code = EXIT_OK
    return SessionResult(state, doc, code)

