"""What the canvas paints again, and that it paints the same picture: an overlay change or a
selection change paints only its area (the lines there copied from their picture, or for a
selection drawn again in that area alone), a pan draws only what it shows anew, and what the
window shows after such partial repaints is what drawing every line directly shows
(offscreen, pytest-qt)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, QRectF
from PySide6.QtGui import QColor, QGuiApplication, QImage, QPainter, QPolygonF

import app.canvas as canvas_module
from app.canvas import Canvas, LineItem, points_rect, polygon
from app.display import display_pyramid
from app.line_strokes import STEP_COLOURS, first_in_cells
from app.model import Line, Segment
from core.tracer import TraceParams
from tests.conftest import shown_canvas


def wandering_line(line_id: int, rng: np.random.Generator, start) -> Line:
    """A line of three traced segments wandering from ``start``, its link scores varying along
    it (all the score colours), and a straight segment."""
    segments, point = [], np.asarray(start, dtype=np.float64)
    for _ in range(3):
        polyline = point + np.cumsum(rng.normal(0, 1.5, (40, 2)), axis=0)
        polyline[0] = point
        lengths = np.hypot(*np.diff(polyline, axis=0).T)
        scores = np.sin(np.arange(len(lengths)) / 5.0 + line_id) * lengths
        segments.append(Segment(polyline, scores, float(scores.sum()), TraceParams(),
                                TraceParams(), "cpu"))
        point = polyline[-1]
    end = tuple(point + (15.0, 5.0))
    segments.append(Segment.straight(tuple(point), end))
    anchors = (tuple(start), *(tuple(s.polyline[-1]) for s in segments))
    return Line(line_id, f"line {line_id}", "river" if line_id % 3 == 0 else "road", anchors,
                tuple(segments))


@pytest.fixture
def canvas(qtbot):
    return canvas_with_lines(qtbot)


def canvas_with_lines(qtbot) -> Canvas:
    """A shown 800 × 600 canvas on a 400 × 300 image with 24 lines, fitted."""
    view = shown_canvas(qtbot)
    model = view.model
    qtbot.waitExposed(view)
    view.set_image(display_pyramid(np.random.default_rng(0).random((300, 400, 3), np.float32)))
    rng = np.random.default_rng(1)
    model.reset(tuple(wandering_line(i + 1, rng, rng.uniform(40, 260, 2)) for i in range(24)))
    settle(qtbot)
    return view


def settle(qtbot) -> None:
    """Let Qt paint what is pending."""
    for _ in range(3):
        qtbot.wait(20)


def drawn(view: Canvas, qtbot) -> None:
    """Let the canvas draw the lines' picture of the view to the end (right after a zoom,
    before the paint that starts it, no picture is being drawn either)."""
    layer, viewport = view._lines, view.viewport()

    def done() -> bool:
        return (layer._job is None and not layer._stale and layer._shown is not None
                and layer._shown.shows(view.viewportTransform(), viewport.rect(),
                                       viewport.devicePixelRatioF()))

    qtbot.waitUntil(done)
    settle(qtbot)


def shown(view: Canvas) -> QImage:
    """What the window shows now (its backing store: partial repaints included)."""
    corner = view.viewport().mapTo(view.window(), QPoint(0, 0))
    size = view.viewport().size()
    return QGuiApplication.primaryScreen().grabWindow(
        view.window().winId(), corner.x(), corner.y(), size.width(), size.height()).toImage()


def painted_afresh(view: Canvas) -> QImage:
    """The viewport painted whole without the lines' picture, then every line drawn directly
    over it: what the window should show (with nothing in the overlay)."""
    view._lines.setVisible(False)
    view.viewport().repaint()
    image = shown(view)
    view._lines.setVisible(True)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setWorldTransform(view.viewportTransform())
    for item in view.line_items.values():
        item.paint(painter)
    painter.end()
    return image


def differing(a: QImage, b: QImage, tolerance: int = 24) -> float:
    """Share of the pixels whose colour differs by more than ``tolerance`` in a channel."""
    def pixels(image: QImage) -> np.ndarray:
        image = image.convertToFormat(QImage.Format.Format_RGB32)
        data = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
        return data.reshape(image.height(), image.bytesPerLine())[:, :4 * image.width()]

    assert a.size() == b.size()
    return float((np.abs(pixels(a).astype(int) - pixels(b)) > tolerance).mean())


def lines_meeting(view: Canvas, areas) -> set[int]:
    """Ids of the lines whose boxes, padded as the canvas pads them, meet any of ``areas``
    (scene rects)."""
    return {line.id for line in view.model.lines
            if any(points_rect(line.bounds, view._pad).intersects(area) for area in areas)}


class Repaints(QObject):
    """Records the viewport's paint events and the lines painted (by
    :func:`app.canvas.paint_lines`, which the lines' picture draws them with)."""

    def __init__(self, view: Canvas, monkeypatch) -> None:
        super().__init__()
        self.regions: list = []
        self.lines: list[int] = []
        view.viewport().installEventFilter(self)
        paint = canvas_module.paint_lines

        def counted(painter, items, area=None):
            self.lines += [item.line.id for item in items]
            paint(painter, items, area)

        monkeypatch.setattr(canvas_module, "paint_lines", counted)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Paint:
            self.regions += list(event.region())  # its rectangles
        return False

    def clear(self) -> None:
        self.regions.clear()
        self.lines.clear()


