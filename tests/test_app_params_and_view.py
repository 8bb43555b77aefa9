"""The window's display, parameters and image changes: nearly uniform images keep their contrast; a
georeferenced image is traced with its own ground resolution; Esc and closing do not wait for a
trace that cannot be stopped, and traces far too large are refused before they start; the panel
and sessions offer only what the tracer accepts; another image drops the last one's evidence
raster, trace field and E at once; zoom steps never go the wrong way; what needs an image is
greyed out without one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import imageio.v3 as iio
import numpy as np
import pytest
from affine import Affine
from PySide6.QtCore import QPointF, Qt

from app.main_window import TRACE_TIP
from app.panels import EVIDENCE_ON_IMAGE
from app.params import (
    AUTO_POINTS_HALFWIDTH,
    MAX_LINK_SAMPLES,
    check_trace_size,
    params_from_dict,
)
from app.session import load_session
from app.tracing import STILL_RUNNING, WAITING
from core.errors import BadParameter
from core.tracer import TraceParams
from tests import test_app, test_app_retrace_races
from tests.conftest import ROOT, SAMPLE_IMAGE
from tests.helpers import open_and_wait
from tests.test_app import A, B, C, click, click_and_wait, python_threads
from tests.test_georef import sample_pixels, write_geotiff

make_window = test_app.make_window  # the fixtures: windows closed, their workers stopped
held = test_app_retrace_races.held

CTRL = Qt.KeyboardModifier.ControlModifier


def shown_grey(window, point) -> int:
    """The grey level the canvas shows at image ``point`` (x, y)."""
    image = window.canvas.viewport().grab().toImage()
    at = window.canvas.mapFromScene(QPointF(*point))
    return image.pixelColor(at).red()


def mask_of_the_sample(path) -> None:
    """A 0/255 mask of the sample's size: a 4 px road across row 300, the rest 0."""
    mask = np.zeros((572, 572), np.uint8)
    mask[298:302] = 255
    iio.imwrite(path, mask)


# ------------------------------------------------------------- 1. nearly uniform images
def test_a_nearly_uniform_image_and_a_mask_keep_their_contrast(make_window, qtbot, tmp_path):
    sheet = np.full((400, 400), 255, np.uint8)  # a white map sheet with a thin dark road
    sheet[200:202] = 40
    iio.imwrite(tmp_path / "sheet.png", sheet)
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, tmp_path / "sheet.png")
    assert shown_grey(window, (100, 100)) == 255
    assert shown_grey(window, (100, 200.5)) == 0
    # An evidence mask (0/255: the 0s read as no data) shows white on black with E.
    open_and_wait(qtbot, window, SAMPLE_IMAGE)
    mask_of_the_sample(tmp_path / "mask.png")
    assert window.set_evidence_raster(str(tmp_path / "mask.png"))
    qtbot.waitUntil(window.show_evidence_action.isEnabled, timeout=10_000)
    window.show_evidence_action.trigger()
    assert shown_grey(window, (286, 300)) == 255
    assert shown_grey(window, (286, 100)) == 0


# ------------------------------------------------------------- 2. the image's own ground
def test_a_georeferenced_image_is_traced_with_its_own_ground_resolution(make_window, qtbot,
                                                                        tmp_path, held):
    window = make_window()
    panel = window.params_panel
    with qtbot.waitSignal(panel.params_changed, timeout=5_000):
        panel.ground.setValue(2.0)  # the user's, for the PNG
    assert window.controller.params.ground_resolution == 2.0
    geotiff = tmp_path / "utm.tif"
    write_geotiff(geotiff, sample_pixels(), transform=Affine(0.3, 0, 500000, 0, -0.3, 3900000))
    open_and_wait(qtbot, window, geotiff)
    own = window.raster.ground_resolution
    assert own != round(own, 3)  # at the UTM scale factor: not the panel's precision
    assert window.controller.params.ground_resolution == own
    assert panel.params().ground_resolution == own
    assert not panel.ground.isEnabled()
    assert panel.ground.value() == pytest.approx(own, abs=1e-3)
    assert "georeferencing" in panel.ground.toolTip()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    assert held.traced[-1][2].ground_resolution == own  # what the tracer got
    lengths = window.lines_panel.table_model
    drawn = window.model.lines[0]
    assert lengths.data(lengths.index(0, 2)) == f"{drawn.length * own:.0f} m"
    segment = window.model.lines[0].segments[0]
    assert segment.request.ground_resolution == segment.params.ground_resolution == own
    session = tmp_path / "utm.roadtracer.json"
    assert window.write_session(str(session))
    (line,) = load_session(session).lines  # the image's own, as precise as it is, reads back
    assert line.segments[0].request.ground_resolution == own
    # A PNG again: the user's value is back, and applies.
    window.controller.finish()
    assert window.statusBar().currentMessage() == f"Road 1 finished ({drawn.length * own:.0f} m)"
    open_and_wait(qtbot, window, SAMPLE_IMAGE)
    assert panel.ground.isEnabled()
    assert panel.ground.value() == 2.0
    assert window.controller.params.ground_resolution == 2.0
    assert lengths.metres_per_px == 2.0  # lengths at the user's ground resolution
    with qtbot.waitSignal(panel.params_changed, timeout=5_000):
        panel.ground.setValue(0.0)  # auto: not known
    assert lengths.metres_per_px is None


