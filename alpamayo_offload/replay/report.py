"""Report directory: `metrics.json` (versioned schema), `report.md`, PNG plots.

The `DETERMINISTIC_KEYS` of `metrics.json` are a pure function of bags, configuration and model
weights, so two runs on one machine compare equal there; `latency_ms`, `machine` and `model` (it
holds measured memory) are measurements. `anomalies` lists what the pass over each recording
found, each with the evaluation times whose inputs or ground truth it touches.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from alpamayo_offload import __version__
from alpamayo_offload.replay.config import ReplayConfig
from alpamayo_offload.replay.errors import format_time
from alpamayo_offload.replay.loop import PreparedBag, RunState, evaluation_span_ns
from alpamayo_offload.replay.metrics import HORIZONS_S, aggregate
from alpamayo_offload.replay.plots import (
    horizon_errors,
    pick_evenly,
    plot_bev,
    plot_error_vs_horizon,
    plot_latency,
)

SCHEMA = 'alpamayo_offload.replay.metrics'
SCHEMA_VERSION = 2
DETERMINISTIC_KEYS = ('schema', 'schema_version', 'complete', 'config', 'plan', 'bags',
                      'counts', 'accuracy', 'error_by_horizon_m', 'samples', 'rejected',
                      'anomalies')
_LOG = logging.getLogger(__name__)


def machine_info() -> dict[str, Any]:
    """Host, Python and accelerator description for the report."""
    info: dict[str, Any] = {'host': platform.node(), 'platform': platform.platform(),
                            'python': sys.version.split()[0], 'cpu_count': os.cpu_count()}
    torch = sys.modules.get('torch')  # only describe torch if the planner loaded it
    if torch is not None:
        info['torch'] = torch.__version__
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info['gpu'] = {'name': props.name, 'memory_bytes': int(props.total_memory),
                           'cuda': torch.version.cuda}
    return info


def ordered_records(records: Sequence[Mapping[str, Any]], bags: Sequence[PreparedBag]
                    ) -> list[Mapping[str, Any]]:
    """Sort records in replay order (bag order, then time), whatever order resumes wrote."""
    rank = {b.key: i for i, b in enumerate(bags)}
    return sorted(records, key=lambda r: (rank.get(r['bag'], len(rank)), r['tick_ns']))


def _horizon_key(h: float) -> str:
    return f'{h:.1f}'


def anomalies_with_samples(recs: Sequence[Mapping[str, Any]], bags: Sequence[PreparedBag],
                           cfg: ReplayConfig) -> list[dict[str, Any]]:
    """Every bag's anomalies, each with the evaluation times whose span it overlaps.

    A sample's span runs from its history (and the oldest selectable frame) to the end of its
    ground truth; how each affected sample ended is counted (scored, or its rejection reason).
    """
    before, after = evaluation_span_ns(cfg)
    out = []
    for b in bags:
        mine = [r for r in recs if r['bag'] == b.key]
        for e in b.anomalies:
            hit = [r for r in mine if r['tick_ns'] - before <= e['end_ns']
                   and r['tick_ns'] + after >= e['start_ns']]
            outcome = Counter('scored' if r['status'] == 'ok' else str(r['reason']) for r in hit)
            out.append({'bag': b.key, **e,
                        'affected': {'samples': len(hit), 'outcome': dict(sorted(outcome.items())),
                                     'ticks_ns': [r['tick_ns'] for r in hit]}})
    return out


def build_metrics(records: Sequence[Mapping[str, Any]], state: RunState, cfg: ReplayConfig,
                  model_info: Mapping[str, Any]) -> dict[str, Any]:
    """Build the `metrics.json` document."""
    recs = ordered_records(records, state.bags)
    ok = [r for r in recs if r['status'] == 'ok']
    rejected = [r for r in recs if r['status'] != 'ok']
    planned = sum(len(b.ticks) for b in state.bags)
    bags = []
    for b in state.bags:
        mine = [r for r in recs if r['bag'] == b.key]
        bags.append({
            'path': b.info.path, 'storage': b.info.storage, 'duration_s': b.info.duration_s,
            'start_ns': b.info.start_ns, 'message_counts': b.info.message_counts,
            'topics': b.topics, 'recovered': b.info.recovered, 'damaged': b.damaged,
            'evaluation_times': len(b.ticks), 'scored': sum(r['status'] == 'ok' for r in mine),
            'rejected': sum(r['status'] != 'ok' for r in mine), 'anomalies': len(b.anomalies),
            'note': b.note})
    warm = [r for r in ok if not r.get('warmup')] or ok   # warm-up excluded when others exist
    latency = aggregate({k: v * 1e3 for k, v in r['latency_s'].items()} for r in warm)
    by_horizon = {_horizon_key(h): sum(h in r.get('horizons_s', HORIZONS_S) for r in ok)
                  for h in HORIZONS_S}
    return {
        'schema': SCHEMA, 'schema_version': SCHEMA_VERSION, 'package_version': __version__,
        'complete': len(recs) == planned and not state.interrupted and state.error is None,
        'interrupted': state.interrupted, 'error': state.error,
        'error_traceback': state.traceback,
        'config': cfg.to_json(), 'model': dict(model_info), 'plan': dict(cfg.plan_info),
        'machine': machine_info(), 'bags': bags,
        'counts': {'evaluation_times': planned, 'done': len(recs), 'scored': len(ok),
                   'rejected': len(rejected), 'scored_by_horizon_s': by_horizon,
                   'partial_horizons': sum(r.get('gt_steps', 64) < 64 for r in ok),
                   'by_reason': dict(sorted(Counter(r['reason'] for r in rejected).items()))},
        'accuracy': aggregate(r['metrics'] for r in ok),
        'error_by_horizon_m': horizon_errors(ok),
        'latency_ms': latency,
        'anomalies': anomalies_with_samples(recs, state.bags, cfg),
        'samples': [{'bag': r['bag'], 'tick_ns': r['tick_ns'], 't0_ns': r['t0_ns'],
                     'horizons_s': r.get('horizons_s', list(HORIZONS_S)),
                     'gt_limit': r.get('gt_limit'), 'metrics': r['metrics']} for r in ok],
        'rejected': [{'bag': r['bag'], 'tick_ns': r['tick_ns'], 't0_ns': r['t0_ns'],
                      'reason': r['reason'], 'message': r['message'],
                      **({'traceback': r['traceback']} if r.get('traceback') else {})}
                     for r in rejected],
    }


def _fmt(v: Any, digits: int = 3) -> str:
    return '–' if v is None else f'{v:.{digits}f}' if isinstance(v, float) else str(v)


def _stats_table(stats: Mapping[str, Mapping[str, Any]], unit: str) -> list[str]:
    lines = [f'| {unit} | n | mean | median | p90 | max |', '|---|---:|---:|---:|---:|---:|']
    for key, s in stats.items():
        lines.append(f"| `{key}` | {s['count']} | {_fmt(s['mean'])} | {_fmt(s['median'])} | "
                     f"{_fmt(s['p90'])} | {_fmt(s['max'])} |")
    return lines


def _plan_line(doc: Mapping[str, Any]) -> list[str]:
    """Put the planner's predicted latency next to the measured one (when a plan was given)."""
    predicted = doc['plan'].get('plan.predicted_latency_s')
    total = doc['latency_ms'].get('total', {}).get('median')
    if not predicted or total is None:
        return []
    line = (f'Plan predicted {predicted:.3f} s per inference; measured median total '
            f'{total / 1e3:.3f} s ({(total / 1e3 - predicted) / predicted:+.1%}).')
    cpu = doc['plan'].get('plan.cpu_sensitive_phases')
    if cpu:
        line += f' Phases whose latency follows the CPU (varies with host load): {cpu}.'
    return [line, '']