def test_polygon_copies_the_points_in_one_block():
    points = np.random.default_rng(0).uniform(-1e4, 1e4, (1000, 2))
    assert polygon(points) == QPolygonF([QPointF(x, y) for x, y in points])
    assert polygon(points[::3]) == QPolygonF([QPointF(x, y) for x, y in points[::3]])
    assert polygon(np.empty((0, 2))).isEmpty()


def test_thinning_drops_only_vertices_within_a_cell_of_the_one_before():
    """Of polylines one after the other, each one's ends are kept, and of its other vertices
    those in another cell of the grid than the vertex before."""
    rng = np.random.default_rng(0)
    walks = [np.cumsum(rng.normal(0, 0.2, (count, 2)), axis=0) for count in (500, 300)]
    points, firsts = np.vstack(walks), np.array([0, 500])
    kept = np.flatnonzero(first_in_cells(points, firsts, 0.5))
    assert {0, 499, 500, 799} <= set(kept.tolist())
    assert 80 < len(kept) < 640
    # Each vertex left out lies in the grid cell of the last vertex kept before it, in its own
    # polyline.
    owner = kept[np.searchsorted(kept, np.arange(len(points)), side="right") - 1]
    assert np.all((owner < 500) == (np.arange(len(points)) < 500))
    assert np.all(np.floor(points / 0.5) == np.floor(points[owner] / 0.5))
    spaced = np.column_stack([np.arange(50.0), np.zeros(50)])  # 1 apart: cells of 0.5
    assert first_in_cells(spaced, np.array([0]), 0.5).all()


def test_an_overlay_change_paints_only_its_area_and_draws_no_line_again(canvas, qtbot,
                                                                        monkeypatch):
    repaints = Repaints(canvas, monkeypatch)
    overlay = canvas._overlay
    for end in ((120.0, 90.0), (130.0, 95.0), (140.0, 100.0)):  # a dragged vertex's band
        overlay.drag_lines = np.array([(100.0, 80.0), end, (150.0, 70.0)])
        canvas._overlay_changed()
        settle(qtbot)
    overlay.drag_lines = None
    canvas._overlay_changed()
    settle(qtbot)
    assert repaints.regions, "the overlay's changes were painted"
    area = canvas.mapFromScene(QPointF(100, 70)), canvas.mapFromScene(QPointF(150, 100))
    # The band's box and its pad (10-20 screen px); and a few px where the overlay, empty, was.
    for region in (r for r in repaints.regions if r.width() * r.height() > 64):
        assert area[0].x() - 25 <= region.left() <= region.right() <= area[1].x() + 25
        assert area[0].y() - 25 <= region.top() <= region.bottom() <= area[1].y() + 25
    assert repaints.lines == []  # the lines under the band came from their picture
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0  # no trace of the band


