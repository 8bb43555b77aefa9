"""What the window tells the user: the status bar and its messages log, actions enabled only
when they can act, the keys dialog (the same table as docs/APP.md), wording in the
application's own terms."""

from __future__ import annotations

import json
import os
import re

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QStatusTipEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from app.imports import plural, skipped_feature
from app.main_window import (
    EXPORT_LONLAT,
    EXPORT_PIXELS,
    KEYS,
    MAX_MESSAGES,
    backend_name,
    in_app_terms,
)
from app.panels import LinesPanel, ParamsPanel
from app.tracing import SAME_POINT
from core import surface, version
from core.surface import UNKNOWN_GROUND_NOTE
from core.tracer import TraceParams
from core.vectors import Failure
from tests import test_app
from tests.conftest import ROOT, SAMPLE_IMAGE
from tests.test_app import A, B, C, click, click_and_wait, wait_idle

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped

CPU_NOTE = ("CPU (numba, 2 threads): GPU unavailable: pycuda cannot be imported (No module "
            "named 'pycuda')")


def test_the_backend_label_is_its_name_with_the_reason_in_its_tooltip(make_window):
    window = make_window(open_sample=False)
    window.controller.backend_changed.emit(CPU_NOTE)
    assert window.backend_label.text() == "CPU (numba, 2 threads)"
    assert window.backend_label.toolTip() == CPU_NOTE
    assert backend_name("GPU: NVIDIA H200, float32 link scores and DP (model on the CPU)") == \
        "GPU: NVIDIA H200"
    assert backend_name("GPU: NVIDIA H200") == "GPU: NVIDIA H200"
    assert backend_name("CPU (numba, 2 threads): gpu backend failed: boom") == \
        "CPU (numba, 2 threads)"


def test_the_open_message_is_short_and_its_details_are_in_the_tooltip(make_window):
    window = make_window()
    message = ("opened gsi_108.png (572×572 px, 3 bands); ground resolution unknown: set it in "
               "Parameters for faster clicks")
    details = f"without it, {UNKNOWN_GROUND_NOTE}; {SAMPLE_IMAGE}"
    assert window.statusBar().currentMessage() == message
    assert window.statusBar().toolTip() == f"{message} ({details})"
    assert window.messages[-1][1] == f"{message} ({details})"


def test_messages_stay_until_replaced_and_can_be_read_again(make_window, qtbot):
    window = make_window(open_sample=False)
    window.show_status("the first", "its details")
    window.show_status("the second")
    bar = window.statusBar()
    assert bar.currentMessage() == "the second"
    assert bar.toolTip() == "the second"
    assert not any(timer.isActive() for timer in bar.findChildren(QTimer))  # no time-out
    # A message too long for the bar ends in "…" rather than being cut mid-word.
    window.resize(700, 500)
    window.show_status("a long message " * 20)
    qtbot.waitUntil(lambda: bar.width() <= 700)
    shown = bar.shown_message()
    assert shown.endswith("…")
    assert shown[:-1] == ("a long message " * 20)[:len(shown) - 1]
    assert bar.fontMetrics().horizontalAdvance(shown) <= bar.message_area().width()
    assert bar.message_area().right() < window.backend_label.x()
    window.show_status("the second")
    assert bar.shown_message() == "the second"
    # A menu item's tip replaces the message while the mouse is on it; then it comes back.
    QApplication.sendEvent(window, QStatusTipEvent("Open the next image"))
    assert bar.currentMessage() == "Open the next image"
    QApplication.sendEvent(window, QStatusTipEvent(""))
    assert bar.currentMessage() == "the second"
    # View ▸ Messages…: every message with its time, in full.
    window.show_messages()
    lines = window.messages_text.toPlainText().splitlines()
    assert [re.sub(r"^\d\d:\d\d:\d\d  ", "", line) for line in lines[-4:]] == [
        "the first (its details)", "the second", "a long message " * 20, "the second"]
    window.show_status("the third")  # shown as it comes while the log is open
    assert window.messages_text.toPlainText().endswith("  the third")
    for number in range(MAX_MESSAGES + 10):
        window.show_status(f"message {number}")
    assert len(window.messages) == MAX_MESSAGES
    assert window.messages[0][1] == "message 10"
    # An import's progress keeps one entry, the latest.
    window.show_status("importing lines from a.geojson: 0/2 lines, 0/4 segments (Esc cancels)")
    window.show_status("importing lines from a.geojson: 1/2 lines, 2/4 segments (Esc cancels)")
    assert [text for _, text in list(window.messages)[-2:]] == [
        f"message {MAX_MESSAGES + 9}",
        "importing lines from a.geojson: 1/2 lines, 2/4 segments (Esc cancels)"]


