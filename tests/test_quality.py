"""The default tracer lands on the road: bundled real cases, evidence rasters, image borders."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from core.errors import BadParameter, ImageReadError
from core.evaluate import evaluate, load_cases, stability, summarise
from core.raster import Raster
from core.tracer import TraceParams, trace, trace_many
from tests.conftest import SAMPLE_CASES

RIVER_CASES = Path(__file__).resolve().parent / "data" / "dubai_t6_003_cases.json"
ROAD_CASES = Path(__file__).resolve().parent.parent / "resources" / "eval" / "roads" / "cases.json"


@pytest.fixture(scope="module")
def sample_summary():
    return summarise(evaluate(load_cases(SAMPLE_CASES), "ours"))


@pytest.fixture(scope="module")
def road_results():
    """Every case of the road evaluation set (images the shipped model never saw)."""
    return evaluate(load_cases(ROAD_CASES), "ours")


def test_default_tracer_lands_on_the_sample_roads(sample_summary):
    # Measured at the defaults: median completeness@5px 1.00; mean @3px 0.89; gt→trace 0.69 px.
    assert sample_summary["all"]["failures"] == 0
    assert sample_summary["all"]["completeness_5"]["median"] >= 0.95
    assert sample_summary["all"]["completeness_3"]["mean"] >= 0.85
    assert sample_summary["all"]["gt_to_trace"]["median"] <= 1.5


def test_default_tracer_on_roads_it_never_saw(road_results):
    # The shipped model (resources/models/surface.onnx) on the 58 nontrivial cases: medians
    # c@3 0.767, c@5 0.982; means 0.691, 0.851. The same recipe retrained with other random
    # starts reads medians 0.70-0.72 / 0.94-0.99, means 0.69-0.71 / 0.85-0.86
    # (docs/ACCURACY.md, "Roads"): the bounds sit at or just below the lowest of those, so a
    # retrained model of the recipe stays above them; a drop below that spread fails.
    summary = summarise([r for r in road_results if "nontrivial" in r.case.tags])
    assert summary["all"]["n"] == 58
    assert summary["all"]["failures"] == 0
    assert summary["all"]["completeness_3"]["median"] >= 0.70
    assert summary["all"]["completeness_5"]["median"] >= 0.94
    assert summary["all"]["completeness_3"]["mean"] >= 0.67
    assert summary["all"]["completeness_5"]["mean"] >= 0.83


def test_default_tracer_keeps_straight_roads_straight(road_results):
    # Measured on the 34 cases where a straight line covers the road: median c@3 1.00,
    # mean 0.86; 3 cases more than 0.1 below the straight line at 5 px.
    plain = [r for r in road_results if "nontrivial" not in r.case.tags]
    straight = {r.case.id: r for r in evaluate([r.case for r in plain], "straight")}
    summary = summarise(plain)
    assert summary["all"]["completeness_3"]["median"] >= 0.90
    assert summary["all"]["completeness_3"]["mean"] >= 0.75
    worse = [r for r in plain if r.metrics.completeness_5
             < straight[r.case.id].metrics.completeness_5 - 0.1]
    assert len(worse) <= 4


def test_default_tracer_beats_the_straight_line_where_it_matters(sample_summary):
    # Measured: mean c@5 on the nontrivial sample cases 0.97 against the straight line's 0.69.
    straight = summarise(evaluate(load_cases(SAMPLE_CASES), "straight"))
    assert (sample_summary["nontrivial"]["completeness_5"]["mean"]
            > straight["nontrivial"]["completeness_5"]["mean"] + 0.2)


def test_default_tracer_follows_river_centrelines():
    # Measured at the defaults: median completeness@3px 0.77, mean @5px 1.00 on the three cases
    # (one case 0.77 at 3 px, 1.00 at 5 px: the line a pixel or two off the channel's middle).
    summary = summarise(evaluate(load_cases(RIVER_CASES), "ours"))
    assert summary["all"]["completeness_3"]["median"] >= 0.67
    assert summary["all"]["completeness_5"]["mean"] >= 0.95


def test_moving_an_endpoint_moves_the_line_little():
    # Measured: 0.86, 0.93, 0.41 px, median 0.86 (a model trained with more grey crops moved
    # case 00, a short bend of a narrow channel, by 3.98 px: a nudged click lands on the bank).
    shifts = stability(load_cases(RIVER_CASES), shift=3.0)
    assert len(shifts) == 3
    assert float(np.median(shifts)) <= 1.2


def _band_image(size=(120, 200), centre_row=60.0, amplitude=20.0):
    rows, cols = size
    x = np.arange(cols)
    centre = centre_row + amplitude * np.sin(np.pi * x / (cols - 1))
    distance = np.abs(np.arange(rows)[:, None] - centre[None, :])
    return centre, distance


def test_evidence_raster_is_traced(tmp_path):
    centre, distance = _band_image()
    probability = np.clip(1.0 - distance / 4.0, 0.0, 1.0)
    path = tmp_path / "probability.png"
    iio.imwrite(path, np.round(255 * probability).astype(np.uint8))
    rng = np.random.default_rng(3)
    image = Raster(rng.random((*probability.shape, 3), dtype=np.float32))
    a, b = (5.0, centre[5]), (194.0, centre[194])
    result = trace(image, a, b, TraceParams(score="evidence", evidence_path=str(path)))
    rows_on_path = np.interp(result.polyline[:, 0], np.arange(len(centre)), centre)
    assert np.max(np.abs(result.polyline[:, 1] - rows_on_path)) < 2.0
    # the image alone (noise) does not find the band
    plain = trace(image, a, b, TraceParams(score="evidence"))
    assert np.max(np.abs(plain.polyline[:, 1] - rows_on_path)) > 5.0
    # the default kind (a model of imagery) runs as `centre` on an evidence raster
    default = trace(image, a, b, TraceParams(evidence_path=str(path)))
    assert default.params.score == "centre"
    assert np.max(np.abs(default.polyline[:, 1] - rows_on_path)) < 2.0


def test_evidence_raster_errors(tmp_path):
    image = Raster(np.zeros((50, 60, 3), dtype=np.float32))
    path = tmp_path / "small.png"
    iio.imwrite(path, np.zeros((40, 60), dtype=np.uint8))
    with pytest.raises(BadParameter, match="evidence raster .* is 60×40 px; the image is 60×50 "
                                           r"\(.* the image has none\)"):
        trace(image, (5, 5), (50, 40), TraceParams(evidence_path=str(path)))
    with pytest.raises(ImageReadError, match="not found"):
        trace(image, (5, 5), (50, 40), TraceParams(evidence_path=str(tmp_path / "none.png")))
    # A float raster is read as it is: 0..255 values are no probabilities, and say so.
    pytest.importorskip("rasterio")
    from tests.test_georef import write_geotiff

    scores = tmp_path / "scores.tif"
    values = np.full((50, 60, 1), 200.0, dtype=np.float32)
    values[:, :30] = 150.0
    write_geotiff(scores, values, transform=None)
    with pytest.raises(BadParameter, match=r"probability in \[0, 1\].* from 150 to 200"):
        trace(image, (5, 5), (50, 40), TraceParams(score="evidence", evidence_path=str(scores)))


def test_georeferenced_evidence_is_resampled_onto_the_image_grid(tmp_path):
    """A probability map at half the image's resolution, or on a grid shifted by 10 px, is
    read on the image's grid through both geotransforms."""
    pytest.importorskip("rasterio")
    from affine import Affine

    from core.raster import load_image
    from core.tracer import evidence_source
    from tests.test_georef import TRANSFORM, write_geotiff

    centre, distance = _band_image()
    probability = np.clip(1.0 - distance / 6.0, 0.0, 1.0)  # (rows, cols) on the image's grid
    rows, cols = probability.shape
    image_path = tmp_path / "image.tif"
    noise = np.random.default_rng(3).integers(0, 255, (rows, cols, 3), dtype=np.uint8)
    write_geotiff(image_path, noise)
    half = tmp_path / "half.tif"  # 2×2 block means, pixels twice as large
    coarse = probability[: rows // 2 * 2, : cols // 2 * 2].reshape(rows // 2, 2, cols // 2, 2)
    write_geotiff(half, coarse.mean(axis=(1, 3))[:, :, None].astype(np.float32),
                  transform=TRANSFORM @ Affine.scale(2))
    shifted = tmp_path / "shifted.tif"  # the same size, its pixel x on the image's x + 10
    moved = np.zeros_like(probability)
    moved[:, :-10] = probability[:, 10:]
    write_geotiff(shifted, moved[:, :, None].astype(np.float32),
                  transform=TRANSFORM @ Affine.translation(10, 0))
    with load_image(image_path) as image:
        for path, tolerance in ((half, 0.2), (shifted, 1e-4)):
            params = TraceParams(score="evidence", evidence_path=str(path))
            evidence = evidence_source(image, params)
            assert (evidence.width, evidence.height) == (cols, rows)
            inside = evidence.read_window(2, rows - 2, 12, cols - 2)[:, :, 0]
            assert np.abs(inside - probability[2:-2, 12:-2]).max() < tolerance
            a, b = (15.0, centre[15]), (190.0, centre[190])
            line = trace(image, a, b, params).polyline
            rows_on_path = np.interp(line[:, 0], np.arange(len(centre)), centre)
            assert np.max(np.abs(line[:, 1] - rows_on_path)) < 2.0
        # Left of the shifted map's extent there is no data: 0, no road.
        assert evidence.read_window(0, rows, 0, 9).max() == 0


@pytest.mark.parametrize("flip", [False, True])
def test_leaving_the_image_earns_nothing(flip):
    # A grey road along the top (or left) edge, 3 px from the border, on a bright field.
    pixels = np.full((80, 240, 3), 0.9, dtype=np.float32)
    pixels[1:6] = 0.3
    a, b = np.array([10.0, 3.0]), np.array([230.0, 3.0])
    if flip:
        pixels = np.ascontiguousarray(pixels.transpose(1, 0, 2))
        a, b = a[::-1].copy(), b[::-1].copy()
    result = trace(Raster(pixels), a, b)
    across = result.polyline[:, 0] if flip else result.polyline[:, 1]
    assert np.all(np.abs(across - 3.0) <= 1.5)


def test_a_corridor_without_data_is_named_and_fails_only_its_own_trace(tmp_path):
    pytest.importorskip("rasterio")
    from core.raster import load_image
    from tests.test_georef import write_geotiff

    path = tmp_path / "nan.tif"
    pixels = np.random.default_rng(0).random((80, 200, 3)).astype(np.float32)
    pixels[:, 100:] = np.nan  # the file's right half holds no data
    write_geotiff(path, pixels, transform=None)
    with load_image(path) as raster:
        with pytest.raises(BadParameter, match="the image holds nothing to trace between a and "
                                               "b: every pixel there reads 0"):
            trace(raster, (130, 40), (190, 40), TraceParams(score="centre"))
        blank, fine = trace_many(raster, [((130, 40), (190, 40)), ((10, 40), (80, 40))],
                                 TraceParams(score="centre"))
    assert isinstance(blank, BadParameter)
    assert len(fine.polyline) >= 2
