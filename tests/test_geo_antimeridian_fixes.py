"""Lines on images across the antimeridian and near the poles: geographic CRSs other than
WGS84, documents in another projected CRS, where a line is cut at ±180°; and the pieces of a
line spanning two tiles (and their edge points); and the straight segments of the app's export
read back."""

from __future__ import annotations

import numpy as np
import pyproj
import pytest
from affine import Affine

from core.geojson import feature_collection, line_feature
from core.georef import Georef
from core.raster import Raster
from core.vectors import (
    Seed,
    centre_longitude,
    near_centre,
    pieces_in_image,
    read_lines,
    seeds_in_image,
)
from tests.test_vectors import collection, write

SIZE = 300
#: Seed vertices (px) across the image.
SEED_PIXELS = np.array([[20.0, 150.0], [280.0, 150.0]])
#: Half the width of Web Mercator's map (m): x of 180°.
HALF_WORLD = 20037508.342789244


def blank_raster(transform: Affine, crs: str, name: str = "tile.tif") -> Raster:
    """A blank SIZE × SIZE image georeferenced by ``transform`` in ``crs``."""
    return Raster(np.zeros((SIZE, SIZE, 3), np.float32), name,
                  Georef(transform, pyproj.CRS.from_user_input(crs), "test"))


def lonlat_of(pixels: np.ndarray, transform: Affine, crs: str) -> np.ndarray:
    """WGS84 lon/lat of pixels (N, 2), longitudes within ±180° (as RFC 7946 writes them)."""
    x, y = transform @ (pixels + 0.5).T
    lon, lat = pyproj.Transformer.from_crs(crs, 4326, always_xy=True).transform(x, y)
    return np.column_stack([(np.asarray(lon) + 180.0) % 360.0 - 180.0, lat])


def placed_by_proj(lonlat: np.ndarray, transform: Affine, crs: str) -> np.ndarray:
    """The reference: pixels (N, 2) of lon/lat points (N, 2) where PROJ puts them in ``crs``
    (in degrees), each longitude moved by the whole turns that bring it onto the image."""
    lon, lat = pyproj.Transformer.from_crs(4326, crs, always_xy=True).transform(*lonlat.T)
    centre = (transform @ (SIZE / 2, SIZE / 2))[0]
    lon = np.asarray(lon) + 360.0 * np.round((centre - np.asarray(lon)) / 360.0)
    col, row = ~transform @ (lon, np.asarray(lat))
    return np.column_stack([col - 0.5, row - 0.5])


# ------------------------------------------------- geographic CRSs other than WGS84 (bug 1)
@pytest.mark.parametrize("crs", ["EPSG:4269", "EPSG:4617", "EPSG:4301", "EPSG:4322",
                                 "EPSG:4326"])
@pytest.mark.parametrize(("west", "north"), [(179.9985, 52.0),  # across 180°
                                              (204.2015, 21.3)])  # Honolulu in 0..360°
