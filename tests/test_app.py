"""The desktop application, driven offscreen through Qt events and signals (pytest-qt)."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import json
import shutil
import sys
import threading
import time

import imageio.v3 as iio
import numpy as np
import pytest
from affine import Affine
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import QDropEvent, QWheelEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from app.main_window import MainWindow, run_app
from app.model import nearest_on_polyline
from app.panels import ParamsPanel
from core.georef import Georef
from core.tracer import TraceParams
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE, close_the_window_once_loaded
from tests.synthetic import BULGE, road_image
from tests.test_raster import write_bands

CASES = {case["id"]: case for case in json.loads(SAMPLE_CASES.read_text())}
CASE = CASES["gsi_108_01"]
A, B = tuple(CASE["a"]), tuple(CASE["b"])
C = (520, 120)  # further along the same road


def distance(points, polyline) -> np.ndarray:
    """Distance (n,) of each point (n, 2) to the polyline (N, 2)."""
    return nearest_on_polyline(points, polyline)[1]


def wait_idle(qtbot, window, timeout=60_000) -> None:
    """Wait until the worker has nothing running or queued."""
    if window.jobs.running is None and window.jobs.pending == 0:
        return
    with qtbot.waitSignal(window.jobs.idle, timeout=timeout):
        pass


def view_pos(window, point):
    return window.canvas.mapFromScene(QPointF(*point))


def click(qtbot, window, point, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    qtbot.mouseClick(window.canvas.viewport(), Qt.MouseButton.LeftButton, modifier,
                     view_pos(window, point))


def click_and_wait(qtbot, window, point, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        click(qtbot, window, point, modifier)


def window_with_a_line(make_window, qtbot) -> MainWindow:
    """A window on the sample with one finished line, traced from A to B."""
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    return window


def python_threads() -> int:
    """Threads started by Python; a Qt thread that ran Python code leaves a permanent
    ``_DummyThread`` entry behind, which says nothing about threads still running."""
    return sum(not isinstance(thread, threading._DummyThread) for thread in threading.enumerate())


@pytest.fixture
def make_window(qtbot, tmp_path, monkeypatch):
    """Windows with private settings and autosave folder; the sample opened unless told not to.

    At the end every window is closed and must have stopped its worker thread.
    """
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *args, **kwargs: QMessageBox.StandardButton.Discard)
    threads_before = python_threads()
    windows = []

    def make(open_sample: bool = True) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings, str(tmp_path / "autosave"))
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        window.canvas.setFocus()
        if open_sample:
            with qtbot.waitSignal(window.image_loaded, timeout=60_000):
                window.open_image(str(SAMPLE_IMAGE))
        wait_idle(qtbot, window)
        return window

    yield make
    for window in windows:
        window.close()
        assert not window.isVisible(), "the window refused to close (a question answered Cancel?)"
        assert window.jobs.running is None
        assert window.jobs.shutdown(0), "worker thread still running after close"
    # A queue's trace thread ends once the trace it runs is done (a detached one is not waited
    # for at shutdown): give it that long, but no thread may stay.
    deadline = time.monotonic() + 30
    while python_threads() != threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert python_threads() == threads_before, threading.enumerate()


def test_two_clicks_trace_the_road_near_ground_truth(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    (line,) = window.model.lines
    assert line.anchors == ((430.0, 241.0), (486.0, 172.0))
    distances = distance(line.polyline, np.array(CASE["gt"]))
    assert distances.mean() < 4.0, distances  # measured 1.3 px
    assert "score" in window.trace_label.text()
    assert "corridor widened" not in window.trace_label.text()
    assert "CPU" in window.backend_label.text()


def test_status_says_when_the_corridor_was_widened(make_window, qtbot, tmp_path):
    window = make_window(open_sample=False)
    path = tmp_path / "bulge.png"
    iio.imwrite(path, np.round(255 * np.clip(road_image(BULGE).pixels, 0, 1)).astype(np.uint8))
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(path))
    click(qtbot, window, tuple(BULGE[0]))
    click_and_wait(qtbot, window, tuple(BULGE[-1]))
    assert "corridor widened" in window.trace_label.text()


def window_on_no_data_at_a(make_window, qtbot, tmp_path) -> MainWindow:
    """A window on a copy of the sample that has no data (0 in every band) around A."""
    window = make_window(open_sample=False)
    pixels = iio.imread(SAMPLE_IMAGE)[..., :3].copy()
    x, y = (round(v) for v in A)
    pixels[y - 10:y + 11, x - 10:x + 11] = 0
    path = tmp_path / "holes.png"
    iio.imwrite(path, pixels)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(path))
    wait_idle(qtbot, window)
    return window


def test_status_says_when_a_click_lies_on_no_data(make_window, qtbot, tmp_path):
    window = window_on_no_data_at_a(make_window, qtbot, tmp_path)
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    wait_idle(qtbot, window)
    assert "lies on no data" in window.statusBar().currentMessage()


@pytest.mark.parametrize("preview", ["shown", "being traced"])
def test_a_click_that_takes_the_preview_says_its_trace_notes_too(make_window, qtbot, tmp_path,
                                                                 monkeypatch, preview):
    """The click lands the preview's trace as the segment (the preview shown, or the preview
    job it waits for): the status bar says that trace's notes as after any click."""
    import app.tracing

    window = window_on_no_data_at_a(make_window, qtbot, tmp_path)
    go = threading.Event()
    real = app.tracing.run_requests
    monkeypatch.setattr(app.tracing, "run_requests",
                        lambda *args: go.wait(30) and real(*args))  # held until go
    if preview == "shown":
        go.set()
    click(qtbot, window, A)
    window.controller.hover(B)  # the mouse moved there
    if preview == "shown":
        qtbot.waitUntil(lambda: window.controller.preview is not None, timeout=30_000)
        wait_idle(qtbot, window)
    else:
        qtbot.waitUntil(lambda: window.jobs.running is not None, timeout=10_000)
        assert window.jobs.running.preview
    started = []
    window.jobs.started.connect(started.append)
    click(qtbot, window, B)
    go.set()
    qtbot.waitUntil(lambda: bool(window.model.lines), timeout=30_000)
    wait_idle(qtbot, window)
    assert started == []  # the preview's trace is the segment: none traced for the click
    assert window.model.lines[0].anchors == (A, B)
    assert "lies on no data" in window.statusBar().currentMessage()


