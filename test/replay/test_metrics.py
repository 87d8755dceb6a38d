"""Metric definitions on hand-made trajectories (Alpamayo conventions, lateral/longitudinal)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from alpamayo_offload.replay.metrics import (
    aggregate,
    error_by_step,
    sample_metrics,
    summarize,
    yaw_from_rot,
)

T = np.arange(1, 65) * 0.1


def straight(speed: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    xyz = np.stack([speed * T, np.zeros(64), np.zeros(64)], axis=1)
    return xyz, np.zeros(64)


def test_perfect_prediction_scores_zero() -> None:
    gt, yaw = straight()
    m = sample_metrics(gt, yaw, gt, yaw)
    assert all(v == 0.0 for v in m.values()), m
    assert {'ade', 'fde', 'min_ade', 'min_fde', 'min_ade/by_t=0.5', 'min_ade/by_t=1.0',
            'min_ade/by_t=3.0', 'min_ade/by_t=5.0', 'min_fde/by_t=5.0', 'lat_err/by_t=1.0',
            'lat_err/by_t=3.0', 'lon_err/by_t=1.0', 'lon_err/by_t=3.0', 'heading_err_deg',
            'heading_err_deg/by_t=6.4'} <= set(m)


def test_constant_offset_equals_offset_and_splits_lat_lon() -> None:
    gt, yaw = straight()
    pred = gt + np.array([0.6, 0.8, 5.0])       # z is ignored: XY metrics
    m = sample_metrics(pred, yaw, gt, yaw)
    for key in ('ade', 'fde', 'min_ade', 'min_fde', 'min_ade/by_t=0.5', 'min_fde/by_t=3.0'):
        assert m[key] == pytest.approx(1.0, abs=1e-12)
    assert m['lon_err/by_t=1.0'] == pytest.approx(0.6, abs=1e-12)
    assert m['lat_err/by_t=3.0'] == pytest.approx(0.8, abs=1e-12)


def test_lateral_is_measured_across_the_driven_heading() -> None:
    gt, _ = straight()
    yaw = np.full(64, math.pi / 2)               # driving along +y at every step
    pred = gt + np.array([0.5, 0.0, 0.0])        # +x is then to the right: lateral
    m = sample_metrics(pred, yaw, gt, yaw)
    assert m['lat_err/by_t=1.0'] == pytest.approx(0.5)
    assert m['lon_err/by_t=1.0'] == pytest.approx(0.0, abs=1e-12)


def test_min_over_samples_follows_alpamayo() -> None:
    gt, yaw = straight()
    offs = np.array([3.0, 1.0, 2.0])
    pred = gt[None] + np.stack([np.array([0.0, o, 0.0]) for o in offs])[:, None, :]
    # sample 2 is worse on average but exact at the last step: minFDE takes it, minADE does not
    pred[2, -1] = gt[-1]
    m = sample_metrics(pred, np.broadcast_to(yaw, (3, 64)), gt, yaw)
    assert m['ade'] == pytest.approx(3.0) and m['fde'] == pytest.approx(3.0)  # sample 0
    assert m['min_ade'] == pytest.approx(1.0)
    assert m['min_ade/by_t=5.0'] == pytest.approx(1.0)
    assert m['min_fde'] == pytest.approx(0.0)
    assert m['min_fde/by_t=5.0'] == pytest.approx(1.0)
    np.testing.assert_allclose(error_by_step(pred, gt), np.ones(64))


def test_horizons_average_the_first_steps_only() -> None:
    gt, yaw = straight()
    pred = gt.copy()
    pred[10:, 1] += 2.0                           # wrong only after 1.0 s
    m = sample_metrics(pred, yaw, gt, yaw)
    assert m['min_ade/by_t=0.5'] == 0.0 and m['min_ade/by_t=1.0'] == 0.0
    assert m['min_ade/by_t=3.0'] == pytest.approx(2.0 * 20 / 30)
    assert m['min_fde/by_t=1.0'] == 0.0 and m['min_fde/by_t=3.0'] == pytest.approx(2.0)


def test_heading_error_wraps_around() -> None:
    gt, _ = straight()
    gyaw = np.full(64, math.radians(179.0))
    pyaw = np.full(64, math.radians(-179.0))
    m = sample_metrics(gt, pyaw, gt, gyaw)
    assert m['heading_err_deg'] == pytest.approx(2.0)


def test_yaw_from_rot() -> None:
    a = 0.3
    rot = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    assert yaw_from_rot(rot) == pytest.approx(a)


def test_bad_shapes_name_the_expected_shape() -> None:
    gt, yaw = straight()
    with pytest.raises(ValueError, match=r'expected \(K, 64, 3\)'):
        sample_metrics(gt[:10], yaw[:10], gt, yaw)


def test_aggregate_mean_median_p90() -> None:
    rows = [{'ade': float(v)} for v in range(1, 11)]
    s = aggregate(rows)['ade']
    assert s == {'count': 10, 'mean': 5.5, 'median': 5.5, 'p90': pytest.approx(9.1), 'max': 10.0}
    assert summarize([]) == {'count': 0, 'mean': None, 'median': None, 'p90': None, 'max': None}
