"""PNG plots of a replay: bird's-eye paths, error against horizon, latency per stage.

Uses matplotlib's object API (`Figure` + Agg canvas), so nothing global (pyplot state, backend
selection) is touched.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from alpamayo_offload.replay.metrics import DT_S, HORIZON_S, N_STEPS, error_by_step


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches='tight')
    return path


def pick_evenly(records: Sequence[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    """`count` records spread over the run (first and last included), for the path plots."""
    if count <= 0 or not records:
        return []
    idx = np.unique(np.linspace(0, len(records) - 1, min(count, len(records))).round().astype(int))
    return [records[i] for i in idx]


def plot_bev(record: Mapping[str, Any], path: Path) -> Path:
    """Predicted sample(s) and the driven path in the t0 ego frame, x forward drawn upwards."""
    fig = Figure(figsize=(4.2, 5.6))
    ax = fig.add_subplot()
    gt = np.asarray(record['gt_xyz'])
    for k, pred in enumerate(np.asarray(record['pred_xyz'])):
        ax.plot(-pred[:, 1], pred[:, 0], '-', color='tab:orange', alpha=0.8 if k == 0 else 0.35,
                label='predicted' if k == 0 else None)
    ax.plot(-gt[:, 1], gt[:, 0], '-', color='tab:blue', lw=2, label='driven (odometry)')
    ax.plot([0], [0], 'k^', label='ego at t0')
    m = record['metrics']
    h = max(record.get('horizons_s', [HORIZON_S]))
    ade, fde = (m['min_ade'], m['min_fde']) if h == HORIZON_S else \
        (m[f'min_ade/by_t={h:.1f}'], m[f'min_fde/by_t={h:.1f}'])
    ax.set_title(f"t0 = {record['t0_ns'] / 1e9:.2f} s\nminADE {ade:.2f} m, minFDE {fde:.2f} m "
                 f"(over {h:.1f} s)", fontsize=9)
    ax.set_xlabel('-y (m, right is positive)')
    ax.set_ylabel('x forward (m)')
    ax.set_aspect('equal', adjustable='datalim')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc='best')
    return _save(fig, path)


def horizon_errors(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Mean and p90 of the minADE sample's XY error at each of the 64 steps, and the sample count.

    A sample with a partial ground truth counts at its valid steps only; a step no sample
    reaches has None.
    """
    if not records:
        return {'t_s': [], 'mean': [], 'p90': [], 'count': []}
    errs = np.full((len(records), N_STEPS), np.nan)
    for i, r in enumerate(records):
        e = error_by_step(np.asarray(r['pred_xyz']), np.asarray(r['gt_xyz']))
        errs[i, :len(e)] = e
    count = np.isfinite(errs).sum(axis=0)

    def per_step(fn: Any) -> list[float | None]:
        return [float(fn(col[np.isfinite(col)])) if n else None
                for col, n in zip(errs.T, count, strict=True)]
    return {'t_s': [round((k + 1) * DT_S, 1) for k in range(N_STEPS)],
            'mean': per_step(np.mean), 'p90': per_step(lambda c: np.percentile(c, 90)),
            'count': count.tolist()}


def plot_error_vs_horizon(curve: Mapping[str, Sequence[float]], path: Path) -> Path:
    """Displacement error against prediction horizon (mean and p90 over samples)."""
    fig = Figure(figsize=(6, 3.6))
    ax = fig.add_subplot()
    ax.plot(curve['t_s'], np.asarray(curve['mean'], dtype=float), label='mean')
    ax.plot(curve['t_s'], np.asarray(curve['p90'], dtype=float), '--', label='p90')
    ax.set_xlabel('horizon (s)')
    ax.set_ylabel('XY error of the minADE sample (m)')
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_latency(latency_ms: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Median and p90 latency of each stage."""
    stages = [s for s, v in latency_ms.items() if v.get('count')]
    fig = Figure(figsize=(7, 0.45 * max(len(stages), 2) + 1.2))
    ax = fig.add_subplot()
    y = np.arange(len(stages))
    ax.barh(y - 0.2, [latency_ms[s]['median'] for s in stages], height=0.4, label='median')
    ax.barh(y + 0.2, [latency_ms[s]['p90'] for s in stages], height=0.4, label='p90')
    ax.set_yticks(y, stages)
    ax.invert_yaxis()
    ax.set_xlabel('ms')
    ax.grid(axis='x', alpha=0.3)
    ax.legend()
    return _save(fig, path)
