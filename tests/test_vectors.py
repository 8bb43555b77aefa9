"""Reading a GeoJSON file's lines onto an image's pixel grid (the app's Import lines; batch
seeds are tested in test_batch, here only which of them are refused)."""

import json

import numpy as np
import pytest

from core.errors import BadParameter
from core.georef import Georef, parse_crs, transform_points, wgs84
from core.output import shortened
from core.raster import Raster
from core.tracer import TraceParams
from core.vectors import read_lines, read_seeds
from tests.test_georef import TRANSFORM, UTM54

PIXELS = np.array([[100.0, 200.0], [180.5, 150.25], [300.0, 90.0]])


def georeferenced_raster() -> Raster:
    """A blank 572 × 572 image placed like the test GeoTIFFs (UTM 54N, 0.2 m pixels)."""
    import pyproj

    return Raster(np.zeros((572, 572, 3), np.float32), "scene.tif",
                  Georef(TRANSFORM, pyproj.CRS.from_user_input(UTM54), "test"))


def write(tmp_path, document) -> str:
    path = tmp_path / "lines.geojson"
    path.write_text(json.dumps(document))
    return str(path)


def collection(coordinates, properties=None, **members) -> dict:
    return {"type": "FeatureCollection", **members, "features": [
        {"type": "Feature", "properties": properties or {},
         "geometry": {"type": "LineString", "coordinates": np.asarray(coordinates).tolist()}}]}


def test_lonlat_source_crs_and_pixel_documents(tmp_path):
    raster = georeferenced_raster()
    lonlat = raster.georef.pixel_to_lonlat(PIXELS)
    utm = raster.georef.pixel_to_map(PIXELS)
    for document in (collection(lonlat),  # RFC 7946
                     collection(utm, crs={"type": "name", "properties": {
                         "name": "urn:ogc:def:crs:EPSG::32654"}}),  # --crs source export
                     collection(PIXELS, coordinate_space="pixel"),
                     collection(PIXELS, {"image": "scene.tif"})):  # batch seed convention
        (line,), failures = read_lines(write(tmp_path, document), raster, "scene.tif")
        assert failures == []
        np.testing.assert_allclose(line.anchors, PIXELS, atol=1e-6)
        assert (line.name, line.kind) == ("#0", None)


def test_exported_anchors_are_kept_when_they_match_the_geometry(tmp_path):
    raster = georeferenced_raster()
    dense = np.vstack([np.linspace(PIXELS[0], PIXELS[1], 9), np.linspace(PIXELS[1], PIXELS[2],
                                                                           9)[1:]])
    coordinates = raster.georef.pixel_to_lonlat(dense)
    for key in ("anchors", "anchors_px"):  # the app's export, batch's output
        document = collection(coordinates, {key: PIXELS.tolist(), "name": "Road 1",
                                            "kind": "road"})
        (line,), _ = read_lines(write(tmp_path, document), raster, "scene.tif")
        np.testing.assert_allclose(line.anchors, PIXELS)
        assert (line.name, line.kind) == ("Road 1", "road")
    # OpenStreetMap's tags say the kind too.
    for tags, kind in (({"waterway": "river"}, "river"), ({"highway": "track"}, "road"),
                       ({"building": "yes"}, None), ({"kind": "lake"}, None)):
        (line,), _ = read_lines(write(tmp_path, collection(coordinates, tags)), raster,
                                "scene.tif")
        assert line.kind == kind
    # Anchors of another image (their ends are not the geometry's): every vertex is an anchor.
    document = collection(coordinates, {"anchors": (PIXELS + 40).tolist()})
    (line,), _ = read_lines(write(tmp_path, document), raster, "scene.tif")
    np.testing.assert_allclose(line.anchors, dense, atol=1e-6)