def test_second_click_to_drawn_line_is_fast(make_window, qtbot):
    """Target ≤ 150 ms from the second click to the painted line (CPU backend, no preview).

    The trace itself is the engine's time; what the application adds on top must stay small:
    one trace per click, and no more than a hang's worth of time (the speed itself is measured
    by benchmarks/click_latency.py).
    """
    window = make_window()
    totals, engine, started = [], [], []
    window.controller.traced.connect(lambda outcome: engine.append(outcome.elapsed_ms))
    window.jobs.started.connect(started.append)
    for case in CASES.values():
        click(qtbot, window, tuple(case["a"]))
        started.clear()
        start = time.perf_counter()
        click_and_wait(qtbot, window, tuple(case["b"]))
        window.canvas.viewport().repaint()
        totals.append(1e3 * (time.perf_counter() - start))
        assert len(started) == 1  # the segment's trace, and nothing traced again
        window.controller.finish()
    print(f"click → drawn line {np.round(totals)} ms, of which tracing {np.round(engine)} ms")
    assert len(engine) == len(CASES)
    # Measured: a median of 15 ms on top of the trace (2 cores). 10× that only fails on a
    # hang or a gross regression (the line painted again and again), not on a slow machine.
    assert np.median(np.subtract(totals, engine)) < 150


