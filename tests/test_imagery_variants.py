"""Image files as other programs write them: huge PNGs, georeferencing in GDAL's .aux.xml,
EXIF orientation, 16-bit colour PNGs, band descriptions, and files that are no image."""

from __future__ import annotations

import json
import os
import struct
import sys
import warnings
import zlib

import imageio.v3 as iio
import numpy as np
import pyproj
import pytest
import rasterio
import rasterio.shutil
from affine import Affine
from PIL import Image
from rasterio.errors import NotGeoreferencedWarning

import core.surface
from cli import main as cli_main
from core.errors import BadParameter, ImageReadError, ModelUnavailable
from core.georef import GeorefError
from core.raster import described_colours, load_image, to_float_bands
from tests.conftest import SAMPLE_IMAGE

#: The sample image placed in UTM zone 54N at 0.2 m/px.
UTM54 = "EPSG:32654"
TRANSFORM = Affine(0.2, 0.0, 388000.0, 0.0, -0.2, 3950000.0)


def small_rgb(rows: int = 40, cols: int = 50) -> np.ndarray:
    """A corner of the sample image: uint8 of shape (rows, cols, 3)."""
    return np.ascontiguousarray(iio.imread(SAMPLE_IMAGE)[:rows, :cols])


def write_with_gdal(path, array: np.ndarray, driver: str, transform=None, crs=None,
                    descriptions=None) -> None:
    """Write ``array`` of shape (rows, cols, bands) with GDAL's ``driver`` (PNG and JPEG through
    a GeoTIFF in memory, as gdal_translate does: georeferencing goes to an .aux.xml)."""
    rows, cols, count = array.shape
    profile = {"driver": "GTiff", "width": cols, "height": rows, "count": count,
               "dtype": array.dtype}
    if transform is not None:
        profile.update(transform=transform, crs=crs)
    with warnings.catch_warnings(), rasterio.MemoryFile() as memory:
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with memory.open(**profile) as dataset:
            dataset.write(np.moveaxis(array, -1, 0))
            if descriptions is not None:
                dataset.descriptions = descriptions
        with memory.open() as dataset:
            rasterio.shutil.copy(dataset, path, driver=driver)


def expected_lonlat(transform: Affine, points: np.ndarray) -> np.ndarray:
    """WGS84 lon/lat of pixel points (x, y) on ``transform`` in UTM zone 54N, through
    rasterio's pixel centres and pyproj."""
    xs, ys = rasterio.transform.xy(transform, points[:, 1], points[:, 0], offset="center")
    to_wgs84 = pyproj.Transformer.from_crs(UTM54, "EPSG:4326", always_xy=True)
    return np.column_stack(to_wgs84.transform(xs, ys))


POINTS = np.array([[0.0, 0.0], [49.0, 0.0], [12.0, 31.0], [49.0, 39.0]])


# --- 1. PNG and JPEG over Pillow's pixel limit ---------------------------------------------

@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_an_image_over_pillows_pixel_limit_opens_when_it_fits_the_memory_budget(
        tmp_path, monkeypatch, suffix):
    image = tmp_path / f"big{suffix}"
    iio.imwrite(image, small_rgb())
    expected = to_float_bands(iio.imread(image))
    # Pillow refuses images over twice its limit; lowered here, a 40 × 50 px image is over it.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)
    raster = load_image(image)
    assert (raster.width, raster.height) == (50, 40)
    np.testing.assert_array_equal(raster.pixels, expected)
    assert Image.MAX_IMAGE_PIXELS == 500  # lifted for the read only


def png_start(width: int, height: int) -> bytes:
    """The start of an 8-bit grey PNG of ``width`` × ``height`` px: its signature, IHDR and
    an empty IDAT (as far as a PNG's header goes)."""
    chunks = [b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0), b"IDAT"]
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(chunk) - 4) + chunk + struct.pack(">I", zlib.crc32(chunk))
        for chunk in chunks)


