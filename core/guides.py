"""Guides perpendicular to [a, b] and the turning-angle admissibility windows.

Geometry (docs/ENGINE.md): u = (b-a)/|b-a|, n = (-u_y, u_x). Guide t = 1..m is centred at
c_t = a + t/(m+1)·(b-a) and holds d points p[t, i] = c_t + s_i·n, s_i = -w + 2w·i/(d-1).

The DP runs over *node sets* G_0 = {a}, G_1..G_m (the guides), G_{m+1} = {b}. In the local
frame (along u, across n) node set t sits at along = t·h (h = |b-a|/(m+1)) and across = the
offsets of its points (0 for a and b), so turn angles are computed exactly from offsets.
"""

from __future__ import annotations

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
        """s_i, shape (d,): across-offsets of the points on every guide."""
        return np.linspace(-self.halfwidth, self.halfwidth, self.points)

    @cached_property
    def guide_points(self) -> np.ndarray:
        """p[t, i], shape (m, d, 2): guide points (x, y); guide t-1 in row t-1."""
        t = np.arange(1, self.guides + 1)[:, None, None]
        centres = self.a + (t / (self.guides + 1)) * (self.b - self.a)
        return centres + self.offsets[None, :, None] * self.normal

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


def build_corridor(a, b, guides: int, points: int, halfwidth: float) -> Corridor:
    """Validate parameters and build the :class:`Corridor` between a and b."""
    a = np.asarray(a, dtype=np.float64).reshape(2)
    b = np.asarray(b, dtype=np.float64).reshape(2)
    if int(guides) != guides or guides < 1:
        raise BadParameter(f"guides must be an integer >= 1, got {guides}")
    if int(points) != points or points < 2:
        raise BadParameter(f"points per guide must be an integer >= 2, got {points}")
    if not np.isfinite(halfwidth) or halfwidth <= 0:
        raise BadParameter(f"halfwidth must be > 0 px, got {halfwidth}")
    if np.hypot(*(b - a)) < 2:
        raise BadParameter(f"endpoints a=({a[0]:g}, {a[1]:g}) and b=({b[0]:g}, {b[1]:g}) "
                           "must be at least 2 px apart")
    return Corridor(a, b, int(guides), int(points), float(halfwidth))


def check_max_angle(max_angle_deg: float) -> float:
    """Return θ in radians after checking 0 < θ <= 180 degrees."""
    if not np.isfinite(max_angle_deg) or not 0 < max_angle_deg <= 180:
        raise BadParameter(f"max angle must be in (0, 180] degrees, got {max_angle_deg}")
    return float(np.deg2rad(max_angle_deg))


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


def _guide_to_guide_angles(corridor: Corridor, transposed: bool) -> np.ndarray:
    """Angles of links between two guides, [from, to] (or [to, from] if transposed): (d, d)."""
    d = corridor.points
    step = 2.0 * corridor.halfwidth / (d - 1)
    table = np.arctan2(np.arange(1 - d, d) * step, corridor.spacing)
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


def _stage_windows_kernel(incoming_by_node, outgoing, limit, lo, hi, j):
    """Windows of node j (row j of lo and hi): two pointers, see :func:`_stage_windows`."""
    n_in = incoming_by_node.shape[1]
    n_out = outgoing.shape[1]
    alpha = incoming_by_node[j]  # decreasing in i
    first, last = 0, -1
    for k in range(n_out - 1, -1, -1):  # β falls with k: both ends move up in i
        beta = outgoing[j, k]
        while first < n_in and beta - alpha[first] < -limit:
            first += 1
        while last + 1 < n_in and beta - alpha[last + 1] <= limit:
            last += 1
        lo[j, k] = first
        hi[j, k] = last


_stage_windows_row = numba.njit(cache=True, inline="always")(_stage_windows_kernel)


