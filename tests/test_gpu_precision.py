"""Link scores and DP in float32 on the device against the CPU backend (against the oracle:
tests/test_dp_oracle.py).

float32 scores carry ~1e-7 relative rounding, so where two paths score within rounding of each
other the device may pick either: a float32 answer must be admissible and score, in float64,
within 1e-5 (relative) of the optimum. Needs a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.backend import CpuBackend
from core.dp import solve_fast
from core.errors import NoAdmissiblePath
from core.guides import build_corridor
from core.scores import CROSS, SCALAR, SINE, Evidence
from tests.oracle import FLOAT32_SLACK, assert_near_optimal, random_problem

pytestmark = pytest.mark.gpu

@pytest.fixture(scope="module", params=["auto", "reduce"])
def backend(request):
    from gpu.backend import GpuBackend

    return GpuBackend.create(method=request.param, precision="float32")


def _assert_near_optimal(problem, got, best):
    assert_near_optimal(problem, got, best, FLOAT32_SLACK)


def test_backend_reports_its_precision(backend):
    assert backend.precision == "float32"
    assert "float32" in backend.description


def test_auto_precision_follows_the_float64_rate():
    from gpu.backend import GpuBackend
    from gpu.context import fast_float64

    backend = GpuBackend.create()
    assert backend.precision == ("float64" if fast_float64(backend.context) else "float32")


@pytest.mark.parametrize(("m", "d", "max_angle"),
                         [(m, d, theta) for m, d in [(2, 5), (3, 64), (6, 256), (8, 48),
                                                     (12, 128), (3, 1024), (6, 1024)]
                          for theta in (5, 30, 180)])
def test_float32_matches_cpu_on_random_scores(backend, m, d, max_angle):
    rng = np.random.default_rng(m * 10007 + d * 31 + max_angle)
    problem = random_problem(rng, m, d, max_angle)
    try:
        expected = solve_fast(problem)
    except NoAdmissiblePath:
        with pytest.raises(NoAdmissiblePath):
            backend.solve(problem)
        return
    _assert_near_optimal(problem, backend.solve(problem), expected.score)


@pytest.mark.parametrize("sampler", [SCALAR, CROSS, SINE])
def test_float32_link_scores_match_cpu(backend, sampler):
    """Within float32 rounding; ``sine``'s threshold |∇I| > τ may flip for a sample whose
    magnitude lies within rounding of τ: each flip moves a score by at most one sample's
    weight L/K ≤ 1, and few links have one."""
    rng = np.random.default_rng(sampler)
    planes = rng.normal(size=(1 if sampler == SCALAR else 2, 200, 260)).astype(np.float32)
    evidence = Evidence(planes, (0, 0), (260, 200), sampler, tau=0.5)
    corridor = build_corridor(np.array([40.0, 50.0]), np.array([200.0, 150.0]), 6, 41, 30.0)
    got = backend.link_scores(evidence, corridor)
    expected = CpuBackend().link_scores(evidence, corridor)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == np.float64
        assert np.isfinite(e).all()
        close = np.isclose(g, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())
        if sampler == SINE:
            assert close.mean() >= 0.99
            assert np.abs(g - e).max() <= 1.0 + 1e-3
        else:
            assert close.all(), np.abs(g - e).max()