def test_lines_are_clipped_and_failures_named(tmp_path):
    raster = georeferenced_raster()
    crossing = np.array([[-100.0, 300.0], [300.0, 300.0], [700.0, 300.0], [700.0, 400.0],
                         [300.0, 400.0], [300.0, 400.5]])
    document = collection(crossing, {"name": "ring"}, coordinate_space="pixel")
    document["features"] += [
        {"type": "Feature", "properties": {"image": "other.tif"},
         "geometry": {"type": "LineString", "coordinates": PIXELS.tolist()}},
        {"type": "Feature", "properties": {},
         "geometry": {"type": "LineString", "coordinates": [[900, 900], [950, 960]]}},
        {"type": "Feature", "properties": {}, "geometry": {"type": "Point",
                                                           "coordinates": [1, 2]}}]
    lines, failures = read_lines(write(tmp_path, document), raster, "scene.tif")
    # In at x = 0, out at x = 571, back in at x = 571 (the close last vertex dropped).
    assert [line.name for line in lines] == ["ring (1)", "ring (2)"]
    np.testing.assert_allclose(lines[0].anchors, [[0, 300], [300, 300], [571, 300]])
    np.testing.assert_allclose(lines[1].anchors, [[571, 400], [300, 400]])
    assert [(failure.seed, failure.reason) for failure in failures] == [
        ("#1", "properties.image names another image (other.tif)"),
        ("#2", "no part of it longer than 2 px lies on the image"),
        ("#3", "geometry type 'Point' is not a LineString or MultiLineString")]


def test_unreadable_documents(tmp_path):
    raster = georeferenced_raster()
    with pytest.raises(BadParameter, match="not a GeoJSON FeatureCollection"):
        read_lines(write(tmp_path, {"type": "Polygon"}), raster, "scene.tif")
    with pytest.raises(BadParameter, match="unknown CRS"):
        read_lines(write(tmp_path, collection(PIXELS, crs={"type": "name", "properties": {
            "name": "EPSG:999999"}})), raster, "scene.tif")
    plain = Raster(np.zeros((50, 50, 3), np.float32), "plain.png")
    lines, failures = read_lines(write(tmp_path, collection([[139.1, 35.2], [139.2, 35.3]])),
                                 plain, "plain.png")
    assert lines == []
    assert "no georeferencing" in failures[0].reason


def test_batch_output_imports_with_its_anchors_names_and_kinds(tmp_path):
    """A batch output document (pixel space here) comes back with the traced runs' anchors,
    each named and kinded as its seed was."""
    from core.backend import CpuBackend
    from core.batch import ImageTask, process_image
    from core.raster import load_image
    from core.vectors import Seed
    from tests.conftest import SAMPLE_IMAGE

    anchors = np.array([[430.0, 241.0], [486.0, 172.0], [520.0, 120.0]])
    seeds = (Seed("road", anchors, SAMPLE_IMAGE.name),
             Seed("#1", anchors[:2] + [0, 20], SAMPLE_IMAGE.name, {"name": "Old canal",
                                                                   "waterway": "canal"}))
    task = ImageTask(str(SAMPLE_IMAGE), seeds, TraceParams(score="centre"))
    report, document = process_image(task, CpuBackend)
    assert report.status == "ok"
    raster = load_image(SAMPLE_IMAGE)
    lines, failures = read_lines(write(tmp_path, document), raster, SAMPLE_IMAGE.name)
    assert failures == []
    assert [(line.name, line.kind) for line in lines] == [("road", "road"),
                                                          ("Old canal", "river")]
    assert [feature["properties"]["kind"] for feature in document["features"]] == [
        "road", "river"]  # for a GIS to filter by
    np.testing.assert_allclose(lines[0].anchors, anchors)
    np.testing.assert_allclose(lines[1].anchors, anchors[:2] + [0, 20])


