"""Importing lines: the file read and every imported line traced in the background, all added
as one undo step.

The file is read in the worker first (:meth:`ImportRunner.reading`: the window submits the job,
:func:`core.vectors.read_lines` asking the reading's ``live`` between two features). Then each
line is traced a few segments at a time, one bulk job after the other (:func:`job_size`: at
most :data:`SEGMENTS_PER_JOB` segments and :data:`JOB_LENGTH_PX` of them, or one longer
segment). Esc, another image or closing the window drops an import at once: the jobs waiting
are dropped, the one running ends unheard (a file being read stops within one feature), and
no line of it joins the model, however long its lines are; a click made meanwhile waits
behind one job (or the reading of a file) at most.
"""

from __future__ import annotations

import re
import time
from typing import Protocol

import numpy as np

from app.model import LinesModel, Point, Segment
from app.traces import TraceOutcome, error_text
from core.output import shown_value
from core.tracer import LINE_KINDS, TraceParams

#: Most segments one background job of an import traces.
SEGMENTS_PER_JOB = 4
#: Most length (px) of the segments one job traces, unless one segment is longer: tracing time
#: grows with the segments' length (the corridor's area), so that cancelling waits for about
#: the time of one long segment, or of a few short ones.
JOB_LENGTH_PX = 200.0
#: Least time (s) between two progress messages of an import (a line done always says so).
PROGRESS_INTERVAL_S = 0.25
#: How every progress message of an import begins (the messages log keeps only the latest).
PROGRESS_PREFIX = "importing lines from "
#: The end of core's reason for a feature in pixels that names no image (command-line wording).
PIXELS_NEED_IMAGE = " (seeds in pixel coordinates need properties.image)"


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless one: "1 line", "2 lines", "0 bands"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def feature_name(seed: str) -> str:
    """A feature as the user counts them, from its seed id (:class:`core.vectors.Failure`):
    "#12" → "feature 13", "#3/1" → "feature 4, part 2", an id of its own → 'feature "id"'."""
    counted = re.fullmatch(r"#(\d+)(?:/(\d+))?", seed)
    if counted is None:
        return f'feature "{seed}"'
    index, part = counted.groups()
    return f"feature {int(index) + 1}" + ("" if part is None else f", part {int(part) + 1}")


def skipped_feature(failure, image_name: str) -> str:
    """Why a feature of an imported file was skipped (a :class:`core.vectors.Failure`), in the
    application's words: the feature counted from 1, and what to do where it can be done."""
    if failure.seed is None:
        return failure.reason
    about_itself = f"feature {failure.seed} "  # core names the feature itself in the reason
    if failure.reason.startswith(about_itself):
        return f"{feature_name(failure.seed)} {failure.reason.removeprefix(about_itself)}"
    reason = failure.reason
    if reason.endswith(PIXELS_NEED_IMAGE):
        reason = (reason.removesuffix(PIXELS_NEED_IMAGE) + "; if it is in pixels of this image, "
                  f'add "image": "{image_name}" to its properties')
    return f"{feature_name(failure.seed)}: {reason}"


def unknown_kinds(lines) -> list[str]:
    """The ``kind`` property of every imported line (:class:`core.vectors.ImportedLine`) whose
    feature names a kind but no line kind, nothing else in its properties saying which: such
    lines take the New line kind. As a message shows them (:func:`core.output.shown_value`:
    cut short), in order, one per line."""
    return [shown_value(line.stated_kind) for line in lines if line.stated_kind is not None]


def unknown_kind_note(kinds: list[str], source: str, default_kind: str) -> str:
    """What to say of the lines of the file ``source`` of unknown ``kinds``
    (:func:`unknown_kinds`), which take ``default_kind``; "" if there are none."""
    if not kinds:
        return ""
    values = list(dict.fromkeys(kinds))
    others = f" and {plural(len(values) - 1, 'other value')}" if len(values) > 1 else ""
    return (f"{plural(len(kinds), 'line')} of {source} {'has' if len(kinds) == 1 else 'have'}"
            f" kind {values[0]}{others}, not {' or '.join(LINE_KINDS)}: traced as "
            f"{default_kind}, the New line kind")


def edited_note(lines, source: str) -> str:
    """What to say of the lines of the file ``source`` whose exported anchors no longer match
    their geometry (:attr:`core.vectors.ImportedLine.note`: edited since, e.g. in QGIS), which
    are taken as drawn; "" if there are none."""
    notes = [line.note for line in lines if line.note is not None]
    if not notes:
        return ""
    return f"{plural(len(notes), 'edited line')} of {source}: {notes[0]}"


