"""Image loading: every pixel layout and type becomes float32 (rows, cols, bands)."""

import os
import re
import subprocess
import sys
import tracemalloc
import warnings

import imageio.v3 as iio
import numpy as np
import pytest

from core.errors import BadParameter, ImageReadError
from core.georef import GeorefError
from core.raster import load_image, to_float_bands
from core.resources import BUDGET_VARIABLE
from tests.conftest import ROOT


@pytest.mark.parametrize(("array", "bands", "top"), [
    (np.full((5, 6), 255, np.uint8), 1, 1.0),
    (np.full((5, 6, 3), 65535, np.uint16), 3, 1.0),
    (np.full((5, 6, 4), 255, np.uint8), 3, 1.0),
    (np.full((5, 6, 2), 128, np.uint8), 1, 128 / 255),
    (np.full((5, 6), 3.5, np.float32), 1, 3.5),
])
def test_to_float_bands(array, bands, top):
    out = to_float_bands(array)
    assert out.dtype == np.float32
    assert out.shape == (5, 6, bands)
    assert out.max() == pytest.approx(top)


def test_png_and_16_bit_tiff_round_trip(tmp_path):
    pytest.importorskip("rasterio")
    rgb = np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8)
    iio.imwrite(tmp_path / "a.png", rgb)
    grey16 = (np.arange(600, dtype=np.uint16).reshape(20, 30) * 100)
    iio.imwrite(tmp_path / "b.tif", grey16)
    raster = load_image(tmp_path / "a.png")
    assert (raster.width, raster.height, raster.bands) == (30, 20, 3)
    np.testing.assert_allclose(raster.pixels * 255, rgb, atol=1e-3)
    raster16 = load_image(tmp_path / "b.tif")
    assert raster16.bands == 1
    assert raster16.pixels.max() == pytest.approx(59900 / 65535)
    window = raster.read_window(-3, 5, 25, 40)
    assert window.shape == (5, 5, 3)


def test_missing_and_corrupt_files_raise_clear_errors(tmp_path):
    with pytest.raises(ImageReadError, match="not found"):
        load_image(tmp_path / "nope.png")
    (tmp_path / "bad.png").write_bytes(b"this is not a png")
    with pytest.raises(ImageReadError, match=r"bad\.png is not an image this program can read"):
        load_image(tmp_path / "bad.png")
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ImageReadError, match="image file is empty"):
        load_image(tmp_path / "empty.png")
    (tmp_path / "empty.jpg").write_bytes(b"\xff\xd8\xff")  # a JPEG header, nothing else
    with pytest.raises(ImageReadError, match=r"empty\.jpg is not an image this program can read "
                                             r"\(PNG, JPEG, TIFF/GeoTIFF, …\)$"):
        load_image(tmp_path / "empty.jpg")


def test_an_image_whose_name_is_not_utf_8_is_one_clear_error(tmp_path):
    """rasterio hands GDAL file names in UTF-8: a name of other bytes cannot be opened."""
    pytest.importorskip("rasterio")
    iio.imwrite(tmp_path / "road.tif", np.zeros((8, 8, 3), np.uint8))
    name = os.fsdecode(os.fsencode(tmp_path / "r") + b"\xf6ad.tif")
    os.rename(tmp_path / "road.tif", name)
    with pytest.raises(ImageReadError) as error:
        load_image(name)
    assert str(error.value) == (f"cannot read {tmp_path}/r\\xf6ad.tif: its name is not UTF-8, "
                                "which GDAL needs to open it; rename the file")


def test_cmyk_jpeg_and_gif_read_as_rgb(tmp_path):
    from PIL import Image

    rgb = np.zeros((40, 50, 3), dtype=np.uint8)
    rgb[:, :25] = (200, 40, 30)
    rgb[:, 25:] = (20, 60, 180)
    Image.fromarray(rgb).convert("CMYK").save(tmp_path / "print.jpg", quality=95)
    # 4 bands C, M, Y, K would read K as alpha; the pixels come back as RGB instead.
    np.testing.assert_allclose(load_image(tmp_path / "print.jpg").pixels * 255, rgb, atol=12)
    Image.fromarray(rgb).save(tmp_path / "still.gif")  # one frame: an image
    np.testing.assert_allclose(load_image(tmp_path / "still.gif").pixels * 255, rgb, atol=12)
    frames = [Image.fromarray(rgb), Image.fromarray(rgb[::-1, ::-1].copy())]
    frames[0].save(tmp_path / "animated.gif", save_all=True, append_images=frames[1:])
    with pytest.raises(ImageReadError, match="image of 2 frames not supported"):
        load_image(tmp_path / "animated.gif")


