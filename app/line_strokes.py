"""Strokes of traced lines, built with numpy for drawing many lines fast.

A line's segments in a style (:class:`LineStyle`) become its strokes (:func:`build_strokes`):
the selection halo, edges, plain strokes and links coloured by score, each as QPainterPath
elements through the vertices that show at the zoom. Also the pens and paths they are drawn
with (:func:`stroke_pen`, :func:`painter_path`), the parts of a path that show in an area
(:func:`within`), and the order of lines drawn together (:func:`apart_layers`,
:func:`z_order`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from PySide6.QtCore import QByteArray, QDataStream, QRectF, Qt
from PySide6.QtGui import QColor, QPainterPath, QPen

from app.model import Segment

#: Screen px of the edge on each side of a line's stroke.
EDGE_WIDTH = 1.5
#: Stroke width (screen px) of a selected line or segment: with the selection halo.
SELECTED_WIDTH = 3.5
#: The halo under a selected line or segment, drawn in this order: (colour, screen px it
#: adds to each side of the stroke); a white band in a black rim shows on any imagery.
SELECTION_HALO = ((QColor(0, 0, 0), 6.0), (QColor(255, 255, 255), 5.0))
#: The colours of scores from weakest to strongest: ColorBrewer's RdYlBu (9 classes), red →
#: pale yellow → blue, whose steps stay apart also with red-green colour blindness (a red to
#: green scale is one yellow from the middle up to deuteranopes and protanopes). The pale
#: middle shows over bright imagery within the line's edges.
SCORE_PALETTE = ((215, 48, 39), (244, 109, 67), (253, 174, 97), (254, 224, 144),
                 (255, 255, 191), (224, 243, 248), (171, 217, 233), (116, 173, 209),
                 (69, 117, 180))
#: Links coloured by score are drawn in this many colours along :data:`SCORE_PALETTE`
#: (linear in sRGB between its colours), all the links of one colour in one call.
SCORE_STEPS = 16
STEP_COLOURS = tuple(QColor(*rgb) for rgb in np.rint(np.column_stack([
    np.interp(np.linspace(0, len(SCORE_PALETTE) - 1, SCORE_STEPS),
              np.arange(len(SCORE_PALETTE)), channel)
    for channel in zip(*SCORE_PALETTE, strict=True)])).astype(int).tolist())
STEP_RGBA = np.array([colour.rgba() for colour in STEP_COLOURS], dtype=np.int64)
#: The least score per px (a link's mean term, core/scores.py) that the colours span from a
#: line's strongest link to red (:func:`build_strokes`): half the range of the term of every
#: score kind but ``cross`` (1 wide: ``surface``'s from −1.5, no evidence, to −0.5, on its
#: ridge), so that a line scored alike throughout does not show false weak spots.
SCORE_SPREAD = 0.5
#: Vertices that add nothing at this zoom are not drawn: of consecutive vertices within one
#: cell of a grid of at most this many screen px, only the first (the line moves < 0.71 px).
#: The cell is this many px at the zoom rounded up to a power of two (0.25 to 0.5 px at the
#: zoom itself), so that a line is drawn along the same path at every zoom of one doubling.
THIN_PX = 0.5
#: Of the vertices left, those that the line passes within this many screen px of without
#: them (at the zoom rounded up to a power of two, as :data:`THIN_PX`) are not drawn either
#: (:func:`simplified`); where links are coloured by score, each run of one colour is
#: simplified on its own, so every link keeps its colour.
SIMPLIFY_PX = 0.125
#: :func:`simplified` starts from spans of at most this many links: a span takes a round per
#: bend where the vertex furthest from its chord lies next to an end (a meandering river's,
#: bend after bend), each round over all its vertices.
SIMPLIFY_SPAN = 128
#: What a line draws, in this order, each over the one before: the halo of a selected line
#: (:data:`SELECTION_HALO`, two strokes), its edges, its strokes in one colour (its kind's;
#: dashed for straight segments), then its links coloured by score. A stroke's key is (the
#: index here, the score colour's step, width, colour as ARGB, dashed): strokes are drawn in
#: the order of their keys, of one line alone and of lines apart drawn as one
#: (:func:`app.canvas.paint_lines`).
STROKE_ORDER = ("halo rim", "halo band", "edges", "plain", "scored")
#: A QPainterPath element as QDataStream reads it: type, x, y (big-endian); and the types.
PATH_ELEMENT = np.dtype([("type", ">i4"), ("x", ">f8"), ("y", ">f8")])
MOVE_TO, LINE_TO = 0, 1
#: What QDataStream writes after a QPainterPath's elements: the index of an element that
#: starts a subpath (the first), and the fill rule.
PATH_END = np.array([0, Qt.FillRule.WindingFill.value], ">i4").tobytes()
#: Cells along the longer side of the grid that stands for the lines' boxes where they are
#: sorted into layers of lines apart (:func:`apart_layers`).
LAYER_GRID = 128


def first_in_cells(points: np.ndarray, firsts: np.ndarray, cell: float) -> np.ndarray:
    """Which vertices of polylines are worth drawing where ``cell`` (> 0) scene units are
    :data:`THIN_PX` screen px: the first of each run of consecutive vertices within one cell of
    a grid of that size, and each polyline's last vertex.

    Parameters
    ----------
    points : ndarray of shape (N, 2)
        The polylines one after the other.
    firsts : ndarray of int
        The index of each polyline's first vertex, ascending, 0 the first.
    cell : float

    Returns
    -------
    ndarray of bool, shape (N,)
    """
    keep = np.ones(len(points), dtype=bool)
    cells = np.floor(points / cell)
    np.any(cells[1:] != cells[:-1], axis=1, out=keep[1:])
    keep[firsts] = True
    keep[np.append(firsts[1:], len(points)) - 1] = True
    return keep


def simplified(points: np.ndarray, firsts: np.ndarray, tolerance: float) -> np.ndarray:
    """Which vertices of polylines to keep so that each strays at most ``tolerance`` from
    its vertices (Ramer–Douglas–Peucker, all polylines at once): from its ends and every
    :data:`SIMPLIFY_SPAN`-th vertex, each span whose vertex furthest from the segment between
    its ends lies further than ``tolerance`` is split at that vertex, round by round.

    Parameters
    ----------
    points : ndarray of shape (N, 2)
        The polylines one after the other.
    firsts : ndarray of int
        The index of each polyline's first vertex, ascending, 0 the first.
    tolerance : float

    Returns
    -------
    ndarray of bool, shape (N,)
    """
    lasts = np.append(firsts[1:], len(points)) - 1
    keep = (np.arange(len(points)) - np.repeat(firsts, lasts - firsts + 1)) % SIMPLIFY_SPAN == 0
    keep[lasts] = True
    ends = np.flatnonzero(keep)
    spans = np.diff(ends) > 1  # with vertices between their ends
    low, high = ends[:-1][spans], ends[1:][spans]
    while len(low):
        inner = high - low - 1  # vertices between the ends of each span
        starts = np.cumsum(inner) - inner
        span = np.repeat(np.arange(len(low)), inner)
        index = np.arange(inner.sum()) + np.repeat(low + 1 - starts, inner)
        origin = points[low][span]
        chord, offset = points[high][span] - origin, points[index] - origin
        along = np.clip(np.einsum("ij,ij->i", offset, chord)
                        / np.maximum(np.einsum("ij,ij->i", chord, chord), 1e-300), 0.0, 1.0)
        distance = np.hypot(*(offset - along[:, None] * chord).T)
        furthest = np.maximum.reduceat(distance, starts)
        at_furthest = np.flatnonzero(distance == furthest[span])
        first_furthest = at_furthest[np.flatnonzero(np.diff(span[at_furthest], prepend=-1))]
        split = furthest > tolerance
        middle = index[first_furthest][split]  # where the spans that stray too far split
        keep[middle] = True
        low, high = np.concatenate([low[split], middle]), np.concatenate([middle, high[split]])
        low, high = low[high - low > 1], high[high - low > 1]
    return keep


def cosmetic_pen(colour, width: float, ratio: float, style=Qt.PenStyle.SolidLine) -> QPen:
    """A pen ``width`` screen (logical) px wide whatever the zoom, on a device of ``ratio``
    device px per screen px (its ``devicePixelRatioF()``: Qt draws a cosmetic pen's width in
    device px)."""
    pen = QPen(colour, width * ratio, style)
    pen.setCosmetic(True)
    return pen


class LineStyle(NamedTuple):
    """How :func:`build_strokes` draws a line's segments."""

    segments: tuple[Segment, ...]
    #: Each segment's stroke, screen px; :data:`SELECTED_WIDTH`: with the selection halo.
    widths: tuple[float, ...]
    #: Of the strokes not coloured by score.
    colour: QColor
    #: Of the edges along both sides of the strokes; None: no edges.
    edge: QColor | None
    #: The links of traced segments in their score's colour (:func:`build_strokes`).
    colour_by_score: bool
    #: Every stroke dashed (a straight segment's always is).
    dashed: bool = False


