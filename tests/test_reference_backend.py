"""The reference backend (plain numpy, O(d³) per stage: the readable twin) and the CPU backend
trace the sample's real cases alike: the same path, scores equal to float64 rounding.

tests/test_dp_oracle.py holds both to the brute-force oracle on tiny random problems; this
holds them to each other on whole traces of real imagery (evidence, links and DP), at a size
the reference backend traces in a second or two per case."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.backend import CpuBackend, ReferenceBackend
from core.raster import load_image
from core.tracer import TraceParams, trace
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE

CASES = json.loads(SAMPLE_CASES.read_text())
PARAMS = TraceParams(guides=6, points=64)


@pytest.fixture(scope="module")
def raster():
    return load_image(SAMPLE_IMAGE)


def test_the_sample_has_six_cases():
    assert len(CASES) == 6


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_reference_and_cpu_backends_trace_alike(raster, case):
    # Measured: the same indices on all 6 cases; scores at most 1.7e-16 apart (relative),
    # link scores at most 7e-15 (absolute).
    reference = trace(raster, case["a"], case["b"], PARAMS, ReferenceBackend())
    cpu = trace(raster, case["a"], case["b"], PARAMS, CpuBackend())
    assert (reference.backend, cpu.backend) == ("reference", "cpu")
    assert (cpu.params.guides, cpu.params.points) == (6, 64)
    assert reference.params == cpu.params
    np.testing.assert_array_equal(reference.indices, cpu.indices)
    np.testing.assert_array_equal(reference.polyline, cpu.polyline)
    assert reference.score == pytest.approx(cpu.score, rel=1e-12)
    np.testing.assert_allclose(reference.link_scores, cpu.link_scores, rtol=1e-12, atol=1e-12)
