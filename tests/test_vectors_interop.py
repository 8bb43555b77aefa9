"""GeoJSON from and for other GIS tools: pixel exports of another image, exports edited in
QGIS, GeoJSONSeq, files that are no GeoJSON, ``crs`` members, pixel seeds, image names, and
placing many features at once (core.vectors)."""

import json
import math
import os
import sys
import threading

import numpy as np
import pytest

from core.errors import BadParameter
from core.geojson import PIXEL_CRS, feature_collection, line_feature
from core.georef import Georef, GeorefError
from core.output import shortened
from core.raster import Raster
from core.vectors import FEATURES_PER_STEP, read_lines, read_seeds
from tests.test_vectors import PIXELS, collection, georeferenced_raster, write


def plain_raster(name: str) -> Raster:
    """A blank 400 × 400 image without georeferencing, file ``name``."""
    return Raster(np.zeros((400, 400, 3), np.float32), name)


def pixel_export(name: str, properties: dict | None = None) -> dict:
    """roadtracer's export of a line on the image ``name`` (no georeferencing): in pixels."""
    raster = plain_raster(name)
    return feature_collection([line_feature(PIXELS, raster, properties)], raster)


# ------------------------------------------------------------- 1. another image's pixels
def test_a_pixel_export_of_another_image_is_skipped_naming_it(tmp_path):
    path = write(tmp_path, pixel_export("a.png"))
    for raster, name in ((plain_raster("b.png"), "b.png"),
                         (georeferenced_raster(), "scene.tif")):
        lines, failures = read_lines(path, raster, name)
        assert lines == []
        assert [(f.seed, f.reason) for f in failures] == [
            ("#0", "properties.source_image names another image (a.png)")]
    (line,), failures = read_lines(path, plain_raster("a.png"), "a.png")
    assert failures == []
    np.testing.assert_allclose(line.anchors, PIXELS)
    # properties.image says which image, before source_image.
    path = write(tmp_path, pixel_export("a.png", {"image": "b.png"}))
    (line,), _ = read_lines(path, plain_raster("b.png"), "b.png")
    np.testing.assert_allclose(line.anchors, PIXELS)
    assert read_lines(path, plain_raster("a.png"), "a.png")[1][0].reason == (
        "properties.image names another image (b.png)")


def test_image_names_match_as_batch_matches_them(tmp_path, monkeypatch):
    path = write(tmp_path, collection(PIXELS, {"image": "SCENE.TIF"}))
    raster = georeferenced_raster()
    for platform, found in (("linux", 0), ("darwin", 1)):
        monkeypatch.setattr(sys, "platform", platform)
        lines, failures = read_lines(path, raster, "scene.tif")
        assert (len(lines), len(failures)) == (found, 1 - found)


# ----------------------------------------------------------- 2. an export edited in QGIS
#: A traced line through the anchors PIXELS: four segments per leg, bulging 20 px to one side.
BULGE = np.array([0.0, math.sin(math.pi / 4), 1.0, math.sin(math.pi / 4)]) * 20.0


def traced_polyline() -> np.ndarray:
    legs = []
    for a, b in zip(PIXELS[:-1], PIXELS[1:], strict=True):
        normal = np.array([-(b - a)[1], (b - a)[0]]) / np.hypot(*(b - a))
        legs.append(a + np.linspace(0.0, 1.0, 5)[:-1, None] * (b - a) + BULGE[:, None] * normal)
    return np.vstack([*legs, PIXELS[-1:]])


def edited_export(geometry: np.ndarray, raster: Raster) -> dict:
    """The lon/lat export of the traced line (its anchors, its pixels) whose geometry was then
    edited to ``geometry`` (pixels)."""
    feature = line_feature(traced_polyline(), raster, {"anchors_px": PIXELS.tolist()})
    feature["geometry"]["coordinates"] = raster.georef.pixel_to_lonlat(geometry).tolist()
    return feature_collection([feature], raster)


