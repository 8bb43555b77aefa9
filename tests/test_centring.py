"""River mode: traced lines moved to the middle of the water surface (core/centring.py)."""

import numpy as np
import pytest

from core.centring import _turns, centre_on_surface
from core.errors import BadParameter
from core.tracer import TraceParams, trace
from tests.synthetic import distance_to_polyline, road_image


def band(rows=120, cols=200, top=40, bottom=69) -> np.ndarray:
    """Membership 1 on rows top..bottom (a 30 px wide horizontal river), 0 elsewhere."""
    surface = np.zeros((rows, cols))
    surface[top:bottom + 1] = 1.0
    return surface


def test_vertices_move_to_the_middle_of_the_surface():
    line = np.column_stack([np.linspace(10, 190, 10), np.full(10, 46.0)])  # 8.5 px off
    out = centre_on_surface(line, band(), np.zeros(2), np.pi)
    np.testing.assert_allclose(out[1:-1, 1], 54.5, atol=0.5)
    np.testing.assert_array_equal(out[[0, -1]], line[[0, -1]])  # the clicks stay
    np.testing.assert_array_equal(out[:, 0], line[:, 0])  # moved along the normal only
    # The same in another frame (the window's origin elsewhere).
    shifted = centre_on_surface(line + (300, 500), band(), np.array([300.0, 500.0]), np.pi)
    np.testing.assert_allclose(shifted - (300, 500), out)


def test_vertices_stay_where_the_surface_has_no_middle():
    line = np.column_stack([np.linspace(10, 190, 10), np.full(10, 50.0)])
    lake = np.ones((120, 200))  # no bank within reach
    np.testing.assert_array_equal(centre_on_surface(line, lake, np.zeros(2), np.pi), line)
    # A wide bay on one side at every vertex: runs wider than 1.5 × the width at the clicks.
    bay = band()
    bay[70:110, 20:180] = 1.0
    np.testing.assert_array_equal(centre_on_surface(line, bay, np.zeros(2), np.pi), line)
    # One odd vertex (a jetty across the river) does not kink the line.
    jetty = band()
    jetty[:, 98:103] = 0.0
    out = centre_on_surface(np.column_stack([np.linspace(10, 190, 19), np.full(19, 46.0)]),
                            jetty, np.zeros(2), np.pi)
    np.testing.assert_allclose(out[2:-2, 1], 54.5, atol=0.5)


def test_moves_keep_the_turning_angle_limit():
    line = np.column_stack([np.linspace(10, 190, 10), np.full(10, 46.0)])  # 8.5 px off
    limit = np.deg2rad(10.0)
    free = centre_on_surface(line, band(), np.zeros(2), np.pi)
    assert np.rad2deg(_turns(free)).max() > 20  # off the clicks to the middle: 23°
    held = centre_on_surface(line, band(), np.zeros(2), limit)
    assert _turns(held).max() <= limit + 1e-9
    assert np.all(held[1:-1, 1] > 46.0)  # every vertex moved towards the middle,
    assert np.all(held[3:7, 1] > 52.0)  # most of the way where the limit allows (52.6)


def test_river_mode_traces_the_middle_of_a_bend():
    """On a wide curved river the DP's ridge cuts the bend; river mode puts the line back in
    the middle (score 'centre': no model, the colour match is the surface)."""
    xs = np.linspace(20, 240, 45)
    centreline = np.column_stack([xs, 120 - 40 * np.sin(np.pi * (xs - 20) / 220)])
    image = road_image(centreline, size=(200, 260), width=30, noise=0.005,
                       colour=(0.2, 0.3, 0.45), background=(0.6, 0.55, 0.4))
    a, b = centreline[0], centreline[-1]
    off = {kind: distance_to_polyline(trace(image, a, b, TraceParams(
        score="centre", line_kind=kind)).polyline[1:-1], centreline)
        for kind in ("road", "river")}
    assert np.median(off["river"]) < 0.5
    assert off["river"].max() < 1.0
    assert np.median(off["river"]) < np.median(off["road"])  # measured: 0.16 vs 1.41 px
    timings = trace(image, a, b, TraceParams(score="centre", line_kind="river")).timings_ms
    assert 0 < timings["centring"] < timings["total"]  # the move counts in the click's time


def test_unknown_line_kind():
    image = road_image(np.array([[30.0, 100.0], [230.0, 100.0]]))
    with pytest.raises(BadParameter, match="line kind must be one of road, river, got 'lake'"):
        trace(image, (30, 100), (230, 100), TraceParams(line_kind="lake"))


def test_river_mode_centres_on_a_water_probability_map(tmp_path):
    """Score 'evidence' on a flat map follows any path inside it (here the inner bank);
    in river mode the line runs down the middle of the map."""
    import imageio.v3 as iio

    from core.raster import Raster

    xs = np.linspace(20, 240, 45)
    centreline = np.column_stack([xs, 110 - 40 * np.sin(np.pi * (xs - 20) / 220)])
    rows, cols = 200, 260
    y, x = np.mgrid[0:rows, 0:cols]
    distance = distance_to_polyline(np.stack([x.ravel(), y.ravel()], 1).astype(float),
                                    centreline).reshape(rows, cols)
    path = tmp_path / "water.png"
    iio.imwrite(path, (255 * np.clip(15.5 - distance, 0, 1)).astype(np.uint8))  # 30 px wide
    image = Raster(np.random.default_rng(0).random((rows, cols, 3), dtype=np.float32))
    off = {kind: distance_to_polyline(trace(image, centreline[0], centreline[-1], TraceParams(
        score="evidence", evidence_path=str(path), line_kind=kind)).polyline[1:-1],
        centreline) for kind in ("road", "river")}
    assert np.median(off["river"]) < 1.0  # measured 0.3 px
    assert np.median(off["road"]) > 5.0  # measured 12.4 px: along the inner bank
