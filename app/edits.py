"""Edits of finished lines that need tracing, as commands (Qt-free): which segments of a line to
trace again, with what, and how the result becomes one undo step of the model.

An :class:`Edit` is what the user asked for (move vertex 2 of the line as shown, re-trace its
segment 1 with these parameters); edits of lines wait for the ones made before them to land,
and each one becomes a :class:`Retrace` of the line as it is when its turn comes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from app.model import Line, LinesModel, Point, Segment, nearest_on_polyline
from app.traces import TraceRequest
from core.tracer import TraceParams

#: How close (px) a vertex may come to the next one.
MIN_VERTEX_GAP = 2.0


def too_close(point: Point, others: Iterable[Point]) -> bool:
    """Whether ``point`` is nearer than :data:`MIN_VERTEX_GAP` to any of ``others``."""
    return any(np.hypot(*(np.asarray(other) - point)) < MIN_VERTEX_GAP for other in others)


def neighbours(line: Line, index: int) -> list[Point]:
    """The anchors before and after anchor ``index`` (one at an end of the line)."""
    return [line.anchors[k] for k in (index - 1, index + 1) if 0 <= k < len(line.anchors)]


@dataclass(frozen=True)
class Retrace:
    """Trace segments of ``line`` again between ``anchors`` (same count as the line's), with
    ``params[i]`` for segment i (None: straight), and make the line ``kind`` if given. With
    ``split``, ``anchors`` has one more anchor than the line: segment ``split`` becomes the
    two segments ``split`` and ``split + 1`` through the new ``anchors[split + 1]``.

    The result applies to the line as it was when the command was made, or to that line with
    only its name or visibility changed or segments added at its end meanwhile (drawing goes
    on); any other edit in between (undo, a deleted vertex or line) makes it stale.
    """

    line: Line
    anchors: tuple[Point, ...]
    params: dict[int, TraceParams | None]
    label: str
    kind: str | None = None
    split: int | None = None

    @classmethod
    def move_anchor(cls, line: Line, index: int, point: Point) -> Retrace:
        """Anchor ``index`` moved to ``point``: the one or two segments beside it, as before."""
        anchors = list(line.anchors)
        anchors[index] = point
        indices = [i for i in (index - 1, index) if 0 <= i < len(line.segments)]
        return cls(line, tuple(anchors), {i: line.segments[i].request for i in indices},
                   "Move vertex")

    @classmethod
    def split_segment(cls, line: Line, index: int, point: Point) -> Retrace:
        """A new anchor at ``point`` inside segment ``index`` (a point of the segment dragged
        onto the right road): both halves traced as that segment was (straight stays
        straight)."""
        anchors = (*line.anchors[:index + 1], point, *line.anchors[index + 1:])
        request = line.segments[index].request
        return cls(line, anchors, {index: request, index + 1: request}, "Add vertex",
                   split=index)

    @classmethod
    def with_params(cls, line: Line, segment: int | Iterable[int] | None,
                    params: TraceParams) -> Retrace:
        """Segment ``segment`` (or these segments; None: every one) with new parameters;
        straight segments stay straight."""
        indices = (range(len(line.segments)) if segment is None
                   else [segment] if isinstance(segment, int) else sorted(set(segment)))
        return cls(line, line.anchors, {i: params for i in indices
                                        if not line.segments[i].is_straight}, "Re-trace")

    @classmethod
    def as_kind(cls, line: Line, kind: str) -> Retrace:
        """The line made a road or a river: its traced segments traced again as such."""
        return cls(line, line.anchors, {i: replace(s.request, line_kind=kind)
                                        for i, s in enumerate(line.segments)
                                        if not s.is_straight}, "Change kind", kind)

    @property
    def requests(self) -> tuple[TraceRequest, ...]:
        """One request per segment to trace, in index order."""
        return tuple(TraceRequest(self.anchors[i], self.anchors[i + 1], params)
                     for i, params in self.params.items())

    def target(self, model: LinesModel) -> Line | None:
        """The line of the model that the result applies to (None: it is stale): the line
        this command was made for, or one with the same kind, anchors and segments that only
        has another name or visibility, or segments added at its end (traced as ``kind``,
        for a change of kind)."""
        line, made = model.line(self.line.id), self.line
        if line is None or line is made:
            return line
        count = len(made.segments)
        if (line.kind != made.kind or line.anchors[:count + 1] != made.anchors
                or len(line.segments) < count
                or any(now is not then
                       for now, then in zip(line.segments[:count], made.segments, strict=True))):
            return None
        if self.kind is not None and any(not s.is_straight and s.request.line_kind != self.kind
                                         for s in line.segments[count:]):
            return None
        return line

    def is_current(self, model: LinesModel) -> bool:
        """Whether the result still applies to the model's line (:meth:`target`)."""
        return self.target(model) is not None

    def apply(self, model: LinesModel, segments: tuple[Segment, ...],
              origin: object = None) -> Line:
        """Put the traced ``segments`` (one per request) into the model's line (the one of
        :meth:`target`) as one undo step."""
        if self.split is not None:
            return model.split_segment(self.line.id, self.split, self.anchors[self.split + 1],
                                       tuple(segments), self.label, origin)
        added = model.line(self.line.id).anchors[len(self.line.anchors):]  # drawn meanwhile
        return model.replace_segments(self.line.id, (*self.anchors, *added),
                                      dict(zip(self.params, segments, strict=True)), self.label,
                                      self.kind, origin)


@dataclass(frozen=True)
class Edit:
    """An edit of a line as the user made it, on the line as shown then (``base``).

    ``action`` is "move" (anchor ``index`` to ``point``), "split" (a new anchor at ``point``
    in segment ``index``), "params" (``segments``, None: every one, traced with ``params``,
    as the line's kind) or "kind" (the line made ``kind``). :meth:`command` makes it a
    :class:`Retrace` of the line as it is when its turn comes; :meth:`through` first carries
    its indices over the vertices added since ``base``. ``attempts``: how many times its
    result was found stale and the edit made again.
    """

    action: str
    base: Line
    index: int | None = None
    point: Point | None = None
    segments: tuple[int, ...] | None = None
    params: TraceParams | None = None
    kind: str | None = None
    attempts: int = 0

    @property
    def line_id(self) -> int:
        return self.base.id

    def through(self, splits: Sequence[tuple[int, Line]]) -> Edit:
        """This edit on the line after the splits ``(segment, the line split there)``, in
        order, were made to ``base``."""
        edit = self
        for split, after in splits:
            edit = edit._after_split(split, after)
        return edit

    def _after_split(self, split: int, after: Line) -> Edit:
        def shifted(i: int) -> int:
            return i + (i > split)

        if self.action == "move":
            return replace(self, index=shifted(self.index))
        if self.action == "split" and self.index == split:  # the half nearest to the point
            near = [nearest_on_polyline([self.point], after.segments[k].polyline)[1][0]
                    for k in (split, split + 1)]
            return replace(self, index=split + int(near[1] < near[0]))
        if self.action == "split":
            return replace(self, index=shifted(self.index))
        if self.action == "params" and self.segments is not None:
            return replace(self, segments=tuple(
                k for i in self.segments for k in ((i, i + 1) if i == split else (shifted(i),))))
        return self

    def fits(self, line: Line) -> bool:
        """Whether ``line`` (the edit's line as it is now) has the vertex or the segments
        that the edit names."""
        if self.action == "move":
            return 0 <= self.index < len(line.anchors)
        if self.action == "split":
            return 0 <= self.index < len(line.segments)
        return self.segments is None or all(0 <= i < len(line.segments) for i in self.segments)

    def command(self, line: Line) -> Retrace | str | None:
        """The command that makes this edit to ``line`` (the edit's line as it is now); None
        when there is nothing to do, or why it cannot be made (a message)."""
        if not self.fits(line):
            return f"{line.name} changed while re-tracing; result dropped"
        if self.action == "move":
            if too_close(self.point, neighbours(line, self.index)):
                return "a vertex must stay at least 2 px from the next one: not moved"
            return Retrace.move_anchor(line, self.index, self.point)
        if self.action == "split":
            if too_close(self.point, line.anchors[self.index:self.index + 2]):
                return None  # dropped on an end of the segment: nothing to split
            return Retrace.split_segment(line, self.index, self.point)
        if self.action == "params":
            command = Retrace.with_params(line, self.segments,
                                          replace(self.params, line_kind=line.kind))
            return command if command.params else None
        return None if line.kind == self.kind else Retrace.as_kind(line, self.kind)
