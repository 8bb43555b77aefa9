"""Edits of a line made while an earlier one is still being re-traced: none is lost, they land
in the order made (each one undo step), and a click made meanwhile on the line being drawn
is kept. Traces are held in the worker until the test lets them go, so that every race is
played out the same way however fast the machine is."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt

import app.traces
from app.drawing import DrawState
from app.edits import Edit
from app.model import LinesModel, Segment
from core.errors import NoAdmissiblePath
from core.tracer import TraceParams
from tests import test_app
from tests.test_app import A, B, C, click, click_and_wait, view_pos, wait_idle

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped

D = (540.0, 100.0)  # further along the road of A, B, C
CTRL = Qt.KeyboardModifier.ControlModifier


class HeldTraces:
    """``app.traces.trace`` as the worker calls it; once :meth:`hold` is called, every trace
    waits in the worker until let go (:meth:`let_go`, :meth:`open`)."""

    def __init__(self, real) -> None:
        self.real = real
        self.condition = threading.Condition()
        self.held = False
        self.passes = 0  # traces let go while held
        self.waiting = 0  # traces waiting in the worker now
        self.traced: list[tuple] = []  # (a, b, params) of every trace, as it starts
        self.failing = 0  # how many of the traces let go next fail (NoAdmissiblePath)

    def __call__(self, raster, a, b, params, backend):
        with self.condition:
            self.waiting += 1
            assert self.condition.wait_for(lambda: not self.held or self.passes, timeout=30)
            self.waiting -= 1
            if self.held:
                self.passes -= 1
            failing, self.failing = self.failing > 0, max(self.failing - 1, 0)
        self.traced.append((a, b, params))
        if failing:
            raise NoAdmissiblePath("no admissible path (held trace made to fail)")
        return self.real(raster, a, b, params, backend)

    def hold(self) -> None:
        with self.condition:
            self.held, self.passes = True, 0

    def let_go(self, count: int = 1) -> None:
        with self.condition:
            self.passes += count
            self.condition.notify_all()

    def open(self) -> None:
        with self.condition:
            self.held = False
            self.condition.notify_all()


@pytest.fixture
def held(make_window, monkeypatch):
    """The windows' traces, held on demand (:class:`HeldTraces`); let go before the windows
    close."""
    traces = HeldTraces(app.traces.trace)
    monkeypatch.setattr(app.traces, "trace", traces)
    yield traces
    traces.open()


def wait_held(qtbot, held: HeldTraces, count: int = 1) -> None:
    """Wait until ``count`` traces wait in the worker (the job is running, its result not in)."""
    qtbot.waitUntil(lambda: held.waiting >= count, timeout=10_000)


def drag(qtbot, window, start, end) -> None:
    """Press at ``start``, move to ``end`` and release there (no waiting)."""
    viewport = window.canvas.viewport()
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=view_pos(window, start))
    qtbot.mouseMove(viewport, view_pos(window, end))
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=view_pos(window, end))
    assert not window.controller.drawing  # a drag, not a click (which starts a line)


def draw(qtbot, window, *points):
    """A finished line through ``points`` (traces let through); the line."""
    click(qtbot, window, points[0])
    for point in points[1:]:
        click_and_wait(qtbot, window, point)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    wait_idle(qtbot, window)
    return window.model.lines[-1]


def undo_labels(model: LinesModel) -> list[str]:
    return [label for _lines, label in model._undo]


def redo_labels(model: LinesModel) -> list[str]:
    return [label for _lines, label in model._redo]


def assert_whole(line) -> None:
    """Every segment runs exactly from its anchor to the next, traced as the line's kind."""
    assert len(line.anchors) == len(line.segments) + 1
    for k, segment in enumerate(line.segments):
        assert tuple(segment.polyline[0]) == line.anchors[k], k
        assert tuple(segment.polyline[-1]) == line.anchors[k + 1], k
        assert segment.is_straight or segment.request.line_kind == line.kind, k


def messages(window) -> list[str]:
    shown: list[str] = []
    window.controller.message.connect(shown.append)
    return shown


def moved(point, dx, dy):
    return (point[0] + dx, point[1] + dy)


def middle(segment: Segment, at: float = 0.5):
    return tuple(segment.polyline[int(at * (len(segment.polyline) - 1))])