def test_an_image_over_the_memory_budget_gets_our_message_not_pillows(tmp_path, monkeypatch):
    monkeypatch.setenv("ROADTRACER_MEMORY_BUDGET", "1G")
    image = tmp_path / "huge.png"
    image.write_bytes(png_start(20000, 20000))  # 400 Mpx: over Pillow's limit and ours
    with pytest.raises(BadParameter, match=r"^.*huge\.png: decoding its 20000×20000 px needs "
                                           r"about .* over the 1\.0 GiB it may use"):
        load_image(image)


# --- 2. Georeferencing in GDAL's .aux.xml beside a PNG or JPEG ------------------------------

@pytest.mark.parametrize(("driver", "suffix"), [("PNG", ".png"), ("JPEG", ".jpg")])
def test_a_png_or_jpeg_written_by_gdal_is_georeferenced_by_its_aux_xml(tmp_path, driver, suffix):
    image = tmp_path / f"gdal{suffix}"
    write_with_gdal(image, small_rgb(), driver, TRANSFORM, UTM54)
    assert (tmp_path / f"gdal{suffix}.aux.xml").is_file()
    assert not list(tmp_path.glob("*w"))  # no world file
    raster = load_image(image)
    assert raster.georef.transform == TRANSFORM
    assert raster.georef.crs == pyproj.CRS.from_epsg(32654)
    assert raster.georef.source == f"gdal{suffix}.aux.xml"
    np.testing.assert_allclose(raster.georef.pixel_to_lonlat(POINTS),
                               expected_lonlat(TRANSFORM, POINTS), rtol=0, atol=1e-10)
    assert raster.ground_resolution == pytest.approx(0.2, rel=1e-3)


def srs_only_aux_xml(crs: str) -> str:
    """An .aux.xml holding only a CRS, as QGIS writes beside an exported PNG and world file."""
    wkt = rasterio.crs.CRS.from_string(crs).to_wkt()
    return f'<PAMDataset>\n  <SRS dataAxisToSRSAxisMapping="1,2">{wkt}</SRS>\n</PAMDataset>\n'


def world_file_text(transform: Affine) -> str:
    """A world file for a corner-based transform: it stores the upper-left pixel's centre."""
    a, b, c, d, e, f = transform[:6]
    return "\n".join(repr(v) for v in (a, d, b, e, a / 2 + b / 2 + c, d / 2 + e / 2 + f)) + "\n"


def test_a_world_file_takes_its_crs_from_an_aux_xml_as_for_a_tiff(tmp_path):
    image = tmp_path / "qgis.png"
    iio.imwrite(image, small_rgb())
    (tmp_path / "qgis.pgw").write_text(world_file_text(TRANSFORM))
    (tmp_path / "qgis.png.aux.xml").write_text(srs_only_aux_xml(UTM54))
    raster = load_image(image)
    assert raster.georef.source == "world file qgis.pgw"
    assert raster.georef.crs == pyproj.CRS.from_epsg(32654)
    np.testing.assert_allclose(raster.georef.transform[:6], TRANSFORM[:6], rtol=0, atol=1e-9)
    np.testing.assert_allclose(raster.georef.pixel_to_lonlat(POINTS),
                               expected_lonlat(TRANSFORM, POINTS), rtol=0, atol=1e-10)


def test_without_rasterio_an_aux_xml_is_not_read(tmp_path, monkeypatch):
    image = tmp_path / "qgis.png"
    iio.imwrite(image, small_rgb())
    (tmp_path / "qgis.pgw").write_text(world_file_text(TRANSFORM))
    (tmp_path / "qgis.png.aux.xml").write_text(srs_only_aux_xml(UTM54))
    monkeypatch.setitem(sys.modules, "rasterio", None)  # as without the geo extra
    raster = load_image(image)
    assert raster.georef.source == "world file qgis.pgw"
    assert raster.georef.crs is None


# --- 3. EXIF orientation --------------------------------------------------------------------

@pytest.mark.parametrize(("orientation", "turn"), [(6, "rotate"), (8, "rotate"),
                                                   (2, "mirror")])
