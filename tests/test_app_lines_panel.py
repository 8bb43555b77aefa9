"""The lines panel follows the model: its rows match the lines after every kind of edit, an
edit among many lines changes a bounded number of rows (not every row), and the table reads
only the rows it shows."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import math
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLineEdit,
    QStyle,
    QStyleOptionViewItem,
)

from app import panels
from app.jobs import JobQueue
from app.model import Line, LinesModel, Segment, length_text
from app.panels import LinesPanel
from app.tracing import TracingController
from tests.helpers import traced


def spec(i: int, length: float = 30.0, kind: str = "road"):
    """(name, kind, anchors, segments) of a line for :meth:`LinesModel.add_lines`."""
    a, b = (10.0, 5.0 + i), (10.0 + length, 6.0 + i)
    segment = traced(a, b) if i % 2 else Segment.straight(a, b)
    return f"L{i}", kind, (a, b), (segment,)


@pytest.fixture
def panel(qtbot):
    """A shown lines panel on an empty model (no window, no image)."""
    model = LinesModel()
    jobs = JobQueue()
    controller = TracingController(model, jobs)
    panel = LinesPanel(model, controller)
    qtbot.addWidget(panel)
    panel.resize(420, 500)
    panel.show()
    yield panel
    assert jobs.shutdown()


def shown(panel: LinesPanel) -> list[tuple]:
    """What every row of the table shows: (line id, name, ticked, kind, length, score/px)."""
    rows = panel.table.model()
    return [(rows.line_at(row).id, cell(panel, row, 0),
             cell(panel, row, 0, Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked,
             *(cell(panel, row, column) for column in (1, 2, 3)))
            for row in range(rows.rowCount())]


def cell(panel: LinesPanel, row: int, column: int, role=Qt.ItemDataRole.DisplayRole):
    """What the table's model gives the view for a cell."""
    return panel.table.model().index(row, column).data(role)


def expected(model: LinesModel) -> list[tuple]:
    def score(line: Line) -> str:
        return "—" if math.isnan(line.score_per_px) else f"{line.score_per_px:.3f}"

    return [(line.id, line.name, line.visible, line.kind, f"{line.length:.0f} px", score(line))
            for line in model.lines]


def check(panel: LinesPanel) -> None:
    """The rows are the model's lines, in order, and no column is too narrow for its texts."""
    assert shown(panel) == expected(panel.model)
    for column in (1, 2, 3):
        assert panel.table.columnWidth(column) >= panel.table.sizeHintForColumn(column)


class Touches:
    """Counts what the table's model reports: rows changed, inserted and removed."""

    def __init__(self, table) -> None:
        self.changed = self.inserted = self.removed = 0
        model = table.model()
        model.dataChanged.connect(self._changed)
        model.rowsInserted.connect(lambda _parent, first, last: self._add("inserted", first, last))
        model.rowsRemoved.connect(lambda _parent, first, last: self._add("removed", first, last))

    def _changed(self, top_left, bottom_right, _roles=()) -> None:
        self.changed += bottom_right.row() - top_left.row() + 1

    def _add(self, what: str, first: int, last: int) -> None:
        setattr(self, what, getattr(self, what) + last - first + 1)

    def take(self) -> tuple[int, int, int]:
        """(rows changed, inserted, removed) since the last call."""
        counts = (self.changed, self.inserted, self.removed)
        self.changed = self.inserted = self.removed = 0
        return counts


def test_rows_match_the_model_after_every_edit_undo_and_redo(panel):
    model = panel.model
    check(panel)
    lines = model.add_lines([spec(i) for i in range(6)])
    check(panel)
    first, second, third = (line.id for line in lines[:3])
    model.rename(second, "Harbour road")
    check(panel)
    model.set_visible(third, False)
    check(panel)
    model.set_kind(first, "river")
    check(panel)
    model.append_segment(first, (400.0, 300.0), Segment.straight((40.0, 6.0), (400.0, 300.0)))
    check(panel)  # the length column widened for the longer line
    model.delete(second)
    check(panel)
    model.delete(lines[-1].id)
    check(panel)
    added = model.add_line((0.0, 0.0), (5.0, 5.0), traced((0.0, 0.0), (5.0, 5.0)))
    check(panel)
    states = [expected(model)]
    while model.undo():
        check(panel)
        states.append(expected(model))
    assert states[-1] == []
    while model.redo():
        check(panel)
    assert expected(model)[-1][0] == added.id
    model.remove_last_segment(added.id)  # a one-segment line: deleted
    check(panel)


