"""Link integration: the score of every guide-to-guide link from a window's evidence planes.

The score of a link from p to q of length L is the midpoint rule with
K = max(2, ceil(L − SAMPLE_COUNT_SLACK)) samples: ``score = L/K · Σ_k term(x_k)``,
x_k = p + (k + ½)/K · (q − p). Planes are sampled with bilinear interpolation; samples outside
the image contribute 0. The term is the evidence's sampler (:data:`core.scores.SCALAR`,
``CROSS`` or ``SINE``) applied to the samples.
:func:`integrate_links` is the compiled version (CPU backend), :func:`integrate_links_reference`
its plain-numpy twin (reference backend, tests); the GPU's links.cu follows the same rule.
"""

from __future__ import annotations

import numpy as np

from core.guides import Windows
from core.jit import numba
from core.scores import CROSS, SCALAR, SINE, Evidence

#: A link of length L takes max(2, ceil(L − this)) samples: a length that is a whole number of
#: px but computed a rounding above it (60.00000000000001 where √(dx² + dy²) is taken with fused
#: operations, as the compiled kernel does) takes as many samples in every backend (gpu/links.cu
#: is compiled with it as LINK_SAMPLE_SLACK).
SAMPLE_COUNT_SLACK = 1e-9


def sample_count(length: float) -> int:
    """Samples of a link of ``length`` px: max(2, ceil(length − :data:`SAMPLE_COUNT_SLACK`))."""
    return max(2, int(np.ceil(length - SAMPLE_COUNT_SLACK)))


@numba.njit(cache=True, fastmath=True, inline="always")
def _term(sampler, v0, v1, vx, vy, tau):
    if sampler == SCALAR:
        return v0
    cross = abs(v0 * vy - v1 * vx)
    if sampler == CROSS:
        return cross
    magnitude = np.sqrt(v0 * v0 + v1 * v1)
    return cross / magnitude if magnitude > tau else 0.0


@numba.njit(cache=True, fastmath=True, inline="always")
def _sample(coefficients, lx, ly, two):
    """Bilinear sample of planes 0 (and 1) at window point (lx, ly) >= 0 from the per-pixel
    coefficients (rows, cols, 4, P) of :func:`bilinear_coefficients` (one cache line)."""
    ix = int(lx)
    iy = int(ly)
    fx, fy = lx - ix, ly - iy
    fxy = fx * fy
    # Unsigned indices: the compiler drops the negative-index wraparound code.
    cell = coefficients[numba.uint64(iy), numba.uint64(ix)]
    v0 = cell[0, 0] + fx * cell[1, 0] + fy * cell[2, 0] + fxy * cell[3, 0]
    v1 = 0.0
    if two:
        v1 = cell[0, 1] + fx * cell[1, 1] + fy * cell[2, 1] + fxy * cell[3, 1]
    return v0, v1


@numba.njit(cache=True, fastmath=True, inline="always")
def _link_total(coefficients, frame, link, sampler, tau, check):
    """Σ_k term(x_k) · L/K over one link = (px, py, dx, dy, K); frame = (col0, row0, width,
    height). ``sampler`` and ``check`` are constants at each call site, so the compiler emits
    one specialised loop per combination."""
    col0, row0, width, height = frame
    px, py, dx, dy, count = link
    length = np.sqrt(dx * dx + dy * dy)
    vx, vy = dx / length, dy / length
    step = 1.0 / count
    total = 0.0
    for k in range(count):
        f = (k + 0.5) * step
        x, y = px + f * dx, py + f * dy
        if check and (x < 0.0 or y < 0.0 or x > width - 1 or y > height - 1):
            continue
        v0, v1 = _sample(coefficients, x - col0, y - row0, sampler != SCALAR)
        total += _term(sampler, v0, v1, vx, vy, tau)
    return total * length * step


