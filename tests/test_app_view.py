"""The canvas's view of the image and the lines: fit on resize, sharp tiles of huge rasters,
the contrast stretch, and how lines are drawn (offscreen, pytest-qt)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QImage, QPainter

from app.canvas import Canvas, LineItem
from app.display import display_pyramid, load_for_display, stretch_limits
from app.model import Line, Segment
from core.tracer import TraceParams
from tests.conftest import shown_canvas

#: A GeoTIFF too large to read whole (core.raster.FULL_READ_LIMIT): its sharpest display
#: level is at half resolution.
HUGE_SHAPE = (4000, 9000)


@pytest.fixture
def canvas(qtbot):
    """A shown 800 × 600 canvas with no image."""
    return shown_canvas(qtbot)


@pytest.fixture(scope="module")
def huge_tiff(tmp_path_factory):
    """A 9000 × 4000 tiled GeoTIFF whose columns alternate by 100 grey values (a fine pattern
    seen only at full resolution) over a gradient down the rows."""
    rasterio = pytest.importorskip("rasterio")
    from rasterio.windows import Window

    path = tmp_path_factory.mktemp("huge") / "columns.tif"
    rows, cols = HUGE_SHAPE
    columns = (np.arange(cols) % 2 * 100).astype(np.uint8)
    with rasterio.open(path, "w", driver="GTiff", width=cols, height=rows, count=1,
                       dtype="uint8", tiled=True, blockxsize=512, blockysize=512,
                       compress="deflate", crs="EPSG:32654",
                       transform=rasterio.Affine(1, 0, 500_000, 0, -1, 4_000_000)) as f:
        for row0 in range(0, rows, 512):
            gradient = 50 + np.arange(row0, min(row0 + 512, rows)) * 100 // rows
            f.write(columns[None, :] + gradient.astype(np.uint8)[:, None], 1,
                    window=Window(0, row0, cols, len(gradient)))
    return path


def scene_centre(view: Canvas) -> tuple[float, float]:
    centre = view.mapToScene(view.viewport().rect().center())
    return centre.x(), centre.y()


def fitted_scale(view: Canvas, width: float, height: float) -> float:
    """The scale at which the image of ``width`` × ``height`` px fits the viewport."""
    viewport = view.viewport().rect()
    return min((viewport.width() - 4) / width, (viewport.height() - 4) / height)  # Qt's margin


def test_a_resize_keeps_the_image_fitted_until_a_zoom_then_keeps_the_centre(canvas):
    canvas.set_image(display_pyramid(np.random.default_rng(0).random((300, 400, 1),
                                                                       np.float32)))
    for size in ((1400, 1000), (500, 300)):  # maximised, then shrunk
        canvas.resize(*size)
        assert canvas.transform().m11() == pytest.approx(fitted_scale(canvas, 400, 300))
        assert scene_centre(canvas) == pytest.approx((199.5, 149.5), abs=1.5)
    canvas.zoom(3.0)
    canvas.centerOn(QPointF(100, 80))
    scale = canvas.transform().m11()
    canvas.resize(1200, 900)
    assert canvas.transform().m11() == scale
    assert scene_centre(canvas) == pytest.approx((100, 80), abs=1.0)
    canvas.fit()  # F: fitted again, and kept so
    canvas.resize(700, 700)
    assert canvas.transform().m11() == pytest.approx(fitted_scale(canvas, 400, 300))


def grey_row(view: Canvas, y: int, x0: int, x1: int) -> list[int]:
    """The grey values of the rendered viewport's row ``y``, columns ``x0:x1``."""
    view.viewport().repaint()
    image = view.viewport().grab().toImage()
    return [image.pixelColor(x, y).red() for x in range(x0, x1)]


def wait_for_tile(qtbot, view: Canvas) -> None:
    qtbot.waitUntil(lambda: view._tile_request is None, timeout=30_000)