class Strokes(NamedTuple):
    """A line's strokes (:func:`build_strokes`), in the order drawn."""

    #: Of each stroke: (its place in :data:`STROKE_ORDER`, score colour step, width, colour as
    #: ARGB, dashed), one of :data:`STROKE_KEYS`.
    keys: tuple[tuple, ...]
    #: Of each stroke, its path elements (:data:`PATH_ELEMENT`).
    parts: tuple[np.ndarray, ...]
    #: The path elements in all: the work of drawing them.
    size: int


#: Every stroke key made, each once (the keys of thousands of lines are the same few).
STROKE_KEYS: dict[tuple, tuple] = {}


def build_strokes(styles: list[LineStyle], scale: float) -> list[Strokes]:
    """The strokes of lines drawn in ``styles``, all built at once, where ``scale`` scene
    units are a screen px.

    A line's strokes are the halo of its selected segments (width :data:`SELECTED_WIDTH`),
    the edges of all of them, then their strokes: in the line's colour, dashed if the style is
    or the segment straight, or where the style colours by score, the links of traced
    segments in their score's colour, each run of links of one colour a subpath, the runs of
    one width and colour one stroke, from red to blue (where a line crosses itself, the
    stronger link is on top).

    Colours (:data:`STEP_COLOURS`): each link's score per pixel below the line's highest, on
    a scale from blue (the highest) through pale yellow to red (the line's lowest, or
    :data:`SCORE_SPREAD` below its highest where its scores lie closer together). A line
    whose links score alike is all blue, and differences much smaller than the spread of a
    score kind's term stay near blue. Scores are not comparable across images and score
    kinds, so the colours show where a line is weakest (where to look for a wrong turn), not
    how good it is against other lines. (``cross`` scores are gradients in image values, of
    8- and 16-bit imagery mostly within 0.1 of each other: its weak spots show faintly.)

    Vertices: those worth drawing at ``scale`` (:func:`first_in_cells`); a link drawn for
    several takes the colour of the last of them. Of these, the polylines of the halo, edges
    and plain strokes, and each run of one colour, are :func:`simplified` to
    :data:`SIMPLIFY_PX`.
    """
    segments = [segment for style in styles for segment in style.segments]
    counts = np.array([len(segment.polyline) for segment in segments])
    firsts = np.cumsum(counts) - counts
    points = np.concatenate([segment.polyline for segment in segments])
    segment_line = np.repeat(np.arange(len(styles)), [len(style.segments) for style in styles])
    kept = np.flatnonzero(first_in_cells(points, firsts, THIN_PX * scale))
    kept_firsts = np.searchsorted(kept, firsts)
    tolerance = SIMPLIFY_PX * scale
    simple = simplified(points[kept], kept_firsts, tolerance)
    shapes = points[kept[simple]]  # each segment's polyline: its halo, edges and plain stroke
    shape_firsts = np.cumsum(simple)[kept_firsts] - 1
    by_score = (np.array([not segment.is_straight for segment in segments])
                & np.array([style.colour_by_score for style in styles])[segment_line])
    runs = score_runs(segments, points, firsts, segment_line, by_score, kept, kept_firsts,
                      tolerance)
    widths = np.array([width for style in styles for width in style.widths])
    run_line = segment_line[runs.segment]
    run_subpaths = Subpaths(
        run_line, np.full(len(run_line), STROKE_ORDER.index("scored")), runs.step,
        widths[runs.segment], STEP_RGBA[runs.step],
        np.array([style.dashed for style in styles])[run_line], np.arange(len(run_line)),
        runs.firsts + len(shapes), runs.ends + len(shapes))  # their points after the shapes'
    segments_subpaths = segment_subpaths(styles, segments, segment_line, widths, by_score,
                                         shape_firsts, np.append(shape_firsts[1:], len(shapes)))
    return strokes_per_line(Subpaths.join([*segments_subpaths, run_subpaths]),
                        np.concatenate([shapes, runs.points]), len(styles))


