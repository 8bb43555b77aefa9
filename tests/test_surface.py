"""The learned surface model (core/surface.py): what it sees, what it says, how it fails."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import scores
from core import surface as surface_module
from core.errors import ModelUnavailable
from core.evaluate import evaluate, load_cases, summarise
from core.raster import load_image
from core.scores import endpoint_similarity
from core.surface import (
    ENDPOINT_REACH,
    FULL_RESOLUTION_PIXELS,
    MODEL_PATH,
    SIZE_MULTIPLE,
    endpoint_plane,
    model_inputs,
    model_point,
    surface_model,
)
from core.tracer import TraceParams, trace
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE
from tests.synthetic import distance_to_polyline, road_image


def _window_around_case(case, margin=30):
    """Pixels around a sample case, its a, b in window coordinates, and each pixel's distance
    (px) to the ground-truth centreline."""
    gt = np.asarray(case["gt"], dtype=np.float64)
    col0, row0 = np.maximum(np.floor(gt.min(axis=0)).astype(int) - margin, 0)
    col1, row1 = np.ceil(gt.max(axis=0)).astype(int) + margin
    pixels = load_image(SAMPLE_IMAGE).read_window(row0, row1, col0, col1).astype(np.float32)
    rows, cols = np.mgrid[:pixels.shape[0], :pixels.shape[1]]
    local = gt - (col0, row0)
    distance = np.hypot(cols[..., None] - local[:, 0], rows[..., None] - local[:, 1]).min(axis=2)
    return pixels, np.asarray(case["a"]) - (col0, row0), np.asarray(case["b"]) - (col0, row0), \
        distance


def test_model_marks_the_clicked_road_and_its_course_and_not_its_surroundings():
    # The shipped model never saw this image. Measured: mean surface p 1.00 within 2 px of the
    # centreline, 0.02..0.10 beyond 15 px on the five windows run at full resolution (0.88 and
    # 0.07 on the one large enough to run at half resolution); mean path p 0.71..0.94 within
    # 1.5 px, at most 0.007 beyond 6 px. On that long curved case at half resolution the path
    # output misses much of the course (0.45 within 1.5 px, 0.006 beyond 6 px): the surface's
    # centre ridge guides the trace there, so only its surface is checked.
    for case in json.loads(SAMPLE_CASES.read_text()):
        pixels, a, b, distance = _window_around_case(case)
        surface, path = surface_model(pixels, endpoint_similarity(pixels, a, b), a, b)
        for plane in (surface, path):
            assert plane.shape == distance.shape
            assert plane.dtype == np.float32
            assert 0.0 <= plane.min()
            assert plane.max() <= 1.0
        half = surface.size > FULL_RESOLUTION_PIXELS
        assert surface[distance < 2].mean() > (0.8 if half else 0.95), case["id"]
        assert surface[distance > 15].mean() < (0.2 if half else 0.12), case["id"]
        assert path[distance > 6].mean() < (0.05 if half else 0.01), case["id"]
        if not half:
            assert path[distance < 1.5].mean() > 0.6, case["id"]


def test_endpoint_plane_is_one_at_the_clicks_and_falls_to_zero_at_a_quarter_of_their_distance():
    a, b = np.array([10.0, 20.0]), np.array([50.0, 20.0])
    plane = endpoint_plane(a, b, 40, 64)
    assert plane.shape == (40, 64)
    assert plane.dtype == np.float32
    assert plane[20, 10] == 1.0
    assert plane[20, 50] == 1.0
    reach = ENDPOINT_REACH * 40.0
    assert plane[20, 10 + int(reach / 2)] == pytest.approx(0.5, abs=1e-6)
    assert plane[20, 30] == 0.0  # the middle of [a, b] is no click
    assert plane[20, 50 + int(reach)] == 0.0
    np.testing.assert_array_equal(plane, endpoint_plane(b, a, 40, 64))
    # Coincident clicks: a one-pixel spot, no division by zero.
    spot = endpoint_plane(a, a, 40, 64)
    assert spot[20, 10] == 1.0
    assert spot.sum() == 1.0


def test_model_inputs_stretch_pad_repeat_a_grey_band_and_show_the_clicks():
    rng = np.random.default_rng(0)
    grey = rng.uniform(100, 200, size=(21, 30, 1)).astype(np.float32)
    similarity = rng.uniform(0, 1, size=(21, 30)).astype(np.float32)
    a, b = np.array([3.0, 4.0]), np.array([27.0, 18.0])
    inputs = model_inputs(grey, similarity, a, b)
    assert inputs.shape == (1, 5, 32, 32)
    assert inputs.shape[2] % SIZE_MULTIPLE == 0
    assert inputs.shape[3] % SIZE_MULTIPLE == 0
    np.testing.assert_array_equal(inputs[0, 0], inputs[0, 1])  # one band shown as grey RGB
    np.testing.assert_allclose(np.percentile(inputs[0, 0, :21, :30], [1, 99]), [0, 1], atol=2e-3)
    np.testing.assert_array_equal(inputs[0, 3, :21, :30], similarity)
    # The click plane covers the padded size (not mirrored).
    np.testing.assert_array_equal(inputs[0, 4], endpoint_plane(a, b, 32, 32))


def test_half_resolution_clicks_land_on_their_blocks():
    # Block k of step 2 covers pixels 2k and 2k + 1: its centre is 2k + 0.5.
    np.testing.assert_allclose(model_point([4.5, 0.5], 2), [2.0, 0.0])
    np.testing.assert_allclose(model_point([7.0, 3.0], 1), [7.0, 3.0])


def test_model_that_does_not_see_the_clicked_surface_is_not_trusted(monkeypatch):
    # A model blind to this imagery (p = 0.01 everywhere, under the clicks too): the colour
    # match decides and the line stays on the road; with p taken at face value (trust 1) the
    # same trace leaves the road.
    centreline = np.array([[20.0, 100.0], [80.0, 60.0], [150.0, 50.0], [230.0, 80.0]])
    raster = road_image(centreline, width=3.0, noise=0.06)
    a, b = centreline[0], centreline[-1]
    monkeypatch.setattr(scores, "surface_model",
                        lambda pixels, similarity, a, b, **_: (
                            np.full(similarity.shape, 0.01, dtype=np.float32),
                            np.zeros(similarity.shape, dtype=np.float32)))
    trusted = trace(raster, a, b)
    assert distance_to_polyline(trusted.polyline, centreline).max() <= 1.5
    monkeypatch.setattr(scores, "MODEL_TRUST", 1e-9)
    blind = trace(raster, a, b)
    assert distance_to_polyline(blind.polyline, centreline).max() > 3.0


def test_missing_or_corrupt_model_is_one_clear_error(tmp_path):
    pixels = np.zeros((16, 16, 3), dtype=np.float32)
    similarity = np.zeros((16, 16), dtype=np.float32)
    a, b = np.array([3.0, 3.0]), np.array([12.0, 12.0])
    with pytest.raises(ModelUnavailable, match="not found"):
        surface_model(pixels, similarity, a, b, tmp_path / "missing.onnx")
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not a model")
    with pytest.raises(ModelUnavailable, match="corrupt.onnx"):
        surface_model(pixels, similarity, a, b, corrupt)


class _OtherModel:
    """An ONNX Runtime session stand-in for a model of another input or output."""

    def __init__(self, outputs=None, error=None):
        self.outputs, self.error = outputs, error

    def run(self, names, feeds):
        if self.error:
            raise RuntimeError(self.error)
        shape = feeds["image"].shape
        return [np.zeros((1, self.outputs, *shape[2:]), dtype=np.float32)]


@pytest.mark.parametrize(("session", "message"), [
    (_OtherModel(error="Got invalid dimensions for input: image index: 1 Got: 5 Expected: 4"),
     "does not take this program's 5 input planes"),
    (_OtherModel(outputs=1), "returns 1 planes, not 2"),
])
def test_a_model_of_another_input_or_output_is_one_clear_error(monkeypatch, session, message):
    monkeypatch.setattr(surface_module, "_session", lambda path: session)
    pixels = np.zeros((16, 16, 3), dtype=np.float32)
    with pytest.raises(ModelUnavailable, match=message):
        surface_model(pixels, np.zeros((16, 16), dtype=np.float32), np.array([3.0, 3.0]),
                      np.array([12.0, 12.0]), "other.onnx")


def test_bundled_model_is_the_default_and_traces_the_sample_better_than_colour_alone():
    # Measured on the 6 sample cases: median completeness@3px / @5px 1.00 / 1.00 (surface)
    # vs 0.68 / 0.91 (centre; means 0.89 / 0.99 vs 0.72 / 0.89);
    # the sample image is one of the model's training images, so this guards the wiring and
    # the model file, not generalisation (docs/ACCURACY.md reports cross-validated figures).
    assert MODEL_PATH.is_file()
    assert TraceParams().score == "surface"
    cases = load_cases(SAMPLE_CASES)
    surface = summarise(evaluate(cases, "ours", TraceParams(score="surface")))["all"]
    centre = summarise(evaluate(cases, "ours", TraceParams(score="centre")))["all"]
    assert surface["failures"] == 0
    assert surface["completeness_3"]["median"] >= 0.90
    assert surface["completeness_3"]["median"] >= centre["completeness_3"]["median"] + 0.05
    assert surface["completeness_3"]["mean"] >= 0.85
    assert surface["completeness_5"]["median"] >= centre["completeness_5"]["median"]