def job_size(lengths: np.ndarray) -> int:
    """How many of a line's next segments one job traces.

    Parameters
    ----------
    lengths : ndarray of shape (M,), M >= 1
        The lengths (px) of the segments left to trace, in order.

    Returns
    -------
    int
        At least 1; at most :data:`SEGMENTS_PER_JOB`, and more than 1 only while their total
        length stays within :data:`JOB_LENGTH_PX`.
    """
    total = np.cumsum(lengths[:SEGMENTS_PER_JOB])
    return max(1, int(np.searchsorted(total, JOB_LENGTH_PX, side="right")))


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
    """Imports in progress: each reads its file (:meth:`reading`), then traces every line a few
    segments per bulk job (:func:`job_size`), and its lines join the model together when the
    last is traced; :meth:`cancel` drops them all, those being read too. Several imports go on
    side by side, each its own undo step."""

    def __init__(self, model: LinesModel, host: ImportHost) -> None:
        self.model = model
        self.host = host
        self._running: set[_Import | Reading] = set()

    @property
    def running(self) -> bool:
        return bool(self._running)

    def cancel(self) -> bool:
        """Drop every import in progress, with the lines it traced (none joined the model):
        the job running ends unheard (a file being read stops within one feature), the jobs
        waiting do nothing (the host drops them at once) and no further one is submitted;
        False if there was none."""
        if not self._running:
            return False
        self._running.clear()
        return True

    def reading(self, source: str) -> Reading:
        """An import whose file ``source`` is now read (in the worker): in progress until
        :meth:`end_reading`, unless :meth:`cancel` drops it first."""
        reading = Reading(self, source)
        self._running.add(reading)
        return reading

    def end_reading(self, reading: Reading) -> bool:
        """``reading``'s file is read (or could not be): True if the import goes on (the caller
        then traces its lines with :meth:`start`, or says why it cannot), False if it was
        dropped meanwhile (its result is then dropped too)."""
        if reading not in self._running:
            return False
        self._running.discard(reading)
        return True

    def start(self, lines, source: str, default_kind: str, note: str = "") -> None:
        """Trace imported lines (:class:`core.vectors.ImportedLine`) with the current
        parameters, each as its own kind or ``default_kind``. Messages report the progress and,
        at the end, the segments kept straight; ``note`` (what to know of the file: features
        left out, lines of unknown kind, in short) follows them."""
        if not lines:
            return
        job = _Import(self, source, note)
        self._running.add(job)
        job.start([(line.name, line.kind or default_kind,
                    np.asarray(line.anchors, dtype=np.float64), line.straight) for line in lines])

    def is_live(self, job: _Import | Reading) -> bool:
        """Whether ``job`` is still in progress (not cancelled, nor finished); the worker asks
        too."""
        return job in self._running

    def finish(self, job: _Import) -> None:
        """Every line of ``job`` traced: add them as one undo step and say so."""
        self._running.discard(job)
        added = self.model.add_lines(job.traced, origin=self)
        segments = sum(len(line.segments) for line in added)
        problems = job.problems
        straight = f"; {plural(len(problems), 'segment')} kept straight ({problems[0]})" \
            if problems else ""
        self.host.tell(f"imported {plural(len(added), 'line')}, {plural(segments, 'segment')} "
                       f"from {job.source}{straight}{job.note}")
        self.host.select(added[-1].id)
        self.host.drawing_changed()


class Reading:
    """An import whose file is being read (:meth:`ImportRunner.reading`)."""

    def __init__(self, runner: ImportRunner, source: str) -> None:
        self.runner = runner
        self.source = source

    def live(self) -> bool:
        """Whether the import still goes on (not cancelled, nor read): the worker's reading
        asks between two features, and stops once it does not."""
        return self.runner.is_live(self)


