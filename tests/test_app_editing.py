"""Editing finished lines in the window: a click on a vertex versus a drag of it, and choosing a
whole line in the lines table while one of its segments is selected (pytest-qt, offscreen)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from PySide6.QtCore import QPoint, Qt

from app.canvas import DRAG_START
from tests import test_app
from tests.test_app import A, B, C, draw_line, view_pos, wait_idle

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped


def press_move_release(qtbot, window, press: QPoint, release: QPoint) -> None:
    """A left press at ``press``, one mouse move to ``release`` and the release there (view px)."""
    viewport = window.canvas.viewport()
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=press)
    qtbot.mouseMove(viewport, release)
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=release)


def test_a_click_on_a_vertex_with_a_little_jitter_starts_a_line_exactly_there(make_window,
                                                                             qtbot):
    window = make_window()
    line = draw_line(qtbot, window, A, B, C)
    undo_label = window.model.undo_label
    changes = []
    window.model.subscribe(changes.append)
    started = []
    window.jobs.started.connect(started.append)
    # An ordinary click near vertex B (within the grab radius): the hand moves the mouse 1 px
    # between press and release, less than DRAG_START (4).
    at_b = view_pos(window, B)
    press = QPoint(at_b.x() + 3, at_b.y())
    press_move_release(qtbot, window, press, QPoint(press.x() + 1, press.y()))
    wait_idle(qtbot, window)
    # B did not move: no re-trace, no model change, no undo step.
    assert window.model.lines == (line,)
    assert window.model.lines[0].anchors == (A, B, C)
    assert changes == []
    assert started == []
    assert window.model.undo_label == undo_label
    # A new line starts exactly at B (a junction), not at the pixel under the cursor.
    assert window.controller.drawing
    assert window.controller.tail == B
    end = (B[0] + 60.0, B[1] + 40.0)
    with qtbot.waitSignal(window.controller.traced, timeout=10_000):
        test_app.click(qtbot, window, end, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    assert len(window.model.lines) == 2
    assert window.model.lines[0] is line
    assert window.model.lines[1].anchors == (B, end)


def test_a_drag_of_a_vertex_from_drag_start_pixels_on_moves_it(make_window, qtbot):
    window = make_window()
    draw_line(qtbot, window, A, B, C)
    at_b = view_pos(window, B)
    release = QPoint(at_b.x() + DRAG_START, at_b.y())
    dropped = window.canvas.mapToScene(release)
    moved = (round(dropped.x()), round(dropped.y()))  # the pixel centre under the release
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        press_move_release(qtbot, window, at_b, release)
    wait_idle(qtbot, window)
    assert window.model.lines[0].anchors == (A, moved, C) != (A, B, C)
    assert window.model.undo_label == "Move vertex"
    assert not window.controller.drawing


def row_click(qtbot, window, row: int) -> None:
    """A mouse click on the length cell of ``row`` of the lines table."""
    table = window.lines_panel.table
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton,
                     pos=table.visualRect(table.model().index(row, 2)).center())


def selected_rows(window) -> list[int]:
    return [index.row() for index in window.lines_panel.table.selectionModel().selectedRows()]


def retrace_with_max_angle(qtbot, window, max_angle: float) -> None:
    """Change the max angle in the parameters panel; wait for the re-trace it starts."""
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        window.params_panel.max_angle.setValue(max_angle)
    wait_idle(qtbot, window)


def test_a_click_on_the_row_of_a_line_whose_segment_is_selected_selects_the_whole_line(
        make_window, qtbot):
    window = make_window()
    line = draw_line(qtbot, window, A, B, C)
    other = draw_line(qtbot, window, (300.0, 330.0), (360.0, 340.0))
    # Alt + click on the second segment of the first line selects that segment; the table
    # follows (its row selected) without turning it into the whole line, also when the model
    # changes (a rename rewrites the row).
    segment = line.segments[1].polyline[len(line.segments[1].polyline) // 2]
    test_app.click(qtbot, window, tuple(segment), Qt.KeyboardModifier.AltModifier)
    assert window.controller.selection == (line.id, 1)
    assert selected_rows(window) == [0]
    window.model.rename(other.id, "Other")
    assert window.controller.selection == (line.id, 1)
    assert selected_rows(window) == [0]
    # The user clicks that line's row: the whole line.
    row_click(qtbot, window, 0)
    assert window.controller.selection == (line.id, None)
    assert selected_rows(window) == [0]
    # A parameter change then re-traces every segment of the line, in one undo step.
    before = window.model.line(line.id)
    retrace_with_max_angle(qtbot, window, 20.0)
    after = window.model.line(line.id)
    assert after.anchors == (A, B, C)
    assert [s.params.max_angle for s in after.segments] == [20.0, 20.0]
    assert all(new is not old for new, old in zip(after.segments, before.segments, strict=True))
    assert window.model.undo_label == "Re-trace"
    window.controller.undo()
    assert window.model.line(line.id) is before


def test_after_drawing_a_click_on_the_new_lines_row_selects_the_whole_line(make_window,
                                                                             qtbot):
    window = make_window()
    line = draw_line(qtbot, window, A, B, C)
    assert window.controller.selection == (None, None)  # a finished line is not selected
    assert selected_rows(window) == []
    row_click(qtbot, window, 0)
    assert window.controller.selection == (line.id, None)
    retrace_with_max_angle(qtbot, window, 25.0)
    assert [s.params.max_angle for s in window.model.line(line.id).segments] == [25.0, 25.0]
    # Choosing no row (Ctrl + click on the selected one) selects nothing; choosing it again
    # selects the whole line.
    table = window.lines_panel.table
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton,
                     Qt.KeyboardModifier.ControlModifier,
                     table.visualRect(table.model().index(0, 2)).center())
    assert window.controller.selection == (None, None)
    assert selected_rows(window) == []
    row_click(qtbot, window, 0)
    assert window.controller.selection == (line.id, None)
