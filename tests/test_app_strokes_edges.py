"""Lines' strokes (app/line_strokes.py) on the edge cases of real lines, each drawn as the canvas
draws it and compared with a simple reference drawing through every vertex with the same pens
(or its path elements checked): segments of 2 vertices or of zero length, repeated vertices,
lines that double back or cross themselves, 100 000 vertices, far and negative coordinates,
straight and traced segments together, scores all equal or alternating, a selected line or
segment, the extreme zooms, overlapping lines, and a line edited at the same zoom (offscreen,
pytest-qt, untimed).

Not tested, as no line can have them: segments of one vertex (a session's polyline has 2 or
more, a trace's and a straight segment's too) and scores that are NaN or infinite (a session's
are finite, and the path search fails rather than return a path through a link that is not).
"""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QTransform

from app import line_strokes
from app.canvas import (
    KIND_COLOURS,
    ZOOM_LIMITS,
    Canvas,
    LineItem,
    paint_anchors,
    paint_lines,
    polygon,
)
from app.display import display_pyramid
from app.line_strokes import (
    EDGE_WIDTH,
    MOVE_TO,
    PATH_ELEMENT,
    SCORE_SPREAD,
    SCORE_STEPS,
    SELECTED_WIDTH,
    SELECTION_HALO,
    STEP_COLOURS,
    STROKE_ORDER,
    apart_layers,
    painter_path,
    simplified,
    stroke_pen,
)
from app.model import Line, Segment
from core.tracer import TraceParams
from tests.conftest import shown_canvas
from tests.test_app_paint import differing, drawn, painted_afresh, settle, shown

BACKGROUND = QColor(128, 128, 128)
IDENTITY = QTransform()


def traced(points, scores=None) -> Segment:
    """A traced segment through ``points``, its link scores ``scores`` (default: varying along
    it, over the whole range of colours)."""
    polyline = np.asarray(points, dtype=np.float64)
    lengths = np.hypot(*np.diff(polyline, axis=0).T)
    if scores is None:
        scores = np.sin(np.arange(len(lengths)) / 3.0) * lengths
    scores = np.asarray(scores, dtype=np.float64)
    return Segment(polyline, scores, float(scores.sum()), TraceParams(), TraceParams(), "cpu")


def line_of(*segments: Segment, kind: str = "road", line_id: int = 1) -> Line:
    anchors = (tuple(segments[0].polyline[0]), *(tuple(s.polyline[-1]) for s in segments))
    return Line(line_id, f"line {line_id}", kind, anchors, segments)


def item_of(line: Line, colour_by_score: bool = True, selected: bool = False,
            segment: int | None = None) -> LineItem:
    item = LineItem(line, colour_by_score)
    item.set_selection(selected, segment)
    return item


def reference(painter: QPainter, item: LineItem) -> None:
    """Draw ``item`` simply: each segment's halo (if selected), edges and stroke through every
    vertex of it, or the runs of its links of one score colour (per px, below the line's
    highest, over its range of them or :data:`SCORE_SPREAD`) through every vertex of theirs,
    from red to blue; then its anchors."""
    style = item.style()
    pairs = list(zip(style.segments, style.widths, strict=True))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    for colour, extra in SELECTION_HALO:
        for segment, width in pairs:
            if width == SELECTED_WIDTH:
                painter.setPen(stroke_pen(width + 2 * extra, colour.rgba(), False, 1.0))
                painter.drawPolyline(polygon(segment.polyline))
    for segment, width in pairs:
        painter.setPen(stroke_pen(width + 2 * EDGE_WIDTH, style.edge.rgba(), False, 1.0))
        painter.drawPolyline(polygon(segment.polyline))
    per_px = [s.link_scores_per_px for s in style.segments if not s.is_straight]
    values = np.concatenate(per_px) if per_px else np.zeros(1)
    low, high = values.min(), values.max()
    runs = []
    for segment, width in pairs:
        if segment.is_straight or not item.colour_by_score:
            painter.setPen(stroke_pen(width, style.colour.rgba(), segment.is_straight, 1.0))
            painter.drawPolyline(polygon(segment.polyline))
            continue
        quality = np.clip(1 - (high - segment.link_scores_per_px) / max(high - low, SCORE_SPREAD),
                          0, 1)
        steps = np.rint(quality * (SCORE_STEPS - 1)).astype(int)
        bounds = [0, *(np.flatnonzero(np.diff(steps)) + 1).tolist(), len(steps)]
        runs += [(int(steps[first]), width, segment.polyline[first:last + 1])
                 for first, last in zip(bounds[:-1], bounds[1:], strict=True)]
    for step, width, points in sorted(runs, key=lambda run: run[:2]):
        painter.setPen(stroke_pen(width, STEP_COLOURS[step].rgba(), False, 1.0))
        painter.drawPolyline(polygon(points))
    paint_anchors(painter, item.line.anchors, item.anchor_colour)


