"""Every backend's DP against the brute-force oracle on many random tiny cases.

The reference and CPU backends run everywhere; the GPU ones (both DP steps, float64 and
float32) carry the ``gpu`` marker and skip without a usable device (``conftest.py``). A float32
answer may pick another path where two score within float32 rounding of each other.
"""

import numpy as np
import pytest

from core.backend import CpuBackend, ReferenceBackend
from core.dp import solve_fast, solve_reference
from core.errors import NoAdmissiblePath
from tests.oracle import ANGLE_TOLERANCE, assert_near_optimal, brute_force, random_problem

GPU = pytest.mark.gpu


GPU_BACKENDS = [pytest.param(f"gpu-{method}-{precision}", marks=GPU)
                for method in ("auto", "reduce") for precision in ("float64", "float32")]


@pytest.fixture(scope="module", params=["reference", "cpu", *GPU_BACKENDS])
def backend(request):
    """A backend whose ``solve(problem)`` is held to the oracle (the GPU in both DP steps and
    both precisions)."""
    if request.param.startswith("gpu"):
        from gpu.backend import GpuBackend

        _, method, precision = request.param.split("-")
        return GpuBackend.create(method=method, precision=precision)
    return {"reference": ReferenceBackend, "cpu": CpuBackend}[request.param]()


@pytest.mark.parametrize("max_angle", [5, 10, 30, 60, 180])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_matches_brute_force(backend, max_angle, m):
    """The optimum's score, and a path among the optimal ones; infeasible cases raise."""
    rng = np.random.default_rng(1000 * m + max_angle)
    checked = infeasible = 0
    for d in range(2, 8 if m <= 3 else 6):
        for _ in range(4):
            problem = random_problem(rng, m, d, max_angle)
            best, winners = brute_force(problem.corridor, problem.links, np.deg2rad(max_angle))
            if not winners:
                with pytest.raises(NoAdmissiblePath):
                    backend.solve(problem)
                infeasible += 1
                continue
            solution = backend.solve(problem)
            if getattr(backend, "precision", "float64") == "float32":  # near-ties may flip
                assert_near_optimal(problem, solution, best)
            else:
                assert solution.score == pytest.approx(best, abs=1e-9)
                assert tuple(solution.indices.tolist()) in winners
            checked += 1
    assert checked >= 8, (checked, infeasible)  # fewest feasible cases of a parameter set


def test_unconstrained_equals_plain_maximum():
    """At θ = 180° every polyline is admissible: the DP must find the unconstrained optimum."""
    rng = np.random.default_rng(7)
    problem = random_problem(rng, 3, 5, 180)
    best, _ = brute_force(problem.corridor, problem.links, np.pi)
    links = problem.links
    exhaustive = max(links[0][0, i] + links[1][i, j] + links[2][j, k] + links[3][k, 0]
                     for i in range(5) for j in range(5) for k in range(5))
    assert best == pytest.approx(exhaustive)
    assert solve_fast(problem).score == pytest.approx(exhaustive)


def test_fast_equals_reference_on_larger_random_cases():
    rng = np.random.default_rng(11)
    for m, d, theta in [(5, 40, 20), (8, 64, 45), (3, 101, 5), (12, 30, 90)]:
        problem = random_problem(rng, m, d, theta)  # every one admits a path
        expected, got = solve_reference(problem), solve_fast(problem)
        assert got.score == pytest.approx(expected.score, rel=1e-12)
        np.testing.assert_array_equal(got.indices, expected.indices)


def test_windows_that_grow_along_k_are_refused(monkeypatch):
    """The GPU inverts the windows by binary search: admissible_windows refuses any that are
    not non-increasing along k instead of handing them on."""
    from core import guides

    rng = np.random.default_rng(5)
    corridor = random_problem(rng, 3, 6, 30).corridor
    guides.admissible_windows(corridor, np.deg2rad(30))  # as computed: accepted

    def falling(beta, table, limit):  # positions that fall as β rises: windows grow along k
        positions = np.arange(beta.size, dtype=np.int64)[::-1].copy()
        return positions, positions

    monkeypatch.setattr(guides, "_first_positions", falling)
    with pytest.raises(RuntimeError, match="not non-increasing along k"):
        guides.admissible_windows(corridor, np.deg2rad(30))


def test_the_engine_admits_no_more_than_the_oracle():
    """The engine's slack on the angle limit is at most the oracle's: a loosened tolerance
    would admit turns the oracle refuses, too rarely for the random cases to meet one."""
    from core import guides

    assert 0 <= guides.ANGLE_TOLERANCE <= ANGLE_TOLERANCE
    theta = np.deg2rad(30.0)
    assert guides.turn_is_admissible(np.array(theta + ANGLE_TOLERANCE), theta)
    assert not guides.turn_is_admissible(np.array(theta + 2 * ANGLE_TOLERANCE), theta)


def _turns(before, at, after):
    """Turn angles (rad) at ``at`` (2,) between the directions from each of ``before`` (n, 2)
    and to each of ``after`` (k, 2): shape (n, k), from the image-frame points with
    atan2(cross, dot), independently of the engine's local-frame angles."""
    u = at[None, :] - before  # (n, 2) incoming directions
    v = after - at[None, :]  # (k, 2) outgoing directions
    cross = u[:, None, 0] * v[None, :, 1] - u[:, None, 1] * v[None, :, 0]
    dot = u[:, None, 0] * v[None, :, 0] + u[:, None, 1] * v[None, :, 1]
    return np.abs(np.arctan2(cross, dot))


@pytest.mark.parametrize("max_angle_deg", [5.0, 30.0, 90.0, 180.0])
def test_windows_are_exactly_the_admissible_turns(max_angle_deg):
    """lo..hi of every (j, k) is the set of predecessors i whose turn, measured here from the
    corridor's points (not by the engine's turn_is_admissible), is at most θ plus the oracle's
    tolerance (lo > hi when none)."""
    from core.guides import admissible_windows, build_corridor

    rng = np.random.default_rng(int(max_angle_deg))
    theta = np.deg2rad(max_angle_deg)
    some = none = 0
    for _ in range(20):
        m, d = int(rng.integers(1, 5)), int(rng.integers(2, 25))
        corridor = build_corridor(rng.uniform(0, 50, 2), rng.uniform(60, 200, 2), m, d,
                                  float(rng.uniform(0.5, 80)))
        windows = admissible_windows(corridor, theta)
        nodes = [corridor.a[None, :], *corridor.guide_points, corridor.b[None, :]]
        for t in range(1, m + 1):
            lo, hi = windows.lo[t - 1], windows.hi[t - 1]
            assert lo.shape == hi.shape == (len(nodes[t]), len(nodes[t + 1]))
            for j, at in enumerate(nodes[t]):
                turns = _turns(nodes[t - 1], at, nodes[t + 1])  # (i, k)
                for k in range(len(nodes[t + 1])):
                    allowed = np.flatnonzero(turns[:, k] <= theta + ANGLE_TOLERANCE)
                    if allowed.size:
                        assert (lo[j, k], hi[j, k]) == (allowed[0], allowed[-1])
                        assert allowed.size == allowed[-1] - allowed[0] + 1
                        some += 1
                    else:
                        assert lo[j, k] > hi[j, k]
                        none += 1
    assert some > 0
    if max_angle_deg < 90:
        assert none > 0  # tight limits refuse some turns: the check saw both kinds