# ------------------------------------------------------------- a click on the line being drawn
def test_a_click_made_while_the_drawn_line_is_retraced_is_traced_with_the_new_parameters(
        make_window, qtbot, held):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    drawn = window.model.lines
    (line,) = drawn
    assert window.controller.selection == (line.id, 0)
    held.hold()
    window.params_panel.max_angle.setValue(25.0)
    wait_held(qtbot, held)  # the debounce ran out: segment A-B is re-traced
    click(qtbot, window, C)  # the line goes on meanwhile
    assert window.controller.line_drawing.state is DrawState.TRACING
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, B, C)
    assert_whole(line)
    assert [s.request.max_angle for s in line.segments] == [25.0, 25.0]
    assert [s.params.max_angle for s in line.segments] == [25.0, 25.0]
    assert window.controller.drawing
    assert window.controller.tail == C
    assert undo_labels(window.model) == ["Add line", "Re-trace", "Add segment"]
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    window.controller.undo()
    (retraced,) = window.model.lines
    assert retraced.anchors == (A, B)
    assert retraced.segments[0] is line.segments[0]
    window.controller.undo()
    assert window.model.lines == drawn
    window.controller.undo()
    assert window.model.lines == ()


@pytest.mark.parametrize("first", ["kind", "click"])
def test_a_click_and_a_change_of_kind_of_the_drawn_line_both_take(make_window, qtbot, held,
                                                                   first):
    """The kind switched in the Lines panel while a click is traced, or a click made while
    the switch re-traces the line: the line ends up a river through all three points."""
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    drawn = window.model.lines
    held.hold()
    if first == "kind":
        window.lines_panel._cell_double_clicked(0, 1)  # road → river
        wait_held(qtbot, held)
        click(qtbot, window, C)
    else:
        click(qtbot, window, C)
        wait_held(qtbot, held)
        window.lines_panel._cell_double_clicked(0, 1)
    assert window.model.lines == drawn  # nothing landed yet
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert (line.anchors, line.kind) == ((A, B, C), "river")
    assert_whole(line)
    assert [s.request.line_kind for s in line.segments] == ["river", "river"]
    assert window.controller.tail == C
    assert undo_labels(window.model) == (["Add line", "Change kind", "Add segment"]
                                         if first == "kind" else
                                         ["Add line", "Add segment", "Change kind"])
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    window.controller.undo()
    window.controller.undo()
    assert window.model.lines == drawn


# ----------------------------------------------------------------- edits of one line, in a row
def test_a_second_drag_before_the_first_lands_is_kept(make_window, qtbot, held):
    window = make_window()
    before = window.model.lines + (draw(qtbot, window, A, B, C, D),)
    shown = messages(window)
    B2, D2 = moved(B, 6, 4), moved(D, -6, 5)
    held.hold()
    drag(qtbot, window, B, B2)
    wait_held(qtbot, held)
    drag(qtbot, window, D, D2)  # B's re-trace still running
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, B2, C, D2)
    assert_whole(line)
    assert window.canvas.line_items[line.id].line is line
    assert not any("changed while re-tracing" in text for text in shown)
    assert undo_labels(window.model) == ["Add line", "Add segment", "Add segment",
                                         "Move vertex", "Move vertex"]
    window.controller.undo()
    (first,) = window.model.lines
    assert first.anchors == (A, B2, C, D)
    assert first.segments[:2] == line.segments[:2]
    assert_whole(first)
    window.controller.undo()
    assert window.model.lines == before
    window.controller.redo()
    window.controller.redo()
    assert window.model.lines == (line,)


def test_a_vertex_added_then_a_later_vertex_dragged_before_it_lands(make_window, qtbot, held):
    """The drag names vertex C as shown (index 2); once the new vertex lands it is index 3."""
    window = make_window()
    before = draw(qtbot, window, A, B, C, D)
    grabbed = middle(before.segments[0])
    P = (round(grabbed[0]) + 6.0, round(grabbed[1]) + 5.0)
    C2 = moved(C, 6, 5)
    held.hold()
    drag(qtbot, window, grabbed, P)
    wait_held(qtbot, held)
    drag(qtbot, window, C, C2)
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, P, B, C2, D)
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Add vertex", "Move vertex"]
    window.controller.undo()
    (split,) = window.model.lines
    assert split.anchors == (A, P, B, C, D)
    assert split.segments[:2] == line.segments[:2]  # the halves as traced by the split
    assert split.segments[2:] == before.segments[1:]
    window.controller.undo()
    assert window.model.lines == (before,)


def test_two_vertices_added_to_one_segment_before_the_first_lands(make_window, qtbot, held):
    """The second vertex goes into the half of the segment it was dropped next to."""
    window = make_window()
    before = draw(qtbot, window, A, B)
    first, second = middle(before.segments[0], 0.3), middle(before.segments[0], 0.7)
    P1 = (round(first[0]) + 6.0, round(first[1]) + 5.0)
    P2 = (round(second[0]) + 6.0, round(second[1]) + 5.0)
    held.hold()
    drag(qtbot, window, first, P1)
    wait_held(qtbot, held)
    drag(qtbot, window, second, P2)
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, P1, P2, B)
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Add vertex", "Add vertex"]