def test_a_failed_trace_stays_visible_and_the_trace_label_says_so(make_window, qtbot):
    window = make_window()
    window.controller.set_params(TraceParams(points=2, halfwidth=40.0, max_angle=1.0))
    click(qtbot, window, A)
    with qtbot.waitSignal(window.controller.trace_failed, timeout=30_000) as failure:
        click(qtbot, window, B)
    wait_idle(qtbot, window)
    assert window.trace_label.text() == "trace failed"
    assert window.trace_label.toolTip() == failure.args[0]
    assert window.statusBar().currentMessage() == failure.args[0]
    assert not any(timer.isActive() for timer in window.statusBar().findChildren(QTimer))


def test_a_second_click_on_the_last_anchor_says_so_but_a_double_click_finishes(make_window,
                                                                                qtbot):
    window = make_window()
    click(qtbot, window, A)
    click(qtbot, window, A)
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == SAME_POINT, timeout=5_000)
    assert SAME_POINT == ("the same point as the last one; click elsewhere or press Enter to "
                          "finish")
    click_and_wait(qtbot, window, B)
    window.show_status("traced")
    qtbot.mouseDClick(window.canvas.viewport(), Qt.MouseButton.LeftButton,
                      pos=test_app.view_pos(window, B))
    qtbot.wait(50)
    assert not window.controller.drawing
    assert window.statusBar().currentMessage() == \
        f"Road 1 finished ({window.model.lines[0].length:.0f} px)"


def test_a_click_outside_the_image_is_named_in_the_apps_words(make_window, qtbot):
    window = make_window()
    window.controller.press((-30, 200))
    assert window.statusBar().currentMessage() == "the click at (−30, 200) is outside the image"


def test_engine_wording_is_put_in_the_apps_terms(make_window):
    assert in_app_terms("the evidence raster holds nothing to trace between a and b: every "
                        "pixel there reads 0") == ("the evidence raster holds nothing to trace "
                                                   "between these two points: every pixel "
                                                   "there reads 0")
    assert in_app_terms("endpoints a=(3, 4) and b=(4, 4) must be at least 2 px apart") == \
        "the points (3, 4) and (4, 4) must be at least 2 px apart"
    assert in_app_terms("halfwidth 0.5 px is too narrow: a guide needs two points, so give "
                        "--points or a halfwidth wider than 0.75 px") == (
        "halfwidth 0.5 px is too narrow: a guide needs two points, so set Points per guide or "
        "a Half-width wider than 0.75 px")
    window = make_window(open_sample=False)
    window.show_error("the image holds nothing to trace between a and b")
    assert window.last_error == "the image holds nothing to trace between these two points"
    assert window.statusBar().currentMessage() == window.last_error


def test_skipped_features_are_counted_from_one_with_what_to_do():
    pixels = Failure("vertex [300.0, 40.0] is not longitude/latitude (seeds in pixel "
                     "coordinates need properties.image)", "#12")
    assert skipped_feature(pixels, "gsi_108.png") == (
        'feature 13: vertex [300.0, 40.0] is not longitude/latitude; if it is in pixels of this '
        'image, add "image": "gsi_108.png" to its properties')
    assert skipped_feature(Failure("feature #0 is not a GeoJSON Feature", "#0"), "x.png") == \
        "feature 1 is not a GeoJSON Feature"
    assert skipped_feature(Failure("bad", "#2/1"), "x.png") == "feature 3, part 2: bad"
    assert skipped_feature(Failure("bad", "way/7"), "x.png") == 'feature "way/7": bad'
    assert (plural(0, "band"), plural(1, "line"), plural(2, "line")) == ("0 bands", "1 line",
                                                                         "2 lines")


def test_import_progress_puts_the_counter_before_the_features_skipped(make_window, qtbot,
                                                                      tmp_path):
    window = make_window()
    path = tmp_path / "imp.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"image": "gsi_108.png"},
         "geometry": {"type": "LineString", "coordinates": [[50, 50], [60, 300], [70, 520]]}},
        {"type": "Feature", "properties": {},
         "geometry": {"type": "LineString", "coordinates": [[300, 40], [400, 40]]}}]}))
    messages = []
    window.controller.message.connect(messages.append)
    assert window.import_lines(str(path))
    wait_idle(qtbot, window)
    skipped = ('1 feature skipped (feature 2: vertex [400.0, 40.0] is not longitude/latitude; '
               'if it is in pixels of this image, add "image": "gsi_108.png" to its properties)')
    assert messages[0] == f"importing lines from imp.geojson: 0/1 line, 0/2 segments (Esc " \
                          f"cancels); {skipped}"
    assert messages[-1] == f"imported 1 line, 2 segments from imp.geojson; {skipped}"
    assert f"imp.geojson: {skipped}" in [text for _, text in window.messages]