def test_chaining_backspace_undo_redo_and_enter(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click_and_wait(qtbot, window, C)
    (line,) = window.model.lines
    assert line.anchors == (A, B, C)
    assert len(line.segments) == 2
    np.testing.assert_array_equal(line.segments[1].polyline[0], line.segments[0].polyline[-1])
    qtbot.keyClick(window.canvas, Qt.Key.Key_Backspace)
    assert window.model.lines[0].anchors == (A, B)
    assert window.controller.tail == B  # still drawing, from B
    qtbot.keyClick(window.canvas, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert window.model.lines[0].anchors == (A, B, C)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Z,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert window.model.lines[0].anchors == (A, B)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    assert not window.controller.drawing
    click(qtbot, window, C)  # starts a new line
    assert window.controller.tail == C
    assert len(window.model.lines) == 1


def test_backspace_on_first_segment_keeps_the_start_anchor(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Backspace)
    assert window.model.lines == ()
    assert window.controller.tail == A
    click_and_wait(qtbot, window, B)
    assert window.model.lines[0].anchors == (A, B)


def test_escape_cancels_the_segment_in_progress(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click(qtbot, window, C)  # its trace is now in flight
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    wait_idle(qtbot, window)
    assert window.model.lines[0].anchors == (A, B)
    assert not window.controller.drawing
    assert "cancelled" in window.statusBar().currentMessage()


def test_a_new_lines_first_click_says_how_to_go_on(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    assert window.statusBar().currentMessage() == (
        "road line started: click further along it (Shift + click: a straight segment); "
        "Enter, a double-click or Esc ends the line")


def test_escape_with_no_segment_in_flight_finishes_the_line(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    assert window.model.lines[0].anchors == (A, B)
    assert not window.controller.drawing
    assert window.statusBar().currentMessage() == \
        f"Road 1 finished ({window.model.lines[0].length:.0f} px)"


def test_double_click_finishes_the_line(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        qtbot.mouseDClick(window.canvas.viewport(), Qt.MouseButton.LeftButton,
                          pos=view_pos(window, B))
    wait_idle(qtbot, window)
    assert window.model.lines[0].anchors == (A, B)
    assert not window.controller.drawing


def test_modifier_gives_a_straight_segment(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    with qtbot.assertNotEmitted(window.jobs.started, wait=100):
        window.controller.hover(C, straight=True)
    assert window.controller.preview.is_straight
    with qtbot.waitSignal(window.controller.traced, timeout=5_000):
        click(qtbot, window, B, Qt.KeyboardModifier.ShiftModifier)
    segment = window.model.lines[0].segments[0]
    assert segment.is_straight
    np.testing.assert_array_equal(segment.polyline, [A, B])


def test_preview_follows_the_cursor_without_piling_up_jobs(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    waiting = []
    window.jobs.started.connect(lambda job: waiting.append(window.jobs.pending))
    path = [(A[0] + 2 * i, A[1] - 3 * i) for i in range(4, 34)]
    for point in path:
        qtbot.mouseMove(window.canvas.viewport(), view_pos(window, point))
        qtbot.wait(4)  # a user's pace, not a wait for results
    qtbot.waitUntil(lambda: window.controller.preview is not None
                    and tuple(window.controller.preview.polyline[-1]) == path[-1], timeout=30_000)
    wait_idle(qtbot, window)
    assert 0 < len(waiting) < len(path)
    assert max(waiting) <= 1  # one running, at most one preview waiting
    assert window.model.lines == ()  # previews never edit the model


def test_click_on_the_previewed_point_reuses_the_preview(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    with qtbot.waitSignal(window.controller.changed, timeout=30_000,
                          check_params_cb=lambda: window.controller.preview is not None):
        qtbot.mouseMove(window.canvas.viewport(), view_pos(window, B))
    with qtbot.assertNotEmitted(window.jobs.started):
        click(qtbot, window, B)
    assert window.model.lines[0].anchors == (A, B)


def drag_and_wait(qtbot, window, start, end) -> None:
    """Press at ``start``, move to ``end`` and release there; wait for the re-trace."""
    viewport = window.canvas.viewport()
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=view_pos(window, start))
    qtbot.mouseMove(viewport, view_pos(window, end))
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=view_pos(window, end))


def test_dragging_a_vertex_retraces_both_neighbours(make_window, qtbot):
    window = make_window()
    draw_line(qtbot, window, A, B, C)
    moved = (B[0] + 3, B[1] + 2)
    drag_and_wait(qtbot, window, B, moved)
    line = window.model.lines[0]
    assert line.anchors == (A, moved, C)
    assert tuple(line.segments[0].polyline[-1]) == moved == tuple(line.segments[1].polyline[0])
    assert window.model.undo_label == "Move vertex"
    window.controller.undo()
    assert window.model.lines[0].anchors == (A, B, C)


def test_dragging_a_line_adds_a_vertex_there(make_window, qtbot):
    window = make_window()
    before = draw_line(qtbot, window, A, B, C)
    grabbed = before.segments[1].polyline[len(before.segments[1].polyline) // 2]
    dropped = (round(grabbed[0]) + 4.0, round(grabbed[1]) - 3.0)
    drag_and_wait(qtbot, window, grabbed, dropped)
    line = window.model.lines[0]
    assert line.anchors == (A, B, dropped, C)
    assert line.segments[0] is before.segments[0]
    assert tuple(line.segments[1].polyline[-1]) == dropped == tuple(line.segments[2].polyline[0])
    assert window.model.undo_label == "Add vertex"
    window.controller.undo()
    assert window.model.lines[0].anchors == (A, B, C)
    # Hovering a line (not drawing) shows that it can be dragged.
    qtbot.mouseMove(window.canvas.viewport(), view_pos(window, grabbed))
    assert window.canvas.viewport().cursor().shape() == Qt.CursorShape.SizeAllCursor
    qtbot.mouseMove(window.canvas.viewport(), view_pos(window, (grabbed[0], grabbed[1] + 40)))
    assert window.canvas.viewport().cursor().shape() == Qt.CursorShape.ArrowCursor
    # A click on the line (no drag) still starts a new line there.
    qtbot.mouseClick(window.canvas.viewport(), Qt.MouseButton.LeftButton,
                     pos=view_pos(window, grabbed))
    assert window.controller.drawing
    assert len(window.model.lines) == 1


def test_changing_a_parameter_retraces_the_selected_segment(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    assert window.controller.selection == (window.model.lines[0].id, 0)
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):
        window.params_panel.max_angle.setValue(12.0)
    segment = window.model.lines[0].segments[0]
    assert segment.params.max_angle == 12.0
    assert window.model.undo_label == "Re-trace"


def test_errors_are_messages_not_crashes(make_window, qtbot):
    window = make_window()
    click(qtbot, window, (-40, -40))
    assert "outside" in window.statusBar().currentMessage()
    window.controller.set_params(TraceParams(points=2, halfwidth=40.0, max_angle=1.0))
    click(qtbot, window, A)
    click(qtbot, window, B)
    wait_idle(qtbot, window)
    assert "max angle" in window.statusBar().currentMessage()
    assert window.model.lines == ()
    assert window.controller.tail == A


def test_a_surface_model_it_cannot_run_is_named_at_the_first_trace(make_window, qtbot,
                                                                   monkeypatch, tmp_path):
    import core.surface

    monkeypatch.setattr(core.surface, "MODEL_PATH", tmp_path / "missing.onnx")
    window = make_window()
    click(qtbot, window, A)
    click(qtbot, window, B)
    wait_idle(qtbot, window)
    assert "surface model not found" in window.statusBar().currentMessage()
    assert "missing.onnx" in window.statusBar().currentMessage()
    assert window.model.lines == ()


def test_file_menu_chooses_the_surface_model(make_window, qtbot, monkeypatch, tmp_path):
    import shutil

    import core.surface

    monkeypatch.setattr(core.surface, "MODEL_PATH", core.surface.MODEL_PATH)
    # Set first, so that teardown restores the variable as it was, absent or not.
    monkeypatch.setenv(core.surface.MODEL_VARIABLE, "")
    monkeypatch.delenv(core.surface.MODEL_VARIABLE)
    window = make_window()
    bad = tmp_path / "notes.onnx"
    bad.write_text("not a model")
    assert not window.set_surface_model(str(bad))
    assert "notes.onnx is not an ONNX model" in window.last_error
    assert core.surface.MODEL_PATH == core.surface.BUNDLED_MODEL
    mine = tmp_path / "mine.onnx"
    shutil.copy(core.surface.BUNDLED_MODEL, mine)
    assert window.set_surface_model(str(mine))
    assert core.surface.MODEL_PATH == mine
    assert "mine.onnx" in window.statusBar().currentMessage()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    assert len(window.model.lines[0].segments) == 1


def test_gpu_failure_falls_back_to_the_cpu(make_window, qtbot):
    class BrokenGpu:
        name, description = "gpu", "fake GPU"

        def trace(self, *args):
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")

    window = make_window()
    window.controller.backend = BrokenGpu()
    click(qtbot, window, A)
    with qtbot.waitSignal(window.controller.backend_changed, timeout=30_000) as blocker:
        click(qtbot, window, B)
    wait_idle(qtbot, window)
    assert "gpu backend failed" in blocker.args[0]
    assert "CPU" in window.backend_label.text()
    assert window.model.lines[0].segments[0].backend == "cpu"


def test_a_gpu_failure_on_a_trace_too_large_for_the_cpu_names_both(make_window, qtbot):
    """The CPU that takes over from a failing GPU keeps its own size bound: a trace of
    minutes that cannot be stopped is refused, saying why the GPU did not do it."""
    class BrokenGpu:
        name, description = "gpu", "fake GPU"

        def __getattr__(self, attribute):  # every method the engine calls fails
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")

    window = make_window()
    window.controller.backend = BrokenGpu()
    window.controller.set_params(TraceParams(guides=200, points=1001, halfwidth=500.0))
    click(qtbot, window, A)
    with qtbot.waitSignal(window.controller.trace_failed, timeout=30_000) as blocker:
        click(qtbot, window, B)
    wait_idle(qtbot, window)
    assert blocker.args[0].startswith("gpu backend failed: RuntimeError: CUDA_ERROR_LAUNCH_FAILED;"
                                      " on the CPU, trace too large")
    assert "lower points per guide or guides" in blocker.args[0]
    assert window.controller.backend.name == "gpu"  # not switched: nothing was traced


def test_bad_image_file_shows_a_message(make_window, qtbot, tmp_path):
    window = make_window()
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"this is not a PNG")
    with qtbot.waitSignal(window.error_shown, timeout=30_000):
        window.open_image(str(bad))
    assert "broken.png is not an image this program can read" in window.last_error
    with qtbot.waitSignal(window.error_shown, timeout=30_000):
        window.open_image(str(tmp_path / "missing.tif"))
    assert "not found" in window.last_error
    assert window.image_path == str(SAMPLE_IMAGE)  # the open image stays
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)


def test_export_writes_valid_geojson(make_window, qtbot, tmp_path):
    geojson_pydantic = pytest.importorskip("geojson_pydantic")
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click(qtbot, window, C, Qt.KeyboardModifier.ControlModifier)
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))  # in the worker
    wait_idle(qtbot, window)
    document = json.loads(path.read_text())
    collection = geojson_pydantic.FeatureCollection.model_validate(document)
    (feature,) = collection.features
    assert feature.properties["name"] == "Road 1"
    assert feature.properties["kind"] == "road"
    assert feature.properties["anchors"] == [list(A), list(B), list(C)]
    assert feature.properties["score"] < 0
    assert feature.geometry.coordinates[0] == pytest.approx(A)
    # A FIFO (or device) would block the window until a reader came: refused at once.
    fifo = tmp_path / "fifo.geojson"
    os.mkfifo(fifo)
    for write, title in ((window.export_geojson, "export"), (window.write_session, "session")):
        with qtbot.waitSignal(window.error_shown, timeout=5_000):
            assert not write(str(fifo)), title
        assert window.last_error == f"cannot write {fifo}: it is not a regular file"


def test_an_export_has_the_properties_of_the_command_lines_traces(make_window, qtbot,
                                                                  tmp_path, capsys):
    """The same trace exported by the app and written by ``roadtracer trace``: the same
    properties with the same values, and the app's own besides."""
    from cli import main as cli_main

    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    wait_idle(qtbot, window)
    (exported,) = json.loads(path.read_text())["features"]
    assert cli_main(["trace", str(SAMPLE_IMAGE), "--a", f"{A[0]:g},{A[1]:g}",
                     "--b", f"{B[0]:g},{B[1]:g}", "--backend", "cpu", "--format", "geojson"]) == 0
    (traced,) = json.loads(capsys.readouterr().out)["features"]
    assert exported["geometry"] == traced["geometry"]
    properties = exported["properties"]
    assert {key: properties[key] for key in traced["properties"]} == traced["properties"]
    assert set(properties) - set(traced["properties"]) == {"name", "anchors", "length_px",
                                                          "segment_details"}


def test_session_save_and_load_round_trip(make_window, qtbot, tmp_path):
    window = make_window()
    window.params_panel.set_params(TraceParams(halfwidth=20.0, max_angle=25.0))
    window.controller.set_params(window.params_panel.params())
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click_and_wait(qtbot, window, C)
    window.model.rename(window.model.lines[0].id, "Ridge road")
    path = tmp_path / "work.roadtracer.json"
    assert window.write_session(str(path))
    assert not window.model.dirty

    other = make_window(open_sample=False)
    with qtbot.waitSignal(other.image_loaded, timeout=60_000):
        assert other.open_session(str(path))
    (saved,), (loaded,) = window.model.lines, other.model.lines
    assert (loaded.name, loaded.anchors) == ("Ridge road", saved.anchors)
    for a, b in zip(saved.segments, loaded.segments, strict=True):
        np.testing.assert_array_equal(a.polyline, b.polyline)
        assert a.params == b.params
    assert other.params_panel.params() == TraceParams(halfwidth=20.0, max_angle=25.0)
    assert other.controller.params == other.params_panel.params()  # traced as shown
    assert other.session_path == str(path)
    assert not other.model.dirty


@pytest.mark.parametrize(("field", "value", "named"), [
    ("image", 12345, "image must be a file path"),
    ("params", {"max_angle": 500}, "params.max_angle must be a number in [1, 180]"),
    ("params", {"guides": "many"}, "params.guides must be a whole number"),
    ("lines", [{"id": 1}], "lines[0].name is missing"),
])
def test_hostile_session_is_refused_and_the_app_stays_usable(make_window, qtbot, tmp_path,
                                                             field, value, named):
    """A session that fails validation is refused with a message box naming the field; the
    open image, its lines and the parameter panel stay as they were and keep working."""
    window = window_with_a_line(make_window, qtbot)
    window.controller.select(window.model.lines[0].id)
    path = tmp_path / "hostile.json"
    window.write_session(str(path))
    document = json.loads(path.read_text())
    document[field] = value
    path.write_text(json.dumps(document))
    with qtbot.waitSignal(window.error_shown, timeout=5_000):
        assert window.open_session(str(path))  # read in the worker, reported then
    assert named in window.last_error
    assert window.image_path == str(SAMPLE_IMAGE)
    assert len(window.model.lines) == 1
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):  # the selected line
        window.params_panel.max_angle.setValue(20.0)
    assert window.model.lines[0].segments[0].params.max_angle == 20.0


def test_params_panel_signals_survive_a_failing_update(qtbot):
    """Showing parameters blocks the fields' signals only while it runs, even if it fails."""
    panel = ParamsPanel()
    qtbot.addWidget(panel)
    with pytest.raises(TypeError):
        panel.set_params(TraceParams(guides="many"))
    with qtbot.waitSignal(panel.params_changed, timeout=5_000):
        panel.guides.setValue(7)


def test_autosave_brings_lines_back(make_window, qtbot):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.autosave()
    reopened = make_window()
    assert [line.anchors for line in reopened.model.lines] == [(A, B)]


def test_a_session_opened_over_unsaved_autosaved_lines_keeps_them(make_window, qtbot, tmp_path):
    """Lines autosaved but in no session (the app closed without asking, or crashed) are not
    overwritten when a session of the same image is opened: they are kept as a session."""
    window = window_with_a_line(make_window, qtbot)
    session = tmp_path / "one-line.json"
    window.write_session(str(session))
    click(qtbot, window, C)
    click_and_wait(qtbot, window, A)
    window.controller.finish()
    window.autosave()  # two lines autosaved, one of them in no session
    window.shutdown()  # gone without asking (its autosave is no longer its own)
    other = make_window(open_sample=False)
    with qtbot.waitSignal(other.image_loaded, timeout=60_000):
        assert other.open_session(str(session))
    assert len(other.model.lines) == 1
    kept = other.last_notice.split("kept in ")[1].split(": open it")[0]
    assert os.path.basename(kept).endswith(".kept.roadtracer.json")
    with qtbot.waitSignal(other.image_loaded, timeout=60_000):
        assert other.open_session(kept)
    assert [line.anchors for line in other.model.lines] == [(A, B), (C, A)]
    # The same lines as the session's: nothing to keep, no message.
    third = make_window(open_sample=False)
    with qtbot.waitSignal(third.image_loaded, timeout=60_000):
        assert third.open_session(kept)
    assert third.last_notice is None


def test_recent_files_and_first_start(make_window, qtbot, tmp_path):
    window = make_window(open_sample=False)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_initial(None)  # first start: the bundled sample
    assert window.image_path == str(SAMPLE_IMAGE)
    grey = tmp_path / "grey16.png"
    iio.imwrite(grey, (np.arange(64 * 48, dtype=np.uint16).reshape(48, 64) * 3))
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(grey))
    assert window.recent_files()[:2] == [str(grey), str(SAMPLE_IMAGE)]
    image = window.canvas._raster_item.levels[0].image
    assert (image.width(), image.height()) == (64, 48)
    assert image.pixelColor(0, 0).red() == 0
    assert image.pixelColor(63, 47).red() == 255


@pytest.mark.slow
def test_large_image_opens_without_freezing_the_window(make_window, qtbot, tmp_path,
                                                       monkeypatch):
    """A 10000 × 10000 RGB image is read and its display pyramid made off the GUI thread, and
    the event loop never stalls for long."""
    import app.main_window

    path = tmp_path / "large.tif"
    rng = np.random.default_rng(1)
    iio.imwrite(path, rng.integers(0, 255, (10_000, 10_000, 3), dtype=np.uint8))
    loaded_on = []
    real_load = app.main_window.load_for_display

    def load_for_display(image, **options):
        loaded_on.append(threading.current_thread())
        return real_load(image, **options)

    monkeypatch.setattr(app.main_window, "load_for_display", load_for_display)
    window = make_window(open_sample=False)
    ticks = []
    timer = QTimer(window, interval=20)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    with qtbot.waitSignal(window.image_loaded, timeout=120_000):
        window.open_image(str(path))
    window.canvas.viewport().repaint()
    qtbot.waitUntil(lambda: len(ticks) > 2 and time.perf_counter() - ticks[-1] < 0.1)
    timer.stop()
    gaps = np.diff(ticks)
    print(f"{len(ticks)} ticks, longest stall {1e3 * gaps.max():.0f} ms")
    assert len(loaded_on) == 1
    assert loaded_on[0] is not threading.main_thread()  # the whole read, in the worker
    # Measured: the longest stall 64 ms while the whole open takes 2.5 s (2 cores). The bound,
    # some 30× that, only catches a hang of the GUI thread, not a slow machine.
    assert gaps.max() < 2.0


def test_only_the_changed_line_is_redrawn(make_window, qtbot):
    """An edit of one line updates that line's item; the others' items are left alone."""
    window = make_window()
    click(qtbot, window, A)
    click(qtbot, window, B, Qt.KeyboardModifier.ShiftModifier)
    window.controller.finish()
    click(qtbot, window, C)
    click(qtbot, window, (C[0] + 30, C[1]), Qt.KeyboardModifier.ShiftModifier)
    window.controller.finish()
    first, second = window.model.lines
    items = dict(window.canvas.line_items)
    first_line_seen = items[first.id].line
    window.model.set_kind(second.id, "river")
    assert window.canvas.line_items == items  # the same item objects
    assert items[first.id].line is first_line_seen
    assert items[second.id].line is window.model.line(second.id)
    assert items[second.id].line.kind == "river"
    window.controller.select(first.id)
    assert (items[first.id].selected, items[second.id].selected) == (True, False)
    window.model.set_visible(first.id, False)
    assert set(window.canvas.line_items) == {second.id}


def test_lines_panel_rename_hide_kind_delete_with_undo(make_window, qtbot):
    window = window_with_a_line(make_window, qtbot)
    table, cells = window.lines_panel.table, window.lines_panel.table_model
    line_id = window.model.lines[0].id
    cells.setData(cells.index(0, 0), "Access road", Qt.ItemDataRole.EditRole)
    assert window.model.line(line_id).name == "Access road"
    cells.setData(cells.index(0, 0), Qt.CheckState.Unchecked, Qt.ItemDataRole.CheckStateRole)
    assert not window.model.line(line_id).visible
    assert window.canvas.line_items == {}
    assert window.model.line(line_id).segments[0].request.line_kind == "road"
    with qtbot.waitSignal(window.controller.traced, timeout=30_000):  # traced again, as water
        window.lines_panel._cell_double_clicked(0, 1)
    assert window.model.line(line_id).kind == "river"
    assert window.model.line(line_id).segments[0].request.line_kind == "river"
    assert window.model.undo_label == "Change kind"
    assert cells.index(0, 1).data() == "river"
    table.selectRow(0)
    assert window.controller.selection[0] == line_id
    window.lines_panel.delete_button.click()
    assert window.model.lines == ()
    for expected in (("river", False), ("road", False), ("road", True)):
        window.controller.undo()
        line = window.model.line(line_id)
        assert (line.kind, line.visible) == expected
    assert window.model.line(line_id).name == "Access road"


def test_clicking_a_vertex_starts_a_line_there_and_cancel_keeps_lines(make_window, qtbot,
                                                                        monkeypatch):
    window = window_with_a_line(make_window, qtbot)
    click(qtbot, window, (B[0] + 1, B[1]))  # within the grab radius of vertex B
    assert window.controller.tail == B
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *args, **kwargs: QMessageBox.StandardButton.Cancel)
    assert not window.open_image(str(SAMPLE_IMAGE))
    assert len(window.model.lines) == 1
    # Let the fixture's close go through (a cancelled close would leave the worker running).
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *args, **kwargs: QMessageBox.StandardButton.Discard)