@numba.njit(cache=True, parallel=True, fastmath=True)
def _integrate_links(coefficients, frame, sampler, tau, starts, ends, useful):
    """Link scores of S stages at once: starts (S, n0, 2), ends (S, n1, 2) → (S, n0, n1).
    ``coefficients`` are the planes' :func:`bilinear_coefficients`, frame = (col0, row0,
    width, height); ``useful`` (S, n0, n1) bool, or None for all: the links to score, the
    others are −inf."""
    width, height = frame[2], frame[3]
    stages, n0, n1 = starts.shape[0], starts.shape[1], ends.shape[1]
    out = np.empty((stages, n0, n1))
    for task in numba.prange(stages * n0):
        s, i = task // n0, task % n0
        px, py = starts[s, i, 0], starts[s, i, 1]
        start_inside = 0.0 <= px <= width - 1 and 0.0 <= py <= height - 1
        for j in range(n1):
            if useful is not None and not useful[s, i, j]:
                out[s, i, j] = -np.inf
                continue
            qx, qy = ends[s, j, 0], ends[s, j, 1]
            dx, dy = qx - px, qy - py
            count = max(2, int(np.ceil(np.sqrt(dx * dx + dy * dy) - SAMPLE_COUNT_SLACK)))
            # A segment with both ends in the (convex) image has every sample inside it.
            inside = start_inside and 0.0 <= qx <= width - 1 and 0.0 <= qy <= height - 1
            link = (px, py, dx, dy, count)
            if sampler == SCALAR:
                total = (_link_total(coefficients, frame, link, SCALAR, tau, False) if inside
                         else _link_total(coefficients, frame, link, SCALAR, tau, True))
            elif sampler == CROSS:
                total = (_link_total(coefficients, frame, link, CROSS, tau, False) if inside
                         else _link_total(coefficients, frame, link, CROSS, tau, True))
            else:
                total = (_link_total(coefficients, frame, link, SINE, tau, False) if inside
                         else _link_total(coefficients, frame, link, SINE, tau, True))
            out[s, i, j] = total
    return out


def integrate_links(evidence: Evidence, starts: np.ndarray, ends: np.ndarray,
                    coefficients: np.ndarray | None = None,
                    useful: np.ndarray | None = None) -> np.ndarray:
    """Scores of all links from ``starts`` to ``ends`` (or of the ``useful`` ones).

    Parameters
    ----------
    evidence : Evidence
    starts : ndarray of shape (n0, 2), or (S, n0, 2) for S stages at once
    ends : ndarray of shape (n1, 2), or (S, n1, 2)
    coefficients : ndarray of shape (rows, cols, 4, P), optional
        The evidence's :func:`bilinear_coefficients`, when the caller has them.
    useful : ndarray of bool of the result's shape, optional
        The links to score (:func:`useful_links`); the others are −inf. Default: all.

    Returns
    -------
    ndarray of shape (n0, n1), or (S, n0, n1), float64
    """
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    batched = starts.ndim == 3
    if coefficients is None:
        coefficients = bilinear_coefficients(evidence)
    if useful is not None:
        useful = np.ascontiguousarray(useful if batched else useful[None], dtype=np.bool_)
    frame = (float(evidence.origin[0]), float(evidence.origin[1]),
             float(evidence.image_size[0]), float(evidence.image_size[1]))
    out = _integrate_links(coefficients, frame, evidence.sampler, evidence.tau,
                           np.ascontiguousarray(starts if batched else starts[None]),
                           np.ascontiguousarray(ends if batched else ends[None]), useful)
    return out if batched else out[0]


@numba.njit(cache=True)
def _mark_useful(lo, hi, after, after_lo, after_hi, useful):
    """One stage of :func:`useful_links`: ``useful[i, j]`` (the stage's links i → j) where the
    link's window ``lo[i, j]..hi[i, j]`` is not empty and i lies in the span of the windows
    ``after_lo[j, k]..after_hi[j, k]`` of the next stage's useful links j → k (``after``;
    their windows are not empty)."""
    n_in, n_mid = useful.shape
    first = np.full(n_mid, n_in, dtype=np.int32)
    last = np.full(n_mid, -1, dtype=np.int32)
    for j in range(n_mid):
        for k in range(after.shape[1]):
            if after[j, k]:
                first[j] = min(first[j], after_lo[j, k])
                last[j] = max(last[j], after_hi[j, k])
    for i in range(n_in):
        for j in range(n_mid):
            useful[i, j] = (first[j] <= i) & (i <= last[j]) & (lo[i, j] <= hi[i, j])


