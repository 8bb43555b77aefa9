"""The canvas: the image, the traced lines, the preview and the corridor overlay.

Scene coordinates are pixel coordinates: pixel (col, row) is centred on (x, y) = (col, row),
so the image item covers [-0.5, width - 0.5] × [-0.5, height - 0.5].
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import shiboken6
from PySide6.QtCore import (
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QImage,
    QPainter,
    QPixmapCache,
    QPolygonF,
    QRegion,
    QTransform,
)
from PySide6.QtWidgets import QGraphicsItem, QGraphicsObject, QGraphicsScene, QGraphicsView

from app.display import DisplayLevel, DisplayPyramid, DisplayTile, TileWindow, read_tile
from app.edits import Edit
from app.jobs import Job, JobQueue
from app.line_strokes import (
    SELECTED_WIDTH,
    LineStyle,
    Strokes,
    apart_layers,
    build_strokes,
    cosmetic_pen,
    painter_path,
    stroke_pen,
    within,
    z_order,
)
from app.model import Line, LinesModel, Segment
from app.tracing import TracingController
from core.guides import Corridor, build_corridor

KIND_COLOURS = {"road": QColor(255, 140, 0), "river": QColor(110, 205, 255)}
#: Edge drawn along both sides of a line's stroke, by kind: rivers stand apart from roads
#: also when lines are coloured by score.
KIND_EDGES = {"road": QColor(0, 0, 0), "river": QColor(0, 80, 255)}
#: Stroke width (screen px) of a line (:data:`SELECTED_WIDTH`: of a selected line or segment).
LINE_WIDTH = 2.5
PREVIEW_COLOUR = QColor(255, 255, 0)
#: Edge along both sides of the preview's stroke: its yellow and the pale middle of the score
#: colours show over bright imagery.
PREVIEW_EDGE = QColor(0, 0, 0)
CORRIDOR_COLOUR = QColor(255, 255, 255, 150)
#: The zoom's range (screen px per image px), widened to include the fitted view's: a tiny
#: image fits beyond 64×, a huge one below 1/64.
ZOOM_LIMITS = (1 / 64, 64.0)
#: Screen pixels within which a click grabs a vertex or picks a line.
GRAB_RADIUS = 7.0
#: Screen px the mouse moves with the button held on a vertex or a line before the press is a
#: drag (less is a click, whatever the hand's jitter between press and release).
DRAG_START = 4
#: What the status bar says where the vertex or segment held with the mouse is gone (its line
#: changed meanwhile: a Backspace, an undo, the line deleted).
GONE = {"move": "the vertex dragged is gone (its line changed meanwhile): not moved",
        "split": "the segment dragged is gone (its line changed meanwhile): no vertex added"}
#: What the status bar says where a vertex is dragged while a line is being drawn.
NOT_WHILE_DRAWING = "a vertex is not moved while a line is being drawn: finish it first (Enter)"
#: Share of the view's width and height that a sharp tile reads beyond each side of the view,
#: so that a short pan shows sharp pixels at once.
TILE_MARGIN = 0.25
#: Screen px beyond its points that a line's drawing may cover: the selection halo (7.75 px
#: from the middle of the line) and the anchor squares, antialiased. A line's box pads its
#: points by 1 to 2 times this (see :meth:`Canvas._item_pad`).
ITEM_PAD_PX = 10.0
#: Share of the view's width and height that the image of the lines (:class:`LinesLayer`)
#: covers beyond each side of the view, so that a short pan shows them at once.
LINES_MARGIN = 0.25
#: Seconds of drawing lines into their image between two turns of the event loop: thousands
#: of lines at a new zoom are drawn in many slices, the window responsive in between.
DRAW_SLICE_S = 0.04
#: More lines than this changed at once (a session opened, an import, an undo of many) draw
#: the whole image of the lines again, rather than the area of each.
AREAS_AT_ONCE = 16
#: Lines drawn as one (:func:`paint_lines`) are at most this many, with at most
#: :data:`ELEMENTS_AT_ONCE` path elements in all, so that one call does not hold up the
#: event loop much beyond :data:`DRAW_SLICE_S`.
LINES_AT_ONCE = 8
ELEMENTS_AT_ONCE = 20000
#: The strokes of the lines to draw are built for about this many of their vertices at a
#: time (:func:`build_strokes`): enough to spread numpy's overhead per call, few enough that
#: a build at a high zoom (all vertices left to simplify) takes some tens of ms.
BUILT_VERTICES = 50000
#: Lines of fewer path elements than this are drawn whole where only a part of them may show
#: in the area drawn: cutting them (:func:`within`) would take longer than drawing the rest.
CUT_ELEMENTS = 512
#: KiB of pixmaps that Qt may cache (its default, 10 MiB, is less than the image's pixmap at
#: the view's size on a 4K screen).
PIXMAP_CACHE_KIB = 64 * 1024


def power_of_two_at_most(value: float) -> float:
    """The largest power of two not above ``value`` (> 0): drawing state that depends on the
    zoom is kept per doubling of it."""
    return 2.0 ** math.floor(math.log2(value))


def polygon(points: np.ndarray) -> QPolygonF:
    """``points`` (N, 2) as a QPolygonF, copied into it in one block (Qt's qreal is a double)."""
    points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, 2)
    result = QPolygonF()
    if len(points):
        result.resize(len(points))
        memory = shiboken6.VoidPtr(result.data(), points.nbytes, True)
        np.frombuffer(memory, np.float64)[:] = points.ravel()
    return result


def points_rect(points: np.ndarray, pad: float) -> QRectF:
    low, high = points.min(axis=0) - pad, points.max(axis=0) + pad
    return QRectF(float(low[0]), float(low[1]), float(high[0] - low[0]), float(high[1] - low[1]))


def rubber_band(grab: Edit, line: Line, index: int, point) -> np.ndarray:
    """The dashed lines shown while ``grab`` is dragged to ``point``: from the neighbours of
    vertex ``index`` of ``line`` (a "move"), or from the ends of its segment ``index``."""
    if grab.action == "split":
        band = [line.anchors[index], point, line.anchors[index + 1]]
    else:
        band = [*line.anchors[max(index - 1, 0):index], point, *line.anchors[index + 1:index + 2]]
    return np.array(band, dtype=np.float64)