class Subpaths(NamedTuple):
    """Subpaths of lines' strokes, a column each: the line, the stroke's key (as in
    :attr:`Strokes.keys`: order, colour step, width, colour, dashed), the subpath's place
    among the line's of that key, and the span of its points (from ``begin`` to ``end``) in
    an array of points."""

    line: np.ndarray
    order: np.ndarray
    step: np.ndarray
    width: np.ndarray
    colour: np.ndarray
    dashed: np.ndarray
    place: np.ndarray
    begin: np.ndarray
    end: np.ndarray

    @staticmethod
    def join(parts: list[Subpaths]) -> Subpaths:
        """The subpaths of ``parts``, one after the other."""
        return Subpaths(*(np.concatenate(column) for column in zip(*parts, strict=True)))


def segment_subpaths(styles: list[LineStyle], segments: list[Segment],
                     segment_line: np.ndarray, widths: np.ndarray, by_score: np.ndarray,
                     begin: np.ndarray, end: np.ndarray) -> list[Subpaths]:
    """The subpaths along whole segments (their points from ``begin`` to ``end``): the halo
    (two strokes) of those :data:`SELECTED_WIDTH` wide, the edges of those whose line has
    edges, the plain strokes of those not ``by_score``."""
    edged = np.array([style.edge is not None for style in styles])[segment_line]
    edge_colours = np.array([0 if style.edge is None else style.edge.rgba()
                             for style in styles])[segment_line]
    colours = np.array([style.colour.rgba() for style in styles])[segment_line]
    dashed = (np.array([style.dashed for style in styles])[segment_line]
              | np.array([segment.is_straight for segment in segments]))
    halo = widths == SELECTED_WIDTH
    strokes = [(STROKE_ORDER.index(name), halo, SELECTED_WIDTH + 2 * extra,
                np.full(len(segments), colour.rgba()), False)
               for name, (colour, extra) in zip(("halo rim", "halo band"), SELECTION_HALO,
                                                 strict=True)]
    strokes += [(STROKE_ORDER.index("edges"), edged, widths + 2 * EDGE_WIDTH, edge_colours,
                 False),
                (STROKE_ORDER.index("plain"), ~by_score, widths, colours, dashed)]
    parts = []
    for order, which, width, colour, dashes in strokes:
        index = np.flatnonzero(which)
        parts.append(Subpaths(segment_line[index], np.full(len(index), order),
                              np.zeros(len(index), np.intp),
                              np.broadcast_to(width, len(segments))[index], colour[index],
                              np.broadcast_to(dashes, len(segments))[index], index,
                              begin[index], end[index]))
    return parts


