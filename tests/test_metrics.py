"""Metrics on hand-checked geometry."""

from __future__ import annotations

import numpy as np
import pytest

from core.metrics import FAILED, densify, line_shift, path_metrics, point_to_polyline

GT = np.array([[0.0, 0.0], [100.0, 0.0]])


def test_densify_keeps_vertices_spacing_and_length():
    line = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0], [3.0, 10.0]])
    points, weights = densify(line)
    assert np.max(np.hypot(*np.diff(points, axis=0).T)) <= 0.5 + 1e-12
    for vertex in ([0.0, 0.0], [3.0, 4.0], [3.0, 10.0]):
        assert np.any(np.all(np.isclose(points, vertex), axis=1))
    assert weights.sum() == pytest.approx(11.0)
    assert weights[0] == pytest.approx(weights[-1])


def test_densify_single_point():
    points, weights = densify([[2.0, 3.0]])
    np.testing.assert_array_equal(points, [[2.0, 3.0]])
    np.testing.assert_array_equal(weights, [1.0])


def test_point_to_polyline_exact():
    points = np.array([[50.0, 3.0], [-4.0, 3.0], [104.0, -3.0]])
    np.testing.assert_allclose(point_to_polyline(points, GT), [3.0, 5.0, 5.0])


def test_identical_paths():
    metrics = path_metrics(GT, GT)
    assert metrics.completeness_3 == 1.0
    assert metrics.completeness_5 == 1.0
    assert metrics.trace_to_gt == pytest.approx(0.0)
    assert metrics.gt_to_trace == pytest.approx(0.0)
    assert metrics.hausdorff == pytest.approx(0.0)


def test_parallel_offset_of_four_px():
    metrics = path_metrics(GT + [0.0, 4.0], GT)
    assert metrics.completeness_3 == 0.0
    assert metrics.completeness_5 == 1.0
    assert metrics.trace_to_gt == pytest.approx(4.0)
    assert metrics.gt_to_trace == pytest.approx(4.0)
    assert metrics.hausdorff == pytest.approx(4.0)


def test_trace_covering_half_the_ground_truth():
    metrics = path_metrics([[0.0, 0.0], [50.0, 0.0]], GT)
    # GT points with x <= 53 (resp. 55) lie within 3 (5) px of the trace.
    assert metrics.completeness_3 == pytest.approx(0.53, abs=0.006)
    assert metrics.completeness_5 == pytest.approx(0.55, abs=0.006)
    assert metrics.trace_to_gt == pytest.approx(0.0)
    # ∫_50^100 (x − 50) dx / 100 = 12.5
    assert metrics.gt_to_trace == pytest.approx(12.5, rel=1e-3)
    assert metrics.hausdorff == pytest.approx(50.0)


def test_length_weighting_ignores_sampling_density():
    dense = np.column_stack([np.linspace(0, 100, 1001), np.zeros(1001)])
    sparse_gt = np.array([[0.0, 0.0], [10.0, 0.0], [100.0, 0.0]])
    trace = np.array([[0.0, 0.0], [20.0, 0.0], [40.0, 10.0], [100.0, 10.0]])
    first, second = path_metrics(trace, dense), path_metrics(trace, sparse_gt)
    assert first.completeness_3 == pytest.approx(second.completeness_3, abs=1e-3)
    assert first.gt_to_trace == pytest.approx(second.gt_to_trace, abs=1e-3)
    assert first.trace_to_gt == pytest.approx(second.trace_to_gt, abs=1e-3)


def test_failed_trace():
    assert path_metrics(None, GT) == FAILED
    assert FAILED.completeness_3 == 0.0
    assert np.isinf(FAILED.gt_to_trace)
    assert np.isinf(FAILED.hausdorff)


def test_line_shift_is_symmetric():
    moved = GT + [0.0, 1.5]
    assert line_shift(GT, moved) == pytest.approx(1.5)
    assert line_shift(moved, GT) == pytest.approx(1.5)


def test_point_to_polyline_in_blocks_equals_all_at_once(monkeypatch):
    # Long lines are measured a block of points at a time; the distances do not change.
    rng = np.random.default_rng(3)
    line = np.cumsum(rng.normal(size=(300, 2)), axis=0)
    points = rng.uniform(-20, 20, size=(1000, 2))
    whole = point_to_polyline(points, line)
    monkeypatch.setattr("core.metrics.PAIRS_PER_BLOCK", 299 * 7)
    np.testing.assert_array_equal(point_to_polyline(points, line), whole)
