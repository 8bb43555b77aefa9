"""float32 on the device: the precision chosen, and link scores against the CPU backend.

The float32 DP is held to the oracle in tests/test_dp_oracle.py and to the CPU backend on random
scores in tests/test_gpu.py (within tests.oracle.FLOAT32_SLACK). Needs a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.backend import CpuBackend
from core.guides import build_corridor
from core.scores import CROSS, SCALAR, SINE, Evidence

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=["auto", "reduce"])
def backend(request):
    from gpu.backend import GpuBackend

    return GpuBackend.create(method=request.param, precision="float32")


def test_backend_reports_its_precision(backend):
    assert backend.precision == "float32"
    assert "float32" in backend.description


def test_auto_precision_follows_the_float64_rate():
    from gpu.backend import GpuBackend
    from gpu.context import fast_float64

    backend = GpuBackend.create()
    assert backend.precision == ("float64" if fast_float64(backend.context) else "float32")


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
