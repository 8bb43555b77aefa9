"""The lines panel follows the model: its rows match the lines after every kind of edit, and an
edit among many lines rewrites a bounded number of cells (not every row)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import math
from dataclasses import replace

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView

from app.jobs import JobQueue
from app.model import Line, LinesModel, Segment
from app.panels import LinesPanel
from app.tracing import TracingController
from core.tracer import TraceParams


def traced(a, b, score=-3.0) -> Segment:
    """A 'traced' segment a → b through a point off the chord."""
    polyline = np.array([a, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 1), b], dtype=float)
    return Segment(polyline, np.array([score / 2, score / 2]), score, TraceParams(),
                   TraceParams(guides=1, points=5, halfwidth=2.0), "cpu")


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
    table = panel.table
    rows = []
    for row in range(table.rowCount()):
        name = table.item(row, 0)
        rows.append((name.data(Qt.ItemDataRole.UserRole), name.text(),
                     name.checkState() == Qt.CheckState.Checked,
                     *(table.item(row, column).text() for column in (1, 2, 3))))
    return rows


def expected(model: LinesModel) -> list[tuple]:
    def score(line: Line) -> str:
        return "—" if math.isnan(line.score_per_px) else f"{line.score_per_px:.3f}"

    return [(line.id, line.name, line.visible, line.kind, f"{line.length:.0f}", score(line))
            for line in model.lines]


def check(panel: LinesPanel) -> None:
    """The rows are the model's lines, in order, and no column is too narrow for its texts."""
    assert shown(panel) == expected(panel.model)
    for column in (1, 2, 3):
        assert panel.table.columnWidth(column) >= panel.table.sizeHintForColumn(column)


class Touches:
    """Counts what the table's model reports: cells changed, rows inserted and removed."""

    def __init__(self, table) -> None:
        self.cells = self.inserted = self.removed = 0
        model = table.model()
        model.dataChanged.connect(self._changed)
        model.rowsInserted.connect(lambda _parent, first, last: self._add("inserted", first, last))
        model.rowsRemoved.connect(lambda _parent, first, last: self._add("removed", first, last))

    def _changed(self, top_left, bottom_right, _roles=()) -> None:
        self.cells += ((bottom_right.row() - top_left.row() + 1)
                       * (bottom_right.column() - top_left.column() + 1))

    def _add(self, what: str, first: int, last: int) -> None:
        setattr(self, what, getattr(self, what) + last - first + 1)

    def take(self) -> tuple[int, int, int]:
        """(cells changed, rows inserted, rows removed) since the last call."""
        counts = (self.cells, self.inserted, self.removed)
        self.cells = self.inserted = self.removed = 0
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
    assert panel.table.rowCount() == 0
    assert [panel.table.columnWidth(column) for column in (1, 2, 3)] == [
        header.sectionSizeHint(column) for column in (1, 2, 3)]


def test_names_edited_in_the_table(panel):
    model = panel.model
    (line,) = model.add_lines([spec(0)])
    name = panel.table.item(0, 0)
    name.setText("  Old mill lane ")
    assert model.line(line.id).name == "Old mill lane"
    assert panel.table.item(0, 0).text() == "Old mill lane"
    assert model.undo_label == "Rename line"
    panel.table.item(0, 0).setText("   ")  # refused: the name comes back
    assert panel.table.item(0, 0).text() == "Old mill lane"
    panel.table.item(0, 0).setText("Old mill lane  ")  # no new name: no undo step
    assert panel.table.item(0, 0).text() == "Old mill lane"
    assert len(model._undo) == 2
    panel.table.item(0, 0).setCheckState(Qt.CheckState.Unchecked)
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
    """(cells changed, rows inserted, rows removed) of each edit, with ``n`` lines shown."""
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


def test_an_edit_among_many_lines_rewrites_a_few_cells_not_every_row(panel, qtbot):
    costs = edit_costs(panel, 1_000)
    for name, (cells, inserted, removed) in costs.items():
        assert cells <= len(LinesPanel.COLUMNS), (name, costs)
        assert inserted + removed <= 1, (name, costs)
    assert costs["rename"] == (1, 0, 0)  # only the name cell
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