def test_georeferencing_beyond_any_imagery_asks_for_the_ground_resolution(make_window, qtbot,
                                                                           tmp_path):
    window = make_window(open_sample=False)
    coarse = tmp_path / "coarse.tif"  # 20 km pixels: a wrong transform or CRS
    write_geotiff(coarse, sample_pixels(), transform=Affine(2e4, 0, 0, 0, -2e4, 0),
                  crs="EPSG:3857")
    open_and_wait(qtbot, window, coarse)
    assert window.status_text.endswith(
        "the image's georeferencing gives a ground resolution of 1.4e+04 m per pixel, outside "
        "0.001 to 10000 m; state the right one (Parameters ▸ Ground resolution)")
    assert window.params_panel.ground.isEnabled()  # the user's value applies


# ------------------------------------------------------------- 3. traces that cannot stop
def cancel_a_running_trace(qtbot, window, held) -> None:
    """Click A and B, and press Esc while the segment's trace is held in the worker."""
    held.hold()
    click(qtbot, window, A)
    click(qtbot, window, B)
    test_app_retrace_races.wait_held(qtbot, held)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)


def test_esc_says_the_running_trace_finishes_first_and_closing_does_not_wait(make_window,
                                                                              qtbot, held,
                                                                              monkeypatch):
    import app.traces

    trace_threads = []

    def recorded(*args, **kwargs):  # the held trace, on the thread it runs on
        trace_threads.append(threading.current_thread())
        return held(*args, **kwargs)

    monkeypatch.setattr(app.traces, "trace", recorded)
    threads_before = python_threads()
    window = make_window()
    cancel_a_running_trace(qtbot, window, held)
    assert window.status_text == f"segment cancelled; {STILL_RUNNING}"
    click(qtbot, window, A)
    click(qtbot, window, C)
    assert window.status_text == WAITING
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)  # that segment too: nothing in flight
    window.close()
    assert not window.isVisible()
    # Closed while the trace is still held on its thread (it waits until held.open()): had
    # closing waited for it, that thread would have ended (the hold gives up after 30 s).
    assert held.waiting == 1
    assert held.traced == []
    (thread,) = trace_threads
    assert thread.is_alive()
    held.open()  # the trace ends on its own thread, unheeded
    qtbot.waitUntil(lambda: python_threads() == threads_before, timeout=10_000)


def test_a_later_segment_traces_once_the_cancelled_trace_ends(make_window, qtbot, held):
    window = make_window()
    cancel_a_running_trace(qtbot, window, held)
    click(qtbot, window, A)
    click(qtbot, window, C)
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        held.open()
    assert "the cancelled trace finished; tracing on" in [text for _, text in window.messages]
    assert window.model.lines[0].anchors == (A, C)


def test_a_trace_far_too_large_is_refused_before_it_starts(make_window, qtbot, held):
    window = make_window()
    panel = window.params_panel
    with qtbot.waitSignal(panel.params_changed, timeout=5_000):
        panel.guides.setValue(200)
        panel.points.setValue(1001)
        panel.halfwidth.setValue(500)
    click(qtbot, window, A)
    with qtbot.waitSignal(window.controller.trace_failed, timeout=10_000):
        click(qtbot, window, B)
    assert not held.traced  # refused before the engine ran
    assert window.trace_label.text() == "trace failed"
    # Guides are capped at one per px of the 89 px between the clicks.
    assert window.status_text.startswith("trace too large: 88 guides × 1001 points per guide")
    assert window.status_text.endswith("lower points per guide or guides")


def test_the_size_bound_passes_what_automatic_parameters_trace():
    for length in (100.0, 1000.0, 8000.0):  # guides ≤ 40, the widest automatic corridor
        check_trace_size((0.0, 0.0), (length, 0.0), TraceParams(halfwidth=240.0))
    with pytest.raises(BadParameter, match=r"lower half-width \(it sets the points per guide\)"):
        check_trace_size((0.0, 0.0), (1000.0, 0.0), TraceParams(guides=100, halfwidth=600.0))
    assert MAX_LINK_SAMPLES == 5e9  # docs/APP.md states it
    # A GPU scores links many times faster: the bound is the CPU's.
    check_trace_size((0.0, 0.0), (1000.0, 0.0), TraceParams(guides=100, halfwidth=600.0), "gpu")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals in the child's check")