def write_bands(path, planes, tags=None) -> None:
    """A TIFF of ``planes`` (bands, rows, cols) uint8, its bands tagged ``tags`` if given."""
    rasterio = pytest.importorskip("rasterio")
    from rasterio.errors import NotGeoreferencedWarning

    count, rows, cols = planes.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(path, "w", driver="GTiff", width=cols, height=rows, count=count,
                           dtype="uint8") as dataset:
            dataset.write(planes)
            if tags is not None:
                dataset.colorinterp = tags


def test_multispectral_tiff_bands(tmp_path):
    Tag = pytest.importorskip("rasterio.enums").ColorInterp  # noqa: N806 (a class)

    planes = np.stack([np.full((6, 7), 10 * band, np.uint8) for band in range(1, 7)])
    write_bands(tmp_path / "plain.tif", planes)
    write_bands(tmp_path / "tagged.tif", planes, [Tag.undefined, Tag.blue, Tag.green, Tag.red,
                                                   Tag.undefined, Tag.undefined])

    def band_values(raster):
        return (raster.read_window(0, 6, 0, 7) * 255).round().reshape(-1, raster.bands)[0]

    # Untagged: the first three bands; tagged: red, green, blue wherever they are.
    with load_image(tmp_path / "plain.tif") as raster:
        np.testing.assert_array_equal(band_values(raster), [10, 20, 30])
        assert raster.band_note == "bands 1, 2, 3 of 6"
    with load_image(tmp_path / "tagged.tif") as raster:
        np.testing.assert_array_equal(band_values(raster), [40, 30, 20])
        assert raster.band_note == "bands 4, 3, 2 of 6 (red, green, blue)"
    # Asked for: a false-colour composite, or one grey band.
    with load_image(tmp_path / "tagged.tif", bands=(6, 4, 3)) as raster:
        np.testing.assert_array_equal(band_values(raster), [60, 40, 30])
        assert raster.band_note == "bands 6, 4, 3 of 6"
    with load_image(tmp_path / "plain.tif", bands=[5]) as raster:
        np.testing.assert_array_equal(band_values(raster), [50])
        assert raster.band_note == "band 5 of 6"
    for wrong in ((7,), (1, 2), (0, 1, 2)):
        with pytest.raises(BadParameter, match="give 1 or 3 band numbers between 1 and 6"):
            load_image(tmp_path / "plain.tif", bands=wrong)
    # RGB tagged as such, and an RGBA one: as before, no note.
    write_bands(tmp_path / "rgba.tif", planes[:4], [Tag.red, Tag.green, Tag.blue, Tag.alpha])
    with load_image(tmp_path / "rgba.tif") as raster:
        np.testing.assert_array_equal(band_values(raster), [10, 20, 30])
        assert raster.band_note is None