def edits() -> dict[str, tuple[np.ndarray, str | None]]:
    """Edited geometries (pixels) of the traced line, and what the note says of them."""
    line = traced_polyline()
    moved, moved_anchor = line.copy(), line.copy()
    moved[2] += [0.0, 10.0]
    moved_anchor[4] += [10.0, 0.0]
    return {
        "none": (line, None),
        "vertex moved": (moved, "its vertex 2 "),
        "vertex inserted off the line": (np.insert(line, 2, line[1] + [0.0, 10.0], axis=0),
                                         "its vertex 2 "),
        "corner deleted": (np.delete(line, 2, axis=0), "vertex 2 "),
        "anchor moved": (moved_anchor, "anchor 1 [180.5, 150.25] is no vertex of it"),
        "anchor deleted": (np.delete(line, 4, axis=0), "anchor 1 [180.5, 150.25] is no vertex"),
        "vertex inserted on the line": (np.insert(line, 3, (line[2] + line[3]) / 2, axis=0),
                                        None),
    }


@pytest.mark.parametrize("edit", list(edits()))
def test_an_export_edited_since_is_taken_as_drawn_and_says_so(tmp_path, edit):
    raster = georeferenced_raster()
    geometry, said = edits()[edit]
    (line,), failures = read_lines(write(tmp_path, edited_export(geometry, raster)), raster,
                                   "scene.tif")
    assert failures == []
    if said is None:  # the line exported: it comes back as it was drawn
        np.testing.assert_allclose(line.anchors, PIXELS, atol=1e-6)
        assert line.note is None
    else:
        np.testing.assert_allclose(line.anchors, geometry, atol=1e-3)
        assert line.straight == (False,) * (len(geometry) - 1)
        assert line.note.startswith("properties.anchors_px do not match the geometry: "), \
            line.note
        assert said in line.note
        assert line.note.endswith("(edited since the export?); taken as drawn, every vertex "
                                  "an anchor")


def test_an_edited_line_with_straight_segments_is_read_without_them(tmp_path):
    raster = georeferenced_raster()
    geometry = edits()["vertex moved"][0]
    document = edited_export(geometry, raster)
    document["features"][0]["properties"]["segment_details"] = [{"straight": True}] * 2
    (line,), _ = read_lines(write(tmp_path, document), raster, "scene.tif")
    assert line.straight == (False,) * (len(geometry) - 1)


# ---------------------------------------------------------------------- 3. GeoJSONSeq
def sequence_features(raster: Raster) -> list[dict]:
    lonlat = raster.georef.pixel_to_lonlat(PIXELS).tolist()
    return [{"type": "Feature", "properties": {"name": f"road {k}", "highway": "service"},
             "geometry": {"type": "LineString", "coordinates": lonlat}} for k in range(3)]


@pytest.mark.parametrize(("name", "separator", "indent"), [
    ("roads.geojsonl", "", None),  # GDAL's GeoJSONSeq, newline-delimited
    ("roads.geojsons", "\x1e", None),  # RFC 8142: each record begun by RS
    ("roads.geojson", "\x1e", 2),  # records written over several lines
    ("roads.json", "", None),
])
def test_a_geojson_text_sequence_is_read(tmp_path, name, separator, indent):
    raster = georeferenced_raster()
    path = tmp_path / name
    path.write_text("".join(f"{separator}{json.dumps(feature, indent=indent)}\r\n"
                            for feature in sequence_features(raster)) + "\n")
    lines, failures = read_lines(path, raster, "scene.tif")
    assert failures == []
    assert [(line.name, line.kind) for line in lines] == [(f"road {k}", "road")
                                                          for k in range(3)]
    np.testing.assert_allclose(lines[2].anchors, PIXELS, atol=1e-6)
    seeds, failures = read_seeds(path)
    assert (failures, [seed.id for seed in seeds]) == ([], ["#0", "#1", "#2"])