def test_lonlat_lines_reach_an_image_in_degrees_past_180(tmp_path, crs, west, north):
    """On an image in a geographic CRS whose longitudes run past 180°, lon/lat lines land on
    its pixels (within 0.01 px) in batch and in the app's import alike: PROJ's longitudes,
    folded into ±180°, are moved back by whole turns as WGS84's own are kept."""
    transform = Affine(1e-5, 0.0, west, 0.0, -1e-5, north)
    raster = blank_raster(transform, crs)
    lonlat = lonlat_of(SEED_PIXELS, transform, crs)
    assert np.all(np.abs(lonlat[:, 0]) <= 180.0)
    expected = placed_by_proj(lonlat, transform, crs)
    # PROJ's two directions agree within 0.1 px (0.6 m for Tokyo's datum shift in Hawaii).
    np.testing.assert_allclose(expected, SEED_PIXELS, atol=0.1)
    near = near_centre(lonlat, centre_longitude(raster))
    np.testing.assert_allclose(raster.georef.lonlat_to_pixel(near), expected, atol=0.01)
    (_, pixels, _), = seeds_in_image([Seed("road", lonlat)], "tile.tif", raster)
    np.testing.assert_allclose(pixels, expected, atol=0.01)
    (line,), failures = read_lines(write(tmp_path, collection(lonlat)), raster, "tile.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, expected, atol=0.01)


@pytest.mark.parametrize("crs", ["EPSG:4269", "EPSG:4322"])
def test_a_geographic_crs_keeps_the_turn_of_its_longitudes_both_ways(crs):
    """Past 180° stays past 180° (to and from the image's CRS), even where a datum shift
    carries a longitude over ±180° (WGS 72 at -179.9999°: PROJ gives 179.99994°)."""
    transform = Affine(1e-5, 0.0, 204.2015, 0.0, -1e-5, 21.3)
    raster = blank_raster(transform, crs)
    lonlat = raster.georef.pixel_to_lonlat(SEED_PIXELS)
    np.testing.assert_allclose(lonlat[:, 0], 204.2015 + 1e-5 * (SEED_PIXELS[:, 0] + 0.5),
                               atol=1e-3)  # a datum shift apart, not a turn
    np.testing.assert_allclose(raster.georef.lonlat_to_pixel(lonlat), SEED_PIXELS, atol=0.01)
    across = blank_raster(Affine(1e-5, 0.0, 179.9985, 0.0, -1e-5, 35.0), crs)
    pixels = across.georef.lonlat_to_pixel([[180.0001, 35.0], [-179.9999, 35.0]])
    assert abs(pixels[0, 0] - 159.5) < 20.0  # a datum shift off (WGS 72: 15 px, 14 m)
    np.testing.assert_allclose(pixels[1], pixels[0] - [360.0 / 1e-5, 0.0], atol=0.01)


# ---------------------------------------------- documents in another projected CRS (bug 2)
@pytest.mark.parametrize("side", [0.0, -2 * HALF_WORLD])  # past the map's east edge; its west
def test_a_source_crs_export_is_placed_on_an_image_across_the_antimeridian(tmp_path, side):
    """A ``--crs source`` export in Web Mercator (x past the map's edge, or the same points
    at its other edge) imported onto an image in degrees across 180° lands on its pixels, as
    the same lines in lon/lat do: read as the lon/lat they stand for, placed near the image."""
    transform = Affine(1e-5, 0.0, 179.9985, 0.0, -1e-5, -15.959)
    raster = blank_raster(transform, "EPSG:4326")
    lonlat = transform @ (SEED_PIXELS + 0.5).T
    x, y = pyproj.Transformer.from_crs(4326, "EPSG:3857", always_xy=True).transform(*lonlat)
    mercator = np.column_stack([np.unwrap(x, period=2 * HALF_WORLD), y])
    mercator[:, 0] += 2 * HALF_WORLD * (mercator[0, 0] < 0)  # from the map's east edge on
    assert mercator[0, 0] < HALF_WORLD < mercator[1, 0]  # the second vertex past it
    mercator[:, 0] += side
    document = collection(mercator, crs={"type": "name", "properties": {
        "name": "urn:ogc:def:crs:EPSG::3857"}})
    (line,), failures = read_lines(write(tmp_path, document), raster, "tile.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, SEED_PIXELS, atol=0.01)


def test_a_source_crs_export_of_the_image_s_own_crs_is_read_as_it_is(tmp_path):
    """Map coordinates in the image's own CRS go straight to its pixels: past the map's
    edge of an image there, as it wrote them."""
    transform = Affine(0.5, 0.0, HALF_WORLD - 50.0, 0.0, -0.5, 1000.0)
    raster = blank_raster(transform, "EPSG:3857")
    document = collection(np.column_stack(transform @ (SEED_PIXELS + 0.5).T), crs={
        "type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::3857"}})
    (line,), failures = read_lines(write(tmp_path, document), raster, "tile.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, SEED_PIXELS, atol=1e-6)


# ------------------------------------------------------ the cut at ±180° near a pole (bug 3)
def distance_to_segment(point: np.ndarray, start: np.ndarray, end: np.ndarray) -> float:
    """Distance (px) from ``point`` to the segment ``start``–``end``."""
    along = np.clip((point - start) @ (end - start) / ((end - start) @ (end - start)), 0, 1)
    return float(np.hypot(*(start + along * (end - start) - point)))


@pytest.mark.parametrize(("crs", "row", "crossing"), [
    ("EPSG:3413", 120.0, 120.0),  # 180° runs up-left from the pole (central meridian -45°)
    ("EPSG:3031", 180.0, 149.5),  # 180° runs straight down from the pole
])
def test_the_cut_at_the_antimeridian_lies_on_the_traced_segment_near_a_pole(crs, row,
                                                                              crossing):
    """A straight pixel segment 30 px (300 m) from the pole is a curve in lon/lat: the point
    written at ±180° is where the segment meets the antimeridian, within 0.01 px."""
    transform = Affine(10.0, 0.0, -1500.0, 0.0, -10.0, 1500.0)  # the pole at (149.5, 149.5)
    raster = blank_raster(transform, crs)
    pixels = np.array([[20.0, row], [100.0, row], [210.0, row], [280.0, row]])
    geometry = line_feature(pixels, raster)["geometry"]
    assert geometry["type"] == "MultiLineString"
    (*_, west_end), (east_start, *_) = geometry["coordinates"]
    assert abs(west_end[0]) == abs(east_start[0]) == 180.0
    assert west_end[1] == east_start[1]
    to_map = pyproj.Transformer.from_crs(4326, crs, always_xy=True)
    point = np.array(~transform @ to_map.transform(*west_end)) - 0.5
    assert distance_to_segment(point, pixels[1], pixels[2]) < 0.01
    np.testing.assert_allclose(point, [crossing, row], atol=0.01)


def test_a_line_that_crosses_no_antimeridian_is_one_part():
    transform = Affine(10.0, 0.0, -1500.0, 0.0, -10.0, 1500.0)
    raster = blank_raster(transform, "EPSG:3413")
    pixels = np.array([[20.0, 200.0], [280.0, 200.0]])  # below the pole: away from 180°
    geometry = line_feature(pixels, raster)["geometry"]
    assert geometry["type"] == "LineString"
    np.testing.assert_allclose(geometry["coordinates"], raster.georef.pixel_to_lonlat(pixels),
                               atol=1e-7)


# ---------------------------------------------------- a line spanning two tiles (bug 4: docs)
def test_a_line_over_two_tiles_is_clipped_to_each_tile_s_pixel_centres():
    """As docs/GEO.md says: each tile's piece ends on the centre line of its edge pixels
    (where the tracer's ends may lie), half a pixel short of the shared edge, and its edge
    point (where batch's straight leg ends) lies on that edge, the same map point from both
    tiles."""
    tiles = [Affine(0.5, 0.0, 388000.0 + 150.0 * k, 0.0, -0.5, 3950000.0) for k in (0, 1)]
    lonlat = lonlat_of(np.array([[20.0, 150.0], [200.0, 150.0], [580.0, 150.0]]), tiles[0],
                       "EPSG:32654")
    ends, edges = [], []
    for k, transform in enumerate(tiles):
        raster = blank_raster(transform, "EPSG:32654", f"{k}.tif")
        (_, pixels, (start, end)), = seeds_in_image([Seed("road", lonlat)], f"{k}.tif", raster)
        ends.append(pixels[-1] if k == 0 else pixels[0])
        edges.append(end if k == 0 else start)
        assert (start if k == 0 else end) is None  # the seed's own ends lie inside
        np.testing.assert_allclose(ends[-1], [SIZE - 1.0 if k == 0 else 0.0, 150.0],
                                   atol=0.01)
        np.testing.assert_allclose(edges[-1], [SIZE - 0.5 if k == 0 else -0.5, 150.0],
                                   atol=0.01)
    gap = np.array(tiles[1] @ (ends[1] + 0.5)) - np.array(tiles[0] @ (ends[0] + 0.5))
    np.testing.assert_allclose(gap, [0.5, 0.0], atol=1e-6)  # one 0.5 m pixel
    met = np.array(tiles[1] @ (edges[1] + 0.5)) - np.array(tiles[0] @ (edges[0] + 0.5))
    np.testing.assert_allclose(met, [0.0, 0.0], atol=1e-6)


# ----------------------------------------------- straight segments of the app's export (bug 5)
ANCHORS = np.array([[10.0, 10.0], [100.0, 10.0], [100.0, 100.0], [200.0, 150.0]])


def export(straight, anchors=ANCHORS, details=None) -> dict:
    """A document like the app's export of one line through ``anchors`` (its geometry dense
    between them, in pixels), ``straight`` per segment."""
    dense = np.vstack([anchors[:1]] + [np.linspace(a, b, 6)[1:]
                                       for a, b in zip(anchors[:-1], anchors[1:],
                                                       strict=True)])
    properties = {"name": "track", "anchors": anchors.tolist(), "segment_details": [
        {"straight": flag, "params": None} for flag in straight] if details is None
        else details}
    return collection(dense, properties, coordinate_space="pixel")


def plain_raster() -> Raster:
    return Raster(np.zeros((SIZE, SIZE, 3), np.float32), "plain.png", None)


def test_straight_segments_of_an_export_come_back(tmp_path):
    (line,), failures = read_lines(write(tmp_path, export([False, True, False])),
                                   plain_raster(), "plain.png")
    assert failures == []
    np.testing.assert_allclose(line.anchors, ANCHORS)
    assert line.straight == (False, True, False)
    # Without segment_details (batch output, another program's file): none straight.
    document = export([False] * 3)
    del document["features"][0]["properties"]["segment_details"]
    (line,), _ = read_lines(write(tmp_path, document), plain_raster(), "plain.png")
    assert line.straight == (False, False, False)
    # Anchors of another image: the geometry's vertices, none straight.
    document = export([True] * 3)
    document["features"][0]["properties"]["anchors"] = (ANCHORS + 40).tolist()
    (line,), _ = read_lines(write(tmp_path, document), plain_raster(), "plain.png")
    assert len(line.anchors) == 16
    assert line.straight == (False,) * 15


def test_a_dropped_anchor_joins_two_segments_straight_only_where_both_were(tmp_path):
    anchors = np.array([[10.0, 10.0], [100.0, 10.0], [100.5, 10.5], [200.0, 150.0],
                        [250.0, 150.0]])
    for straight, expected in (([True, True, True, False], (True, True, False)),
                               ([True, False, True, True], (True, False, True))):
        (line,), _ = read_lines(write(tmp_path, export(straight, anchors)), plain_raster(),
                                "plain.png")
        np.testing.assert_allclose(line.anchors, anchors[[0, 1, 3, 4]])
        assert line.straight == expected


@pytest.mark.parametrize("details", [
    [{"straight": True}, {"straight": False}],  # one short
    [{"straight": True}, {"straight": False}, {"straight": 1}],  # not true or false
    [{"straight": True}, {"straight": False}, {"params": None}],  # missing
    [{"straight": True}, {"straight": False}, True],  # not an object
    {"straight": True}, "straight"])
def test_segment_details_that_are_not_one_flag_per_segment_skip_the_line(tmp_path, details):
    lines, (failure,) = read_lines(write(tmp_path, export(None, details=details)),
                                   plain_raster(), "plain.png")
    assert lines == []
    assert "properties.segment_details" in failure.reason
    assert "one object per segment between the anchors (3)" in failure.reason


def test_pieces_in_image_name_the_segment_of_each_of_theirs():
    """In, in, out, in: two pieces, of segments 0 and 1 (the second clipped), and 2."""
    vertices = np.array([[10.0, 10], [50, 10], [150, 10], [60, 20]])
    (first, first_segments, _), (second, second_segments, _) = pieces_in_image(vertices, 100,
                                                                               50)
    np.testing.assert_allclose(first, [[10, 10], [50, 10], [99, 10]])
    np.testing.assert_allclose(second, [[99, 10 + 10 * 51 / 90], [60, 20]])
    assert first_segments.tolist() == [0, 1]
    assert second_segments.tolist() == [2]


def test_an_export_across_the_antimeridian_in_a_geographic_crs_comes_back(tmp_path):
    """The app's export of a line on a NAD83 image across 180° (cut there into two parts)
    reads back onto the image with its anchors."""
    transform = Affine(1e-5, 0.0, 179.9985, 0.0, -1e-5, 52.0)
    raster = blank_raster(transform, "EPSG:4269")
    anchors = np.array([[20.0, 150.0], [140.0, 140.0], [280.0, 150.0]])
    feature = line_feature(anchors, raster, {"anchors": anchors.tolist(), "segment_details": [
        {"straight": True}, {"straight": False}]})
    assert feature["geometry"]["type"] == "MultiLineString"
    (line,), failures = read_lines(write(tmp_path, feature_collection([feature], raster)),
                                   raster, "tile.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, anchors, atol=0.01)
    assert line.straight == (True, False)
