"""Importing lines: every imported line traced in the background, all added as one undo step."""

from __future__ import annotations

from typing import Protocol

from app.model import LinesModel, Point, Segment
from app.traces import TraceOutcome, error_text
from core.tracer import TraceParams


class ImportHost(Protocol):
    """What :class:`ImportRunner` needs from its surroundings."""

    def submit_anchors(self, anchors: tuple[Point, ...], params: TraceParams, done, failed,
                       live) -> None:
        """Trace between consecutive anchors as a bulk job (skipped once ``live()`` is False);
        then ``done((TraceOutcome, problems))`` or ``failed(exc)``."""

    def line_params(self, kind: str) -> TraceParams: ...

    def select(self, line_id: int | None, segment: int | None = None) -> None: ...

    def drawing_changed(self) -> None: ...

    def tell(self, text: str) -> None: ...


class ImportRunner:
    """Imports in progress: each is a set of bulk jobs, one per line, whose lines join the
    model together when the last is traced; :meth:`cancel` drops them all."""

    def __init__(self, model: LinesModel, host: ImportHost) -> None:
        self.model = model
        self.host = host
        self._running: set[object] = set()  # a ticket per import in progress

    @property
    def running(self) -> bool:
        return bool(self._running)

    def cancel(self) -> bool:
        """Drop every import in progress (the jobs still waiting return at once); False if
        there was none."""
        if not self._running:
            return False
        self._running.clear()
        return True

    def start(self, lines, source: str, default_kind: str) -> None:
        """Trace imported lines (:class:`core.vectors.ImportedLine`) with the current
        parameters, each as its own kind or ``default_kind``. Messages report the progress and,
        at the end, the segments kept straight."""
        ticket = object()
        self._running.add(ticket)
        traced: list[tuple[str, str, tuple[Point, ...], tuple[Segment, ...]]] = []
        problems: list[str] = []

        def live() -> bool:
            return ticket in self._running

        def finish_one() -> None:
            if len(traced) < len(lines):
                self.host.tell(f"importing lines from {source}: {len(traced)}/{len(lines)} "
                               "(Esc cancels)")
                return
            self._running.discard(ticket)
            added = self.model.add_lines(traced, origin=self)
            segments = sum(len(line.segments) for line in added)
            straight = f"; {len(problems)} kept straight ({problems[0]})" if problems else ""
            self.host.tell(f"imported {len(added)} line(s), {segments} segment(s) from "
                           f"{source}{straight}")
            self.host.select(added[-1].id)
            self.host.drawing_changed()

        for line in lines:
            anchors = tuple((float(x), float(y)) for x, y in line.anchors)
            kind = line.kind or default_kind

            def done(result: tuple[TraceOutcome, list[str]], name=line.name, kind=kind,
                     anchors=anchors) -> None:
                if live():
                    outcome, reasons = result
                    traced.append((name, kind, anchors, outcome.segments))
                    problems.extend(reasons)
                    finish_one()

            def failed(exc: BaseException, name=line.name, kind=kind, anchors=anchors) -> None:
                if live():
                    traced.append((name, kind, anchors, tuple(
                        Segment.straight(a, b) for a, b in zip(anchors[:-1], anchors[1:],
                                                               strict=True))))
                    problems.extend([error_text(exc)] * (len(anchors) - 1))
                    finish_one()

            self.host.submit_anchors(anchors, self.host.line_params(kind), done, failed, live)