def strokes_per_line(subpaths: Subpaths, points: np.ndarray, lines: int) -> list[Strokes]:
    """The strokes of each of ``lines`` lines from their ``subpaths`` through ``points``:
    the subpaths of one key a stroke, in order of key and then of place."""
    sort = np.lexsort(subpaths[6::-1])  # by line, key, place
    line, begin, end = subpaths.line[sort], subpaths.begin[sort], subpaths.end[sort]
    keys = [column[sort] for column in subpaths[1:6]]
    lengths = end - begin
    starts = np.cumsum(lengths) - lengths  # each subpath's first element
    source = points[np.arange(lengths.sum()) + np.repeat(begin - starts, lengths)]
    elements = np.empty(len(source), PATH_ELEMENT)
    elements["x"], elements["y"] = source[:, 0], source[:, 1]
    elements["type"] = LINE_TO
    elements["type"][starts] = MOVE_TO
    stroke_starts = np.flatnonzero(np.any([np.diff(column, prepend=-1) != 0
                                           for column in (line, *keys)], axis=0))
    bounds = [*starts[stroke_starts].tolist(), len(elements)]
    stroke_keys = [STROKE_KEYS.setdefault(key, key) for key in
                   zip(*(column[stroke_starts].tolist() for column in keys), strict=True)]
    line_starts = [*np.flatnonzero(np.diff(line[stroke_starts], prepend=-1)).tolist(),
                   len(stroke_starts)]
    sizes = np.bincount(line, weights=lengths, minlength=lines).astype(int).tolist()
    strokes = []
    for first, last, size in zip(line_starts[:-1], line_starts[1:], sizes, strict=True):
        offset = bounds[first]
        own = elements[offset:bounds[last]].copy()  # not a view: lines are built again apart
        strokes.append(Strokes(tuple(stroke_keys[first:last]), tuple(
            own[begin - offset:end - offset]
            for begin, end in zip(bounds[first:last], bounds[first + 1:last + 1], strict=True)),
            size))
    return strokes