def test_parameters_typed_during_a_retrace_end_up_on_the_segment(make_window, qtbot, held):
    """'4', '0' and '5' typed slowly (each past the debounce) into Max angle while the
    re-traces are slow: the segment ends up traced at 45°; the value typed while one waited
    is replaced by the next."""
    window = make_window()
    before = draw(qtbot, window, A, B)
    window.controller.select(before.id, 0)  # a finished line is not selected: Alt + click
    box = window.params_panel.max_angle
    held.hold()
    box.setValue(4.0)
    wait_held(qtbot, held)
    for value in (40.0, 45.0):
        box.setValue(value)
        qtbot.wait(400)  # past the debounce: the re-trace waits for the one running
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert_whole(line)
    assert (line.segments[0].request.max_angle, line.segments[0].params.max_angle) == (45, 45)
    assert [params.max_angle for _a, _b, params in held.traced[-2:]] == [4.0, 45.0]
    assert undo_labels(window.model) == ["Add line", "Re-trace", "Re-trace"]
    window.controller.undo()
    assert window.model.lines[0].segments[0].request.max_angle == 4.0
    window.controller.undo()
    assert window.model.lines == (before,)


# ------------------------------------------------------------------------ undo while in flight
def test_undo_during_a_drag_undoes_that_drag(make_window, qtbot, held):
    window = make_window()
    before = (draw(qtbot, window, A, B, C),)
    B2 = moved(B, 6, 4)
    held.hold()
    drag(qtbot, window, B, B2)
    wait_held(qtbot, held)
    shown = messages(window)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Z, CTRL)
    assert window.model.lines == before
    assert shown == ["undo: once the re-trace in progress lands"]  # the user is told
    held.open()
    wait_idle(qtbot, window)
    assert window.model.lines == before  # the drag landed, and was undone
    assert undo_labels(window.model) == ["Add line", "Add segment"]
    assert redo_labels(window.model) == ["Move vertex"]
    window.controller.redo()
    (line,) = window.model.lines
    assert line.anchors == (A, B2, C)
    assert_whole(line)
    window.controller.undo()
    assert window.model.lines == before
    window.controller.undo()
    assert window.model.lines[0].anchors == (A, B)


@pytest.mark.parametrize("keys", [("undo",), ("undo", "redo"), ("undo", "undo")])
def test_undo_during_a_drag_whose_retrace_fails_is_that_drags(make_window, qtbot, held, keys):
    # The failed drag leaves no undo step; the undo asked for meanwhile was meant for it
    # (and a redo right after, for that undo), not for the edit before it.
    window = make_window()
    before = (draw(qtbot, window, A, B, C),)
    held.hold()
    held.failing = 1
    drag(qtbot, window, B, moved(B, 6, 4))
    wait_held(qtbot, held)
    shown = messages(window)
    for key in keys:
        getattr(window.controller, key)()
    held.open()
    wait_idle(qtbot, window)
    assert "no admissible path (held trace made to fail)" in shown
    if keys == ("undo", "undo"):  # the second undo is the one before
        assert window.model.lines[0].anchors == (A, B)
        assert (undo_labels(window.model), redo_labels(window.model)) == (["Add line"],
                                                                          ["Add segment"])
    else:
        assert window.model.lines == before
        assert (undo_labels(window.model), redo_labels(window.model)) == (
            ["Add line", "Add segment"], [])


def test_undo_twice_during_two_drags_undoes_both(make_window, qtbot, held):
    window = make_window()
    before = (draw(qtbot, window, A, B, C, D),)
    held.hold()
    drag(qtbot, window, B, moved(B, 6, 4))
    wait_held(qtbot, held)
    drag(qtbot, window, D, moved(D, -6, 5))
    window.controller.undo()
    window.controller.undo()
    held.open()
    wait_idle(qtbot, window)
    assert window.model.lines == before
    assert redo_labels(window.model) == ["Move vertex", "Move vertex"]
    window.controller.redo()
    window.controller.redo()
    (line,) = window.model.lines
    assert line.anchors == (A, moved(B, 6, 4), C, moved(D, -6, 5))
    assert_whole(line)


# ------------------------------------------------------------- others' changes meanwhile
def test_a_line_deleted_during_its_retrace_drops_the_result_with_a_message(make_window, qtbot,
                                                                          held):
    window = make_window()
    before = (draw(qtbot, window, A, B, C),)
    shown = messages(window)
    held.hold()
    drag(qtbot, window, B, moved(B, 6, 4))
    wait_held(qtbot, held)
    drag(qtbot, window, C, moved(C, 6, 5))  # waits, then finds no line
    window.model.delete(before[0].id)  # the Lines panel's Delete
    held.open()
    wait_idle(qtbot, window)
    assert window.model.lines == ()
    assert shown.count("Road 1 changed while re-tracing; result dropped") == 2, shown
    assert undo_labels(window.model) == ["Add line", "Add segment", "Delete line"]
    window.controller.undo()
    assert window.model.lines == before