def test_a_reset_replaces_every_row_even_reordered_and_fits_the_columns_exactly(panel):
    model = panel.model
    # One length wider than the column's header: the column widens for it.
    model.add_lines([spec(i, length=1e13 if i == 3 else 30.0) for i in range(10)])
    check(panel)
    wide = panel.table.columnWidth(2)
    reordered = tuple(reversed(model.lines))
    model.reset(reordered)
    check(panel)
    # New lines (a session) in place of the old ones: the columns fit them, narrower again.
    fresh = tuple(replace(line, id=100 + line.id, name=f"N{line.id}",
                          anchors=((0.0, 0.0), (8.0, 0.0)),
                          segments=(Segment.straight((0.0, 0.0), (8.0, 0.0)),))
                  for line in model.lines[:4])
    model.reset(fresh)
    check(panel)
    assert panel.table.columnWidth(2) < wide
    header = panel.table.horizontalHeader()
    for column in (1, 2, 3):
        assert panel.table.columnWidth(column) == max(panel.table.sizeHintForColumn(column),
                                                      header.sectionSizeHint(column))
    model.reset()
    assert panel.table.model().rowCount() == 0
    assert [panel.table.columnWidth(column) for column in (1, 2, 3)] == [
        header.sectionSizeHint(column) for column in (1, 2, 3)]


def test_names_edited_in_the_table(panel):
    model = panel.model
    (line,) = model.add_lines([spec(0)])
    cells = panel.table_model
    name = cells.index(0, 0)

    def rename(text: str) -> None:
        cells.setData(name, text, Qt.ItemDataRole.EditRole)

    rename("  Old mill lane ")
    assert model.line(line.id).name == "Old mill lane"
    assert name.data() == "Old mill lane"
    assert model.undo_label == "Rename line"
    rename("   ")  # refused: the name comes back
    assert name.data() == "Old mill lane"
    rename("Old mill lane  ")  # no new name: no undo step
    assert name.data() == "Old mill lane"
    assert len(model._undo) == 2
    cells.setData(name, Qt.CheckState.Unchecked, Qt.ItemDataRole.CheckStateRole)
    assert not model.line(line.id).visible
    model.undo()
    check(panel)
    model.undo()
    check(panel)
    assert model.line(line.id).name == "L0"


def test_selection_follows_the_controller_and_the_table(panel):
    model, controller, table = panel.model, panel.controller, panel.table
    lines = model.add_lines([spec(i) for i in range(5)])
    controller.select(lines[3].id)
    assert [index.row() for index in table.selectionModel().selectedRows()] == [3]
    model.delete(lines[1].id)  # rows below move up; the selection stays on its line
    assert [index.row() for index in table.selectionModel().selectedRows()] == [2]
    table.selectRow(0)
    assert controller.selection[0] == lines[0].id
    panel.delete_selected()
    assert model.line(lines[0].id) is None
    check(panel)
    model.undo()
    check(panel)


