"""The application's interaction parts without a window: the drawing state machine, re-trace
commands, imports, and the model's change notices."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # the preview's timer needs a QApplication

from types import SimpleNamespace

import numpy as np
import pytest

from app.drawing import DrawState, LineDrawing
from app.edits import Retrace
from app.imports import ImportRunner
from app.model import LinesModel, Segment
from app.previews import PreviewScheduler
from app.traces import TraceOutcome, TraceRequest
from core.errors import NoAdmissiblePath
from core.tracer import TraceParams
from core.vectors import ImportedLine


def bent(a, b) -> Segment:
    """A 'traced' segment a → b through a point off the chord."""
    middle = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 1)
    return Segment(np.array([a, middle, b], dtype=float), np.array([-1.0, -1.0]), -2.0,
                   TraceParams(), TraceParams(guides=1, points=3, halfwidth=4.0), "cpu")


class FakeHost:
    """Runs nothing: submitted traces wait in ``jobs`` until the test lands or fails them."""

    def __init__(self) -> None:
        self.jobs: list[SimpleNamespace] = []
        self.messages: list[str] = []
        self.selection = (None, None)
        self.added: list[TraceOutcome] = []
        self.preview: tuple[TraceRequest, Segment] | None = None

    def submit(self, requests, done, failed, preview=False) -> None:
        self.jobs.append(SimpleNamespace(requests=requests, done=done, failed=failed,
                                         preview=preview))

    def submit_anchors(self, anchors, params, done, failed, live) -> None:
        self.jobs.append(SimpleNamespace(anchors=anchors, params=params, done=done,
                                         failed=failed, live=live))

    def follow(self, requests, done, failed) -> bool:
        return False

    def is_running(self, requests) -> bool:
        return False

    def drop_waiting_preview(self) -> None:
        pass

    def inside_image(self, point) -> bool:
        return 0 <= point[0] <= 100 and 0 <= point[1] <= 100

    def line_params(self, kind: str) -> TraceParams:
        return TraceParams(line_kind=kind)

    def take_preview(self, request):
        return self.preview[1] if self.preview and self.preview[0] == request else None

    def clear_preview(self) -> None:
        self.preview = None

    def select(self, line_id, segment=None) -> None:
        self.selection = (line_id, segment)

    def drawing_changed(self) -> None:
        pass

    def segment_added(self, outcome) -> None:
        self.added.append(outcome)

    def tell(self, text: str) -> None:
        self.messages.append(text)

    def land(self, index: int = 0) -> None:
        """The job ``index`` finishes: each request traced as a bent segment."""
        job = self.jobs.pop(index)
        job.done(TraceOutcome(tuple(bent(r.a, r.b) for r in job.requests), 1.0))


@pytest.fixture
def drawing():
    model, host = LinesModel(), FakeHost()
    return LineDrawing(model, host)


def test_clicks_become_a_line_through_the_states(drawing):
    model, host = drawing.model, drawing.host
    assert drawing.state is DrawState.IDLE
    drawing.press((0.0, 0.0))
    assert (drawing.state, drawing.tail, host.jobs) == (DrawState.DRAWING, (0.0, 0.0), [])
    drawing.press((10.0, 0.0))
    assert drawing.state is DrawState.TRACING
    (job,) = host.jobs
    assert job.requests == (TraceRequest((0.0, 0.0), (10.0, 0.0), TraceParams()),)
    drawing.press((20.0, 5.0))  # waits for the segment in flight
    assert len(host.jobs) == 1
    host.land()
    (line,) = model.lines
    assert line.anchors == ((0.0, 0.0), (10.0, 0.0))
    assert host.selection == (line.id, 0)
    assert drawing.state is DrawState.TRACING  # the queued click is being traced
    assert host.jobs[0].requests[0].a == (10.0, 0.0)
    host.land()
    assert drawing.state is DrawState.DRAWING
    assert model.lines[0].anchors == ((0.0, 0.0), (10.0, 0.0), (20.0, 5.0))
    assert drawing.last_latency_ms is not None
    drawing.finish()
    assert (drawing.state, drawing.tail, drawing.line_id) == (DrawState.IDLE, None, None)
    assert model.undo_label == "Add segment"


def test_a_double_click_while_tracing_keeps_its_end_point(drawing):
    """press, press, press (double-click), finish: the last point is traced before it ends."""
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0))
    drawing.press((20.0, 0.0))
    drawing.finish()
    drawing.host.land()
    assert drawing.state is DrawState.TRACING  # the double-clicked point
    drawing.host.land()
    assert drawing.state is DrawState.IDLE
    assert drawing.model.lines[0].anchors == ((0.0, 0.0), (10.0, 0.0), (20.0, 0.0))


def test_finish_while_tracing_waits_for_the_segment(drawing):
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0))
    drawing.finish()
    assert drawing.state is DrawState.TRACING
    drawing.host.land()
    assert drawing.state is DrawState.IDLE
    assert len(drawing.model.lines[0].segments) == 1


def test_straight_and_previewed_segments_need_no_trace(drawing):
    host = drawing.host
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0), straight=True)
    assert drawing.model.lines[0].segments[0].is_straight
    request = drawing.request((10.0, 0.0), (20.0, 0.0), False)
    host_preview = bent((10.0, 0.0), (20.0, 0.0))
    host.preview = (request, host_preview)
    drawing.press((20.0, 0.0))
    assert host.jobs == []
    assert drawing.state is DrawState.DRAWING
    assert drawing.model.lines[0].segments[1] is host_preview


@pytest.mark.parametrize("key", ["cancel", "backspace"])
def test_a_dropped_segment_in_flight_never_lands(drawing, key):
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0))
    getattr(drawing, key)()
    assert drawing.state is (DrawState.IDLE if key == "cancel" else DrawState.DRAWING)
    drawing.host.land()
    assert drawing.model.lines == ()


def test_backspace_walks_back_to_the_start_anchor(drawing):
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0), straight=True)
    drawing.press((20.0, 0.0), straight=True)
    assert drawing.backspace()
    assert drawing.tail == (10.0, 0.0)
    assert drawing.backspace()
    assert (drawing.tail, drawing.line_id, drawing.model.lines) == ((0.0, 0.0), None, ())
    assert drawing.state is DrawState.DRAWING
    drawing.finish()
    assert not drawing.backspace()  # not drawing: the caller handles the selected line


def test_a_failed_trace_keeps_the_tail_and_drops_waiting_clicks(drawing):
    host = drawing.host
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0))
    drawing.press((20.0, 0.0))
    host.jobs.pop().failed(NoAdmissiblePath("no admissible path"))
    assert (drawing.state, drawing.tail) == (DrawState.DRAWING, (0.0, 0.0))
    assert host.messages[-1] == "no admissible path"
    assert host.jobs == []
    assert drawing.model.lines == ()


def test_undo_while_tracing_drops_the_segment_and_follows_the_line_end(drawing):
    model, host = drawing.model, drawing.host
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0), straight=True)
    drawing.press((20.0, 0.0), straight=True)
    drawing.press((30.0, 0.0))
    model.undo()
    assert (drawing.state, drawing.tail) == (DrawState.DRAWING, (10.0, 0.0))
    host.land()
    assert model.lines[0].anchors == ((0.0, 0.0), (10.0, 0.0))
    model.delete(model.lines[0].id)  # from the lines panel
    assert drawing.state is DrawState.IDLE


def test_edits_of_other_lines_leave_the_drawing_alone(drawing):
    model = drawing.model
    other = model.add_line((50.0, 50.0), (60.0, 60.0), Segment.straight((50, 50), (60, 60)))
    drawing.press((0.0, 0.0))
    drawing.press((10.0, 0.0))
    model.rename(other.id, "Other")
    assert drawing.state is DrawState.TRACING
    drawing.host.land()
    assert len(model.lines) == 2


def test_model_changes_name_the_lines_and_the_origin():
    model, changes = LinesModel(), []
    model.subscribe(changes.append)
    first = model.add_line((0, 0), (1, 1), Segment.straight((0, 0), (1, 1)), origin="me")
    second = model.add_line((5, 5), (6, 6), Segment.straight((5, 5), (6, 6)))
    model.rename(first.id, "First")
    model.undo()
    model.reset()
    assert [(c.label, set(c.line_ids), c.origin, c.is_history) for c in changes] == [
        ("Add line", {first.id}, "me", False), ("Add line", {second.id}, None, False),
        ("Rename line", {first.id}, None, False), ("Undo", {first.id}, None, True),
        ("Reset", {first.id, second.id}, None, True)]


def traced_straight_traced(model: LinesModel):
    """A line of the model from (0, 0) to (30, 0): a traced, a straight and a traced segment."""
    line = model.add_line((0.0, 0.0), (10.0, 0.0), bent((0.0, 0.0), (10.0, 0.0)))
    line = model.append_segment(line.id, (20.0, 0.0), Segment.straight((10, 0), (20, 0)))
    return model.append_segment(line.id, (30.0, 0.0), bent((20.0, 0.0), (30.0, 0.0)))


def test_retrace_commands_choose_their_segments():
    model = LinesModel()
    line = traced_straight_traced(model)
    moved = Retrace.move_anchor(line, 0, (0.0, 3.0))
    assert [(r.a, r.b) for r in moved.requests] == [((0.0, 3.0), (10.0, 0.0))]
    assert list(Retrace.move_anchor(line, 2, (20.0, 3.0)).params) == [1, 2]
    assert list(Retrace.with_params(line, None, TraceParams(sigma=2.0)).params) == [0, 2]
    as_river = Retrace.as_kind(line, "river")
    assert {p.line_kind for p in as_river.params.values()} == {"river"}
    segments = tuple(bent(r.a, r.b) for r in moved.requests)
    assert moved.is_current(model)
    result = moved.apply(model, segments)
    assert result.anchors[0] == (0.0, 3.0)
    assert result.segments[1] is line.segments[1]
    assert model.undo_label == "Move vertex"
    assert not moved.is_current(model)  # made for the line before the move


def test_a_split_adds_a_vertex_and_traces_both_halves_as_the_segment_was():
    model = LinesModel()
    line = traced_straight_traced(model)
    split = Retrace.split_segment(line, 1, (15.0, 4.0))
    assert [(r.a, r.b) for r in split.requests] == [((10.0, 0.0), (15.0, 4.0)),
                                                     ((15.0, 4.0), (20.0, 0.0))]
    assert list(split.params.values()) == [None, None]  # a straight segment stays straight
    traced = Retrace.split_segment(line, 2, (25.0, 2.0))
    assert all(p is line.segments[2].request for p in traced.params.values())
    halves = tuple(Segment.straight(r.a, r.b) for r in split.requests)
    result = split.apply(model, halves)
    assert result.anchors == ((0.0, 0.0), (10.0, 0.0), (15.0, 4.0), (20.0, 0.0), (30.0, 0.0))
    assert result.segments[0] is line.segments[0]
    assert result.segments[3] is line.segments[2]
    assert result.segments[1:3] == halves
    assert model.undo_label == "Add vertex"
    assert not traced.is_current(model)  # made for the line before the split
    model.undo()
    assert model.line(line.id).anchors == line.anchors
    with pytest.raises(ValueError, match="no segment 3"):
        model.split_segment(line.id, 3, (1.0, 1.0), halves, "Add vertex")


def test_segment_at_finds_the_nearest_visible_segment():
    model = LinesModel()
    line = model.add_line((0.0, 0.0), (10.0, 0.0), Segment.straight((0, 0), (10, 0)))
    line = model.append_segment(line.id, (10.0, 10.0), Segment.straight((10, 0), (10, 10)))
    assert model.segment_at((4.0, 1.0), 2.0) == (line.id, 0, (4.0, 0.0))
    assert model.segment_at((9.0, 6.0), 2.0) == (line.id, 1, (10.0, 6.0))
    assert model.segment_at((4.0, 5.0), 2.0) is None
    assert model.segment_at((4.0, 1.0), 2.0, exclude=line.id) is None
    model.set_visible(line.id, False)
    assert model.segment_at((4.0, 1.0), 2.0) is None


def test_an_import_joins_the_model_as_one_step_or_not_at_all():
    model, host = LinesModel(), FakeHost()
    runner = ImportRunner(model, host)
    lines = [ImportedLine("A", None, np.array([(0, 0), (10, 0), (20, 0)], float)),
             ImportedLine("B", "river", np.array([(0, 5), (10, 5)], float))]
    runner.start(lines, "roads.geojson", "road")
    assert runner.running
    assert [job.params.line_kind for job in host.jobs] == ["road", "river"]
    second = host.jobs.pop()
    second.done((TraceOutcome((bent((0.0, 5.0), (10.0, 5.0)),), 1.0), []))
    assert model.lines == ()
    assert "1/2" in host.messages[-1]
    first = host.jobs.pop()
    first.failed(RuntimeError("broken"))
    assert [(line.name, line.kind) for line in model.lines] == [("B", "river"), ("A", "road")]
    assert model.lines[1].segments[0].is_straight
    assert model.undo_label == "Import lines"
    assert "2 segments kept straight" in host.messages[-1]
    assert not runner.running

    runner.start(lines, "again.geojson", "road")
    assert runner.cancel()
    assert not host.jobs[0].live()
    host.jobs[0].failed(RuntimeError("late"))
    assert len(model.lines) == 2
    assert not runner.cancel()


def test_mouse_moves_become_at_most_one_preview_per_interval(drawing, qtbot):
    host = drawing.host
    previews = PreviewScheduler(drawing, host)
    previews.hover((50.0, 0.0), False)  # not drawing: nothing
    qtbot.wait(2 * PreviewScheduler.INTERVAL_MS)
    assert host.jobs == []
    drawing.press((0.0, 0.0))
    for x in range(40, 60):
        previews.hover((float(x), 0.0), False)
    qtbot.waitUntil(lambda: len(host.jobs) == 1, timeout=1_000)
    qtbot.wait(2 * PreviewScheduler.INTERVAL_MS)
    (job,) = host.jobs
    assert job.preview
    assert job.requests[0].b in {(40.0, 0.0), (59.0, 0.0)}  # the first or the latest move
    host.land()
    assert previews.segment is not None
    assert previews.take(previews.request) is previews.segment
    previews.hover((70.0, 10.0), True)  # straight: shown at once, nothing traced
    assert previews.segment.is_straight
    assert host.jobs == []
    previews.hover((150.0, 0.0), False)  # off the image: the preview goes
    qtbot.waitUntil(lambda: previews.segment is None, timeout=1_000)
    assert host.jobs == []
    drawing.press((60.0, 0.0))  # a segment in flight: no preview meanwhile
    previews.hover((90.0, 0.0), False)
    qtbot.wait(3 * PreviewScheduler.INTERVAL_MS)
    assert [job.preview for job in host.jobs] == [False]


def test_the_interaction_logic_imports_no_qt():
    """The parts named Qt-free in app/__init__.py stay testable without Qt."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    modules = ["model", "drawing", "edits", "imports", "traces", "params", "session", "files"]
    code = "; ".join([f"import app.{name}" for name in modules]
                     + ["import sys", "print(sorted(m for m in sys.modules if 'PySide6' in m))"])
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
