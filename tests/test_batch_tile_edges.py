"""A lon/lat seed over adjacent tiles: each tile's line goes on straight from its traced end
(on the centre line of the edge pixels, where the tracer's ends may lie) to the tile's outer
edge, so that the lines of two tiles meet on their shared edge."""

from __future__ import annotations

import json

import numpy as np
import pyproj
import pytest
from affine import Affine

from cli import main as cli_main
from core.backend import CpuBackend
from core.batch import ImageTask, process_image
from core.raster import load_image
from core.tracer import TraceParams
from core.vectors import pieces_in_image, read_lines, read_seeds
from tests.synthetic import road_image
from tests.test_georef import write_geotiff

CRS = "EPSG:32654"
SIZE = 200
ROW = 100.0
#: Tile k's transform: 0.5 m pixels, side by side along x.
TILES = [Affine(0.5, 0.0, 388000.0 + 0.5 * SIZE * k, 0.0, -0.5, 3950000.0) for k in (0, 1)]


def lonlat_of(pixels, transform: Affine = TILES[0]) -> list[list[float]]:
    """WGS84 lon/lat of pixels (N, 2) of the tile of ``transform``."""
    x, y = transform @ (np.asarray(pixels, dtype=np.float64) + 0.5).T
    lon, lat = pyproj.Transformer.from_crs(CRS, 4326, always_xy=True).transform(x, y)
    return np.column_stack([lon, lat]).tolist()


def write_tiles(folder, centreline) -> None:
    """Tiles a.tif and b.tif, cut side by side from one image of a bright road along
    ``centreline`` (pixels of the two tiles' whole: tile a's)."""
    folder.mkdir()
    image = road_image(np.asarray(centreline, dtype=np.float64), size=(SIZE, 2 * SIZE),
                       width=6.0)
    pixels = (np.clip(image.pixels, 0, 1) * 255).astype(np.uint8)
    for k, name in enumerate(("a.tif", "b.tif")):
        write_geotiff(folder / name, np.ascontiguousarray(pixels[:, k * SIZE:(k + 1) * SIZE]),
                      transform=TILES[k], crs=CRS)


def write_seeds(path, pixels) -> None:
    path.write_text(json.dumps({"type": "Feature", "id": "road", "properties": {},
                                "geometry": {"type": "LineString",
                                             "coordinates": lonlat_of(pixels)}}))


def run_batch(capsys, images, seeds, out, crs: str) -> dict:
    """The output documents of ``batch`` per tile ("a", "b")."""
    code = cli_main(["batch", str(images), "--seeds", str(seeds), "-o", str(out),
                     "--backend", "cpu", "--crs", crs])
    assert code == 0, capsys.readouterr().err
    return {name: json.loads((out / f"{name}.geojson").read_text()) for name in ("a", "b")}


@pytest.fixture
def two_tiles(tmp_path):
    """A folder of two tiles with a road along ROW over both, and a seed along it from tile
    a's column 30 to tile b's column 170."""
    write_tiles(tmp_path / "tiles", [[0.0, ROW], [2 * SIZE - 1.0, ROW]])
    write_seeds(tmp_path / "seeds.geojson", [[30.0, ROW], [SIZE + 170.0, ROW]])
    return tmp_path