def test_actions_are_enabled_only_when_they_can_act(make_window, qtbot, tmp_path,
                                                    monkeypatch):
    window = make_window(open_sample=False)
    editing = (window.undo_action, window.redo_action, window.finish_action,
               window.cancel_action, window.backspace_action, window.delete_action)

    def enabled() -> list[bool]:
        return [action.isEnabled() for action in editing]

    # No image: no session can be saved (it records its image), not even by a direct call.
    assert [action.isEnabled() for action in window.save_actions] == [False, False]
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args, **kwargs: 1 / 0)
    assert not window.save_session()
    assert not window.write_session(str(tmp_path / "none.roadtracer.json"))
    assert not (tmp_path / "none.roadtracer.json").exists()
    assert window.last_error == ("no image is open: open one and trace its lines, then save "
                                 "the session")
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(SAMPLE_IMAGE))
    wait_idle(qtbot, window)
    assert [action.isEnabled() for action in window.save_actions] == [True, True]
    assert enabled() == [False] * 6
    assert not window.lines_panel.delete_button.isEnabled()
    assert (window.undo_action.text(), window.redo_action.text()) == ("&Undo", "&Redo")
    click(qtbot, window, A)  # drawing: finish, cancel and remove last segment can act
    assert enabled() == [False, False, True, True, True, False]
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    (line,) = window.model.lines
    assert window.controller.selection == (None, None)  # a finished line is not selected
    assert enabled() == [True, False, False, False, False, False]
    assert window.undo_action.text() == "&Undo Add line"
    window.controller.select(line.id)
    assert enabled() == [True, False, False, True, True, True]
    assert window.lines_panel.delete_button.isEnabled()
    window.controller.select(None)
    assert enabled() == [True, False, False, False, False, False]
    assert not window.lines_panel.delete_button.isEnabled()
    window.undo_action.trigger()
    assert enabled() == [False, True, False, False, False, False]
    assert window.redo_action.text() == "&Redo Add line"


def test_the_keys_dialog_is_a_table_and_docs_app_md_holds_the_same_rows(make_window):
    documented, section = {}, None
    for line in (ROOT / "docs" / "APP.md").read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("| ") and line != "| Input | Action |" and section in KEYS:
            keys, what = line.strip("| ").split(" | ")
            documented.setdefault(section, []).append((keys, what))
    assert documented == {section: list(rows) for section, rows in KEYS.items()}
    window = make_window(open_sample=False)
    window.show_keys()
    text = window.keys_label.text()
    assert text.count("<table") == len(KEYS)
    assert text.count("<tr>") == sum(len(rows) for rows in KEYS.values())
    assert "<td style='padding-right:16px'><b>Del, Ctrl+Backspace</b></td><td>delete the " \
        "selected line" in text
    # The keys the table names are the menus' shortcuts: zoom in has Ctrl+= too.
    shortcuts = {sequence.toString() for action in window.findChildren(QAction)
                 for sequence in action.shortcuts()}
    assert {"Ctrl+=", "Ctrl++", "Ctrl+Y", "Del", "PgDown", "PgUp", "Ctrl+I", "Ctrl+E",
            "Ctrl+S", "Ctrl+O", "Ctrl+Shift+O", "Ctrl+Shift+S", "F1"} <= shortcuts


def test_export_of_an_image_without_georeferencing_offers_pixel_coordinates(make_window, qtbot,
                                                                            tmp_path,
                                                                            monkeypatch):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    asked = []
    path = tmp_path / "lines.geojson"

    def save_dialog(_parent, _title, _suggestion, filters, chosen):
        asked.append((filters, chosen))
        return str(path), chosen

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_dialog)
    window.choose_export()
    wait_idle(qtbot, window)  # exported in the worker
    assert asked == [(EXPORT_PIXELS, EXPORT_PIXELS)]
    assert EXPORT_LONLAT not in asked[0][0]
    assert json.loads(path.read_text())["coordinate_space"] == "pixel"
    assert window.statusBar().currentMessage() == (f"exported 1 line to {path} in pixel "
                                                   "coordinates: the image has no "
                                                   "georeferencing")


def test_a_long_evidence_name_does_not_widen_the_parameters(qtbot):
    panel = ParamsPanel()
    qtbot.addWidget(panel)
    width = panel.minimumSizeHint().width()
    path = "/data/" + "good_evidence_with_a_rather_long_file_name_" * 4 + ".png"
    panel.set_evidence(path)
    assert panel.minimumSizeHint().width() == width
    label = panel.evidence_label
    assert label.sizeHint().width() == label.preferred_width
    assert label.preferred_width == label.fontMetrics().horizontalAdvance("the image")
    assert panel.evidence_label.text() == os.path.basename(path)
    assert panel.evidence_label.toolTip() == path


