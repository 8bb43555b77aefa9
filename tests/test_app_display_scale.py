"""How the canvas shows scores and scales: score colours told apart with red-green colour
blindness, a line's colours not stretched over tiny score differences, and line widths, the
pyramid level and sharp tiles at a device pixel ratio of 2 (faked on images and the view,
offscreen)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter, QTransform
from PySide6.QtWidgets import QStyleOptionGraphicsItem

from app.canvas import Canvas, LineItem, OverlayItem, RasterItem, paint_lines
from app.display import display_pyramid
from app.jobs import JobQueue
from app.line_strokes import (
    LINE_TO,
    SCORE_SPREAD,
    SCORE_STEPS,
    STEP_COLOURS,
    STROKE_ORDER,
    LineStyle,
    build_strokes,
)
from app.model import Line, LinesModel, Segment
from app.tracing import TracingController
from core.guides import build_corridor
from core.tracer import TraceParams

#: Machado, Oliveira & Fernandes (2009) at severity 1, on linear sRGB.
DEUTERANOPIA = np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                         [-0.011820, 0.042940, 0.968881]])
PROTANOPIA = np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                       [-0.003882, -0.048116, 1.051998]])
BACKGROUND = QColor(128, 128, 128)


def cielab(colours, vision: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of ``colours`` (QColor) as seen with ``vision`` (a matrix on linear
    sRGB), shape (N, 3)."""
    srgb = np.array([(c.redF(), c.greenF(), c.blueF()) for c in colours])
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    xyz = np.clip(linear @ vision.T, 0, 1) @ np.array(
        [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
    f = xyz / (0.95047, 1.0, 1.08883)
    f = np.where(f > (6 / 29) ** 3, np.cbrt(f), f / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.column_stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]),
                            200 * (f[:, 1] - f[:, 2])])


# -- score colours --------------------------------------------------------------------------------

@pytest.mark.parametrize("vision", [np.eye(3), DEUTERANOPIA, PROTANOPIA],
                         ids=["normal", "deuteranopia", "protanopia"])
def test_score_colours_stay_apart_with_red_green_colour_blindness(vision):
    """Every step differs from the next, and steps a third of the scale apart clearly (CIE76
    ΔE; red to green was one yellow from the middle up: ΔE 0.1 to 4)."""
    lab = cielab(STEP_COLOURS, vision)
    distance = np.linalg.norm(lab[:, None] - lab[None], axis=2)
    assert np.diag(distance, 1).min() > 3
    assert distance[np.triu_indices(SCORE_STEPS, 5)].min() > 20


def test_weak_links_are_red_and_strong_ones_blue():
    weakest, strongest = STEP_COLOURS[0], STEP_COLOURS[-1]
    assert weakest.red() > 2 * max(weakest.green(), weakest.blue())
    assert strongest.blue() > max(strongest.red(), strongest.green()) + 50


def test_the_preview_shows_over_white_imagery_where_its_colour_is_pale(qtbot):
    """Across its middle link, pale yellow, the preview shows dark edges on white (without
    them, pale dashes with white between)."""
    overlay = OverlayItem()
    overlay.preview = segment_along(50.0)
    image = QImage(100, 100, QImage.Format.Format_RGB32)
    image.fill(QColor(255, 255, 255))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    overlay.paint(painter)
    painter.end()
    assert min(max(image.pixelColor(50, y).getRgb()[:3]) for y in range(40, 61)) < 60


# -- the scale of a line's colours ----------------------------------------------------------------

