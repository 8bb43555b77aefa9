"""The tracing tool: clicks become anchors, anchors become traced segments in the model.

The controller is driven by the canvas (press, hover, drag) and by keys (finish, cancel,
backspace, undo, redo). Every trace runs as a job on the :class:`app.jobs.JobQueue`; results
that no longer match the state they were asked for (the user moved on) are dropped.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from app.jobs import Job, JobQueue
from app.model import LinesModel, Point, Segment, distance_to_polyline
from core.errors import BadParameter, NoAdmissiblePath, PointOutsideImage, TraceError
from core.raster import Raster
from core.tracer import TraceParams, check_point, trace
from gpu.select import choose_backend

#: Errors that every backend raises alike; anything else from a non-CPU backend falls back.
USER_ERRORS = (BadParameter, NoAdmissiblePath, PointOutsideImage)


@dataclass(frozen=True)
class TraceRequest:
    """One segment to trace from a to b; ``params=None`` asks for a straight segment."""

    a: Point
    b: Point
    params: TraceParams | None


@dataclass(frozen=True)
class TraceOutcome:
    """Segments traced by one job, its time, and ``(backend, note)`` if it fell back to the CPU."""

    segments: tuple[Segment, ...]
    elapsed_ms: float
    fallback: tuple[object, str] | None = None


def error_text(exc: BaseException) -> str:
    """A user-facing one-liner: the project's errors as they are, anything else with its type."""
    return str(exc) if isinstance(exc, TraceError) else f"{type(exc).__name__}: {exc}"


def run_requests(raster: Raster, requests: tuple[TraceRequest, ...], backend) -> TraceOutcome:
    """Trace every request (worker thread). A failing non-CPU backend is replaced by the CPU."""
    start = time.perf_counter()
    segments, fallback = [], None
    for request in requests:
        if request.params is None:
            segments.append(Segment.straight(request.a, request.b))
            continue
        try:
            result = trace(raster, request.a, request.b, request.params, backend)
        except USER_ERRORS:
            raise
        except Exception as exc:
            if backend.name == "cpu":
                raise
            failed_name = backend.name
            backend, note = choose_backend("cpu")
            fallback = (backend, f"{note}: {failed_name} backend failed: {error_text(exc)}")
            result = trace(raster, request.a, request.b, request.params, backend)
        segments.append(Segment.from_result(result, request.params))
    return TraceOutcome(tuple(segments), 1e3 * (time.perf_counter() - start), fallback)


def trace_anchors(raster: Raster, anchors: tuple[Point, ...], params: TraceParams,
                  backend) -> tuple[TraceOutcome, list[str]]:
    """Trace the segment between every two consecutive anchors (worker thread). One that
    cannot be traced (no admissible path, a bad parameter) stays straight; the reasons are
    returned in order."""
    start = time.perf_counter()
    segments, problems, fallback = [], [], None
    for a, b in zip(anchors[:-1], anchors[1:], strict=True):
        try:
            outcome = run_requests(raster, (TraceRequest(a, b, params),), backend)
        except USER_ERRORS as exc:
            segments.append(Segment.straight(a, b))
            problems.append(error_text(exc))
            continue
        if outcome.fallback is not None:
            fallback = outcome.fallback
            backend = fallback[0]
        segments += outcome.segments
    return TraceOutcome(tuple(segments), 1e3 * (time.perf_counter() - start), fallback), problems


def snap(point, exact: bool = False) -> Point:
    """The pixel centre nearest to a canvas point (x, y); with ``exact`` (a point on a line:
    a junction), the point itself."""
    if exact:
        return float(point[0]), float(point[1])
    return float(round(point[0])), float(round(point[1]))


