"""Drawing one line, click by click: an explicit state machine (Qt-free).

Where a click becomes a polyline::

    IDLE --press--> DRAWING             a tail anchor (the line has no segment yet, or some)
    DRAWING --press elsewhere--> TRACING    the segment tail → click is traced in the worker
        (a straight segment, or the one the preview shows, is added at once: stays DRAWING)
    TRACING --segment lands--> DRAWING  added to the model; the click is the new tail
    TRACING --press--> TRACING          the click waits, traced when the segment lands
    TRACING --finish--> TRACING         ... and IDLE once the segment lands (and the clicks
                                        made before the finish); a click made after it
                                        waits too, and then starts the next line
    TRACING --backspace--> DRAWING      the segment in flight is dropped
    TRACING --undo or redo--> DRAWING   dropped too, with the clicks waiting; the tail
                                        follows the line's new end
    TRACING --another's edit of the line (a re-trace, the lines panel)--> TRACING
        the segment in flight is kept if it still starts at the line's end and is traced as
        the line's kind; else it is traced again so (the clicks waiting still wait)
    DRAWING --finish--> IDLE; DRAWING or TRACING --cancel--> IDLE

The host (:class:`DrawingHost`, in the app the :class:`app.tracing.TracingController`) runs
the traces and tells the views; each trace carries a ticket, and a result whose ticket is not
the current one (the user moved on) is dropped.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from typing import Protocol

from app.model import LinesModel, ModelChange, Point, Segment, length_text
from app.traces import TraceOutcome, TraceRequest, error_text
from core.tracer import TraceParams

#: A finish (Enter, double-click) waiting among the clicks for the segment in flight.
FINISH = "finish"


class DrawState(enum.Enum):
    IDLE = "idle"  # no line being drawn
    DRAWING = "drawing"  # a tail anchor, waiting for the next click
    TRACING = "tracing"  # a segment from the tail is being traced; clicks wait


class DrawingHost(Protocol):
    """What :class:`LineDrawing` needs from its surroundings."""

    def submit(self, requests: tuple[TraceRequest, ...], done, failed) -> None:
        """Trace ``requests`` in the worker; then ``done(TraceOutcome)`` or ``failed(exc)``."""

    def follow(self, requests: tuple[TraceRequest, ...], done, failed) -> bool:
        """Wait for the running (preview) job of ``requests`` instead, if there is one."""

    def line_params(self, kind: str) -> TraceParams:
        """The parameters a segment of a line of ``kind`` is traced with."""

    def take_preview(self, request: TraceRequest) -> Segment | None:
        """Drop the preview waiting to be traced; the preview shown, if it is ``request``'s."""

    def clear_preview(self) -> None: ...

    #: The selected line id and segment index (None, None: nothing).
    selection: tuple[int | None, int | None]

    def select(self, line_id: int | None, segment: int | None = None) -> None: ...

    def drawing_changed(self) -> None:
        """The tail anchor or the state changed (views redraw the overlay)."""

    def segment_added(self, outcome: TraceOutcome) -> None: ...

    def tell(self, text: str) -> None:
        """A message for the user (status bar)."""


#: What a new line's first click says: how to go on.
LINE_STARTED = ("{kind} line started: click further along it (Shift + click: a straight "
                "segment); Enter, a double-click or Esc ends the line")
#: What the status bar says of a line once it is finished.
LINE_FINISHED = "{name} finished ({length})"