def useful_links(windows: Windows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The links whose scores the DP (:func:`core.dp.solve_fast`) reads for its result (path,
    score, link scores along the path): the others may score anything (−inf, NaN) alike.

    The DP's value of a link is its score plus the best value in its window, so the result
    reads the links that some admissible path continues to b (the others lie in no window of
    those), and of them those whose window is not empty (the others are −inf whatever their
    score). Marked from b back to a: a link whose window is not empty and whose start lies in
    the span of the windows of the marked links from its end (a superset of those continued;
    the same where those windows overlap, as a rule).

    Parameters
    ----------
    windows : Windows
        The DP's windows: m guides of n points.

    Returns
    -------
    first : ndarray of shape (1, n), bool
        Links a → guide 1.
    between : ndarray of shape (m − 1, n, n), bool
        Links guide t → guide t + 1, t = 1..m − 1.
    last : ndarray of shape (n, 1), bool
        Links guide m → b.
    """
    lo, hi = windows.lo, windows.hi
    points = lo[0].shape[0]
    between = np.empty((len(lo) - 1, points, points), dtype=np.bool_)
    useful = [np.empty((1, points), dtype=np.bool_), *between, lo[-1] <= hi[-1]]
    start = np.zeros((1, points), dtype=np.int32)  # links from a: no window, never empty
    for t in range(len(lo) - 1, -1, -1):
        _mark_useful(lo[t - 1] if t else start, hi[t - 1] if t else start, useful[t + 1],
                     lo[t], hi[t], useful[t])
    return useful[0], between, useful[-1]


def bilinear_coefficients(evidence: Evidence) -> np.ndarray:
    """Every pixel's bilinear patch of every plane, so that a sample reads one cache line:
    v(x + fx, y + fy) = c0 + fx·c1 + fy·c2 + fx·fy·c3 with c0 = p(x, y), c1 = p(x+1, y) − c0,
    c2 = p(x, y+1) − c0, c3 = c0 − p(x+1, y) − p(x, y+1) + p(x+1, y+1). Shape (rows, cols, 4, P),
    float64 (exact for float32 planes). Beyond the last row and column the plane reads 0 (with
    weight 0 for samples on the image's far edge)."""
    planes = evidence.planes
    padded = np.zeros((planes.shape[1] + 1, planes.shape[2] + 1, planes.shape[0]))
    padded[:-1, :-1] = planes.transpose(1, 2, 0)
    here, right = padded[:-1, :-1], padded[:-1, 1:]
    below, diagonal = padded[1:, :-1], padded[1:, 1:]
    return np.ascontiguousarray(np.stack(
        [here, right - here, below - here, here - right - below + diagonal], axis=2))


def _bilinear_reference(evidence: Evidence, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bilinear samples of every plane at image points; 0 outside the image. Shape (P, *x.shape)."""
    planes = evidence.planes
    width, height = evidence.image_size
    inside = (x >= 0) & (y >= 0) & (x <= width - 1) & (y <= height - 1)
    lx, ly = x - evidence.origin[0], y - evidence.origin[1]
    ix = np.clip(np.floor(lx).astype(int), 0, planes.shape[2] - 2)
    iy = np.clip(np.floor(ly).astype(int), 0, planes.shape[1] - 2)
    fx, fy = lx - ix, ly - iy
    values = (planes[:, iy, ix] * (1 - fx) * (1 - fy) + planes[:, iy, ix + 1] * fx * (1 - fy)
              + planes[:, iy + 1, ix] * (1 - fx) * fy + planes[:, iy + 1, ix + 1] * fx * fy)
    return np.where(inside, values, 0.0)


def integrate_links_reference(evidence: Evidence, starts: np.ndarray,
                              ends: np.ndarray) -> np.ndarray:
    """Plain-numpy twin of :func:`integrate_links` (one link at a time; for tests).

    Parameters
    ----------
    evidence : Evidence
    starts : ndarray of shape (n0, 2)
    ends : ndarray of shape (n1, 2)

    Returns
    -------
    ndarray of shape (n0, n1), float64
    """
    out = np.empty((len(starts), len(ends)))
    for i, p in enumerate(np.asarray(starts, dtype=np.float64)):
        for j, q in enumerate(np.asarray(ends, dtype=np.float64)):
            delta = q - p
            length = float(np.hypot(*delta))
            count = sample_count(length)
            f = (np.arange(count) + 0.5) / count
            values = _bilinear_reference(evidence, p[0] + f * delta[0], p[1] + f * delta[1])
            vx, vy = delta / length
            if evidence.sampler == SCALAR:
                terms = values[0]
            else:
                cross = np.abs(values[0] * vy - values[1] * vx)
                if evidence.sampler == CROSS:
                    terms = cross
                else:
                    magnitude = np.hypot(values[0], values[1])
                    terms = np.where(magnitude > evidence.tau,
                                     cross / np.maximum(magnitude, 1e-30), 0.0)
            out[i, j] = terms.sum() * length / count
    return out