def _straight(event) -> bool:
    """Shift or Ctrl held: a straight segment instead of a traced one."""
    return bool(event.modifiers() & (Qt.KeyboardModifier.ShiftModifier
                                     | Qt.KeyboardModifier.ControlModifier))


def screen_scale(painter: QPainter) -> float:
    """Scene units per screen pixel under the painter's transform."""
    return 1.0 / max(painter.worldTransform().m11(), 1e-9)


def device_ratio(painter: QPainter) -> float:
    """Device px per screen (logical) px of what ``painter`` draws on: 2 on a high-DPI
    screen at 200 %."""
    return painter.device().devicePixelRatioF()


class RasterItem(QGraphicsItem):
    """The image, drawn from the coarsest pyramid level that is still sharp at this zoom (at
    most one image px per device px), and where the pyramid is not sharp enough, from
    ``tile`` (read by the canvas) over it."""

    def __init__(self, levels: DisplayPyramid) -> None:
        super().__init__()
        self.levels = levels
        self.tile: DisplayTile | None = None
        full, factor = levels[0].image, levels[0].factor
        self._bounds = QRectF(-0.5, -0.5, full.width() * factor, full.height() * factor)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemUsesExtendedStyleOption)
        self.setZValue(-1)
        # Drawn into a pixmap once per zoom (and the parts a pan shows): a partial repaint
        # shows it pixel for pixel as a full one does (a scaled image drawn again in a part can
        # shift its pixels by a screen px there).
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt override)
        return self._bounds

    def paint(self, painter: QPainter, option, widget=None) -> None:
        pixels_per_device_px = screen_scale(painter) / device_ratio(painter)
        level = self.levels[0]
        for candidate in self.levels:
            if candidate.factor <= pixels_per_device_px:
                level = candidate
        target = option.exposedRect.intersected(self._bounds)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform,
                              pixels_per_device_px > 1.0)
        draw_level(painter, target, level, 0, 0)
        if self.tile is not None and self.tile.level.factor < level.factor:
            draw_level(painter, target, self.tile.level, self.tile.window.row0,
                       self.tile.window.col0)


def draw_level(painter: QPainter, target: QRectF, level: DisplayLevel, row0: int,
               col0: int) -> None:
    """Draw the part within ``target`` (scene) of ``level``, whose pixel (0, 0) shows image
    pixel (``row0``, ``col0``)."""
    factor = level.factor
    area = target.intersected(QRectF(col0 - 0.5, row0 - 0.5, level.image.width() * factor,
                                     level.image.height() * factor))
    source = QRectF((area.x() + 0.5 - col0) / factor, (area.y() + 0.5 - row0) / factor,
                    area.width() / factor, area.height() / factor)
    painter.drawImage(area, level.image, source)


class LineItem:
    """One traced line's drawing: its segments (score-coloured or in its kind's colour) and its
    anchors.

    It paints from its own state only (:attr:`line`, :attr:`colour_by_score` and the
    selection), which the canvas sets; :class:`LinesLayer` paints it, with others, through
    :func:`paint_lines`. Its strokes are kept for the zoom's doubling (:meth:`strokes`).
    """

    def __init__(self, line: Line, colour_by_score: bool) -> None:
        self.line = line
        self.colour_by_score = colour_by_score
        self.selected = False
        self.selected_segment: int | None = None  # None with ``selected``: the whole line
        # The strokes built and what for: the line, and (scale, selection, colouring). Tuples
        # of numbers and arrays, which the garbage collector stops tracking: thousands of
        # lines add little to its work.
        self._strokes: Strokes | None = None
        self._built_line: Line | None = None
        self._built_for: tuple | None = None

    def set_selection(self, selected: bool, segment: int | None = None) -> bool:
        """Show the line selected or not (its segment ``segment``, None: all); whether that
        changes its drawing."""
        changed = (selected, segment) != (self.selected, self.selected_segment)
        self.selected, self.selected_segment = selected, segment
        return changed

    def paint(self, painter: QPainter, area: QRectF | None = None) -> None:
        """Paint the line alone (:func:`paint_lines`)."""
        paint_lines(painter, [self], area)

    @property
    def anchor_colour(self) -> QColor:
        """The fill of its anchors: its kind's colour, lighter where it is selected."""
        colour = KIND_COLOURS[self.line.kind]
        return colour.lighter(150) if self.selected else colour

    def style(self) -> LineStyle:
        """How its segments are drawn: in its kind's colours, the selected ones wider."""
        line = self.line
        widths = tuple(SELECTED_WIDTH if self.selected and self.selected_segment in (None, index)
                       else LINE_WIDTH for index in range(len(line.segments)))
        return LineStyle(line.segments, widths, KIND_COLOURS[line.kind], KIND_EDGES[line.kind],
                         self.colour_by_score)

    def strokes(self, scale: float) -> Strokes:
        """The strokes of its segments (:func:`build_strokes`) for ``scale`` scene units per
        screen px (a power of two)."""
        LineItem.prepare([self], scale)
        return self._strokes

    @staticmethod
    def prepare(items: list[LineItem], scale: float) -> None:
        """Build the strokes at ``scale`` of those of ``items`` whose line, selection, colouring
        or scale changed since theirs were built, all in one (:func:`build_strokes`)."""
        stale = [item for item in items if item._built_line is not item.line or item._built_for
                 != (scale, item.selected, item.selected_segment, item.colour_by_score)]
        if stale:
            for item, strokes in zip(stale, build_strokes([item.style() for item in stale],
                                                          scale), strict=True):
                item._strokes = strokes
                item._built_line = item.line
                item._built_for = (scale, item.selected, item.selected_segment,
                                   item.colour_by_score)


def paint_lines(painter: QPainter, items: list[LineItem], area: QRectF | None = None) -> None:
    """Paint ``items`` as painting each in turn would where their drawings meet none of each
    other's (:func:`apart_layers`): each stroke of theirs with one key as one path, the
    strokes in order of key (their halos, edges, then strokes: :data:`STROKE_ORDER`), then
    their anchors. With ``area`` (scene), of a line of :data:`CUT_ELEMENTS` or more that
    reaches beyond it only the parts that may show there (:func:`within`)."""
    scale = screen_scale(painter)
    pad = ITEM_PAD_PX * scale
    level = power_of_two_at_most(scale)
    LineItem.prepare(items, level)
    strokes: dict[tuple, list[np.ndarray]] = {}
    anchors: dict[int, list] = {}
    for item in items:
        keys, parts, size = item.strokes(level)
        if (area is not None and size >= CUT_ELEMENTS
                and not area.contains(points_rect(item.line.bounds, pad))):
            parts = [within(elements, area, pad) for elements in parts]
        for key, elements in zip(keys, parts, strict=True):
            if elements is not None:
                strokes.setdefault(key, []).append(elements)
        anchors.setdefault(item.anchor_colour.rgba(), []).extend(item.line.anchors)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    ratio = device_ratio(painter)
    for key in sorted(strokes):
        painter.setPen(stroke_pen(*key[2:], ratio))
        painter.drawPath(painter_path(strokes[key]))
    for colour, points in anchors.items():
        paint_anchors(painter, points, QColor.fromRgba(colour))