def test_quitting_while_a_cancelled_trace_runs_neither_waits_nor_crashes(tmp_path):
    script = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication
import app.traces
from app.main_window import MainWindow
app.traces.trace = lambda *args: time.sleep(120)  # a trace that takes minutes
qt = QApplication([])
window = MainWindow(QSettings({str(tmp_path / "s.ini")!r}, QSettings.Format.IniFormat),
                    {str(tmp_path / "autosave")!r})
window.show()
def quit_while_tracing():
    assert window.jobs.running is not None and window.jobs.running.key is not None
    window.controller.cancel()  # Esc
    window.close()
    qt.quit()
def loaded(_):
    window.controller.press((430, 241))
    window.controller.press((486, 172))  # a trace of minutes starts
    QTimer.singleShot(1000, quit_while_tracing)
window.image_loaded.connect(loaded)
window.open_image({str(SAMPLE_IMAGE)!r})
qt.exec()
print("quit", flush=True)
"""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=100, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quit"
    assert "Traceback" not in done.stderr
    assert time.perf_counter() - start < 60  # neither the trace's 120 s nor a 30 s wait


# ------------------------------------------------------------- 4. what the tracer accepts
def test_the_panel_offers_only_what_the_tracer_accepts(make_window, qtbot):
    window = make_window()
    panel = window.params_panel
    panel.points.setFocus()
    panel.points.lineEdit().selectAll()
    qtbot.keyClicks(panel.points, "1")
    qtbot.keyClick(panel.points, Qt.Key.Key_Return)
    assert panel.points.value() == 2  # one point per guide: no choice, refused by traces
    panel.points.setValue(0)
    panel.points.stepUp()
    assert panel.points.value() == 2
    panel.points.stepDown()
    assert panel.points.value() == 0  # auto
    # Automatic points per guide need a half-width of at least 0.8 px.
    assert AUTO_POINTS_HALFWIDTH == 0.8
    panel.halfwidth.setFocus()
    panel.halfwidth.lineEdit().selectAll()
    qtbot.keyClicks(panel.halfwidth, "0.5")
    qtbot.keyClick(panel.halfwidth, Qt.Key.Key_Return)
    assert panel.halfwidth.value() == 0.8
    panel.points.setValue(5)
    panel.halfwidth.setValue(0.5)  # with 5 points per guide a trace takes it
    assert panel.halfwidth.value() == 0.5
    panel.points.setValue(0)
    assert panel.halfwidth.value() == 0.8
    with qtbot.waitSignal(panel.params_changed, timeout=5_000):
        pass
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)  # what the panel gives, the tracer takes


@pytest.mark.parametrize(("params", "message"), [
    ({"points": 1}, "params.points must be a whole number in [2, 1001] or null (auto), got 1"),
    ({"halfwidth": 0.5}, "params.halfwidth must be at least 0.8 px where points per guide is "
                         "auto (null), got 0.5: a narrower corridor gives a guide a single "
                         "point"),
])
def test_sessions_refuse_what_the_tracer_refuses(make_window, qtbot, tmp_path, params, message):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    session = tmp_path / "s.roadtracer.json"
    assert window.write_session(str(session))
    text = session.read_text()
    start = text.index('"params":') + len('"params":')
    end = text.index("}", start) + 1
    session.write_text(text[:start] + str(params).replace("'", '"') + text[end:])
    with qtbot.waitSignal(window.error_shown, timeout=10_000) as shown:
        window.open_session(str(session))
    assert shown.args[0] == f"{session}: {message}"
    assert params_from_dict({"points": 5, "halfwidth": 0.5}).halfwidth == 0.5


# ------------------------------------------------------------- 5, 7, 9. another image
def two_images(tmp_path) -> tuple[str, str]:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    shutil.copy(SAMPLE_IMAGE, first)
    shutil.copy(SAMPLE_IMAGE, second)
    return str(first), str(second)


def test_another_image_drops_the_last_ones_evidence_trace_field_and_e_at_once(
        make_window, qtbot, tmp_path):
    first, second = two_images(tmp_path)
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, first)
    mask_of_the_sample(tmp_path / "mask.png")
    with qtbot.waitSignal(window.params_panel.params_changed, timeout=5_000):
        assert window.set_evidence_raster(str(tmp_path / "mask.png"))
    assert window.controller.params.evidence_path is not None
    window.controller.trace_failed.emit("no admissible path")
    assert window.trace_label.text() == "trace failed"
    loaded = []
    window.image_loaded.connect(lambda _: loaded.append(
        (window.controller.params.evidence_path, window.trace_label.text(),
         window.trace_label.toolTip())))
    open_and_wait(qtbot, window, second)
    assert loaded == [(None, "", TRACE_TIP)]  # at once, not once the panel's delay is over


def test_reopening_a_session_with_the_same_evidence_shows_the_image(make_window, qtbot,
                                                                    tmp_path):
    window = make_window()
    mask_of_the_sample(tmp_path / "mask.png")
    assert window.set_evidence_raster(str(tmp_path / "mask.png"))
    qtbot.waitUntil(window.show_evidence_action.isEnabled, timeout=10_000)
    session = tmp_path / "s.roadtracer.json"
    assert window.write_session(str(session))
    window.show_evidence_action.trigger()
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_session(str(session))
    assert not window.show_evidence_action.isChecked()
    assert window.canvas._raster_item.levels is window._image_levels
    qtbot.waitUntil(window.show_evidence_action.isEnabled, timeout=10_000)  # E shows it again


# ------------------------------------------------------------- 6. zoom steps
def test_zoom_steps_never_go_the_wrong_way_on_a_tiny_image(make_window, qtbot, tmp_path):
    iio.imwrite(tmp_path / "tiny.png", np.arange(64, dtype=np.uint8).reshape(8, 8) * 4)
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, tmp_path / "tiny.png")
    canvas = window.canvas
    fitted = canvas.transform().m11()
    assert fitted > 64  # beyond the zoom's usual range
    qtbot.keyClick(canvas, Qt.Key.Key_Plus, CTRL)
    assert canvas.transform().m11() == pytest.approx(fitted)  # not zoomed out
    qtbot.keyClick(canvas, Qt.Key.Key_Minus, CTRL)
    smaller = canvas.transform().m11()
    assert smaller < fitted
    qtbot.keyClick(canvas, Qt.Key.Key_Plus, CTRL)
    assert smaller < canvas.transform().m11() <= fitted * 1.0001


# ------------------------------------------------------------- 8. score evidence on the image
def test_score_evidence_without_an_evidence_raster_says_what_it_reads(make_window, qtbot):
    window = make_window()
    with qtbot.waitSignal(window.params_panel.params_changed, timeout=5_000):
        window.params_panel.score.setCurrentText("evidence")
    assert window.status_text == EVIDENCE_ON_IMAGE
    assert window.params_panel.evidence_label.toolTip() == EVIDENCE_ON_IMAGE
    open_and_wait(qtbot, window, SAMPLE_IMAGE)  # said again for each image opened
    assert window.status_text.endswith(EVIDENCE_ON_IMAGE)


# ------------------------------------------------------------- 10. no image
def test_what_needs_an_image_is_greyed_out_without_one(make_window, qtbot, tmp_path):
    window = make_window(open_sample=False)
    needing = [*window.image_actions, *window.step_actions]
    assert [action.isEnabled() for action in needing] == [False] * 5
    assert not window.params_panel.choose_evidence.isEnabled()
    window.choose_training_export()
    assert window.status_text == "open an image first"
    first, second = two_images(tmp_path)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(first)
        assert all(action.isEnabled() for action in window.step_actions)  # PgDown steps on
    assert all(action.isEnabled() for action in needing)
    assert window.params_panel.choose_evidence.isEnabled()


def test_page_down_in_the_lines_table_scrolls_it(make_window, qtbot, tmp_path):
    first, _ = two_images(tmp_path)
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, first)
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    table = window.lines_panel.table
    table.setFocus()
    table.selectRow(0)
    qtbot.keyClick(table, Qt.Key.Key_PageDown)
    assert window._opening is None  # no image opening
    assert window.image_path == first
    window.canvas.setFocus()
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)  # elsewhere: the next image


def test_sigma_is_offered_only_for_scores_that_read_the_gradient(make_window):
    panel = make_window().params_panel
    assert panel.params().score == "surface"
    assert not panel.sigma.isEnabled()
    assert "does not read the image gradient" in panel.sigma.toolTip()
    for score in ("flat", "cross", "sine"):
        panel.score.setCurrentText(score)
        assert panel.sigma.isEnabled(), score
        assert panel.sigma.toolTip() == panel.sigma_tip
    for score in ("centre", "colour", "evidence"):
        panel.score.setCurrentText(score)
        assert not panel.sigma.isEnabled(), score
    panel.set_params(TraceParams(score="cross"))
    assert panel.sigma.isEnabled()
