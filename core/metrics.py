"""Accuracy of a traced polyline against a ground-truth path (the data README's definitions).

Both polylines are densified to points at most :data:`SPACING` px apart; every point carries
the length of path it stands for (trapezoid weights: half a piece at each end), so metrics are
length-weighted and do not depend on how densely either input was sampled. Distances are
exact point-to-polyline distances (to the other polyline's segments, not to its samples as the
data set's reference metric measures them: the distance to the nearest sample is longer by at
most half the spacing, so one case's completeness can read a few hundredths lower there;
medians and means over hundreds of cases agree to 0.001).

* completeness@N: length fraction of the ground truth within N px of the trace;
* mean distance trace→GT and GT→trace (px), length-weighted;
* Hausdorff distance (px): the larger of the two directed maxima.

A failed trace (``None``) has completeness 0 and infinite distances.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: Densification step (px).
SPACING = 0.5
#: Radii (px) of the completeness figures.
RADII = (3, 5)
#: Point–segment pairs :func:`point_to_polyline` measures at once (about 100 MB of work arrays).
PAIRS_PER_BLOCK = 1 << 21


@dataclass(frozen=True)
class PathMetrics:
    """Metrics of one trace against its ground truth (distances in px)."""

    completeness_3: float
    completeness_5: float
    trace_to_gt: float
    gt_to_trace: float
    hausdorff: float

    def as_dict(self) -> dict:
        """The metrics by field name."""
        return asdict(self)


#: Metrics of a failed trace.
FAILED = PathMetrics(0.0, 0.0, np.inf, np.inf, np.inf)


def as_polyline(points) -> np.ndarray:
    """Points as float64 of shape (n, 2), n >= 1, with consecutive duplicates removed."""
    array = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(array) == 0:
        raise ValueError("a polyline needs at least one point")
    keep = np.ones(len(array), dtype=bool)
    keep[1:] = np.any(np.diff(array, axis=0) != 0, axis=1)
    return array[keep]


def densify(points, spacing: float = SPACING) -> tuple[np.ndarray, np.ndarray]:
    """Sample a polyline at most ``spacing`` px apart, keeping every vertex.

    Parameters
    ----------
    points : array_like of shape (n, 2)
    spacing : float

    Returns
    -------
    samples : ndarray of shape (k, 2), float64
    weights : ndarray of shape (k,), float64
        Path length each sample stands for; they sum to the polyline's length. A single point
        (zero length) gets weight 1.
    """
    line = as_polyline(points)
    if len(line) == 1:
        return line, np.ones(1)
    pieces, weights = [line[:1]], [np.zeros(1)]
    for p, q in zip(line[:-1], line[1:], strict=True):
        length = float(np.hypot(*(q - p)))
        count = max(1, int(np.ceil(length / spacing)))
        f = np.arange(1, count + 1)[:, None] / count
        pieces.append(p + f * (q - p))
        step = np.full(count, length / count)
        weights[-1][-1] += step[0] / 2
        w = step.copy()
        w[:-1] = (step[:-1] + step[1:]) / 2
        w[-1] = step[-1] / 2
        weights.append(w)
    return np.vstack(pieces), np.concatenate(weights)


def point_to_polyline(points: np.ndarray, line: np.ndarray) -> np.ndarray:
    """Distance from each point (k, 2) to the polyline ``line`` (n, 2): shape (k,).

    Points are taken :data:`PAIRS_PER_BLOCK` point–segment pairs at a time, so that long
    lines need little memory."""
    line = as_polyline(line)
    if len(line) == 1:
        return np.hypot(*(points - line[0]).T)
    p, q = line[:-1], line[1:]
    d = q - p
    length2 = (d * d).sum(axis=1)
    block = max(1, PAIRS_PER_BLOCK // len(p))
    distances = np.empty(len(points))
    for start in range(0, len(points), block):
        chunk = points[start:start + block]
        rel = chunk[:, None, :] - p[None, :, :]
        f = np.clip((rel * d[None]).sum(axis=2) / length2[None], 0.0, 1.0)
        nearest = p[None] + f[..., None] * d[None]
        distances[start:start + block] = np.sqrt(
            ((chunk[:, None, :] - nearest) ** 2).sum(axis=2)).min(axis=1)
    return distances


def path_metrics(trace, gt) -> PathMetrics:
    """Compare a traced polyline (n, 2) with the ground truth (g, 2); ``trace=None`` = failed."""
    if trace is None:
        return FAILED
    trace_pts, trace_w = densify(trace)
    gt_pts, gt_w = densify(gt)
    gt_dist = point_to_polyline(gt_pts, trace)
    trace_dist = point_to_polyline(trace_pts, gt)
    gt_total, trace_total = gt_w.sum(), trace_w.sum()
    return PathMetrics(
        completeness_3=float(gt_w[gt_dist <= RADII[0]].sum() / gt_total),
        completeness_5=float(gt_w[gt_dist <= RADII[1]].sum() / gt_total),
        trace_to_gt=float((trace_w * trace_dist).sum() / trace_total),
        gt_to_trace=float((gt_w * gt_dist).sum() / gt_total),
        hausdorff=float(max(gt_dist.max(), trace_dist.max())),
    )


def line_shift(first, second) -> float:
    """Median distance (px) between two polylines, both directions pooled.

    Used for stability: how far a trace moves when an endpoint is nudged.
    """
    first_pts, _ = densify(first)
    second_pts, _ = densify(second)
    return float(np.median(np.concatenate([point_to_polyline(first_pts, second),
                                           point_to_polyline(second_pts, first)])))
