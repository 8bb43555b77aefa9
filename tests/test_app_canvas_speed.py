"""How the canvas keeps up with many lines: a new zoom, colouring or set of lines is drawn in
slices between turns of the event loop, the old picture shown meanwhile (none for another
image); only the lines that meet what is drawn are drawn, and only their parts there; a line
is drawn the same at every zoom within one doubling; changes made meanwhile show in the end;
and what the window shows is what drawing every line directly shows (offscreen, pytest-qt).
Untimed: ``DRAW_SLICE_S`` = 0 makes every slice draw one line."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QImage, QPainter, QPolygonF

from app.canvas import Canvas, points_rect, polygon, within
from app.display import display_pyramid
from tests.test_app_paint import (
    Repaints,
    canvas_with_lines,
    differing,
    drawn,
    lines_meeting,
    painted_afresh,
    shown,
    wandering_line,
)


@pytest.fixture
def canvas(qtbot):
    return canvas_with_lines(qtbot)


def without_lines(view: Canvas) -> QImage:
    """The viewport painted whole without the lines."""
    view._lines.setVisible(False)
    view.viewport().repaint()
    image = shown(view)
    view._lines.setVisible(True)
    return image


@pytest.mark.parametrize("change", ["zoom", "colours", "lines"])
def test_a_change_of_all_lines_is_drawn_in_slices_the_old_picture_shown_meanwhile(
        canvas, qtbot, monkeypatch, change):
    monkeypatch.setattr("app.canvas.DRAW_SLICE_S", 0.0)  # one line a slice
    before = shown(canvas)
    repaints = Repaints(canvas, monkeypatch)
    if change == "zoom":
        canvas.zoom(1.5)
    elif change == "colours":
        canvas.set_colour_by_score(False)
    else:
        rng = np.random.default_rng(7)
        canvas.model.reset(tuple(wandering_line(i + 1, rng, rng.uniform(40, 260, 2))
                                 for i in range(30)))
    canvas.viewport().repaint()
    assert len(repaints.lines) == 1  # the first slice, at once
    if change == "zoom":  # the old picture, scaled
        assert differing(shown(canvas), without_lines(canvas)) > 0.01
    elif change == "colours":
        assert differing(shown(canvas), before, tolerance=0) == 0.0
    drawn(canvas, qtbot)
    assert len(repaints.lines) > 20  # in as many slices
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_only_the_lines_that_meet_the_picture_are_drawn(canvas, qtbot,
                                                        monkeypatch):
    repaints = Repaints(canvas, monkeypatch)
    canvas.zoom(6)
    canvas.centerOn(QPointF(60, 60))
    drawn(canvas, qtbot)
    picture = canvas._lines._shown.scene_rect()
    assert set(repaints.lines) == lines_meeting(canvas, [picture])
    assert len(set(repaints.lines)) < len(canvas.model.lines)
    # Lines cut by the edges of the view and of the picture's parts show as drawn whole.
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_a_zoom_within_a_doubling_draws_the_same_paths(canvas, qtbot):
    canvas.zoom(1.1 / canvas.transform().m11())  # 1.1 screen px a pixel
    drawn(canvas, qtbot)
    calls = {line_id: item._drawn[1] for line_id, item in canvas.line_items.items()}
    canvas.zoom(1.9 / 1.1)
    drawn(canvas, qtbot)
    assert all(canvas.line_items[line_id]._drawn[1] is kept
               for line_id, kept in calls.items())
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0
    canvas.zoom(2.1 / 1.9)  # the next doubling: thinned for it
    drawn(canvas, qtbot)
    assert not any(canvas.line_items[line_id]._drawn[1] is kept
                   for line_id, kept in calls.items())


def test_lines_changed_while_a_new_picture_is_drawn_show_in_the_end(canvas, qtbot,
                                                                    monkeypatch):
    monkeypatch.setattr("app.canvas.DRAW_SLICE_S", 0.0)
    canvas.zoom(2)
    canvas.viewport().repaint()  # its first slice
    lines = canvas.model.lines
    canvas.controller.select(lines[3].id)
    canvas.model.set_kind(lines[5].id, "river")
    canvas.model.set_visible(lines[6].id, False)
    drawn(canvas, qtbot)
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0
    # A pan beyond the picture while an area is being drawn: that area is drawn again in the
    # new picture.
    canvas.controller.select(lines[8].id)
    assert canvas._lines._job is not None
    bar = canvas.horizontalScrollBar()
    bar.setValue(bar.value() + 500)
    drawn(canvas, qtbot)
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_a_new_image_shows_no_lines_of_the_last_until_its_own_are_drawn(
        canvas, qtbot, monkeypatch):
    monkeypatch.setattr("app.canvas.DRAW_SLICE_S", 0.0)
    rng = np.random.default_rng(3)
    canvas.set_image(display_pyramid(rng.random((250, 350, 3), np.float32)))
    canvas.model.reset(tuple(wandering_line(i + 1, rng, rng.uniform(40, 200, 2))
                             for i in range(30)))
    canvas.viewport().repaint()
    assert differing(shown(canvas), without_lines(canvas), tolerance=0) == 0.0
    drawn(canvas, qtbot)
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_an_edit_draws_again_only_the_area_of_the_line(canvas, qtbot,
                                                       monkeypatch):
    repaints = Repaints(canvas, monkeypatch)
    line = canvas.model.lines[4]
    canvas.model.set_kind(line.id, "river" if line.kind == "road" else "road")
    drawn(canvas, qtbot)
    assert line.id in repaints.lines
    assert set(repaints.lines) <= lines_meeting(canvas, [points_rect(line.bounds, canvas._pad)])
    assert len(set(repaints.lines)) < len(canvas.model.lines)
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_within_keeps_the_links_that_may_show_in_an_area():
    """A polyline's links from the first to the last within the pad of the area; of lines,
    the batches of 16 with one within it; the shape itself when all are; None when none is."""
    xs = np.arange(0.0, 101.0)
    points = np.column_stack([xs, np.zeros_like(xs)])  # (0, 0) to (100, 0), 1 apart
    area = QRectF(40, -5, 20, 10)  # x in [40, 60]
    part = within(QPainter.drawPolyline, polygon(points), area, 2.0)
    assert part == QPolygonF([QPointF(x, 0) for x in range(37, 64)])  # links 37-38 … 62-63
    pairs = np.stack([points[:-1], points[1:]], axis=1)
    part = within(QPainter.drawLines, polygon(pairs), area, 2.0)
    assert part == polygon(pairs[32:64])  # the batches of 16 (as Qt strokes them) of 37 … 62
    whole = polygon(points[45:55])
    assert within(QPainter.drawPolyline, whole, area, 2.0) is whole
    assert within(QPainter.drawPolyline, polygon(points[70:]), area, 2.0) is None