def render_markdown(doc: Mapping[str, Any], plots: Sequence[str]) -> str:
    """`report.md`: tables for counts, accuracy, latency, rejections, configuration, machine."""
    c = doc['counts']
    state = 'complete' if doc['complete'] else \
        'INTERRUPTED (rerun with --resume)' if doc['interrupted'] else \
        f"STOPPED: {doc['error']}" if doc['error'] else 'partial'
    horizons = ', '.join(f'{h} s: {n}' for h, n in c['scored_by_horizon_s'].items())
    out = ['# Replay evaluation', '',
           f"Run: **{state}**. {c['scored']} scored, {c['rejected']} rejected of "
           f"{c['evaluation_times']} evaluation times ({c['done']} done). Samples scored per "
           f"horizon: {horizons} ({c['partial_horizons']} with partial horizons).", '']
    if doc.get('error_traceback'):
        out += ['```text', doc['error_traceback'].rstrip(), '```', '']
    out += ['## Bags', '', '| bag | storage | duration (s) | evaluation times | scored | '
            'rejected | anomalies | note |', '|---|---|---:|---:|---:|---:|---:|---|']
    for b in doc['bags']:
        note = '; '.join(x for x in (b['note'], b['recovered'] or '', b['damaged'] or '') if x)
        out.append(f"| `{b['path']}` | {b['storage']} | {b['duration_s']:.2f} | "
                   f"{b['evaluation_times']} | {b['scored']} | {b['rejected']} | "
                   f"{b['anomalies']} | {note or '–'} |")
    out += ['', '| bag | topic | messages | rate (Hz) | first | last | image |',
            '|---|---|---:|---:|---|---|---|']
    for b in doc['bags']:
        for topic, t in b['topics'].items():
            out.append(f"| `{Path(b['path']).name}` | `{topic}` | {t['count']} | "
                       f"{_fmt(t['rate_hz'], 2)} | {format_time(t['first_ns'])} | "
                       f"{format_time(t['last_ns'])} | {t.get('image', '')} |")
    out += ['', '## Anomalies', '']
    if doc['anomalies']:
        out += ['| bag | kind | topic | from | to | count | detail | samples affected |',
                '|---|---|---|---|---|---:|---|---|']
        for a in doc['anomalies'][:200]:
            hit = a['affected']
            outcome = ', '.join(f'{k} {v}' for k, v in hit['outcome'].items())
            out.append(f"| `{Path(a['bag']).name}` | {a['kind']} | `{a['topic'] or '–'}` | "
                       f"{format_time(a['start_ns'])} | {format_time(a['end_ns'])} | "
                       f"{a['count']} | {str(a['detail']).replace('|', '/')} | "
                       f"{hit['samples']}{f' ({outcome})' if outcome else ''} |")
        if len(doc['anomalies']) > 200:
            out.append(f"| … | | | | | | {len(doc['anomalies']) - 200} more in metrics.json | |")
    else:
        out.append('None.')
    out += ['', '## Accuracy (metres; heading in degrees; XY, t0 ego frame)', '',
            'minADE/minFDE over trajectory samples as in Alpamayo\'s evaluation; `ade`/`fde` '
            'are sample 0; lateral/longitudinal/heading errors use the minADE sample. A sample '
            'counts at every horizon its ground truth covers (`n` per row).', '',
            *_stats_table(doc['accuracy'], 'metric'),
            '', '## Latency per stage (ms)', '',
            'First inference of each process (warm-up) excluded; `planner_call` is the whole '
            'engine call as seen by replay.', '', *_stats_table(doc['latency_ms'], 'stage'), '',
            *_plan_line(doc),
            '## Rejected evaluation times', '']
    if c['by_reason']:
        out += ['| reason | count |', '|---|---:|']
        out += [f'| `{k}` | {v} |' for k, v in c['by_reason'].items()]
        out += ['', '| bag | time | reason | message |', '|---|---|---|---|']
        for r in doc['rejected'][:100]:
            msg = str(r['message']).replace('|', '/')
            out.append(f"| `{Path(r['bag']).name}` | {format_time(r['tick_ns'])} | "
                       f"`{r['reason']}` | {msg} |")
        if len(doc['rejected']) > 100:
            out.append(f"| … | | | {len(doc['rejected']) - 100} more in metrics.json |")
    else:
        out.append('None.')
    cfg = doc['config']
    out += ['', '## Configuration', '', '| camera slot | topic | transport |', '|---:|---|---|']
    out += [f"| {cam['slot']} | `{cam['topic']}` | "
            f"{'compressed' if cam['compressed'] else 'raw'} |" for cam in cfg['cameras']]
    out += ['', f"Odometry `{cfg['odometry_topic']}`; evaluation rate {cfg['rate_hz']} Hz; "
            f"output frame `{cfg['output_frame_id']}`.", '', '```json',
            json.dumps({'assembly': cfg['assembly'], 'engine': cfg['engine']}, indent=1), '```',
            '', '## Model and plan', '', '```json',
            json.dumps({'model': doc['model'], 'plan': doc['plan']}, indent=1, default=str),
            '```', '', '## Machine', '', '```json', json.dumps(doc['machine'], indent=1), '```']
    if plots:
        out += ['', '## Plots', '']
        out += [f'![{p}]({p})' for p in plots]
    return '\n'.join(out) + '\n'


