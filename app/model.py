"""Traced lines with undo/redo, free of Qt: the application's model; views subscribe to it.

A line is a chain of anchors (the clicked points, pixel (x, y)) joined by segments, each the
polyline traced between two consecutive anchors. Lines and segments are immutable and every
edit replaces whole lines, so an undo step is simply the previous tuple of lines (the last
:data:`MAX_UNDO` are kept).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import count, filterfalse, islice

import numpy as np

from core.output import printable, shortened
from core.tracer import LINE_KINDS, TraceParams, TraceResult, join_polylines

Point = tuple[float, float]
#: Undo steps kept (each holds a tuple of all the lines): older ones are forgotten.
MAX_UNDO = 500
#: Line ids are below this, far within what Qt's item data holds.
LINE_ID_LIMIT = 2 ** 31
#: Longest line name (a longer one, pasted or imported, is cut short).
MAX_NAME_CHARS = 1000


def line_name(name: str) -> str:
    r"""``name`` as a line's name, as a session holds it: at most :data:`MAX_NAME_CHARS`
    characters (a longer one cut short, ``…``), and lone surrogates (an imported file's
    ``"\udc80"``) written out (:func:`core.output.printable`)."""
    name = printable(name)
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS - 1] + "…"


def length_text(pixels: float, metres_per_px: float | None) -> str:
    """A line's length as the app shows it: in metres (km from 10 km) where the imagery's
    ground resolution ``metres_per_px`` is known, else in pixels."""
    if metres_per_px is None:
        return f"{pixels:.0f} px"
    metres = pixels * metres_per_px
    return f"{metres / 1000:.2f} km" if metres >= 10_000 else f"{metres:.0f} m" \
        if metres >= 10 else f"{metres:.1f} m"


@dataclass(frozen=True, eq=False)
class Segment:
    """The polyline between two anchors.

    Attributes
    ----------
    polyline : ndarray of shape (N, 2), float64
        Pixel (x, y) from the start anchor to the end anchor.
    link_scores : ndarray of shape (N - 1,)
        Score of every link; empty for a straight (manual) segment.
    score : float
        Total score; NaN for a straight segment.
    request : TraceParams or None
        The parameters asked for (``None`` fields scale with the anchor distance);
        ``None`` for a straight segment drawn with the modifier key held.
    params : TraceParams or None
        The resolved parameters the trace used.
    backend : str
        Backend that traced it ("manual" for straight segments).
    length : float
        Its length (px), the sum of its links': worked out once, where it is made (in the
        worker for a trace or a session read), not whenever a view shows it.
    """

    polyline: np.ndarray
    link_scores: np.ndarray
    score: float
    request: TraceParams | None
    params: TraceParams | None
    backend: str
    length: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "length", float(self.link_lengths.sum()))

    @classmethod
    def from_result(cls, result: TraceResult, request: TraceParams) -> Segment:
        return cls(np.asarray(result.polyline, dtype=np.float64),
                   np.asarray(result.link_scores, dtype=np.float64), float(result.score),
                   request, result.params, result.backend)

    @classmethod
    def straight(cls, a: Point, b: Point) -> Segment:
        return cls(np.array([a, b], dtype=np.float64), np.empty(0), float("nan"), None, None,
                   "manual")

    @property
    def is_straight(self) -> bool:
        return self.request is None

    @property
    def corridor_widened(self) -> bool:
        """Whether the tracer widened the default corridor (its optimum touched the edge)."""
        if self.request is None or self.request.halfwidth is not None:
            return False
        chord = float(np.hypot(*(self.polyline[-1] - self.polyline[0])))
        return self.params.halfwidth > self.request.resolve(chord).halfwidth

    @property
    def link_lengths(self) -> np.ndarray:
        """Length of every link, shape (N - 1,)."""
        return np.hypot(*np.diff(self.polyline, axis=0).T)

    def same_as(self, other: Segment) -> bool:
        """Whether ``other`` holds the same polyline, scores, parameters and backend (as a
        session stores them)."""
        return (np.array_equal(self.polyline, other.polyline)
                and np.array_equal(self.link_scores, other.link_scores)
                and (self.score == other.score
                     or math.isnan(self.score) and math.isnan(other.score))
                and (self.request, self.params, self.backend)
                == (other.request, other.params, other.backend))

    @property
    def link_scores_per_px(self) -> np.ndarray:
        """Every link's score over its length, shape (N - 1,); empty for a straight segment."""
        return self.link_scores / np.maximum(self.link_lengths, 1e-9) if self.link_scores.size \
            else self.link_scores


