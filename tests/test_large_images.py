"""Large images: the overview read in bands of rows (progress, cancellation, the file's own
overviews, GDAL's block cache held small) and PNGs too large to read whole held in their
decoded type; every value read stays what the whole-image reads give."""

import shutil

import numpy as np
import pytest

import core.raster as raster_module
from core.raster import (
    DecodedRaster,
    Raster,
    ReadCancelled,
    WindowedRaster,
    bands_last_float,
    keeps_decoded,
    load_image,
    to_float_bands,
)
from core.resources import KEPT_DECODE_FACTOR, decode_memory

rasterio = pytest.importorskip("rasterio")

ROWS, COLS = 601, 587  # no multiple of the blocks or of the steps


def write_tiff(path, dtype="uint8", count=3, tiled=True, nodata=None, seed=0):
    """A random-valued GeoTIFF of ROWS × COLS px (random: any pixel picked wrongly shows)."""
    top = np.iinfo(dtype).max
    data = np.random.default_rng(seed).integers(0, top + 1, (count, ROWS, COLS)).astype(dtype)
    blocks = {"tiled": True, "blockxsize": 64, "blockysize": 64} if tiled else {}
    with rasterio.open(path, "w", driver="GTiff", width=COLS, height=ROWS, count=count,
                       dtype=dtype, crs="EPSG:32654", nodata=nodata,
                       transform=rasterio.Affine(1, 0, 500_000, 0, -1, 4_000_000),
                       compress="deflate", **blocks) as file:
        file.write(data)
    return path


@pytest.fixture(params=["rgb8", "grey16", "stripped", "nodata"])
def tiff(request, tmp_path):
    kind = request.param
    return write_tiff(tmp_path / f"{kind}.tif", dtype="uint16" if kind == "grey16" else "uint8",
                      count=1 if kind == "grey16" else 3, tiled=kind != "stripped",
                      nodata=7 if kind == "nodata" else None)


