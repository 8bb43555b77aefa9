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


@numba.njit(cache=True)
def _runs(mask, nx, ny, reach):
    """Distances (px) from every pixel of ``mask`` (rows, cols) bool along +(nx, ny) and
    −(nx, ny) to the first pixel outside it (nearest-pixel steps of 1 px): two (rows, cols)
    float32 planes, ``inf`` where the run leaves the window or is longer than ``reach``, 0
    outside the mask."""
    rows, cols = mask.shape
    ahead = np.zeros((rows, cols), np.float32)
    behind = np.zeros((rows, cols), np.float32)
    for row in range(rows):
        for col in range(cols):
            if not mask[row, col]:
                continue
            for sign in (1.0, -1.0):
                run = np.inf
                for step in range(1, reach + 1):
                    c = int(np.floor(col + sign * step * nx + 0.5))
                    r = int(np.floor(row + sign * step * ny + 0.5))
                    if c < 0 or r < 0 or c >= cols or r >= rows:
                        break
                    if not mask[r, c]:
                        run = step - 0.5
                        break
                if sign > 0:
                    ahead[row, col] = run
                else:
                    behind[row, col] = run
    return ahead, behind


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
    chord = np.asarray(b, dtype=np.float64) - a
    unit = chord / np.hypot(*chord)
    widest = OPEN_WIDTH * max(click_width, 2.0)
    ahead, behind = _runs(mask, -unit[1], unit[0], int(widest) + 2)
    total = ahead + behind
    clicked = []
    for point in (a, b):
        col = min(max(int(round(point[0])), 0), mask.shape[1] - 1)
        row = min(max(int(round(point[1])), 0), mask.shape[0] - 1)
        closed = mask[row, col] and np.isfinite(total[row, col])
        clicked.append(behind[row, col] / total[row, col] if closed else 0.5)
    rows, cols = np.indices(mask.shape)
    along = np.clip(((cols - a[0]) * chord[0] + (rows - a[1]) * chord[1]) / (chord @ chord),
                    0.0, 1.0)
    target = clicked[0] + along * (clicked[1] - clicked[0])
    closed = mask & np.isfinite(total) & (total <= widest)
    position = np.divide(behind, total, out=np.zeros(total.shape), where=closed)
    tent = np.clip(1.0 - np.abs(position - target) / OFFSET_TOLERANCE, 0.0, 1.0)
    return np.where(closed, membership * tent, 0.0)
