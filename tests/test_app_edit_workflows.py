"""Editing workflows whose steps overlap: a drag held while an earlier edit lands acts on what was
grabbed, and is cancelled where that is gone; clicks made after Enter start the next line; a
line keeps the kind it was started as; a vertex is not dragged while drawing; deleting every
line is a change that closing asks about. Traces are held in the worker
(tests.test_app_retrace_races) so that every race plays out the same way."""

from __future__ import annotations

import os
import shutil

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.canvas import GONE, NOT_WHILE_DRAWING
from app.files import autosave_path, load_autosave
from tests import test_app, test_app_retrace_races
from tests.conftest import SAMPLE_IMAGE
from tests.helpers import open_and_wait
from tests.test_app import A, B, C, click, click_and_wait, view_pos, wait_idle
from tests.test_app_retrace_races import (
    D,
    assert_whole,
    draw,
    middle,
    moved,
    undo_labels,
    wait_held,
)

make_window = test_app.make_window  # the fixtures: windows closed, their workers stopped
held = test_app_retrace_races.held

LEFT = Qt.MouseButton.LeftButton


def press(qtbot, window, point) -> None:
    qtbot.mousePress(window.canvas.viewport(), LEFT, pos=view_pos(window, point))


def move(qtbot, window, point) -> None:
    qtbot.mouseMove(window.canvas.viewport(), view_pos(window, point))


def release(qtbot, window, point) -> None:
    qtbot.mouseRelease(window.canvas.viewport(), LEFT, pos=view_pos(window, point))


def settle(qtbot, window) -> None:
    """Wait until nothing is traced or waits to be."""
    qtbot.waitUntil(lambda: not window.controller.work_in_flight, timeout=60_000)
    wait_idle(qtbot, window)


def split_held(qtbot, window, held, line):
    """Drag the middle of the line's first segment 6, 5 px aside, its re-trace held in the
    worker; the point the new vertex lands on."""
    grabbed = middle(line.segments[0])
    P = (round(grabbed[0]) + 6.0, round(grabbed[1]) + 5.0)
    held.hold()
    press(qtbot, window, grabbed)
    move(qtbot, window, P)
    release(qtbot, window, P)
    wait_held(qtbot, held)
    return P


def let_the_split_land(qtbot, window, held) -> None:
    held.open()
    qtbot.waitUntil(lambda: not window.controller.edits_pending, timeout=60_000)


def band(window) -> list[tuple[float, float]]:
    return [tuple(point) for point in window.canvas._overlay.drag_lines.tolist()]


# -------------------------------------------------- a drag held while an earlier edit lands
def test_a_vertex_dragged_while_an_added_vertex_lands_moves_the_vertex_grabbed(
        make_window, qtbot, held):
    """Vertex C is grabbed as index 2; the vertex added before it lands while the button is
    held, making C index 3: C moves, and the rubber band runs from its neighbours B and D."""
    window = make_window()
    before = draw(qtbot, window, A, B, C, D)
    P = split_held(qtbot, window, held, before)
    C2 = moved(C, 6, 5)
    press(qtbot, window, C)
    move(qtbot, window, moved(C, 3, 2))
    let_the_split_land(qtbot, window, held)
    assert window.model.lines[0].anchors == (A, P, B, C, D)
    move(qtbot, window, C2)
    assert (band(window)[0], band(window)[-1]) == (B, D)
    release(qtbot, window, C2)
    settle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, P, B, C2, D)
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Add vertex", "Move vertex"]


def test_a_segment_dragged_while_an_added_vertex_lands_is_split_where_grabbed(
        make_window, qtbot, held):
    """Segment C–D is grabbed as index 2, index 3 once the vertex added before it lands: the
    new vertex goes between C and D."""
    window = make_window()
    far = (560.0, 80.0)
    before = draw(qtbot, window, A, B, C, far)
    P = split_held(qtbot, window, held, before)
    grabbed = middle(before.segments[2])
    Q = (round(grabbed[0]) + 5.0, round(grabbed[1]) + 5.0)
    press(qtbot, window, grabbed)
    move(qtbot, window, moved(grabbed, 3, 3))
    let_the_split_land(qtbot, window, held)
    move(qtbot, window, Q)
    assert (band(window)[0], band(window)[-1]) == (C, far)
    release(qtbot, window, Q)
    settle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, P, B, C, Q, far)
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Add vertex", "Add vertex"]


@pytest.mark.parametrize("grab", ["segment", "vertex"])
def test_backspace_during_a_drag_of_what_it_removes_cancels_the_drag(make_window, qtbot,
                                                                     grab):
    """Segment C–D, or vertex D, held when Backspace removes it: the drag ends quietly."""
    window = make_window()
    line = draw(qtbot, window, A, B, C, D)
    window.controller.select(line.id)  # Backspace acts on the selected line
    start = middle(line.segments[2]) if grab == "segment" else D
    press(qtbot, window, start)
    move(qtbot, window, moved(start, 8, 8))
    assert window.canvas._overlay.drag_lines is not None
    qtbot.keyClick(window.canvas, Qt.Key.Key_Backspace)
    shortened = window.model.lines
    assert shortened[0].anchors == (A, B, C)
    move(qtbot, window, moved(start, 12, 12))
    assert window.status_text == GONE["split" if grab == "segment" else "move"]
    assert window.canvas._overlay.drag_lines is None
    release(qtbot, window, moved(start, 12, 12))
    settle(qtbot, window)
    assert window.model.lines == shortened
    assert undo_labels(window.model)[-1] == "Remove segment"
    assert not window.controller.drawing


