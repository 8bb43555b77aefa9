"""GeoJSON export: RFC 7946 lon/lat, source CRS, pixel space; validated by geojson-pydantic."""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from geojson_pydantic import FeatureCollection

from cli import main as cli_main
from core.backend import CpuBackend
from core.errors import BadParameter, OutputWriteError
from core.geojson import (
    NO_CRS_NOTE,
    PIXEL_CRS,
    PIXEL_SPACE_NOTE,
    coordinate_decimals,
    feature_collection,
    line_feature,
    traced_line_feature,
    write_geojson,
)
from core.georef import GeorefError
from core.raster import Raster, load_image
from core.tracer import TraceParams, trace
from tests.conftest import SAMPLE_IMAGE
from tests.test_georef import TRANSFORM, UTM54, sample_pixels, write_geotiff, write_world_file

A, B = (505, 158), (552, 92)


@pytest.fixture(scope="module")
def geotiff(tmp_path_factory):
    path = tmp_path_factory.mktemp("geojson") / "gsi_108_utm.tif"
    write_geotiff(path, sample_pixels())
    return path


def validated(document: dict) -> FeatureCollection:
    """Parse with geojson-pydantic after a JSON round trip (what a GIS would read)."""
    return FeatureCollection.model_validate(json.loads(json.dumps(document, allow_nan=False)))