@dataclass(frozen=True)
class Line:
    """A named chain of anchors and the segments between them (``len(segments) + 1`` anchors).

    Attributes
    ----------
    bounds : ndarray of shape (2, 2)
        Its bounding box [[x_min, y_min], [x_max, y_max]]: worked out where the line is made
        (in the worker for a session read), not when a view first shows it.
    """

    id: int
    name: str
    kind: str
    anchors: tuple[Point, ...]
    segments: tuple[Segment, ...]
    visible: bool = True
    bounds: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", np.array([self.polyline.min(axis=0),
                                                     self.polyline.max(axis=0)]))

    @cached_property
    def polyline(self) -> np.ndarray:
        """The whole line, shape (N, 2): segments joined, shared anchors kept once."""
        return join_polylines([segment.polyline for segment in self.segments])

    @property
    def length(self) -> float:
        return sum(segment.length for segment in self.segments)

    @property
    def score(self) -> float:
        """Total score of the traced (not straight) segments; NaN if there are none."""
        traced = [s.score for s in self.segments if not s.is_straight]
        return float(sum(traced)) if traced else float("nan")

    @property
    def score_per_px(self) -> float:
        """Mean link score per pixel of length over the traced segments; NaN if none."""
        traced = [s for s in self.segments if not s.is_straight]
        length = sum(s.length for s in traced)
        return sum(s.score for s in traced) / length if traced and length > 0 else float("nan")

    def same_as(self, other: Line) -> bool:
        """Whether ``other`` is this line as a session stores it (equal fields, segments
        :meth:`Segment.same_as`), whether or not it is the same object."""
        return (self.id, self.name, self.kind, self.anchors, self.visible) == \
            (other.id, other.name, other.kind, other.anchors, other.visible) \
            and len(self.segments) == len(other.segments) \
            and all(a is b or a.same_as(b)
                    for a, b in zip(self.segments, other.segments, strict=True))