class ScoreRuns(NamedTuple):
    """Runs of links of one score colour (:func:`score_runs`), each simplified: their points
    one run after the other, and of each run its first point and the end of its points, its
    colour step and its segment."""

    points: np.ndarray
    firsts: np.ndarray
    ends: np.ndarray
    step: np.ndarray
    segment: np.ndarray


def score_runs(segments, points, firsts, segment_line, by_score, kept, kept_firsts,
               tolerance) -> ScoreRuns:
    """The runs of links of one colour of the segments ``by_score`` (:func:`build_strokes`).

    Parameters
    ----------
    segments : list of Segment
    points : ndarray of shape (N, 2)
        Their polylines one after the other, each from its index in ``firsts``.
    firsts : ndarray of int
    segment_line : ndarray of int
        The line of each segment, ascending.
    by_score : ndarray of bool
        Whether each segment's links are coloured by score.
    kept : ndarray of int
        The indices of the vertices drawn (:func:`first_in_cells`), each segment's from its
        index in ``kept_firsts``.
    kept_firsts : ndarray of int
    tolerance : float
        Scene units each run may stray from its links (:func:`simplified`).
    """
    empty = np.zeros(0, np.intp)
    if not by_score.any():
        return ScoreRuns(np.zeros((0, 2)), empty, empty, empty, empty)
    # Every link's score per px (segment s's link i is the (firsts[s] - s + i)-th), NaN where
    # not by score, and each line's lowest and highest (NaN where none is by score).
    scores = np.concatenate([segment.link_scores if by_score[index]
                             else np.full(len(segment.polyline) - 1, np.nan)
                             for index, segment in enumerate(segments)])
    within_segment = np.ones(len(points) - 1, dtype=bool)
    within_segment[firsts[1:] - 1] = False
    per_px = scores / np.maximum(np.hypot(*np.diff(points, axis=0).T)[within_segment], 1e-9)
    line_links = (firsts - np.arange(len(segments)))[np.flatnonzero(
        np.diff(segment_line, prepend=-1))]
    low, high = (extreme.reduceat(per_px, line_links) for extreme in (np.fmin, np.fmax))
    # The links drawn (kept[i] → kept[i + 1]) by score, their colour steps, and their runs.
    kept_segment = np.repeat(np.arange(len(segments)),
                             np.diff(np.append(kept_firsts, len(kept))))
    drawn = np.flatnonzero((kept_segment[1:] == kept_segment[:-1])
                           & by_score[kept_segment[:-1]])
    segment = kept_segment[drawn]
    line = segment_line[segment]
    spread = np.maximum(high[line] - low[line], SCORE_SPREAD)
    quality = np.clip(1.0 - (high[line] - per_px[kept[drawn + 1] - 1 - segment]) / spread,
                      0.0, 1.0)
    step = np.rint(quality * (SCORE_STEPS - 1)).astype(np.intp)
    run_starts = np.ones(len(drawn), dtype=bool)
    run_starts[1:] = (segment[1:] != segment[:-1]) | (step[1:] != step[:-1])
    first_links = np.flatnonzero(run_starts)
    counts = np.diff(np.append(first_links, len(drawn))) + 1  # vertices of each run
    run_firsts = np.cumsum(counts) - counts
    run_points = points[kept[np.arange(counts.sum())
                             + np.repeat(drawn[first_links] - run_firsts, counts)]]
    simple = simplified(run_points, run_firsts, tolerance)
    simple_firsts = np.cumsum(simple)[run_firsts] - 1
    return ScoreRuns(run_points[simple], simple_firsts,
                     np.append(simple_firsts[1:], simple.sum()), step[first_links],
                     segment[first_links])


def painter_path(parts: list[np.ndarray]) -> QPainterPath:
    """A QPainterPath (winding fill) of the path elements ``parts``, read in one block from
    the bytes that :class:`QDataStream` would write for it: the elements' count, the elements,
    the index of an element that starts a subpath, and the fill rule."""
    path = QPainterPath()
    QDataStream(QByteArray(b"".join([sum(map(len, parts)).to_bytes(4, "big"),
                                     *(part.tobytes() for part in parts),
                                     PATH_END]))) >> path
    return path


