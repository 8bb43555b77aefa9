"""River mode: the traced line moved to the middle of the water surface, vertex by vertex.

The DP follows the ridge of the blurred surface membership (core/scores.py), which leans
towards the side where the membership is stronger. On water, whose banks are clean, the middle
of the surface itself is the better centre line (measured: docs/ACCURACY.md): each
interior vertex moves along the normal of the line to the midpoint of the run of surface
(membership > ½ after a σ = 1 px blur) through it. A vertex stays where the run is open on a
side within reach, is wider than :data:`MAX_RUN_WIDTH` times the surface's width at the
clicks (a junction, a lake, a bay), or does not contain it; the shifts are median-filtered
over three vertices so that one odd run does not kink the line. The end points stay at the
clicks (samples beyond the surface's window count as open). The turning-angle limit still
holds: the moves of the vertices beside a turn that would exceed it shrink until none does
(the DP's line, with no move, keeps it). On roads (driveways, car parks
and verges widen the run on one side) the same rule
loses accuracy, so it applies only to lines traced as rivers.
"""

from __future__ import annotations

import numpy as np

from core.gradient import gaussian_blur
from core.guides import ANGLE_TOLERANCE
from core.scores import band_width

#: A run wider than this many times the surface's width at the clicks is not centred on.
MAX_RUN_WIDTH = 1.5
#: Step (px) of the samples along a vertex's normal.
RUN_STEP = 0.5
#: A sample beyond the window: neither on the surface nor off it.
UNKNOWN = -1
#: Factor on the moves beside a turn over the limit, per round.
SHRINK = 0.8


def centre_on_surface(polyline: np.ndarray, surface: np.ndarray, origin: np.ndarray,
                      max_turn: float) -> np.ndarray:
    """The polyline with its interior vertices moved to the middle of the surface.

    Parameters
    ----------
    polyline : ndarray of shape (n, 2)
        Vertices (x, y) from a to b, in the frame where ``surface[0, 0]`` sits at ``origin``;
        no turn at a vertex exceeds ``max_turn``.
    surface : ndarray of shape (rows, cols)
        Membership of the clicked surface in [0, 1] over a window covering the polyline.
    origin : ndarray of shape (2,)
        (x, y) of the window's pixel [0, 0].
    max_turn : float
        Largest turn (rad) allowed at a vertex, the DP's limit.

    Returns
    -------
    ndarray of shape (n, 2), float64
    """
    polyline = np.asarray(polyline, dtype=np.float64)
    if len(polyline) < 3:
        return polyline.copy()
    inside = gaussian_blur(np.asarray(surface, dtype=np.float64), 1.0, "symmetric") > 0.5
    local = polyline - origin
    width = band_width(inside, local[0], local[-1])
    reach = max(3.0 * width, 10.0)
    steps = np.arange(-reach, reach + RUN_STEP / 2, RUN_STEP)
    middle = len(steps) // 2
    tangents = polyline[2:] - polyline[:-2]
    normals = np.column_stack([-tangents[:, 1], tangents[:, 0]])
    normals /= np.maximum(np.hypot(*normals.T), 1e-12)[:, None]
    shifts = np.zeros(len(polyline))
    for i, (vertex, normal) in enumerate(zip(local[1:-1], normals, strict=True), 1):
        samples = vertex + steps[:, None] * normal
        col = np.rint(samples[:, 0]).astype(int)
        row = np.rint(samples[:, 1]).astype(int)
        valid = (col >= 0) & (col < inside.shape[1]) & (row >= 0) & (row < inside.shape[0])
        state = np.full(len(steps), UNKNOWN)  # beyond the window: unknown
        state[valid] = inside[row[valid], col[valid]]
        if state[middle] != 1:
            continue
        ends = np.flatnonzero(state != 1)
        low, high = ends[ends < middle], ends[ends > middle]
        if not (low.size and high.size) or state[low[-1]] == UNKNOWN \
                or state[high[0]] == UNKNOWN:
            continue  # open on a side within reach, or beyond the window
        first, last = low[-1] + 1, high[0] - 1
        if steps[last] - steps[first] <= MAX_RUN_WIDTH * width:
            shifts[i] = 0.5 * (steps[first] + steps[last])
    smoothed = shifts.copy()
    for i in range(1, len(polyline) - 1):
        smoothed[i] = np.median(shifts[max(i - 1, 1):min(i + 2, len(polyline) - 1)])
    return _within_turn_limit(polyline, smoothed[1:-1, None] * normals, max_turn)


def _turns(polyline: np.ndarray) -> np.ndarray:
    """Turn (rad) at each interior vertex of a polyline (n, 2): shape (n - 2,)."""
    steps = np.diff(polyline, axis=0)
    directions = np.arctan2(steps[:, 1], steps[:, 0])
    return np.abs((np.diff(directions) + np.pi) % (2 * np.pi) - np.pi)


def _within_turn_limit(polyline: np.ndarray, moves: np.ndarray, max_turn: float,
                       rounds: int = 100) -> np.ndarray:
    """``polyline`` with its interior vertices moved by ``moves`` (n - 2, 2), the moves beside
    any turn over ``max_turn`` shrunk by :data:`SHRINK` until none is (none moved after
    ``rounds``)."""
    moves = moves.copy()
    for _ in range(rounds):
        out = polyline.copy()
        out[1:-1] += moves
        bad = np.flatnonzero(_turns(out) > max_turn + ANGLE_TOLERANCE)
        if not bad.size:
            return out
        beside = np.unique(np.clip(np.concatenate([bad - 1, bad, bad + 1]), 0, len(moves) - 1))
        moves[beside] *= SHRINK
    return polyline.copy()