def test_a_sequence_line_that_is_not_json_is_named(tmp_path):
    raster = georeferenced_raster()
    path = tmp_path / "roads.geojsonl"
    texts = [json.dumps(feature) for feature in sequence_features(raster)]
    path.write_text("\n".join([texts[0], "", texts[1][:-5], texts[2]]))
    with pytest.raises(BadParameter) as error:
        read_seeds(path)
    assert str(error.value).startswith(f"seeds file {path}: line 3 of its GeoJSON text "
                                       "sequence is not JSON: ")
    path.write_text("".join(f"\x1e{text}\n" for text in [texts[0], "{"]))
    with pytest.raises(BadParameter, match="record 2 of its GeoJSON text sequence is not JSON"):
        read_lines(path, raster, "scene.tif")


def test_text_that_is_no_sequence_keeps_its_json_error(tmp_path):
    path = tmp_path / "broken.geojson"
    path.write_text('{"type": "FeatureCollection",\n "features": [}\n{"type": "Feature"}\n')
    with pytest.raises(BadParameter, match=r"seeds file .* is not JSON: Expecting value: line 2"):
        read_seeds(path)


# ----------------------------------------------------------- 4. files that are no GeoJSON
TEXT = json.dumps(collection(PIXELS, {"image": "a.png"}))


@pytest.mark.parametrize(("name", "content", "said"), [
    ("roads.gpkg", b"SQLite format 3\x00\x10\x00\x01\x01" + bytes(200),
     "a GeoPackage (SQLite), not UTF-8 GeoJSON: convert it, e.g. ogr2ogr -f GeoJSON "
     "roads.geojson roads.gpkg (and the layer's name, if it holds several)"),
    ("roads.shp", b"\x00\x00\x27\x0a" + bytes(96) + b"\xe8\x03",
     "a Shapefile, not UTF-8 GeoJSON: convert it, e.g. ogr2ogr -f GeoJSON roads.geojson "
     "roads.shp"),
    ("roads.geojson", TEXT.encode("utf-16"),
     "UTF-16, not UTF-8 GeoJSON: convert it, e.g. iconv -f UTF-16 -t UTF-8 roads.geojson > "
     "roads-utf8.geojson"),
    ("roads.geojson", TEXT.encode("utf-16-be").join([b"\xfe\xff", b""]), "UTF-16, not UTF-8"),
    ("roads.geojson", TEXT.encode("utf-32"), "UTF-32, not UTF-8 GeoJSON: convert it, e.g. "
                                             "iconv -f UTF-32 -t UTF-8 roads.geojson"),
    ("roads.geojson", TEXT.encode("utf-32-be").join([b"\x00\x00\xfe\xff", b""]), "UTF-32, not"),
])
def test_a_file_that_is_no_geojson_says_what_it_is_and_how_to_convert_it(tmp_path, name,
                                                                        content, said):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BadParameter) as error:
        read_seeds(path)
    assert str(error.value).startswith(f"seeds file {path} is {said}")
    with pytest.raises(BadParameter, match=f"GeoJSON file .* is {said[:10]}"):
        read_lines(path, plain_raster("a.png"), "a.png")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / "roads.geojson"
    os.mkfifo(path)
    raised = []

    def read() -> None:
        try:
            read_seeds(path)
        except BadParameter as exc:
            raised.append(exc)

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    reading.join(10)
    assert len(raised) == 1, "the reading waits on the FIFO"
    assert "not a regular file" in str(raised[0])


# ------------------------------------------------------------------- 5. "crs" members
@pytest.mark.parametrize(("name", "error", "said"), [
    ("", BadParameter, "unknown CRS ''"),
    ("EPSG:4978", BadParameter, "CRS EPSG:4978 (WGS 84) is a geocentric CRS"),
    ('LOCAL_CS["site grid",LOCAL_DATUM["site",32767],UNIT["metre",1],AXIS["x",EAST],'
     'AXIS["y",NORTH]]', GeorefError, "PROJ cannot transform coordinates from 'site grid' to "
                                      "'WGS 84'"),
])
def test_a_crs_member_that_is_not_read_is_named_with_its_file(tmp_path, name, error, said):
    member = {"type": "name", "properties": {"name": name}}
    path = write(tmp_path, collection(PIXELS, crs=member))
    for read, *args in ((read_seeds, path), (read_lines, path, georeferenced_raster(),
                                               "scene.tif")):
        with pytest.raises(error) as raised:
            read(*args)
        assert str(raised.value).startswith(
            f'{path}: its "crs" member {shortened(member)} is not read: {said}')


