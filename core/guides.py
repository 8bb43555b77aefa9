"""Guides perpendicular to [a, b] and the turning-angle admissibility windows.

Geometry (docs/ENGINE.md): u = (b-a)/|b-a|, n = (-u_y, u_x). Guide t = 1..m is centred at
c_t = a + t/(m+1)·(b-a) and holds d points p[t, i] = c_t + s_i·n, s_i = -w + 2w·i/(d-1).

The DP runs over *node sets* G_0 = {a}, G_1..G_m (the guides), G_{m+1} = {b}. In the local
frame (along u, across n) node set t sits at along = t·h (h = |b-a|/(m+1)) and across = the
offsets of its points (0 for a and b), so turn angles are computed exactly from offsets.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from core.errors import BadParameter
from core.jit import numba

#: Tolerance added to the angle limit: a turn is admissible when turn <= θ + ANGLE_TOLERANCE.
ANGLE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Corridor:
    """Guides between a and b.

    Attributes
    ----------
    a, b : ndarray of shape (2,)
        Endpoints (x, y).
    guides : int
        m, number of guides.
    points : int
        d, points per guide.
    halfwidth : float
        w, reach of each guide to either side of [a, b] (px).
    """

    a: np.ndarray
    b: np.ndarray
    guides: int
    points: int
    halfwidth: float

    @cached_property
    def length(self) -> float:
        """|b − a| (px)."""
        return float(np.hypot(*(self.b - self.a)))

    @cached_property
    def unit(self) -> np.ndarray:
        """u, shape (2,)."""
        return (self.b - self.a) / self.length

    @cached_property
    def normal(self) -> np.ndarray:
        """n = (-u_y, u_x), shape (2,)."""
        return np.array([-self.unit[1], self.unit[0]])

    @cached_property
    def spacing(self) -> float:
        """h, distance between consecutive node sets along u (px)."""
        return self.length / (self.guides + 1)

    @cached_property
    def offsets(self) -> np.ndarray:
        """s_i, shape (d,): across-offsets of the points on every guide (the values of
        ``np.linspace(-w, w, d)``, computed as it does, without its overhead)."""
        offsets = np.arange(self.points) * (2.0 * self.halfwidth / (self.points - 1))
        offsets -= self.halfwidth
        offsets[-1] = self.halfwidth
        return offsets

    @cached_property
    def guide_points(self) -> np.ndarray:
        """p[t, i], shape (m, d, 2): guide points (x, y); guide t-1 in row t-1."""
        return self._points(np.arange(1, self.guides + 1), self.offsets)

    def _points(self, guides: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """The points of ``guides`` (1-based numbers) at across-``offsets``, shape
        (len(guides), len(offsets), 2), each computed as :attr:`guide_points` computes it."""
        along = guides / (self.guides + 1)
        centres = self.a + along[:, None] * (self.b - self.a)
        return centres[:, None, :] + offsets[:, None] * self.normal

    @cached_property
    def pixel_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Integer (col, row) floor of the lowest and ceiling of the highest corridor point,
        each (2,) int: the pixels its evidence window must cover.

        Coordinates are rounded to 1e-6 px first, so float noise from a coordinate conversion
        (an anchor at 12 − 1e-9) reads the same window, and traces the same line, as the exact
        value.
        """
        # A coordinate of p[t, i] is c(t) + o(i), each term and the sum rounded monotonically,
        # so its extremes lie at the grid's corners; and extremes first, rounded after, equals
        # rounding every point (rounding is monotone too). In Python floats, the operations of
        # :meth:`_points` in its order (the same values; a live preview asks every time), and
        # np.round's to 6 decimals (x · 10⁶ rounded half to even, / 10⁶).
        low, high = [], []
        for axis in (0, 1):
            a, b = float(self.a[axis]), float(self.b[axis])
            normal = float(self.normal[axis])
            values = [a, b]
            for guide in (1, self.guides):
                centre = a + guide / (self.guides + 1) * (b - a)
                values += [centre + -self.halfwidth * normal, centre + self.halfwidth * normal]
            low.append(math.floor(round(min(values) * 1e6) / 1e6))
            high.append(math.ceil(round(max(values) * 1e6) / 1e6))
        return np.array(low), np.array(high)

    def node_sets(self) -> list[np.ndarray]:
        """G_0..G_{m+1}: ``[a (1, 2), guide 1 (d, 2), ..., guide m (d, 2), b (1, 2)]``."""
        return [self.a[None, :], *self.guide_points, self.b[None, :]]

    def node_offsets(self, t: int) -> np.ndarray:
        """Across-offsets of node set t: shape (1,) for a and b, (d,) for guides."""
        return np.zeros(1) if t in (0, self.guides + 1) else self.offsets

    def polyline(self, indices: np.ndarray) -> np.ndarray:
        """The polyline a → p[1, i_1] → … → p[m, i_m] → b, shape (m + 2, 2)."""
        chosen = self.guide_points[np.arange(self.guides), np.asarray(indices)]
        return np.vstack([self.a, chosen, self.b])


