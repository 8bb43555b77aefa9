"""Georeferencing (GeoTIFF, world files, pixel space) and windowed raster loading."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings

import imageio.v3 as iio
import numpy as np
import pyproj
import pytest
import rasterio
import rasterio.crs
import rasterio.transform
import rasterio.warp
from affine import Affine
from rasterio.control import GroundControlPoint
from rasterio.errors import NotGeoreferencedWarning
from rasterio.rpc import RPC
from rasterio.windows import Window

from core.backend import CpuBackend
from core.batch import image_footprint
from core.errors import BadParameter, ImageReadError
from core.georef import (
    Georef,
    GeorefError,
    RpcGeoref,
    crs_label,
    epsg_code,
    parse_crs,
    read_georef,
    read_world_file,
    world_file_candidates,
    world_shift,
)
from core.raster import FULL_READ_LIMIT, Raster, WindowedRaster, load_image
from core.tracer import trace
from tests.conftest import ROOT, SAMPLE_IMAGE

#: The sample image placed in UTM zone 54N at 0.2 m/px (upper-left corner 500000 E, 3900000 N).
UTM54 = "EPSG:32654"
TRANSFORM = Affine(0.2, 0.0, 500000.0, 0.0, -0.2, 3900000.0)


def sample_pixels() -> np.ndarray:
    """The sample image as stored: uint8 of shape (572, 572, 3)."""
    return iio.imread(SAMPLE_IMAGE)


def write_geotiff(path, array, transform=TRANSFORM, crs=UTM54, **options) -> None:
    """Write ``array`` of shape (rows, cols, bands) as a (Geo)TIFF."""
    profile = {"driver": "GTiff", "height": array.shape[0], "width": array.shape[1],
               "count": array.shape[2], "dtype": array.dtype, **options}
    if transform is not None:
        profile.update(transform=transform, crs=crs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(path, "w", **profile) as dataset:
            dataset.write(np.moveaxis(array, -1, 0))


def write_world_file(path, transform: Affine) -> None:
    """A world file for a corner-based transform: it stores the upper-left pixel's centre."""
    a, b, c, d, e, f = transform[:6]
    centre = (a * 0.5 + b * 0.5 + c, d * 0.5 + e * 0.5 + f)
    path.write_text("\n".join(repr(v) for v in (a, d, b, e, *centre)) + "\n")


@pytest.fixture(scope="module")
def geotiff(tmp_path_factory):
    path = tmp_path_factory.mktemp("geo") / "gsi_108_utm.tif"
    write_geotiff(path, sample_pixels())
    return path


def test_geotiff_transform_and_crs(geotiff):
    with load_image(geotiff) as raster:
        assert isinstance(raster, WindowedRaster)
        assert raster.georef.transform == TRANSFORM
        assert raster.georef.crs == pyproj.CRS.from_epsg(32654)
        assert raster.georef.crs_name == UTM54
        assert raster.georef.source == "GeoTIFF"


def test_half_pixel_rule(geotiff):
    with load_image(geotiff) as raster:
        georef = raster.georef
        # Pixel centre (0, 0) is half a pixel (0.1 m) inside the upper-left corner.
        np.testing.assert_allclose(georef.pixel_to_map([0, 0]), [[500000.1, 3899999.9]])
        np.testing.assert_allclose(georef.pixel_to_map([-0.5, -0.5]), [[500000.0, 3900000.0]])
        np.testing.assert_allclose(georef.pixel_to_map([571.5, 571.5]),
                                   [[500114.4, 3899885.6]])
        # Independently: GDAL's centre of (row, col) through rasterio.
        rows, cols = [0, 10, 300, 571], [0, 505, 17, 571]
        xs, ys = rasterio.transform.xy(TRANSFORM, rows, cols, offset="center")
        np.testing.assert_allclose(georef.pixel_to_map(np.column_stack([cols, rows])),
                                   np.column_stack([xs, ys]), atol=1e-6)