def within(elements: np.ndarray, area: QRectF, pad: float) -> np.ndarray | None:
    """The part of the path ``elements`` that a pen at most ``pad`` scene units wide on each
    side may show in ``area`` (scene), drawn there as the whole is (``elements`` itself if
    all of it may; None if none): of each subpath, the links from the first to the last that
    come within ``pad`` of ``area``. Their ends lie further than that from ``area``, so their
    caps there do not show in it, and each is stroked as one, so that where it crosses itself
    it looks as the whole does."""
    x, y = elements["x"], elements["y"]
    links = elements["type"][1:] != MOVE_TO  # the link from each element to the next
    meet = links & ((np.maximum(x[:-1], x[1:]) >= area.left() - pad)
                    & (np.minimum(x[:-1], x[1:]) <= area.right() + pad)
                    & (np.maximum(y[:-1], y[1:]) >= area.top() - pad)
                    & (np.minimum(y[:-1], y[1:]) <= area.bottom() + pad))
    if np.array_equal(meet, links):
        return elements
    if not meet.any():
        return None
    met = np.flatnonzero(meet)
    subpath = np.cumsum(elements["type"] == MOVE_TO)[met]
    new = np.flatnonzero(np.diff(subpath, prepend=-1))  # each subpath's first link met
    firsts, lasts = met[new], met[np.append(new[1:], len(met)) - 1]
    keep = np.zeros(len(elements) + 1, np.int64)
    np.add.at(keep, firsts, 1)
    np.add.at(keep, lasts + 2, -1)
    keep = np.cumsum(keep[:-1]) > 0
    part = elements[keep]
    part["type"][np.cumsum(keep)[firsts] - 1] = MOVE_TO
    return part


@functools.cache
def stroke_pen(width: float, rgba: int, dashed: bool, ratio: float) -> QPen:
    """The pen of strokes keyed with ``width``, ``rgba`` and ``dashed``
    (:data:`STROKE_ORDER`) on a device of ``ratio`` device px per screen px: cosmetic
    (:func:`cosmetic_pen`), with round caps and joins."""
    pen = cosmetic_pen(QColor.fromRgba(rgba), width, ratio,
                       Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    return pen


def apart_layers(boxes: np.ndarray) -> np.ndarray:
    """The layer of each of ``boxes`` (shape (boxes, 2, 2): [[x0, y0], [x1, y1]]), in the
    order drawn: one above the highest layer of the boxes before it that it meets. Boxes of
    one layer meet none of each other, and drawn layer by layer, any two that meet keep their
    order.

    A grid of :data:`LAYER_GRID` cells along the longer side of all the boxes stands for
    them: each box covers the cells it meets, and takes the layer above their highest."""
    layers = np.empty(len(boxes), np.int32)
    if not len(boxes):
        return layers
    low = boxes[:, 0].min(axis=0)
    cell = max(float((boxes[:, 1].max(axis=0) - low).max()) / LAYER_GRID, 1e-9)
    first = np.minimum(((boxes[:, 0] - low) / cell).astype(np.int64), LAYER_GRID - 1)
    last = np.minimum(((boxes[:, 1] - low) / cell).astype(np.int64), LAYER_GRID - 1)
    tops = np.zeros((LAYER_GRID, LAYER_GRID), np.int32)  # the highest layer in each cell
    for index, (x0, y0, x1, y1) in enumerate(np.hstack([first, last]).tolist()):
        cells = tops[y0:y1 + 1, x0:x1 + 1]
        layers[index] = layer = cells.max() + 1
        cells[...] = layer
    return layers


def z_order(points: np.ndarray) -> np.ndarray:
    """Keys that order ``points`` (N, 2) along a Z-order curve over a grid of
    :data:`LAYER_GRID` cells a side on their box: points close in that order lie close
    together (Qt fills a path of points spread far apart more slowly)."""
    if not len(points):
        return np.zeros(0, np.int64)
    low = points.min(axis=0)
    cell = max(float((points.max(axis=0) - low).max()) / LAYER_GRID, 1e-9)
    cells = np.minimum(((points - low) / cell).astype(np.int64), LAYER_GRID - 1)
    keys = np.zeros(len(points), np.int64)
    for bit in range(LAYER_GRID.bit_length()):
        keys |= (((cells[:, 0] >> bit) & 1) << (2 * bit)) | (((cells[:, 1] >> bit) & 1)
                                                             << (2 * bit + 1))
    return keys
