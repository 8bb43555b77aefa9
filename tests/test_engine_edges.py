"""The tracer at its edges: parameters of the wrong type or out of range, pixels that are no
numbers or nearly blank, a refused re-trace, the reference backend's size, endpoints on no
data and unreadable files."""

from __future__ import annotations

import builtins
from dataclasses import replace

import imageio.v3 as iio
import numpy as np
import pytest

from cli import main as cli_main
from core import backend as backends
from core import tracer
from core.backend import ReferenceBackend
from core.dp import DPProblem, solve_fast, solve_reference
from core.errors import BadParameter, ImageReadError, NoAdmissiblePath, TraceError
from core.gradient import MIN_SIGMA
from core.guides import admissible_windows, build_corridor
from core.raster import Raster, image_size, load_image
from core.tracer import TraceParams, trace, trace_through
from tests.conftest import SAMPLE_IMAGE
from tests.synthetic import BULGE, road_image

STRAIGHT = ((10.0, 50.0), (90.0, 50.0))


def straight_road(**changes) -> Raster:
    """A 100 × 100 grey image, 0.2 with a 0.8 road along row 50, ``changes`` (row/col slices
    → value) painted over it."""
    pixels = np.full((100, 100, 3), 0.2, np.float32)
    pixels[47:53] = 0.8
    for where, value in changes.values():
        pixels[where] = value
    return Raster(pixels)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("guides", "3", "guides must be a number"),
    ("guides", float("nan"), "guides must be an integer"),
    ("points", 2.5, "points per guide must be an integer"),
    ("halfwidth", "5", "halfwidth must be a number"),
    ("max_angle", None, "max angle must be a number"),
    ("max_angle", "60", "max angle must be a number"),
    ("sigma", None, "sigma must be a number"),
    ("sigma", "1", "sigma must be a number"),
    ("sigma", 0.1, f"at least {MIN_SIGMA:g} px"),
    ("sigma", 1e-200, f"at least {MIN_SIGMA:g} px"),
    ("score", ["cross"], "unknown score kind"),
    ("line_kind", None, "line kind must be one of"),
    ("ground_resolution", "1", "ground resolution must be a number"),
    ("evidence_path", 3, "evidence path must be a file path"),
])
def test_parameters_of_the_wrong_type_or_range_name_their_field(field, value, message):
    with pytest.raises(BadParameter, match=message):
        trace(straight_road(), *STRAIGHT, replace(TraceParams(score="flat"), **{field: value}))


def test_the_smallest_sigma_traces():
    assert trace(straight_road(), *STRAIGHT, TraceParams(score="cross", sigma=MIN_SIGMA)).score > 0


def test_guides_are_lowered_to_one_per_px_of_the_click_distance():
    many = trace(straight_road(), *STRAIGHT, TraceParams(score="flat", guides=4_000_000,
                                                         points=3))
    assert many.params.guides == 80
    assert many.indices.shape == (80,)
    assert trace(straight_road(), *STRAIGHT, TraceParams(score="flat", guides=80, points=3)
                 ).indices.shape == (80,)


def test_a_line_needs_two_points_and_a_name_for_each():
    for points in ([], [STRAIGHT[0]]):
        with pytest.raises(BadParameter, match="at least 2 points"):
            trace_through(straight_road(), points)
    with pytest.raises(BadParameter, match="2 names for 3 points"):
        trace_through(straight_road(), [*STRAIGHT, (50.0, 90.0)], names=["a", "b"])


def test_a_raster_needs_a_band_axis():
    with pytest.raises(BadParameter, match=r"\(rows, cols, bands\)"):
        Raster(np.zeros((50, 50), np.float32))


def test_nan_and_inf_pixels_are_no_data_as_in_a_file():
    holes = straight_road(nan=((slice(10, 30), slice(40, 60)), np.nan),
                          inf=((slice(70, 80), slice(20, 30)), np.inf))
    zeros = straight_road(nan=((slice(10, 30), slice(40, 60)), 0.0),
                          inf=((slice(70, 80), slice(20, 30)), 0.0))
    for kind in ("cross", "centre"):
        got, expected = (trace(raster, *STRAIGHT, TraceParams(score=kind))
                         for raster in (holes, zeros))
        np.testing.assert_array_equal(got.polyline, expected.polyline)
    with pytest.raises(BadParameter, match="every pixel there reads 0"):
        trace(Raster(np.full((50, 50, 3), np.nan, np.float32)), (5, 25), (45, 25))