def test_round_trips_within_a_hundredth_of_a_pixel(geotiff):
    points = np.random.default_rng(5).uniform(-0.5, 571.5, size=(200, 2))
    with load_image(geotiff) as raster:
        georef = raster.georef
        np.testing.assert_allclose(georef.map_to_pixel(georef.pixel_to_map(points)), points,
                                   atol=0.01)
        lonlat = georef.pixel_to_lonlat(points)
        np.testing.assert_allclose(georef.lonlat_to_pixel(lonlat), points,
                                   atol=0.01)


def test_lonlat_agrees_with_gdal(geotiff):
    points = np.array([[0.0, 0.0], [286.0, 286.0], [571.0, 100.0]])
    with load_image(geotiff) as raster:
        lonlat = raster.georef.pixel_to_lonlat(points)
        xy = raster.georef.pixel_to_map(points)
    lon, lat = rasterio.warp.transform(UTM54, "EPSG:4326", xy[:, 0], xy[:, 1])
    np.testing.assert_allclose(lonlat, np.column_stack([lon, lat]), atol=1e-9)
    assert 140.9 < lonlat[0, 0] < 141.1
    assert 35.2 < lonlat[0, 1] < 35.3


def test_rotated_world_file_round_trip(tmp_path):
    transform = Affine(0.3, 0.05, 400000.0, 0.04, -0.3, 4000000.0)
    image = tmp_path / "rotated.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "rotated.pgw", transform)
    georef = read_georef(image, crs=UTM54)
    for got, want in zip(georef.transform[:6], transform[:6], strict=True):
        assert got == pytest.approx(want, abs=1e-9)
    points = np.random.default_rng(1).uniform(0, 571, size=(50, 2))
    np.testing.assert_allclose(georef.lonlat_to_pixel(georef.pixel_to_lonlat(points)), points,
                               atol=0.01)


@pytest.mark.parametrize(("image", "world"), [
    ("a.png", "a.pgw"), ("a.png", "a.pngw"), ("a.png", "a.wld"), ("a.PNG", "a.PGW"),
    ("a.jpg", "a.jgw"), ("a.jpeg", "a.jgw"), ("a.jpg", "a.jpgw"), ("a.tif", "a.tfw"),
    ("a.tif", "a.tifw")])
def test_world_file_names(tmp_path, image, world):
    assert tmp_path / world in world_file_candidates(tmp_path / image)


def test_world_file_png_with_prj(tmp_path):
    image = tmp_path / "sample.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "sample.pgw", TRANSFORM)
    (tmp_path / "sample.prj").write_text(pyproj.CRS.from_epsg(32654).to_wkt("WKT1_ESRI"))
    raster = load_image(image)
    assert isinstance(raster, Raster)
    assert not isinstance(raster, WindowedRaster)
    assert raster.georef.source == "world file sample.pgw"
    assert raster.georef.crs.to_epsg() == 32654
    assert raster.georef.transform.almost_equals(TRANSFORM)
    np.testing.assert_allclose(raster.georef.pixel_to_map([0, 0]), [[500000.1, 3899999.9]])


def test_world_file_crs_from_option_or_none(tmp_path):
    image = tmp_path / "sample.jpg"
    iio.imwrite(image, sample_pixels())
    write_world_file(tmp_path / "sample.jgw", TRANSFORM)
    assert load_image(image, crs="EPSG:32654").georef.crs.to_epsg() == 32654
    georef = load_image(image).georef
    assert georef.crs is None
    with pytest.raises(GeorefError, match="names no CRS"):
        georef.pixel_to_lonlat([0, 0])
    (tmp_path / "sample.prj").write_text("EPSG:6677")
    assert load_image(image, crs="EPSG:32654").georef.crs.to_epsg() == 6677  # .prj wins


def test_tiff_with_world_file_and_no_internal_georef(tmp_path):
    image = tmp_path / "plain.tif"
    write_geotiff(image, sample_pixels(), transform=None)
    with load_image(image) as raster:
        assert raster.georef is None
    write_world_file(tmp_path / "plain.tfw", TRANSFORM)
    with load_image(image, crs=UTM54) as raster:
        assert raster.georef.source == "world file plain.tfw"
        assert raster.georef.transform.almost_equals(TRANSFORM)