def paint_segment(painter: QPainter, segment: Segment, colour: QColor, edge: QColor,
                  width: float, colour_by_score: bool, dashed: bool = False) -> None:
    """A segment as a polyline at the painter's zoom, in ``colour`` or where
    ``colour_by_score`` and it was traced, its links in their score's colour
    (:func:`build_strokes`), with edges in ``edge`` along both sides."""
    ((keys, parts, _),) = build_strokes([LineStyle((segment,), (width,), colour, edge,
                                                   colour_by_score, dashed)],
                                        screen_scale(painter))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    ratio = device_ratio(painter)
    for key, elements in zip(keys, parts, strict=True):
        painter.setPen(stroke_pen(*key[2:], ratio))
        painter.drawPath(painter_path([elements]))


def paint_anchors(painter: QPainter, anchors, colour: QColor, radius_px: float = 3.5) -> None:
    """Squares ``radius_px`` screen px from their middle to their sides at ``anchors``, each
    drawn over the ones before (one call: :meth:`QPainter.drawRects` draws them in turn)."""
    radius = radius_px * screen_scale(painter)
    painter.setPen(cosmetic_pen(Qt.GlobalColor.black, 1.0, device_ratio(painter)))
    painter.setBrush(colour)
    painter.drawRects([QRectF(x - radius, y - radius, 2 * radius, 2 * radius)
                       for x, y in anchors])
    painter.setBrush(Qt.BrushStyle.NoBrush)


class _Picture:
    """An image of lines and the transform that takes scene points to its (logical) px."""

    def __init__(self, size: QSize, transform: QTransform, ratio: float) -> None:
        """A transparent image of ``size`` device px, at device pixel ratio ``ratio``."""
        self.image = QImage(size.width(), size.height(),
                            QImage.Format.Format_ARGB32_Premultiplied)
        self.image.setDevicePixelRatio(ratio)
        self.image.fill(Qt.GlobalColor.transparent)
        self.transform = transform

    @classmethod
    def around(cls, view: QTransform, rect: QRect, ratio: float) -> _Picture:
        """A picture for the transform ``view`` (scene to view px) of ``rect`` (view px) and
        :data:`LINES_MARGIN` of its size beyond each side."""
        pixels = device_rect(rect, ratio)
        margin_x = math.ceil(pixels.width() * LINES_MARGIN)
        margin_y = math.ceil(pixels.height() * LINES_MARGIN)
        pixels.adjust(-margin_x, -margin_y, margin_x, margin_y)
        return cls(pixels.size(), view * QTransform.fromTranslate(-pixels.x() / ratio,
                                                                  -pixels.y() / ratio), ratio)

    def part(self, pixels: QRect) -> _Picture:
        """A picture of the part ``pixels`` (device px) of this one (see :meth:`paste`)."""
        ratio = self.image.devicePixelRatio()
        return _Picture(pixels.size(), self.transform * QTransform.fromTranslate(
            -pixels.x() / ratio, -pixels.y() / ratio), ratio)

    def paste(self, part: _Picture, pixels: QRect) -> None:
        """Put ``part``, made by :meth:`part` for ``pixels``, in place of what is there."""
        painter = QPainter(self.image)
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_Source)
        painter.drawImage(QPointF(pixels.topLeft()) / self.image.devicePixelRatio(), part.image)
        painter.end()

    def scene_rect(self) -> QRectF:
        """The scene area it shows."""
        return self.transform.inverted()[0].mapRect(
            QRectF(QPointF(0, 0), self.image.deviceIndependentSize()))

    def to_view(self, view: QTransform) -> QTransform:
        """The transform from its px to view px under ``view`` (scene to view px)."""
        return self.transform.inverted()[0] * view

    def place(self, view: QTransform, ratio: float) -> QRect | None:
        """Where it lies in view device px under ``view`` at pixel ratio ``ratio``, if it
        draws there pixel for pixel (the same zoom and ratio, moved by whole px); else None."""
        move = self.to_view(view)
        shift = np.array([move.dx(), move.dy()]) * ratio
        whole = np.rint(shift)
        if (ratio != self.image.devicePixelRatio()
                or not np.allclose([move.m11(), move.m12(), move.m21(), move.m22()],
                                   [1, 0, 0, 1], rtol=0, atol=1e-9)
                or not np.allclose(shift, whole, rtol=0, atol=1e-6)):
            return None
        return self.image.rect().translated(int(whole[0]), int(whole[1]))

    def seen(self, view: QTransform, rect: QRect, ratio: float) -> QRect | None:
        """Its px (maybe beyond the image) that show ``rect`` (view px) under ``view``, if it
        draws there pixel for pixel (:meth:`place`)."""
        place = self.place(view, ratio)
        return None if place is None else device_rect(rect, ratio).translated(-place.topLeft())

    def shows(self, view: QTransform, rect: QRect, ratio: float) -> bool:
        """Whether it shows all of ``rect`` (view px) under ``view`` pixel for pixel."""
        seen = self.seen(view, rect, ratio)
        return seen is not None and self.image.rect().contains(seen)


def device_rect(rect: QRect | QRectF, ratio: float) -> QRect:
    """The device px that ``rect`` (logical px) covers at device pixel ratio ``ratio``."""
    rect = QRectF(rect)
    return QRectF(rect.x() * ratio, rect.y() * ratio, rect.width() * ratio,
                  rect.height() * ratio).toAlignedRect()


