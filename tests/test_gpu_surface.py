"""The surface model on the device (gpu/network.py, the ``surface`` kind of gpu/kinds.py)
against ONNX Runtime on the CPU and the CPU backend's planes and traces. Needs a GPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import surface
from core.backend import CpuBackend
from core.raster import load_image
from core.scores import endpoint_similarity, get_score_kind
from core.tracer import TraceParams, trace
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():
    from gpu.backend import GpuBackend

    return GpuBackend.create()


@pytest.fixture(scope="module")
def sample():
    return load_image(SAMPLE_IMAGE), json.loads(SAMPLE_CASES.read_text())


def _windows(sample):
    """(pixels, a, b) of a window around each sample case's clicks, in window coordinates:
    small ones run the model at full resolution, large ones at half."""
    raster, cases = sample
    for case in cases:
        a, b = np.asarray(case["a"], float), np.asarray(case["b"], float)
        margin = 0.25 * np.hypot(*(b - a)) + 10
        low = np.maximum(np.floor(np.minimum(a, b) - margin), 0).astype(int)
        high = np.minimum(np.ceil(np.maximum(a, b) + margin),
                          (raster.width, raster.height)).astype(int)
        pixels = raster.read_window(low[1], high[1], low[0], high[0])
        yield pixels, a - low, b - low


def test_device_network_matches_onnx_runtime_on_real_windows(backend, sample):
    network = backend.surface_network()
    assert network is not None, backend.model_note
    import onnxruntime

    session = onnxruntime.InferenceSession(str(surface.MODEL_PATH),
                                           providers=["CPUExecutionProvider"])
    worst = 0.0
    for pixels, a, b in _windows(sample):
        similarity = endpoint_similarity(pixels, a, b)
        image = surface.model_inputs(pixels, similarity)
        expected = session.run(None, {"image": image})[0][0]
        with backend.context.active():
            got = network.run(image)
        assert got.shape == expected.shape
        worst = max(worst, float(np.abs(got - expected).max()))
    assert worst <= 1e-3


def test_device_surface_planes_match_the_cpu(backend, sample):
    kind = get_score_kind("surface")
    for pixels, a, b in _windows(sample):
        got, tau = backend.score_planes(kind, pixels, a, b, 1.5)
        expected, _ = CpuBackend().score_planes(kind, pixels, a, b, 1.5)
        assert got.dtype == np.float32
        assert got.shape == expected.shape
        assert tau == 0.0
        np.testing.assert_allclose(got, expected, atol=2e-3)


def test_device_surface_traces_match_the_cpu(backend, sample):
    raster, cases = sample
    for case in cases:
        got = trace(raster, case["a"], case["b"], TraceParams(), backend)
        expected = trace(raster, case["a"], case["b"], TraceParams(), CpuBackend())
        np.testing.assert_allclose(got.polyline, expected.polyline, atol=1e-9)


def test_an_unsupported_model_runs_on_the_cpu_and_says_why(tmp_path, monkeypatch, sample):
    import onnx

    from gpu.backend import GpuBackend

    model = onnx.load(str(surface.MODEL_PATH))
    model.graph.node[1].op_type = "Elu"  # ONNX Runtime runs it; the device does not
    path = tmp_path / "elu.onnx"
    onnx.save(model, str(path))
    monkeypatch.setattr(surface, "MODEL_PATH", path)
    backend = GpuBackend.create()
    assert "surface model on the CPU" in backend.model_note
    assert "Elu" in backend.model_note
    assert "Elu" in backend.description
    kind = get_score_kind("surface")
    pixels, a, b = next(_windows(sample))
    got, _ = backend.score_planes(kind, pixels, a, b, 1.5)
    expected, _ = CpuBackend().score_planes(kind, pixels, a, b, 1.5)
    np.testing.assert_array_equal(got, expected)