def same_lines(a: tuple[Line, ...], b: tuple[Line, ...]) -> bool:
    """Whether two tuples of lines hold the same lines in the same order (:meth:`Line.same_as`)."""
    return len(a) == len(b) and all(x is y or x.same_as(y) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class ModelChange:
    """One change of the lines, as subscribers of :class:`LinesModel` receive it.

    Attributes
    ----------
    label : str
        The edit's undo label ("Add segment"), or "Undo", "Redo", "Reset".
    line_ids : frozenset of int
        The lines added, replaced or removed (views update only these).
    origin : object
        Whoever made the edit (the ``origin`` given to the edit method), so that it can tell
        its own edits from others'; None for undo, redo and reset.
    """

    label: str
    line_ids: frozenset[int]
    origin: object = None

    @property
    def is_history(self) -> bool:
        """An undo, redo or reset: any line may have changed, whoever made it."""
        return self.label in ("Undo", "Redo", "Reset")


class LinesModel:
    """The traced lines, an undo/redo history of edits, and change notification.

    Subscribers are called with a :class:`ModelChange` after every change (edit, undo, redo,
    reset). Every edit takes an optional ``origin`` that the change carries.
    """

    def __init__(self) -> None:
        self._lines: tuple[Line, ...] = ()
        self._positions: dict[int, int] | None = {}  # line id -> index in _lines; None: stale
        self._saved: tuple[Line, ...] = ()
        self._undo: deque[tuple[tuple[Line, ...], str]] = deque(maxlen=MAX_UNDO)
        self._redo: deque[tuple[tuple[Line, ...], str]] = deque(maxlen=MAX_UNDO)
        self._listeners: list[Callable[[ModelChange], None]] = []
        self._next_id = 1

    # -- reading ------------------------------------------------------------------------------
    @property
    def lines(self) -> tuple[Line, ...]:
        return self._lines

    def segment_at(self, point, tolerance: float, exclude: int | None = None
                   ) -> tuple[int, int, tuple[float, float]] | None:
        """The visible segment nearest to ``point`` (x, y) within ``tolerance`` px, of a line
        other than ``exclude``: (line id, segment index, its point nearest to ``point``)."""
        x, y = float(point[0]), float(point[1])
        best = None
        for line in self._lines:
            if not line.visible or line.id == exclude:
                continue
            (x_min, y_min), (x_max, y_max) = line.bounds
            if not (x_min - tolerance <= x <= x_max + tolerance
                    and y_min - tolerance <= y <= y_max + tolerance):
                continue
            for index, segment in enumerate(line.segments):
                nearest, distance = nearest_on_polyline([(x, y)], segment.polyline)
                if distance[0] <= tolerance and (best is None or distance[0] < best[0]):
                    best = (float(distance[0]), line.id, index,
                            (float(nearest[0][0]), float(nearest[0][1])))
        return None if best is None else best[1:]

    def line(self, line_id: int | None) -> Line | None:
        position = self._position(line_id)
        return None if position is None else self._lines[position]

    def _position(self, line_id: int | None) -> int | None:
        """The index of a line in :attr:`lines` (None if there is none of that id)."""
        return self._counted_positions().get(line_id)

    def _counted_positions(self) -> dict[int, int]:
        """Line id -> index in :attr:`lines`, counted again after an undo, redo, reset or
        delete."""
        if self._positions is None:
            self._positions = {line.id: index for index, line in enumerate(self._lines)}
        return self._positions

    @property
    def dirty(self) -> bool:
        """True when the lines differ from the last saved (or loaded) state: a line renamed
        and renamed back, or hidden and shown again, is as saved."""
        return self._lines is not self._saved and not same_lines(self._lines, self._saved)

    @property
    def undo_label(self) -> str | None:
        return self._undo[-1][1] if self._undo else None

    @property
    def redo_label(self) -> str | None:
        return self._redo[-1][1] if self._redo else None

    def subscribe(self, listener: Callable[[ModelChange], None]) -> None:
        self._listeners.append(listener)

    # -- history ------------------------------------------------------------------------------
    def _commit(self, lines: tuple[Line, ...], label: str, origin: object,
                changed: frozenset[int]) -> None:
        """Make an edit of the lines ``changed``: an undo step (the oldest beyond
        :data:`MAX_UNDO` is forgotten)."""
        self._undo.append((self._lines, label))
        self._redo.clear()
        self._set(lines, label, origin, changed)

    def _set(self, lines: tuple[Line, ...], label: str, origin: object = None,
             changed: frozenset[int] | None = None) -> None:
        """Make ``lines`` the lines; ``changed`` (the ids of the lines added, replaced or
        removed) is found, and the positions recounted, where it is not given."""
        if changed is None:
            before = {line.id: line for line in self._lines}
            after = {line.id: line for line in lines}
            changed = frozenset(i for i in before.keys() | after.keys()
                                if before.get(i) is not after.get(i))
            self._positions = None
        self._lines = lines
        change = ModelChange(label, changed, origin)
        for listener in list(self._listeners):
            listener(change)

    def undo(self) -> bool:
        return self._step(self._undo, self._redo, "Undo")

    def redo(self) -> bool:
        return self._step(self._redo, self._undo, "Redo")

    def _step(self, source: list, target: list, label: str) -> bool:
        """Restore the newest state of ``source``, keeping the current one on ``target``."""
        if not source:
            return False
        lines, edit_label = source.pop()
        target.append((self._lines, edit_label))
        self._set(lines, label)
        return True

    def reset(self, lines: tuple[Line, ...] = ()) -> None:
        """Replace everything (new image, loaded session): history cleared, state clean."""
        self._undo.clear()
        self._redo.clear()
        self._next_id = max((line.id for line in lines), default=0) + 1
        self._saved = tuple(lines)
        self._set(self._saved, "Reset")

    def _new_ids(self, number: int) -> list[int]:
        """Ids for ``number`` new lines: counted on from the last one, or, where that would
        reach :data:`LINE_ID_LIMIT` (a session's ids are near it), the least that no line has
        or had in the undo history."""
        if self._next_id + number <= LINE_ID_LIMIT:
            self._next_id += number
            return list(range(self._next_id - number, self._next_id))
        used = {line.id for lines in (self._lines, *(state for state, _ in self._undo),
                                      *(state for state, _ in self._redo)) for line in lines}
        return list(islice(filterfalse(used.__contains__, count(1)), number))

    def mark_saved(self) -> None:
        self._saved = self._lines

    # -- edits (each one undo step) -------------------------------------------------------------
    def _replace_line(self, new: Line, label: str, origin: object) -> Line:
        index = self._position(new.id)
        self._commit((*self._lines[:index], new, *self._lines[index + 1:]), label, origin,
                     frozenset((new.id,)))
        return new

    def _require(self, line_id: int) -> Line:
        line = self.line(line_id)
        if line is None:
            raise KeyError(f"no line with id {line_id}")
        return line

    def add_line(self, a: Point, b: Point, segment: Segment, kind: str = "road",
                 origin: object = None) -> Line:
        """A new line of one segment a → b, named after its kind ("Road 3")."""
        _check_kind(kind)
        (line_id,) = self._new_ids(1)
        line = Line(line_id, f"{kind.capitalize()} {line_id}", kind, (a, b), (segment,))
        self._append((line,), "Add line", origin)
        return line

    def add_lines(self, lines: list[tuple[str, str, tuple[Point, ...], tuple[Segment, ...]]],
                  label: str = "Import lines", origin: object = None) -> tuple[Line, ...]:
        """New lines from (name, kind, anchors, segments), added as one undo step (each name
        as :func:`line_name` makes it)."""
        for name, kind, anchors, segments in lines:
            _check_kind(kind)
            if len(anchors) != len(segments) + 1 or not segments:
                raise ValueError(f"line {shortened(name)}: {len(anchors)} anchors for "
                                 f"{len(segments)} segments")
        added = [Line(line_id, line_name(name), kind, tuple(anchors), tuple(segments))
                 for line_id, (name, kind, anchors, segments)
                 in zip(self._new_ids(len(lines)), lines, strict=True)]
        self._append(tuple(added), label, origin)
        return tuple(added)

    def _append(self, lines: tuple[Line, ...], label: str, origin: object) -> None:
        """New lines at the end, one undo step."""
        self._counted_positions().update(
            (line.id, len(self._lines) + offset) for offset, line in enumerate(lines))
        self._commit((*self._lines, *lines), label, origin,
                     frozenset(line.id for line in lines))

    def append_segment(self, line_id: int, b: Point, segment: Segment,
                       origin: object = None) -> Line:
        line = self._require(line_id)
        return self._replace_line(replace(line, anchors=(*line.anchors, b),
                                          segments=(*line.segments, segment)), "Add segment",
                                  origin)

    def remove_last_segment(self, line_id: int, origin: object = None) -> Line | None:
        """Drop the line's last segment and anchor; a one-segment line is deleted (returns None)."""
        line = self._require(line_id)
        if len(line.segments) == 1:
            self.delete(line_id, origin)
            return None
        return self._replace_line(replace(line, anchors=line.anchors[:-1],
                                          segments=line.segments[:-1]), "Remove segment", origin)

    def replace_segments(self, line_id: int, anchors: tuple[Point, ...],
                         segments: dict[int, Segment], label: str,
                         kind: str | None = None, origin: object = None) -> Line:
        """New anchors (same count) and new segments at some indices (move vertex, re-trace),
        and a new kind if given."""
        line = self._require(line_id)
        if len(anchors) != len(line.anchors):
            raise ValueError(f"expected {len(line.anchors)} anchors, got {len(anchors)}")
        if kind is not None:
            _check_kind(kind)
        merged = tuple(segments.get(i, s) for i, s in enumerate(line.segments))
        return self._replace_line(replace(line, anchors=tuple(anchors), segments=merged,
                                          kind=kind or line.kind), label, origin)

    def split_segment(self, line_id: int, index: int, point: Point,
                      halves: tuple[Segment, Segment], label: str,
                      origin: object = None) -> Line:
        """Segment ``index`` split at a new anchor ``point`` into ``halves`` (from its start
        anchor to ``point``, and from ``point`` to its end anchor)."""
        line = self._require(line_id)
        if not 0 <= index < len(line.segments):
            raise ValueError(f"line {line_id} has no segment {index}")
        if len(halves) != 2:
            raise ValueError(f"expected 2 halves, got {len(halves)}")
        anchors = (*line.anchors[:index + 1], tuple(point), *line.anchors[index + 1:])
        segments = (*line.segments[:index], *halves, *line.segments[index + 1:])
        return self._replace_line(replace(line, anchors=anchors, segments=segments), label,
                                  origin)

    def rename(self, line_id: int, name: str, origin: object = None) -> Line:
        """The line named ``name`` (as :func:`line_name` makes it)."""
        return self._replace_line(replace(self._require(line_id), name=line_name(name)),
                                  "Rename line", origin)

    def set_kind(self, line_id: int, kind: str, origin: object = None) -> Line:
        _check_kind(kind)
        return self._replace_line(replace(self._require(line_id), kind=kind), "Change kind",
                                  origin)

    def set_visible(self, line_id: int, visible: bool, origin: object = None) -> Line:
        label = "Show line" if visible else "Hide line"
        return self._replace_line(replace(self._require(line_id), visible=visible), label,
                                  origin)

    def delete(self, line_id: int, origin: object = None) -> None:
        self._require(line_id)
        index = self._position(line_id)
        self._positions = None  # the lines after it move up
        self._commit((*self._lines[:index], *self._lines[index + 1:]), "Delete line", origin,
                     frozenset((line_id,)))


def _check_kind(kind: str) -> None:
    if kind not in LINE_KINDS:
        raise ValueError(f"line kind must be one of {LINE_KINDS}, got {kind!r}")


def nearest_on_polyline(points: np.ndarray, polyline: np.ndarray) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """The point of the polyline (N, 2) nearest to each point (n, 2), shape (n, 2), and its
    Euclidean distance, shape (n,)."""
    points = np.atleast_2d(np.asarray(points, dtype=np.float64))
    polyline = np.asarray(polyline, dtype=np.float64)
    if len(polyline) == 1:
        return np.repeat(polyline, len(points), axis=0), np.hypot(*(points - polyline[0]).T)
    start, delta = polyline[:-1], np.diff(polyline, axis=0)
    along = ((points[:, None, :] - start) * delta).sum(axis=2)
    along = np.clip(along / np.maximum((delta * delta).sum(axis=1), 1e-12), 0.0, 1.0)
    nearest = start + along[:, :, None] * delta  # (n, N - 1, 2): on every segment
    distances = np.hypot(*(points[:, None, :] - nearest).transpose(2, 0, 1))
    best = np.argmin(distances, axis=1)
    rows = np.arange(len(points))
    return nearest[rows, best], distances[rows, best]