def test_imported_names_and_kinds():
    from core.vectors import imported_name_and_kind

    assert imported_name_and_kind({"name": "A", "kind": "river"}, "#0") == ("A", "river")
    assert imported_name_and_kind({"highway": "primary"}, "#3") == ("#3", "road")
    assert imported_name_and_kind({}, "way/9") == ("way/9", None)
    # Batch output: the seed's name and kind, else its id and the kind the batch traced with.
    batch = {"seed": "s1", "seed_properties": {"name": "B", "kind": "road"},
             "params": {"line_kind": "river"}}
    assert imported_name_and_kind(batch, "#0") == ("B", "road")
    assert imported_name_and_kind({**batch, "seed_properties": {}}, "#0") == ("s1", "river")
    # What a hostile file puts there instead is passed over.
    odd = {"name": "", "seed_properties": ["x"], "seed": 5, "params": {"line_kind": "lava"}}
    assert imported_name_and_kind(odd, "#2") == ("#2", None)


@pytest.mark.parametrize("coordinates", [
    ["55", "92"], [["55", "92"], ["60", "90"]], [[5, 40], {"x": 90, "y": 40}],
    {"a": [5, 40], "b": [90, 40]}, [[True, 40], [90, 40]], [[5, 40, 0, "t"], [90, 40]],
    [[5], [90]]])
def test_seed_vertices_must_be_number_pairs(tmp_path, coordinates):
    path = write(tmp_path, {"type": "Feature", "properties": {"image": "a.png"},
                            "geometry": {"type": "LineString", "coordinates": coordinates}})
    seeds, (failure,) = read_seeds(path)
    assert seeds == []
    assert "are not [x, y] number pairs" in failure.reason


def test_seed_vertices_may_carry_a_height(tmp_path):
    path = write(tmp_path, collection([[5, 40, 3, 1.7e9], [90, 40.5, 2, 1.7e9]],  # and a time
                                      {"image": "a.png"}))
    (seed,), failures = read_seeds(path)
    assert failures == []
    np.testing.assert_array_equal(seed.vertices, [[5, 40], [90, 40.5]])


def test_seed_of_an_unknown_kind_is_refused(tmp_path):
    document = collection([[5, 40], [90, 40]], {"image": "a.png", "kind": "lake"})
    document["features"] += collection([[5, 40], [90, 40]], {"image": "a.png",
                                                             "kind": "river"})["features"]
    document["features"] += collection([[5, 40], [90, 40]], {  # a map's own kinds, OSM tags
        "image": "a.png", "kind": "major_road", "highway": "primary"})["features"]
    seeds, (failure,) = read_seeds(write(tmp_path, document))
    assert [seed.properties["kind"] for seed in seeds] == ["river", "major_road"]
    assert (failure.seed, failure.reason) == (
        "#0", "properties.kind='lake' is not a line kind (road or river), nor does a highway "
        "or waterway tag say one")


def test_a_line_of_too_many_vertices_is_a_bad_seed_read_at_once(tmp_path):
    from core.vectors import MAX_LINE_VERTICES

    vertices = np.column_stack([np.linspace(5, 90, MAX_LINE_VERTICES + 1),
                                np.full(MAX_LINE_VERTICES + 1, 40.0)]).tolist()
    seeds, (failure,) = read_seeds(write(tmp_path, collection(vertices, {"image": "a.png"})))
    assert seeds == []
    assert f"a line of {MAX_LINE_VERTICES + 1} vertices" in failure.reason
    (seed,), failures = read_seeds(write(tmp_path, collection(vertices[:MAX_LINE_VERTICES],
                                                              {"image": "a.png"})))
    assert failures == []
    assert len(seed.vertices) == MAX_LINE_VERTICES


