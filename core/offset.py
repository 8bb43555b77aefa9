"""The clicked offset across a surface: where on a road's width the user's line runs.

The clicks say which line the user wants: the middle of a lane-wide track, one carriageway of
a divided highway, a centreline a third of the way across a wide avenue. A ridge along the
centre of everything paved ignores that and bows away from the clicks on wide roads. This
module measures, for every pixel of the clicked surface, its relative position across the
surface, t = l / (l + r), from its distances l and r to the surface's edges along the normal
of [a, b]; t does not depend on the road's direction as long as the road is not parallel to
that normal, so it holds on curves too. The ridge is 1 where t equals the clicks' t
(interpolated between a and b along [a, b]) and falls to 0 at ``OFFSET_TOLERANCE`` from it.
Cross-sections much wider than at the clicks (a junction, a car park beside the road) or
open beyond the window say nothing about the offset and get no offset ridge.
"""

from __future__ import annotations

import numpy as np

from core.jit import numba

#: A cross-section wider than this many times the one at the clicks says nothing about the
#: clicked offset (a junction, a car park).
OPEN_WIDTH = 2.5
#: Relative cross-position error at which the offset ridge reaches 0.
OFFSET_TOLERANCE = 0.5


@numba.njit(cache=True, inline="always")
def _run(mask, row, col, nx, ny, reach):
    """Distance (px) from pixel (row, col) of ``mask`` along (nx, ny), in nearest-pixel steps
    of 1 px, to the first pixel outside it; ``inf`` where the run leaves the window or is
    longer than ``reach``."""
    rows, cols = mask.shape
    for step in range(1, reach + 1):
        c = int(np.floor(col + step * nx + 0.5))
        r = int(np.floor(row + step * ny + 0.5))
        if c < 0 or r < 0 or c >= cols or r >= rows:
            return np.inf
        if not mask[r, c]:
            return step - 0.5
    return np.inf


@numba.njit(cache=True)
def _position(mask, row, col, nx, ny, reach):
    """Relative cross-position behind / (behind + ahead) of a mask pixel along (nx, ny), and
    the cross-section's width; NaN where it is not closed within ``reach``."""
    ahead = _run(mask, row, col, nx, ny, reach)
    behind = _run(mask, row, col, -nx, -ny, reach)
    total = ahead + behind
    if not np.isfinite(total):
        return np.nan, total
    return behind / total, total


@numba.njit(cache=True, parallel=True)
def _tent(membership, mask, nx, ny, reach, widest, a, chord, start, end, tolerance):
    """membership · max(0, 1 − |t − t*| / tolerance) on closed cross-sections at most
    ``widest`` wide, else 0; t* runs from ``start`` at a to ``end`` at b along ``chord``."""
    rows, cols = mask.shape
    out = np.zeros((rows, cols))
    length2 = chord[0] * chord[0] + chord[1] * chord[1]
    for row in numba.prange(rows):
        for col in range(cols):
            if not mask[row, col]:
                continue
            position, total = _position(mask, row, col, nx, ny, reach)
            if np.isnan(position) or total > widest:
                continue
            along = ((col - a[0]) * chord[0] + (row - a[1]) * chord[1]) / length2
            along = min(max(along, 0.0), 1.0)
            error = abs(position - (start + along * (end - start)))
            out[row, col] = membership[row, col] * max(0.0, 1.0 - error / tolerance)
    return out


def offset_ridge(membership: np.ndarray, mask: np.ndarray, a: np.ndarray, b: np.ndarray,
                 click_width: float) -> np.ndarray:
    """The ridge along the clicked offset across the surface.

    Parameters
    ----------
    membership : ndarray of shape (rows, cols)
        How likely each pixel lies on the clicked surface, in [0, 1].
    mask : ndarray of shape (rows, cols), bool
        The surface (membership > ½ after a 1 px blur).
    a, b : ndarrays of shape (2,)
        The clicks (x, y) in window coordinates, at least 2 px apart.
    click_width : float
        The surface's width (px) across [a, b] at the clicks (:func:`core.scores.band_width`).

    Returns
    -------
    ndarray of shape (rows, cols), float64 in [0, 1]
        membership · max(0, 1 − |t − t*| / OFFSET_TOLERANCE) where the cross-section through
        the pixel is closed and at most OPEN_WIDTH × ``click_width`` wide, else 0; t* is the
        clicks' t, interpolated along [a, b] (0.5 for a click off the surface).
    """
    a = np.asarray(a, dtype=np.float64)
    chord = np.asarray(b, dtype=np.float64) - a
    unit = chord / np.hypot(*chord)
    nx, ny = -unit[1], unit[0]
    widest = OPEN_WIDTH * max(click_width, 2.0)
    reach = int(widest) + 2
    clicked = []
    for point in (a, b):
        col = min(max(int(round(point[0])), 0), mask.shape[1] - 1)
        row = min(max(int(round(point[1])), 0), mask.shape[0] - 1)
        position = _position(mask, row, col, nx, ny, reach)[0] if mask[row, col] else np.nan
        clicked.append(0.5 if np.isnan(position) else position)
    return _tent(np.asarray(membership, dtype=np.float64), mask, nx, ny, reach, widest, a,
                 chord, clicked[0], clicked[1], OFFSET_TOLERANCE)
