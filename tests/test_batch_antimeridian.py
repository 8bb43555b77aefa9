"""Lon/lat lines (batch seeds, lines imported in the app) on images in a projected CRS across
the antimeridian (180°)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pyproj
import pytest
from affine import Affine

from core.backend import CpuBackend
from core.batch import ImageTask, plan_batch, process_image
from core.raster import load_image
from core.tracer import TraceParams
from core.vectors import read_lines, read_seeds, seeds_near_image
from tests.synthetic import road_image
from tests.test_georef import over_transformer, write_geotiff

#: Half the width of Web Mercator's map (m): x of 180°.
HALF_WORLD = 20037508.342789244
SIZE = 200
#: The road runs along this row, across the whole image, ROAD_WIDTH px wide.
ROAD_ROW = 100.0
ROAD_WIDTH = 6.0
#: Seed vertices (px): on the road, the middle one near the image's centre column.
SEED_PIXELS = np.array([[20.0, ROAD_ROW], [95.0, ROAD_ROW], [180.0, ROAD_ROW]])


def road_geotiff(path, crs: str, west: float) -> Affine:
    """A SIZE × SIZE px GeoTIFF of a horizontal road along ROAD_ROW, 0.5 map units per pixel,
    its west edge at map x ``west``; returns its transform."""
    image = road_image(np.array([[0.0, ROAD_ROW], [SIZE - 1.0, ROAD_ROW]]), size=(SIZE, SIZE),
                       width=ROAD_WIDTH)
    pixels = (np.clip(image.pixels, 0, 1) * 255).astype(np.uint8)
    transform = Affine(0.5, 0.0, west, 0.0, -0.5, 1000.0)
    write_geotiff(path, pixels, transform=transform, crs=crs)
    return transform


def seeds_file(path, crs: str, transform: Affine) -> list[list[float]]:
    """A seeds file of one lon/lat line through SEED_PIXELS (longitudes in [-180, 180], as
    PROJ gives them and RFC 7946 writes them); returns its coordinates."""
    to_lonlat = pyproj.Transformer.from_crs(crs, 4326, always_xy=True)
    coordinates = [list(to_lonlat.transform(*(transform @ (x + 0.5, y + 0.5))))
                   for x, y in SEED_PIXELS]
    path.write_text(json.dumps({"type": "Feature", "id": "road", "properties": {},
                                "geometry": {"type": "LineString",
                                             "coordinates": coordinates}}))
    return coordinates


def expected_pixels(coordinates, crs: str, transform: Affine) -> np.ndarray:
    """The reference: where PROJ itself puts the seed's vertices on the image when told not to
    wrap longitudes (``+over``), its longitudes unwrapped and moved by the turn of 360° (or
    none) that lands them on the image."""
    over = over_transformer(crs)
    lon, lat = np.array(coordinates).T
    for turn in (0.0, -360.0, 360.0):
        x, y = over.transform(np.unwrap(lon, period=360.0) + turn, lat)
        col, row = ~transform @ (np.asarray(x), np.asarray(y))
        pixels = np.column_stack([col - 0.5, row - 0.5])
        if np.all((pixels >= -0.5) & (pixels <= SIZE - 0.5)):
            return pixels
    raise AssertionError(f"no turn of {coordinates} lands on the image")


def ordinary_pixels(coordinates, crs: str, transform: Affine) -> np.ndarray:
    """Where PROJ puts the seed's vertices (longitudes wrapped into the CRS's map)."""
    lon, lat = np.array(coordinates).T
    x, y = pyproj.Transformer.from_crs(4326, crs, always_xy=True).transform(lon, lat)
    col, row = ~transform @ (np.asarray(x), np.asarray(y))
    return np.column_stack([col - 0.5, row - 0.5])


@pytest.mark.parametrize(("crs", "west", "at_the_map_edge"), [
    ("EPSG:3857", HALF_WORLD - 50.0, True),  # across 180°: the map's east edge, x past it
    ("EPSG:3857", -HALF_WORLD - 50.0, True),  # across 180°: the map's west edge, x before it
    ("EPSG:3832", HALF_WORLD - 50.0, True),  # Mercator of 150°E: across its edge, -30°
    ("EPSG:3832", 3339584.723798207 - 50.0, False),  # across 180°, inside its map
])
def test_lonlat_seeds_reach_a_mercator_image_across_the_map_edge(tmp_path, crs, west,
                                                                 at_the_map_edge):
    images = tmp_path / "images"
    images.mkdir()
    transform = road_geotiff(images / "tile.tif", crs, west)
    coordinates = seeds_file(tmp_path / "seeds.geojson", crs, transform)
    # PROJ puts the seed's ends at the map's two edges, a map's width apart.
    assert (np.ptp(ordinary_pixels(coordinates, crs, transform)[:, 0]) > 1e7) == at_the_map_edge
    expected = expected_pixels(coordinates, crs, transform)
    np.testing.assert_allclose(expected, SEED_PIXELS, atol=1e-6)  # the reference agrees
    [task] = plan_batch(images, tmp_path / "seeds.geojson", tmp_path / "out").tasks
    assert [seed.id for seed in task.seeds] == ["road"]  # its footprint meets the seed
    report, document = process_image(task, CpuBackend)
    assert (report.status, report.segments) == ("ok", 2)
    [line] = document["features"]
    np.testing.assert_allclose(line["properties"]["anchors_px"], expected, atol=1e-3)
    pixels = np.array(line["properties"]["pixels"])
    np.testing.assert_allclose(pixels[[0, -1]], SEED_PIXELS[[0, -1]], atol=1e-3)
    np.testing.assert_allclose(pixels[:, 1], ROAD_ROW, atol=ROAD_WIDTH / 2)  # on the road


def test_a_long_seed_stays_one_line_round_the_map(tmp_path):
    """A seed that goes on from the image round half the world is followed along the map: its
    vertices far away (1° and -1°, either side of the image's antipode) are not split
    between the map's two copies, which would cross the image on the way."""
    transform = road_geotiff(tmp_path / "tile.tif", "EPSG:3857", HALF_WORLD - 50.0)
    coordinates = seeds_file(tmp_path / "seeds.geojson", "EPSG:3857", transform)
    latitude = coordinates[0][1]
    coordinates = coordinates[:2] + [[-90.0, latitude], [-1.0, latitude], [1.0, latitude]]
    seeds = [replace(seed, vertices=np.array(coordinates))
             for seed in read_seeds(tmp_path / "seeds.geojson")[0]]
    report, document = process_image(
        ImageTask(str(tmp_path / "tile.tif"), tuple(seeds), TraceParams()), CpuBackend)
    assert report.segments == 2
    [line] = document["features"]  # one piece: into the image, east out of it
    np.testing.assert_allclose(line["properties"]["anchors_px"],
                               [SEED_PIXELS[0], SEED_PIXELS[1], [SIZE - 1.0, ROAD_ROW],
                                [SIZE - 0.5, ROAD_ROW]], atol=1e-3)


@pytest.mark.parametrize(("crs", "west"), [("EPSG:3857", 1113194.9), ("EPSG:32660", 600000.0)])
def test_images_away_from_the_antimeridian_read_seeds_as_before(tmp_path, crs, west):
    """Away from the map's edge (and in a CRS whose map does not repeat), seeds are left as
    they are and land exactly where PROJ puts them."""
    transform = road_geotiff(tmp_path / "tile.tif", crs, west)
    coordinates = seeds_file(tmp_path / "seeds.geojson", crs, transform)
    [seed] = read_seeds(tmp_path / "seeds.geojson")[0]
    with load_image(tmp_path / "tile.tif") as raster:
        [near] = seeds_near_image((seed,), raster)
        np.testing.assert_array_equal(near.vertices, seed.vertices)
        np.testing.assert_array_equal(raster.georef.lonlat_to_pixel(near.vertices),
                                      ordinary_pixels(coordinates, crs, transform))
    np.testing.assert_allclose(ordinary_pixels(coordinates, crs, transform), SEED_PIXELS,
                               atol=1e-6)


def test_lines_imported_onto_a_mercator_image_across_the_map_edge(tmp_path):
    """The app's import reads lon/lat lines as batch does: on the image, not a map away."""
    transform = road_geotiff(tmp_path / "tile.tif", "EPSG:3857", HALF_WORLD - 50.0)
    coordinates = seeds_file(tmp_path / "lines.geojson", "EPSG:3857", transform)
    with load_image(tmp_path / "tile.tif") as raster:
        (line,), failures = read_lines(tmp_path / "lines.geojson", raster, "tile.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors,
                               expected_pixels(coordinates, "EPSG:3857", transform), atol=1e-3)