def write_gcp_geotiff(path, pixels, gcps, crs=UTM54) -> None:
    """A GeoTIFF georeferenced only by ground control points (no geotransform)."""
    write_geotiff(path, pixels, transform=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        dataset = rasterio.open(path, "r+")
    with dataset:
        dataset.gcps = (gcps, rasterio.crs.CRS.from_user_input(crs))


def gcps_of(transform, corners, noise=None):
    """GCPs at pixel corners ``corners`` (N, 2) mapped by ``transform`` (+ map noise, m)."""
    noise = np.zeros((len(corners), 2)) if noise is None else noise
    mapped = [transform @ (col, row) for col, row in corners]
    return [GroundControlPoint(row=row, col=col, x=x + dx, y=y + dy)
            for (col, row), (x, y), (dx, dy) in zip(corners, mapped, noise, strict=True)]


def test_geotiff_with_ground_control_points_only(tmp_path):
    image = tmp_path / "gcps.tif"
    corners = np.array([[0, 0], [572, 0], [0, 572], [572, 572], [286, 100]], dtype=float)
    write_gcp_geotiff(image, sample_pixels(), gcps_of(TRANSFORM, corners))
    with load_image(image) as raster:
        georef = raster.georef
        assert georef.transform.almost_equals(TRANSFORM, precision=1e-6)
        assert georef.crs_name == UTM54
        assert georef.source == ("GeoTIFF ground control points (5, affine fit, "
                                 "RMS residual 0.00 px)")
        np.testing.assert_allclose(georef.pixel_to_map([[0.0, 0.0]]),
                                   [[500000.1, 3899999.9]], atol=1e-6)
    # Points that no affine map fits exactly: the least-squares fit, its residual said.
    noise = np.array([[0.2, 0.0], [0.0, -0.2], [-0.2, 0.0], [0.0, 0.2], [0.0, 0.0]])
    write_gcp_geotiff(image, sample_pixels(), gcps_of(TRANSFORM, corners, noise))
    with load_image(image) as raster:
        residual = float(raster.georef.source.split("RMS residual ")[1].split(" px")[0])
        assert 0.3 < residual < 1.5
        # The fit lands within the noise (0.2 m = 1 px) of the true map everywhere.
        grid = np.array([[0.0, 0.0], [571.0, 571.0], [286.0, 286.0], [0.0, 571.0]])
        np.testing.assert_allclose(raster.georef.pixel_to_map(grid),
                                   Georef(TRANSFORM, None, "").pixel_to_map(grid), atol=0.2)
    # Two points (or points on one line) fix no affine map: one clear error.
    write_gcp_geotiff(image, sample_pixels(), gcps_of(TRANSFORM, corners[[0, 3]]))
    with pytest.raises(GeorefError, match=r"gcps\.tif: 2 ground control points do not fix"):
        load_image(image)


@pytest.mark.parametrize(("world", "match"), [
    ([[5.0, 5.0]] * 3, "3 ground control points do not determine a transform"),
    ([[388000.0, 3950000.0], [388100.0, 3950000.0], [388200.0, 3950000.0]],
     "3 ground control points do not determine a transform"),
    ([[388000.0, 3950000.0], [388114.4, 3950000.0], [388000.0, 3949885.6],
      [388614.4, 3950385.6]], "4 ground control points fit no affine map: RMS residual 884 px"),
])
def test_ground_control_points_that_fit_no_transform(tmp_path, world, match):
    image = tmp_path / "gcps.tif"
    pixels = [[0, 0], [572, 0], [0, 572], [572, 572]][:len(world)]
    gcps = [GroundControlPoint(row=row, col=col, x=x, y=y)
            for (col, row), (x, y) in zip(pixels, world, strict=True)]
    write_gcp_geotiff(image, sample_pixels(), gcps)
    with pytest.raises(GeorefError, match=rf"gcps\.tif: its {match}"):
        load_image(image)


def test_a_large_scene_s_curved_grid_of_control_points_is_fitted(tmp_path):
    """A radar scene's grid of points over thousands of pixels fits an affine map only
    roughly (tens of px), within 2 % of its extent: opened, the residual said."""
    image = tmp_path / "grid.tif"
    corners = np.array([(col, row) for col in np.linspace(0, 5000, 5)
                        for row in np.linspace(0, 5000, 5)])
    bend = np.column_stack([((corners[:, 0] - 2500) / 2500) ** 2 * 8.0,
                            np.zeros(len(corners))])  # metres: up to 40 px at 0.2 m
    write_gcp_geotiff(image, sample_pixels(), gcps_of(TRANSFORM, corners, bend))
    with load_image(image) as raster:
        residual = float(raster.georef.source.split("RMS residual ")[1].split(" px")[0])
    assert 5 < residual < 100


@pytest.mark.parametrize("transform", [Affine(0.0, 0.0, 388000.0, 0.0, 0.0, 3950000.0),
                                       Affine(0.2, 0.2, 388000.0, 0.2, 0.2, 3950000.0),
                                       Affine(float("nan"), 0.0, 388000.0, 0.0, -0.2, 3.9e6),
                                       Affine(0.2, 0.0, 1e20, 0.0, -0.2, 1e20)])
def test_degenerate_geotransform(tmp_path, transform):
    image = tmp_path / "degenerate.tif"
    write_geotiff(image, sample_pixels(), transform)
    with pytest.raises(GeorefError, match=r"degenerate\.tif: its geotransform .* not usable"):
        load_image(image)
    # The same from GDAL's .aux.xml beside a PNG.
    png = tmp_path / "pam.png"
    shutil.copy(SAMPLE_IMAGE, png)
    (tmp_path / "pam.png.aux.xml").write_text(
        f"<PAMDataset><GeoTransform>{', '.join(repr(v) for v in transform.to_gdal())}"
        "</GeoTransform></PAMDataset>")
    with pytest.raises(GeorefError, match=r"pam\.png: its geotransform .* not usable"):
        WindowedRaster(png)


def scene_rpcs() -> RPC:
    """RPCs of a north-up scene of 0.01° × 0.01° over 600 × 600 px, centred on 139° E, 35° N:
    sample = 300 + 300·(L + 0.1·H), line = 300 − 300·P in normalised lon L, lat P and height H
    (offset 100 m, scale 500 m), so a point off the mean height moves 0.06 px per m."""
    def coefficients(**terms):  # RPC00B order: 1, L, P, H, ...
        values = [0.0] * 20
        for index, value in terms.items():
            values[int(index[1:])] = value
        return values

    return RPC(height_off=100.0, height_scale=500.0, lat_off=35.0, lat_scale=0.01,
               long_off=139.0, long_scale=0.01, line_off=300.0, line_scale=300.0,
               samp_off=300.0, samp_scale=300.0,
               line_num_coeff=coefficients(c2=-1.0), line_den_coeff=coefficients(c0=1.0),
               samp_num_coeff=coefficients(c1=1.0, c3=0.1), samp_den_coeff=coefficients(c0=1.0))


def scene_lonlat(points) -> np.ndarray:
    """The exact lon/lat of pixel points of :func:`scene_rpcs` at the mean height."""
    points = np.asarray(points, dtype=np.float64)
    return np.column_stack([139.0 + (points[:, 0] - 300.0) / 300.0 * 0.01,
                            35.0 - (points[:, 1] - 300.0) / 300.0 * 0.01])


def test_geotiff_with_rpcs_only(tmp_path):
    image = tmp_path / "scene.tif"
    pixels = np.random.default_rng(0).integers(0, 255, (600, 600, 1), dtype=np.uint8)
    write_geotiff(image, pixels, transform=None, rpcs=scene_rpcs())
    with load_image(image) as raster:
        georef = raster.georef
    assert isinstance(georef, RpcGeoref)
    assert georef.crs_name == "EPSG:4326"
    assert georef.height == 100.0
    assert "RPCs" in georef.source
    assert "100 m" in georef.source
    grid = np.array([[0.0, 0.0], [599.0, 0.0], [300.0, 300.0], [17.25, 420.5]])
    # At the mean height (not at 0 m, which would move points by 6 px) and centre-based.
    np.testing.assert_allclose(georef.pixel_to_lonlat(grid), scene_lonlat(grid), atol=1e-9)
    np.testing.assert_allclose(georef.lonlat_to_pixel(scene_lonlat(grid)), grid, atol=1e-4)
    # A trace exports in lon/lat, and batch sees the scene's footprint.
    out = tmp_path / "trace.geojson"
    result = subprocess.run([sys.executable, str(ROOT / "main.py"), "trace", str(image),
                             "--a", "100,300", "--b", "500,300", "--score", "centre",
                             "--format", "geojson", "-o", str(out)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["coordinate_space"] == "lonlat"
    line = np.array(document["features"][0]["geometry"]["coordinates"])
    np.testing.assert_allclose(line[[0, -1]], scene_lonlat([[100, 300], [500, 300]]), atol=1e-8)
    low, high = np.sort(scene_lonlat([[-0.5, -0.5], [599.5, 599.5]]), axis=0)  # pixel corners
    grow = 0.01 * (high - low)  # batch grows the box by 1 % a side
    np.testing.assert_allclose(image_footprint(image, None),
                               [*(low - grow), *(high + grow)], atol=1e-8)


@pytest.mark.parametrize(("coefficients", "match"), [
    ("line_num_coeff", "RPCs cannot be used"),  # GDAL refuses them outright
    ("samp_den_coeff", "RPCs do not map pixels to the ground"),  # every point at infinity
])
def test_degenerate_rpcs_are_one_clear_error(tmp_path, coefficients, match):
    rpcs = scene_rpcs().to_dict()
    rpcs[coefficients] = [0.0] * 20
    image = tmp_path / "scene.tif"
    write_geotiff(image, np.zeros((60, 60, 1), dtype=np.uint8), transform=None,
                  rpcs=RPC(**rpcs))
    with pytest.raises(GeorefError, match=rf"scene\.tif: its {match}"):
        load_image(image)


def test_geotransform_wins_over_rpcs(tmp_path):
    image = tmp_path / "both.tif"
    write_geotiff(image, sample_pixels(), rpcs=scene_rpcs())
    with load_image(image) as raster:
        assert isinstance(raster.georef, Georef)
        assert raster.georef.source == "GeoTIFF"


def test_pixel_space_png():
    raster = load_image(SAMPLE_IMAGE)
    assert raster.georef is None


@pytest.mark.parametrize(("text", "match"), [("1\n2\n3\n", "six numbers"),
                                             ("0\n0\n0\n0\n1\n1\n", "not a usable transform"),
                                             ("1e300\n0\n0\n-1e300\n0\n0\n",
                                              r"not a usable transform \(1e\+300, 0, 0, "),
                                             ("a\nb\nc\nd\ne\nf\n", "six numbers")])
def test_bad_world_file(tmp_path, text, match):
    image = tmp_path / "bad.png"
    shutil.copy(SAMPLE_IMAGE, image)
    (tmp_path / "bad.pgw").write_text(text)
    with pytest.raises(GeorefError, match=f"bad.pgw.*{match}|{match}.*bad.pgw"):
        load_image(image)
    with pytest.raises(GeorefError):
        read_world_file(tmp_path / "bad.pgw")


@pytest.mark.parametrize(("name", "content", "match"), [
    ("x.pgw", "0.2\n" * 20_000, r"world file .*x\.pgw is larger than 64 KiB"),
    ("x.prj", "EPSG:32654" + " " * 70_000, r".prj file .*x\.prj is larger than 64 KiB"),
    ("x.pgw", "\0" * 60_000, r"x\.pgw: expected six numbers one a line, got \['\\x00.{60,80}…$"),
    ("x.prj", 'PROJCS["x",' + "A" * 60_000 + "]",
     r"x\.prj: not a CRS PROJ understands: .*'PROJCS\[\"x\",AAAA.{60,80}…: \(Internal"),
    ("x.prj", "", r"x\.prj: not a CRS PROJ understands: the file is empty"),
])
def test_big_sidecar_files_are_refused_in_one_short_line(tmp_path, name, content, match):
    image = tmp_path / "x.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "x.pgw", TRANSFORM)
    (tmp_path / name).write_text(content)
    with pytest.raises(GeorefError, match=match) as refusal:
        load_image(image)
    assert len(str(refusal.value)) < 300
    assert "\n" not in str(refusal.value)


def test_sidecar_files_with_a_byte_order_mark(tmp_path):
    image = tmp_path / "x.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "x.pgw", TRANSFORM)
    for sidecar in (tmp_path / "x.pgw", tmp_path / "x.prj"):
        text = sidecar.read_text() if sidecar.exists() else UTM54
        sidecar.write_bytes(b"\xef\xbb\xbf" + text.encode())
    georef = load_image(image).georef
    assert georef.transform.almost_equals(TRANSFORM)
    assert georef.crs_name == UTM54


def test_bad_prj_and_bad_crs_option(tmp_path):
    image = tmp_path / "x.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "x.pgw", TRANSFORM)
    with pytest.raises(BadParameter, match="EPSG:999999"):
        load_image(image, crs="EPSG:999999")
    (tmp_path / "x.prj").write_text("not a crs")
    with pytest.raises(GeorefError, match="x.prj"):
        load_image(image)


@pytest.mark.parametrize(("crs", "code"), [
    (UTM54, 32654),
    ("+proj=utm +zone=54 +datum=WGS84 +units=m +no_defs", 32654),
    ("+proj=longlat +datum=WGS84 +no_defs", 4326),
    (pyproj.CRS.from_epsg(6677).to_wkt("WKT1_ESRI"), 6677),  # a .prj: northing, easting
    # PROJ's best match is EPSG:23033 (ED50) and EPSG:3095 (Tokyo): other datums, ~100 m off.
    ("+proj=utm +zone=33 +ellps=intl +units=m +no_defs", None),
    ("+proj=utm +zone=54 +ellps=bessel +units=m +no_defs", None),
])
def test_an_epsg_code_names_only_the_crs_itself(crs, code):
    crs = parse_crs(crs)
    assert epsg_code(crs) == code
    name = Georef(TRANSFORM, crs, "test").crs_name
    assert name == (f"EPSG:{code}" if code else crs.to_wkt())
    assert crs_label(crs).startswith(f"EPSG:{code} (" if code else "'")


@pytest.mark.parametrize(("crs", "kind"), [("EPSG:4978", "geocentric"),
                                           ("EPSG:5773", "vertical")])
def test_geocentric_or_vertical_crs_is_refused(tmp_path, crs, kind):
    image = tmp_path / "x.png"
    shutil.copy(SAMPLE_IMAGE, image)
    write_world_file(tmp_path / "x.pgw", TRANSFORM)
    refusal = rf"{crs} \(.*\) is a {kind} CRS"
    with pytest.raises(BadParameter, match=f"^CRS {refusal}"):
        load_image(image, crs=crs)
    (tmp_path / "x.prj").write_text(crs)
    with pytest.raises(GeorefError, match=rf"x\.prj: {refusal}"):
        load_image(image)
    if kind == "geocentric":  # GeoTIFF keys cannot hold a vertical CRS alone
        tiff = tmp_path / "x.tif"
        write_geotiff(tiff, sample_pixels(), crs=crs)
        with pytest.raises(GeorefError, match=rf"x\.tif: {refusal}"):
            load_image(tiff)
    # A compound CRS (a map CRS + heights) places the image.
    (tmp_path / "x.prj").write_text("EPSG:32654+5773")
    assert load_image(image).georef.pixel_to_lonlat([0, 0]).shape == (1, 2)


# ------------------------------------------------------------------------ windowed rasters
def test_windowed_pixels_match_png(geotiff):
    png = load_image(SAMPLE_IMAGE)
    with load_image(geotiff) as raster:
        assert (raster.height, raster.width, raster.bands) == (572, 572, 3)
        np.testing.assert_array_equal(raster.read_window(10, 50, 300, 340),
                                      png.pixels[10:50, 300:340])
        np.testing.assert_array_equal(raster.read_window(-5, 3, 570, 600),
                                      png.pixels[0:3, 570:572])
        assert raster.read_window(600, 610, 0, 5).shape == (0, 5, 3)
        np.testing.assert_array_equal(raster.pixels, png.pixels)
        assert raster.overview(100).shape == (96, 96, 3)
        np.testing.assert_array_equal(raster.overview(100), png.overview(100))
        np.testing.assert_array_equal(raster.overview(100)[3, 5], png.pixels[20, 32])
    assert png.overview(100).shape == (96, 96, 3)
    assert png.overview(1000).shape == (572, 572, 3)
    with pytest.raises(BadParameter, match="max_size"):
        png.overview(0)


def test_trace_on_geotiff_equals_png(geotiff):
    png = load_image(SAMPLE_IMAGE)
    with load_image(geotiff) as raster:
        on_tiff = trace(raster, (505, 158), (552, 92), backend=CpuBackend())
    on_png = trace(png, (505, 158), (552, 92), backend=CpuBackend())
    np.testing.assert_array_equal(on_tiff.polyline, on_png.polyline)
    assert on_tiff.score == on_png.score


@pytest.mark.parametrize(("dtype", "scale"), [(np.uint8, 255), (np.uint16, 65535),
                                              (np.float32, 1)])
def test_tiff_scaling_and_alpha(tmp_path, dtype, scale):
    rgba = np.random.default_rng(2).integers(0, 255, size=(20, 30, 4)).astype(dtype)
    write_geotiff(tmp_path / "rgba.tif", rgba, transform=None)
    with load_image(tmp_path / "rgba.tif") as raster:
        assert raster.bands == 3
        np.testing.assert_allclose(raster.pixels, rgba[:, :, :3].astype(np.float32) / scale)


def test_grey_alpha_tiff(tmp_path):
    grey = np.full((10, 12, 2), 51, dtype=np.uint8)
    write_geotiff(tmp_path / "ga.tif", grey, transform=None)
    with load_image(tmp_path / "ga.tif") as raster:
        assert raster.read_window(0, 2, 0, 2).shape == (2, 2, 1)
        assert raster.pixels[0, 0, 0] == pytest.approx(0.2)


def test_corrupt_and_tiny_tiffs(tmp_path):
    (tmp_path / "junk.tif").write_bytes(b"II*\x00garbage" * 10)
    with pytest.raises(ImageReadError, match="junk.tif"):
        load_image(tmp_path / "junk.tif")
    write_geotiff(tmp_path / "one.tif", np.zeros((1, 8, 1), np.uint8), transform=None)
    with pytest.raises(ImageReadError, match="too small"):
        load_image(tmp_path / "one.tif")


def test_big_geotiff_traces_as_fast_as_a_small_image(tmp_path, monkeypatch):
    """A 20000×20000 tiled GeoTIFF (sparse: only the sample's tile block is written) is traced
    as the small image is, from one read of the corridor's window: its size costs no time
    (the speed itself is the benchmarks')."""
    big = tmp_path / "big.tif"
    size, offset = 20000, 10000
    with rasterio.open(big, "w", driver="GTiff", width=size, height=size, count=3,
                       dtype="uint8", crs=UTM54, transform=TRANSFORM, tiled=True,
                       blockxsize=256, blockysize=256, sparse_ok=True) as dataset:
        dataset.write(np.moveaxis(sample_pixels(), -1, 0), window=Window(offset, offset, 572, 572))
    png = load_image(SAMPLE_IMAGE)
    a, b = (505, 158), (552, 92)
    expected = trace(png, a, b, backend=CpuBackend())  # also warms the compiled code
    with load_image(big) as raster:
        assert (raster.width, raster.height) == (size, size)
        assert size * size > FULL_READ_LIMIT
        with pytest.raises(ImageReadError, match="too large"):
            assert raster.pixels is None
        a_big, b_big = np.add(a, offset), np.add(b, offset)
        reads = []
        read = WindowedRaster._read
        monkeypatch.setattr(WindowedRaster, "_read",
                            lambda self, window, shape: reads.append(window) or read(
                                self, window, shape))
        result = trace(raster, a_big, b_big, backend=CpuBackend())
        assert len(reads) == 1
        assert reads[0].width * reads[0].height < 100 * 100  # only the corridor window
    np.testing.assert_allclose(result.polyline - offset, expected.polyline, atol=1e-9)


def test_plain_images_need_no_geo_packages():
    """Tracing a PNG without world file imports neither pyproj, affine nor rasterio."""
    code = ("import sys; from core.raster import load_image; import core.geojson, core.batch; "
            f"load_image({str(SAMPLE_IMAGE)!r}); "
            "print(sorted({'pyproj', 'affine', 'rasterio'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("epsg", "pole"), [(3413, 90.0), (3031, -90.0)])
def test_the_footprint_of_an_image_around_a_pole_reaches_it(tmp_path, epsg, pole):
    # 60 m × 60 m of polar stereographic map, the pole at its centre: its outline's latitudes
    # stop short of the pole, which lies inside.
    image = tmp_path / "pole.tif"
    write_geotiff(image, sample_pixels(), transform=Affine(0.2, 0.0, -30.0, 0.0, -0.2, 30.0),
                  crs=f"EPSG:{epsg}")
    low_lon, low_lat, high_lon, high_lat = image_footprint(image, None)
    assert (low_lon, high_lon) == (-180.0, 180.0)
    assert (high_lat if pole > 0 else low_lat) == pole
    assert abs(low_lat if pole > 0 else high_lat) > 89.99


def over_transformer(crs) -> pyproj.Transformer:
    """WGS84 lon/lat to ``crs`` as PROJ transforms without wrapping longitudes (``+over``): the
    reference for longitudes past ±180°."""
    with warnings.catch_warnings():  # the PROJ string loses nothing a map projection needs
        warnings.simplefilter("ignore", UserWarning)
        definition = pyproj.CRS.from_user_input(crs).to_proj4()
    return pyproj.Transformer.from_crs(pyproj.CRS(4326), pyproj.CRS(f"{definition} +over"),
                                       always_xy=True)


@pytest.mark.parametrize(("crs", "repeats"), [
    ("EPSG:3857", True), ("EPSG:3832", True), ("EPSG:4087", True),
    ("+proj=eqc +lon_0=90 +units=us-ft", True), ("EPSG:32660", False), ("EPSG:3413", False),
    ("ESRI:54009", False), ("EPSG:2154", False), ("EPSG:4326", False)])
def test_world_shift_of_maps_that_repeat_along_x(crs, repeats):
    """Cylindrical projections repeat every 360° of longitude, one map's width along x (as
    PROJ puts longitudes when it does not wrap them: +over); others (transverse Mercator,
    polar stereographic, Mollweide, conic, degrees) do not."""
    crs = pyproj.CRS.from_user_input(crs)
    shift = world_shift(crs)
    if not repeats:
        assert shift is None
        return
    over = over_transformer(crs)
    np.testing.assert_allclose(
        shift, np.subtract(over.transform(370.0, 30.0), over.transform(10.0, 30.0)), rtol=1e-12)


def test_longitudes_past_180_lie_past_the_edge_of_a_map_that_repeats():
    """Web Mercator: 180.01° lies past the map's east edge, as PROJ's +over puts it, and
    -180.01° past its west edge; within ±180° nothing changes, in any CRS."""
    mercator = Georef(Affine(1.0, 0.0, 0.0, 0.0, -1.0, 0.0), pyproj.CRS.from_epsg(3857), "test")
    np.testing.assert_allclose(world_shift(mercator.crs), [2 * 20037508.342789244, 0.0])
    over = over_transformer("EPSG:3857")
    lonlat = np.array([[180.01, 10.0], [-180.01, 10.0], [539.0, -5.0], [179.99, 10.0],
                       [-179.99, 10.0], [180.0, 0.0], [0.0, 0.0]])
    x, y = over.transform(lonlat[:, 0], lonlat[:, 1])
    np.testing.assert_allclose(mercator.lonlat_to_pixel(lonlat),
                               np.column_stack([x, -np.asarray(y)]) - 0.5, rtol=0, atol=1e-6)
    for code in (3857, 3832, 32660):  # within ±180°: where PROJ puts them
        georef = Georef(Affine(1.0, 0.0, 0.0, 0.0, -1.0, 0.0), pyproj.CRS.from_epsg(code), "t")
        x, y = pyproj.Transformer.from_crs(4326, code, always_xy=True).transform(
            lonlat[3:, 0], lonlat[3:, 1])
        np.testing.assert_array_equal(georef.lonlat_to_pixel(lonlat[3:]),
                                      np.column_stack([x, -np.asarray(y)]) - 0.5)