@numba.njit(cache=True, parallel=True)
def _stage_windows_compiled(incoming_by_node, outgoing, limit):
    n_mid = incoming_by_node.shape[0]
    n_out = outgoing.shape[1]
    lo = np.empty((n_mid, n_out), dtype=np.int32)
    hi = np.empty((n_mid, n_out), dtype=np.int32)
    for j in numba.prange(n_mid):
        _stage_windows_row(incoming_by_node, outgoing, limit, lo, hi, j)
    return lo, hi


@numba.njit(cache=True)
def _stage_windows_serial(incoming_by_node, outgoing, limit):
    """:func:`_stage_windows_compiled` on one thread (small stages: no thread-pool wake-up)."""
    n_mid = incoming_by_node.shape[0]
    n_out = outgoing.shape[1]
    lo = np.empty((n_mid, n_out), dtype=np.int32)
    hi = np.empty((n_mid, n_out), dtype=np.int32)
    for j in range(n_mid):
        _stage_windows_row(incoming_by_node, outgoing, limit, lo, hi, j)
    return lo, hi


#: Stages with fewer pointer steps (n_t · (n_{t-1} + n_{t+1})) than this run on one thread.
SERIAL_STAGE_STEPS = 1 << 17


def _stage_windows(incoming_by_node: np.ndarray, outgoing: np.ndarray, max_angle_rad: float):
    """Windows of one stage from the angles of links arriving at each node, [j, i] of shape
    (n_t, n_{t-1}), and of links leaving it, [j, k] of shape (n_t, n_{t+1}).

    i is admissible iff |β − α_i| <= θ + tolerance, exactly :func:`turn_is_admissible`: i lies
    below the window iff β − α_i < −limit and above it iff β − α_i > limit. Two pointers walk
    each column once (O(n_in + n_out) per j), since α falls with i and β with k.
    """
    n_mid, n_in = incoming_by_node.shape
    small = n_mid * (n_in + outgoing.shape[1]) < SERIAL_STAGE_STEPS
    compiled = _stage_windows_serial if small else _stage_windows_compiled
    return compiled(np.ascontiguousarray(incoming_by_node), np.ascontiguousarray(outgoing),
                    max_angle_rad + ANGLE_TOLERANCE)


def _check_monotone(t: int, lo: np.ndarray, hi: np.ndarray) -> None:
    """Raise if a stage's windows grow along k: the GPU's backward step inverts them by binary
    search (gpu/dp.cu, ``reverse_windows``), which needs lo and hi non-increasing along k. The
    two pointers of :func:`_stage_windows` give that by construction; this guards a change."""
    if np.any(lo[:, 1:] > lo[:, :-1]) or np.any(hi[:, 1:] > hi[:, :-1]):
        raise RuntimeError(f"admissible windows of stage {t} are not non-increasing along k")


def admissible_windows(corridor: Corridor, max_angle_rad: float) -> Windows:
    """Compute the :class:`Windows` of every stage in float64.

    Links between two guides have the same angles at every t, so that matrix is computed once,
    and so are the windows of the interior stages (t = 2..m-1). Every stage's lo and hi are
    checked to be non-increasing along k (``lo[t-1][j, k + 1] <= lo[t-1][j, k]``), which the
    GPU's backward step relies on.
    """
    m = corridor.guides
    leaving = _guide_to_guide_angles(corridor, transposed=False) if m > 1 else None
    arriving = _guide_to_guide_angles(corridor, transposed=True) if m > 1 else None

    def angles(t: int, transposed: bool) -> np.ndarray:
        if 0 < t < m:
            return arriving if transposed else leaving
        return link_angles(corridor, t).T if transposed else link_angles(corridor, t)

    lo, hi = [], []
    interior = None
    for t in range(1, m + 1):
        if 1 < t < m and interior is not None:
            stage = interior
        else:
            stage = _stage_windows(angles(t - 1, True), angles(t, False), max_angle_rad)
            _check_monotone(t, *stage)
            interior = stage if 1 < t < m else None
        lo.append(stage[0])
        hi.append(stage[1])
    return Windows(lo, hi, max_angle_rad)