def decimals_of(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text else 0


def test_lonlat_document(geotiff):
    with load_image(geotiff) as raster:
        result = trace(raster, A, B, TraceParams(max_angle=40), CpuBackend())
        feature = traced_line_feature([result], raster, {"note": "x"})
        document = feature_collection([feature], raster)
        georef = raster.georef
    collection = validated(document)
    assert collection.features[0].geometry.type == "LineString"
    assert document["coordinate_space"] == "lonlat"
    assert document["source_crs"] == UTM54
    assert "crs" not in document  # RFC 7946: no crs member
    coords = np.array(document["features"][0]["geometry"]["coordinates"])
    assert coords.shape == result.polyline.shape
    assert np.all((140 < coords[:, 0]) & (coords[:, 0] < 142))
    assert np.all((35 < coords[:, 1]) & (coords[:, 1] < 36))
    # Rounded to 8 decimals for 20 cm pixels: still within 1/100 px of the polyline.
    raw = document["features"][0]["geometry"]["coordinates"]
    assert max(decimals_of(v) for point in raw for v in point) == 8
    np.testing.assert_allclose(georef.lonlat_to_pixel(coords), result.polyline, atol=0.01)
    props = document["features"][0]["properties"]
    assert props["source_image"] == "gsi_108_utm.tif"
    assert props["score"] == pytest.approx(result.score, abs=1e-6)
    assert [len(scores) for scores in props["link_scores"]] == [len(result.link_scores)]
    assert props["anchors_px"] == [list(A), list(B)]
    assert props["segment_params"] == [{"guides": result.params.guides,
                                        "points": result.params.points,
                                        "halfwidth": round(result.params.halfwidth, 3)}]
    assert props["kind"] == "road"
    assert props["backend"] == "cpu"
    assert props["note"] == "x"
    np.testing.assert_allclose(props["pixels"], result.polyline, atol=1e-3)


def test_a_line_with_a_leg_drawn_straight_has_the_same_properties():
    """The app's lines may hold segments drawn straight (not traced): a leg without params,
    score or link scores; the line's kind is its own."""
    raster = load_image(SAMPLE_IMAGE)
    result = trace(raster, A, B, backend=CpuBackend())
    straight = SimpleNamespace(polyline=np.array([B, (560.0, 60.0)]), score=math.nan,
                               link_scores=np.empty(0), params=None, backend="manual")
    props = traced_line_feature([result, straight], raster, kind="river")["properties"]
    score = round(float(result.score), 6)
    assert props["kind"] == "river"
    assert (props["score"], props["segment_scores"]) == (score, [score, None])
    assert [len(scores) for scores in props["link_scores"]] == [len(result.link_scores), 0]
    assert props["anchors_px"] == [list(A), list(B), [560.0, 60.0]]
    assert props["segment_params"][1] is None
    assert props["backend"] == "cpu"
    only_straight = traced_line_feature([straight], raster, kind="road")["properties"]
    assert (only_straight["score"], only_straight["segment_scores"]) == (None, [None])
    assert only_straight["backend"] == "manual"
    validated(feature_collection([traced_line_feature([result, straight], raster,
                                                      kind="river")], raster))


def test_source_crs_document(geotiff):
    with load_image(geotiff) as raster:
        pixels = np.array([[0.0, 0.0], [571.0, 571.0]])
        document = feature_collection([line_feature(pixels, raster, crs="source")], raster,
                                      crs="source")
    validated(document)
    assert document["coordinate_space"] == "source"
    assert document["crs"] == {"type": "name",
                               "properties": {"name": "urn:ogc:def:crs:EPSG::32654"}}
    assert document["features"][0]["geometry"]["coordinates"] == [[500000.1, 3899999.9],
                                                                  [500114.3, 3899885.7]]


def test_pixel_space_document():
    raster = load_image(SAMPLE_IMAGE)
    result = trace(raster, A, B, backend=CpuBackend())
    document = feature_collection([traced_line_feature([result], raster)], raster)
    validated(document)
    assert document["coordinate_space"] == "pixel"
    assert document["coordinate_note"] == PIXEL_SPACE_NOTE
    # A GIS reads coordinates without a crs member as lon/lat: this one says pixels.
    assert document["crs"] == {"type": "name", "properties": {"name": PIXEL_CRS}}
    np.testing.assert_allclose(document["features"][0]["geometry"]["coordinates"],
                               result.polyline, atol=1e-3)
    # The source-CRS option changes nothing without georeferencing.
    assert feature_collection([], raster, crs="source")["coordinate_space"] == "pixel"


def test_the_pixel_crs_is_a_local_crs_of_columns_and_rows():
    import pyproj
    from rasterio.crs import CRS

    crs = pyproj.CRS.from_user_input(PIXEL_CRS)
    assert crs.type_name == "Engineering CRS"
    assert [(axis.direction, axis.unit_name) for axis in crs.axis_info] == [
        ("east", "pixel"), ("south", "pixel")]
    assert CRS.from_user_input(PIXEL_CRS).to_wkt().startswith('LOCAL_CS["image pixels"')  # GDAL


@pytest.mark.parametrize("crs", ["+proj=utm +zone=33 +ellps=intl +units=m +no_defs",
                                 "+proj=utm +zone=54 +ellps=bessel +units=m +no_defs"])
def test_a_crs_with_no_datum_is_named_by_its_wkt_not_a_near_epsg_code(tmp_path, crs):
    """PROJ's best EPSG match of these (EPSG:23033, ED50; EPSG:3095, Tokyo) has a datum shift
    of some 100 m that the image's CRS has not."""
    import pyproj

    path = tmp_path / "no_datum.tif"
    write_geotiff(path, sample_pixels()[:64, :64], crs=crs,
                  transform=TRANSFORM.__class__(0.5, 0, 500000, 0, -0.5, 4000000))
    with load_image(path) as raster:
        document = feature_collection([line_feature(np.array([A, B]) / 10, raster,
                                                    crs="source")], raster, crs="source")
        image_crs = raster.georef.crs
    name = document["crs"]["properties"]["name"]
    assert document["source_crs"] == name
    assert name.startswith("PROJCRS[")
    assert pyproj.CRS.from_user_input(name).equals(image_crs)


def test_a_file_name_that_is_not_utf_8_is_written_as_escapes():
    raster = Raster(np.zeros((20, 20, 3), np.float32), os.fsdecode(b"/images/r\xf6ad.png"))
    feature = line_feature(np.array([[1.0, 2.0], [15.0, 12.0]]), raster)
    assert feature["properties"]["source_image"] == "r\\xf6ad.png"
    json.dumps(feature, ensure_ascii=False).encode("utf-8")  # valid Unicode: no lone surrogate


def test_world_file_without_crs_stays_in_pixels(tmp_path):
    image = tmp_path / "w.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "w.pgw", TRANSFORM)
    raster = load_image(image)
    document = feature_collection([line_feature(np.array([A, B]), raster)], raster)
    assert document["coordinate_space"] == "pixel"
    assert document["coordinate_note"] == NO_CRS_NOTE.format(source="world file w.pgw")
    assert document["features"][0]["geometry"]["coordinates"] == [list(A), list(B)]
    with_crs = load_image(image, crs=UTM54)
    document = feature_collection([line_feature(np.array([A, B]), with_crs)], with_crs)
    assert document["coordinate_space"] == "lonlat"
    validated(document)


def test_precision_follows_pixel_size(tmp_path):
    for pixel_size, lonlat, metres in ((0.2, 8, 3), (10.0, 7, 3), (0.02, 9, 4)):
        path = tmp_path / f"p{pixel_size}.tif"
        write_geotiff(path, np.zeros((4, 4, 1), np.uint8),
                      transform=TRANSFORM.__class__(pixel_size, 0, 500000, 0, -pixel_size,
                                                    3900000))
        with load_image(path) as raster:
            assert coordinate_decimals(raster, "lonlat") == lonlat
            assert coordinate_decimals(raster, "source") == metres


def world_file_image(tmp_path, transform) -> str:
    """The sample image as a PNG beside a world file of ``transform``."""
    image = tmp_path / "w.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "w.pgw", transform)
    return str(image)


def test_points_that_cannot_be_projected_are_one_line_and_no_warning(tmp_path):
    image = world_file_image(tmp_path, TRANSFORM.__class__(0.2, 0, 9e11, 0, -0.2, 9e11))
    raster = load_image(image, crs=UTM54)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning would leak onto stderr
        with pytest.raises(GeorefError) as error:
            line_feature(np.array([A, B, (560, 80)]), raster)
    assert str(error.value) == (f"{image}: pixel points (505, 158), (552, 92) and 1 more "
                                "cannot be projected from EPSG:32654")


def test_lonlat_out_of_range_says_the_crs_is_probably_wrong(tmp_path):
    image = world_file_image(tmp_path, TRANSFORM)  # metres, said to be degrees
    raster = load_image(image, crs="EPSG:4326")
    with pytest.raises(GeorefError) as error:
        line_feature(np.array([A, B]), raster)
    assert str(error.value) == (
        f"{image}: pixel point (505, 158) lies at longitude 500101.1, latitude 3899968.3, "
        "beyond ±360° or ±90°: the image's CRS (EPSG:4326) is probably wrong; add a .prj "
        "beside the image or give its CRS with --image-crs EPSG:…")
    degrees = TRANSFORM.__class__(1e-5, 0, 179.999, 0, -1e-5, 89.999)  # past 180°: wrapped
    raster = load_image(world_file_image(tmp_path, degrees), crs="EPSG:4326")
    lonlat = line_feature(np.array([A, B]), raster)["geometry"]["coordinates"]
    np.testing.assert_allclose(lonlat[0], [180.004055 - 360, 89.997415], atol=1e-6)


def test_cli_refuses_lonlat_out_of_range_in_one_line(capsys, tmp_path):
    image = world_file_image(tmp_path, TRANSFORM)
    output = tmp_path / "t.geojson"
    code, out, err = run_trace(capsys, image, "--image-crs", "EPSG:4326", "-o", output,
                               "--quiet")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {image}: pixel point (505, 158) lies at longitude ")
    assert err.count("\n") == 1
    assert not output.exists()


def test_bad_crs_argument():
    raster = load_image(SAMPLE_IMAGE)
    with pytest.raises(BadParameter, match="'utm'"):
        feature_collection([], raster, crs="utm")


def test_write_geojson_failure_names_file(tmp_path):
    target = tmp_path / "missing" / "out.geojson"
    with pytest.raises(OutputWriteError, match="out.geojson"):
        write_geojson(target, {"type": "FeatureCollection", "features": []})
    assert not target.parent.exists()


# ------------------------------------------------------------------------------------- CLI
def run_trace(capsys, *argv) -> tuple[int, str, str]:
    code = cli_main(["trace", *map(str, argv), "--a", "505,158", "--b", "552,92",
                     "--backend", "cpu", "--format", "geojson"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_geojson_pixel_space_note(capsys):
    code, out, err = run_trace(capsys, SAMPLE_IMAGE)
    assert code == 0
    document = json.loads(out)
    validated(document)
    assert document["coordinate_space"] == "pixel"
    assert "note:" in err
    assert "pixels" in err


def test_cli_geojson_lonlat_and_source(capsys, geotiff, tmp_path):
    code, out, err = run_trace(capsys, geotiff, "-o", tmp_path / "t.geojson")
    assert code == 0
    assert out == ""
    assert "pixel" not in err
    document = json.loads((tmp_path / "t.geojson").read_text())
    validated(document)
    assert document["coordinate_space"] == "lonlat"
    code, out, _ = run_trace(capsys, geotiff, "--crs", "source")
    assert code == 0
    assert json.loads(out)["crs"]["properties"]["name"] == "urn:ogc:def:crs:EPSG::32654"


def test_cli_image_crs_option(capsys, tmp_path):
    image = tmp_path / "w.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "w.pgw", TRANSFORM)
    code, out, err = run_trace(capsys, image)
    assert code == 0
    assert "names no CRS" in err
    code, out, err = run_trace(capsys, image, "--image-crs", UTM54)
    assert code == 0
    assert json.loads(out)["coordinate_space"] == "lonlat"
    code, out, err = run_trace(capsys, image, "--image-crs", "EPSG:999999")
    assert code == 2
    assert err.startswith("error: unknown CRS 'EPSG:999999'")
    (tmp_path / "w.prj").write_text(pyproj_wkt(UTM54))
    code, out, err = run_trace(capsys, image, "--image-crs", "EPSG:32653")
    assert code == 0
    assert "names the CRS" in err
    assert "which wins over --image-crs EPSG:32653" in err
    code, out, err = run_trace(capsys, image, "--image-crs", UTM54)  # the same: no note
    assert "wins over" not in err


def pyproj_wkt(crs: str) -> str:
    import pyproj

    return pyproj.CRS.from_user_input(crs).to_wkt("WKT1_ESRI")


def test_cli_unprojectable_points_are_one_line_under_quiet(capsys, tmp_path):
    image = world_file_image(tmp_path, TRANSFORM.__class__(0.2, 0, 9e11, 0, -0.2, 9e11))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        code, out, err = run_trace(capsys, image, "--image-crs", UTM54, "--quiet")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {image}: pixel points (505, 158), (")
    assert err.endswith(" cannot be projected from EPSG:32654\n")
    assert err.count("\n") == 1


def test_cli_write_failure(capsys, tmp_path):
    code, _, err = run_trace(capsys, SAMPLE_IMAGE, "-o", tmp_path / "nope" / "t.geojson")
    assert code == 2
    assert "error: cannot write" in err
    assert "t.geojson" in err


def test_a_line_across_the_antimeridian_is_cut_there(tmp_path):
    """RFC 7946, 3.1.9: a line crossing 180° is a MultiLineString of parts that do not."""
    import pyproj

    east, north = pyproj.Transformer.from_crs(4326, 32601, always_xy=True).transform(180.0, 52.0)
    path = tmp_path / "utm1.tif"
    write_geotiff(path, sample_pixels(), crs="EPSG:32601",
                  transform=TRANSFORM.__class__(0.2, 0, east - 57, 0, -0.2, north + 57))
    with load_image(path) as raster:
        feature = line_feature(np.array([[10.0, 300.0], [300.0, 280.0], [500.0, 300.0]]), raster)
    geometry = feature["geometry"]
    assert geometry["type"] == "MultiLineString"
    west_part, east_part = geometry["coordinates"]  # drawn from east of 180° to west of it
    assert west_part[0][0] > 179.99
    assert west_part[-1][0] == 180.0
    assert east_part[0][0] == -180.0
    assert east_part[-1][0] < -179.99
    assert west_part[-1][1] == east_part[0][1]  # one crossing point
    for part in (west_part, east_part):
        assert all(-180.0 <= lon <= 180.0 for lon, _ in part)
    validated(feature_collection([feature], raster))


def test_antimeridian_parts_wrap_longitudes_and_keep_other_lines_whole():
    from core.geojson import antimeridian_parts as cut

    def antimeridian_parts(lonlat):
        """``cut`` of a line on a plate carrée of 1° pixels whose x is the unwrapped
        longitude: straight in pixels is straight in lon/lat."""
        pixels = np.column_stack([np.unwrap(lonlat[:, 0], period=360.0), lonlat[:, 1]])
        return cut(lonlat, pixels, lambda points: points)

    assert antimeridian_parts(np.array([[10.0, 1.0], [11.0, 2.0]])) == [[[10.0, 1.0],
                                                                          [11.0, 2.0]]]
    assert antimeridian_parts(np.array([[179.99, 1.0], [180.01, 2.0], [180.02, 3.0]])) == [
        [[179.99, 1.0], [180.0, 1.5]], [[-180.0, 1.5], [-179.99, 2.0], [-179.98, 3.0]]]
    assert antimeridian_parts(np.array([[-179.9, 10.0], [179.9, 11.0]])) == [
        [[-179.9, 10.0], [-180.0, 10.5]], [[180.0, 10.5], [179.9, 11.0]]]
    # A vertex on 180° itself: no single-point part, no repeated point.
    assert antimeridian_parts(np.array([[179.9, 1.0], [180.0, 1.1]])) == [
        [[179.9, 1.0], [180.0, 1.1]]]
    assert antimeridian_parts(np.array([[179.9, 1.0], [180.0, 1.1], [-179.9, 1.2]])) == [
        [[179.9, 1.0], [180.0, 1.1]], [[-180.0, 1.1], [-179.9, 1.2]]]