def write_report(out_dir: Path, records: Sequence[Mapping[str, Any]], state: RunState,
                 cfg: ReplayConfig, model_info: Mapping[str, Any], *, bev_count: int = 4
                 ) -> dict[str, Any]:
    """Write metrics.json, report.md and the plots into `out_dir`; returns the metrics document.

    metrics.json and report.md are written before any plot, so a failing plot costs only itself.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = build_metrics(records, state, cfg, model_info)
    tmp = out_dir / 'metrics.json.tmp'
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False, default=_json_default) + '\n')
    tmp.replace(out_dir / 'metrics.json')
    (out_dir / 'report.md').write_text(render_markdown(doc, []))
    ok = [r for r in ordered_records(records, state.bags) if r['status'] == 'ok']
    plots: list[str] = []
    try:
        for i, rec in enumerate(pick_evenly(ok, bev_count)):
            plots.append(plot_bev(rec, out_dir / f'bev_{i}.png').name)
        if ok:
            plots.append(plot_error_vs_horizon(doc['error_by_horizon_m'],
                                               out_dir / 'error_vs_horizon.png').name)
            plots.append(plot_latency(doc['latency_ms'], out_dir / 'latency_per_stage.png').name)
    except Exception as err:  # noqa: BLE001 - plots are extras; the tables are already written
        _LOG.error('plots failed (%s: %s); metrics.json and report.md are complete',
                   type(err).__name__, err)
    (out_dir / 'report.md').write_text(render_markdown(doc, plots))
    return doc


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)