def picture(draw, transform: QTransform = IDENTITY, size: int = 300) -> np.ndarray:
    """RGB pixels (int) of ``draw(painter)`` on grey under ``transform``."""
    image = QImage(size, size, QImage.Format.Format_RGB32)
    image.fill(BACKGROUND)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setWorldTransform(transform)
    draw(painter)
    painter.end()
    pixels = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
    return pixels.reshape(size, size, 4)[..., 2::-1].astype(int)


def view_of(centre, zoom: float, size: int = 300) -> QTransform:
    """``zoom`` screen px a scene unit, scene point ``centre`` in the middle."""
    return (QTransform.fromTranslate(-centre[0], -centre[1]) * QTransform.fromScale(zoom, zoom)
            * QTransform.fromTranslate(size / 2, size / 2))


def both(item: LineItem, transform: QTransform = IDENTITY) -> tuple[np.ndarray, np.ndarray]:
    """``item`` drawn as the canvas draws it, and by :func:`reference`."""
    return (picture(lambda painter: paint_lines(painter, [item]), transform),
            picture(lambda painter: reference(painter, item), transform))


def assert_alike(new: np.ndarray, old: np.ndarray, near: int = 0) -> None:
    """The two drawings cover the same pixels in the same colours, but where antialiased rims
    differ (a pixel differs by more than 64 in a channel in under 2 % of the pixels drawn) or,
    with ``near``, where the line moves by up to that many px: every pixel of one has one of
    its colour within ``near`` px in the other."""
    assert ((np.abs(new - 128).max(axis=2) > 0) | (np.abs(old - 128).max(axis=2) > 0)).sum() > 30
    if near:
        for one, other in ((new, old), (old, new)):
            padded = np.pad(other, ((near, near), (near, near), (0, 0)), constant_values=128)
            size = len(one)
            found = np.zeros(one.shape[:2], dtype=bool)
            for dy in range(2 * near + 1):
                for dx in range(2 * near + 1):
                    found |= np.abs(padded[dy:dy + size, dx:dx + size] - one).max(axis=2) <= 64
            assert found.all()
    else:
        assert differing_pixels(new, old) < 0.02