def link_steps(*per_px: float) -> list[int]:
    """The colour step of each segment of a straight line of one traced segment per value of
    ``per_px`` (10 links of 5 px, each scoring that per px)."""
    segments = []
    for index, value in enumerate(per_px):
        polyline = np.column_stack([50.0 * index + np.arange(11) * 5.0, np.zeros(11)])
        scores = np.full(10, 5.0 * value)
        segments.append(Segment(polyline, scores, float(scores.sum()), TraceParams(),
                                TraceParams(), "cpu"))
    ((keys, parts, _),) = build_strokes([LineStyle(tuple(segments), (2.5,) * len(segments),
                                                   QColor(255, 140, 0), QColor(0, 0, 0),
                                                   True)], 1.0)
    steps = np.full(len(per_px), -1)
    for key, elements in zip(keys, parts, strict=True):
        if key[0] == STROKE_ORDER.index("scored"):
            links = elements["type"][1:] == LINE_TO
            middles = (elements["x"][:-1] + elements["x"][1:])[links] / 2
            steps[(middles // 50).astype(int)] = key[1]
    return steps.tolist()


@pytest.mark.parametrize("per_px", [-1.3, -0.52, -0.01, 0.03, 250.0])
def test_a_line_whose_links_score_alike_is_all_of_the_strongest_colour(per_px):
    assert link_steps(per_px, per_px, per_px) == [SCORE_STEPS - 1] * 3


@pytest.mark.parametrize("per_px", [(-5.0, -5.01), (-0.510, -0.511), (0.020, 0.024)])
def test_small_score_differences_stay_near_the_strongest_colour(per_px):
    """A 0.2 % difference drew one half of a line red and the other green."""
    assert min(link_steps(*per_px)) >= SCORE_STEPS - 2


def test_the_colours_reach_red_at_the_spread_below_the_best_or_at_the_worst():
    best, top, middle = -0.5, SCORE_STEPS - 1, SCORE_STEPS // 2
    assert link_steps(best, best - SCORE_SPREAD / 2) == [top, middle]  # not red: less apart
    assert link_steps(best, best - SCORE_SPREAD / 2, best - SCORE_SPREAD) == [top, middle, 0]
    assert link_steps(best, best - 2 * SCORE_SPREAD, best - 4 * SCORE_SPREAD) == [
        top, middle, 0]


# -- device pixel ratio 2 -------------------------------------------------------------------------

def ink(draw, ratio: float) -> int:
    """How much ``draw(painter)`` changes a 100 × 100 (logical px) grey image at device pixel
    ratio ``ratio``, one scene unit a logical px: the change of every channel of every device
    px summed (an antialiased rim by the share it covers)."""
    image = QImage(round(100 * ratio), round(100 * ratio), QImage.Format.Format_RGB32)
    image.setDevicePixelRatio(ratio)
    image.fill(BACKGROUND)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    draw(painter)
    painter.end()
    pixels = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
    return int(np.abs(pixels.reshape(-1, 4)[:, :3].astype(int) - BACKGROUND.red()).sum())


def segment_along(y: float) -> Segment:
    """A traced segment from x = 10 to 90 at ``y``, its 16 links scoring from -1.5 to -0.5
    per px."""
    polyline = np.column_stack([np.linspace(10, 90, 17), np.full(17, y)])
    scores = np.linspace(-1.5, -0.5, 16) * 5.0
    return Segment(polyline, scores, float(scores.sum()), TraceParams(), TraceParams(), "cpu")


def paint_line(selected: bool):
    """Drawing a road line of :func:`segment_along` coloured by score, ``selected`` or not."""
    def draw(painter: QPainter) -> None:
        item = LineItem(Line(1, "line", "road", ((10.0, 50.0), (90.0, 50.0)),
                             (segment_along(50.0),)), True)
        item.set_selection(selected)
        paint_lines(painter, [item])
    return draw


def paint_overlay(**content):
    """Drawing the overlay with ``content`` (its attributes: preview, drag_lines, ...)."""
    def draw(painter: QPainter) -> None:
        overlay = OverlayItem()
        for name, value in content.items():
            setattr(overlay, name, value)
        overlay.paint(painter)
    return draw


@pytest.mark.parametrize("draw", [
    paint_line(selected=False),
    paint_line(selected=True),
    paint_overlay(preview=segment_along(50.0)),
    paint_overlay(drag_lines=np.array([(10.0, 20.0), (50.0, 80.0), (90.0, 20.0)])),
    paint_overlay(corridor=build_corridor((10.0, 50.0), (90.0, 50.0), 6, 9, 30.0)),
], ids=["line", "selected line", "preview", "rubber band", "corridor"])
def test_at_device_pixel_ratio_2_strokes_are_as_wide_in_screen_px(qtbot, draw):
    """Twice the device px along and across: four times the ink (widths in device px drew
    twice it)."""
    assert ink(draw, 2.0) == pytest.approx(4 * ink(draw, 1.0), rel=0.1)


def test_at_device_pixel_ratio_2_the_image_is_drawn_from_the_level_sharp_on_the_device(qtbot):
    """Columns alternating dark and light, at one image px per device px (half a screen px
    at ratio 2): every device px differs from the next, not the half-size level's one
    grey."""
    columns = np.where(np.arange(1500) % 2, 0.8, 0.2).astype(np.float32)
    item = RasterItem(display_pyramid(np.tile(columns[None, :, None], (1200, 1, 1))))
    assert len(item.levels) > 1
    image = QImage(200, 200, QImage.Format.Format_RGB32)
    image.setDevicePixelRatio(2.0)
    painter = QPainter(image)
    painter.setWorldTransform(QTransform.fromScale(0.5, 0.5))
    option = QStyleOptionGraphicsItem()
    option.exposedRect = QRectF(-0.5, -0.5, 200, 200)
    item.paint(painter, option)
    painter.end()
    row = [image.pixelColor(x, 100).red() for x in range(20, 180)]
    assert np.all(np.abs(np.diff(row)) >= 100), row


def test_a_huge_image_at_one_device_px_per_image_px_is_read_at_full_resolution(
        qtbot, monkeypatch):
    """A raster shown from an overview at half size: at one device px per image px the
    part in view is read whole (factor 1), at device pixel ratio 1 and 2."""
    model = LinesModel()
    canvas = Canvas(model, TracingController(model, JobQueue()))
    qtbot.addWidget(canvas)
    source = SimpleNamespace(width=2400, height=2000)
    canvas.set_image(display_pyramid(np.random.default_rng(0).random((1000, 1200, 1),
                                                                      np.float32), 2, source))
    for ratio in (1.0, 2.0):
        monkeypatch.setattr(canvas, "devicePixelRatioF", lambda ratio=ratio: ratio)
        canvas.zoom(1.0 / ratio / canvas.transform().m11())
        assert canvas._tile_window(0.0).factor == 1
