"""The imagery's ground resolution: read from the georeferencing, given by the user or a case,
and choosing the surface model's resolution."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from affine import Affine

import core.scores
from app.params import params_from_dict
from core import surface
from core.errors import BadParameter
from core.evaluate import case_params, load_cases
from core.georef import Georef, ground_resolution, parse_crs
from core.raster import load_image
from core.tracer import GROUND_RESOLUTION_RANGE, TraceParams, trace
from tests.conftest import SAMPLE_IMAGE
from tests.test_cli import A, B, run_cli
from tests.test_georef import sample_pixels, write_geotiff

#: A window between the two full-resolution limits (160² < 200 × 200 ≤ 320²).
MIDDLE = (200, 200)


@pytest.mark.parametrize(("ground", "shape", "steps"), [
    (0.2, MIDDLE, (2,)), (0.3, MIDDLE, (1,)), (0.76, MIDDLE, (1,)), (0.76, (321, 320), (2,)),
    (None, (160, 160), (1,)), (0.2, (160, 160), (1,))])
def test_coarse_imagery_runs_the_model_at_full_resolution_on_larger_windows(ground, shape, steps):
    assert surface.model_steps(*shape, ground_resolution=ground) == steps


@pytest.mark.parametrize(("ground", "shape", "steps"), [
    (0.1, (100, 100), (2,)), (0.1, MIDDLE, (2,)), (0.1, (321, 321), (4,)),
    (0.067, (150, 150), (3,)), (0.05, (100, 100), (4,)), (0.05, (700, 700), (8,)),
    (0.16, (100, 100), (1,))])
def test_imagery_finer_than_the_model_knows_is_read_on_block_means(ground, shape, steps):
    # Each model pixel covers at least FINEST_MODEL_RESOLUTION m; larger windows halve again.
    assert surface.model_steps(*shape, ground_resolution=ground) == steps
    assert ground * steps[0] >= surface.FINEST_MODEL_RESOLUTION - 1e-9


def test_a_window_at_an_odd_step_gives_maps_of_the_window_size():
    raster = load_image(SAMPLE_IMAGE)
    pixels = raster.read_window(250, 400, 20, 170)
    a, b = np.array([7.0, 131.0]), np.array([140.0, 30.0])
    similarity = core.scores.endpoint_similarity(pixels, a, b)
    maps = surface.surface_model(pixels, similarity, a, b, ground_resolution=0.067)
    for plane in maps:
        assert plane.shape == (150, 150)
        assert plane.dtype == np.float32
        assert 0.0 <= plane.min()
        assert plane.max() <= 1.0
    # At step 3 the model still sees the road under the clicks.
    assert maps[0][131, 7] > 0.5
    assert maps[0][30, 140] > 0.5


@pytest.mark.parametrize(("shape", "steps"), [(MIDDLE, (1, 2)), ((320, 320), (1, 2)),
                                             ((321, 320), (2,))])
def test_without_a_ground_resolution_larger_windows_run_the_model_at_both(shape, steps):
    assert surface.model_steps(*shape) == steps


def test_two_resolutions_give_the_larger_of_their_maps_per_pixel():
    raster = load_image(SAMPLE_IMAGE)
    pixels = raster.read_window(250, 450, 20, 220)  # MIDDLE: 200 x 200 px
    a, b = np.array([7.0, 181.0]), np.array([190.0, 30.0])
    similarity = core.scores.endpoint_similarity(pixels, a, b)
    both = surface.surface_model(pixels, similarity, a, b)
    full = surface.surface_model(pixels, similarity, a, b, ground_resolution=1.0)
    half = surface.surface_model(pixels, similarity, a, b, ground_resolution=0.2)
    for got, one, other in zip(both, full, half, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, np.maximum(one, other))
        assert np.any(one > other)  # each run adds somewhere
        assert np.any(other > one)


def test_water_runs_at_half_resolution_whatever_the_ground_resolution():
    assert surface.model_steps(100, 100, half_resolution=True) == (2,)
    assert surface.model_steps(100, 100, half_resolution=True, ground_resolution=1.0) == (2,)


def test_utm_pixels_measure_their_size_on_the_ground():
    georef = Georef(Affine(0.5, 0.0, 500000.0, 0.0, -0.5, 3900000.0), parse_crs("EPSG:32654"),
                    "test")
    # UTM's scale factor near the central meridian is 0.9996: the ground step is 0.5 / 0.9996.
    assert ground_resolution(georef, (10, 10)) == pytest.approx(0.5 / 0.9996, rel=1e-4)


def test_degree_pixels_shrink_east_west_with_latitude():
    georef = Georef(Affine(1e-5, 0.0, 139.0, 0.0, -1e-5, 35.0), parse_crs("EPSG:4326"), "test")
    metres = ground_resolution(georef, (0, 0))
    # One 1e-5° step: about 1.109 m north-south and 1.109 · cos 35° ≈ 0.913 m east-west at 35° N.
    assert metres == pytest.approx((1.109 + 1.109 * math.cos(math.radians(35))) / 2, rel=5e-3)


def test_no_georeferencing_or_no_crs_says_nothing():
    assert ground_resolution(None, (0, 0)) is None
    assert ground_resolution(Georef(Affine.identity(), None, "world file"), (0, 0)) is None


def test_a_geotiff_carries_its_ground_resolution_and_a_png_none(tmp_path):
    path = tmp_path / "utm.tif"
    write_geotiff(path, sample_pixels(), transform=Affine(0.4, 0.0, 500000.0, 0.0, -0.4,
                                                                 3900000.0))
    assert load_image(path).ground_resolution == pytest.approx(0.4 / 0.9996, rel=1e-4)
    assert load_image(SAMPLE_IMAGE).ground_resolution is None


def test_the_trace_hands_the_ground_resolution_to_the_model(monkeypatch):
    seen = []
    real = core.scores.surface_model

    def spy(*args, **kwargs):
        seen.append(kwargs.get("ground_resolution"))
        return real(*args, **kwargs)

    monkeypatch.setattr(core.scores, "surface_model", spy)
    raster = load_image(SAMPLE_IMAGE)
    a, b = np.array([150.0, 300.0]), np.array([400.0, 300.0])
    trace(raster, a, b)
    trace(raster, a, b, TraceParams(ground_resolution=0.5))
    assert seen[0] is None
    assert seen[-1] == 0.5


def test_cases_may_give_the_ground_resolution_and_bad_values_are_named(tmp_path):
    record = {"id": "c", "image": "x.png", "a": [0, 0], "b": [5, 0], "gt": [[0, 0], [5, 0]]}
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([dict(record, ground_resolution=0.3), dict(record, id="d")]))
    given, unsaid = load_cases(path)
    assert (given.ground_resolution, unsaid.ground_resolution) == (0.3, None)
    assert case_params(None, given).ground_resolution == 0.3
    # What the user gives wins over the case.
    assert case_params(TraceParams(ground_resolution=1.0), given).ground_resolution == 1.0
    for bad in (0, -1, "fine", True):
        path.write_text(json.dumps([dict(record, ground_resolution=bad)]))
        with pytest.raises(BadParameter, match="ground_resolution must be a number of metres"):
            load_cases(path)


def test_command_line_and_sessions_take_a_ground_resolution(capsys):
    with pytest.raises(SystemExit) as usage:
        run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--ground-resolution", "0")
    assert usage.value.code == 2
    assert "expected metres per pixel" in capsys.readouterr().err
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--ground-resolution", "0.5")
    assert code == 0
    assert json.loads(out)["params"]["ground_resolution"] == 0.5
    assert params_from_dict({"ground_resolution": 0.5}).ground_resolution == 0.5
    assert params_from_dict({"ground_resolution": None}).ground_resolution is None
    with pytest.raises(BadParameter, match="params.ground_resolution must be a number"):
        params_from_dict({"ground_resolution": -2})


@pytest.mark.parametrize("ground", [1e-20, 1e-5, 2e4, float("nan")])
def test_a_ground_resolution_beyond_any_imagery_is_refused_before_any_work(ground, capsys):
    raster = load_image(SAMPLE_IMAGE)
    with pytest.raises(BadParameter, match=re.escape(f"ground resolution {ground:.3g} m per "
                                                     "pixel, outside 0.001 to 10000 m")):
        trace(raster, (150, 300), (400, 300), TraceParams(ground_resolution=ground))
    if math.isnan(ground):  # the command line refuses it as no number
        return
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--ground-resolution",
                           f"{ground:g}")
    assert code == 2
    assert err.strip().endswith("outside 0.001 to 10000 m")


def test_a_georeferencing_of_absurd_pixels_is_named(tmp_path):
    path = tmp_path / "tiny.tif"
    write_geotiff(path, sample_pixels(), transform=Affine(1e-7, 0.0, 500000.0, 0.0, -1e-7,
                                                                 3900000.0))
    raster = load_image(path)
    assert raster.ground_resolution < GROUND_RESOLUTION_RANGE[0]
    with pytest.raises(BadParameter, match="the image's georeferencing gives a ground "
                                           "resolution of 9.93e-08 m per pixel, outside"):
        trace(raster, (10, 10), (60, 10))
    # Stating the right one traces it.
    assert len(trace(raster, (10, 10), (60, 10), TraceParams(ground_resolution=0.3)).polyline)