def test_zoomed_in_a_huge_raster_shows_full_resolution_read_in_a_tile(canvas, qtbot,
                                                                       huge_tiff):
    raster, pyramid = load_for_display(str(huge_tiff))
    assert pyramid[0].factor == 2
    assert pyramid.source is raster
    canvas.set_image(pyramid)
    canvas.zoom(1.0 / canvas.transform().m11())  # 1:1
    canvas.centerOn(QPointF(4500, 2000))
    x, y = canvas.mapFromScene(QPointF(4500, 2000)).toTuple()
    coarse = grey_row(canvas, y, x - 10, x + 10)  # the half-resolution level, until the tile
    assert len(set(coarse)) == 1
    wait_for_tile(qtbot, canvas)
    tile = canvas._raster_item.tile
    assert tile.window.factor == 1
    assert tile.window.covers(canvas._tile_window(0.0))
    sharp = np.array(grey_row(canvas, y, x - 10, x + 10))
    assert np.all(np.abs(np.diff(sharp)) >= 100), sharp  # every column differs from the next
    # Fitted again the pyramid is sharp enough: the tile's memory is given back.
    canvas.fit()
    canvas.viewport().repaint()
    assert canvas._raster_item.tile is None
    assert canvas._tile_request is None
    raster.close()


def test_a_tile_read_the_view_has_left_is_cancelled(canvas, qtbot, huge_tiff):
    raster, pyramid = load_for_display(str(huge_tiff))
    canvas.set_image(pyramid)
    canvas.zoom(1.0 / canvas.transform().m11())
    canvas.centerOn(QPointF(1000, 1000))
    canvas.viewport().repaint()
    left, cancelled = canvas._tile_request
    canvas.centerOn(QPointF(8000, 3000))
    canvas.viewport().repaint()
    assert cancelled.is_set()
    wait_for_tile(qtbot, canvas)
    window = canvas._raster_item.tile.window
    assert window != left
    assert window.covers(canvas._tile_window(0.0))
    raster.close()


def test_the_stretch_leaves_out_pixels_that_are_zero_in_every_band():
    rng = np.random.default_rng(3)
    pixels = rng.uniform(0.3, 0.9, (400, 500, 3)).astype(np.float32)
    pixels[:150] = 0  # no data, NaN or transparent: read as 0 in every band
    pixels[200:, 100, 1] = 0  # 0 in one band only: valid
    low, high = stretch_limits(pixels)
    valid = pixels[150:].reshape(-1, 3)
    expected = np.percentile(valid, (1.0, 99.0), axis=0).astype(np.float32)
    np.testing.assert_array_equal(low, expected[0])
    np.testing.assert_allclose(high, expected[1], rtol=1e-6)  # low + (high - low) in float32
    low, high = stretch_limits(np.zeros((10, 10, 1), np.float32))  # nothing valid: black
    assert low[0] == 0
    assert 0 < high[0] < 1e-5


def traced(y: float) -> Segment:
    """A traced (not straight) horizontal segment from x = 20 to x = 180 at height ``y``."""
    polyline = np.column_stack([np.linspace(20, 180, 9), np.full(9, y)])
    return Segment(polyline, np.linspace(0, 1, 8), 1.0, TraceParams(), TraceParams(), "cpu")


def rendered(kind: str, selected: bool, colour_by_score: bool) -> QImage:
    """A line of ``kind`` at y = 50.5 painted alone on mid-grey, 1 screen px per pixel."""
    segment = traced(50.5)
    item = LineItem(Line(1, "line", kind, ((20.0, 50.5), (180.0, 50.5)), (segment,)),
                    colour_by_score)
    item.set_selection(selected)
    image = QImage(200, 100, QImage.Format.Format_RGB32)
    image.fill(QColor(128, 128, 128))
    painter = QPainter(image)
    item.paint(painter, None)
    painter.end()
    return image


@pytest.mark.parametrize("colour_by_score", [True, False])
def test_rivers_are_edged_apart_from_roads_and_the_selection_has_a_halo(qtbot,
                                                                        colour_by_score):
    road, river = (rendered(kind, False, colour_by_score) for kind in ("road", "river"))
    edge_row = 48  # 2.5 px from the middle: outside the stroke, on its edge
    assert road.pixelColor(100, edge_row) == QColor(0, 0, 0)
    assert river.pixelColor(100, edge_row) == QColor(0, 80, 255)
    halo_row = 45  # 5.5 px from the middle: on the selected line's white halo
    assert road.pixelColor(100, halo_row) == QColor(128, 128, 128)
    for kind in ("road", "river"):
        assert rendered(kind, True, colour_by_score).pixelColor(100, halo_row) == \
            QColor(255, 255, 255)