class _Job:
    """Lines to draw, layer by layer, into ``picture``, what of them may show in ``area``
    (scene): a new picture to show, or the part ``pixels`` (device px) of the one shown, to
    paste in."""

    def __init__(self, picture: _Picture, layers: list[list[int]], area: QRectF,
                 pixels: QRect | None = None) -> None:
        """``layers``: the ids of lines apart from each other (:func:`apart_layers`), in the
        order drawn."""
        self.picture = picture
        self.pixels = pixels
        self._area = area
        # The lines left to draw, (layer, id), the next last.
        self._left = [(layer, line_id) for layer in range(len(layers) - 1, -1, -1)
                      for line_id in layers[layer][::-1]]
        self._built = 0  # of the lines left, the last ones whose strokes were built at once

    def draw(self, items: dict[int, LineItem], deadline: float) -> bool:
        """Draw lines until ``deadline`` (:func:`time.perf_counter`; one call of
        :func:`paint_lines` at least), lines of one layer as one (:data:`LINES_AT_ONCE`),
        their strokes built some at a time (:data:`BUILT_VERTICES`); whether all are drawn.
        Lines whose item is gone (removed meanwhile) are left out."""
        painter = QPainter(self.picture.image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setWorldTransform(self.picture.transform)
        scale = power_of_two_at_most(screen_scale(painter))
        while self._left:
            if not self._built:
                self._build_next(items, scale)
            layer, batch, size = self._left[-1][0], [], 0
            # Lines built are lines left: while some are built, one is left.
            while (self._built and self._left[-1][0] == layer
                   and len(batch) < LINES_AT_ONCE and size < ELEMENTS_AT_ONCE):
                self._built -= 1
                item = items.get(self._left.pop()[1])
                if item is not None:
                    batch.append(item)
                    size += item.strokes(scale).size
            paint_lines(painter, batch, self._area)
            if time.perf_counter() >= deadline:
                break
        painter.end()
        return not self._left

    def _build_next(self, items: dict[int, LineItem], scale: float) -> None:
        """Build the strokes of the next lines to draw at once: of :data:`BUILT_VERTICES`
        vertices in all (one line at least)."""
        batch, vertices = [], 0
        for _, line_id in reversed(self._left):
            if vertices >= BUILT_VERTICES:
                break
            self._built += 1
            item = items.get(line_id)
            if item is not None:
                batch.append(item)
                vertices += len(item.line.polyline)
        LineItem.prepare(batch, scale)


class LinesLayer(QGraphicsObject):
    """The line items (``items``, in the order drawn), shown from a picture of them drawn at
    the view's zoom.

    Qt takes seconds to stroke thousands of lines (wide, round-joined, antialiased strokes),
    so they are drawn into an image of the view and a margin around it
    (:data:`LINES_MARGIN`), and repaints (an overlay change, a pan within the margin) copy
    from it. What is drawn is the lines whose boxes meet the part being drawn, and of long
    ones their parts there (:func:`within`); each through the vertices that show at the zoom
    (:func:`build_strokes`, kept per doubling of the zoom). Lines are drawn in layers of lines
    apart from each other (:func:`apart_layers`), which keep the order of lines that may
    overlap; a few lines of a layer close together are drawn as one (:func:`paint_lines`),
    as they look drawn one by one.

    A new zoom or device pixel ratio, or a change of every line (:meth:`redraw` with no
    lines), draws a new picture: the lines in view, then the margin; until the view's part is
    drawn the old picture shows, scaled to the zoom. A pan beyond the margin keeps what the
    picture has there and draws the rest. A change of some lines draws again their areas,
    every line there in order, and pastes them in. Drawing goes in slices of
    :data:`DRAW_SLICE_S` between turns of the event loop, the first at once (a few lines show
    without delay).
    """

    def __init__(self, items: dict[int, LineItem], pad: float) -> None:
        super().__init__()
        self.items = items
        self._pad = pad  # scene units beyond a line's points that its drawing may cover
        self._index: tuple[list[int], np.ndarray, QRectF] | None = None  # see _boxes
        self._shown: _Picture | None = None
        self._stale = True  # the picture shown misses changes of every line
        self._job: _Job | None = None
        self._areas: list[QRectF] = []  # scene areas to draw again after the job
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self._work)
        self.setZValue(1)

    def set_pad(self, pad: float) -> None:
        """Scene units beyond a line's points that its drawing may cover (the zoom changed)."""
        if pad != self._pad:
            self.prepareGeometryChange()
            self._pad = pad
            self._index = None

    def lines_changed(self, lines: list[Line]) -> None:
        """Lines were added, changed or removed: ``lines``, their old and new versions."""
        self.prepareGeometryChange()
        self._index = None
        self.redraw(lines)

    def redraw(self, lines: list[Line] | None = None) -> None:
        """Draw again where ``lines`` lie (all lines if None or many, :data:`AREAS_AT_ONCE`)."""
        if lines is None or len(lines) > AREAS_AT_ONCE:
            self._stale = True
            self._job = None
            self._areas.clear()
            self.update()
        elif not self._stale and lines:
            self._areas += [points_rect(line.bounds, self._pad) for line in lines]
            if self._job is None:
                self._job = self._next_part()
                self._work()

    def clear(self) -> None:
        """Show no lines until a new picture of them is drawn."""
        self._shown = None
        self.redraw()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt override)
        return self._boxes()[2]

    def paint(self, painter: QPainter, option, widget=None) -> None:
        """Show the picture, after starting a new one if it does not show the view (and the
        one being drawn does not either): the picture moved, where only the pan changed,
        else drawn anew."""
        view, rect = painter.worldTransform(), widget.rect()
        ratio = device_ratio(painter)
        shown = None if self._stale else self._shown
        drawn = None if self._job is None or self._job.pixels is not None else self._job.picture
        if not any(picture is not None and picture.shows(view, rect, ratio)
                   for picture in (shown, drawn)):
            started = time.perf_counter()
            if shown is not None and drawn is None and shown.place(view, ratio) is not None:
                self._pan(view, rect, ratio)
            else:
                self._draw_anew(view, rect, ratio)
            self._work(in_paint=True, started=started)
        if self._shown is not None:  # not beyond the lines' box: gone lines may be in it
            painter.save()
            painter.setClipRect(self.boundingRect(), Qt.ClipOperation.IntersectClip)
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform,
                                  self._shown.place(view, ratio) is None)
            painter.setWorldTransform(self._shown.to_view(view))
            painter.drawImage(QPointF(0, 0), self._shown.image)
            painter.restore()

    def _draw_anew(self, view: QTransform, rect: QRect, ratio: float) -> None:
        """Draw a new picture of ``rect``: the lines in view, then (once it shows) the
        margin."""
        self._stale = False
        self._areas.clear()
        picture = _Picture.around(view, rect, ratio)
        seen = picture.seen(view, rect, ratio)
        area = picture.part(seen).scene_rect()
        self._job = _Job(picture, self._layers_in(area), area)
        self._draw_later(picture, seen)

    def _pan(self, view: QTransform, rect: QRect, ratio: float) -> None:
        """Show a picture of ``rect`` that has the one shown where they meet, and draw the
        rest (the area of the one shown being drawn again, first)."""
        old, new = self._shown, _Picture.around(view, rect, ratio)
        kept = old.place(view, ratio).translated(-new.place(view, ratio).topLeft())
        new.paste(old, kept)
        if self._job is not None:  # a part of the old picture
            self._areas.insert(0, self._job.picture.scene_rect())
        self._shown = new
        self._draw_later(new, kept)
        self._job = self._next_part()

    def _draw_later(self, picture: _Picture, drawn: QRect) -> None:
        """Add the parts of ``picture`` beyond ``drawn`` (its px) to the areas to draw."""
        self._areas += [picture.part(part).scene_rect() for part in
                        QRegion(picture.image.rect()).subtracted(QRegion(drawn))]

    def _work(self, in_paint: bool = False, started: float | None = None) -> None:
        """Draw for one slice, and again in the next turn of the event loop while some is
        left; show what is done (``in_paint``: a new picture shows in this paint). The slice
        began at ``started`` (:func:`time.perf_counter`; None: now)."""
        deadline = (time.perf_counter() if started is None else started) + DRAW_SLICE_S
        while self._job is not None:
            job = self._job
            if not job.draw(self.items, deadline):
                self._timer.start()
                return
            if job.pixels is not None:
                self._shown.paste(job.picture, job.pixels)
            else:
                self._shown = job.picture
            if not in_paint:
                self.update(job.picture.scene_rect())
            self._job = self._next_part()

    def _next_part(self) -> _Job | None:
        """The job that draws the next area left (:attr:`_areas`) in the picture shown."""
        while self._areas:
            pixels = device_rect(self._shown.transform.mapRect(self._areas.pop(0)),
                                 self._shown.image.devicePixelRatio()) \
                .intersected(self._shown.image.rect())
            if not pixels.isEmpty():
                part = self._shown.part(pixels)
                area = part.scene_rect()
                return _Job(part, self._layers_in(area), area, pixels)
        return None

    def _boxes(self) -> tuple[list[int], np.ndarray, QRectF]:
        """The ids of the lines in the order drawn, their boxes padded, shape (lines, 2, 2),
        and the box of them all."""
        if self._index is None:
            ids = list(self.items)
            boxes = np.array([self.items[i].line.bounds for i in ids],
                             dtype=np.float64).reshape(-1, 2, 2) + [[-self._pad], [self._pad]]
            self._index = (ids, boxes, points_rect(boxes.reshape(-1, 2), 0.0) if ids
                           else QRectF())
        return self._index

    def _layers_in(self, rect: QRectF) -> list[list[int]]:
        """Ids of the lines whose drawing may meet ``rect`` (scene), in layers of lines apart
        from each other (:func:`apart_layers` of their boxes), in the order to draw; those of
        a layer along a Z-order curve (:func:`z_order`), so that the lines drawn as one
        (:func:`paint_lines`) lie close together."""
        ids, boxes, _ = self._boxes()
        meet = np.flatnonzero((boxes[:, 1, 0] >= rect.left()) & (boxes[:, 0, 0] <= rect.right())
                              & (boxes[:, 1, 1] >= rect.top()) & (boxes[:, 0, 1] <= rect.bottom()))
        layers = apart_layers(boxes[meet])
        order = np.lexsort((z_order(boxes[meet].mean(axis=1)), layers))
        return [[ids[index] for index in meet[part].tolist()]
                for part in np.split(order, np.flatnonzero(np.diff(layers[order])) + 1)
                if len(part)]