def test_zoom_pan_fit_and_cursor_coordinates(make_window, qtbot):
    window = make_window()
    canvas, viewport = window.canvas, window.canvas.viewport()
    scale = canvas.transform().m11()
    under = QPointF(view_pos(window, A))
    wheel = QWheelEvent(under, canvas.mapToGlobal(under), QPoint(), QPoint(0, 240),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(viewport, wheel)
    assert canvas.transform().m11() == pytest.approx(scale * 1.0015 ** 240)
    after = canvas.mapToScene(under.toPoint())
    assert (after.x(), after.y()) == pytest.approx(A, abs=2)  # zoomed around the cursor
    centre = canvas.mapToScene(viewport.rect().center())
    qtbot.keyPress(canvas, Qt.Key.Key_Space)
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=viewport.rect().center())
    qtbot.mouseMove(viewport, viewport.rect().center() + QPoint(40, 0))
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton,
                       pos=viewport.rect().center() + QPoint(40, 0))
    qtbot.keyRelease(canvas, Qt.Key.Key_Space)
    assert canvas.mapToScene(viewport.rect().center()).x() < centre.x() - 10
    assert not window.controller.drawing  # panning never clicks
    canvas.fit()
    assert canvas.transform().m11() == pytest.approx(scale)
    # A world file's georeferencing: 1 m pixels, the image's top-left corner at (1000, 2000).
    window.raster.georef = Georef(Affine(1.0, 0.0, 1000.0, 0.0, -1.0, 2000.0), None, "test")
    qtbot.mouseMove(viewport, view_pos(window, (100, 50)))
    pixel, map_xy = window.cursor_label.text().split("  ·  map ")
    assert pixel == "x 100  y 50"
    assert [float(v) for v in map_xy.split(",")] == pytest.approx([1100.5, 1949.5], abs=0.5)


