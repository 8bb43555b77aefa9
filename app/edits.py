"""Edits of finished lines that need tracing, as commands (Qt-free): which segments of a line to
trace again, with what, and how the result becomes one undo step of the model."""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.model import Line, LinesModel, Point, Segment
from app.traces import TraceRequest
from core.tracer import TraceParams


@dataclass(frozen=True)
class Retrace:
    """Trace segments of ``line`` again between ``anchors`` (same count as the line's), with
    ``params[i]`` for segment i (None: straight), and make the line ``kind`` if given. With
    ``split``, ``anchors`` has one more anchor than the line: segment ``split`` becomes the
    two segments ``split`` and ``split + 1`` through the new ``anchors[split + 1]``.

    The result applies only to the line as it was when the command was made: an edit in
    between (undo, another drag) makes it stale.
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
    def with_params(cls, line: Line, segment: int | None, params: TraceParams) -> Retrace:
        """Segment ``segment`` (None: every traced one) with new parameters; straight
        segments stay straight."""
        indices = [segment] if segment is not None else range(len(line.segments))
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

    def is_current(self, model: LinesModel) -> bool:
        """Whether the model still holds the line this command was made for."""
        return model.line(self.line.id) is self.line

    def apply(self, model: LinesModel, segments: tuple[Segment, ...],
              origin: object = None) -> Line:
        """Put the traced ``segments`` (one per request) into the model as one undo step."""
        if self.split is not None:
            return model.split_segment(self.line.id, self.split, self.anchors[self.split + 1],
                                       tuple(segments), self.label, origin)
        return model.replace_segments(self.line.id, self.anchors,
                                      dict(zip(self.params, segments, strict=True)), self.label,
                                      self.kind, origin)