def test_bands_of_a_png(tmp_path):
    rgb = np.zeros((5, 6, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 10, 20, 30
    iio.imwrite(tmp_path / "a.png", rgb)
    assert load_image(tmp_path / "a.png").band_note is None
    swapped = load_image(tmp_path / "a.png", bands=(3, 2, 1))
    np.testing.assert_allclose(swapped.pixels[0, 0] * 255, [30, 20, 10], atol=1e-3)
    assert swapped.band_note == "bands 3, 2, 1 of 3"
    with pytest.raises(BadParameter, match="between 1 and 3"):
        load_image(tmp_path / "a.png", bands=(4,))


@pytest.mark.parametrize("value", [1e200, -1e200, 1e30])
def test_float_pixels_beyond_range_are_refused(value):
    array = np.full((4, 5), 0.5)
    array[1, 2] = value
    message = f"pixel values reach {abs(value):.3g}; float images must stay within ±1e+15"
    with pytest.raises(ImageReadError, match=re.escape(message)):
        to_float_bands(array)


def test_float_pixels_nan_and_inf_read_as_zero():
    array = np.array([[np.nan, np.inf, -np.inf, 0.25]])
    np.testing.assert_array_equal(to_float_bands(array)[..., 0], [[0, 0, 0, 0.25]])


def test_float64_tiff_beyond_float32_is_refused(tmp_path):
    rasterio = pytest.importorskip("rasterio")
    from rasterio.errors import NotGeoreferencedWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(tmp_path / "f.tif", "w", driver="GTiff", width=6, height=5, count=1,
                           dtype="float64") as dataset:
            dataset.write(np.full((1, 5, 6), 1e200))
    with load_image(tmp_path / "f.tif") as raster, \
            pytest.raises(ImageReadError, match=r"pixel values reach 1e\+200"):
        raster.read_window(0, 5, 0, 6)


def test_an_image_over_the_memory_budget_is_refused_before_decoding(tmp_path, monkeypatch):
    """A 100 KiB PNG declaring 6000 × 6000 RGB: 103 MiB of 8-bit values, too large to read
    whole, so kept in its decoded type (3.3 times its values while decoding)."""
    iio.imwrite(tmp_path / "bomb.png", np.zeros((6000, 6000, 3), np.uint8))
    monkeypatch.setenv(BUDGET_VARIABLE, "100M")
    tracemalloc.start()
    try:
        with pytest.raises(BadParameter, match=(
                r"bomb.png: decoding its 6000×6000 px needs about 339.9 MiB, "
                r"over the 100.0 MiB it may use \(ROADTRACER_MEMORY_BUDGET=100M\): "
                r"convert it to a tiled GeoTIFF \(read window by window\), or free memory, "
                r"or give a larger --memory-budget$")):
            load_image(tmp_path / "bomb.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20  # its 103 MiB of 8-bit pixels were never decoded


@pytest.mark.parametrize(("budget", "fits"), [("20M", False), ("30M", True)])
def test_the_decode_estimate_follows_the_budget(tmp_path, monkeypatch, budget, fits):
    """2000 × 2000 grey: 15.3 MiB of float32 planes, estimated at 24.4 MiB to decode."""
    iio.imwrite(tmp_path / "grey.png", np.zeros((2000, 2000), np.uint8))
    monkeypatch.setenv(BUDGET_VARIABLE, budget)
    if fits:
        assert load_image(tmp_path / "grey.png").pixels.shape == (2000, 2000, 1)
    else:
        with pytest.raises(BadParameter, match="needs about 24.4 MiB, over the 20.0 MiB"):
            load_image(tmp_path / "grey.png")


def test_without_a_budget_decoding_may_take_most_of_the_memory_available(tmp_path,
                                                                           monkeypatch):
    """A camera-sized photograph (6000 × 4000 RGB: 439 MiB estimated) decodes with 850 MiB
    available, where a trace's own budget would be 425 MiB; with 400 MiB it is refused."""
    import core.resources

    iio.imwrite(tmp_path / "photo.jpg", np.zeros((4000, 6000, 3), np.uint8))
    monkeypatch.delenv(BUDGET_VARIABLE, raising=False)
    monkeypatch.setattr(core.resources, "available_memory", lambda: 850 * 2**20)
    assert load_image(tmp_path / "photo.jpg").width == 6000
    monkeypatch.setattr(core.resources, "available_memory", lambda: 400 * 2**20)
    with pytest.raises(BadParameter, match=r"needs about 439.5 MiB, over the 360.0 MiB it may "
                                           r"use \(90% of the 400.0 MiB available; set "
                                           r"ROADTRACER_MEMORY_BUDGET to change it\)"):
        load_image(tmp_path / "photo.jpg")


@pytest.mark.parametrize("dtype", ["complex_int16", "complex64"])
def test_complex_tiff_is_refused(tmp_path, dtype):
    from tests.test_georef import write_geotiff

    write_geotiff(tmp_path / "c.tif", np.zeros((5, 6, 1), np.complex64), dtype=dtype)
    with pytest.raises(ImageReadError, match=f"c.tif: unsupported pixel type {dtype}$"):
        load_image(tmp_path / "c.tif")


def image_grid(tmp_path):
    """A 40 × 30 px GeoTIFF in UTM 54N (``tests.test_georef.TRANSFORM``): its grid."""
    from tests.test_georef import write_geotiff

    write_geotiff(tmp_path / "image.tif", np.full((30, 40, 1), 100, np.uint8))
    with load_image(tmp_path / "image.tif") as image:
        return image.georef, image.width, image.height


def test_evidence_in_a_crs_gdal_cannot_reach_is_a_georef_error(tmp_path, capfd):
    from rasterio.crs import CRS

    from tests.test_georef import write_geotiff

    local = CRS.from_wkt('LOCAL_CS["site grid",LOCAL_DATUM["site",0],UNIT["metre",1],'
                         'AXIS["X",EAST],AXIS["Y",NORTH]]')
    write_geotiff(tmp_path / "local.tif", np.ones((20, 20, 1), np.float32), crs=local)
    with pytest.raises(GeorefError, match=r"^cannot resample the evidence raster .*local\.tif "
                       r"\('site grid'\) onto the image's grid \(EPSG:32654 \(WGS 84 / UTM "
                       r"zone 54N\), GeoTIFF\): "
                       r"Cannot find coordinate operations from \(a CRS\) to 'EPSG:32654'$"):
        load_image(tmp_path / "local.tif", grid=image_grid(tmp_path))
    assert capfd.readouterr().err == ""  # no GDAL "ERROR 6: …" dump


@pytest.mark.parametrize(("east", "covers"), [(0.0, True), (5.0, True), (1000.0, False)])
def test_evidence_that_does_not_cover_the_image_is_a_georef_error(tmp_path, east, covers):
    from affine import Affine

    from tests.test_georef import TRANSFORM, write_geotiff

    evidence = np.zeros((30, 40, 1), np.float32)  # zeros: coverage is not read from values
    write_geotiff(tmp_path / "e.tif", evidence, transform=Affine.translation(east, 0) @ TRANSFORM)
    grid = image_grid(tmp_path)
    if covers:  # all of it, or its western 15 columns not
        with load_image(tmp_path / "e.tif", grid=grid) as raster:
            assert raster.read_window(0, 30, 0, 40).shape == (30, 40, 1)
    else:
        with pytest.raises(GeorefError, match=r"e\.tif \(EPSG:32654 \(WGS 84 / UTM zone "
                                              r"54N\)\) does not cover the image"):
            load_image(tmp_path / "e.tif", grid=grid)


def test_an_aux_xml_that_is_a_fifo_is_not_opened(tmp_path):
    from tests.test_georef import write_geotiff

    write_geotiff(tmp_path / "fifo.tif", np.full((30, 40, 1), 100, np.uint8), transform=None)
    os.mkfifo(tmp_path / "fifo.tif.aux.xml")  # opening it for reading blocks until a writer
    script = ("from core.raster import load_image\n"
              f"with load_image({str(tmp_path / 'fifo.tif')!r}) as raster:\n"
              "    print(raster.width, raster.height)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "40 30\n", "")


def test_pixels_equal_to_the_nodata_value_read_as_zero(tmp_path):
    from tests.test_georef import write_geotiff

    nodata = float(np.finfo(np.float32).min)  # -3.4028235e38, a common GDAL nodata
    array = np.full((30, 40, 1), 0.5, np.float32)
    array[:, :10] = nodata
    write_geotiff(tmp_path / "f.tif", array, nodata=nodata)
    with load_image(tmp_path / "f.tif") as raster:
        window = raster.read_window(0, 30, 5, 15)[..., 0]
        np.testing.assert_array_equal(window, np.where(np.arange(5, 15) < 10, 0, 0.5)[None]
                                      .repeat(30, 0))
        assert raster.overview(20).max() == 0.5


def test_nodata_is_a_pixel_whose_every_band_holds_it(tmp_path):
    """In colour bands with nodata 255, a bright road pixel (255, 240, 230) is a pixel."""
    from tests.test_georef import write_geotiff

    array = np.full((20, 20, 3), 100, np.uint8)
    array[:, :5] = 255  # no data
    array[:, 5:10] = (255, 240, 230)  # bright, valid
    write_geotiff(tmp_path / "rgb.tif", array, nodata=255)
    with load_image(tmp_path / "rgb.tif") as raster:
        pixels = raster.read_window(0, 20, 0, 20)
    np.testing.assert_array_equal(pixels[:, :5], 0)
    np.testing.assert_allclose(pixels[0, 7], np.array([255, 240, 230]) / 255)
    np.testing.assert_allclose(pixels[0, 15], 100 / 255)


def test_a_colour_mapped_geotiff_is_read_as_its_colours(tmp_path):
    """A palette GeoTIFF's band holds indices into its colour table: traced as the colours."""
    rasterio = pytest.importorskip("rasterio")
    indices = np.zeros((40, 50), np.uint8)
    indices[:, 25:] = 1
    indices[10:20, :] = 2
    path = tmp_path / "palette.tif"
    with rasterio.open(path, "w", driver="GTiff", height=40, width=50, count=1,
                       dtype="uint8") as dataset:
        dataset.write(indices, 1)
        dataset.write_colormap(1, {0: (255, 0, 0, 255), 1: (0, 0, 255, 255),
                                   2: (0, 128, 0, 255)})
    with load_image(path) as raster:
        assert raster.bands == 3
        assert raster.band_note == "band 1 through its colour table"
        np.testing.assert_allclose(raster.read_window(0, 1, 24, 26)[0],
                                   [[1, 0, 0], [0, 0, 1]])
        np.testing.assert_allclose(raster.read_window(12, 13, 0, 1)[0, 0], [0, 128 / 255, 0])
        assert raster.overview(10).shape == (8, 10, 3)