def test_line_names_and_column_headers_have_tooltips(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    (line,) = window.model.lines
    long_name = "The long road from the river crossing to the farm on the hill, north side"
    window.model.rename(line.id, long_name)
    cells = window.lines_panel.table_model
    assert cells.index(0, 0).data(Qt.ItemDataRole.ToolTipRole) == (
        f"{long_name}\nDouble-click to rename; untick to hide")
    tips = [cells.headerData(column, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
            for column in range(4)]
    assert tips == list(LinesPanel.COLUMN_TIPS)
    assert tips[3] == ("Mean link score per pixel of the line's traced segments (straight ones "
                       "not counted): higher, that is closer to 0, is better")


def test_the_unsaved_lines_question_agrees_in_number(make_window, qtbot, monkeypatch,
                                                      tmp_path):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, _title, text, *args:
                        asked.append(text) or QMessageBox.StandardButton.Cancel)
    assert not window.confirm_discard()
    assert asked == ["1 traced line is not saved in a session. Save it first?"]
    # Saved in a session, then one more line: the question names the session, not "2 lines
    # not saved" (one of them is).
    assert window.write_session(str(tmp_path / "lines.json"))
    click(qtbot, window, C)
    click_and_wait(qtbot, window, A)
    window.controller.finish()
    assert not window.confirm_discard()
    assert asked[-1] == ("The lines have changes not saved in lines.json (2 lines in all). "
                         "Save them first?")
    monkeypatch.setattr(QMessageBox, "question",  # the window closes at the end
                        lambda *args: QMessageBox.StandardButton.Discard)


def test_ctrl_equals_zooms_in_like_ctrl_plus(make_window, qtbot):
    window = make_window()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    scale = window.canvas.transform().m11()
    qtbot.keyClick(window.canvas, Qt.Key.Key_Equal, Qt.KeyboardModifier.ControlModifier)
    assert window.canvas.transform().m11() > scale


def test_opening_an_image_shows_how_it_was_read(make_window, qtbot, tmp_path):
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 8
    image = tmp_path / "turned.jpg"
    Image.new("RGB", (30, 40), (120, 120, 120)).save(image, exif=exif.tobytes())
    window = make_window(open_sample=False)
    opened = []
    window.image_loaded.connect(opened.append)
    window.open_image(str(image))
    qtbot.waitUntil(lambda: bool(opened), timeout=30_000)
    assert ("this JPEG asks viewers to rotate it (EXIF orientation 8); it is shown and traced "
            "as stored, as GIS software does") in window.status_message


def test_a_menu_tip_gives_back_the_short_message_not_its_details(make_window):
    window = make_window(open_sample=False)
    window.show_status("opened it", "the full path and the long note")
    bar = window.statusBar()
    bar.showMessage("a menu item's tip")  # as Qt shows a hovered item's status tip
    bar.clearMessage()  # and takes it away
    assert bar.currentMessage() == "opened it"
    assert bar.toolTip() == "opened it (the full path and the long note)"


def test_help_about_names_the_version_backend_model_and_guide(make_window, qtbot):
    window = make_window()
    wait_idle(qtbot, window)
    text = window.about_text()
    assert text.startswith(f"roadtracer {version()}: ")
    assert f"Backend: {window.controller.backend_note}" in text
    assert f"Surface model: {os.fspath(surface.MODEL_PATH)}" in text
    guide = text.split("User guide: ")[1].splitlines()[0]
    assert os.path.isfile(guide)
    assert guide.endswith(os.path.join("docs", "APP.md"))
    assert "About roadtracer" in [action.text().replace("&", "")
                                  for action in window.menuBar().actions()[-1].menu().actions()]


def test_help_about_in_an_installed_copy_names_no_missing_file(make_window, qtbot, tmp_path,
                                                               monkeypatch):
    """Installed from a wheel, there is no docs/ or LICENSE beside the code: About names the
    licence in the distribution's metadata and where the guide is, not paths that are not
    there."""
    import app.main_window

    window = make_window()
    licence = tmp_path / "dist-info" / "licenses" / "LICENSE"
    licence.parent.mkdir(parents=True)
    licence.write_text("MIT License")
    monkeypatch.setattr(app.main_window, "__file__", str(tmp_path / "app" / "main_window.py"))
    monkeypatch.setattr(app.main_window, "installed_licences", lambda: [licence])
    text = window.about_text()
    assert "User guide: docs/APP.md of the source distribution\n" in text
    assert f"Licences: {licence} (the program)" in text
    assert str(tmp_path / "docs") not in text
