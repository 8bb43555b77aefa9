"""Windows read at a reduced size (``read_window(..., step)``): block means, in memory and
through GDAL, and the display tiles read with them."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import tracemalloc

import numpy as np
import pytest

from app.display import DisplayPyramid, TileWindow, read_tile
from core.errors import BadParameter
from core.raster import Raster, load_image

rasterio = pytest.importorskip("rasterio")


def block_means(pixels: np.ndarray, row0: int, row1: int, col0: int, col1: int,
                step: int) -> np.ndarray:
    """The means of the ``step`` × ``step`` blocks of ``pixels[row0:row1, col0:col1]`` (rows,
    cols, bands), the last blocks of each axis shorter where the window is: float64."""
    return np.array([[pixels[top:min(top + step, row1), left:min(left + step, col1)]
                      .mean(axis=(0, 1)) for left in range(col0, col1, step)]
                     for top in range(row0, row1, step)])


def write_tiff(path, bands: np.ndarray, **profile) -> None:
    """Write ``bands`` (count, rows, cols) as a GeoTIFF."""
    count, rows, cols = bands.shape
    with rasterio.open(path, "w", driver="GTiff", width=cols, height=rows, count=count,
                       dtype=bands.dtype, **profile) as f:
        f.write(bands)


def test_a_window_read_with_a_step_gives_the_mean_of_each_block():
    pixels = np.random.default_rng(0).random((10, 13, 2), np.float32)
    raster = Raster(pixels)
    window = raster.read_window(-2, 9, 1, 20, step=4)  # clipped to rows 0:9, columns 1:13
    assert window.shape == (3, 3, 2)
    assert window.dtype == np.float32
    np.testing.assert_allclose(window, block_means(pixels, 0, 9, 1, 13, 4), rtol=1e-6)
    assert np.shares_memory(raster.read_window(2, 5, 3, 8), pixels)  # step 1: the window itself
    assert raster.read_window(12, 20, 0, 13, step=4).shape == (0, 4, 2)
    with pytest.raises(BadParameter, match="positive integer"):
        raster.read_window(0, 5, 0, 5, step=0)


@pytest.mark.parametrize("window", [(-2, 21, 3, 40, 4), (0, 23, 0, 29, 5), (5, 6, 0, 29, 3)])
def test_a_tiff_read_with_a_step_gives_the_block_means_of_the_image_in_memory(tmp_path,
                                                                              window):
    bands = np.random.default_rng(1).random((3, 23, 29), np.float32)
    write_tiff(tmp_path / "float.tif", bands)
    in_memory = Raster(np.moveaxis(bands, 0, -1).copy())
    with load_image(tmp_path / "float.tif") as raster:
        read = raster.read_window(*window[:4], step=window[4])
    assert read.dtype == np.float32
    np.testing.assert_allclose(read, in_memory.read_window(*window[:4], step=window[4]),
                               rtol=1e-6)


def test_an_8_bit_tiff_read_with_a_step_gives_the_rounded_block_means(tmp_path):
    values = np.random.default_rng(2).integers(0, 256, (1, 70, 90), dtype=np.uint8)
    write_tiff(tmp_path / "grey.tif", values, tiled=True, blockxsize=32, blockysize=32)
    with load_image(tmp_path / "grey.tif") as raster:
        read = raster.read_window(3, 70, 5, 88, step=6)
    expected = np.floor(block_means(np.moveaxis(values, 0, -1), 3, 70, 5, 88, 6) + 0.5)
    np.testing.assert_array_equal((read * 255).round(), expected)


def test_a_tiff_read_with_a_step_leaves_out_nodata_and_transparent_pixels(tmp_path):
    grey = np.full((1, 4, 4), 100, np.uint8)
    grey[0, 0, :2] = 7  # nodata: half of the first block, and all of the window (0:1, 0:2)
    write_tiff(tmp_path / "nodata.tif", grey, nodata=7)
    with load_image(tmp_path / "nodata.tif") as raster:
        np.testing.assert_array_equal((raster.read_window(0, 4, 0, 4, step=2) * 255).round(),
                                      np.full((2, 2, 1), 100))
        assert raster.read_window(0, 1, 0, 2, step=2)[0, 0, 0] == 0  # nodata reads as 0
    rgba = np.full((4, 2, 2), 255, np.uint8)
    rgba[0] = [[0, 60], [0, 60]]
    rgba[3, 0, 0] = 0  # transparent: the block's red is the mean of 60, 0 and 60
    write_tiff(tmp_path / "alpha.tif", rgba, photometric="RGB", alpha="YES")
    with load_image(tmp_path / "alpha.tif") as raster:
        np.testing.assert_array_equal((raster.read_window(0, 2, 0, 2, step=2) * 255).round(),
                                      [[[40, 255, 255]]])


def test_a_colour_mapped_tiff_read_with_a_step_shows_a_colour_of_its_table(tmp_path):
    indices = np.zeros((1, 4, 4), np.uint8)
    indices[0, :, 1::2] = 1  # black and white columns: averaged indices would show either
    write_tiff(tmp_path / "palette.tif", indices, photometric="palette")
    with rasterio.open(tmp_path / "palette.tif", "r+") as f:
        f.write_colormap(1, {0: (0, 0, 0, 255), 1: (250, 250, 250, 255),
                             2: (120, 120, 120, 255)})
    with load_image(tmp_path / "palette.tif") as raster:
        read = (raster.read_window(0, 4, 0, 4, step=2) * 255).round()
    np.testing.assert_array_equal(read, np.full((2, 2, 3), 120))  # nearest to the mean, 125


@pytest.fixture(scope="module")
def columns_tiff(tmp_path_factory):
    """A 1100 × 2100 tiled GeoTIFF whose columns alternate between 0 and 100 over a row
    gradient: every block of an even width averages to 50 more than its rows' gradient.

    Returns (path, values of shape (rows, cols, 1), uint8)."""
    rows, cols = 1100, 2100
    values = ((np.arange(cols) % 2 * 100)[None, :] + np.arange(rows)[:, None] * 100 // rows
              ).astype(np.uint8)
    path = tmp_path_factory.mktemp("tiles") / "columns.tif"
    write_tiff(path, values[None], tiled=True, blockxsize=256, blockysize=256)
    return path, values[:, :, None]


def tile_of(raster: Raster, window: TileWindow):
    """``read_tile`` of ``window`` of a grey ``raster``, stretched from 0 (black) to 1."""
    pyramid = DisplayPyramid((), np.zeros(1, np.float32), np.ones(1, np.float32), raster)
    return read_tile(pyramid, window, lambda: False)


def test_a_tile_below_full_resolution_shows_the_mean_of_each_block(columns_tiff):
    path, values = columns_tiff
    window = TileWindow(4, 1100, 8, 2091, 4)  # bands of 512 rows; shorter last blocks
    with load_image(path) as raster:
        tile = tile_of(raster, window)
    grey = np.floor(block_means(values, 4, 1100, 8, 2091, 4)[:, :, 0] + 0.5).astype(np.uint32)
    assert tile.window == window
    assert tile.level.factor == 4
    np.testing.assert_array_equal(tile.level.array, grey * 0x010101 | 0xFF000000)


def test_a_tile_below_full_resolution_is_read_at_its_own_size(columns_tiff):
    path, _ = columns_tiff
    with load_image(path) as raster:
        tracemalloc.start()
        try:
            tile = tile_of(raster, TileWindow(0, 1024, 0, 2048, 4))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert tile.level.array.shape == (256, 512)
    # Less than one band of 512 rows read at full resolution as float32 (4 MiB) would take:
    # about 1.5 MiB, the tile's 0.5 MiB included (9.6 MiB read whole and thinned out).
    assert peak < 512 * 2048 * 4
