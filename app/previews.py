"""The live preview: the dashed trace from the tail anchor to the cursor."""

from __future__ import annotations

from typing import Protocol

import numpy as np
from PySide6.QtCore import QObject, QTimer

from app.drawing import DrawState, LineDrawing
from app.model import Point, Segment
from app.traces import TraceRequest, error_text


class PreviewHost(Protocol):
    """What :class:`PreviewScheduler` needs from its surroundings."""

    def submit(self, requests: tuple[TraceRequest, ...], done, failed, preview: bool) -> None:
        """Trace in the worker; a preview waits behind other jobs and replaces a waiting one."""

    def is_running(self, requests: tuple[TraceRequest, ...]) -> bool: ...

    def drop_waiting_preview(self) -> None: ...

    def inside_image(self, point: Point) -> bool:
        """Whether a point lies on the open image (False with none open)."""

    def drawing_changed(self) -> None: ...

    def tell(self, text: str) -> None: ...


class PreviewScheduler(QObject):
    """Mouse moves become at most one preview request per ``INTERVAL_MS``; none while a
    segment of the line is being traced, none for a request already shown or running.

    Attributes
    ----------
    segment : Segment or None
        The preview shown; ``request`` is what it was traced for.
    """

    INTERVAL_MS = 30

    def __init__(self, drawing: LineDrawing, host: PreviewHost, parent: QObject | None = None):
        super().__init__(parent)
        self.drawing = drawing
        self.host = host
        self.segment: Segment | None = None
        self.request: TraceRequest | None = None
        self.cursor: tuple[Point, bool] | None = None  # last hover: point, straight
        self._timer = QTimer(self, singleShot=True, interval=self.INTERVAL_MS)
        self._timer.timeout.connect(self._submit)

    def hover(self, point: Point, straight: bool) -> None:
        """The cursor is at ``point`` (snapped): show a straight preview now, or trace one
        soon."""
        self.cursor = (point, straight)
        tail = self.drawing.tail
        if tail is None:  # not drawing (also whenever no image is open)
            return
        if straight:
            self._show(self.drawing.request(tail, point, True), Segment.straight(tail, point))
        elif not self._timer.isActive():
            self._timer.start()

    def refresh(self) -> None:
        """Trace the preview again where the cursor is (the parameters changed)."""
        self.clear()
        if self.cursor is not None:
            self.hover(*self.cursor)

    def take(self, request: TraceRequest) -> Segment | None:
        """Drop the preview waiting to be traced; the preview shown if it is ``request``'s."""
        self.host.drop_waiting_preview()
        return self.segment if request == self.request else None

    def clear(self) -> None:
        self.request = self.segment = None
        self.host.drop_waiting_preview()

    def _submit(self) -> None:
        tail = self.drawing.tail
        if tail is None or self.cursor is None or self.drawing.state is DrawState.TRACING:
            return
        b, straight = self.cursor
        if straight or np.hypot(b[0] - tail[0], b[1] - tail[1]) < 2:
            return  # a straight preview is already shown
        if not self.host.inside_image(b):
            self.clear()
            self.host.drawing_changed()
            return
        request = self.drawing.request(tail, b, False)
        if request == self.request or self.host.is_running((request,)):
            return

        def done(outcome) -> None:
            if request.a == self.drawing.tail:
                self._show(request, outcome.segments[0])

        def failed(exc: BaseException) -> None:
            if request.a == self.drawing.tail:
                self.clear()
                self.host.tell(error_text(exc))
                self.host.drawing_changed()

        self.host.submit((request,), done, failed, preview=True)

    def _show(self, request: TraceRequest, segment: Segment) -> None:
        self.request, self.segment = request, segment
        self.host.drawing_changed()