class TracingController(QObject):
    """Clicks, previews and edits of traced lines.

    Signals
    -------
    changed() : the drawing state (tail anchor, preview) changed.
    lines_stale() : an edit failed; views should redraw lines from the model.
    selection_changed() : the selected line or segment changed.
    message(str) : something to tell the user (status bar).
    traced(TraceOutcome) : a segment was added to the model.
    backend_changed(str) : the backend in use, as the chooser's note.
    """

    changed = Signal()
    lines_stale = Signal()
    selection_changed = Signal()
    message = Signal(str)
    traced = Signal(object)
    backend_changed = Signal(str)

    #: Mouse moves are turned into at most one preview request per interval.
    PREVIEW_INTERVAL_MS = 30

    def __init__(self, model: LinesModel, jobs: JobQueue, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.jobs = jobs
        self.raster: Raster | None = None
        self.params = TraceParams()
        self.kind = "road"
        self.backend = None
        self.backend_note = ""
        self.tail: Point | None = None  # last anchor of the line being drawn
        self.line_id: int | None = None  # the line being drawn, once it has a segment
        self.selection: tuple[int | None, int | None] = (None, None)  # line id, segment index
        self.preview: Segment | None = None
        self.last_latency_ms: float | None = None
        self._preview_request: TraceRequest | None = None
        self._hover: tuple[Point, bool] | None = None
        self._busy = False  # a committing trace of the drawn line is in flight
        self._adopt: TraceRequest | None = None  # running preview to commit when it lands
        self._queued: list[tuple[Point, bool]] = []  # clicks made while busy
        self._finish_pending = False
        self._press_time = 0.0
        self._image_epoch = 0
        self._draw_epoch = 0
        self._import_epoch = 0  # bumped to drop the imports in progress
        self._imports_running = 0
        self._editing = False
        self._hover_timer = QTimer(self)
        self._hover_timer.setSingleShot(True)
        self._hover_timer.setInterval(self.PREVIEW_INTERVAL_MS)
        self._hover_timer.timeout.connect(self._submit_preview)
        model.subscribe(self._on_model_changed)

    # -- setup ----------------------------------------------------------------------------------
    @property
    def drawing(self) -> bool:
        return self.tail is not None

    def set_raster(self, raster: Raster | None) -> None:
        self._image_epoch += 1
        self._imports_running = 0  # their lines were for the last image
        self.raster = raster
        self._stop_drawing()
        self.select(None)

    def set_backend(self, name: str) -> None:
        """Choose the backend in the worker (GPU start-up may take a while), then warm it up."""

        def chosen(result) -> None:
            self._use_backend(*result)

        def failed(exc: BaseException) -> None:
            backend, note = choose_backend("cpu")
            self._use_backend(backend, f"{note}: {error_text(exc)}")
            self.message.emit(f"{name} backend unavailable, using the CPU: {error_text(exc)}")

        self.jobs.submit(Job(lambda: choose_backend(name), chosen, failed))
        self.jobs.submit(Job(self._warm_up, lambda _: None, lambda _: None))

    def _warm_up(self) -> None:
        """One small trace so that compiling the tracer does not delay the first click.

        The corridor window is smaller than the image, as on a real image (array layouts differ).
        """
        raster = Raster(np.random.default_rng(0).random((160, 160, 3), dtype=np.float32))
        trace(raster, (40.0, 40.0), (110.0, 90.0), TraceParams(), self.backend)

    def _use_backend(self, backend, note: str) -> None:
        self.backend, self.backend_note = backend, note
        self.backend_changed.emit(note)

    def set_params(self, params: TraceParams) -> None:
        """New parameters for new traces; the selected segment is re-traced with them."""
        self.params = params
        self._clear_preview()
        self.retrace_selection()
        if self._hover is not None:
            self.hover(*self._hover, exact=True)  # already where the cursor's click lands

    # -- jobs -----------------------------------------------------------------------------------
    def _submit(self, requests: tuple[TraceRequest, ...], done, failed, *, drawing: bool,
                preview: bool = False) -> None:
        """Queue a trace job; its result is dropped if the image (or the drawn line) moved on."""
        raster, image_epoch, draw_epoch = self.raster, self._image_epoch, self._draw_epoch

        def current() -> bool:
            return image_epoch == self._image_epoch and (not drawing
                                                         or draw_epoch == self._draw_epoch)

        def on_done(outcome: TraceOutcome) -> None:
            if outcome.fallback is not None:
                self._use_backend(*outcome.fallback)
                self.message.emit(outcome.fallback[1])
            if current():
                done(outcome)

        def on_failed(exc: BaseException) -> None:
            if current():
                failed(exc)

        self.jobs.submit(Job(lambda: run_requests(raster, requests, self.backend), on_done,
                             on_failed, preview=preview, key=requests))

    def _line_params(self, kind: str) -> TraceParams:
        """The panel's parameters for a line of ``kind`` (a river is traced as water)."""
        return replace(self.params, line_kind=kind)

    def _request(self, a: Point, b: Point, straight: bool) -> TraceRequest:
        """A segment of the line being drawn (its kind, or the one chosen for a new line)."""
        line = self.model.line(self.line_id)
        kind = line.kind if line is not None else self.kind
        return TraceRequest(a, b, None if straight else self._line_params(kind))

    def _snapped_inside(self, point, name: str, exact: bool = False) -> Point | None:
        """The pixel centre nearest to ``point`` (``point`` itself if ``exact``), or None (and
        a message) if off the image."""
        p = snap(point, exact)
        try:
            check_point(self.raster, p, name)
        except TraceError as exc:
            self.message.emit(str(exc))
            return None
        return p

    # -- drawing --------------------------------------------------------------------------------
    def press(self, point, straight: bool = False, exact: bool = False) -> None:
        """A click on the canvas: start a line, or trace a segment to here from the last anchor.
        The point snaps to the nearest pixel centre unless ``exact`` (a point on another line:
        a junction)."""
        self._press_time = time.perf_counter()
        if self.raster is None:
            self.message.emit("open an image first")
            return
        p = self._snapped_inside(point, "click", exact)
        if p is None:
            return
        if self.tail is None:
            self.tail, self.line_id = p, None
            self.changed.emit()
        elif self._busy:
            self._queued.append((p, straight))
        elif p != self.tail:
            self._commit_to(p, straight)

    def _commit_to(self, b: Point, straight: bool) -> None:
        request = self._request(self.tail, b, straight)
        self.jobs.drop_preview()
        if straight:
            self._apply_segment(request, TraceOutcome((Segment.straight(request.a, b),), 0.0))
            return
        if request == self._preview_request and self.preview is not None:
            self._apply_segment(request, TraceOutcome((self.preview,), 0.0))
            return
        self._busy = True
        running = self.jobs.running
        if running is not None and running.preview and running.key == (request,):
            self._adopt = request
            return
        self._submit((request,), lambda outcome: self._apply_segment(request, outcome),
                     self._commit_failed, drawing=True)

    @contextmanager
    def _own_edit(self):
        """Model edits made here do not reset the drawing state (see ``_on_model_changed``)."""
        self._editing = True
        try:
            yield
        finally:
            self._editing = False

    def _apply_segment(self, request: TraceRequest, outcome: TraceOutcome) -> None:
        self._busy, self._adopt = False, None
        segment = outcome.segments[0]
        line = self.model.line(self.line_id)
        with self._own_edit():
            if self.line_id is None:
                line = self.model.add_line(request.a, request.b, segment, self.kind)
            elif line is not None and line.anchors[-1] == request.a:
                line = self.model.append_segment(line.id, request.b, segment)
            else:
                self.message.emit("the line changed while tracing; segment dropped")
                self._stop_drawing()
                return
        self.line_id, self.tail = line.id, request.b
        self.last_latency_ms = 1e3 * (time.perf_counter() - self._press_time)
        self._clear_preview()
        self.traced.emit(outcome)
        self.select(line.id, len(line.segments) - 1)
        if self._finish_pending:
            self._stop_drawing()
        elif self._queued:
            point, straight = self._queued.pop(0)
            if point != self.tail:
                self._commit_to(point, straight)
        self.changed.emit()

    def _commit_failed(self, exc: BaseException) -> None:
        self._busy, self._adopt = False, None
        self._queued.clear()
        self.message.emit(error_text(exc))
        if self._finish_pending:
            self._stop_drawing()
        self.changed.emit()

    def hover(self, point, straight: bool = False, exact: bool = False) -> None:
        """The mouse moved: refresh the preview from the last anchor (throttled); ``point``
        snaps to the nearest pixel centre unless ``exact``."""
        self._hover = (snap(point, exact), straight)
        if self.tail is None or self.raster is None:
            return
        if straight:
            self._show_preview(self._request(self.tail, self._hover[0], True),
                               Segment.straight(self.tail, self._hover[0]))
        elif not self._hover_timer.isActive():
            self._hover_timer.start()

    def _submit_preview(self) -> None:
        if self.tail is None or self._hover is None or self._busy or self.raster is None:
            return
        b, straight = self._hover
        if straight:  # the straight preview is already shown
            return
        if np.hypot(b[0] - self.tail[0], b[1] - self.tail[1]) < 2:
            return
        try:
            check_point(self.raster, b, "cursor")
        except TraceError:
            self._clear_preview()
            self.changed.emit()
            return
        request = self._request(self.tail, b, False)
        running = self.jobs.running
        if request == self._preview_request or (running is not None and running.key == (request,)):
            return
        self._submit((request,), lambda outcome: self._preview_done(request, outcome),
                     lambda exc: self._preview_failed(request, exc), drawing=True, preview=True)

    def _preview_done(self, request: TraceRequest, outcome: TraceOutcome) -> None:
        if request == self._adopt:
            self._apply_segment(request, outcome)
        elif request.a == self.tail:
            self._show_preview(request, outcome.segments[0])

    def _preview_failed(self, request: TraceRequest, exc: BaseException) -> None:
        if request == self._adopt:
            self._commit_failed(exc)
        elif request.a == self.tail:
            self._clear_preview()
            self.message.emit(error_text(exc))
            self.changed.emit()

    def _show_preview(self, request: TraceRequest, segment: Segment) -> None:
        self._preview_request, self.preview = request, segment
        self.changed.emit()

    def _clear_preview(self) -> None:
        self._preview_request = self.preview = None
        self.jobs.drop_preview()

    def _stop_drawing(self) -> None:
        self.tail = self.line_id = None
        self._busy, self._adopt, self._finish_pending = False, None, False
        self._queued.clear()
        self._clear_preview()
        self.changed.emit()

    def finish(self) -> None:
        """Enter or double-click: the line is done (after the segment in flight lands)."""
        if self._busy:
            self._finish_pending = True
        else:
            self._stop_drawing()

    def cancel(self) -> None:
        """Esc: drop an import in progress; else drop the segment in progress and stop
        drawing; with nothing drawn, deselect."""
        if self._imports_running:
            self._import_epoch += 1
            self._imports_running = 0
            self.message.emit("import cancelled: no line added")
            return
        if self.tail is None:
            self.select(None)
            return
        self._draw_epoch += 1
        self._stop_drawing()
        self.message.emit("segment cancelled")

    def backspace(self) -> None:
        """Remove the last segment of the line being drawn (or of the selected line)."""
        if self._busy:
            self._draw_epoch += 1
            self._busy, self._adopt = False, None
            self._queued.clear()
            self.changed.emit()
            return
        line_id = self.line_id if self.drawing else self.selection[0]
        line = self.model.line(line_id)
        if line is None:
            if self.drawing:
                self._stop_drawing()
            return
        with self._own_edit():
            remaining = self.model.remove_last_segment(line.id)
        if self.drawing:
            self.line_id = remaining.id if remaining else None
            self.tail = remaining.anchors[-1] if remaining else line.anchors[0]
            self._clear_preview()
        self.select(remaining.id if remaining else None)
        self.changed.emit()

    def undo(self) -> None:
        if not self.model.undo():
            self.message.emit("nothing to undo")

    def redo(self) -> None:
        if not self.model.redo():
            self.message.emit("nothing to redo")

    def _on_model_changed(self) -> None:
        """An edit from elsewhere (undo, redo, the lines panel): follow the drawn line's end."""
        if self._editing:
            return
        if self.drawing:
            self._draw_epoch += 1
            self._busy, self._adopt, self._finish_pending = False, None, False
            self._queued.clear()
            line = self.model.line(self.line_id)
            if self.line_id is not None and line is None:
                self._stop_drawing()
            elif line is not None:
                self.tail = line.anchors[-1]
                self._clear_preview()
                self.changed.emit()
        line_id, index = self.selection
        line = self.model.line(line_id)
        if line is None:
            self.select(None)
        elif index is not None and index >= len(line.segments):
            self.select(line_id)

    # -- importing -------------------------------------------------------------------------------
    def import_lines(self, lines, source: str) -> None:
        """Trace imported lines (:class:`core.vectors.ImportedLine`) with the current
        parameters, one job per line; they join the model as one undo step when the last is
        done. Esc (:meth:`cancel`) or opening another image drops the import, and the jobs
        still waiting return at once. Messages report the progress and, at the end, the
        segments kept straight."""
        if self.raster is None or not lines:
            return
        self._stop_drawing()
        raster, epoch = self.raster, self._image_epoch
        token = self._import_epoch
        self._imports_running += 1
        traced: list[tuple[str, str, tuple[Point, ...], tuple[Segment, ...]]] = []
        problems: list[str] = []

        def live() -> bool:
            return token == self._import_epoch and epoch == self._image_epoch

        def finish_one() -> None:
            if len(traced) < len(lines):
                self.message.emit(f"importing lines from {source}: {len(traced)}/{len(lines)} "
                                  "(Esc cancels)")
                return
            self._imports_running -= 1
            with self._own_edit():
                added = self.model.add_lines(traced)
            segments = sum(len(line.segments) for line in added)
            straight = f"; {len(problems)} kept straight ({problems[0]})" if problems else ""
            self.message.emit(f"imported {len(added)} line(s), {segments} segment(s) from "
                              f"{source}{straight}")
            self.select(added[-1].id)
            self.changed.emit()

        for line in lines:
            anchors = tuple((float(x), float(y)) for x, y in line.anchors)
            kind = line.kind or self.kind
            line_params = self._line_params(kind)

            def done(result, name=line.name, kind=kind, anchors=anchors) -> None:
                if not live():
                    return
                outcome, reasons = result
                if outcome.fallback is not None:
                    self._use_backend(*outcome.fallback)
                traced.append((name, kind, anchors, outcome.segments))
                problems.extend(reasons)
                finish_one()

            def failed(exc, name=line.name, kind=kind, anchors=anchors) -> None:
                if not live():
                    return
                traced.append((name, kind, anchors, tuple(
                    Segment.straight(a, b) for a, b in zip(anchors[:-1], anchors[1:],
                                                           strict=True))))
                problems.extend([error_text(exc)] * (len(anchors) - 1))
                finish_one()

            self.jobs.submit(Job(lambda anchors=anchors, params=line_params: trace_anchors(
                raster, anchors, params, self.backend) if live() else None, done, failed,
                bulk=True))

    # -- editing finished lines ------------------------------------------------------------------
    def select(self, line_id: int | None, segment: int | None = None) -> None:
        if (line_id, segment) != self.selection:
            self.selection = (line_id, segment)
            self.selection_changed.emit()

    def select_at(self, point, tolerance: float) -> bool:
        """Select the visible segment nearest to a point, if within ``tolerance`` px."""
        best = (tolerance, None, None)
        for line in self.model.lines:
            if not line.visible:
                continue
            for index, segment in enumerate(line.segments):
                distance = float(distance_to_polyline([point], segment.polyline)[0])
                if distance <= best[0]:
                    best = (distance, line.id, index)
        self.select(best[1], best[2])
        return best[1] is not None

    def move_anchor(self, line_id: int, index: int, point, exact: bool = False) -> None:
        """Move a vertex of a line (to the pixel centre nearest to ``point`` unless
        ``exact``); the one or two segments beside it are re-traced."""
        line = self.model.line(line_id)
        if line is None or self.raster is None:
            return
        p = self._snapped_inside(point, "vertex", exact)
        if p is None:
            self.lines_stale.emit()
            return
        anchors = list(line.anchors)
        anchors[index] = p
        indices = [i for i in (index - 1, index) if 0 <= i < len(line.segments)]
        self._retrace(line, tuple(anchors), indices, "Move vertex",
                      {i: line.segments[i].request for i in indices})

    def retrace_selection(self) -> None:
        """Re-trace the selected segment (or every traced segment of the selected line)."""
        line_id, index = self.selection
        line = self.model.line(line_id)
        if line is None or self.raster is None:
            return
        indices = [index] if index is not None else range(len(line.segments))
        indices = [i for i in indices if not line.segments[i].is_straight]
        if indices:
            self._retrace(line, line.anchors, indices, "Re-trace",
                          dict.fromkeys(indices, self._line_params(line.kind)))

    def set_line_kind(self, line_id: int, kind: str) -> None:
        """Make a line a road or a river; its traced segments are traced again as such (one
        undo step)."""
        line = self.model.line(line_id)
        if line is None or kind == line.kind:
            return
        indices = [i for i, segment in enumerate(line.segments) if not segment.is_straight]
        if not indices or self.raster is None:
            self.model.set_kind(line_id, kind)
            return
        self._retrace(line, line.anchors, indices, "Change kind",
                      {i: replace(line.segments[i].request, line_kind=kind) for i in indices},
                      kind)

    def _retrace(self, line, anchors: tuple[Point, ...], indices: list[int], label: str,
                 params: dict[int, TraceParams | None], kind: str | None = None) -> None:
        """Trace segments ``indices`` of ``line`` again between ``anchors`` (and make it of
        ``kind``, if given), as one undo step."""
        requests = tuple(TraceRequest(anchors[i], anchors[i + 1], params[i]) for i in indices)

        def done(outcome: TraceOutcome) -> None:
            if self.model.line(line.id) is not line:
                self.message.emit(f"{line.name} changed while re-tracing; result dropped")
                self.lines_stale.emit()
                return
            with self._own_edit():
                self.model.replace_segments(line.id, anchors, dict(zip(indices, outcome.segments,
                                                                       strict=True)), label,
                                            kind)
            if self.drawing and self.line_id == line.id:
                self.tail = anchors[-1]
                self._clear_preview()
            self.traced.emit(outcome)
            self.changed.emit()

        def failed(exc: BaseException) -> None:
            self.message.emit(error_text(exc))
            self.lines_stale.emit()

        self._submit(requests, done, failed, drawing=False)