def test_roadtracers_crs_of_pixels_is_read_as_pixels_without_coordinate_space(tmp_path):
    document = pixel_export("a.png")
    del document["coordinate_space"]
    assert document["crs"]["properties"]["name"] == PIXEL_CRS
    path = write(tmp_path, document)
    (line,), failures = read_lines(path, plain_raster("a.png"), "a.png")
    assert failures == []
    np.testing.assert_allclose(line.anchors, PIXELS)
    (seed,), failures = read_seeds(path)
    assert (seed.image, failures) == ("a.png", [])


def test_an_image_in_an_engineering_crs_reads_its_own_map_coordinates(tmp_path):
    """Map coordinates in the image's own CRS are read without PROJ, though PROJ cannot
    place that CRS on the globe."""
    import pyproj

    from tests.test_georef import TRANSFORM

    wkt = pyproj.CRS.from_user_input(
        'LOCAL_CS["site grid",LOCAL_DATUM["site",32767],UNIT["metre",1],AXIS["x",EAST],'
        'AXIS["y",NORTH]]').to_wkt()
    raster = Raster(np.zeros((572, 572, 3), np.float32), "site.tif",
                    Georef(TRANSFORM, pyproj.CRS.from_wkt(wkt), "test"))
    document = collection(raster.georef.pixel_to_map(PIXELS),
                          crs={"type": "name", "properties": {"name": wkt}})
    (line,), failures = read_lines(write(tmp_path, document), raster, "site.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, PIXELS, atol=1e-6)


# ------------------------------------------------------------------ 6. seeds in pixels
def test_seeds_of_a_pixel_document_are_the_pixels_of_the_image_they_name(tmp_path):
    pixels = np.array([[100.0, 20.0], [150.0, 60.0]])  # would pass for longitude/latitude
    raster = plain_raster("a.png")
    document = feature_collection([line_feature(pixels, raster),
                                   line_feature(pixels, raster, {"image": "b.png"}),
                                   line_feature(pixels, raster, {"source_image": None})],
                                  raster)
    seeds, failures = read_seeds(write(tmp_path, document))
    assert [seed.image for seed in seeds] == ["a.png", "b.png"]
    np.testing.assert_allclose(seeds[0].vertices, pixels)
    assert [(failure.seed, failure.reason) for failure in failures] == [
        ("#2", "the document is in pixels, of no image it names (seeds in pixel coordinates "
               "need properties.image)")]
    document["features"][0]["properties"]["source_image"] = 5
    seeds, failures = read_seeds(write(tmp_path, document))
    assert failures[0].reason == "properties.source_image=5 is not a file name"


# ----------------------------------------------------------- 8. many features at once
def test_the_lines_of_many_features_are_projected_together(tmp_path, monkeypatch):
    raster = georeferenced_raster()
    count = 2 * FEATURES_PER_STEP + 10
    lonlat = raster.georef.pixel_to_lonlat(PIXELS)
    document = collection(lonlat)
    document["features"] *= count
    path = write(tmp_path, document)
    projections = []
    project = Georef.lonlat_to_pixel
    monkeypatch.setattr(Georef, "lonlat_to_pixel",
                        lambda self, points: projections.append(1) or project(self, points))
    lines, failures = read_lines(path, raster, "scene.tif")
    assert (len(lines), failures) == (count, [])
    np.testing.assert_allclose(lines[-1].anchors, PIXELS, atol=1e-6)
    assert len(projections) == 3  # one per FEATURES_PER_STEP features