def test_seeds_in_the_projected_crs_their_file_names_are_read_as_lon_lat(tmp_path):
    # A batch output written with --crs source, fed back as seeds.
    utm = [[500024.5, 3899962.3], [500036.9, 3899972.5], [500049.3, 3899982.7]]
    crs = {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32654"}}
    (seed,), failures = read_seeds(write(tmp_path, collection(utm, crs=crs)))
    assert failures == []
    expected = transform_points(utm, parse_crs("EPSG:32654"), wgs84())
    np.testing.assert_allclose(seed.vertices, expected, atol=1e-9)
    assert 140.9 < seed.vertices[0, 0] < 141.1
    assert 35.2 < seed.vertices[0, 1] < 35.3
    # Without the member the same numbers are no longitudes and latitudes.
    seeds, (failure,) = read_seeds(write(tmp_path, collection(utm)))
    assert seeds == []
    assert "not longitude/latitude" in failure.reason


def test_a_crs_member_of_type_epsg_is_read_and_others_are_named(tmp_path):
    raster = georeferenced_raster()
    utm = raster.georef.pixel_to_map(PIXELS)
    for code in (32654, "32654"):  # GeoJSON before 2008, which GDAL reads too
        document = collection(utm, crs={"type": "EPSG", "properties": {"code": code}})
        (line,), failures = read_lines(write(tmp_path, document), raster, "scene.tif")
        assert failures == []
        np.testing.assert_allclose(line.anchors, PIXELS, atol=1e-6)
        (seed,), _ = read_seeds(write(tmp_path, document))
        np.testing.assert_allclose(seed.vertices, raster.georef.pixel_to_lonlat(PIXELS))
    link = {"type": "link", "properties": {"href": "http://example.com/crs/42", "type": "proj4"}}
    ogc = {"type": "OGC", "properties": {"urn": "urn:ogc:def:crs:EPSG::32654"}}
    for member in (link, ogc, {"type": "EPSG", "properties": {"code": "utm"}}):
        path = write(tmp_path, collection(utm, crs=member))
        for read, *args in ((read_lines, path, raster, "scene.tif"), (read_seeds, path)):
            with pytest.raises(BadParameter) as error:
                read(*args)
            assert str(error.value).startswith(
                f'{path}: its "crs" member {shortened(member)} is not read')


def test_a_pixel_document_with_its_local_crs_member_is_read_in_pixels(tmp_path):
    from core.geojson import feature_collection, line_feature

    raster = Raster(np.zeros((400, 400, 3), np.float32), "plain.png")
    document = feature_collection([line_feature(PIXELS, raster)], raster)
    assert "LOCAL_CS" in document["crs"]["properties"]["name"]
    (line,), failures = read_lines(write(tmp_path, document), raster, "plain.png")
    assert failures == []
    np.testing.assert_allclose(line.anchors, PIXELS)


def antimeridian_raster() -> Raster:
    """A blank 300 × 300 image in EPSG:4326 across 180° (179.99955° .. 180.00045°)."""
    from affine import Affine

    return Raster(np.zeros((300, 300, 3), np.float32), "am.tif",
                  Georef(Affine(3e-6, 0.0, 179.99955, 0.0, -3e-6, -16.5), wgs84(), "test"))


#: A line across the antimeridian column of :func:`antimeridian_raster` (x = 150), through
#: one anchor on each side of it, and its anchors.
AM_ANCHORS = np.array([[40.0, 60.0], [145.0, 145.0], [250.0, 230.0]])
AM_LINE = np.vstack([np.linspace(AM_ANCHORS[0], AM_ANCHORS[1], 8),
                     np.linspace(AM_ANCHORS[1], AM_ANCHORS[2], 8)[1:]])


def test_a_line_cut_at_the_antimeridian_comes_back_whole_with_its_anchors(tmp_path):
    from core.geojson import feature_collection, line_feature

    raster = antimeridian_raster()
    feature = line_feature(AM_LINE, raster, {"anchors_px": AM_ANCHORS.tolist()})
    assert feature["geometry"]["type"] == "MultiLineString"  # RFC 7946, 3.1.9
    path = write(tmp_path, feature_collection([feature], raster))
    (line,), failures = read_lines(path, raster, "am.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, AM_ANCHORS, atol=1e-3)
    (seed,), failures = read_seeds(path)
    assert (seed.id, failures) == ("#0", [])
    assert np.all(np.abs(np.diff(seed.vertices[:, 0])) < 1)  # continues past 180°
    np.testing.assert_allclose(raster.georef.lonlat_to_pixel(seed.vertices)[[0, -1]],
                               AM_ANCHORS[[0, -1]], atol=1e-3)


def test_parts_that_do_not_meet_on_the_antimeridian_stay_apart(tmp_path):
    from core.vectors import joined_at_antimeridian

    east = ("a", np.array([[179.9, 1.0], [180.0, 1.5]]))
    west = ("b", np.array([[-180.0, 1.5], [-179.9, 2.0]]))
    (joined_id, joined), = joined_at_antimeridian([east, west])
    assert joined_id == "a"
    np.testing.assert_allclose(joined, [[179.9, 1.0], [180.0, 1.5], [180.1, 2.0]])
    other_latitude = ("c", west[1] + [0.0, 0.1])
    assert [line_id for line_id, _ in joined_at_antimeridian([east, other_latitude])] == [
        "a", "c"]
    document = collection([[10.0, 1.0], [11.0, 2.0]])
    document["features"][0]["geometry"] = {"type": "MultiLineString", "coordinates": [
        [[10.0, 1.0], [11.0, 2.0]], [[11.0, 2.0], [12.0, 3.0]]]}
    seeds, _ = read_seeds(write(tmp_path, document))
    assert [seed.id for seed in seeds] == ["#0/0", "#0/1"]


def test_lon_lat_past_180_of_an_image_across_it_is_read(tmp_path):
    """``--crs source`` on an image in degrees across 180° writes longitudes past it."""
    from core.geojson import feature_collection, line_feature

    raster = antimeridian_raster()
    feature = line_feature(AM_LINE, raster, {"anchors_px": AM_ANCHORS.tolist()}, crs="source")
    longitudes = np.array(feature["geometry"]["coordinates"])[:, 0]
    assert longitudes.max() > 180
    path = write(tmp_path, feature_collection([feature], raster, crs="source"))
    (line,), failures = read_lines(path, raster, "am.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, AM_ANCHORS, atol=1e-3)
    (seed,), failures = read_seeds(path)
    assert failures == []
    # Beyond a turn past 180° no image lies: not longitude/latitude.
    seeds, (failure,) = read_seeds(write(tmp_path, collection([[360.5, 1.0], [361.0, 1.0]])))
    assert "not longitude/latitude" in failure.reason


# ------------------------------------------------------------------ stopping a read
def test_reading_stops_between_two_features_when_told(tmp_path):
    import gc

    from core.vectors import ReadStopped

    raster = Raster(np.zeros((400, 400, 3), np.float32), "plain.png")
    document = collection(PIXELS, coordinate_space="pixel")
    document["features"] *= 5
    path = write(tmp_path, document)
    asked = []

    def stop_after(count: int):
        """A ``stop`` that says go on ``count`` times, then stop."""
        def stop() -> bool:
            asked.append(1)
            return len(asked) > count
        return stop

    lines, failures = read_lines(path, raster, "plain.png", stop=stop_after(1000))
    assert (len(lines), failures) == (5, [])
    assert len(asked) == 5  # before each feature is placed on the image
    for count in (0, 3):
        asked.clear()
        with pytest.raises(ReadStopped):
            read_lines(path, raster, "plain.png", stop=stop_after(count))
        assert len(asked) == count + 1
        assert gc.isenabled()  # the collector paused while reading runs again


def test_a_waterway_tag_nested_in_osm_tags_makes_a_river():
    from core.vectors import line_kind_of

    assert line_kind_of({"tags": {"waterway": "river"}}) == "river"
    assert line_kind_of({"tags": {"highway": "track"}}) == "road"
    assert line_kind_of({"tags": "waterway=river"}) is None  # not an object of tags
    assert line_kind_of({"kind": "road", "tags": {"waterway": "river"}}) == "road"