def test_a_jpeg_asking_viewers_to_turn_it_is_read_as_stored_and_says_so(
        tmp_path, capsys, orientation, turn):
    stored = small_rgb(64, 48)
    exif = Image.Exif()
    exif[0x0112] = orientation  # Orientation
    image = tmp_path / f"exif{orientation}.jpg"
    Image.fromarray(stored).save(image, quality=95, exif=exif.tobytes())
    raster = load_image(image)
    assert (raster.width, raster.height) == (48, 64)  # stored order, not turned
    np.testing.assert_array_equal(raster.pixels, to_float_bands(iio.imread(image, rotate=False)))
    note = (f"this JPEG asks viewers to {turn} it (EXIF orientation {orientation}); it is shown "
            "and traced as stored, as GIS software does")
    assert raster.notes == (note,)
    assert cli_main(["trace", str(image), "--a", "5,5", "--b", "40,50", "--score", "centre",
                     "--backend", "cpu"]) == 0
    assert f"note: {image}: {note}\n" in capsys.readouterr().err


def test_an_upright_jpeg_has_no_note(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 1
    image = tmp_path / "upright.jpg"
    Image.fromarray(small_rgb()).save(image, exif=exif.tobytes())
    assert load_image(image).notes == ()


# --- 4. 16-bit colour PNGs ------------------------------------------------------------------

def twelve_bit_rgb() -> np.ndarray:
    """12-bit values in uint16 of shape (40, 50, 3): every one of 4096 levels counts."""
    return (small_rgb().astype(np.uint16) * 16 + np.arange(16, dtype=np.uint16)[
        np.arange(40 * 50 * 3) % 16].reshape(40, 50, 3))


def test_a_16_bit_colour_png_keeps_its_16_bits(tmp_path):
    image = tmp_path / "rgb16.png"
    write_with_gdal(image, twelve_bit_rgb(), "PNG")
    (tmp_path / "rgb16.png.aux.xml").unlink(missing_ok=True)
    assert Image.open(image).tile[0].args == "RGB;16B"  # what Pillow would cut to 8 bits
    raster = load_image(image)
    np.testing.assert_array_equal(raster.pixels, to_float_bands(twelve_bit_rgb()))
    assert raster.notes == ()
    assert raster.georef is None


def test_without_rasterio_a_16_bit_colour_png_is_read_at_8_bits_with_a_note(tmp_path,
                                                                           monkeypatch):
    image = tmp_path / "rgb16.png"
    write_with_gdal(image, twelve_bit_rgb(), "PNG")
    monkeypatch.setitem(sys.modules, "rasterio", None)  # as without the geo extra
    raster = load_image(image)
    np.testing.assert_array_equal(raster.pixels,
                                  to_float_bands((twelve_bit_rgb() >> 8).astype(np.uint8)))
    assert raster.notes == ("this PNG stores 16 bits per band but is read at 8, as rasterio is "
                            "not installed (pip install -e \".[geo]\" keeps all 16)",)


# --- 5. Band descriptions -------------------------------------------------------------------

@pytest.mark.parametrize(("descriptions", "colours"), [
    (("Blue", "Green", "Red", "NIR"), (3, 2, 1)),
    (("B4 (red)", "Band 3: green", "band2 - BLUE"), (1, 2, 3)),
    (("R", "G", "B", "NIR"), (1, 2, 3)),
    (("Coastal", "Blue", "Green", "Yellow", "Red", "Red Edge", "NIR1", "NIR2"), (5, 3, 2)),
    (("Coastal blue", "Green", "Red", "RedEdge"), None),  # no band is blue
    (("Red", "Red", "Green", "Blue"), None),  # two reds
    ((None, None, None), None),
])
def test_band_descriptions_naming_colours(descriptions, colours):
    assert described_colours(descriptions) == colours


def write_described_geotiff(path, bands: int, descriptions,
                            photometric: str = "MINISBLACK") -> np.ndarray:
    """A GeoTIFF of ``bands`` distinct uint8 bands with these descriptions, tagged no colours
    unless ``photometric`` is ``"RGB"``; its pixels (rows, cols, bands)."""
    pixels = (np.arange(bands, dtype=np.uint8)[None, None, :] * 20
              + np.zeros((30, 30, 1), np.uint8))
    profile = {"driver": "GTiff", "width": 30, "height": 30, "count": bands, "dtype": "uint8",
               "transform": TRANSFORM, "crs": UTM54, "photometric": photometric}
    with rasterio.open(path, "w", **profile) as dataset:
        dataset.write(np.moveaxis(pixels, -1, 0))
        dataset.descriptions = descriptions
    return pixels


def test_a_geotiff_without_colour_tags_is_traced_on_the_bands_its_descriptions_name(tmp_path):
    image = tmp_path / "bgrn.tif"
    pixels = write_described_geotiff(image, 4, ("Blue", "Green", "Red", "NIR"))
    with load_image(image) as raster:
        np.testing.assert_array_equal(raster.pixels, to_float_bands(pixels[:, :, [2, 1, 0]]))
        assert raster.band_note == "bands 3, 2, 1 of 4 (Red, Green, Blue)"


def test_band_notes_name_the_bands_used(tmp_path):
    worldview = tmp_path / "wv8.tif"
    write_described_geotiff(worldview, 8, ("Coastal", "Blue", "Green", "Yellow", "Red",
                                           "RedEdge", "NIR1", "NIR2"))
    with load_image(worldview) as raster:
        assert raster.band_note == "bands 5, 3, 2 of 8 (Red, Green, Blue)"
    unnamed = tmp_path / "unnamed.tif"
    write_described_geotiff(unnamed, 6, ("Coastal", "Aerosol", "Yellow", "Pan", "NIR1", "NIR2"))
    with load_image(unnamed) as raster:
        assert raster.band_note == "bands 1, 2, 3 of 6 (Coastal, Aerosol, Yellow)"
    with load_image(unnamed, bands=(5, 3, 1)) as raster:
        assert raster.band_note == "bands 5, 3, 1 of 6 (NIR1, Yellow, Coastal)"


def test_colour_tags_win_over_band_descriptions(tmp_path):
    image = tmp_path / "tagged.tif"
    pixels = write_described_geotiff(image, 3, ("Blue", "Green", "Red"), photometric="RGB")
    with load_image(image) as raster:
        np.testing.assert_array_equal(raster.pixels, to_float_bands(pixels))
        assert raster.band_note is None


# --- 6. trace -o FILE.geojson ----------------------------------------------------------------

@pytest.mark.parametrize(("name", "options", "geojson"), [
    ("line.geojson", [], True),
    ("LINE.GeoJSON", [], True),
    ("line.json", [], False),
    ("line.geojson", ["--format", "json"], False),
    ("line.json", ["--format", "geojson"], True),
])
def test_the_output_file_suffix_picks_geojson_unless_a_format_is_given(tmp_path, capsys, name,
                                                                       options, geojson):
    output = tmp_path / name
    assert cli_main(["trace", str(SAMPLE_IMAGE), "--a", "430,241", "--b", "486,172",
                     "--score", "centre", "--backend", "cpu", "-q", "-o", str(output),
                     *options]) == 0
    document = json.loads(output.read_text())
    assert (document.get("type") == "FeatureCollection") == geojson
    assert ("pixels" in document) == (not geojson)


# --- 7. Files that are no image, or no model ---------------------------------------------------

def test_a_file_that_is_no_image_says_so(tmp_path):
    for name in ("notes.png", "notes.jpg"):
        text = tmp_path / name
        text.write_text("not an image")
        with pytest.raises(ImageReadError) as caught:
            load_image(text)
        assert str(caught.value) == (f"{text} is not an image this program can read (PNG, JPEG, "
                                     "TIFF/GeoTIFF, …)")
    tiff = tmp_path / "notes.tif"
    tiff.write_text("not an image")
    with pytest.raises(ImageReadError) as caught:
        load_image(tiff)
    assert str(caught.value) == (f"{tiff} is not an image this program can read (PNG, JPEG, "
                                 "TIFF/GeoTIFF, …; GDAL: not recognized as being in a supported "
                                 "file format)")


def test_a_damaged_image_says_so(tmp_path):
    damaged = tmp_path / "cut.png"
    damaged.write_bytes(SAMPLE_IMAGE.read_bytes()[:3000])
    with pytest.raises(ImageReadError) as caught:
        load_image(damaged)
    assert str(caught.value) == (f"{damaged} is damaged or incomplete: save or download it "
                                 "again (image file is truncated)")


def test_a_file_that_is_no_onnx_model_says_so(tmp_path):
    model = tmp_path / "notes.onnx"
    model.write_text("not a model")
    with pytest.raises(ModelUnavailable) as caught:
        core.surface.use_model(model)
    assert str(caught.value) == (f"{model} is not an ONNX model: give the .onnx file of a "
                                 "surface model (score kind 'centre' traces without it)")


# --- What batch and the app make of the same files -------------------------------------------

def exif_jpeg(path, orientation: int = 6):
    """A JPEG of :func:`small_rgb` asking viewers to turn it (EXIF ``orientation``)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(small_rgb(64, 48)).save(path, quality=95, exif=exif.tobytes())
    return path


def test_batch_reports_how_an_image_was_read(tmp_path):
    from core.backend import CpuBackend
    from core.batch import ImageTask, process_image
    from core.tracer import TraceParams

    image = exif_jpeg(tmp_path / "turned.jpg")
    report, _ = process_image(ImageTask(str(image), (), TraceParams(score="centre")), CpuBackend)
    assert report.notes == list(load_image(image).notes)
    assert len(report.notes) == 1
    assert "EXIF orientation 6" in report.notes[0]
    assert report.as_dict()["notes"] == report.notes


def test_batch_finds_the_footprint_of_a_png_georeferenced_by_its_aux_xml(tmp_path,
                                                                          monkeypatch):
    from core.batch import image_footprint

    image = tmp_path / "gdal.png"
    write_with_gdal(image, small_rgb(), "PNG", TRANSFORM, UTM54)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # the header read ignores the limit
    box = image_footprint(image, None)
    corners = expected_lonlat(TRANSFORM, np.array([[-0.5, -0.5], [49.5, 39.5]]))
    np.testing.assert_allclose(box[[0, 2]], sorted(corners[:, 0]), atol=1e-6)
    np.testing.assert_allclose(box[[1, 3]], sorted(corners[:, 1]), atol=1e-6)


# --- Other GIS raster formats -----------------------------------------------------------------

def test_a_jpeg_2000_is_read_window_by_window_with_its_own_georeferencing(tmp_path):
    image = tmp_path / "ortho.jp2"
    pixels = small_rgb()
    with rasterio.open(image, "w", driver="JP2OpenJPEG", width=50, height=40, count=3,
                       dtype="uint8", crs=UTM54, transform=TRANSFORM,
                       QUALITY=100, REVERSIBLE=True) as dataset:  # lossless
        dataset.write(np.moveaxis(pixels, -1, 0))
    raster = load_image(image)
    assert type(raster).__name__ == "WindowedRaster"
    np.testing.assert_array_equal(raster.read_window(0, 40, 0, 50), to_float_bands(pixels))
    assert raster.georef.source == "JPEG 2000"
    np.testing.assert_allclose(raster.georef.pixel_to_lonlat(POINTS),
                               expected_lonlat(TRANSFORM, POINTS), rtol=0, atol=1e-10)
    raster.close()


@pytest.mark.parametrize(("suffix", "name"), [(".ecw", "ECW"), (".sid", "MrSID"),
                                              (".vrt", "GDAL virtual raster")])
def test_a_format_not_read_says_to_convert_it(tmp_path, suffix, name):
    image = tmp_path / f"ortho{suffix}"
    image.write_bytes(b"\0" * 64)
    with pytest.raises(ImageReadError) as error:
        load_image(image)
    assert str(error.value) == (f"{image}: {name} images are not read; convert it to a "
                                f"GeoTIFF, e.g. gdal_translate -co TILED=YES ortho{suffix} "
                                "out.tif")


def test_a_file_of_other_content_under_a_tiff_name_is_refused_not_read_as_that(tmp_path):
    # A GDAL virtual raster saved as .tif would read whatever its sources name (a FIFO:
    # forever; a URL: the network); only the format its suffix names is read.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    image = tmp_path / "ortho.tif"
    image.write_text(f'<VRTDataset rasterXSize="8" rasterYSize="8"><VRTRasterBand '
                     f'dataType="Byte" band="1"><SimpleSource><SourceFilename>{fifo}'
                     '</SourceFilename><SourceBand>1</SourceBand></SimpleSource>'
                     '</VRTRasterBand></VRTDataset>')
    with pytest.raises(ImageReadError, match="ortho.tif is not an image this program can read"):
        load_image(image)


@pytest.mark.parametrize(("suffix", "content", "rename"), [
    (".tif", "PNG", ".png"), (".jp2", "PNG", ".png"), (".img", "GTiff", ".tif")])
def test_an_image_under_another_formats_name_says_to_rename_it(tmp_path, suffix, content,
                                                               rename):
    image = tmp_path / f"ortho{suffix}"
    if content == "PNG":
        image.write_bytes(SAMPLE_IMAGE.read_bytes())
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            with rasterio.open(image, "w", driver=content, width=8, height=8, count=1,
                               dtype="uint8") as dataset:
                dataset.write(np.zeros((1, 8, 8), np.uint8))
    with pytest.raises(ImageReadError) as error:
        load_image(image)
    assert str(error.value) == (
        f"{image} holds a {content} image under a {suffix} name, and a file is read only as "
        f"the format its suffix names: rename it to {rename}")


def test_a_damaged_tile_names_gdals_reason(tmp_path):
    image = tmp_path / "cut.tif"
    with rasterio.open(image, "w", driver="GTiff", width=256, height=256, count=3,
                       dtype="uint8", tiled=True, blockxsize=64, blockysize=64,
                       compress="deflate") as dataset:
        dataset.write(np.random.default_rng(0).integers(0, 256, (3, 256, 256), np.uint8))
    image.write_bytes(image.read_bytes()[:image.stat().st_size // 2])
    raster = load_image(image)
    with pytest.raises(ImageReadError) as error:
        raster.read_window(0, 256, 0, 256)
    raster.close()
    assert "TIFFReadEncodedTile() failed" in str(error.value)
    assert "See previous" not in str(error.value)


@pytest.mark.parametrize(("content", "reason"), [
    ("<PAMDataset><SRS>", "is not a readable GDAL .aux.xml (no element found"),
    ("<html></html>", "is not a GDAL .aux.xml (its root is <html>, not <PAMDataset>)"),
    ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
     "<PAMDataset>&b;</PAMDataset>", "declares a document type"),
])
def test_a_broken_aux_xml_is_named_not_ignored(tmp_path, content, reason):
    image = tmp_path / "a.png"
    iio.imwrite(image, small_rgb())
    (tmp_path / "a.png.aux.xml").write_text(content)
    with pytest.raises(GeorefError) as error:
        load_image(image)
    assert str(error.value).startswith(f"{tmp_path / 'a.png.aux.xml'} ")
    assert reason in str(error.value)
    assert str(error.value).endswith(": fix or remove it")


def test_an_aux_xml_of_statistics_only_leaves_the_image_without_georeferencing(tmp_path):
    image = tmp_path / "a.png"
    iio.imwrite(image, small_rgb())
    (tmp_path / "a.png.aux.xml").write_text(
        '<PAMDataset><PAMRasterBand band="1"><Metadata><MDI key="STATISTICS_MEAN">80'
        "</MDI></Metadata></PAMRasterBand></PAMDataset>")
    assert load_image(image).georef is None


def test_batch_finds_the_footprint_of_a_jpeg_2000_by_its_own_georeferencing(tmp_path):
    from core.batch import image_footprint

    image = tmp_path / "ortho.jp2"
    with rasterio.open(image, "w", driver="JP2OpenJPEG", width=50, height=40, count=3,
                       dtype="uint8", crs=UTM54, transform=TRANSFORM) as dataset:
        dataset.write(np.moveaxis(small_rgb(), -1, 0))
    box = image_footprint(image, None)
    corners = expected_lonlat(TRANSFORM, np.array([[-0.5, -0.5], [49.5, 39.5]]))
    np.testing.assert_allclose(box[[0, 2]], sorted(corners[:, 0]), atol=1e-6)
    np.testing.assert_allclose(box[[1, 3]], sorted(corners[:, 1]), atol=1e-6)