def test_a_nan_total_is_no_missing_admissible_path():
    corridor = build_corridor((0.0, 0.0), (40.0, 0.0), 3, 5, 4.0)
    windows = admissible_windows(corridor, np.deg2rad(60.0))
    links = [np.zeros((1, 5)), np.zeros((5, 5)), np.zeros((5, 5)), np.full((5, 1), np.nan)]
    for solve in (solve_reference, solve_fast):
        with pytest.raises(TraceError, match="not numbers") as raised:
            solve(DPProblem(corridor, windows, links))
        assert not isinstance(raised.value, NoAdmissiblePath)


def test_a_refused_wider_retrace_keeps_the_first_optimum(monkeypatch):
    plan = tracer.check_trace_plan

    def refuse_wider(requested, *rest):
        if requested.halfwidth is not None:  # the automatic re-trace's
            raise BadParameter("over the memory budget")
        plan(requested, *rest)

    monkeypatch.setattr(tracer, "check_trace_plan", refuse_wider)
    result = trace(road_image(BULGE), BULGE[0], BULGE[-1], TraceParams(score="centre"))
    assert result.params.halfwidth == pytest.approx(50.0)
    assert "retrace" not in result.timings_ms
    assert result.notes == ("the line touches its corridor's edge, but was not traced again "
                            "in a wider one (halfwidth 80 px): over the memory budget",)


@pytest.mark.parametrize("kind", ["centre", "colour", "flat"])
def test_imagery_of_a_tiny_value_range_traces_as_at_full_range(kind):
    image = road_image(BULGE)
    tiny = replace(image, pixels=image.pixels * np.float32(1e-7))
    expected, got = (trace(raster, BULGE[0], BULGE[-1], TraceParams(score=kind))
                     for raster in (image, tiny))
    np.testing.assert_array_equal(got.indices, expected.indices)


@pytest.mark.parametrize("kind", ["cross", "sine", "flat"])
def test_gradient_kinds_refuse_a_uniform_window_with_one_stray_pixel(kind):
    pixels = np.full((200, 200, 3), 128 / 255, np.float32)
    pixels[62, 100] = 129 / 255
    with pytest.raises(BadParameter, match="holds nothing to trace .* but for 3 of its"):
        trace(Raster(pixels), (20.0, 100.0), (180.0, 100.0), TraceParams(score=kind))


def test_the_reference_backend_refuses_a_search_too_large_for_it(monkeypatch):
    params = TraceParams(score="flat", guides=3, points=9)
    assert trace(straight_road(), *STRAIGHT, params, ReferenceBackend()).indices.shape == (3,)
    monkeypatch.setattr(backends, "REFERENCE_MAX_STATES", 4 * 9 ** 2 - 1)
    with pytest.raises(BadParameter, match="use the default backend"):
        trace(straight_road(), *STRAIGHT, params, ReferenceBackend())


def test_an_endpoint_on_no_data_is_noted(tmp_path, capsys):
    raster = straight_road(empty=((slice(40, 60), slice(0, 20)), 0.0))
    noted = trace(raster, *STRAIGHT, TraceParams(score="centre"))
    assert noted.notes == ("the point (10, 50) lies on no data: most pixels around it read 0 "
                           "in every band (no data or NaN in the file)",)
    assert trace(raster, (30.0, 50.0), STRAIGHT[1], TraceParams(score="centre")).notes == ()
    image = tmp_path / "holes.png"
    iio.imwrite(image, (raster.pixels * 255).astype(np.uint8))
    code = cli_main(["trace", str(image), "--a", "10,50", "--via", "50,50", "--b", "90,50",
                     "--score", "centre", "--backend", "cpu"])
    assert code == 0
    assert "note: a → via 1: the point (10, 50) lies on no data" in capsys.readouterr().err


def test_an_image_that_may_not_be_read_says_so(monkeypatch):
    opened = builtins.open

    def denied(path, *args, **kwargs):
        if str(path) == str(SAMPLE_IMAGE):
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    for read in (load_image, image_size):
        with pytest.raises(ImageReadError,
                           match=f"^cannot read {SAMPLE_IMAGE}: permission denied$"):
            read(SAMPLE_IMAGE)


def test_batch_reports_a_trace_note_with_its_seed_and_segment(tmp_path):
    from core.backend import CpuBackend
    from core.batch import ImageTask, process_image
    from core.vectors import Seed

    raster = straight_road(empty=((slice(40, 60), slice(0, 20)), 0.0))
    image = tmp_path / "holes.png"
    iio.imwrite(image, (raster.pixels * 255).astype(np.uint8))
    seed = Seed("s1", np.array([[10.0, 50.0], [50.0, 50.0], [90.0, 50.0]]), "holes.png", {})
    report, _ = process_image(ImageTask(str(image), (seed,), TraceParams(score="centre")),
                              CpuBackend)
    assert report.status == "ok"
    assert report.notes == ["seed s1, segment 0: the point (10, 50) lies on no data: most "
                            "pixels around it read 0 in every band (no data or NaN in the file)"]