def differing_pixels(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the pixels drawn in either that differ by more than 64 in a channel."""
    marked = (np.abs(a - 128).max(axis=2) > 0) | (np.abs(b - 128).max(axis=2) > 0)
    return float((np.abs(a - b).max(axis=2)[marked] > 64).mean())


def step_colours(pixels: np.ndarray) -> set[int]:
    """The score colours (steps) that some pixel has exactly (a stroke's middle)."""
    rgb = pixels[..., 0] << 16 | pixels[..., 1] << 8 | pixels[..., 2]
    return {step for step, colour in enumerate(STEP_COLOURS)
            if np.any(rgb == colour.rgb() & 0xFFFFFF)}


def subpaths(elements: np.ndarray) -> list[np.ndarray]:
    """The (x, y) points of each subpath of path ``elements``."""
    starts = np.flatnonzero(elements["type"] == MOVE_TO)
    points = np.column_stack([elements["x"], elements["y"]])
    return np.split(points, starts[1:])


def stroke(item: LineItem, name: str, scale: float = 1.0) -> np.ndarray:
    """The path elements of ``item``'s strokes of kind ``name`` (:data:`STROKE_ORDER`)."""
    keys, parts, _ = item.strokes(scale)
    found = [part for key, part in zip(keys, parts, strict=True)
             if key[0] == STROKE_ORDER.index(name)]
    return np.concatenate(found).astype(PATH_ELEMENT)  # numpy's byte order: Qt's again


def bracketed_distances(points: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each of ``points``' distance to the chord between the vertices kept around it."""
    kept = np.flatnonzero(keep)
    after = np.minimum(np.searchsorted(kept, np.arange(len(points))), len(kept) - 1)
    low, high = points[kept[np.maximum(after - 1, 0)]], points[kept[after]]
    chord, offset = high - low, points - low
    along = np.clip((offset * chord).sum(axis=1)
                    / np.maximum((chord ** 2).sum(axis=1), 1e-300), 0, 1)
    return np.hypot(*(offset - along[:, None] * chord).T)


def meander(count: int, step: float = 0.5, bends: int = 1000, amplitude: float = 50.0,
            start=(0.0, 0.0)) -> np.ndarray:
    """A river's meanders: ``count`` vertices ``step`` px apart along x, ``bends`` bends."""
    xs = np.arange(count) * step
    return np.asarray(start) + np.column_stack(
        [xs, amplitude * np.sin(xs * np.pi * bends / xs[-1])])


# -- shapes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("zoom", [1.0, 4.0])
@pytest.mark.parametrize("selected", [False, True])
def test_segments_of_two_vertices_are_drawn_as_their_link(qtbot, zoom, selected):
    line = line_of(traced([(120, 120), (170, 160)]), Segment.straight((170.0, 160.0),
                                                                      (180.0, 120.0)))
    for colour_by_score in (False, True):
        item = item_of(line, colour_by_score, selected)
        for subpath in subpaths(stroke(item, "edges")):
            assert len(subpath) == 2
        assert_alike(*both(item, view_of((150, 140), zoom)))


def test_segments_of_zero_length_keep_their_point_and_draw_as_through_every_vertex(qtbot):
    """A straight segment from an anchor to itself, and a traced one whose vertices all
    coincide (a session may hold them), keep both ends: their subpath goes from the point to
    itself (which Qt strokes as nothing, as a polyline); the line looks as drawn through every
    vertex, selected or not."""
    point = (150.0, 150.0)
    line = line_of(traced([(100, 120), point]), Segment.straight(point, point),
                   traced([point] * 5, np.zeros(4)), traced([point, (200, 170)]))
    for colour_by_score in (False, True):
        for selected in (False, True):
            item = item_of(line, colour_by_score, selected)
            edges = subpaths(stroke(item, "edges"))
            assert len(edges) == 4
            for subpath in edges[1:3]:
                np.testing.assert_array_equal(subpath, [point, point])
            assert_alike(*both(item))
    alone = item_of(line_of(Segment.straight(point, point)), True, True)
    np.testing.assert_array_equal(subpaths(stroke(alone, "halo rim"))[0], [point, point])
    assert_alike(*both(alone))


def test_repeated_vertices_draw_as_the_line_without_them(qtbot):
    rng = np.random.default_rng(0)
    points = np.column_stack([np.linspace(20, 280, 60), 150 + np.cumsum(rng.normal(0, 2, 60))])
    repeated = np.repeat(points, rng.integers(1, 4, len(points)), axis=0)
    plain = item_of(line_of(traced(points)), colour_by_score=False, selected=True)
    doubled = item_of(line_of(traced(repeated)), colour_by_score=False, selected=True)
    for zoom in (0.5, 1.0, 3.0):
        scale = 1 / zoom
        for name in ("halo rim", "edges", "plain"):
            np.testing.assert_array_equal(stroke(doubled, name, scale),
                                          stroke(plain, name, scale))
        transform = view_of((150, 150), zoom)
        assert np.array_equal(picture(lambda p: paint_lines(p, [doubled]), transform),
                              picture(lambda p: paint_lines(p, [plain]), transform))
    coloured = item_of(line_of(traced(repeated)))
    new, old = both(coloured)
    assert_alike(new, old)
    assert step_colours(new) == step_colours(old)


def test_a_line_that_doubles_back_keeps_the_vertex_where_it_turns(qtbot):
    """Along a line and back, and round a closed loop, the vertex furthest out is kept however
    far the other vertices are within the tolerance of the chord between the ends."""
    back = line_of(traced([(50, 150), (250, 150), (100, 150.1), (180, 150)]))
    loop = line_of(traced(np.column_stack([150 + 60 * np.cos(np.linspace(0, 2 * np.pi, 200)),
                                           150 + 60 * np.sin(np.linspace(0, 2 * np.pi, 200))])))
    for line in (back, loop):
        for scale in (1 / 16, 1.0):
            (points,) = subpaths(stroke(item_of(line), "edges", scale))
            assert points[:, 0].max() == line.polyline[:, 0].max()
            assert points[:, 0].min() == line.polyline[:, 0].min()
        for zoom in (1.0, 2.0):
            assert_alike(*both(item_of(line, selected=True), view_of((150, 150), zoom)))


@pytest.mark.parametrize("colour_by_score", [False, True])
def test_a_line_crossing_itself_looks_as_drawn_through_every_vertex(qtbot, colour_by_score):
    turns = np.linspace(0, 4 * np.pi, 400)
    figure = np.column_stack([150 + 100 * np.sin(turns), 150 + 80 * np.sin(2 * turns)])
    line = line_of(traced(figure[:201]), traced(figure[200:]))
    for zoom in (0.5, 1.0, 3.0):
        for selected in (False, True):
            item = item_of(line, colour_by_score, selected, 1 if selected else None)
            new, old = both(item, view_of((150, 150), zoom))
            assert_alike(new, old)
            if colour_by_score:
                assert step_colours(new) == step_colours(old)


class CountingNumpy:
    """numpy, counting the distances from vertices to chords that :func:`simplified` measures
    (with ``np.hypot``): its work."""

    def __init__(self) -> None:
        self.distances = 0

    def __getattr__(self, name: str):
        return getattr(np, name)

    def hypot(self, *args):
        self.distances += np.size(args[0])
        return np.hypot(*args)


def test_a_meandering_line_of_100000_vertices_is_simplified_within_the_tolerance(monkeypatch):
    """Of a river of 100 000 vertices 0.5 px apart and 1000 bends, the simplified polyline
    keeps its ends, every vertex lies within the tolerance of the chord over it, and few are
    kept; each polyline alone as among others. Its work is a few distances a vertex (it was a
    round over the rest of the line for every bend: some 500 a vertex, seconds)."""
    river = meander(100_000)
    counting = CountingNumpy()
    monkeypatch.setattr(line_strokes, "np", counting)
    for tolerance in (0.125 / 64, 0.125, 8.0):
        counting.distances = 0
        keep = simplified(river, np.array([0]), tolerance)
        assert counting.distances < 20 * len(river)
        assert keep[0]
        assert keep[-1]
        assert bracketed_distances(river, keep).max() <= tolerance
        assert tolerance < 0.1 or keep.sum() < len(river) / 4
    parts = np.vstack([river[:40_000], river[40_000:] + (0.0, 300.0)])
    keep = simplified(parts, np.array([0, 40_000]), 0.125)
    np.testing.assert_array_equal(keep[:40_000], simplified(parts[:40_000], np.array([0]),
                                                            0.125))
    np.testing.assert_array_equal(keep[40_000:], simplified(parts[40_000:], np.array([0]),
                                                            0.125))
    assert bracketed_distances(parts[40_000:], keep[40_000:]).max() <= 0.125


def test_a_line_of_100000_vertices_looks_as_drawn_through_every_vertex(qtbot):
    river = meander(100_000, step=0.0026, bends=5, amplitude=100, start=(20.0, 150.0))
    lengths = np.hypot(*np.diff(river, axis=0).T)
    line = line_of(traced(river[:50_001], np.cos(np.arange(50_000) / 5000) * lengths[:50_000]),
                   traced(river[50_000:], np.sin(np.arange(49_999) / 3000) * lengths[50_000:]))
    for zoom in (1.0, 16.0):
        for selected in (False, True):
            item = item_of(line, selected=selected)
            assert item.strokes(1 / zoom).size < len(river)
            assert_alike(*both(item, view_of(river[50_000], zoom)))


@pytest.mark.parametrize("offset", [(1e6 + 0.123456789, 2e6 - 0.5), (-0.5, -0.5),
                                    (-3e6, 7.25e5)])
def test_far_and_negative_coordinates_are_kept_exactly_and_drawn_as_near_the_origin(qtbot,
                                                                                      offset):
    """At a zoom where no vertex is left out, the strokes' path holds the vertices exactly
    (doubles); far from the origin or at the image's top left edge (pixel (0, 0)'s corner),
    a line is drawn as the same line near the origin."""
    rng = np.random.default_rng(1)
    walk = np.abs(np.cumsum(rng.normal(0, 2.0, (120, 2)), axis=0))
    walk[0] = 0.0
    shape = line_of(traced(walk[:60]), Segment.straight(tuple(walk[59]), tuple(walk[70])),
                    traced(walk[70:]))
    moved = line_of(*(Segment(s.polyline + offset, s.link_scores, s.score, s.request, s.params,
                              s.backend) for s in shape.segments))
    item = item_of(moved, selected=True)
    np.testing.assert_array_equal(np.vstack(subpaths(stroke(item, "edges", 1 / 1024))),
                                  np.vstack([s.polyline for s in moved.segments]))
    path = painter_path([stroke(item, "edges", 1 / 1024)])
    assert path.elementCount() == len(stroke(item, "edges", 1 / 1024))
    assert (path.elementAt(1).x, path.elementAt(1).y) == tuple(moved.segments[0].polyline[1])
    for zoom in (0.5, 2.0):
        transform = view_of(np.asarray(offset) + (20, 20), zoom)
        new, old = both(item, transform)
        assert_alike(new, old)
        near = picture(lambda p: paint_lines(p, [item_of(shape, selected=True)]),
                       view_of((20, 20), zoom))
        assert differing_pixels(new, near) < 0.01


def test_straight_segments_among_traced_ones_are_dashed_and_theirs_alone(qtbot):
    line = line_of(traced([(20, 40), (60, 90), (100, 70)]),
                   Segment.straight((100.0, 70.0), (200.0, 200.0)),
                   Segment.straight((200.0, 200.0), (260.0, 120.0)),
                   traced([(260, 120), (270, 180), (285, 250)]))
    for colour_by_score in (False, True):
        item = item_of(line, colour_by_score)
        keys, parts, _ = item.strokes(1.0)
        dashed = [part for key, part in zip(keys, parts, strict=True) if key[4]]
        assert len(dashed) == 1
        assert [len(points) for points in subpaths(dashed[0])] == [2, 2]
        assert np.vstack(subpaths(dashed[0])).tolist() == [[100, 70], [200, 200],
                                                             [200, 200], [260, 120]]
        new, old = both(item)
        assert_alike(new, old)
        # Along the dashed part the stroke's colour shows in some pixels, the edges' in others.
        middle = [new[int(round(y)), int(round(x))] for x, y in
                  np.linspace((110, 83), (190, 187), 60)]
        colour = KIND_COLOURS["road"]
        assert any(tuple(p) == (colour.red(), colour.green(), colour.blue()) for p in middle)
        assert any(tuple(p) == (0, 0, 0) for p in middle)


# -- scores ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("per_px", [0.0, 0.37, 255.0, 1e4, -3e6])
def test_scores_all_equal_per_px_draw_every_link_in_one_colour(qtbot, per_px):
    """Links of many lengths whose scores per px are all equal: whatever their size, the line
    is all of the strongest colour (as where they are exactly equal), not speckled by the
    rounding of score / length (it was in two reds at 255 per px, red, yellow and green at
    -3e6)."""
    rng = np.random.default_rng(2)
    heading = np.cumsum(rng.normal(0, 0.3, 200))
    steps = rng.uniform(0.5, 2.0, (200, 1)) * np.column_stack([np.cos(heading), np.sin(heading)])
    points = np.vstack([(40.0, 150.0), (40.0, 150.0) + np.cumsum(steps, axis=0)])
    segment = traced(points, per_px * np.hypot(*np.diff(points, axis=0).T))
    item = item_of(line_of(segment, Segment.straight(tuple(points[-1]), (280.0, 280.0))))
    keys, _, _ = item.strokes(1.0)
    assert [key[1] for key in keys if key[0] == STROKE_ORDER.index("scored")] == [SCORE_STEPS - 1]
    assert step_colours(picture(lambda painter: paint_lines(painter, [item]))) == {SCORE_STEPS - 1}


def test_scores_alternating_every_link_keep_each_links_colour(qtbot):
    points = np.column_stack([np.arange(20.0, 281.0, 4.0),
                              150 + 40 * np.sin(np.arange(20.0, 281.0, 4.0) / 20)])
    scores = (np.where(np.arange(len(points) - 1) % 2, 1.0, -1.0)
              * np.hypot(*np.diff(points, axis=0).T))
    line = line_of(traced(points[:30], scores[:29]), traced(points[29:], scores[29:]))
    item = item_of(line)
    runs = subpaths(stroke(item, "scored"))
    assert len(runs) == len(points) - 1  # each link a run of its own
    assert all(len(run) == 2 for run in runs)
    new, old = both(item)
    assert_alike(new, old)
    assert step_colours(new) == step_colours(old) == {0, SCORE_STEPS - 1}
    for zoom in (ZOOM_LIMITS[0], 1 / 16, 0.25):  # links drawn for several: still their colours
        drawing = picture(lambda p: paint_lines(p, [item]), view_of((150, 150), zoom))
        assert step_colours(drawing) <= {0, SCORE_STEPS - 1}


# -- selection ------------------------------------------------------------------------------------

def test_a_selected_segment_alone_has_the_halo(qtbot):
    line = line_of(traced([(30, 100), (150, 100)]), traced([(150, 100), (270, 100)]))
    for colour_by_score in (False, True):
        for segment in (None, 0, 1):
            item = item_of(line, colour_by_score, True, segment)
            new, old = both(item)
            assert_alike(new, old)
            halo = [tuple(new[95, x]) == (255, 255, 255) for x in (90, 210)]  # 5 px above
            assert halo == [segment in (None, 0), segment in (None, 1)]
            halos = stroke(item, "halo band")
            assert len(subpaths(halos)) == (2 if segment is None else 1)


# -- zooms ----------------------------------------------------------------------------------------

def test_at_the_highest_zoom_a_few_vertices_across_the_view_draw_as_every_vertex(qtbot):
    rng = np.random.default_rng(3)
    walk = (150.0, 150.0) + np.cumsum(rng.normal(0, 1.0, (300, 2)), axis=0)
    line = line_of(traced(walk[:150]), Segment.straight(tuple(walk[149]), tuple(walk[160])),
                   traced(walk[160:]))
    zoom = ZOOM_LIMITS[1]
    for index in (5, 100, 155, 250):
        for selected in (False, True):
            item = item_of(line, selected=selected)
            assert_alike(*both(item, view_of(walk[index], zoom)))


def test_at_the_lowest_zoom_a_line_in_a_px_or_two_draws_where_every_vertex_would(qtbot):
    rng = np.random.default_rng(4)
    walk = (150.0, 150.0) + np.cumsum(rng.normal(0, 1.5, (500, 2)), axis=0)
    line = line_of(traced(walk[:250]), Segment.straight(tuple(walk[249]), tuple(walk[300])),
                   traced(walk[300:]))
    zoom = ZOOM_LIMITS[0]
    assert np.ptp(walk, axis=0).max() * zoom < 2.5
    for colour_by_score in (False, True):
        for selected in (False, True):
            item = item_of(line, colour_by_score, selected)
            assert item.strokes(1 / zoom).size < len(walk) / 4
            assert_alike(*both(item, view_of(walk.mean(axis=0), zoom)), near=1)


# -- the canvas -----------------------------------------------------------------------------------

def canvas_of(qtbot, lines) -> Canvas:
    """A shown 800 × 600 canvas on a 400 × 300 image with ``lines``, fitted."""
    view = shown_canvas(qtbot)
    qtbot.waitExposed(view)
    view.set_image(display_pyramid(np.random.default_rng(0).random((300, 400, 3), np.float32)))
    view.model.reset(tuple(lines))
    settle(qtbot)
    return view


def test_overlapping_lines_are_drawn_in_their_order_at_every_zoom(qtbot):
    """Where two lines cross, the one after is on top (its stroke over the other's), as drawn
    one by one; their boxes meet, so they are in layers one after the other."""
    across = traced(np.column_stack([np.linspace(50, 350, 80), np.full(80, 150.0)]))
    down = traced(np.column_stack([np.full(80, 200.0), np.linspace(20, 280, 80)]))
    view = canvas_of(qtbot, [line_of(across, kind="road", line_id=1),
                             line_of(down, kind="river", line_id=2)])
    view.set_colour_by_score(False)
    boxes = np.array([line.bounds for line in view.model.lines])
    assert apart_layers(boxes).tolist() == [1, 2]
    colours = {kind: (c.red(), c.green(), c.blue()) for kind, c in KIND_COLOURS.items()}
    for zoom in (2.0, 6.0, 0.4):
        view.zoom(zoom / view.transform().m11())
        view.centerOn(QPointF(200, 150))
        drawn(view, qtbot)
        image = shown(view)
        crossing = view.mapFromScene(QPointF(200, 150))
        assert image.pixelColor(crossing).getRgb()[:3] == colours["river"]
        assert differing(image, painted_afresh(view)) == 0.0


def test_apart_layers_keep_the_order_of_boxes_that_meet_far_from_the_origin():
    """Boxes at x ≈ 1e6, at negative coordinates and of zero size (a line of zero length), some
    touching: any two that meet are in layers in their order."""
    rng = np.random.default_rng(5)
    low = rng.uniform(-50, 50, (300, 2)) + rng.choice([1e6, -2e5], (300, 1))
    boxes = np.stack([low, low + rng.uniform(0, 8, (300, 2)) * (rng.random((300, 1)) > 0.2)],
                     axis=1)
    boxes[1] = boxes[0, 1], boxes[0, 1] + 3.0  # touching at a corner
    layers = apart_layers(boxes)
    meet = np.triu(np.all((boxes[:, None, 0] <= boxes[None, :, 1])
                          & (boxes[None, :, 0] <= boxes[:, None, 1]), axis=2), k=1)
    first, second = np.nonzero(meet)
    assert meet[0, 1]
    assert len(first) > 100
    assert np.all(layers[first] < layers[second])


@pytest.mark.parametrize("zoom", [ZOOM_LIMITS[0], 1.0, ZOOM_LIMITS[1]])
def test_odd_lines_on_the_canvas_show_as_drawn_directly(qtbot, zoom):
    """Lines of zero length, of 100 000 vertices (cut by the parts of the picture), crossing
    themselves and at the image's edge show as drawn one by one, selected or not."""
    point = (60.0, 60.0)
    turns = np.linspace(0, 4 * np.pi, 400)
    lines = [line_of(Segment.straight(point, point), line_id=1),
             line_of(traced(meander(100_000, step=0.0035, bends=30, amplitude=80,
                                    start=(20.0, 150.0))), line_id=2, kind="river"),
             line_of(traced(np.column_stack([200 + 80 * np.sin(turns),
                                             150 + 60 * np.sin(2 * turns)])), line_id=3),
             line_of(traced([(-0.5, -0.5), (10, 3), (399.5, -0.5)]),
                     Segment.straight((399.5, -0.5), (399.5, 299.5)), line_id=4)]
    view = canvas_of(qtbot, lines)
    view.controller.select(3, 0)
    view.zoom(zoom / view.transform().m11())
    for centre in ((60, 60), (150, 150), (0, 0)):
        view.centerOn(QPointF(*centre))
        drawn(view, qtbot)
        assert differing(shown(view), painted_afresh(view)) == 0.0


def test_a_line_edited_at_the_same_zoom_is_drawn_anew(qtbot):
    """A LineItem given a new Line draws it at once, at the same zoom (its strokes built again),
    on its own and on the canvas, where nothing of the old line stays."""
    old = line_of(traced([(50, 50), (150, 60), (250, 50)]))
    new = line_of(traced([(50, 250), (150, 240), (250, 250)]))
    item = item_of(old)
    before = picture(lambda painter: paint_lines(painter, [item]))
    built = item.strokes(1.0)
    item.line = new
    after = picture(lambda painter: paint_lines(painter, [item]))
    assert item.strokes(1.0) is not built
    assert np.array_equal(after, picture(lambda painter: paint_lines(painter, [item_of(new)])))
    assert not np.array_equal(after, before)
    view = canvas_of(qtbot, [old])
    view.zoom(2.0)
    view.centerOn(QPointF(150, 100))
    drawn(view, qtbot)
    line = view.model.lines[0]
    item = view.line_items[line.id]
    before = shown(view)
    for moved in ((150.0, 240.0), (150.0, 120.0)):
        view.model.replace_segments(line.id, line.anchors, {0: traced(
            [line.anchors[0], moved, line.anchors[1]])}, "Move vertex")
        drawn(view, qtbot)
        assert view.line_items[line.id] is item
        assert item.line is view.model.lines[0]
        image = shown(view)
        assert differing(image, before) > 0.001
        assert differing(image, painted_afresh(view)) == 0.0
        before = image
    view.controller.select(line.id, 0)
    drawn(view, qtbot)
    assert differing(shown(view), painted_afresh(view)) == 0.0