def test_dropping_a_file_opens_it(make_window, qtbot, tmp_path):
    window = make_window()
    grey = tmp_path / "grey.png"
    iio.imwrite(grey, np.full((30, 40), 128, dtype=np.uint8))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(grey))])
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.image_loaded, timeout=30_000):
        window.dropEvent(drop)
    assert (window.raster.width, window.raster.height) == (40, 30)


def test_dropping_geojson_lines_imports_them_on_the_open_image(make_window, qtbot, tmp_path):
    window = make_window()
    drawn = draw_line(qtbot, window, A, B)
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    window.controller.select(drawn.id)
    window.lines_panel.delete_selected()
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    window.dropEvent(QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                                Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))
    wait_idle(qtbot, window)
    (imported,) = window.model.lines
    assert imported.anchors == drawn.anchors


def drop_file(window, path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    window.dropEvent(QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                                Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))


def test_a_dropped_json_file_opens_as_what_it_holds(make_window, qtbot, tmp_path):
    """GeoJSON lines saved as .JSON are imported, a session's .JSON opens as a session (the
    suffix alone said 'session' for any .json, and an upper-case one opened as an image)."""
    window = make_window()
    drawn = draw_line(qtbot, window, A, B)
    lines, session = tmp_path / "LINES.JSON", tmp_path / "WORK.JSON"
    assert window.export_geojson(str(lines))
    assert window.write_session(str(session))
    wait_idle(qtbot, window)  # the export is written in the background
    window.controller.select(drawn.id)
    window.lines_panel.delete_selected()
    drop_file(window, lines)
    wait_idle(qtbot, window)
    (imported,) = window.model.lines
    assert imported.anchors == drawn.anchors
    window.model.mark_saved()
    with qtbot.waitSignal(window.image_loaded, timeout=30_000):
        drop_file(window, session)
    wait_idle(qtbot, window)
    assert window.session_path == str(session)
    assert [line.anchors for line in window.model.lines] == [drawn.anchors]