@pytest.mark.parametrize("zoom", [0.4, 1.0, 5.0])
def test_a_selection_change_paints_only_the_area_of_the_lines_it_changes(canvas, qtbot,
                                                                         monkeypatch, zoom):
    canvas.zoom(zoom)
    canvas.centerOn(QPointF(150, 150))
    settle(qtbot)
    repaints = Repaints(canvas, monkeypatch)
    centre = np.array([150.0, 150.0])  # the two lines nearest to it, in view at any zoom
    nearest = sorted(canvas.model.lines,
                     key=lambda line: np.hypot(*(line.polyline - centre).T).min())
    first, second = nearest[0].id, nearest[1].id
    canvas.controller.select(first)
    settle(qtbot)
    canvas.controller.select(second, 1)
    settle(qtbot)
    # Drawn again: the two lines, and the lines that may cover or be covered by them.
    areas = [points_rect(line.bounds, canvas._pad) for line in nearest[:2]]
    assert {first, second} <= set(repaints.lines) <= lines_meeting(canvas, areas)
    assert repaints.regions
    viewport = canvas.viewport().rect()
    assert all(region != viewport for region in repaints.regions)
    # The halo taken off the first line leaves no trace, at any zoom.
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_a_pan_draws_only_the_lines_of_what_it_shows_anew(canvas, qtbot, monkeypatch):
    """Within the picture's margin a pan draws no line; beyond it, only the lines that meet
    the part it had not drawn; lines cut by the edges of the view or of that part show
    whole."""
    canvas.zoom(3)
    drawn(canvas, qtbot)
    repaints = Repaints(canvas, monkeypatch)
    bar = canvas.horizontalScrollBar()
    bar.setValue(bar.value() + 60)  # 60 of 800 px: within the margin
    settle(qtbot)
    assert repaints.lines == []
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0
    repaints.clear()
    before = canvas._lines._shown.scene_rect()
    bar.setValue(bar.value() + 300)
    drawn(canvas, qtbot)
    after = canvas._lines._shown.scene_rect()
    new_part = QRectF(before.right(), after.top(), after.right() - before.right(),
                      after.height())
    assert set(repaints.lines) == lines_meeting(canvas, [new_part])
    assert lines_meeting(canvas, [after]) - set(repaints.lines), "some were kept, not drawn"
    assert differing(shown(canvas), painted_afresh(canvas)) == 0.0


def test_lines_shown_from_their_picture_look_as_drawn_directly(canvas, qtbot):
    canvas.controller.select(canvas.model.lines[2].id)
    canvas.zoom(2.5)
    settle(qtbot)
    cached = canvas.viewport().grab().toImage()
    assert differing(cached, painted_afresh(canvas), tolerance=8) < 1e-4


def test_links_are_coloured_by_score_from_red_to_blue(qtbot):
    """A straight traced line whose links score worst to best, drawn at 1:1: its left end is
    red and its right end blue, in the colours of the steps."""
    polyline = np.column_stack([np.linspace(20, 180, 81), np.full(81, 50.5)])
    scores = np.linspace(-1, 1, 80) * np.hypot(*np.diff(polyline, axis=0).T)
    segment = Segment(polyline, scores, float(scores.sum()), TraceParams(), TraceParams(),
                      "cpu")
    item = LineItem(Line(1, "line", "road", ((20.0, 50.5), (180.0, 50.5)), (segment,)), True)
    image = QImage(200, 100, QImage.Format.Format_RGB32)
    image.fill(QColor(128, 128, 128))
    painter = QPainter(image)
    item.paint(painter)
    painter.end()
    steps = [colour.rgb() for colour in STEP_COLOURS]
    assert image.pixelColor(24, 50).rgb() == steps[0]  # red
    assert image.pixelColor(175, 50).rgb() == steps[-1]  # blue
    assert image.pixelColor(100, 50).rgb() in steps[6:10]  # pale yellow in the middle