def one_shot(raster: WindowedRaster, step: int) -> np.ndarray:
    """The whole image read by GDAL at once at the overview's size (the read it replaces)."""
    return raster._read(None, (-(-raster.height // step), -(-raster.width // step)))


@pytest.mark.parametrize("max_size", [40, 150, 200, 300, 600])
def test_the_overview_read_in_bands_equals_the_one_shot_read(tiff, max_size, monkeypatch):
    monkeypatch.setattr(raster_module, "OVERVIEW_BAND_ROWS", 64)  # many bands
    with load_image(tiff) as raster:
        step = raster.overview_step(max_size)
        assert step == -(-ROWS // max_size)  # no overviews: the plain step
        overview = raster.overview(max_size)
        expected = one_shot(raster, step)
        assert overview.shape == expected.shape
        assert overview.dtype == np.float32
        assert overview.flags.c_contiguous
        np.testing.assert_array_equal(overview, expected)


def test_progress_rises_to_one(tmp_path, monkeypatch):
    monkeypatch.setattr(raster_module, "OVERVIEW_BAND_ROWS", 64)
    fractions = []
    with load_image(write_tiff(tmp_path / "a.tif")) as raster:
        raster.overview(200, progress=fractions.append)
    assert len(fractions) >= 5
    assert fractions == sorted(fractions)
    assert fractions[0] > 0
    assert fractions[-1] == 1.0


def test_a_cancelled_overview_read_stops_with_read_cancelled(tmp_path, monkeypatch):
    monkeypatch.setattr(raster_module, "OVERVIEW_BAND_ROWS", 64)
    fractions = []
    with load_image(write_tiff(tmp_path / "a.tif")) as raster:
        with pytest.raises(ReadCancelled):
            raster.overview(200, progress=fractions.append, cancelled=lambda: bool(fractions))
        assert len(fractions) == 1  # stopped after the first band
        with pytest.raises(ReadCancelled):
            raster.overview(200, cancelled=lambda: True)
        raster.read_window(0, 10, 0, 10)  # the raster still reads


def test_the_display_load_passes_progress_and_cancellation_on(tmp_path, monkeypatch):
    pytest.importorskip("PySide6")
    import app.display

    monkeypatch.setattr(raster_module, "OVERVIEW_BAND_ROWS", 64)
    monkeypatch.setattr(app.display, "FULL_READ_LIMIT", 1000)  # shown from an overview
    monkeypatch.setattr(app.display, "OVERVIEW_SIZE", 200)
    path = str(write_tiff(tmp_path / "a.tif"))
    fractions = []
    raster, pyramid = app.display.load_for_display(path, progress=fractions.append)
    raster.close()
    assert fractions[-1] == 1.0
    assert pyramid[0].factor == 4
    assert pyramid.source is raster
    with pytest.raises(ReadCancelled):
        app.display.load_for_display(path, cancelled=lambda: True)


def test_the_overview_uses_the_files_own_overviews(tmp_path):
    path = write_tiff(tmp_path / "plain.tif")
    copy = shutil.copy(path, tmp_path / "overviews.tif")
    with rasterio.open(copy, "r+") as file:
        file.build_overviews([2, 4], rasterio.enums.Resampling.average)
    with load_image(copy) as raster, load_image(path) as plain:
        assert raster.overview_step(250) == 4  # 3 rounded up to the overview level
        assert plain.overview_step(250) == 3
        assert raster.overview_step(40) == 16  # no level that coarse: the plain step
        overview = raster.overview(250)
        with rasterio.open(copy, overview_level=1) as level:  # factor 4
            np.testing.assert_array_equal(overview, to_float_bands(np.moveaxis(level.read(),
                                                                               0, -1)))
        np.testing.assert_array_equal(overview, one_shot(raster, 4))
        # A step without its level is sampled from the coarsest finer one, as GDAL does.
        np.testing.assert_array_equal(raster.overview(40), one_shot(raster, 16))
        # Windows are read at full resolution still.
        np.testing.assert_array_equal(raster.read_window(5, 300, 9, 400),
                                      plain.read_window(5, 300, 9, 400))


def test_windows_and_pixels_are_c_ordered_float32(tiff):
    with load_image(tiff) as raster:
        for pixels in (raster.read_window(3, 200, 5, 300), raster.read_window(0, 99, 0, 98, 3),
                       raster.pixels, raster.overview(100)):
            assert pixels.dtype == np.float32
            assert pixels.flags.c_contiguous


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
def test_bands_last_float_converts_as_to_float_bands(dtype):
    data = (np.random.default_rng(1).random((3, 40, 50)) * 300).astype(dtype)
    expected = to_float_bands(np.moveaxis(data, 0, -1))
    for out in (None, np.empty((40, 50, 3), np.float32)):
        result = bands_last_float(data, out=out)
        assert result.dtype == np.float32
        assert result.flags.c_contiguous
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "I;16"])
def test_a_png_held_in_its_decoded_type_reads_the_same_values(tmp_path, mode, monkeypatch):
    from PIL import Image

    rng = np.random.default_rng(2)
    shape = {"RGB": (203, 251, 3), "RGBA": (203, 251, 4), "L": (203, 251),
             "I;16": (203, 251)}[mode]
    values = rng.integers(0, 65536 if mode == "I;16" else 256, shape)
    path = tmp_path / "a.png"
    image = Image.fromarray(values.astype(np.uint16 if mode == "I;16" else np.uint8))
    assert image.mode == mode
    image.save(path)
    whole = load_image(path)
    assert type(whole) is Raster
    monkeypatch.setattr(raster_module, "FULL_READ_LIMIT", 0)
    monkeypatch.setattr(raster_module, "KEEP_DECODED_BYTES", 0)
    monkeypatch.setattr(raster_module, "DECODED_OVERVIEW_ROWS", 16)  # overviews in bands
    kept = load_image(path)
    assert isinstance(kept, DecodedRaster)
    assert kept._decoded.dtype.itemsize <= 2
    assert (kept.height, kept.width, kept.bands) == whole.pixels.shape
    windows = [(0, 203, 0, 251, step) for step in (1, 2, 3, 7)] + \
        [(5, 150, 17, 200, 1), (-4, 60, 240, 260, 3), (100, 203, 0, 251, 4)]
    for window in windows:
        read = kept.read_window(*window)
        assert read.dtype == np.float32
        assert read.flags.c_contiguous
        np.testing.assert_array_equal(read, whole.read_window(*window))
    for size in (30, 100, 1000):
        np.testing.assert_array_equal(kept.overview(size), whole.overview(size))
    np.testing.assert_array_equal(kept.pixels, whole.pixels)  # converted whole on demand
    np.testing.assert_array_equal(kept.read_window(5, 150, 17, 200, 3),
                                  whole.read_window(5, 150, 17, 200, 3))


def test_which_images_are_held_in_their_decoded_type():
    assert keeps_decoded(16000, 16000, 3, np.uint8)
    assert keeps_decoded(16000, 16000, 3, np.uint16)
    assert not keeps_decoded(16000, 16000, 3, np.float32)
    assert not keeps_decoded(16000, 16000, 3, np.int32)  # no smaller than float32
    assert not keeps_decoded(4000, 4000, 3, np.uint8)  # read whole as float32
    # The memory check counts what is kept: the decoded values, not float32 planes.
    assert decode_memory(16000, 16000, 3, kept_bytes=1) == KEPT_DECODE_FACTOR * 16000 ** 2 * 3
    assert decode_memory(16000, 16000, 3, kept_bytes=1) < 0.6 * decode_memory(16000, 16000, 3)


def test_gdals_block_cache_is_held_small_while_the_overview_reads(tmp_path):
    from rasterio.env import get_gdal_config

    before = get_gdal_config("GDAL_CACHEMAX")
    during = []
    with load_image(write_tiff(tmp_path / "a.tif")) as raster:
        raster.overview(200, progress=lambda _: during.append(get_gdal_config("GDAL_CACHEMAX")))
    assert set(during) == {raster_module.OVERVIEW_CACHE_BYTES}
    assert get_gdal_config("GDAL_CACHEMAX") == before


def test_a_trace_on_a_png_held_in_its_decoded_type_is_the_same(monkeypatch):
    import json
    from pathlib import Path

    from core.tracer import trace

    sample = Path(__file__).parent.parent / "resources" / "sample"
    case = json.loads((sample / "gsi_108_cases.json").read_text())[0]
    whole = load_image(sample / "gsi_108.png")
    monkeypatch.setattr(raster_module, "FULL_READ_LIMIT", 0)
    monkeypatch.setattr(raster_module, "KEEP_DECODED_BYTES", 0)
    kept = load_image(sample / "gsi_108.png")
    assert isinstance(kept, DecodedRaster)
    expected, result = trace(whole, case["a"], case["b"]), trace(kept, case["a"], case["b"])
    np.testing.assert_array_equal(result.polyline, expected.polyline)
    np.testing.assert_array_equal(result.link_scores, expected.link_scores)
    assert result.score == expected.score


@pytest.fixture
def shown_from_overview(monkeypatch):
    """Images shown from an overview of at most 200 px, read in bands of 64 rows."""
    pytest.importorskip("PySide6")
    import app.display

    monkeypatch.setattr(raster_module, "OVERVIEW_BAND_ROWS", 64)
    monkeypatch.setattr(app.display, "FULL_READ_LIMIT", 1000)
    monkeypatch.setattr(app.display, "OVERVIEW_SIZE", 200)


make_window = pytest.importorskip("tests.test_app").make_window  # closes windows, stops workers


def test_the_window_shows_how_much_of_the_image_an_open_has_read(
        shown_from_overview, make_window, qtbot, tmp_path):
    from tests.helpers import open_and_wait

    path = write_tiff(tmp_path / "a.tif")
    window = make_window(open_sample=False)
    shown = []
    window.statusBar().messageChanged.connect(shown.append)
    open_and_wait(qtbot, window, path)
    progress = [text for text in shown if text.startswith("opening a.tif… ")]
    assert len(progress) >= 5
    assert progress[-1] == "opening a.tif… 100%"
    assert window.messages[-1][1] != progress[-1]  # not one message a band in the log


def test_an_open_superseded_while_it_reads_stops_reading(
        shown_from_overview, make_window, qtbot, tmp_path, monkeypatch):
    import threading

    import app.main_window
    from tests.conftest import SAMPLE_IMAGE

    real_load, go, outcomes = app.main_window.load_for_display, threading.Event(), []

    def load_for_display(path, progress, cancelled):
        def held(fraction):  # the first band read, the load waits for the test
            progress(fraction)
            assert go.wait(30)

        try:
            result = real_load(path, progress=held, cancelled=cancelled)
        except ReadCancelled:
            outcomes.append("cancelled")
            raise
        outcomes.append("read")
        return result

    monkeypatch.setattr(app.main_window, "load_for_display", load_for_display)
    window = make_window(open_sample=False)
    big = str(write_tiff(tmp_path / "big.tif"))
    assert window.open_image(big)
    qtbot.waitUntil(lambda: window.status_text.startswith("opening big.tif… "), timeout=30_000)
    assert window.open_image(str(SAMPLE_IMAGE))  # supersedes it: its next band stops
    go.set()
    qtbot.waitUntil(lambda: window.image_path == str(SAMPLE_IMAGE), timeout=60_000)
    assert outcomes == ["cancelled", "read"]


def test_opening_a_file_without_overviews_says_how_to_build_them(
        shown_from_overview, make_window, qtbot, tmp_path):
    from app.main_window import NO_OVERVIEWS_NOTE
    from tests.helpers import open_and_wait

    plain = write_tiff(tmp_path / "plain.tif")
    with_overviews = shutil.copy(plain, tmp_path / "overviews.tif")
    with rasterio.open(with_overviews, "r+") as file:
        file.build_overviews([2, 4], rasterio.enums.Resampling.average)
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, plain)
    assert window.raster.overview_factors() == []
    assert NO_OVERVIEWS_NOTE in window.status_text
    open_and_wait(qtbot, window, with_overviews)
    assert window.raster.overview_factors() == [2, 4]
    assert window.status_text.startswith("opened overviews.tif")
    assert NO_OVERVIEWS_NOTE not in window.status_text
    from tests.conftest import SAMPLE_IMAGE

    with load_image(SAMPLE_IMAGE) as raster:  # held in memory: no file overviews to speak of
        assert raster.overview_factors() is None


def test_a_png_converted_whole_lets_its_decoded_values_go(tmp_path, monkeypatch):
    """Once ``pixels`` is asked for (a mask read whole), the floats serve every read and the
    decoded values are not held beside them."""
    import imageio.v3 as iio

    monkeypatch.setattr(raster_module, "FULL_READ_LIMIT", 100)
    monkeypatch.setattr(raster_module, "KEEP_DECODED_BYTES", 100)
    values = np.random.default_rng(3).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    iio.imwrite(tmp_path / "a.png", values)
    with load_image(tmp_path / "a.png") as raster:
        assert isinstance(raster, DecodedRaster)
        window, overview = raster.read_window(3, 30, 5, 45, 2), raster.overview(20)
        pixels = raster.pixels
        assert raster._decoded is None
        np.testing.assert_array_equal(pixels, to_float_bands(values))
        np.testing.assert_array_equal(raster.read_window(3, 30, 5, 45, 2), window)
        np.testing.assert_array_equal(raster.overview(20), overview)
        assert (raster.height, raster.width, raster.bands) == (40, 50, 3)