class OverlayItem(QGraphicsItem):
    """The part that changes as the mouse moves: preview, tail anchor, corridor, dragged vertex.

    It paints from its own state only; the canvas sets it, then calls :meth:`refresh`. Its
    bounds are those of what it shows, so that a change paints only the area it covered and
    the one it covers now.
    """

    def __init__(self) -> None:
        super().__init__()
        self.preview: Segment | None = None
        self.tail: tuple[float, float] | None = None
        self.corridor: Corridor | None = None
        self.colour_by_score = True
        self.drag_lines: np.ndarray | None = None  # (k, 2) rubber band of a dragged vertex
        self._bounds = QRectF()
        self.setZValue(2)

    def refresh(self, pad: float) -> None:
        """Show the content set; ``pad``: scene units beyond its points that its drawing may
        cover at this zoom."""
        parts = [part for part in (
            None if self.corridor is None else self.corridor.guide_points.reshape(-1, 2),
            None if self.corridor is None else np.array([self.corridor.a, self.corridor.b]),
            None if self.preview is None else self.preview.polyline,
            None if self.tail is None else np.array([self.tail], dtype=np.float64),
            self.drag_lines) if part is not None and len(part)]
        self.prepareGeometryChange()
        self._bounds = points_rect(np.vstack(parts), pad) if parts else QRectF()
        self.update()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt override)
        return self._bounds

    def paint(self, painter: QPainter, option=None, widget=None) -> None:
        if self.corridor is not None:
            paint_corridor(painter, self.corridor)
        if self.preview is not None:
            paint_segment(painter, self.preview, PREVIEW_COLOUR, PREVIEW_EDGE, 2.0,
                          self.colour_by_score, dashed=True)
        if self.tail is not None:
            paint_anchors(painter, [self.tail], PREVIEW_COLOUR, 4.5)
        if self.drag_lines is not None:
            painter.setPen(cosmetic_pen(PREVIEW_COLOUR, 1.5, device_ratio(painter),
                                        Qt.PenStyle.DashLine))
            painter.drawPolyline(polygon(self.drag_lines))