class _Import:
    """One import in progress: its lines (each a :class:`_LineTrace`), those traced (in the
    order they were done), the reasons of segments kept straight, and the progress."""

    def __init__(self, runner: ImportRunner, source: str, note: str) -> None:
        self.runner = runner
        self.host = runner.host
        self.source = source
        self.note = f"; {note}" if note else ""
        self.lines = 0
        self.traced: list[tuple[str, str, tuple[Point, ...], tuple[Segment, ...]]] = []
        self.problems: list[str] = []
        self.total = 0  # segments, of every line
        self.done = 0  # segments traced, of every line
        self.told = time.monotonic()

    def start(self, lines: list[tuple[str, str, np.ndarray, tuple[bool, ...]]]) -> None:
        """Submit the first job of every line ``(name, kind, anchors (K, 2), straight)``
        (``straight``: :attr:`core.vectors.ImportedLine.straight`)."""
        self.lines = len(lines)
        self.total = sum(len(anchors) - 1 for _, _, anchors, _ in lines)
        self.tell_progress()
        for name, kind, anchors, straight in lines:
            _LineTrace(self, name, kind, anchors, straight).submit_next()

    def live(self) -> bool:
        """Whether the import still runs (not cancelled, nor finished)."""
        return self.runner.is_live(self)

    def add(self, segments: int, reasons: list[str]) -> None:
        """A job traced ``segments`` segments, kept straight for ``reasons``."""
        self.done += segments
        self.problems += reasons
        if time.monotonic() - self.told >= PROGRESS_INTERVAL_S:
            self.tell_progress()

    def line_done(self, line: tuple[str, str, tuple[Point, ...], tuple[Segment, ...]]) -> None:
        """A line is traced: the import is done with the last one."""
        self.traced.append(line)
        if len(self.traced) == self.lines:
            self.runner.finish(self)
        else:
            self.tell_progress()

    def tell_progress(self) -> None:
        """Say how far the import is."""
        self.told = time.monotonic()
        self.host.tell(f"{PROGRESS_PREFIX}{self.source}: {len(self.traced)}/"
                       f"{plural(self.lines, 'line')}, {self.done}/{plural(self.total, 'segment')}"
                       f" (Esc cancels){self.note}")


class _LineTrace:
    """One line of an import, traced one job after the other (:func:`job_size`); its anchors
    become points a job at a time, so that no step holds the window for long however many
    vertices the line has. Segments the file says were drawn straight stay straight."""

    def __init__(self, owner: _Import, name: str, kind: str, anchors: np.ndarray,
                 straight: tuple[bool, ...] = ()) -> None:
        self.owner = owner
        self.name = name
        self.kind = kind
        self.anchors = anchors
        self.lengths = np.hypot(*np.diff(anchors, axis=0).T)
        self.straight = np.zeros(len(self.lengths), dtype=bool)
        self.straight[:len(straight)] = straight
        self.points: list[Point] = []  # the anchors traced so far
        self.segments: list[Segment] = []
        self.job: tuple[Point, ...] = ()  # the anchors being traced

    def submit_next(self) -> None:
        """Trace the line's next segments in the worker (those up to the next straight one;
        straight ones are added at once)."""
        first = len(self.segments)
        kind_changes = np.flatnonzero(self.straight[first:] != self.straight[first])
        run = int(kind_changes[0]) if kind_changes.size else len(self.lengths) - first
        if self.straight[first]:
            self.job = tuple(map(tuple, self.anchors[first:first + run + 1].tolist()))
            self._add(tuple(Segment.straight(a, b) for a, b in zip(self.job[:-1], self.job[1:],
                                                                    strict=True)), [])
            return
        count = min(job_size(self.lengths[first:]), run)
        self.job = tuple(map(tuple, self.anchors[first:first + count + 1].tolist()))
        host = self.owner.host
        host.submit_anchors(self.job, host.line_params(self.kind), self._traced, self._failed,
                            self.owner.live)

    def _traced(self, result: tuple[TraceOutcome, list[str]]) -> None:
        if self.owner.live():
            outcome, reasons = result
            self._add(outcome.segments, reasons)

    def _failed(self, exc: BaseException) -> None:
        """An unexpected error: the job's segments stay straight, the error is the reason."""
        if self.owner.live():
            self._add(tuple(Segment.straight(a, b) for a, b in zip(self.job[:-1], self.job[1:],
                                                                    strict=True)),
                      [error_text(exc)] * (len(self.job) - 1))

    def _add(self, segments: tuple[Segment, ...], reasons: list[str]) -> None:
        """Keep a job's segments; trace the next ones, or say the line is done."""
        self.points += self.job[1:] if self.points else self.job
        self.segments += segments
        self.owner.add(len(segments), reasons)
        if len(self.segments) < len(self.anchors) - 1:
            self.submit_next()
        else:
            self.owner.line_done((self.name, self.kind, tuple(self.points),
                                  tuple(self.segments)))