def test_an_export_edited_since_is_imported_as_drawn_and_says_so(make_window, qtbot, tmp_path):
    window = make_window()
    drawn = draw_line(qtbot, window, A, B)
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    wait_idle(qtbot, window)  # written in the background
    document = json.loads(path.read_text())
    vertices = document["features"][0]["geometry"]["coordinates"]
    middle = len(vertices) // 2
    vertices[middle] = [vertices[middle][0] + 15.0, vertices[middle][1] + 15.0]  # moved in QGIS
    path.write_text(json.dumps(document))
    window.controller.select(drawn.id)
    window.lines_panel.delete_selected()
    drop_file(window, path)
    wait_idle(qtbot, window)
    (imported,) = window.model.lines
    assert len(imported.anchors) == len(vertices)  # every vertex an anchor: as drawn
    assert any("1 edited line of lines.geojson: " in text for _, text in window.messages)


def test_run_app_opens_the_image_given_and_quits(qtbot, monkeypatch):
    opened = []
    close_the_window_once_loaded(opened, monkeypatch)
    assert run_app([str(SAMPLE_IMAGE)]) == 0
    assert opened == [str(SAMPLE_IMAGE)]


def test_asking_for_an_unavailable_gpu_falls_back_with_a_message(make_window, qtbot):
    window = make_window()
    with qtbot.waitSignal(window.controller.backend_changed, timeout=30_000) as blocker:
        window.params_panel.backend.setCurrentText("gpu")
    wait_idle(qtbot, window)
    if window.controller.backend.name == "gpu":
        pytest.skip("a GPU is available here")
    assert blocker.args[0].startswith("CPU")
    assert "gpu backend unavailable" in window.statusBar().currentMessage()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)


def test_tracing_on_an_evidence_raster(make_window, qtbot, tmp_path):
    window = make_window()
    # A probability map of the sample's size with a road where the image has none.
    path_line = np.array([[100.0, 520.0], [250.0, 470.0], [400.0, 480.0]])
    probability = road_image(path_line, size=(572, 572), width=8.0, noise=0.0,
                             colour=(1.0,) * 3, background=(0.0,) * 3).pixels[:, :, 0]
    evidence = tmp_path / "roads.png"
    iio.imwrite(evidence, np.round(255 * np.clip(probability, 0, 1)).astype(np.uint8))
    small = tmp_path / "small.png"
    iio.imwrite(small, np.zeros((100, 100), dtype=np.uint8))
    assert not window.set_evidence_raster(str(small))
    assert "100×100" in window.last_error
    classes = tmp_path / "classes.tif"  # a model's background and road bands
    write_bands(classes, np.stack([np.zeros((572, 572), np.uint8), np.full((572, 572), 255,
                                                                           np.uint8)]))
    assert not window.set_evidence_raster(str(classes))  # refused as chosen, not at a trace
    assert "has 2 bands that differ" in window.last_error
    assert window.params_panel.params().evidence_path is None
    with qtbot.waitSignal(window.params_panel.params_changed, timeout=5_000):
        assert window.set_evidence_raster(str(evidence))
        window.params_panel.score.setCurrentText("evidence")
    assert window.params_panel.evidence_label.text() == "roads.png"
    wait_idle(qtbot, window)  # the evidence's display pyramid
    assert window.show_evidence_action.isEnabled()
    window.show_evidence_action.setChecked(True)  # View ▸ Show evidence raster (E)
    shown = window.canvas._raster_item.levels[0].array
    assert shown[470, 250] == 0xFFFFFFFF  # on the map's road
    assert shown[300, 250] == 0xFF000000  # off it
    window.show_evidence_action.setChecked(False)
    assert window.canvas._raster_item.levels is window._image_levels
    click(qtbot, window, tuple(path_line[0]))
    click_and_wait(qtbot, window, tuple(path_line[-1]))
    segment = window.model.lines[0].segments[0]
    assert segment.params.evidence_path == str(evidence)
    assert distance(segment.polyline, path_line).max() <= 4.0  # on the 8 px road
    # Sessions keep it; one whose raster has gone opens on the image and says so.
    session = tmp_path / "work.roadtracer.json"
    assert window.write_session(str(session))
    other = make_window(open_sample=False)
    with qtbot.waitSignal(other.image_loaded, timeout=60_000):
        assert other.open_session(str(session))
    assert other.params_panel.params().evidence_path == str(evidence)
    evidence.rename(tmp_path / "moved.png")
    third = make_window(open_sample=False)
    with qtbot.waitSignal(third.image_loaded, timeout=60_000):
        assert third.open_session(str(session))
    assert third.params_panel.params().evidence_path is None
    assert "evidence raster not found" in third.last_error
    # Another image: the evidence belonged to the last one.
    with qtbot.waitSignal(window.params_panel.params_changed, timeout=60_000):
        window.open_image(str(SAMPLE_IMAGE))
    assert window.params_panel.params().evidence_path is None
    assert window.params_panel.evidence_label.text() == "the image"
    assert not window.show_evidence_action.isEnabled()


def test_status_names_the_bands_of_a_multispectral_image(make_window, qtbot, tmp_path):
    from rasterio.enums import ColorInterp as Tag

    from tests.test_raster import write_bands

    window = make_window(open_sample=False)
    path = tmp_path / "stack.tif"
    planes = np.random.default_rng(0).integers(0, 255, (6, 40, 50), dtype=np.uint8)
    write_bands(path, planes, [Tag.gray, Tag.blue, Tag.green, Tag.red] + [Tag.undefined] * 2)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(path))
    assert "tracing bands 4, 3, 2 of 6 (red, green, blue)" in (
        window.statusBar().currentMessage())


def draw_line(qtbot, window, *points):
    """Click the points (the first starts a line), wait for each trace, finish; the new line."""
    click(qtbot, window, points[0])
    for point in points[1:]:
        click_and_wait(qtbot, window, point)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    return window.model.lines[-1]


def import_and_wait(qtbot, window, path) -> None:
    """Import lines from ``path`` and wait until every line has been traced."""
    assert window.import_lines(str(path))
    wait_idle(qtbot, window)


def test_exported_lines_import_as_drawn(make_window, qtbot, tmp_path):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    click(qtbot, window, C, Qt.KeyboardModifier.ControlModifier)  # a straight segment
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    window.model.rename(window.model.lines[0].id, "Ridge road")
    (drawn,) = window.model.lines
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    window.controller.select(drawn.id)
    window.lines_panel.delete_selected()
    assert window.model.lines == ()
    import_and_wait(qtbot, window, path)
    (imported,) = window.model.lines
    assert (imported.name, imported.kind, imported.anchors) == ("Ridge road", "road",
                                                                drawn.anchors)
    # Traced again with the same parameters: the same line (the straight one straight).
    np.testing.assert_allclose(imported.segments[0].polyline, drawn.segments[0].polyline)
    assert imported.segments[1].is_straight
    np.testing.assert_array_equal(imported.segments[1].polyline, drawn.segments[1].polyline)
    assert "imported 1 line, 2 segments from lines.geojson" in (
        window.statusBar().currentMessage())
    window.controller.undo()  # one undo step takes the whole import back
    assert window.model.lines == ()