#: The least distance (px) between the two ends a corridor is built between.
MIN_ENDPOINT_DISTANCE = 2.0


def build_corridor(a, b, guides: int, points: int, halfwidth: float) -> Corridor:
    """Validate parameters and build the :class:`Corridor` between a and b."""
    a = np.asarray(a, dtype=np.float64).reshape(2)
    b = np.asarray(b, dtype=np.float64).reshape(2)
    guides = check_count(guides, "guides", 1)
    points = check_count(points, "points per guide", 2)
    halfwidth = check_halfwidth(halfwidth)
    if np.hypot(*(b - a)) < MIN_ENDPOINT_DISTANCE:
        raise BadParameter(f"endpoints a=({a[0]:g}, {a[1]:g}) and b=({b[0]:g}, {b[1]:g}) "
                           f"must be at least {MIN_ENDPOINT_DISTANCE:g} px apart")
    return Corridor(a, b, guides, points, halfwidth)


def real_number(value, what: str) -> float:
    """``value`` as a float if it is a real number (a bool is none), else
    :class:`BadParameter` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadParameter(f"{what} must be a number, got {value!r}")
    return float(value)


def check_count(value, what: str, least: int) -> int:
    """``value`` as an int if it is a whole number of at least ``least``, else
    :class:`BadParameter` naming ``what``."""
    number = real_number(value, what)
    if not (math.isfinite(number) and number == int(number) and number >= least):
        raise BadParameter(f"{what} must be an integer >= {least}, got {value}")
    return int(number)


def check_halfwidth(value) -> float:
    """The corridor half-width ``value`` (px) as a float if it is finite and > 0, else
    :class:`BadParameter`."""
    halfwidth = real_number(value, "halfwidth")
    if not math.isfinite(halfwidth):
        raise BadParameter(f"halfwidth must be a finite number of px, got {value}")
    if not halfwidth > 0:
        raise BadParameter(f"halfwidth must be > 0 px, got {value}")
    return halfwidth


def check_max_angle(max_angle_deg: float) -> float:
    """Return θ in radians after checking 0 < θ <= 180 degrees."""
    degrees = real_number(max_angle_deg, "max angle")
    if not (math.isfinite(degrees) and 0 < degrees <= 180):
        raise BadParameter(f"max angle must be in (0, 180] degrees, got {max_angle_deg}")
    return float(np.deg2rad(degrees))


def link_angles(corridor: Corridor, t: int) -> np.ndarray:
    """Direction angles (rad, relative to u) of links from node set t to t+1.

    Returns
    -------
    ndarray of shape (n_t, n_{t+1}), float64, values in (-π/2, π/2).
        Between two guides the angle depends only on the index difference k - j (offsets are
        evenly spaced), so it is looked up in a table of 2d - 1 angles.
    """
    if 0 < t < corridor.guides:
        return _guide_to_guide_angles(corridor, transposed=False)
    s_from = corridor.node_offsets(t)
    s_to = corridor.node_offsets(t + 1)
    return np.arctan2(s_to[None, :] - s_from[:, None], corridor.spacing)


def _guide_angle_table(corridor: Corridor) -> np.ndarray:
    """Angles of links between two guides by k − j + d − 1 (j on the first, k on the second
    guide): shape (2d − 1,)."""
    d = corridor.points
    step = 2.0 * corridor.halfwidth / (d - 1)
    return np.arctan2(np.arange(1 - d, d) * step, corridor.spacing)


def _guide_to_guide_angles(corridor: Corridor, transposed: bool) -> np.ndarray:
    """Angles of links between two guides, [from, to] (or [to, from] if transposed): (d, d)."""
    d = corridor.points
    table = _guide_angle_table(corridor)
    index = np.arange(d)
    difference = index[:, None] - index[None, :] if transposed else index[None, :] - index[:, None]
    return table[difference + d - 1]


def turn_is_admissible(turn: np.ndarray, max_angle_rad: float) -> np.ndarray:
    """The one admissibility rule shared by every backend: turn <= θ + ANGLE_TOLERANCE.

    ``turn`` (any shape, radians) gives a bool array of the same shape.
    """
    return turn <= max_angle_rad + ANGLE_TOLERANCE


@dataclass(frozen=True)
class Windows:
    """Admissible predecessor windows for every DP stage.

    ``lo[t-1][j, k]`` .. ``hi[t-1][j, k]`` (inclusive) is the range of i in node set t-1 for
    which the turn at node j of set t, between links (t-1: i → t: j) and (t: j → t+1: k), is
    admissible; lo > hi means none. Stages t = 1..m; arrays have shape (n_t, n_{t+1}), int32.
    Interior stages share one array (their geometry is identical).
    """

    lo: list[np.ndarray]
    hi: list[np.ndarray]
    max_angle_rad: float


@numba.njit(cache=True)
def _first_positions(beta, table, limit):
    """For each β, the first positions p of the non-decreasing ``table`` where
    β − table[p] < −limit (``below``) and where β − table[p] <= limit (``within``); both
    conditions, once true, stay true as p grows. Binary search, shapes (n_b,) int64."""
    n = table.size
    below = np.empty(beta.size, dtype=np.int64)
    within = np.empty(beta.size, dtype=np.int64)
    for b in range(beta.size):
        low, high = 0, n
        while low < high:
            middle = (low + high) // 2
            if beta[b] - table[middle] < -limit:
                high = middle
            else:
                low = middle + 1
        below[b] = low
        low, high = 0, n
        while low < high:
            middle = (low + high) // 2
            if beta[b] - table[middle] <= limit:
                high = middle
            else:
                low = middle + 1
        within[b] = low
    return below, within


@numba.njit(cache=True)
def _single_windows(alpha, beta, to_b, limit):
    """Windows after a single node (a): lo = [β − α < −limit], hi = [β − α <= limit] − 1;
    β of link j → k is ``beta[j]`` when ``to_b`` (one k), else ``beta[k − j + d − 1]``."""
    d = alpha.size
    cols = 1 if to_b else d
    lo = np.empty((d, cols), dtype=np.int32)
    hi = np.empty((d, cols), dtype=np.int32)
    for j in range(d):
        for k in range(cols):
            turn = (beta[j] if to_b else beta[k - j + d - 1]) - alpha[j]
            lo[j, k] = 1 if turn < -limit else 0
            hi[j, k] = 0 if turn <= limit else -1
    return lo, hi


@numba.njit(cache=True)
def _guide_windows(below, within, to_b, d):
    """Windows after a guide of d points, whose link i → j has the table angle at position
    j − i + d − 1: that falls with i, so the i below the window are those with
    j − i + d − 1 >= below(β), i.e. i <= j + d − 1 − below(β) (likewise hi with within).
    β of link j → k is entry j of ``below``/``within`` when ``to_b``, else entry k − j + d − 1."""
    cols = 1 if to_b else d
    lo = np.empty((d, cols), dtype=np.int32)
    hi = np.empty((d, cols), dtype=np.int32)
    for j in range(d):
        for k in range(cols):
            at = j if to_b else k - j + d - 1
            lo[j, k] = min(max(j + d - below[at], 0), d)
            hi[j, k] = min(max(j + d - within[at], 0), d) - 1
    return lo, hi


def _stage_windows(incoming: np.ndarray, beta: np.ndarray, to_b: bool, max_angle_rad: float):
    """Windows (lo, hi), each (d, d) int32 ((d, 1) when ``to_b``), of one stage.

    i is admissible iff |β − α_i| <= θ + tolerance, exactly :func:`turn_is_admissible`: i lies
    below the window iff β − α_i < −limit and above it iff β − α_i > limit, so lo counts the
    i below and hi + 1 the i not above.

    Parameters
    ----------
    incoming : ndarray of shape (d, 1), or (2d − 1,)
        Angle of the link arriving at node j from a (a column), or, between guides, the table
        of :func:`_guide_angle_table`: the link i → j has angle ``incoming[j − i + d − 1]``.
    beta : ndarray of shape (d,) when ``to_b``, else (2d − 1,)
        The angles of the links leaving node j: to b, ``beta[j]``; to the next guide's node k,
        the table entry ``beta[k − j + d − 1]``.

    Raises
    ------
    RuntimeError
        If the windows would grow along k (their bounds must not increase with β; below).
    """
    limit = max_angle_rad + ANGLE_TOLERANCE
    if not to_b and _falls(beta):
        _not_monotone()
    if incoming.ndim == 2:  # one node before: compare each turn directly
        return _single_windows(incoming[:, 0], beta, to_b, limit)
    below, within = _first_positions(beta, incoming, limit)
    if not to_b and (_falls(below) or _falls(within)):
        _not_monotone()
    return _guide_windows(below, within, to_b, (incoming.size + 1) // 2)


@numba.njit(cache=True)
def _falls(values):
    """Whether any entry of a 1-D array is smaller than the one before it."""
    for p in range(1, values.size):
        if values[p] < values[p - 1]:
            return True
    return False


def _not_monotone():
    """The GPU's backward step inverts the windows by binary search (gpu/dp.cu,
    ``reverse_windows``), which needs lo and hi non-increasing along k; they are when β and
    the positions found for it rise with k, which holds by construction: this guards a change."""
    raise RuntimeError("admissible windows are not non-increasing along k")


def admissible_windows(corridor: Corridor, max_angle_rad: float) -> Windows:
    """Compute the :class:`Windows` of every stage in float64.

    Between two guides link angles depend only on k − j, so they come from one table of
    2d − 1 angles, and the interior stages (t = 2..m-1), which share one geometry, are
    computed once. Every stage's lo and hi are non-increasing along k
    (``lo[t-1][j, k + 1] <= lo[t-1][j, k]``), which the GPU's backward step relies on; that
    is checked on the angles and positions they are made from (:func:`_stage_windows`).
    """
    m = corridor.guides
    between = _guide_angle_table(corridor)
    lo, hi = [], []
    interior = None
    for t in range(1, m + 1):
        if 1 < t < m and interior is not None:
            stage = interior
        else:
            incoming = link_angles(corridor, 0).T if t == 1 else between
            beta = link_angles(corridor, m)[:, 0] if t == m else between
            stage = _stage_windows(incoming, beta, t == m, max_angle_rad)
            interior = stage if 1 < t < m else None
        lo.append(stage[0])
        hi.append(stage[1])
    return Windows(lo, hi, max_angle_rad)