def test_a_vertex_held_while_backspace_removes_another_still_moves(make_window, qtbot):
    window = make_window()
    draw(qtbot, window, A, B, C, D)
    B2 = moved(B, 6, 4)
    press(qtbot, window, B)
    move(qtbot, window, moved(B, 3, 2))
    qtbot.keyClick(window.canvas, Qt.Key.Key_Backspace)
    move(qtbot, window, B2)
    assert (band(window)[0], band(window)[-1]) == (A, C)
    release(qtbot, window, B2)
    settle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, B2, C)
    assert_whole(line)
    assert undo_labels(window.model)[-2:] == ["Remove segment", "Move vertex"]


# ------------------------------------------------------------------- drawing while tracing
E, F = (246.0, 354.0), (379.0, 284.0)  # a road apart from A, B, C


@pytest.mark.parametrize("fails", [False, True])
def test_clicks_after_enter_while_the_last_segment_traces_start_a_new_line(
        make_window, qtbot, held, fails):
    """B → C is traced when Enter is pressed, then E and F are clicked: the line ends at C
    (at B where B → C cannot be traced), and E → F is a new line, still being drawn."""
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    held.hold()
    held.failing = int(fails)
    click(qtbot, window, C)
    wait_held(qtbot, held)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    click(qtbot, window, E)
    click(qtbot, window, F)
    held.open()
    settle(qtbot, window)
    first, second = window.model.lines
    assert first.anchors == ((A, B) if fails else (A, B, C))
    assert (second.name, second.anchors) == ("Road 2", (E, F))
    assert window.controller.drawing
    assert window.controller.tail == F
    assert_whole(first)
    assert_whole(second)


def test_a_click_before_enter_joins_the_line_and_one_after_it_starts_the_next(
        make_window, qtbot, held):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    held.hold()
    click(qtbot, window, C)
    wait_held(qtbot, held)
    click(qtbot, window, D)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    click(qtbot, window, E)
    held.open()
    settle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == (A, B, C, D)
    assert window.controller.drawing
    assert window.controller.tail == E
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    assert not window.controller.drawing
    assert window.model.lines == (line,)


def test_a_line_keeps_the_kind_it_was_started_as(make_window, qtbot, held):
    """"New line" set to road while the first segment of a river traces: the line stays a
    river, and its next segment is traced as one."""
    window = make_window()
    window.lines_panel.new_kind.setCurrentText("river")
    click(qtbot, window, (440.0, 262.0))
    held.hold()
    click(qtbot, window, (400.0, 330.0))
    wait_held(qtbot, held)
    window.lines_panel.new_kind.setCurrentText("road")
    held.open()
    settle(qtbot, window)
    click_and_wait(qtbot, window, (330.0, 430.0))
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    (line,) = window.model.lines
    assert (line.name, line.kind) == ("River 1", "river")
    assert [segment.request.line_kind for segment in line.segments] == ["river", "river"]
    assert window.controller.kind == "road"  # for the next line


def test_a_vertex_dragged_while_drawing_is_not_moved(make_window, qtbot):
    """While drawing, a drag from vertex B moves nothing and adds no segment; a click on B
    (Shift: straight) still draws on to it."""
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click_and_wait(qtbot, window, C)
    drawn = window.model.lines
    press(qtbot, window, B)
    move(qtbot, window, (495.0, 180.0))
    assert window.canvas._overlay.drag_lines is None  # no rubber band: it will not move
    release(qtbot, window, (495.0, 180.0))
    settle(qtbot, window)
    assert window.model.lines == drawn
    assert window.status_text == NOT_WHILE_DRAWING
    assert window.controller.drawing
    assert window.controller.tail == C
    click(qtbot, window, B, Qt.KeyboardModifier.ShiftModifier)
    assert window.model.lines[0].anchors == (A, B, C, B)
    assert window.model.lines[0].segments[-1].is_straight


# ------------------------------------------------------------------------------- files
def test_deleting_every_line_after_a_save_is_asked_about(make_window, qtbot, monkeypatch,
                                                        tmp_path):
    """The title says unsaved, and so do closing and opening another image; discarded, the
    deleted lines come back neither from the autosave nor otherwise."""
    window = make_window()
    image = window.image_path
    line = draw(qtbot, window, A, B)
    assert window.write_session(str(tmp_path / "s.json"))
    window.model.delete(line.id)
    assert window.windowTitle().endswith(" * — roadtracer")
    asked = []
    answer = [QMessageBox.StandardButton.Cancel]
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, title, text, *args:
                        asked.append((title, text)) or answer[0])
    question = ("Unsaved changes", "All lines were deleted: save the session without them "
                                   "first?")
    window.close()
    assert window.isVisible()
    assert asked == [question]
    window.autosave()
    assert load_autosave(window.autosave_dir, image).lines == ()
    other = tmp_path / "other.png"
    shutil.copy(SAMPLE_IMAGE, other)
    answer[0] = QMessageBox.StandardButton.Discard
    open_and_wait(qtbot, window, other)
    assert asked == [question, question]
    assert not os.path.exists(autosave_path(window.autosave_dir, image))
    open_and_wait(qtbot, window, image)
    assert window.model.lines == ()
    assert not window.model.dirty
    assert len(asked) == 2  # nothing unsaved to ask about


def test_export_with_no_image_says_to_open_one(make_window):
    window = make_window(open_sample=False)
    window.choose_export()
    assert window.status_text == "open an image first"
