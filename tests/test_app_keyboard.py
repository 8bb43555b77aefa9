"""The window by keyboard and for assistive technology: what a parameter change after a line
re-traces, keys in the lines table and the parameter fields, focus, accessible names, status
messages and menu mnemonics (pytest-qt, offscreen)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import re

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLabel, QLineEdit

from app.tracing import RETRACED
from tests import test_app
from tests.test_app import A, B, C, click, click_and_wait, draw_line, view_pos, wait_idle

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped


def finished(line) -> str:
    return f"{line.name} finished ({line.length:.0f} px)"


def test_a_finished_line_is_not_selected_so_a_parameter_change_retraces_nothing(make_window,
                                                                               qtbot):
    window = make_window()
    line = draw_line(qtbot, window, A, B)
    assert not window.controller.drawing
    assert window.controller.selection == (None, None)
    assert window.statusBar().currentMessage() == finished(line)
    window.params_panel.max_angle.setValue(30.0)  # for the next line
    qtbot.wait(400)  # past the panel's debounce
    wait_idle(qtbot, window)
    assert window.controller.params.max_angle == 30.0
    assert window.model.lines == (line,)
    assert window.model.undo_label == "Add line"


def test_a_parameter_change_retraces_the_segment_the_user_selected_and_says_so(make_window,
                                                                             qtbot):
    window = make_window()
    line = draw_line(qtbot, window, A, B)
    click(qtbot, window, tuple(line.segments[0].polyline[len(line.segments[0].polyline) // 2]),
          Qt.KeyboardModifier.AltModifier)
    assert window.controller.selection == (line.id, 0)
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        window.params_panel.max_angle.setValue(30.0)
    assert window.model.lines[0].segments[0].params.max_angle == 30.0
    assert window.model.undo_label == "Re-trace"
    assert window.statusBar().currentMessage().startswith(RETRACED.format(name="Road 1"))
    assert RETRACED.format(name="Road 1") == ("re-traced Road 1 with the new parameters; "
                                              "Ctrl+Z undoes")


def test_a_number_typed_in_a_field_applies_once_entered_not_digit_by_digit(make_window, qtbot):
    window = make_window(open_sample=False)
    emitted = []
    window.params_panel.params_changed.connect(lambda params: emitted.append(params.max_angle))
    box = window.params_panel.max_angle
    box.setFocus()
    box.selectAll()
    for key in (Qt.Key.Key_3, Qt.Key.Key_0):
        QTest.keyClick(box.lineEdit(), key)
        qtbot.wait(350)  # past the panel's debounce
    assert emitted == []
    QTest.keyClick(box.lineEdit(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: emitted == [30.0], timeout=5_000)


def test_tab_leaves_the_lines_table(make_window, qtbot):
    window = make_window()
    draw_line(qtbot, window, A, B)
    draw_line(qtbot, window, (300.0, 400.0), (350.0, 450.0))
    table = window.lines_panel.table
    table.setFocus()
    table.setCurrentIndex(table.model().index(0, 0))
    QTest.keyClick(table, Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is not table


def test_the_drawing_keys_act_in_the_lines_table_but_not_in_its_name_editor(make_window,
                                                                           qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click_and_wait(qtbot, window, C)
    table = window.lines_panel.table
    table.setFocus()
    table.setCurrentIndex(table.model().index(0, 0))
    # Enter in the name's editor renames; it does not finish the line being drawn.
    QTest.keyClick(table, Qt.Key.Key_F2)
    editor = table.viewport().findChild(QLineEdit)
    editor.setText("Mill lane")
    QTest.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.model.lines[0].name == "Mill lane", timeout=5_000)
    assert window.controller.drawing
    table.setFocus()
    QTest.keyClick(table, Qt.Key.Key_Backspace)
    assert window.model.lines[0].anchors == (A, B)
    QTest.keyClick(table, Qt.Key.Key_Return)
    assert not window.controller.drawing
    assert window.statusBar().currentMessage() == finished(window.model.lines[0])
    click(qtbot, window, C)
    table.setFocus()
    QTest.keyClick(table, Qt.Key.Key_Escape)
    assert not window.controller.drawing
    assert window.statusBar().currentMessage() == "line cancelled: nothing traced"


def test_the_canvas_takes_the_keys_as_the_mouse_enters_it_unless_a_field_is_typed_in(
        make_window, qtbot):
    """A line picked in the table, then Space to pan over the canvas: the Space goes to the
    canvas (it does not hide the line); a spin box being typed in keeps the focus."""
    window = make_window()
    line = draw_line(qtbot, window, A, B)
    table, viewport = window.lines_panel.table, window.canvas.viewport()
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton,
                     pos=table.visualRect(table.model().index(0, 0)).center())
    assert window.controller.selection == (line.id, None)
    assert QApplication.focusWidget() is table
    qtbot.mouseMove(viewport, view_pos(window, (150.0, 450.0)))
    assert QApplication.focusWidget() is window.canvas
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Space)
    assert window.model.line(line.id).visible
    box = window.params_panel.halfwidth
    box.setFocus()
    qtbot.mouseMove(table.viewport(), table.visualRect(table.model().index(0, 0)).center())
    qtbot.mouseMove(viewport, view_pos(window, (150.0, 450.0)))
    assert QApplication.focusWidget() is box


def test_keys_typed_in_the_parameter_fields_are_theirs_not_the_windows_shortcuts(make_window,
                                                                               qtbot):
    window = make_window()
    panel = window.params_panel
    panel.halfwidth.setFocus()
    QTest.keyClick(panel.halfwidth, Qt.Key.Key_PageUp)  # a step of ten, not the previous image
    assert panel.halfwidth.value() == 10.0
    assert window.canvas.colour_by_score
    panel.score.setFocus()
    QTest.keyClick(panel.score, Qt.Key.Key_S)  # the combo box's search, not colour by score
    assert panel.score.currentText() == "sine"
    assert window.canvas.colour_by_score
    window.canvas.setFocus()
    QTest.keyClick(window.canvas, Qt.Key.Key_S)  # on the canvas it is the shortcut
    assert not window.canvas.colour_by_score


@pytest.mark.parametrize("key", [Qt.Key.Key_Return, Qt.Key.Key_Space, Qt.Key.Key_F2])
def test_a_key_on_the_kind_cell_switches_the_kind(make_window, qtbot, key):
    """Return, Space or F2 on the Kind cell clicked: the line's kind switches (not the name's
    tick box)."""
    window = make_window()
    line = draw_line(qtbot, window, A, B)
    table = window.lines_panel.table
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton,
                     pos=table.visualRect(table.model().index(0, 1)).center())
    assert window.controller.selection == (line.id, None)
    assert table.currentIndex().column() == 1  # the cell clicked stays current
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        QTest.keyClick(table, key)
    assert window.model.line(line.id).kind == "river"
    assert window.model.undo_label == "Change kind"


def test_fields_buttons_canvas_and_table_have_accessible_names(make_window):
    window = make_window()
    params, lines = window.params_panel, window.lines_panel
    assert (params.score.accessibleName(), params.backend.accessibleName()) == ("Score",
                                                                                "Backend")
    assert lines.new_kind.accessibleName() == "New line kind"
    assert any(label.buddy() is lines.new_kind for label in lines.findChildren(QLabel))
    assert "evidence raster" in params.choose_evidence.accessibleName()
    assert "evidence raster" in params.clear_evidence.accessibleName()
    assert lines.table.accessibleName() == "Lines"
    assert window.canvas.accessibleName()
    assert "Enter finishes the line" in window.canvas.accessibleDescription()


@pytest.mark.parametrize(("key", "modifier"), [
    (Qt.Key.Key_Delete, Qt.KeyboardModifier.NoModifier),
    # A Mac keyboard's ⌫ is Backspace: ⌘⌫ (Qt's Ctrl there) deletes, as in Mac programs.
    (Qt.Key.Key_Backspace, Qt.KeyboardModifier.ControlModifier)])
def test_deleting_a_line_says_so(make_window, qtbot, key, modifier):
    window = make_window()
    line = draw_line(qtbot, window, A, B)
    window.controller.select(line.id)
    window.canvas.setFocus()
    QTest.keyClick(window.canvas, key, modifier)
    assert window.model.lines == ()
    assert window.statusBar().currentMessage() == "deleted Road 1 (Ctrl+Z undoes)"


def test_menu_mnemonics_are_distinct_and_a_recent_path_shows_its_ampersand(make_window):
    window = make_window(open_sample=False)
    for menu_action in window.menuBar().actions():
        keys = [match.group(1).lower() for action in menu_action.menu().actions()
                if (match := re.search(r"&([^&])", action.text()))]
        assert len(keys) == len(set(keys)), (menu_action.text(), keys)
    window._add_recent("/data/R&D survey/ortho.tif")
    window._fill_recent_menu()
    first = window.recent_menu.actions()[0]
    assert first.iconText() == "/data/R&D survey/ortho.tif"