def test_foreign_lines_snap_to_the_road(make_window, qtbot, tmp_path):
    window = make_window()
    gt = np.array(CASE["gt"])
    rough = gt[[0, len(gt) // 2, -1]] + [[0.0, 0.0], [4.0, -3.0], [0.0, 0.0]]  # off the middle
    path = tmp_path / "survey.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "coordinate_space": "pixel",
                                "features": [
        {"type": "Feature", "properties": {"name": "old survey", "kind": "river"},
         "geometry": {"type": "LineString", "coordinates": rough.tolist()}},
        {"type": "Feature", "properties": {"image": "other.png"},
         "geometry": {"type": "LineString", "coordinates": rough.tolist()}},
        {"type": "Feature", "properties": {},
         "geometry": {"type": "Point", "coordinates": [10, 10]}}]}))
    import_and_wait(qtbot, window, path)
    (line,) = window.model.lines
    assert (line.name, line.kind, len(line.anchors)) == ("old survey", "river", 3)
    assert {segment.request.line_kind for segment in line.segments} == {"river"}
    distances = distance(line.polyline, gt)
    assert distances.mean() < 3.0, distances
    message = window.statusBar().currentMessage()
    assert "imported 1 line, 2 segments from survey.geojson; 2 features skipped (feature 2: " \
           "properties.image names another image (other.png))" in message
    # Parameters no path satisfies: the segments stay straight, and the status says why.
    window.controller.params = TraceParams(max_angle=1, points=2, guides=3, halfwidth=30)
    import_and_wait(qtbot, window, path)
    assert all(segment.is_straight for segment in window.model.lines[-1].segments)
    assert "2 segments kept straight (no polyline" in window.statusBar().currentMessage()


def test_import_errors(make_window, qtbot, tmp_path):
    window = make_window()
    bad = tmp_path / "bad.geojson"
    bad.write_text("{not json")
    with qtbot.waitSignal(window.error_shown, timeout=10_000):
        assert window.import_lines(str(bad))  # the reading starts; its error follows
    assert "bad.geojson" in window.last_error
    lonlat = tmp_path / "lonlat.geojson"
    lonlat.write_text(json.dumps({"type": "LineString", "coordinates": [[139.1, 35.2],
                                                                         [139.2, 35.3]]}))
    with qtbot.waitSignal(window.error_shown, timeout=10_000):
        assert window.import_lines(str(lonlat))
    assert window.last_error == ("no line of lonlat.geojson lies on this image: feature 1: map "
                                 "coordinates, but the image has no georeferencing with a CRS "
                                 "(lines in pixels come from an image without one)")
    assert window.model.lines == ()


def test_next_and_previous_image_in_folder(make_window, qtbot, tmp_path):
    rgb = iio.imread(SAMPLE_IMAGE)[:, :, :3]
    for name in ("a.png", "b.jpg", "c.png"):
        iio.imwrite(tmp_path / name, rgb)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "notes.txt.d").mkdir()
    window = make_window(open_sample=False)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_initial(str(tmp_path))  # a folder opens its first image
    assert window.image_path == str(tmp_path / "a.png")
    for key, expected in ((Qt.Key.Key_PageDown, "b.jpg"), (Qt.Key.Key_PageDown, "c.png"),
                          (Qt.Key.Key_PageUp, "b.jpg")):
        with qtbot.waitSignal(window.image_loaded, timeout=60_000):
            qtbot.keyClick(window.canvas, key)
        assert window.image_path == str(tmp_path / expected)
    window.step_image(-1)
    wait_idle(qtbot, window)
    assert not window.step_image(-1)  # a.png is the first
    assert window.statusBar().currentMessage() == f"no previous image in {tmp_path}"
    with qtbot.waitSignal(window.error_shown, timeout=10_000):
        window.open_initial(str(tmp_path / "notes.txt.d"))
    assert window.last_error == f"no image (PNG, JPEG, TIFF) in the folder {tmp_path}/notes.txt.d"
    # The open image's folder gone (unmounted, removed): PgDown says so, nothing breaks.
    shutil.rmtree(tmp_path)
    assert not window.step_image(1)
    assert window.statusBar().currentMessage().startswith("cannot list the folder")
    assert window.image_path == str(tmp_path / "a.png")


def test_a_session_whose_image_cannot_open_changes_nothing(make_window, qtbot, tmp_path,
                                                           monkeypatch):
    """The session's backend, parameters and lines are installed only with its image (not
    found, and not located either)."""
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args, **kwargs: ("", ""))
    window = window_with_a_line(make_window, qtbot)
    saved = tmp_path / "saved.json"
    window.write_session(str(saved))
    path = tmp_path / "moved.json"
    document = json.loads(saved.read_text())
    document["image"] = str(tmp_path / "gone.png")
    document["image_relative"] = "gone.png"
    document["backend"] = "cpu" if window.params_panel.backend.currentText() != "cpu" else "auto"
    document["params"]["max_angle"] = 20.0
    path.write_text(json.dumps(document))
    before = (window.params_panel.backend.currentText(), window.params_panel.params())
    with qtbot.waitSignal(window.error_shown, timeout=30_000):
        window.open_session(str(path))
    assert "not found" in window.last_error
    assert (window.params_panel.backend.currentText(), window.params_panel.params()) == before
    assert window.image_path == str(SAMPLE_IMAGE)
    assert len(window.model.lines) == 1
    assert window.session_path == str(saved)


def test_export_in_the_image_crs_and_import_back(make_window, qtbot, tmp_path, monkeypatch):
    from tests.test_georef import write_geotiff

    image = tmp_path / "utm.tif"
    write_geotiff(image, iio.imread(SAMPLE_IMAGE)[:, :, :3])
    window = make_window(open_sample=False)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(image))
    drawn = draw_line(qtbot, window, A, B)
    path = tmp_path / "utm.geojson"
    # File ▸ Export GeoJSON, the dialog's "image's own CRS" file type chosen.
    from app.main_window import EXPORT_SOURCE

    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *args, **kwargs: (str(path), EXPORT_SOURCE))
    window.choose_export()
    wait_idle(qtbot, window)
    document = json.loads(path.read_text())
    assert document["coordinate_space"] == "source"
    assert document["crs"]["properties"]["name"] == "urn:ogc:def:crs:EPSG::32654"
    coordinates = np.array(document["features"][0]["geometry"]["coordinates"])
    np.testing.assert_allclose(coordinates, window.raster.georef.pixel_to_map(drawn.polyline),
                               atol=1e-3)
    window.controller.select(drawn.id)
    window.lines_panel.delete_selected()
    # File ▸ Import lines: the dialog offers this image's <stem>.geojson.
    offered = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda parent, caption, start, *rest: offered.append(start)
                        or (str(path), ""))
    window.choose_import()
    wait_idle(qtbot, window)
    assert offered == [str(path)]
    (imported,) = window.model.lines
    assert imported.anchors == drawn.anchors
    np.testing.assert_allclose(imported.polyline, drawn.polyline)