@pytest.mark.parametrize(("crs", "tolerance"), [("source", 1e-6), ("wgs84", 1e-9)])
def test_the_lines_of_adjacent_tiles_meet_on_their_shared_edge(two_tiles, capsys, crs,
                                                               tolerance):
    documents = run_batch(capsys, two_tiles / "tiles", two_tiles / "seeds.geojson",
                          two_tiles / f"out-{crs}", crs)
    [a], [b] = documents["a"]["features"], documents["b"]["features"]
    assert a["geometry"]["type"] == b["geometry"]["type"] == "LineString"
    np.testing.assert_allclose(a["geometry"]["coordinates"][-1],
                               b["geometry"]["coordinates"][0], rtol=0, atol=tolerance)
    if crs == "source":  # on the tiles' shared edge, x = 388100 m
        assert a["geometry"]["coordinates"][-1][0] == pytest.approx(388100.0, abs=1e-6)
    # Tile a's line ends, tile b's starts, with a straight half-pixel leg to the edge; the
    # seed's ends inside the tiles are not extended.
    assert a["properties"]["extended_to_edge"] == ["end"]
    assert b["properties"]["extended_to_edge"] == ["start"]
    np.testing.assert_allclose(a["properties"]["anchors_px"], [[30, ROW], [SIZE - 1, ROW],
                                                               [SIZE - 0.5, ROW]], atol=1e-3)
    np.testing.assert_allclose(b["properties"]["anchors_px"], [[-0.5, ROW], [0, ROW],
                                                               [170, ROW]], atol=1e-3)
    assert a["properties"]["segment_details"] == [{"straight": False}, {"straight": True}]
    assert b["properties"]["segment_details"] == [{"straight": True}, {"straight": False}]
    # Per leg, as traced_line_feature writes a leg drawn straight.
    assert a["properties"]["segment_scores"][1] is None
    assert a["properties"]["segment_params"][1] is None
    assert a["properties"]["link_scores"][1] == []
    assert a["properties"]["segments"] == [0, 0]
    assert b["properties"]["segments"] == [0, 0]
    assert a["properties"]["pixels"][-1] == pytest.approx([SIZE - 0.5, ROW], abs=1e-3)
    # The record counts traced segments only.
    assert documents["a"]["roadtracer_batch"]["segments"] == 1


@pytest.mark.parametrize("crs", ["source", "wgs84"])
def test_the_output_reads_back_into_the_app_with_its_traced_anchors(two_tiles, capsys, crs):
    """The app's reader accepts an anchor on the image's outer edge (the pixel-area box) and
    clips the line to the pixel centres, where its anchors may lie: the half-pixel leg is
    dropped, and the traced anchors come back."""
    out = two_tiles / "out"
    documents = run_batch(capsys, two_tiles / "tiles", two_tiles / "seeds.geojson", out, crs)
    for name in ("a", "b"):
        raster = load_image(two_tiles / "tiles" / f"{name}.tif")
        lines, failures = read_lines(out / f"{name}.geojson", raster, f"{name}.tif")
        assert failures == []
        [line] = lines
        anchors = np.array(documents[name]["features"][0]["properties"]["anchors_px"])
        traced = anchors[:-1] if name == "a" else anchors[1:]
        np.testing.assert_allclose(line.anchors, traced, atol=1e-3)
        assert line.straight == (False,)


def test_a_seed_ending_inside_the_image_is_not_extended(tmp_path):
    write_tiles(tmp_path / "tiles", [[0.0, ROW], [2 * SIZE - 1.0, ROW]])
    write_seeds(tmp_path / "seeds.geojson", [[30.0, ROW], [170.0, ROW]])
    seeds, _ = read_seeds(tmp_path / "seeds.geojson")
    report, document = process_image(ImageTask(str(tmp_path / "tiles" / "a.tif"), tuple(seeds),
                                               TraceParams()), CpuBackend)
    assert report.status == "ok"
    [line] = document["features"]
    assert "extended_to_edge" not in line["properties"]
    assert line["properties"]["segment_details"] == [{"straight": False}]
    np.testing.assert_allclose(line["properties"]["anchors_px"], [[30, ROW], [170, ROW]],
                               atol=1e-3)