def edit_costs(panel: LinesPanel, n: int) -> dict[str, tuple[int, int, int]]:
    """(rows changed, inserted, removed) of each edit, with ``n`` lines shown."""
    model = panel.model
    lines = model.add_lines([spec(i) for i in range(n)])
    touches = Touches(panel.table)
    middle = lines[n // 2].id
    costs = {}
    for name, edit in (
            ("rename", lambda: model.rename(middle, "Renamed")),
            ("undo", model.undo),
            ("redo", model.redo),
            ("hide", lambda: model.set_visible(middle, False)),
            ("kind", lambda: model.set_kind(middle, "river")),
            ("segment", lambda: model.append_segment(
                middle, (90.0, 90.0), Segment.straight(model.line(middle).anchors[-1],
                                                       (90.0, 90.0)))),
            ("delete", lambda: model.delete(lines[1].id)),
            ("undo delete", model.undo),
            ("new line", lambda: model.add_line((1.0, 1.0), (9.0, 9.0),
                                                traced((1.0, 1.0), (9.0, 9.0))))):
        edit()
        costs[name] = touches.take()
    check(panel)
    return costs


def test_an_edit_among_many_lines_changes_one_row_not_every_row(panel, qtbot):
    costs = edit_costs(panel, 1_000)
    for name, (changed, inserted, removed) in costs.items():
        assert changed + inserted + removed == 1, (name, costs)
    assert costs["rename"] == (1, 0, 0)
    assert costs["delete"] == (0, 0, 1)
    assert costs["undo delete"][1] == 1
    # The same edits cost the same with ten times fewer lines: nothing grows with n.
    small = LinesPanel(LinesModel(), panel.controller)
    qtbot.addWidget(small)
    assert edit_costs(small, 100) == costs


def test_columns_are_never_measured_over_every_row(panel, monkeypatch):
    """No column re-measures all rows when a cell changes (ResizeToContents did, at every
    cell written); the panel measures at most a few texts per column, even on a reset."""
    header = panel.table.horizontalHeader()
    assert all(header.sectionResizeMode(column) != QHeaderView.ResizeMode.ResizeToContents
               for column in range(header.count()))
    measured = []
    size_hint = panel.table.sizeHintForIndex
    monkeypatch.setattr(panel.table, "sizeHintForIndex",
                        lambda index: measured.append(index) or size_hint(index))
    model = panel.model
    model.add_lines([spec(i, length=10.0 + i) for i in range(2_000)])
    check(panel)
    assert 0 < len(measured) <= 3 * LinesPanel.FIT_SAMPLE
    measured.clear()
    model.rename(model.lines[5].id, "x")
    assert len(measured) <= 3


def test_lines_come_in_as_one_block_of_rows_and_only_the_rows_in_sight_are_read(panel,
                                                                              monkeypatch):
    """Loading many lines inserts their rows at once, holding nothing per row but the line:
    the view reads the texts of the rows it shows, and new lines with the ids of the old ones
    (a session opened again) change every row in one report."""
    model, table = panel.model, panel.table
    touches = Touches(table)
    inserts = []
    table.model().rowsInserted.connect(lambda *_args: inserts.append(1))
    model.add_lines([spec(i) for i in range(3_000)])
    assert touches.take() == (0, 3_000, 0)
    assert len(inserts) == 1
    read, row_texts = [], panels.row_texts
    monkeypatch.setattr(panels, "row_texts", lambda line, metres_per_px: read.append(line.id)
                        or row_texts(line, metres_per_px))
    table.viewport().repaint()
    in_sight = table.viewport().height() // table.rowHeight(0) + 2
    assert 0 < len(set(read)) <= in_sight
    reports = []
    table.model().dataChanged.connect(lambda *_args: reports.append(1))
    model.reset(tuple(replace(line, name=f"Again {line.id}") for line in model.lines))
    assert touches.take() == (3_000, 0, 0)
    assert len(reports) == 1
    check(panel)


def test_double_clicks_switch_the_kind_and_open_the_names_editor(panel, qtbot, monkeypatch):
    model, table = panel.model, panel.table
    lines = model.add_lines([spec(i) for i in range(3)])
    switched = []
    monkeypatch.setattr(panel.controller, "set_line_kind",
                        lambda line_id, kind: switched.append((line_id, kind)))
    for column in (1, 0):  # a double click: the first click, then the second one
        centre = table.visualRect(table.model().index(2, column)).center()
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=centre)
        qtbot.mouseDClick(table.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    assert switched == [(lines[2].id, "river")]
    assert table.state() == QAbstractItemView.State.EditingState


def selected_rows(panel: LinesPanel) -> list[int]:
    return [index.row() for index in panel.table.selectionModel().selectedRows()]


def test_the_selected_row_is_scrolled_into_view_and_keys_choose_rows(panel, qtbot):
    model, controller, table = panel.model, panel.controller, panel.table
    lines = model.add_lines([spec(i) for i in range(2_000)])
    qtbot.wait(1)  # the table's first layout, as in the window
    controller.select(lines[1_500].id)
    assert selected_rows(panel) == [1_500]
    index = table.model().index(1_500, 0)
    assert table.viewport().rect().contains(table.visualRect(index))
    QTest.keyClick(table, Qt.Key.Key_Down)
    assert controller.selection == (lines[1_501].id, None)
    QTest.keyClick(table, Qt.Key.Key_Up)
    QTest.keyClick(table, Qt.Key.Key_Up)
    assert controller.selection == (lines[1_499].id, None)
    assert selected_rows(panel) == [1_499]
    model.delete(lines[0].id)  # the rows move up; the line stays selected, its row in view
    assert selected_rows(panel) == [1_498]
    assert table.viewport().rect().intersects(table.visualRect(table.model().index(1_498, 0)))


def test_the_tick_box_and_the_name_editor_edit_the_line(panel, qtbot):
    """The view's own editing, by keys and mouse: Space on the current row or a click on its
    tick box hides and shows the line; F2 opens the name's editor, Enter renames (an empty
    name is refused)."""
    model, table = panel.model, panel.table
    lines = model.add_lines([spec(i) for i in range(3)])
    table.selectRow(1)
    QTest.keyClick(table, Qt.Key.Key_Space)
    assert not model.line(lines[1].id).visible
    assert model.undo_label == "Hide line"
    index = table.model().index(1, 0)
    option = QStyleOptionViewItem()
    table.itemDelegate().initStyleOption(option, index)
    option.rect = table.visualRect(index)
    box = table.style().subElementRect(QStyle.SubElement.SE_ItemViewItemCheckIndicator, option,
                                       table)
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=box.center())
    assert model.line(lines[1].id).visible
    for typed, name in (("Mill lane ", "Mill lane"), ("   ", "Mill lane")):
        QTest.keyClick(table, Qt.Key.Key_F2)
        editor = table.viewport().findChild(QLineEdit)
        assert editor is not None
        assert editor.text() == model.line(lines[1].id).name
        editor.setText(typed)
        QTest.keyClick(editor, Qt.Key.Key_Return)  # commits once events are processed
        qtbot.waitUntil(lambda: table.state() != QAbstractItemView.State.EditingState)
        assert model.line(lines[1].id).name == name
    check(panel)


def test_lengths_read_in_metres_where_the_ground_resolution_is_known():
    assert length_text(412.4, None) == "412 px"
    assert length_text(412.4, 0.2) == "82 m"
    assert length_text(30.0, 0.2) == "6.0 m"
    assert length_text(40_000.0, 0.5) == "20.00 km"