def test_esc_cancels_an_import(make_window, qtbot, tmp_path):
    window = make_window()
    gt = np.array(CASE["gt"])
    path = tmp_path / "many.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "coordinate_space": "pixel",
                                "features": [
        {"type": "Feature", "properties": {},
         "geometry": {"type": "LineString", "coordinates": (gt[[0, -1]] + k).tolist()}}
        for k in range(8)]}))
    assert window.import_lines(str(path))
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    wait_idle(qtbot, window)
    assert window.model.lines == ()
    assert window.statusBar().currentMessage() == "import cancelled: no line added"
    # A later import is not affected.
    import_and_wait(qtbot, window, path)
    assert len(window.model.lines) == 8


def test_clicks_on_a_line_make_exact_junctions(make_window, qtbot):
    window = make_window()
    road = draw_line(qtbot, window, A, B)
    middle = road.polyline[len(road.polyline) // 2]
    normal = np.array([1.0, 1.0]) / np.sqrt(2)
    # A branch from elsewhere towards a little off the road's middle: the preview and the
    # line end on the road.
    start = (350.0, 300.0)
    click(qtbot, window, start)
    qtbot.mouseMove(window.canvas.viewport(), view_pos(window, tuple(middle + 1.5 * normal)))
    qtbot.waitUntil(lambda: window.controller.preview is not None, timeout=30_000)
    end = window.controller.preview.polyline[-1]
    assert distance([end], road.polyline)[0] < 1e-9
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    branch = draw_line(qtbot, window, start, tuple(middle + 1.5 * normal))
    assert branch.anchors[0] == start
    assert distance([branch.anchors[-1]], road.polyline)[0] < 1e-9
    np.testing.assert_allclose(branch.polyline[-1], branch.anchors[-1])
    # A line started a little off the road starts on it; one ended near B ends exactly at B.
    click(qtbot, window, tuple(middle - 1.5 * normal))
    click_and_wait(qtbot, window, (B[0] + 1.0, B[1] + 1.0))
    spur = window.model.lines[-1]
    assert distance([spur.anchors[0]], road.polyline)[0] < 1e-9
    assert spur.anchors[-1] == B
    qtbot.keyClick(window.canvas, Qt.Key.Key_Return)
    # A vertex dragged and dropped near the road lands on it.
    lone = draw_line(qtbot, window, (300.0, 330.0), (360.0, 340.0))
    drag_and_wait(qtbot, window, lone.anchors[-1], tuple(middle + 1.5 * normal))
    moved = window.model.line(lone.id)
    assert distance([moved.anchors[-1]], road.polyline)[0] < 1e-9


def test_a_river_is_traced_as_water(make_window, qtbot):
    window = make_window()
    window.lines_panel.new_kind.setCurrentText("river")
    river = draw_line(qtbot, window, A, B)
    assert river.kind == "river"
    assert river.segments[0].request.line_kind == "river"
    window.lines_panel.new_kind.setCurrentText("road")
    road = draw_line(qtbot, window, (350.0, 300.0), (400.0, 330.0))
    assert road.segments[0].request.line_kind == "road"


def test_bulk_jobs_wait_behind_clicks_and_previews(qtbot):
    from app.jobs import Job, JobQueue

    queue = JobQueue()
    order = []

    def job(name, **kind):
        return Job(lambda: time.sleep(0.02) or name, order.append, lambda exc: None, **kind)

    with qtbot.waitSignal(queue.idle, timeout=10_000):
        for name in ("bulk 1", "bulk 2", "bulk 3"):
            queue.submit(job(name, bulk=True))  # bulk 1 starts at once
        queue.submit(job("preview", preview=True))
        queue.submit(job("click"))
    assert order == ["bulk 1", "click", "preview", "bulk 2", "bulk 3"]
    assert queue.shutdown(1000)


def test_emitting_python_signals_keeps_the_references_of_true_and_false():
    """Some Qt bindings (PySide6 6.12.0) drop a reference to True or False at every emit of a
    Python signal carrying one; the app emits such values all the time, and on Python 3.11 the
    process then aborts ("bool_dealloc"). pyproject.toml excludes that release."""
    from PySide6.QtCore import QObject, Signal

    class Emitter(QObject):
        value = Signal(object)

    emitter = Emitter()
    received = []
    emitter.value.connect(received.append)
    before = sys.getrefcount(True), sys.getrefcount(False)
    for _ in range(50):
        emitter.value.emit((True, False))
        emitter.value.emit(True)
    received.clear()
    assert (sys.getrefcount(True), sys.getrefcount(False)) == before


def test_params_panel_shows_and_gives_the_ground_resolution(qtbot):
    panel = ParamsPanel()
    qtbot.addWidget(panel)
    assert panel.params().ground_resolution is None  # auto: from the georeferencing
    panel.set_params(TraceParams(ground_resolution=0.5))
    assert panel.ground.value() == 0.5
    assert panel.params().ground_resolution == 0.5
    with qtbot.waitSignal(panel.params_changed, timeout=5_000) as changed:
        panel.ground.setValue(0.0)
    assert changed.args[0].ground_resolution is None


def test_opening_an_image_of_unknown_ground_resolution_says_so(make_window, qtbot):
    window = make_window(open_sample=False)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(SAMPLE_IMAGE))  # a PNG: no georeferencing
    assert "ground resolution unknown" in window.statusBar().currentMessage()
    window.params_panel.ground.setValue(0.2)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(SAMPLE_IMAGE))
    assert "ground resolution" not in window.statusBar().currentMessage()


def test_file_menu_exports_the_road_lines_as_training_cases(make_window, qtbot, tmp_path):
    window = window_with_a_line(make_window, qtbot)
    out = tmp_path / "teach"
    assert window.export_training_cases(str(out))
    cases = json.loads((out / "cases.json").read_text())
    sources = json.loads((out / "sources.json").read_text())
    assert [source["id"] for source in sources] == ["gsi_108"]
    assert "gt" not in sources[0]
    assert len(cases) >= 1
    assert all(case["meta"]["source"] == "gsi_108" for case in cases)
    corner = np.array(sources[0]["offset_xy"])
    line = window.model.lines[0].polyline
    assert np.all(distance(np.array(cases[0]["gt"]) + corner, line) < 0.01)  # on it (rounded)
    assert (out / "images" / "gsi_108.png").is_file()
    assert window.statusBar().currentMessage() == \
        f"{len(cases)} training case{'s' if len(cases) > 1 else ''} written to {out}"
    # A folder that holds files already is refused, and left as it was.
    assert not window.export_training_cases(str(out))
    assert "new or empty folder" in window.last_error
    assert sorted(path.name for path in out.iterdir()) == ["cases.json", "images", "sources.json"]


def test_training_cases_need_a_road_line_long_enough(make_window, tmp_path):
    window = make_window()
    assert not window.export_training_cases(str(tmp_path / "teach"))
    assert "no road line of 60 px or more" in window.last_error
    assert not (tmp_path / "teach").exists()
