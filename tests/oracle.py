"""Brute-force oracle (docs/ENGINE.md): enumerate all d^m polylines, check turns in float64.

Turns are measured from the polyline's own (x, y) points with atan2(cross, dot), a formula
independent of the engine's local-frame angles.
"""

from __future__ import annotations

import itertools

import numpy as np

#: The oracle's own slack on the angle limit: a turn is admissible when turn <= θ + this. It is
#: the oracle's, not the engine's (core.guides.ANGLE_TOLERANCE), so that an engine whose
#: tolerance is loosened is caught (tests/test_dp_oracle.py holds the engine's to at most this).
ANGLE_TOLERANCE = 1e-9


def turn_angle(p, q, r) -> float:
    """Angle in radians between directions q - p and r - q."""
    u, v = np.subtract(q, p), np.subtract(r, q)
    return abs(float(np.arctan2(u[0] * v[1] - u[1] * v[0], u @ v)))


def brute_force(corridor, links, max_angle_rad):
    """Best (score, indices) over all admissible polylines, or (-inf, None) if none.

    links : list of m+1 arrays, links[t] of shape (n_t, n_{t+1}).
    Returns every optimal index tuple too, to judge ties.
    """
    m, d = corridor.guides, corridor.points
    points = corridor.guide_points
    best, winners = -np.inf, []
    for choice in itertools.product(range(d), repeat=m):
        nodes = [corridor.a, *(points[t, i] for t, i in enumerate(choice)), corridor.b]
        if any(turn_angle(nodes[t - 1], nodes[t], nodes[t + 1]) > max_angle_rad + ANGLE_TOLERANCE
               for t in range(1, m + 1)):
            continue
        path = [0, *choice, 0]
        score = sum(links[t][path[t], path[t + 1]] for t in range(m + 1))
        if score > best + 1e-9:
            best, winners = score, [choice]
        elif abs(score - best) <= 1e-9:
            winners.append(choice)
    return best, winners


def path_score(problem, indices):
    """Score (float64, from the problem's links) of the path through ``indices`` (m,), and
    whether its turns are admissible by the problem's windows."""
    nodes = [0, *np.asarray(indices).tolist(), 0]
    score = sum(problem.links[t][nodes[t], nodes[t + 1]] for t in range(len(problem.links)))
    admissible = all(problem.windows.lo[t - 1][nodes[t], nodes[t + 1]] <= nodes[t - 1]
                     <= problem.windows.hi[t - 1][nodes[t], nodes[t + 1]]
                     for t in range(1, len(nodes) - 1))
    return score, admissible


#: How far (relative) a float32 answer's float64 score may fall below the optimum: float32 scores
#: carry ~1e-7 relative rounding, so paths within rounding of the best may win.
FLOAT32_SLACK = 1e-5


def assert_near_optimal(problem, got, best, slack=FLOAT32_SLACK):
    """``got`` (a DP solution) is admissible, its float64 score lies within ``slack``
    (relative) below ``best``, and its reported score matches its path's."""
    score, admissible = path_score(problem, got.indices)
    assert admissible
    allowed = slack * max(1.0, abs(best))
    assert best - allowed <= score <= best + 1e-9 * max(1.0, abs(best))
    assert abs(got.score - score) <= slack * max(1.0, abs(score))


def random_problem(rng, m, d, max_angle_deg):
    """A corridor with random geometry and random link scores, with its windows."""
    from core.dp import DPProblem
    from core.guides import admissible_windows, build_corridor

    a = rng.uniform(0, 100, 2)
    angle = rng.uniform(0, 2 * np.pi)
    length = rng.uniform(5, 80)
    b = a + length * np.array([np.cos(angle), np.sin(angle)])
    corridor = build_corridor(a, b, m, d, rng.uniform(0.5, 1.5) * length / (m + 1))
    sizes = [1] + [d] * m + [1]
    links = [rng.normal(size=(sizes[t], sizes[t + 1])) for t in range(m + 1)]
    theta = np.deg2rad(max_angle_deg)
    return DPProblem(corridor, admissible_windows(corridor, theta), links)