def test_a_line_renamed_during_its_retrace_keeps_both(make_window, qtbot, held):
    window = make_window()
    before = (draw(qtbot, window, A, B, C),)
    held.hold()
    drag(qtbot, window, B, moved(B, 6, 4))
    wait_held(qtbot, held)
    renamed = window.model.rename(before[0].id, "Main street")
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert (line.name, line.anchors) == ("Main street", (A, moved(B, 6, 4), C))
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Rename line", "Move vertex"]
    window.controller.undo()
    assert window.model.lines == (renamed,)
    window.controller.undo()
    assert window.model.lines == before


def test_a_segment_removed_during_a_retrace_is_traced_again_on_the_line_left(make_window,
                                                                            qtbot, held):
    """Backspace on the selected line while its vertex B is re-traced: the move is made again
    on the line as it is now."""
    window = make_window()
    draw(qtbot, window, A, B, C, D)
    B2 = moved(B, 6, 4)
    held.hold()
    drag(qtbot, window, B, B2)
    wait_held(qtbot, held)
    window.controller.backspace()
    shortened = window.model.lines
    assert shortened[0].anchors == (A, B, C)
    held.open()
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, B2, C)
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Remove segment", "Move vertex"]
    window.controller.undo()
    assert window.model.lines == shortened


def test_lines_replaced_during_a_retrace_drop_the_edits_quietly(make_window, qtbot, held):
    """A session loaded (the lines reset) while an edit is traced and another waits: neither
    lands on the new lines, which have the same ids."""
    window = make_window()
    line = draw(qtbot, window, A, B, C)
    shown = messages(window)
    held.hold()
    drag(qtbot, window, B, moved(B, 6, 4))
    wait_held(qtbot, held)
    drag(qtbot, window, C, moved(C, 6, 5))
    window.controller.undo()
    window.model.reset((line,))
    held.open()
    wait_idle(qtbot, window)
    assert window.model.lines == (line,)
    assert undo_labels(window.model) == redo_labels(window.model) == []
    assert not any("re-tracing" in text or "nothing to" in text for text in shown)


# -------------------------------------------------------------------- edits without a window
def test_an_edit_is_carried_over_the_vertices_added_before_it():
    model = LinesModel()
    line = model.add_line((0.0, 0.0), (10.0, 0.0), Segment.straight((0, 0), (10, 0)))
    line = model.append_segment(line.id, (20.0, 0.0), Segment.straight((10, 0), (20, 0)))
    split = model.split_segment(line.id, 0, (4.0, 0.0), (Segment.straight((0, 0), (4, 0)),
                                                         Segment.straight((4, 0), (10, 0))),
                                "Add vertex")
    through = [(0, split)]
    assert Edit("move", line, 2, (20.0, 2.0)).through(through).index == 3
    assert Edit("move", line, 0, (0.0, 2.0)).through(through).index == 0
    assert Edit("params", line, segments=(0,), params=TraceParams()).through(
        through).segments == (0, 1)
    assert Edit("params", line, segments=(1,), params=TraceParams()).through(
        through).segments == (2,)
    assert Edit("split", line, 0, (2.0, 1.0)).through(through).index == 0  # the first half
    assert Edit("split", line, 0, (8.0, 1.0)).through(through).index == 1  # the second
    assert Edit("split", line, 1, (15.0, 1.0)).through(through).index == 2
    # made on the line as it is now
    command = Edit("move", line, 2, (20.0, 2.0)).through(through).command(split)
    assert command.anchors == ((0.0, 0.0), (4.0, 0.0), (10.0, 0.0), (20.0, 2.0))
    assert list(command.params) == [2]
    assert "2 px" in Edit("move", split, 2, (4.0, 1.0)).command(split)
    assert Edit("move", line, 5, (9.0, 9.0)).command(split).endswith("result dropped")
    assert np.array_equal(split.polyline, [[0, 0], [4, 0], [10, 0], [20, 0]])


def test_redo_waits_only_for_an_undo_asked_for_during_a_retrace(make_window, qtbot, held):
    window = make_window()
    draw(qtbot, window, A, B, C)
    held.hold()
    drag(qtbot, window, B, moved(B, 6, 4))
    wait_held(qtbot, held)
    assert window.undo_action.isEnabled()  # it waits for the drag, then undoes it
    assert not window.redo_action.isEnabled()  # nothing to redo, then either
    window.controller.undo()
    assert window.redo_action.isEnabled()  # the undo that waits can be redone
    window.controller.redo()
    assert not window.redo_action.isEnabled()  # and was
    window.controller.undo()
    held.open()
    wait_idle(qtbot, window)
    assert redo_labels(window.model) == ["Move vertex"]