def paint_corridor(painter: QPainter, corridor: Corridor) -> None:
    """The paper's Fig. 1: the corridor outline, every guide, and the guide points."""
    ratio = device_ratio(painter)
    pen = cosmetic_pen(CORRIDOR_COLOUR, 1.0, ratio)
    painter.setPen(pen)
    guides = corridor.guide_points
    outline = np.vstack([corridor.a, guides[:, 0], corridor.b, guides[::-1, -1]])
    painter.drawPolygon(polygon(outline))
    painter.drawLines(polygon(np.stack([guides[:, 0], guides[:, -1]], axis=1)))
    if guides.shape[0] * guides.shape[1] <= 4000:
        pen.setWidthF(2.5 * ratio)
        painter.setPen(pen)
        painter.drawPoints(polygon(guides.reshape(-1, 2)))


class Canvas(QGraphicsView):
    """Zoom (wheel, around the cursor), pan (middle drag or Space + drag), click to trace.

    Left click traces (Shift or Ctrl held: straight segment), double-click finishes, a drag on a
    vertex moves it and a drag on a line adds a vertex there (neither while drawing), Alt +
    click selects a segment. A resize keeps the image fitted while the user has not zoomed or
    panned since the last fit, else keeps the point at the view's centre. Where the pyramid is
    coarser than the zoom needs, the part in view is read sharper in a worker
    (:meth:`_request_sharp_tile`).

    Signals
    -------
    cursor_moved(float, float) : the pixel (x, y) under the cursor.
    """

    cursor_moved = Signal(float, float)

    def __init__(self, model: LinesModel, controller: TracingController, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.controller = controller
        self.colour_by_score = True
        self.show_corridor = False
        self.setScene(QGraphicsScene(self))
        self.setBackgroundBrush(QColor(40, 40, 40))
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.NoAnchor)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        # Only what changed is painted again: the overlay's area as the mouse moves, a line's
        # as it changes; the lines there are copied from their image (LinesLayer).
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.MinimalViewportUpdate)
        QPixmapCache.setCacheLimit(max(QPixmapCache.cacheLimit(), PIXMAP_CACHE_KIB))
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setAcceptDrops(False)  # the main window takes dropped files
        self._raster_item: RasterItem | None = None
        self._fitted = False  # no zoom or pan since the last fit: a resize fits again
        self._fit_scale = 1.0  # the scale of the last fit (within the zoom's range)
        self._tiles = JobQueue(self)  # sharp tiles, apart from the tracing worker
        #: The sharp tile being read: its window and the event that cancels it.
        self._tile_request: tuple[TileWindow, threading.Event] | None = None
        #: By line id, for the visible lines, in the order drawn (the last on top).
        self.line_items: dict[int, LineItem] = {}
        self._selected_id: int | None = None  # the line whose item shows the selection
        self._overlay = OverlayItem()
        self._pad = self._item_pad()  # the lines' and overlay's pad (scene units) at this zoom
        self._lines = LinesLayer(self.line_items, self._pad)
        self.scene().addItem(self._lines)
        self.scene().addItem(self._overlay)
        self._space_held = False
        self._pan_from: QPointF | None = None
        #: A press on a vertex or a line, held (the controller follows it through the edits
        #: that land meanwhile): the edit a drag from there makes, at the scene point pressed.
        #: A drag from a vertex moves it, one from a line adds a vertex to that segment; a
        #: click there starts a line on it (or draws on to it).
        self._grab: Edit | None = None
        #: The view position of the press on a vertex or a line, for :meth:`_dragging`.
        self._pressed_at: QPointF | None = None
        model.subscribe(lambda change: self.sync_lines(change.line_ids))
        controller.changed.connect(self._overlay_changed)
        controller.selection_changed.connect(self._selection_changed)
        controller.lines_stale.connect(self.sync_lines)

    # -- content -------------------------------------------------------------------------------
    def set_image(self, levels: DisplayPyramid, fit: bool = True) -> None:
        """Show a display pyramid; ``fit=False`` keeps the view (same-size rasters)."""
        self._cancel_tile_request()
        if self._raster_item is not None:
            self.scene().removeItem(self._raster_item)
        self._raster_item = RasterItem(levels)
        self.scene().addItem(self._raster_item)
        bounds = self._raster_item.boundingRect()
        margin = max(bounds.width(), bounds.height())
        self.setSceneRect(bounds.adjusted(-margin, -margin, margin, margin))
        self.sync_lines()
        if fit:  # another image: the lines' picture is of the last one's
            self._lines.clear()
            self.fit()

    def sync_lines(self, line_ids=None) -> None:
        """Update the items of lines ``line_ids`` (all if None) to the model: new, changed,
        hidden and removed lines; the others stay as they are."""
        if line_ids is None:
            line_ids = {line.id for line in self.model.lines} | set(self.line_items)
        changed = []  # the lines changed, as drawn before and as drawn now
        for line_id in line_ids:
            line, item = self.model.line(line_id), self.line_items.get(line_id)
            if line is None or not line.visible:
                if item is not None:
                    changed.append(self.line_items.pop(line_id).line)
            elif item is None:
                self.line_items[line_id] = LineItem(line, self.colour_by_score)
                changed.append(line)
            elif item.line is not line:
                changed += (item.line, line)
                item.line = line
        if changed:
            self._lines.lines_changed(changed)
        self._selection_changed()

    def _selection_changed(self) -> None:
        """Show the selection on the line items (the old one and the new one)."""
        line_id, segment = self.controller.selection
        changed = []
        old = self.line_items.get(self._selected_id)
        if old is not None and self._selected_id != line_id and old.set_selection(False):
            changed.append(old.line)
        self._selected_id = line_id
        new = self.line_items.get(line_id)
        if new is not None and new.set_selection(True, segment):
            changed.append(new.line)
        self._lines.redraw(changed)
        self._overlay_changed()

    def _overlay_changed(self) -> None:
        """Give the overlay what it shows: the preview, the tail anchor and the corridor."""
        overlay = self._overlay
        overlay.preview, overlay.tail = self.controller.preview, self.controller.tail
        overlay.corridor = self.overlay_corridor()
        overlay.colour_by_score = self.colour_by_score
        overlay.refresh(self._pad)

    def _item_pad(self) -> float:
        """Scene units of :data:`ITEM_PAD_PX` to twice that many screen px at this zoom: the
        zoom rounded down to a power of two, so that the lines' boxes and the overlay's bounds
        change at most once per doubling or halving of the zoom."""
        scale = power_of_two_at_most(max(self.transform().m11(), 1e-9))
        return ITEM_PAD_PX / scale

    def _zoom_changed(self) -> None:
        """Pad the lines' boxes and the overlay's bounds for the new zoom (their drawing's
        width is in screen px)."""
        pad = self._item_pad()
        if pad != self._pad:
            self._pad = pad
            self._lines.set_pad(pad)
            self._overlay.refresh(pad)

    def overlay_corridor(self) -> Corridor | None:
        """The corridor shown by the overlay: the preview's, else the selected segment's."""
        if not self.show_corridor:
            return None
        segment = self.controller.preview
        if segment is None:
            line_id, index = self.controller.selection
            line = self.model.line(line_id)
            if line is not None and line.visible:
                segment = line.segments[index if index is not None else -1]
        if segment is None or segment.params is None:
            return None
        p = segment.params
        return build_corridor(segment.polyline[0], segment.polyline[-1], p.guides, p.points,
                              p.halfwidth)

    def set_colour_by_score(self, on: bool) -> None:
        if on != self.colour_by_score:
            self.colour_by_score = on
            for item in self.line_items.values():
                item.colour_by_score = on
            self._lines.redraw()
        self._overlay_changed()

    def set_show_corridor(self, on: bool) -> None:
        self.show_corridor = on
        self._overlay_changed()

    # -- view ----------------------------------------------------------------------------------
    def fit(self) -> None:
        """Fit the image to the window, centred; resizes keep it so until a zoom or pan."""
        if self._raster_item is not None:
            self.fitInView(self._raster_item.boundingRect(), Qt.AspectRatioMode.KeepAspectRatio)
            self._fitted = True
            self._fit_scale = self.transform().m11()
            self._zoom_changed()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)  # keeps the view's centre (the resize anchor)
        if self._fitted:
            self.fit()

    def zoom(self, factor: float, anchor: QPointF | None = None) -> None:
        """Scale by ``factor`` keeping the scene point under ``anchor`` (view px) in place,
        within :data:`ZOOM_LIMITS` widened to the fitted scale and the current one (a step
        never zooms the other way)."""
        self._fitted = False
        centre = QPointF(self.viewport().rect().center())
        anchor = centre if anchor is None else anchor
        fixed = self.mapToScene(anchor.toPoint())
        scale = self.transform().m11()
        low, high = ZOOM_LIMITS
        new_scale = float(np.clip(scale * factor, min(low, self._fit_scale, scale),
                                  max(high, self._fit_scale, scale)))
        self.scale(new_scale / scale, new_scale / scale)
        self.centerOn(fixed - (anchor - centre) / new_scale)
        self._zoom_changed()

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().paintEvent(event)
        self._request_sharp_tile()

    def _tile_window(self, margin: float) -> TileWindow | None:
        """The pixels in view, widened by ``margin`` of the view's size on each side, at the
        resolution the zoom needs (at most one image px per device px); None where the
        pyramid is sharp enough or nothing of the image is in view."""
        item = self._raster_item
        if item is None or item.levels.source is None:
            return None
        pixels_per_device_px = 1.0 / max(self.transform().m11() * self.devicePixelRatioF(),
                                         1e-9)
        factor = 2 ** max(0, math.floor(math.log2(pixels_per_device_px)))
        if factor >= item.levels[0].factor:
            return None
        view = self.mapToScene(self.viewport().rect()).boundingRect()
        view.adjust(-margin * view.width(), -margin * view.height(),
                    margin * view.width(), margin * view.height())
        source = item.levels.source
        row0 = max(0, math.floor(view.top() + 0.5)) // factor * factor
        col0 = max(0, math.floor(view.left() + 0.5)) // factor * factor
        row1 = min(source.height, math.ceil(view.bottom() + 0.5))
        col1 = min(source.width, math.ceil(view.right() + 0.5))
        if row1 <= row0 or col1 <= col0:
            return None
        return TileWindow(row0, row1, col0, col1, factor)

    def _request_sharp_tile(self) -> None:
        """Read the view's pixels at the resolution the zoom needs, unless the tile shown or
        the one being read covers them; where the pyramid is sharp enough, drop the tile.

        One tile is held and at most one read at a time, in a worker; a read that the view
        has left is cancelled (between two bands of rows). The coarse level shows meanwhile,
        and also where a read fails (tracing then reports the unreadable file).
        """
        visible = self._tile_window(0.0)
        if visible is None:
            self._cancel_tile_request()
            if self._raster_item is not None:
                self._raster_item.tile = None  # its memory back
            return
        held = self._raster_item.tile
        if any(window is not None and window.covers(visible) for window in (
                held and held.window, self._tile_request and self._tile_request[0])):
            return
        self._cancel_tile_request()
        window, pyramid = self._tile_window(TILE_MARGIN), self._raster_item.levels
        cancelled = threading.Event()
        request = self._tile_request = (window, cancelled)

        def done(tile: DisplayTile | None) -> None:
            if tile is not None and self._tile_request is request:
                self._tile_request = None
                self._raster_item.tile = tile
                self._raster_item.update()

        # A read that fails stays the request: it is not tried again while it covers the view.
        self._tiles.submit(Job(lambda: read_tile(pyramid, window, cancelled.is_set), done,
                               lambda exc: None, preview=True))

    def _cancel_tile_request(self) -> None:
        if self._tile_request is not None:
            self._tile_request[1].set()
            self._tile_request = None

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self.zoom(1.0015 ** event.angleDelta().y(), event.position())

    def _scene_xy(self, event) -> tuple[float, float]:
        point = self.mapToScene(event.position().toPoint())
        return point.x(), point.y()

    def _grab_radius(self) -> float:
        return GRAB_RADIUS / max(self.transform().m11(), 1e-9)

    def _anchor_at(self, x: float, y: float,
                   exclude: int | None = None) -> tuple[int, int] | None:
        """(line id, anchor index) of the visible vertex under the cursor (not of line
        ``exclude``), if any."""
        radius = self._grab_radius()
        for line in reversed(self.model.lines):
            if not line.visible or line.id == exclude:
                continue
            distances = np.hypot(*(np.asarray(line.anchors) - (x, y)).T)
            index = int(np.argmin(distances))
            if distances[index] <= radius:
                return line.id, index
        return None

    def _snap_target(self, x: float, y: float,
                     exclude: int | None = None) -> tuple[float, float] | None:
        """The point of a visible line (other than ``exclude``) under the cursor, if any: its
        vertex there, else the nearest point of its polyline (a T-junction)."""
        anchor = self._anchor_at(x, y, exclude)
        if anchor is not None:
            return self.model.line(anchor[0]).anchors[anchor[1]]
        found = self.model.segment_at((x, y), self._grab_radius(), exclude)
        return None if found is None else found[2]

    # -- mouse and keys ------------------------------------------------------------------------
    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        button, modifiers = event.button(), event.modifiers()
        if button == Qt.MouseButton.MiddleButton or (button == Qt.MouseButton.LeftButton
                                                      and self._space_held):
            self._pan_from = event.position()
            self.viewport().setCursor(Qt.CursorShape.ClosedHandCursor)
            return
        if button != Qt.MouseButton.LeftButton:
            return
        x, y = self._scene_xy(event)
        if modifiers & Qt.KeyboardModifier.AltModifier:
            self.controller.select_at((x, y), self._grab_radius())
            return
        # A click or the start of a drag, on a vertex (or, not drawing, a line): see _dragging.
        anchor = self._anchor_at(x, y)
        if anchor is not None:
            self._hold("move", *anchor, (x, y), event)
            if not self.controller.drawing:
                self.controller.select(anchor[0])
            return
        found = None if self.controller.drawing else self.model.segment_at(
            (x, y), self._grab_radius())
        if found is not None:
            self._hold("split", *found[:2], (x, y), event)
            return
        self._press(x, y, event)

    def _hold(self, action: str, line_id: int, index: int, point, event) -> None:
        """Hold vertex ``index`` (``action`` "move") or segment ``index`` ("split") of a line,
        pressed at ``point`` (scene)."""
        self._grab = Edit(action, self.model.line(line_id), index, point)
        self._pressed_at = event.position()
        self.controller.hold(self._grab)

    def _held(self) -> tuple[Line, int] | None:
        """The line held and the index there of the vertex or segment held, as they are now;
        where that is gone, it is let go, and the status bar says so."""
        held = self.controller.grabbed(self._grab)
        if held is None:
            self.controller.tell(GONE[self._grab.action])
            self._let_go()
        return held

    def _let_go(self) -> None:
        self._grab = self._pressed_at = self._overlay.drag_lines = None
        self.controller.hold(None)
        self._overlay_changed()

    def _dragging(self, event) -> bool:
        """Whether the press on a vertex or a line is a drag: once the mouse has gone
        ``DRAG_START`` screen px from where it was pressed (until the release); closer, it is
        a click."""
        if self._overlay.drag_lines is not None:
            return True
        if self._pressed_at is None:
            return False
        moved = event.position() - self._pressed_at
        return max(abs(moved.x()), abs(moved.y())) >= DRAG_START

    def _press(self, x: float, y: float, event) -> None:
        """A click for the tracing tool; on or near a visible line, exactly on it (a
        junction), else at the pixel centre under the cursor."""
        target = self._snap_target(x, y)
        if target is not None:
            self.controller.press(target, _straight(event), exact=True)
        else:
            self.controller.press((x, y), _straight(event))

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if self._pan_from is not None:
            delta = event.position() - self._pan_from
            self._pan_from = event.position()
            self._fitted = False
            scale = self.transform().m11()
            centre = self.mapToScene(self.viewport().rect().center())
            self.centerOn(centre - QPointF(delta.x(), delta.y()) / scale)
            return
        x, y = self._scene_xy(event)
        self.cursor_moved.emit(x, y)
        if self._grab is not None:
            held = self._held()
            if held is not None and not self.controller.drawing and self._dragging(event):
                self._overlay.drag_lines = rubber_band(self._grab, *held, (x, y))
                self._overlay_changed()
            return
        target = self._snap_target(x, y) if self.controller.drawing else None
        if target is not None:  # the preview ends where a click would: on the line
            self.controller.hover(target, _straight(event), exact=True)
        else:
            self.controller.hover((x, y), _straight(event))
        if not self.controller.drawing and not self._space_held:  # what a drag would move
            grab = (self._anchor_at(x, y) is not None
                    or self.model.segment_at((x, y), self._grab_radius()) is not None)
            self.viewport().setCursor(Qt.CursorShape.SizeAllCursor if grab
                                      else Qt.CursorShape.ArrowCursor)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if self._pan_from is not None and event.button() in (Qt.MouseButton.MiddleButton,
                                                             Qt.MouseButton.LeftButton):
            self._pan_from = None
            self.viewport().setCursor(Qt.CursorShape.OpenHandCursor if self._space_held
                                      else Qt.CursorShape.ArrowCursor)
            return
        if self._grab is None or event.button() != Qt.MouseButton.LeftButton:
            return
        grab, dragged = self._grab, self._dragging(event)
        held = self._held()
        if held is None:
            return
        self._let_go()
        line, index = held
        if not dragged and grab.action == "split":  # a click on a line: a junction there
            self._press(*grab.point, event)
        elif not dragged:  # a click on a vertex: a line starts there, or goes on to it
            self.controller.press(line.anchors[index], _straight(event), exact=True)
        elif self.controller.drawing:
            self.controller.tell(NOT_WHILE_DRAWING)
        else:  # dropped on another line: exactly on it
            x, y = self._scene_xy(event)
            target = self._snap_target(x, y, exclude=line.id)
            edit = (self.controller.split_segment if grab.action == "split"
                    else self.controller.move_anchor)
            edit(line.id, index, target or (x, y), exact=target is not None)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 (Qt override)
        """The double-click's point ends the line (platforms that skip its press included)."""
        if event.button() == Qt.MouseButton.LeftButton and self.controller.drawing:
            self._press(*self._scene_xy(event), event)
            self.controller.finish()

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.key() == Qt.Key.Key_Space and not event.isAutoRepeat():
            self._space_held = True
            self.viewport().setCursor(Qt.CursorShape.OpenHandCursor)
            return
        super().keyPressEvent(event)

    def keyReleaseEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.key() == Qt.Key.Key_Space and not event.isAutoRepeat():
            self._space_held = False
            self._pan_from = None
            self.viewport().setCursor(Qt.CursorShape.ArrowCursor)
            return
        super().keyReleaseEvent(event)

    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:  # noqa: N802 (Qt override)
        if self._raster_item is None:
            painter.resetTransform()
            painter.setPen(Qt.GlobalColor.lightGray)
            painter.drawText(self.viewport().rect(), Qt.AlignmentFlag.AlignCenter,
                             "Open an image (File ▸ Open image…, or drop a file here)")

