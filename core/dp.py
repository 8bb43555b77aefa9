"""The pair-state dynamic programme (docs/ENGINE.md) on the CPU: reference and fast.

Node sets G_0 = {a}, G_1..G_m, G_{m+1} = {b}; links[t] has shape (n_t, n_{t+1}).
State F_t[j, k] is the best score of a path ending with the link (G_t: j → G_{t+1}: k):

    F_0 = links[0]
    F_t[j, k] = links[t][j, k] + max_{i ∈ window_t[j, k]} F_{t-1}[i, j],   t = 1..m

and the answer is max_j F_m[j, 0]. The fast version slides a monotone deque over i, since the
windows move monotonically with k (O(d²) per stage instead of O(d³)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import NoAdmissiblePath, TraceError
from core.guides import Corridor, Windows, link_angles, turn_is_admissible
from core.jit import numba


@dataclass(frozen=True)
class DPProblem:
    """links : list of m+1 arrays, links[t] of shape (n_t, n_{t+1}), float."""

    corridor: Corridor
    windows: Windows
    links: list


@dataclass(frozen=True)
class DPSolution:
    """indices : (m,) int, chosen point on each guide; score : total of the m+1 link scores."""

    indices: np.ndarray
    score: float


def _finish(final: np.ndarray, arguments: list[np.ndarray], max_angle_rad: float) -> DPSolution:
    """Pick the best last state and backtrack through the per-stage argmax tables.

    Raises
    ------
    TraceError
        If the best is NaN (evidence that is not finite).
    NoAdmissiblePath
        If no state is reachable (every one is −inf).
    """
    last = int(np.argmax(final))  # the first NaN, where there is one
    if np.isnan(final[last]):
        raise TraceError("the path search met scores that are not numbers (NaN): the score "
                         "kind's evidence on this corridor is not finite, so no line can be "
                         "chosen")
    if not np.isfinite(final[last]):
        raise NoAdmissiblePath(
            f"no polyline turns by at most {np.rad2deg(max_angle_rad):.4g}° at every guide; "
            "raise the max angle, add guides or widen the corridor")
    path = [0, last]  # x_{m+1} = b, x_m
    for arg in reversed(arguments[1:]):
        path.append(int(arg[path[-1], path[-2]]))
    return DPSolution(np.array(path[-2:0:-1], dtype=np.int64), float(final[last]))


def solve_reference(problem: DPProblem) -> DPSolution:
    """Obviously-correct numpy DP: admissibility from turn angles directly, O(d³) per stage."""
    corridor, limit = problem.corridor, problem.windows.max_angle_rad
    best = np.asarray(problem.links[0], dtype=np.float64)
    arguments = [None]
    for t in range(1, corridor.guides + 1):
        incoming, outgoing = link_angles(corridor, t - 1), link_angles(corridor, t)
        link = np.asarray(problem.links[t], dtype=np.float64)
        scores = np.empty_like(link)
        argument = np.empty(link.shape, dtype=np.int64)
        for j in range(link.shape[0]):
            turn = np.abs(outgoing[j][None, :] - incoming[:, j][:, None])  # (n_{t-1}, n_{t+1})
            candidates = np.where(turn_is_admissible(turn, limit), best[:, j][:, None], -np.inf)
            argument[j] = candidates.argmax(axis=0)
            scores[j] = link[j] + candidates.max(axis=0)
        best = scores
        arguments.append(argument)
    return _finish(best[:, 0], arguments, limit)


#: Columns of the previous stage gathered together (one cache line of float64 per row read).
COLUMN_BLOCK = 8


@numba.njit(cache=True, parallel=True)
def _stage_sliding_max(previous, link, lo, hi):
    """One DP stage: returns (scores, argmax), both of shape link.shape."""
    n_in = previous.shape[0]
    n_mid, n_out = link.shape
    scores = np.empty((n_mid, n_out))
    argument = np.empty((n_mid, n_out), dtype=np.int32)
    for block in numba.prange((n_mid + COLUMN_BLOCK - 1) // COLUMN_BLOCK):
        j0 = block * COLUMN_BLOCK
        j1 = min(j0 + COLUMN_BLOCK, n_mid)
        columns = np.empty((j1 - j0, n_in))
        for i in range(n_in):
            for j in range(j0, j1):
                columns[j - j0, i] = previous[i, j]
        queue = np.empty(n_in, dtype=np.int32)
        for j in range(j0, j1):
            column = columns[j - j0]
            head, tail, pushed = 0, 0, 0
            for k in range(n_out - 1, -1, -1):  # windows move to larger i as k falls
                first, last = lo[j, k], hi[j, k]
                if first > last:
                    scores[j, k] = -np.inf
                    argument[j, k] = -1
                    continue
                while pushed <= last:
                    value = column[pushed]
                    while tail > head and column[queue[tail - 1]] < value:
                        tail -= 1
                    queue[tail] = pushed
                    tail += 1
                    pushed += 1
                while queue[head] < first:
                    head += 1
                best = queue[head]
                scores[j, k] = link[j, k] + column[best]
                argument[j, k] = best
    return scores, argument


@numba.njit(cache=True, parallel=True)
def _stage_column_max(previous, link):
    """A stage whose every window spans all predecessors (e.g. θ = 180°): one column maximum
    per node instead of a sliding window. Returns (scores, argmax) of shape link.shape."""
    n_mid, n_out = link.shape
    best = np.zeros(n_mid, dtype=np.int32)
    for i in range(1, previous.shape[0]):  # row by row: contiguous reads
        for j in range(n_mid):
            if previous[i, j] > previous[best[j], j]:
                best[j] = i
    scores = np.empty((n_mid, n_out))
    argument = np.empty((n_mid, n_out), dtype=np.int32)
    for j in numba.prange(n_mid):
        for k in range(n_out):
            scores[j, k] = link[j, k] + previous[best[j], j]
            argument[j, k] = best[j]
    return scores, argument


def _spans_everything(lo: np.ndarray, hi: np.ndarray, predecessors: int) -> bool:
    return bool(lo.max() == 0 and hi.min() == predecessors - 1)


def solve_fast(problem: DPProblem) -> DPSolution:
    """Compiled DP with sliding-window maxima: O(d²) per stage, O(d²) memory per stage."""
    best = np.ascontiguousarray(problem.links[0], dtype=np.float64)
    arguments = [None]
    full = {}  # interior stages share their window arrays: test each array once
    for t in range(1, problem.corridor.guides + 1):
        lo, hi = problem.windows.lo[t - 1], problem.windows.hi[t - 1]
        link = np.ascontiguousarray(problem.links[t], dtype=np.float64)
        if id(lo) not in full:
            full[id(lo)] = _spans_everything(lo, hi, best.shape[0])
        if full[id(lo)]:
            best, argument = _stage_column_max(best, link)
        else:
            best, argument = _stage_sliding_max(best, link, lo, hi)
        arguments.append(argument)
    return _finish(best[:, 0], arguments, problem.windows.max_angle_rad)
