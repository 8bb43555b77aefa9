"""The tracing tool: the canvas's and the keys' entry point, wiring the parts that do the work.

A click goes :meth:`TracingController.press` → :class:`app.drawing.LineDrawing` (the state
machine of the line being drawn) → a trace job (:mod:`app.traces`, run on the
:class:`app.jobs.JobQueue`) → a segment in the :class:`app.model.LinesModel`. The preview is
:class:`app.previews.PreviewScheduler`'s, imports :class:`app.imports.ImportRunner`'s, and
an edit of a line that re-traces it (a vertex moved or added, new parameters, another kind)
is an :class:`app.edits.Edit`, made in its turn, after the edits before it, as an
:class:`app.edits.Retrace` command (an undo or redo asked for meanwhile waits its turn too).
The controller owns the image, the backend, the parameters and the selection, and runs every
trace: a result traced for an image no longer open is dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from app.drawing import DrawState, LineDrawing
from app.edits import Edit, Retrace, neighbours, too_close
from app.imports import ImportRunner
from app.jobs import Job, JobQueue
from app.model import Line, LinesModel, ModelChange, Point, Segment
from app.params import check_trace_size, traced_params
from app.previews import PreviewScheduler
from app.traces import TraceOutcome, TraceRequest, error_text, run_requests, snap, trace_anchors
from core.errors import TraceError
from core.raster import Raster
from core.surface import use_model
from core.tracer import TraceParams, check_point, trace
from gpu.select import choose_backend

#: How many times an edit whose result was stale is made again on the line as it is.
MAX_ATTEMPTS = 3
#: The message for a click on the last anchor of the line being drawn.
SAME_POINT = "the same point as the last one; click elsewhere or press Enter to finish"
#: What Esc adds where the trace it drops is running: the engine cannot stop midway.
STILL_RUNNING = ("the trace already running cannot be stopped midway: it finishes in the "
                 "background, and new traces wait for it")
#: What a re-trace for a change of parameters says once it lands.
RETRACED = "re-traced {name} with the new parameters; Ctrl+Z undoes"
#: The message for a trace asked for while a cancelled one still runs.
WAITING = "waiting for the previous trace to finish (cancelled, it cannot be stopped midway)"


class TracingController(QObject):
    """Clicks, previews and edits of traced lines.

    Signals
    -------
    changed() : the drawing state (tail anchor, preview) or the imports in progress changed.
    lines_stale() : an edit failed; views should redraw lines from the model.
    selection_changed() : the selected line or segment changed.
    message(str) : something to tell the user (status bar).
    traced(TraceOutcome) : a segment was added to the model.
    trace_failed(str) : a segment (drawn or re-traced) could not be traced: why.
    backend_changed(str) : the backend in use, as the chooser's note.
    edits_changed() : the edits of lines waiting or being re-traced changed (what undo and
        redo can act on).
    """

    changed = Signal()
    lines_stale = Signal()
    selection_changed = Signal()
    message = Signal(str)
    traced = Signal(object)
    trace_failed = Signal(str)
    backend_changed = Signal(str)
    edits_changed = Signal()

    def __init__(self, model: LinesModel, jobs: JobQueue, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.jobs = jobs
        self.raster: Raster | None = None
        self.params = TraceParams()
        self._surface_models = 0  # how many times the surface model changed (in trace keys)
        self.backend = None
        self.backend_note = ""
        self.selection: tuple[int | None, int | None] = (None, None)  # line id, segment index
        self.line_drawing = LineDrawing(model, self)
        self.previews = PreviewScheduler(self.line_drawing, self, self)
        self.imports = ImportRunner(model, self)
        self._shown_preview: TraceOutcome | None = None  # the preview trace shown last
        # Edits waiting (and "undo", "redo"), each with the count of :attr:`_changes_outside`
        # when it was asked for.
        self._edits: deque[tuple[Edit | str, int]] = deque()
        # Changes of the lines made outside the edits' queue (a segment drawn, a line deleted or
        # renamed): an undo asked for after one of them is meant for it, not for an edit made
        # before it that is then lost (:meth:`_lost`).
        self._changes_outside = 0
        self._edit_running: object | None = None  # the ticket of the edit being re-traced
        # While edits are pending: (line before, line after, segment split or None) of every
        # edit of a line but undo and redo, so that a waiting edit finds its line again.
        self._lineage: list[tuple[Line, Line, int | None]] = []
        self._lines_seen: dict[int, Line] = {line.id: line for line in model.lines}
        self._splitting: int | None = None  # the segment split by the edit being applied
        self._held: Edit | None = None  # the vertex or segment held with the mouse (hold)
        # The trace job still running after Esc dropped its result, and whether a trace was
        # asked for meanwhile (it waits: said when the job ends).
        self._abandoned: Job | None = None
        self._waited = False
        jobs.finished.connect(self._job_finished)
        # A click on the tail anchor is said so once the event is handled, unless it finished
        # the line meanwhile (a double-click's second press).
        self._same_point = QTimer(self, singleShot=True, interval=0)
        self._same_point.timeout.connect(lambda: self.message.emit(SAME_POINT))
        model.subscribe(self._model_changed)

    # -- state the views show -------------------------------------------------------------------
    @property
    def tail(self) -> Point | None:
        """The last anchor of the line being drawn (None when not drawing)."""
        return self.line_drawing.tail

    @property
    def preview(self) -> Segment | None:
        return self.previews.segment

    @property
    def drawing(self) -> bool:
        """Whether a line is being drawn."""
        return self.line_drawing.state is not DrawState.IDLE

    @property
    def kind(self) -> str:
        """The kind of the next new line."""
        return self.line_drawing.kind

    @kind.setter
    def kind(self, kind: str) -> None:
        self.line_drawing.kind = kind

    @property
    def last_latency_ms(self) -> float | None:
        """Click to segment in the model, of the last segment drawn."""
        return self.line_drawing.last_latency_ms

    # -- setup ----------------------------------------------------------------------------------
    def set_raster(self, raster: Raster | None) -> None:
        """A new image: drawing, imports and selection start over."""
        self.raster = raster
        self.cancel_imports()
        self._drop_edits()
        self.line_drawing.stop()
        self.select(None)

    def set_backend(self, name: str) -> None:
        """Choose the backend in the worker (GPU start-up may take a while), then warm it up."""

        def failed(exc: BaseException) -> None:
            backend, note = choose_backend("cpu")
            self._use_backend(backend, f"{note}: {error_text(exc)}")
            self.message.emit(f"{name} backend unavailable, using the CPU: {error_text(exc)}")

        self.jobs.submit(Job(lambda: choose_backend(name, notify=self.message.emit),
                             lambda chosen: self._use_backend(*chosen), failed))
        self.jobs.submit(Job(self._warm_up, lambda _: None, lambda _: None, detachable=True))

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
        """New parameters for new traces; the segment or line the user selected is re-traced
        with them (the status bar says so once it lands)."""
        self.params = params
        self.retrace_selection()
        self.previews.refresh()

    def set_surface_model(self, path: str) -> Path:
        """Trace from now on with the surface model ``path`` (:func:`core.surface.use_model`:
        its path, or its error raised): a preview traced, or being traced, with the last one
        is not taken for a click; the preview is traced again."""
        model = use_model(path)
        self._surface_models += 1
        self.previews.refresh()
        return model

    def line_params(self, kind: str) -> TraceParams:
        """The panel's parameters for a line of ``kind`` (a river is traced as water)."""
        return replace(self.params, line_kind=kind)

    # -- running traces (the parts' host) -------------------------------------------------------
    def submit(self, requests: tuple[TraceRequest, ...], done, failed,
               preview: bool = False) -> None:
        """Trace ``requests`` in the worker (as :func:`app.params.traced_params` has them, each
        refused if too large: :func:`app.params.check_trace_size`); the result is dropped if
        the image changed, a preview's also if the surface model did."""
        raster, key = self.raster, self._trace_key(requests)
        traced = tuple(request if request.params is None else
                       replace(request, params=traced_params(request.params, raster))
                       for request in requests)

        def work() -> TraceOutcome:
            for request in traced:
                if request.params is not None:
                    check_trace_size(request.a, request.b, request.params,
                                     getattr(self.backend, "name", "cpu"))
            return run_requests(raster, traced, self.backend)

        def current() -> bool:
            return raster is self.raster and (not preview or key == self._trace_key(requests))

        def on_done(outcome: TraceOutcome) -> None:
            if outcome.fallback is not None:
                self._use_backend(*outcome.fallback)
                self.message.emit(outcome.fallback[1])
            if current():
                done(outcome)
                if preview and self.previews.segment is outcome.segments[0]:  # now shown
                    self._shown_preview = outcome

        def on_failed(exc: BaseException) -> None:
            if current():
                if not preview:
                    self.trace_failed.emit(error_text(exc))
                failed(exc)

        if not preview:
            self._tell_waiting()
        self.jobs.submit(Job(work, on_done, on_failed, preview=preview, key=key,
                             detachable=True))

    def _trace_key(self, requests: tuple[TraceRequest, ...]) -> tuple:
        """What a trace job is for: its requests, traced with the surface model in use."""
        return self._surface_models, requests

    def submit_anchors(self, anchors: tuple[Point, ...], params: TraceParams, done, failed,
                       live) -> None:
        """Trace between consecutive anchors as a bulk job, skipped once ``live()`` is False
        or the image changed."""
        raster = self.raster
        params = traced_params(params, raster)

        def current() -> bool:
            return live() and raster is self.raster

        def work():
            if not current():
                return None
            for a, b in zip(anchors[:-1], anchors[1:], strict=True):
                check_trace_size(a, b, params, getattr(self.backend, "name", "cpu"))
            return trace_anchors(raster, anchors, params, self.backend)

        def on_done(result) -> None:
            if result is not None and result[0].fallback is not None:
                self._use_backend(*result[0].fallback)
            if current():
                done(result)

        self._tell_waiting()
        self.jobs.submit(Job(work, on_done, lambda exc: failed(exc) if current() else None,
                             bulk=True, detachable=True))

    def _tell_waiting(self) -> None:
        """Say that a trace asked for now waits for a cancelled one still running."""
        if self._abandoned is not None and not self._waited:
            self._waited = True
            self.message.emit(WAITING)

    def _abandon_running(self) -> None:
        """After Esc cancelled the segment being drawn: where the trace running is one whose
        result is now dropped (the segment's or a preview's, not an edit's), say that it
        cannot be stopped and that new traces wait for it."""
        running = self.jobs.running
        if running is None or running.key is None or self.edits_pending:
            return
        self._abandoned, self._waited = running, False
        self.message.emit(f"segment cancelled; {STILL_RUNNING}")

    def _job_finished(self, job: Job) -> None:
        if job is self._abandoned:
            self._abandoned = None
            if self._waited:
                self.message.emit("the cancelled trace finished; tracing on")

    def follow(self, requests: tuple[TraceRequest, ...], done, failed) -> bool:
        return self.jobs.follow(self._trace_key(requests), done, failed)

    def is_running(self, requests: tuple[TraceRequest, ...]) -> bool:
        running = self.jobs.running
        return running is not None and running.key == self._trace_key(requests)

    def drop_waiting_preview(self) -> None:
        self.jobs.drop_preview()

    def take_preview(self, request: TraceRequest) -> Segment | None:
        return self.previews.take(request)

    def clear_preview(self) -> None:
        self.previews.clear()

    def inside_image(self, point: Point) -> bool:
        if self.raster is None:
            return False
        try:
            check_point(self.raster, point, "cursor")
        except TraceError:
            return False
        return True

    def drawing_changed(self) -> None:
        self.changed.emit()

    def segment_added(self, outcome: TraceOutcome) -> None:
        """A segment of the line being drawn landed: traced for it (the notes are
        ``outcome``'s, that of the preview job it waited for among them), or the preview shown
        taken as it is (the notes are the preview trace's)."""
        shown = self._shown_preview
        taken = shown is not None and outcome.segments[0] is shown.segments[0]
        self._landed(outcome, shown.notes if taken else outcome.notes)

    def _landed(self, outcome: TraceOutcome, notes: tuple[str, ...]) -> None:
        """Tell the views a trace landed in the lines, then the trace's ``notes`` (after the
        views' own message, to be seen)."""
        self.traced.emit(outcome)
        if notes:
            self.message.emit("; ".join(notes))

    def tell(self, text: str) -> None:
        self.message.emit(text)

    # -- clicks and keys ------------------------------------------------------------------------
    def _snapped_inside(self, point, what: str, exact: bool = False) -> Point | None:
        """The pixel centre nearest to ``point`` (``point`` itself if ``exact``), or None (and
        a message naming ``what`` was put there: "the click") if off the image."""
        p = snap(point, exact)
        if self.inside_image(p):
            return p
        x, y = (f"{value:g}".replace("-", "−") for value in p)
        self.message.emit(f"{what} at ({x}, {y}) is outside the image")
        return None

    def press(self, point, straight: bool = False, exact: bool = False) -> None:
        """A click on the canvas: start a line, or trace a segment to here from the last anchor.
        The point snaps to the nearest pixel centre unless ``exact`` (a point on another line:
        a junction)."""
        if self.raster is None:
            self.message.emit("open an image first")
            return
        p = self._snapped_inside(point, "the click", exact)
        if p is None:
            return
        if self.line_drawing.state is DrawState.DRAWING and p == self.tail:
            self._same_point.start()
        self.line_drawing.press(p, straight)

    def hover(self, point, straight: bool = False, exact: bool = False) -> None:
        """The mouse moved: refresh the preview from the last anchor (throttled); ``point``
        snaps to the nearest pixel centre unless ``exact``."""
        self.previews.hover(snap(point, exact), straight)

    def finish(self) -> None:
        """Enter or double-click: the line is done (after the segment in flight lands)."""
        self._same_point.stop()
        self.line_drawing.finish()

    def cancel(self) -> None:
        """Esc: drop an import in progress; else drop the segment in progress and stop
        drawing; with nothing drawn, deselect."""
        self._same_point.stop()
        if self.cancel_imports():
            self.message.emit("import cancelled: no line added")
            self.changed.emit()
        elif self.line_drawing.cancel():
            self._abandon_running()
        else:
            self.select(None)

    def backspace(self) -> None:
        """Remove the last segment of the line being drawn (or of the selected line)."""
        if self.line_drawing.backspace():
            return
        line = self.model.line(self.selection[0])
        if line is not None:
            remaining = self.model.remove_last_segment(line.id)
            self.select(remaining.id if remaining else None)

    def undo(self) -> None:
        """Undo the last edit; one still being re-traced is the last (undone once it lands;
        if its re-trace fails, nothing is undone)."""
        if self.edits_pending:
            self._edits.append(("undo", self._changes_outside))
            self.message.emit("undo: once the re-trace in progress lands")
            self.edits_changed.emit()
        elif not self.model.undo():
            self.message.emit("nothing to undo")

    def redo(self) -> None:
        if self.edits_pending:
            self._edits.append(("redo", self._changes_outside))
            self.message.emit("redo: once the re-trace in progress lands")
            self.edits_changed.emit()
        elif not self.model.redo():
            self.message.emit("nothing to redo")

    def _model_changed(self, change: ModelChange) -> None:
        """Follow the lines' changes for the edits pending (all dropped when the lines are
        replaced); keep the selection on lines and segments that exist."""
        if change.label == "Reset":
            self._drop_edits()
        elif change.origin is not self and not change.is_history:
            self._changes_outside += 1
        for changed_id in change.line_ids:
            before, after = self._lines_seen.pop(changed_id, None), self.model.line(changed_id)
            if after is not None:
                self._lines_seen[changed_id] = after
            if (self._following and not change.is_history and before is not None
                    and after is not None):
                self._lineage.append((before, after, self._splitting if change.origin is self
                                      else None))
        line_id, index = self.selection
        line = self.model.line(line_id)
        if line is None:
            self.select(None)
        elif index is not None and index >= len(line.segments):
            self.select(line_id)

    # -- importing -------------------------------------------------------------------------------
    def cancel_imports(self) -> bool:
        """Drop every import in progress at once (:meth:`ImportRunner.cancel`), its traces
        waiting in the worker too (the bulk jobs of :meth:`submit_anchors`); False if there
        was none."""
        if not self.imports.cancel():
            return False
        self.jobs.drop_bulk()
        return True

    # -- editing finished lines ------------------------------------------------------------------
    def select(self, line_id: int | None, segment: int | None = None) -> None:
        if (line_id, segment) != self.selection:
            self.selection = (line_id, segment)
            self.selection_changed.emit()

    def select_at(self, point, tolerance: float) -> bool:
        """Select the visible segment nearest to a point, if within ``tolerance`` px."""
        found = self.model.segment_at(point, tolerance)
        self.select(*(found[:2] if found else (None, None)))
        return found is not None

    def move_anchor(self, line_id: int, index: int, point, exact: bool = False) -> None:
        """Move a vertex of a line (to the pixel centre nearest to ``point`` unless
        ``exact``); the one or two segments beside it are re-traced."""
        line = self.model.line(line_id)
        if line is None or self.raster is None:
            return
        p = self._snapped_inside(point, "the vertex dropped", exact)
        if p is None:
            self.lines_stale.emit()
            return
        if too_close(p, neighbours(line, index)):
            self.message.emit("a vertex must stay at least 2 px from the next one: not moved")
            self.lines_stale.emit()
            return
        self._edit(Edit("move", line, index, p))

    def split_segment(self, line_id: int, index: int, point, exact: bool = False) -> None:
        """Add a vertex to segment ``index`` of a line at ``point`` (the pixel centre nearest
        to it unless ``exact``); the segment's two halves are traced."""
        line = self.model.line(line_id)
        if line is None or self.raster is None or not 0 <= index < len(line.segments):
            return
        p = self._snapped_inside(point, "the point dropped", exact)
        if p is None:
            self.lines_stale.emit()
            return
        if too_close(p, line.anchors[index:index + 2]):
            self.lines_stale.emit()  # dropped on an end of the segment: nothing to split
            return
        self._edit(Edit("split", line, index, p))

    def hold(self, grab: Edit | None) -> None:
        """A press on a line, held: ``grab`` is the edit a drag from there makes (a "move" of
        its vertex ``index``, or a "split" of its segment ``index`` at the ``point`` pressed);
        None: let go. Edits that land meanwhile may add vertices before it: :meth:`grabbed`
        finds it on the line as it is."""
        self._held = grab
        if not self._following:
            self._lineage.clear()

    def grabbed(self, grab: Edit) -> tuple[Line, int] | None:
        """The line of ``grab`` (held) as it is now, and the index there of the vertex or
        segment grabbed; None where that is gone (the line deleted, the vertex or segment
        removed, an undo back before the grab, the lines replaced)."""
        line = self.model.line(grab.line_id)
        splits = (None if line is None or grab is not self._held
                  else self._splits_since(grab.base, line))
        if splits is None:
            return None
        now = grab.through(splits)
        return (line, now.index) if now.fits(line) else None

    def retrace_selection(self) -> None:
        """Re-trace the selected segment (or every traced segment of the selected line)."""
        line_id, index = self.selection
        line = self.model.line(line_id)
        if line is None or self.raster is None:
            return
        if Retrace.with_params(line, index, self.params).params:
            self._edit(Edit("params", line, segments=None if index is None else (index,),
                            params=self.params))

    def set_line_kind(self, line_id: int, kind: str) -> None:
        """Make a line a road or a river; its traced segments are traced again as such (one
        undo step)."""
        line = self.model.line(line_id)
        if line is None or kind == line.kind:
            return
        if self.raster is None:
            self.model.set_kind(line_id, kind)
        else:
            self._edit(Edit("kind", line, kind=kind))

    # -- the edits' queue --------------------------------------------------------------------------
    # Edits of lines (and undo, redo asked for meanwhile) take effect one at a time, in the
    # order made: an edit waits for the re-trace of the one before it to land, and is then
    # made on the line as it is (Edit.through carries its indices over the vertices the edits
    # before it added). Its result applies unless the line changed meanwhile in a way it
    # cannot be carried over (Retrace.target): then the edit is made again on the line as it
    # is, or, if it cannot be (the vertex or the line is gone), dropped with a message.
    @property
    def edits_pending(self) -> bool:
        """Whether an edit is being re-traced or waiting."""
        return self._edit_running is not None or bool(self._edits)

    @property
    def work_in_flight(self) -> bool:
        """Whether a segment of the line being drawn or an edit is being traced (or waits to
        be): work the lines do not hold yet (:attr:`changed` or :attr:`edits_changed` say when
        that may have ended)."""
        return self.line_drawing.state is DrawState.TRACING or self.edits_pending

    @property
    def undo_waiting(self) -> bool:
        """Whether an undo asked for waits for an edit's re-trace to land, and no redo asked
        for after it takes it back."""
        undos = 0
        for edit, _ in self._edits:
            if edit == "undo":
                undos += 1
            elif edit == "redo":
                undos = max(undos - 1, 0)
        return undos > 0

    def _edit(self, edit: Edit) -> None:
        """Make ``edit`` once the edits before it have landed. A change of parameters replaces
        the one still waiting for the same segments (typed digit by digit)."""
        last = self._edits[-1][0] if self._edits else None
        if (isinstance(last, Edit) and last.action == edit.action == "params"
                and last.base is edit.base and last.segments == edit.segments):
            self._edits[-1] = (edit, self._changes_outside)
        else:
            self._edits.append((edit, self._changes_outside))
        self._next_edit()

    def _drop_edits(self) -> None:
        """Forget the edits waiting, the one in flight and the grab held (new image, lines
        replaced)."""
        self._edits.clear()
        self._edit_running = None
        self._held = None
        self._lineage.clear()

    @property
    def _following(self) -> bool:
        """Whether the lines' changes are kept (:attr:`_lineage`): for the edits pending, or
        for a grab held."""
        return self.edits_pending or self._held is not None

    def _next_edit(self) -> None:
        """Start the edits waiting, up to the first that needs tracing."""
        while self._edit_running is None and self._edits:
            edit, asked = self._edits.popleft()
            if edit == "undo":
                if not self.model.undo():
                    self.message.emit("nothing to undo")
            elif edit == "redo":
                if not self.model.redo():
                    self.message.emit("nothing to redo")
            else:
                self._start(edit, asked)
        if not self._following:
            self._lineage.clear()
        self.edits_changed.emit()

    def _splits_since(self, base: Line, line: Line) -> list[tuple[int, Line]] | None:
        """The splits ``(segment, the line split there)`` that made ``line`` out of ``base``,
        in order; None if ``line`` does not come from ``base`` by the edits seen."""
        splits, current = [], line
        while line is not base:
            step = next((step for step in reversed(self._lineage) if step[1] is line), None)
            if step is None:  # not from base (an undo went further back): as many vertices?
                return [] if len(current.anchors) == len(base.anchors) else None
            line = step[0]
            if step[2] is not None:
                splits.append((step[2], step[1]))
        return splits[::-1]

    def _start(self, edit: Edit, asked: int) -> None:
        """Make ``edit`` (asked for at ``asked`` changes outside the queue) on its line as it
        is now: trace its command, or apply it at once if nothing needs tracing."""
        line = self.model.line(edit.line_id)
        splits = None if line is None else self._splits_since(edit.base, line)
        if splits is None:
            self._stale((line or edit.base).name, asked)
            return
        command = edit.through(splits).command(line)
        if isinstance(command, str):
            self.message.emit(command)
            self.lines_stale.emit()
            self._lost(asked)
        elif command is not None and not command.requests:
            self._apply(command, ())
        elif command is not None:
            self._run(edit, command, asked)

    def _stale(self, name: str, asked: int) -> None:
        self.message.emit(f"{name} changed while re-tracing; result dropped")
        self.lines_stale.emit()
        self._lost(asked)

    def _lost(self, asked: int) -> None:
        """An edit (asked for at ``asked`` changes outside the queue) that did not land left
        no undo step: an undo asked for right after it, with no change of the lines made
        outside the queue in between (a delete), was meant for it, not for the step before
        it; so was a redo right after that undo."""
        if self._edits and self._edits[0] == ("undo", asked):
            self._edits.popleft()
            if self._edits and self._edits[0] == ("redo", asked):
                self._edits.popleft()

    def _apply(self, command: Retrace, segments: tuple[Segment, ...]) -> None:
        self._splitting = command.split
        try:
            command.apply(self.model, segments, origin=self)
        finally:
            self._splitting = None

    def _run(self, edit: Edit, command: Retrace, asked: int) -> None:
        """Trace a command's segments; its result becomes one undo step, unless the line
        changed meanwhile: then the edit is made again on the line as it is (a few times at
        most), or dropped."""
        ticket = self._edit_running = object()

        def done(outcome: TraceOutcome) -> None:
            if ticket is not self._edit_running:
                return
            self._edit_running = None
            if command.target(self.model) is not None:
                self._apply(command, outcome.segments)
                said = (RETRACED.format(name=self.model.line(edit.line_id).name),) \
                    if edit.action == "params" else ()
                self._landed(outcome, (*said, *outcome.notes))
                self.changed.emit()
            elif self.model.line(edit.line_id) is not None and edit.attempts < MAX_ATTEMPTS:
                self._edits.appendleft((replace(edit, attempts=edit.attempts + 1), asked))
            else:
                self._stale(command.line.name, asked)
            self._next_edit()

        def failed(exc: BaseException) -> None:
            if ticket is not self._edit_running:
                return
            self._edit_running = None
            self.message.emit(error_text(exc))
            self.lines_stale.emit()
            self._lost(asked)
            self._next_edit()

        self.submit(command.requests, done, failed)