class LineDrawing:
    """The line being drawn: its state, tail anchor and line id, and the clicks still to trace.

    ``kind`` is the kind of the next new line; a line keeps the kind its first segment was
    traced as.
    """

    def __init__(self, model: LinesModel, host: DrawingHost) -> None:
        self.model = model
        self.host = host
        self.kind = "road"
        self.state = DrawState.IDLE
        self.tail: Point | None = None
        self.line_id: int | None = None  # the line being drawn, once it has a segment
        self.last_latency_ms: float | None = None  # click to segment in the model
        self._ticket: object | None = None  # of the segment in flight
        self._in_flight: TraceRequest | None = None  # the segment in flight
        # Clicks (point, straight) and finishes made while tracing, in the order made.
        self._waiting: deque[tuple[Point, bool] | str] = deque()
        self._press_time = 0.0
        model.subscribe(self._model_changed)

    def line_kind(self) -> str:
        """The kind of the line being drawn: its own, or where it has no segment yet, the one
        chosen for a new line."""
        line = self.model.line(self.line_id)
        return self.kind if line is None else line.kind

    def request(self, a: Point, b: Point, straight: bool) -> TraceRequest:
        """A segment of the line being drawn, traced as its kind (:meth:`line_kind`)."""
        return TraceRequest(a, b, None if straight else self.host.line_params(self.line_kind()))

    # -- events ---------------------------------------------------------------------------------
    def press(self, point: Point, straight: bool = False) -> None:
        """A click at ``point`` (snapped and inside the image): start a line, or add a segment
        from the tail to it."""
        self._press_time = time.perf_counter()
        if self.state is DrawState.IDLE:
            self._start(point)
        elif self.state is DrawState.TRACING:
            self._waiting.append((point, straight))
        elif point != self.tail:
            self._add_segment_to(point, straight)

    def finish(self) -> None:
        """Enter or double-click: the line is done (after the segment in flight lands)."""
        if self.state is DrawState.TRACING:
            self._waiting.append(FINISH)
        else:
            self.stop()

    def cancel(self) -> bool:
        """Esc: drop the segment in flight and stop drawing; False if nothing was drawn."""
        if self.state is DrawState.IDLE:
            return False
        tracing, traced = self.state is DrawState.TRACING, self.line_id is not None
        self.stop()
        if tracing or not traced:  # else the line is finished, and says so
            self.host.tell("segment cancelled" if tracing else "line cancelled: nothing traced")
        return True

    def backspace(self) -> bool:
        """Drop the segment in flight, else remove the last segment of the line being drawn
        (back to its start anchor after the first); False when not drawing."""
        if self.state is DrawState.TRACING:
            self._back_to_drawing()
            self.host.drawing_changed()
            return True
        if self.state is DrawState.IDLE:
            return False
        line = self.model.line(self.line_id)
        if line is None:
            self.stop()
            return True
        remaining = self.model.remove_last_segment(line.id, origin=self)
        self.line_id = remaining.id if remaining else None
        self.tail = remaining.anchors[-1] if remaining else line.anchors[0]
        self.host.clear_preview()
        self.host.select(self.line_id)
        self.host.drawing_changed()
        return True

    def stop(self) -> None:
        """Stop drawing (a segment in flight is dropped, and the clicks waiting)."""
        self._back_to_drawing()
        self._end()

    def _start(self, point: Point) -> None:
        """A new line, from ``point`` (the status bar says how to go on)."""
        self.state, self.tail, self.line_id = DrawState.DRAWING, point, None
        self.host.drawing_changed()
        self.host.tell(LINE_STARTED.format(kind=self.kind))

    def _end(self) -> None:
        """The line is done: it is no longer selected (a parameter change for the next line
        re-traces nothing), and the status bar says it is finished."""
        line = self.model.line(self.line_id)
        self.state, self.tail, self.line_id = DrawState.IDLE, None, None
        self.host.clear_preview()
        if line is not None and self.host.selection[0] == line.id:
            self.host.select(None)
        self.host.drawing_changed()
        if line is not None:
            ground = self.host.line_params(line.kind).ground_resolution
            self.host.tell(LINE_FINISHED.format(name=line.name,
                                                length=length_text(line.length, ground)))

    # -- segments -------------------------------------------------------------------------------
    def _add_segment_to(self, b: Point, straight: bool, at_once: bool = True) -> None:
        """Trace the segment from the tail to ``b``; a straight one, or the preview's, is
        added at once unless not ``at_once`` (in the middle of a change of the model)."""
        kind, request = self.line_kind(), self.request(self.tail, b, straight)
        if straight and at_once:
            self._segment_landed(request, TraceOutcome((Segment.straight(request.a, b),), 0.0),
                                 kind)
            return
        preview = self.host.take_preview(request) if at_once else None
        if preview is not None:
            self._segment_landed(request, TraceOutcome((preview,), 0.0), kind)
            return
        self.state = DrawState.TRACING
        ticket = self._ticket = object()
        self._in_flight = request

        def done(outcome: TraceOutcome) -> None:
            if ticket is self._ticket:
                self._segment_landed(request, outcome, kind)

        def failed(exc: BaseException) -> None:
            if ticket is self._ticket:
                self._segment_failed(exc)

        if not self.host.follow((request,), done, failed):
            self.host.submit((request,), done, failed)

    def _segment_landed(self, request: TraceRequest, outcome: TraceOutcome, kind: str) -> None:
        """The segment ``request`` landed; the first of a line makes it a line of ``kind``
        (the kind it was traced as)."""
        self._ticket, self._in_flight, self.state = None, None, DrawState.DRAWING
        segment = outcome.segments[0]
        # Another's edit of the line would have dropped the ticket unless the segment still
        # starts at the line's end and is traced as the line's kind.
        if self.line_id is None:
            line = self.model.add_line(request.a, request.b, segment, kind, origin=self)
        else:
            line = self.model.append_segment(self.line_id, request.b, segment, origin=self)
        self.line_id, self.tail = line.id, request.b
        self.last_latency_ms = 1e3 * (time.perf_counter() - self._press_time)
        self.host.clear_preview()
        self.host.segment_added(outcome)
        self.host.select(line.id, len(line.segments) - 1)
        self._go_on()
        self.host.drawing_changed()

    def _segment_failed(self, exc: BaseException) -> None:
        """The segment in flight could not be traced: the clicks waiting to go on from it are
        dropped; a finish waiting, and the clicks after it, are not."""
        self._ticket, self._in_flight, self.state = None, None, DrawState.DRAWING
        while self._waiting and self._waiting[0] != FINISH:
            self._waiting.popleft()
        self.host.tell(error_text(exc))
        self._go_on()
        self.host.drawing_changed()

    def _go_on(self, at_once: bool = True) -> None:
        """Take the clicks and finishes that waited, in the order made, until a segment is in
        flight again: the clicks made before a finish draw on (a double-click's end point
        among them), a click made after it starts the next line. ``at_once``:
        :meth:`_add_segment_to`'s."""
        while self._waiting and self.state is not DrawState.TRACING:
            waited = self._waiting.popleft()
            if waited == FINISH:
                self._end()
            elif self.state is DrawState.IDLE:
                self._start(waited[0])
            elif waited[0] != self.tail:
                self._add_segment_to(*waited, at_once=at_once)

    def _back_to_drawing(self) -> None:
        """Forget the segment in flight, and the clicks and finish waiting for it."""
        self._ticket, self._in_flight = None, None
        self._waiting.clear()
        if self.state is DrawState.TRACING:
            self.state = DrawState.DRAWING

    def _model_changed(self, change: ModelChange) -> None:
        """Someone else's change of the line being drawn: stop if it is gone. After an undo
        or redo, drop the segment in flight and the clicks waiting, and go on from the line's
        end. After an edit (a re-trace, a change of kind), go on too: the segment in flight
        lands if it still fits the line, else it is traced again from the line's end."""
        if self.state is DrawState.IDLE or change.origin is self:
            return
        if not (change.is_history or self.line_id in change.line_ids):
            return
        line = self.model.line(self.line_id)
        if self.line_id is not None and line is None:
            self.stop()
            return
        if change.is_history or line is None:
            self._back_to_drawing()
            if line is not None:
                self.tail = line.anchors[-1]
                self.host.clear_preview()
                self.host.drawing_changed()
        elif self.state is DrawState.TRACING and not self._fits(self._in_flight, line):
            self._trace_again(line.anchors[-1])
        elif self.tail != line.anchors[-1]:
            self.tail = line.anchors[-1]
            self.host.clear_preview()
            self.host.drawing_changed()

    @staticmethod
    def _fits(request: TraceRequest, line) -> bool:
        """Whether ``request`` still continues ``line``: from its end, traced as its kind."""
        return request.a == line.anchors[-1] and (request.params is None
                                                   or request.params.line_kind == line.kind)

    def _trace_again(self, tail: Point) -> None:
        """The segment in flight no longer fits the line: trace it again from ``tail`` (the
        line's end), with the line's kind, in the worker; the clicks after it still wait."""
        request = self._in_flight
        self._ticket, self._in_flight, self.state = None, None, DrawState.DRAWING
        self.tail = tail
        self.host.clear_preview()
        self._waiting.appendleft((request.b, request.params is None))
        self._go_on(at_once=False)
        self.host.drawing_changed()
