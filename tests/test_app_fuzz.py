"""Random sequences of user edits, made through Qt events on the real main window (clicks,
drags, keys, the lines panel, the parameters, undo and redo, saves and reloads, traces held back
or made to fail), keep the app consistent: after every step the lines are whole and the panel,
the canvas, the selection, the undo / redo actions and the title follow them; at checkpoints
the window goes idle, undoing everything and redoing it comes back to the same lines, and the
session, the autosave and the dirty flag agree with them. Fixed seeds, so that a failure,
reported with its seed and the operations leading to it, replays the same way."""

from __future__ import annotations

import math
import random
import sys

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.files import load_autosave
from app.model import same_lines
from app.session import load_session
from tests import test_app, test_app_retrace_races
from tests.test_app import A, B, C, click, view_pos, wait_idle
from tests.test_app_retrace_races import D, redo_labels, undo_labels

make_window = test_app.make_window  # the fixtures: windows closed, their workers stopped
held = test_app_retrace_races.held

# Of these, measured on copies of the app broken on purpose, 5 catch a change of a line's kind
# that does not re-trace it and 11 a redo that skips an edit.
SEEDS = range(12, 24)
LEFT = Qt.MouseButton.LeftButton
NO_MODIFIER = Qt.KeyboardModifier.NoModifier
SHIFT = Qt.KeyboardModifier.ShiftModifier
CTRL = Qt.KeyboardModifier.ControlModifier
ROAD = (A, B, C, D)
LOG_SHOWN = 40  # operations shown with a failure, the last ones


def point_text(point) -> str:
    return f"({point[0]:.1f}, {point[1]:.1f})"


def snapshot(lines) -> list[tuple]:
    """What a user sees of ``lines``, comparable with ``==``."""
    return [(line.id, line.name, line.kind, line.visible, line.anchors,
             [segment.polyline.tolist() for segment in line.segments]) for line in lines]


def check_lines(window, where: str) -> None:
    """Each line is whole (its segments run from anchor to anchor, in the image, traced as the
    line's kind) and the panel, canvas, selection, undo / redo actions and title follow them."""
    lines, controller = window.model.lines, window.controller
    width, height = window.raster.width, window.raster.height
    ids = [line.id for line in lines]
    assert len(set(ids)) == len(ids), f"{where}: duplicate ids {ids}"
    for line in lines:
        assert line.segments, f"{where}: line {line.id} has no segments"
        assert len(line.anchors) == len(line.segments) + 1, \
            f"{where}: line {line.id}: {len(line.anchors)} anchors, {len(line.segments)} segments"
        for k, segment in enumerate(line.segments):
            polyline = segment.polyline
            what = f"{where}: line {line.id} segment {k}"
            assert polyline.ndim == 2, f"{what} of shape {polyline.shape}"
            assert polyline.shape[1] == 2, f"{what} of shape {polyline.shape}"
            assert len(polyline) >= 2, f"{what} of shape {polyline.shape}"
            assert np.isfinite(polyline).all(), f"{what} not finite"
            assert ((polyline >= -0.5) & (polyline <= (width - 0.5, height - 0.5))).all(), \
                f"{what} leaves the image"
            ends = (tuple(polyline[0]), tuple(polyline[-1]))
            assert ends == (tuple(line.anchors[k]), tuple(line.anchors[k + 1])), \
                f"{what} runs {ends}, anchors {line.anchors}"
            assert segment.is_straight or segment.request.line_kind == line.kind, \
                f"{what} traced as {segment.request.line_kind}, the line a {line.kind}"
        assert np.array_equal(line.bounds, [line.polyline.min(0), line.polyline.max(0)]), \
            f"{where}: line {line.id} bounds stale"
    table = window.lines_panel.table_model
    shown = [table.line_at(row) for row in range(table.rowCount())]
    assert list(map(id, shown)) == list(map(id, lines)), \
        f"{where}: the lines table shows {table.rowCount()} rows for {len(lines)} lines"
    items = window.canvas.line_items
    visible = {line.id: id(line) for line in lines if line.visible}
    assert {i: id(item.line) for i, item in items.items()} == visible, \
        f"{where}: canvas items {sorted(items)} for visible lines {sorted(visible)} (or stale)"
    line_id, segment = controller.selection
    if line_id is not None:
        line = window.model.line(line_id)
        assert line is not None, f"{where}: the selection {controller.selection} names nothing"
        assert segment is None or 0 <= segment < len(line.segments), \
            f"{where}: the selection {controller.selection} names no segment"
    model = window.model
    assert window.undo_action.isEnabled() == (
        model.undo_label is not None or controller.edits_pending), \
        f"{where}: undo enabled={window.undo_action.isEnabled()}, label {model.undo_label}, " \
        f"edits pending={controller.edits_pending}"
    assert window.redo_action.isEnabled() == (
        model.redo_label is not None or controller.undo_waiting), \
        f"{where}: redo enabled={window.redo_action.isEnabled()}, label {model.redo_label}, " \
        f"undo waiting={controller.undo_waiting}"
    assert (" *" in window.windowTitle()) == model.dirty, \
        f"{where}: title {window.windowTitle()!r} with dirty={model.dirty}"


