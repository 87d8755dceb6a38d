"""Trajectory metrics per sample and their aggregates, following Alpamayo's own evaluation.

Conventions (NVlabs/alpamayo `metrics/distance_metrics.py`): XY only, 64 steps at 10 Hz; minADE
picks the sample with the lowest full-horizon ADE and reports that sample's ADE over the first
5/10/30/50 steps; minFDE takes the minimum over samples independently at each horizon; ADE/FDE
without `min` use sample 0 (Alpamayo's "top" sample). Lateral, longitudinal and heading errors use
the minADE sample and are measured in the driven path's frame at that step.

A sample is scored at every horizon its ground truth covers (`HORIZONS_S`): the driven future can
end early (end of the recording, an odometry gap or a NaN), and a horizon is then left out of that
sample's metrics rather than the sample being dropped. The minADE sample is the one with the lowest
ADE over the longest horizon scored (6.4 s when the ground truth is whole, as in Alpamayo).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

DT_S = 0.1
N_STEPS = 64
HORIZON_S = N_STEPS * DT_S
MIN_HORIZONS_S = (0.5, 1.0, 3.0, 5.0)
LATLON_HORIZONS_S = (1.0, 3.0)
HORIZONS_S = (*MIN_HORIZONS_S, HORIZON_S)
QUANTILE = 90.0


def _step(horizon_s: float) -> int:
    """Return the number of steps covering `horizon_s` (0.5 s -> 5 steps)."""
    return int(round(horizon_s / DT_S))


def yaw_from_rot(rot: np.ndarray) -> np.ndarray:
    """Yaw (rad) of rotation matrices (..., 3, 3), as Alpamayo's action space defines it."""
    return np.arctan2(rot[..., 1, 0], rot[..., 0, 0])


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Wrap angles to [-pi, pi)."""
    return (angle + np.pi) % (2.0 * np.pi) - np.pi


def _as_samples(pred: np.ndarray, tail_ndim: int) -> np.ndarray:
    """Promote a single prediction to a stack of one sample."""
    pred = np.asarray(pred, dtype=np.float64)
    return pred[None] if pred.ndim == tail_ndim else pred


def scored_horizons(gt_steps: int) -> tuple[float, ...]:
    """Horizons (s) a ground truth of `gt_steps` valid steps covers."""
    return tuple(h for h in HORIZONS_S if _step(h) <= gt_steps)


def sample_metrics(pred_xyz: np.ndarray, pred_yaw: np.ndarray, gt_xyz: np.ndarray,
                   gt_yaw: np.ndarray) -> dict[str, float]:
    """Accuracy of one prediction (K samples or one) against the driven path, all in the t0 frame.

    Shapes: pred_xyz (K, 64, 3) or (64, 3), pred_yaw (K, 64) or (64,), gt_xyz (N, 3), gt_yaw (N,)
    with N <= 64 the valid ground-truth steps; only the horizons N covers are scored (at least
    one must be). Distances in metres, heading in degrees.
    """
    pxyz = _as_samples(pred_xyz, 2)
    pyaw = _as_samples(pred_yaw, 1)
    gxyz = np.asarray(gt_xyz, dtype=np.float64)
    gyaw = np.asarray(gt_yaw, dtype=np.float64)
    n = len(gxyz)
    horizons = scored_horizons(n)
    if pxyz.shape[1:] != (N_STEPS, 3) or gxyz.shape != (n, 3) or not horizons or n > N_STEPS:
        raise ValueError(f'pred_xyz {pxyz.shape} / gt_xyz {gxyz.shape}: expected (K, {N_STEPS}, 3)'
                         f' and (N, 3) with {_step(HORIZONS_S[0])} <= N <= {N_STEPS}')
    if pyaw.shape != pxyz.shape[:2] or gyaw.shape != (n,):
        raise ValueError(f'pred_yaw {pyaw.shape} / gt_yaw {gyaw.shape}: expected '
                         f'{pxyz.shape[:2]} and ({n},)')

    diff = pxyz[:, :n, :2] - gxyz[None, :, :2]                  # (K, N, 2)
    l2 = np.linalg.norm(diff, axis=-1)                          # (K, N)
    longest = _step(horizons[-1])
    best = int(np.argmin(l2[:, :longest].mean(axis=1)))
    out: dict[str, float] = {}
    if HORIZON_S in horizons:
        out.update({'ade': float(l2[0].mean()), 'fde': float(l2[0, -1]),
                    'min_ade': float(l2[best].mean()), 'min_fde': float(l2[:, -1].min())})
    for h in MIN_HORIZONS_S:
        if h in horizons:
            k = _step(h)
            out[f'min_ade/by_t={h:.1f}'] = float(l2[best, :k].mean())
            out[f'min_fde/by_t={h:.1f}'] = float(l2[:, k - 1].min())

    heading = np.stack([np.cos(gyaw), np.sin(gyaw)], axis=-1)  # (N, 2) driven direction
    lon = np.einsum('ti,ti->t', diff[best], heading)
    lat = heading[:, 0] * diff[best, :, 1] - heading[:, 1] * diff[best, :, 0]
    for h in LATLON_HORIZONS_S:
        if h in horizons:
            i = _step(h) - 1
            out[f'lat_err/by_t={h:.1f}'] = float(abs(lat[i]))
            out[f'lon_err/by_t={h:.1f}'] = float(abs(lon[i]))
    if HORIZON_S in horizons:
        dyaw = np.degrees(np.abs(_wrap(pyaw[best] - gyaw)))
        out['heading_err_deg'] = float(dyaw.mean())
        out[f'heading_err_deg/by_t={HORIZON_S:.1f}'] = float(dyaw[-1])
    return out


def error_by_step(pred_xyz: np.ndarray, gt_xyz: np.ndarray) -> np.ndarray:
    """XY error (N,) of the minADE sample at each valid ground-truth step, for the horizon plot."""
    gxyz = np.asarray(gt_xyz, dtype=np.float64)
    pxyz = _as_samples(pred_xyz, 2)[:, :len(gxyz)]
    l2 = np.linalg.norm(pxyz[..., :2] - gxyz[None, :, :2], axis=-1)
    longest = _step(scored_horizons(len(gxyz))[-1]) if scored_horizons(len(gxyz)) else len(gxyz)
    return l2[int(np.argmin(l2[:, :longest].mean(axis=1)))]


def summarize(values: Iterable[float]) -> dict[str, float | int | None]:
    """Mean, median, p90 and max of finite values (None when there are none)."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if arr.size == 0:
        return {'count': 0, 'mean': None, 'median': None, 'p90': None, 'max': None}
    return {'count': int(arr.size), 'mean': float(arr.mean()), 'median': float(np.median(arr)),
            'p90': float(np.percentile(arr, QUANTILE)), 'max': float(arr.max())}


def aggregate(per_sample: Iterable[Mapping[str, float]]
              ) -> dict[str, dict[str, float | int | None]]:
    """Summaries for every key seen in any sample, in first-seen order (stable: rows are)."""
    rows = list(per_sample)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return {k: summarize(row[k] for row in rows if k in row) for k in keys}