def test_a_piece_clipped_at_both_ends_reaches_both_edges(tmp_path, capsys):
    """A seed across the whole of tile b (from tile a to beyond tile b)."""
    write_tiles(tmp_path / "tiles", [[0.0, ROW], [2 * SIZE - 1.0, ROW]])
    write_seeds(tmp_path / "seeds.geojson", [[150.0, ROW], [2 * SIZE + 60.0, ROW]])
    documents = run_batch(capsys, tmp_path / "tiles", tmp_path / "seeds.geojson",
                          tmp_path / "out", "source")
    [b] = documents["b"]["features"]
    assert b["properties"]["extended_to_edge"] == ["start", "end"]
    np.testing.assert_allclose(b["properties"]["anchors_px"],
                               [[-0.5, ROW], [0, ROW], [SIZE - 1, ROW], [SIZE - 0.5, ROW]],
                               atol=1e-3)
    assert [d["straight"] for d in b["properties"]["segment_details"]] == [True, False, True]
    coordinates = np.array(b["geometry"]["coordinates"])
    np.testing.assert_allclose(coordinates[[0, -1], 0], [388100.0, 388200.0], atol=1e-6)
    [a] = documents["a"]["features"]
    np.testing.assert_allclose(a["geometry"]["coordinates"][-1], coordinates[0], atol=1e-6)
    lines, failures = read_lines(tmp_path / "out" / "b.geojson",
                                 load_image(tmp_path / "tiles" / "b.tif"), "b.tif")
    assert failures == []
    np.testing.assert_allclose(lines[0].anchors, [[0, ROW], [SIZE - 1, ROW]], atol=1e-3)


def test_a_seed_leaving_through_a_corner_reaches_the_corner(tmp_path):
    """A diagonal seed leaves tile a through its south-east corner: the leg goes on along it
    to the corner of the pixel-area box."""
    write_tiles(tmp_path / "tiles", [[0.0, 0.0], [2 * SIZE - 1.0, 2 * SIZE - 1.0]])
    write_seeds(tmp_path / "seeds.geojson", [[40.0, 40.0], [260.0, 260.0]])
    seeds, _ = read_seeds(tmp_path / "seeds.geojson")
    report, document = process_image(ImageTask(str(tmp_path / "tiles" / "a.tif"), tuple(seeds),
                                               TraceParams()), CpuBackend)
    assert report.status == "ok"
    [line] = document["features"]
    assert line["properties"]["extended_to_edge"] == ["end"]
    np.testing.assert_allclose(line["properties"]["anchors_px"][-2:],
                               [[SIZE - 1, SIZE - 1], [SIZE - 0.5, SIZE - 0.5]], atol=1e-3)
    corner = TILES[0] @ (SIZE, SIZE)
    lonlat = pyproj.Transformer.from_crs(CRS, 4326, always_xy=True).transform(*corner)
    np.testing.assert_allclose(line["geometry"]["coordinates"][-1], lonlat, atol=1e-7)


def test_pieces_edge_points_clip_the_clipped_ends_segments_to_the_pixel_area():
    vertices = np.array([[-20.0, 10.0], [50.0, 10.0], [150.0, 60.0], [60.0, 30.0],
                         [60.0, 45.0], [99.3, 45.0]])
    (first, _, (start, end)), (second, _, (start_2, end_2)) = pieces_in_image(vertices, 100, 50)
    # Pieces entering through x = -0.5, leaving through x = 99.5 (in the segment's direction)
    # and re-entering there ...
    np.testing.assert_allclose(first, [[0, 10], [50, 10], [99, 34.5]])
    np.testing.assert_allclose([start, end], [[-0.5, 10], [99.5, 34.75]])
    np.testing.assert_allclose(second[0], [99, 43])
    np.testing.assert_allclose(start_2, [99.5, 60 - 30 * 50.5 / 90])
    # ... and ending in the outer half pixel (x = 99.3): its edge point is the seed's end.
    np.testing.assert_allclose(second[-1], [99, 45])
    np.testing.assert_allclose(end_2, [99.3, 45])
    # An end that is not clipped has no edge point.
    [(_, _, edges)] = pieces_in_image(np.array([[10.0, 10.0], [90.0, 40.0]]), 100, 50)
    assert edges == (None, None)
