"""How the canvas keeps up with many lines: a new zoom, colouring or set of lines is drawn in
slices between turns of the event loop, the old picture shown meanwhile (none for another
image); only the lines that meet what is drawn are drawn, and only their parts there; lines
apart are drawn as one, as they look drawn one by one; a line is drawn the same at every
zoom within one doubling, through fewer vertices than it has, as it looks drawn through all;
changes made meanwhile show in the end; and what the window shows is what drawing every line
directly shows (offscreen, pytest-qt). Untimed: ``DRAW_SLICE_S`` = 0 and ``LINES_AT_ONCE``
= 1 make every slice draw one line."""

from __future__ import annotations

import gc
import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QTransform

import app.canvas as canvas_module
from app.canvas import (
    ITEM_PAD_PX,
    Canvas,
    LineItem,
    paint_lines,
    points_rect,
    power_of_two_at_most,
)
from app.display import display_pyramid
from app.line_strokes import (
    LINE_TO,
    MOVE_TO,
    PATH_ELEMENT,
    apart_layers,
    simplified,
    within,
    z_order,
)
from app.model import Line, Segment
from core.tracer import TraceParams
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
    monkeypatch.setattr("app.canvas.LINES_AT_ONCE", 1)
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
    calls = {line_id: item._strokes for line_id, item in canvas.line_items.items()}
    canvas.zoom(1.9 / 1.1)
    drawn(canvas, qtbot)
    assert all(canvas.line_items[line_id]._strokes is kept
               for line_id, kept in calls.items())
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0
    canvas.zoom(2.1 / 1.9)  # the next doubling: thinned for it
    drawn(canvas, qtbot)
    assert not any(canvas.line_items[line_id]._strokes is kept
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


def polylines(parts: list[np.ndarray]) -> np.ndarray:
    """Path elements of the polylines ``parts`` (each (N, 2)), each a subpath."""
    points = np.concatenate(parts)
    elements = np.empty(len(points), PATH_ELEMENT)
    elements["x"], elements["y"] = points[:, 0], points[:, 1]
    elements["type"] = LINE_TO
    elements["type"][np.cumsum([0] + [len(part) for part in parts[:-1]])] = MOVE_TO
    return elements


def test_within_keeps_of_each_subpath_the_links_that_may_show_in_an_area():
    """Of each subpath, its links from the first to the last within the pad of the area (a
    new subpath from there); subpaths with none left out; the elements themselves when all
    links are within it; None when none is."""
    xs = np.arange(0.0, 101.0)
    line = np.column_stack([xs, np.zeros_like(xs)])  # (0, 0) to (100, 0), 1 apart
    away = np.column_stack([xs, np.full_like(xs, 50.0)])  # far below the area
    back = line[::-1] + (0.0, 1.0)  # back from (100, 1) to (0, 1)
    area = QRectF(40, -5, 20, 10)  # x in [40, 60]
    part = within(polylines([line, away, back]), area, 2.0)
    expected = polylines([line[37:64], back[37:64]])  # links 37-38 … 62-63 of each
    np.testing.assert_array_equal(part, expected)
    whole = polylines([line[45:55], back[45:55]])
    assert within(whole, area, 2.0) is whole
    assert within(polylines([line[70:], away]), area, 2.0) is None


def smooth_line(line_id: int, rng: np.random.Generator, start, length: float) -> Line:
    """A line of ``length`` px traced as the tracer traces, its vertices 0.5 px apart, wandering
    smoothly from ``start`` in two segments whose link scores vary along them; every third a
    river."""
    steps = int(length / 0.5)
    heading = rng.uniform(0, 2 * np.pi) + np.cumsum(rng.normal(0, 0.03, steps))
    path = np.vstack([start, start + np.cumsum(
        0.5 * np.column_stack([np.cos(heading), np.sin(heading)]), axis=0)])
    segments = []
    for part in (path[:steps // 2 + 1], path[steps // 2:]):
        lengths = np.hypot(*np.diff(part, axis=0).T)
        scores = np.sin(np.arange(len(lengths)) / 40.0 + line_id) * lengths
        segments.append(Segment(part.copy(), scores, float(scores.sum()), TraceParams(),
                                TraceParams(), "cpu"))
    anchors = (tuple(path[0]), tuple(path[steps // 2]), tuple(path[-1]))
    return Line(line_id, f"line {line_id}", "river" if line_id % 3 == 0 else "road", anchors,
                tuple(segments))


def distances_to(polyline: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Each of ``points``' distance to ``polyline``."""
    starts, chords = polyline[:-1], np.diff(polyline, axis=0)
    offsets = points[:, None, :] - starts[None]
    along = np.clip((offsets * chords).sum(axis=2) / np.maximum((chords ** 2).sum(axis=1),
                                                                1e-300), 0, 1)
    return np.hypot(*np.moveaxis(offsets - along[..., None] * chords, 2, 0)).min(axis=1)


def test_simplified_polylines_stray_at_most_the_tolerance_through_few_vertices():
    """Each polyline simplified alone as among others: its ends kept, every vertex within the
    tolerance of what is left, a smooth line 0.5 px between vertices left with few."""
    rng = np.random.default_rng(2)
    walks = [smooth_line(i + 1, rng, (0.0, 0.0), 600).segments[0].polyline for i in range(3)]
    firsts = np.cumsum([0] + [len(polyline) for polyline in walks[:-1]])
    keep = simplified(np.vstack(walks), firsts, 0.25)
    for first, polyline in zip(firsts, walks, strict=True):
        own = keep[first:first + len(polyline)]
        np.testing.assert_array_equal(own, simplified(polyline, np.array([0]), 0.25))
        assert own[0]
        assert own[-1]
        assert 5 * own.sum() < len(polyline)
        assert distances_to(polyline[own], polyline).max() <= 0.25
    square = np.array([(0, 0), (1, 0), (2, 0), (2, 2), (0, 2), (0, 1)], dtype=float)
    np.testing.assert_array_equal(simplified(square, np.array([0]), 0.1),
                                  [True, False, True, True, True, True])  # (1, 0) on the way


@pytest.mark.parametrize("zoom", [0.25, 1.0, 4.0])
def test_a_line_looks_as_drawn_through_every_vertex_through_few_of_them(qtbot, monkeypatch,
                                                                         zoom):
    """Thinned and simplified for the zoom (``THIN_PX``, ``SIMPLIFY_PX``), a line of vertices
    0.5 px apart is drawn through a third of them or fewer, its pixels as drawn through all
    but where its antialiased rims move by a fraction of a px."""
    line = smooth_line(3, np.random.default_rng(3), (200.0, 200.0), 600)

    def drawing() -> tuple[np.ndarray, int]:
        image = QImage(400, 400, QImage.Format.Format_RGB32)
        image.fill(QColor(128, 128, 128))
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setWorldTransform(QTransform.fromTranslate(-200, -200)
                                  * QTransform.fromScale(zoom, zoom)
                                  * QTransform.fromTranslate(200, 200))
        item = LineItem(line, True)
        item.paint(painter)
        painter.end()
        pixels = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
        return (pixels.reshape(400, 400, 4)[..., :3].astype(int),
                item.strokes(power_of_two_at_most(1 / zoom)).size)

    simple, simple_size = drawing()
    monkeypatch.setattr("app.line_strokes.THIN_PX", 1e-9)
    monkeypatch.setattr("app.line_strokes.SIMPLIFY_PX", 0.0)
    exact, exact_size = drawing()
    assert 3 * simple_size < exact_size
    line_pixels = (np.abs(simple - 128).max(axis=2) > 0) | (np.abs(exact - 128).max(axis=2) > 0)
    change = np.abs(simple - exact).max(axis=2)[line_pixels]
    assert line_pixels.sum() > 1000
    assert (change > 64).mean() < 0.01
    assert (change > 24).mean() < 0.05


@pytest.mark.parametrize("zoom", [0.5, 2.0, 5.0])
def test_lines_apart_drawn_as_one_look_as_drawn_one_by_one(qtbot, zoom):
    """Sorted into layers by their boxes padded as the canvas pads them, no two lines of a layer
    meet, and any two that meet are in the order drawn; drawn layer by layer, some lines of a
    layer as one, they look exactly as drawn one by one."""
    rng = np.random.default_rng(4)
    items = [LineItem(wandering_line(i + 1, rng, rng.uniform(20, 380, 2)), True)
             for i in range(300)]
    items[7].set_selection(True)
    items[9].set_selection(True, 1)
    pad = ITEM_PAD_PX / power_of_two_at_most(zoom)
    boxes = np.array([item.line.bounds for item in items]) + [[-pad], [pad]]
    layers = apart_layers(boxes)
    meet = np.triu(np.all((boxes[:, None, 0] <= boxes[None, :, 1])
                          & (boxes[None, :, 0] <= boxes[:, None, 1]), axis=2), k=1)
    first, second = np.nonzero(meet)
    assert len(first) > 1000
    assert np.all(layers[first] < layers[second])
    assert layers.max() < len(items) / 4

    def picture(draw) -> QImage:  # all of the lines (paths cut by its edges differ there)
        image = QImage(int(420 * zoom), int(420 * zoom), QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setWorldTransform(QTransform.fromScale(zoom, zoom))
        draw(painter)
        painter.end()
        return image

    def layer_by_layer(painter: QPainter) -> None:
        order = np.lexsort((z_order(boxes.mean(axis=1)), layers))
        for layer in np.split(order, np.flatnonzero(np.diff(layers[order])) + 1):
            for start in range(0, len(layer), 8):
                paint_lines(painter, [items[index] for index in layer[start:start + 8]])

    one_by_one = picture(lambda painter: [item.paint(painter) for item in items])
    assert picture(layer_by_layer) == one_by_one


def test_long_lines_cut_by_the_parts_drawn_show_as_drawn_whole(canvas, qtbot, monkeypatch):
    """Lines of many path elements that reach beyond a part of the picture are cut to what
    may show there (``within``), and look as drawn whole."""
    rng = np.random.default_rng(6)
    canvas.model.reset(tuple(smooth_line(i + 1, rng, rng.uniform(100, 300, 2), 1500)
                             for i in range(6)))
    parts = []

    def counted(elements, area, pad):
        part = within(elements, area, pad)
        parts.append(part is not elements)
        return part

    monkeypatch.setattr(canvas_module, "within", counted)
    canvas.zoom(4)
    drawn(canvas, qtbot)
    assert any(parts), "some strokes were cut"
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_the_strokes_of_many_lines_leave_the_garbage_collector_little_to_track(qtbot):
    """A line's strokes are kept in tuples of numbers and arrays (which the collector stops
    tracking), their keys shared by all lines."""
    rng = np.random.default_rng(8)
    items = [LineItem(wandering_line(i + 1, rng, rng.uniform(40, 260, 2)), True)
             for i in range(100)]
    LineItem.prepare(items, 1.0)
    gc.collect()
    assert not any(gc.is_tracked(item._strokes.keys) or gc.is_tracked(item._strokes.parts)
                   for item in items)
    keys = [key for item in items for key in item._strokes.keys]
    assert len({id(key) for key in keys}) == len(set(keys))