class EditFuzzer:
    """Random user edits on ``window``, drawn from ``seed``, checked as they go (:meth:`run`);
    ``log`` says what was done."""

    def __init__(self, seed, qtbot, window, held, tmp_path) -> None:
        self.rng = random.Random(seed)
        self.qtbot, self.window, self.held, self.tmp_path = qtbot, window, held, tmp_path
        self.log: list[str] = []
        self.step = "start"
        self.holding = False
        self.errors: list[str] = []  # the error boxes shown
        self.unhandled: list[tuple] = []  # exceptions that reached sys.excepthook
        self.saved_lines = ()  # the lines at the last save
        self.base_lines = ()  # the lines at the bottom of the undo history
        self.saves = 0
        window.error_shown.connect(self.errors.append)

    def note(self, text: str) -> None:
        self.log.append(f"{self.step}: {text}")

    def last_operations(self) -> str:
        return "\n  ".join(self.log[-LOG_SHOWN:])

    # -- where to click ------------------------------------------------------------------------
    def in_image(self, x, y) -> tuple[float, float]:
        raster = self.window.raster
        return float(min(max(x, 2), raster.width - 3)), float(min(max(y, 2), raster.height - 3))

    def near_tail(self) -> tuple[float, float]:
        """A point near the end of the line being drawn; else on or off the sample's road."""
        tail, rng = self.window.controller.tail, self.rng
        if tail is None:
            if rng.random() < 0.5:
                x, y = rng.choice(ROAD)
                return self.in_image(x + rng.uniform(-5, 5), y + rng.uniform(-5, 5))
            raster = self.window.raster
            return self.in_image(rng.uniform(20, raster.width - 20),
                                 rng.uniform(20, raster.height - 20))
        angle, reach = rng.uniform(0, 2 * math.pi), rng.uniform(15, 90)
        return self.in_image(tail[0] + reach * math.cos(angle), tail[1] + reach * math.sin(angle))

    def any_line(self):
        lines = self.window.model.lines
        return self.rng.choice(lines) if lines else None

    def key(self, name: str, key: Qt.Key, modifier=NO_MODIFIER) -> None:
        self.note(name)
        self.qtbot.keyClick(self.window.canvas, key, modifier)

    def maybe_finish(self) -> None:
        if self.window.controller.drawing and self.rng.random() < 0.75:
            self.key("enter", Qt.Key.Key_Return)

    # -- operations ----------------------------------------------------------------------------
    def op_click(self) -> None:
        point = self.near_tail()
        self.note(f"click {point_text(point)}")
        click(self.qtbot, self.window, point)

    def op_shift_click(self) -> None:
        point = self.near_tail()
        self.note(f"shift-click {point_text(point)}")
        click(self.qtbot, self.window, point, SHIFT)

    def op_double_click(self) -> None:
        point = self.near_tail()
        self.note(f"double-click {point_text(point)}")
        self.qtbot.mouseDClick(self.window.canvas.viewport(), LEFT, NO_MODIFIER,
                               view_pos(self.window, point))

    def op_enter(self) -> None:
        self.key("enter", Qt.Key.Key_Return)

    def op_escape(self) -> None:
        self.key("escape", Qt.Key.Key_Escape)

    def op_backspace(self) -> None:
        if self.rng.random() < 0.5 and self.window.model.lines \
                and not self.window.controller.drawing:
            line = self.any_line()
            self.window.controller.select(line.id)
            self.note(f"select line {line.id}")
        self.key("backspace", Qt.Key.Key_Backspace)

    def op_drag(self) -> None:
        """Drag a vertex, or the middle of a segment, of a visible line a few pixels."""
        self.maybe_finish()
        lines = [line for line in self.window.model.lines if line.visible]
        if not lines:
            return self.op_click()
        rng = self.rng
        line = rng.choice(lines)
        if rng.random() < 0.6:
            start, what = line.anchors[rng.randrange(len(line.anchors))], "vertex"
        else:
            polyline = line.segments[rng.randrange(len(line.segments))].polyline
            start, what = tuple(polyline[len(polyline) // 2]), "segment"
        end = self.in_image(round(start[0]) + rng.choice([-1, 1]) * rng.uniform(5, 12),
                            round(start[1]) + rng.choice([-1, 1]) * rng.uniform(5, 12))
        self.note(f"drag a {what} of line {line.id} {point_text(start)} -> {point_text(end)}")
        viewport, middle = self.window.canvas.viewport(), ((start[0] + end[0]) / 2,
                                                           (start[1] + end[1]) / 2)
        self.qtbot.mousePress(viewport, LEFT, pos=view_pos(self.window, start))
        self.qtbot.mouseMove(viewport, view_pos(self.window, middle))
        self.qtbot.mouseMove(viewport, view_pos(self.window, end))
        self.qtbot.mouseRelease(viewport, LEFT, pos=view_pos(self.window, end))

    def op_delete(self) -> None:
        line = self.any_line()
        if line is not None:
            self.window.controller.select(line.id)
            self.note(f"delete line {line.id} (lines panel)")
            self.window.lines_panel.delete_selected()

    def op_rename(self) -> None:
        line = self.any_line()
        if line is not None:
            table = self.window.lines_panel.table_model
            name = self.rng.choice(["Main", "River bend", "x", line.name, "  Main  "])
            self.note(f"rename line {line.id} to {name!r}")
            table.setData(table.index(table.row_of(line.id), 0), name)

    def op_hide(self) -> None:
        line = self.any_line()
        if line is not None:
            table = self.window.lines_panel.table_model
            state = Qt.CheckState.Unchecked if line.visible else Qt.CheckState.Checked
            self.note(f"{'hide' if line.visible else 'show'} line {line.id}")
            table.setData(table.index(table.row_of(line.id), 0), state.value,
                          Qt.ItemDataRole.CheckStateRole)

    def op_parameter(self) -> None:
        """Change the maximum angle, with a line or a segment selected or none; the change
        often takes effect at once (as if the user waited out the debounce)."""
        self.maybe_finish()
        rng, panel = self.rng, self.window.params_panel
        if self.window.model.lines and rng.random() < 0.7:
            line = self.any_line()
            segment = None if rng.random() < 0.5 else rng.randrange(len(line.segments))
            self.window.controller.select(line.id, segment)
            self.note(f"select line {line.id} segment {segment}")
        value = rng.choice([10, 20, 45, 60, 75])
        if value == panel.max_angle.value():
            value += 5
        self.note(f"max angle {value}")
        panel.max_angle.setValue(value)
        if rng.random() < 0.7:
            self.note("(the debounce times out)")
            panel._debounce.stop()
            panel.params_changed.emit(panel.params())

    def op_kind(self) -> None:
        self.maybe_finish()
        line = self.any_line()
        if line is None or self.rng.random() < 0.3:
            kind = self.rng.choice(["road", "river"])
            self.note(f"next lines are {kind}s")
            self.window.controller.kind = kind
        else:
            self.note(f"switch the kind of line {line.id} (lines panel)")
            self.window.lines_panel.switch_kind(self.window.lines_panel.table_model.row_of(line.id))

    def op_undo(self) -> None:
        self.key("undo", Qt.Key.Key_Z, CTRL)

    def op_redo(self) -> None:
        self.key("redo", Qt.Key.Key_Z, CTRL | SHIFT)

    def op_undo_burst(self) -> None:
        for _ in range(self.rng.randint(2, 4)):
            if self.rng.random() < 0.7:
                self.op_undo()
            else:
                self.op_redo()

    def op_hold(self) -> None:
        """Hold the traces in the worker, let one of them go, or let all go."""
        if not self.holding:
            self.note("hold the traces")
            self.held.hold()
            self.holding = True
        elif self.rng.random() < 0.5:
            self.note("let one trace go")
            self.held.let_go(1)
        else:
            self.note("let the traces go")
            self.held.open()
            self.holding = False

    def op_fail(self) -> None:
        self.note("the next trace fails")
        self.held.failing += 1

    def op_settle(self) -> None:
        self.note("settle")
        self.settle()

    def op_save(self) -> None:
        """Save the session (not while work is in flight) and read it back: the same lines."""
        window = self.window
        if window.controller.work_in_flight:
            return
        self.note("save the session")
        path = str(self.tmp_path / f"s{self.saves}.roadtracer.json")
        self.saves += 1
        assert window.write_session(path), self.errors
        loaded = load_session(path).lines
        assert same_lines(loaded, window.model.lines), \
            f"the session read back differs:\n{snapshot(window.model.lines)}\n{snapshot(loaded)}"
        self.saved_lines = window.model.lines

    def op_reload(self) -> None:
        """Finish, save and open the session again: the same lines, clean, no history."""
        window = self.window
        self.settle()
        if window.controller.drawing:
            self.note("finish the line")
            window.controller.finish()
            self.settle()
        self.op_save()
        before = window.model.lines
        self.note("open the session again")
        with self.qtbot.waitSignal(window.image_loaded, timeout=60_000):
            assert window.open_session(window.session_path)
        wait_idle(self.qtbot, window)
        assert same_lines(window.model.lines, before), \
            f"the reopened session differs:\n{snapshot(before)}\n{snapshot(window.model.lines)}"
        assert not window.model.dirty, "the reopened session is dirty"
        assert (window.model.undo_label, window.model.redo_label) == (None, None), \
            "the reopened session has a history"
        self.saved_lines = self.base_lines = window.model.lines

    OPERATIONS = {op_click: 8, op_drag: 8, op_enter: 4, op_undo: 4, op_hold: 4,
                  op_shift_click: 3, op_parameter: 3, op_double_click: 2, op_kind: 2, op_redo: 2,
                  op_undo_burst: 2, op_settle: 2, op_escape: 1, op_backspace: 1, op_delete: 1,
                  op_rename: 1, op_hide: 1, op_save: 1, op_reload: 1, op_fail: 1}

    # -- checks --------------------------------------------------------------------------------
    def settle(self) -> None:
        """Let the held traces go and wait until the window has no work left."""
        if self.holding:
            self.held.open()
            self.holding = False
        self.qtbot.waitUntil(lambda: not self.window.controller.work_in_flight, timeout=60_000)
        wait_idle(self.qtbot, self.window)
        self.qtbot.wait(5)
        wait_idle(self.qtbot, self.window)

    def check_step(self) -> None:
        """The lines are consistent; no error box was shown (any box left open is closed) and
        no exception went unhandled."""
        for widget in QApplication.topLevelWidgets():
            if isinstance(widget, QMessageBox) and widget.isVisible():
                widget.done(0)
        self.window.canvas.setFocus()
        assert not self.errors, f"error boxes shown: {self.errors}"
        assert not self.unhandled, f"unhandled exceptions: {self.unhandled}"
        check_lines(self.window, self.step)

    def checkpoint(self, where: str) -> None:
        """Once settled the window is idle; its lines differ from the last save only when dirty;
        the autosave holds them; undoing all comes back to the bottom of the history and
        redoing all to the same lines and history."""
        self.settle()
        window = self.window
        controller, model = window.controller, window.model
        busy = (controller.work_in_flight, controller.edits_pending, window.jobs.running,
                window.jobs.pending)
        assert busy == (False, False, None, 0), f"{where}: not idle once settled: {busy}"
        check_lines(window, where)
        assert model.dirty or same_lines(model.lines, self.saved_lines), \
            f"{where}: the lines differ from the last save but are not dirty"
        window.autosave()
        if window.writes.running is not None or window.writes.pending:
            self.qtbot.waitUntil(lambda: window.writes.running is None
                                 and not window.writes.pending, timeout=30_000)
            window.autosave()
        autosaved = load_autosave(window.autosave_dir, window.image_path)
        assert autosaved is None or same_lines(autosaved.lines, model.lines), \
            f"{where}: the autosave differs (dirty={model.dirty}):\n{snapshot(model.lines)}\n" \
            f"{snapshot(autosaved.lines)}"
        if controller.drawing:
            return
        before, seen = model.lines, snapshot(model.lines)
        undos, redos = undo_labels(model), redo_labels(model)
        undone = 0
        while model.undo_label is not None:
            controller.undo()
            undone += 1
            check_lines(window, f"{where}, undo {undone}")
            assert undone < 600, f"{where}: no end to undo"
        assert same_lines(model.lines, self.base_lines), \
            f"{where}: undoing all leaves {snapshot(model.lines)}"
        assert not controller.work_in_flight, f"{where}: undo started work"
        redone = 0
        while model.redo_label is not None and redone < undone:
            controller.redo()
            redone += 1
            check_lines(window, f"{where}, redo {redone}")
        assert redone == undone, f"{where}: undid {undone} edits, redid {redone}"
        assert snapshot(model.lines) == seen, \
            f"{where}: undoing and redoing all changes the lines:\n{seen}\n{snapshot(model.lines)}"
        assert model.lines is before, f"{where}: undoing and redoing all gives new lines"
        assert undo_labels(model) == undos, f"{where}: undo labels {undos} -> {undo_labels(model)}"
        assert redo_labels(model) == redos, f"{where}: redo labels {redos} -> {redo_labels(model)}"
        check_lines(window, f"{where}, after undoing and redoing all")

    def run(self) -> None:
        operations, weights = list(self.OPERATIONS), list(self.OPERATIONS.values())
        for step in range(self.rng.randint(20, 40)):
            self.step = f"step {step}"
            self.rng.choices(operations, weights)[0](self)
            self.qtbot.wait(self.rng.choice([0, 0, 1, 5, 20]))
            self.check_step()
            if self.rng.random() < 0.12:
                self.checkpoint(f"checkpoint after step {step}")
        self.step = "end"
        self.note("finish the line")
        self.window.controller.finish()
        self.checkpoint("final checkpoint")
        self.op_save()
        self.check_step()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_edit_sequences_keep_the_app_consistent(seed, make_window, qtbot, held, tmp_path,
                                                       capfd):
    fuzzer = EditFuzzer(seed, qtbot, make_window(), held, tmp_path)
    excepthook = sys.excepthook
    sys.excepthook = lambda *exc_info: fuzzer.unhandled.append(exc_info)
    try:
        fuzzer.run()
    except Exception as exc:
        pytest.fail(f"seed {seed}: {exc}\nlast operations:\n  {fuzzer.last_operations()}")
    finally:
        sys.excepthook = excepthook
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr, f"seed {seed}: {stderr}\nlast operations:\n  " \
        f"{fuzzer.last_operations()}"
