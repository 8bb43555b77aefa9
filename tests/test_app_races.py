"""Work asked for while other work is in flight: an export before closing, an open while a
segment is traced, a surface model changed under a preview, an undo after a delete while a
drag is re-traced, jobs that fail in unusual ways, and a trace still running at exit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading

from PySide6.QtWidgets import QMessageBox

from app.jobs import Job, JobQueue
from app.session import load_session
from core import surface
from tests import test_app, test_app_retrace_races
from tests.conftest import ROOT, SAMPLE_IMAGE
from tests.test_app import A, B, C, click, click_and_wait, wait_idle
from tests.test_app_retrace_races import drag, draw, redo_labels, wait_held

make_window = test_app.make_window  # the fixtures: windows closed, their workers stopped
held = test_app_retrace_races.held


def test_an_export_asked_for_before_closing_is_written_before_the_window_closes(
        make_window, qtbot, held, tmp_path):
    window = make_window()
    draw(qtbot, window, A, B)
    window.model.mark_saved()  # closing asks nothing
    held.hold()
    click(qtbot, window, C)
    window.controller.hover((C[0] + 40, C[1] + 30))
    wait_held(qtbot, held)  # a preview runs: the export waits behind it
    out = tmp_path / "out.geojson"
    assert window.export_geojson(str(out))
    window.close()
    assert window.isVisible()
    assert window.status_text == "closing once the export in progress is written"
    held.open()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=30_000)
    assert out.is_file()


#: Runs the application on the sample; once it is open, a detachable job sleeps ``SLEEP`` s
#: on the trace thread, then writes ``DONE``; the window closes while it sleeps and the
#: application exits with code 3; the process waits ``WAIT`` s at most for the job.
EXITING_WHILE_TRACING = textwrap.dedent("""
    import os, sys, time
    from PySide6.QtCore import QStandardPaths, QTimer
    from PySide6.QtWidgets import QApplication
    from app import main_window
    from app.jobs import Job

    QStandardPaths.setTestModeEnabled(True)
    main_window.EXIT_TRACE_WAIT_S = float(os.environ["WAIT"])
    app = QApplication([])

    def slow():
        time.sleep(float(os.environ["SLEEP"]))
        open(os.environ["DONE"], "w").close()

    def close_while_it_runs(window):
        window.jobs.submit(Job(slow, lambda _: None, lambda _: None, detachable=True))
        QTimer.singleShot(200, window.close)
        QTimer.singleShot(200, lambda: app.exit(3))

    def watch():
        (window,) = [widget for widget in app.topLevelWidgets()
                     if isinstance(widget, main_window.MainWindow)]
        window.image_loaded.connect(lambda _: close_while_it_runs(window))

    QTimer.singleShot(0, watch)
    print("starting", flush=True)
    sys.exit(main_window.run_app([os.environ["IMAGE"]]))
""")


def exit_while_tracing(tmp_path, sleep_s: float, wait_s: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "SLEEP": str(sleep_s), "WAIT": str(wait_s), "DONE": str(tmp_path / "done"),
           "IMAGE": str(SAMPLE_IMAGE)}
    return subprocess.run([sys.executable, "-c", EXITING_WHILE_TRACING], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_trace_running_at_exit_is_waited_for(tmp_path):
    result = exit_while_tracing(tmp_path, sleep_s=1.0, wait_s=30.0)
    assert result.returncode == 3, result.stderr
    assert (tmp_path / "done").exists()  # the engine was not torn down under it


def test_a_trace_running_too_long_at_exit_ends_the_process_with_its_exit_code(tmp_path):
    result = exit_while_tracing(tmp_path, sleep_s=60.0, wait_s=0.2)
    assert result.returncode == 3, result.stderr
    assert "starting" in result.stdout
    assert not (tmp_path / "done").exists()


def other_surface_model(tmp_path, monkeypatch):
    """A copy of the bundled surface model; the one in use is restored after the test."""
    monkeypatch.setattr(surface, "MODEL_PATH", surface.MODEL_PATH)
    monkeypatch.setenv(surface.MODEL_VARIABLE, "")
    monkeypatch.delenv(surface.MODEL_VARIABLE)
    other = tmp_path / "other.onnx"
    shutil.copy(surface.BUNDLED_MODEL, other)
    return str(other)


def test_a_click_after_a_new_surface_model_does_not_take_the_preview_shown(
        make_window, qtbot, tmp_path, monkeypatch):
    window = make_window()
    click(qtbot, window, A)
    window.controller.hover(B)
    qtbot.waitUntil(lambda: window.controller.preview is not None, timeout=30_000)
    wait_idle(qtbot, window)
    old_preview = window.controller.preview
    assert window.set_surface_model(other_surface_model(tmp_path, monkeypatch))
    started = []
    window.jobs.started.connect(started.append)
    click_and_wait(qtbot, window, B)
    assert any(not job.preview for job in started)
    assert window.model.lines[-1].segments[-1] is not old_preview


def test_a_click_after_a_new_surface_model_does_not_wait_for_the_preview_running(
        make_window, qtbot, held, tmp_path, monkeypatch):
    window = make_window()
    click(qtbot, window, A)
    held.hold()
    window.controller.hover(B)
    wait_held(qtbot, held)  # the preview to B runs, with the bundled model
    assert window.set_surface_model(other_surface_model(tmp_path, monkeypatch))
    started = []
    window.jobs.started.connect(started.append)
    click(qtbot, window, B)
    held.open()
    wait_idle(qtbot, window)
    assert any(not job.preview for job in started)
    assert window.controller.preview is None or window.controller.tail != A


def test_an_undo_after_a_delete_is_not_taken_by_a_drag_lost_meanwhile(make_window, qtbot, held):
    window = make_window()
    line = draw(qtbot, window, A, B, C)
    held.hold()
    drag(qtbot, window, B, (B[0] + 6, B[1] + 4))
    wait_held(qtbot, held)
    window.controller.select(line.id)
    window.lines_panel.delete_selected()
    window.controller.undo()  # of the delete, once the drag's turn is over
    held.open()
    wait_idle(qtbot, window)
    assert [kept.anchors for kept in window.model.lines] == [line.anchors]
    assert redo_labels(window.model) == ["Delete line"]


def test_opening_an_image_while_a_segment_is_traced_waits_for_it(
        make_window, qtbot, held, tmp_path, monkeypatch):
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    session = str(tmp_path / "lines.roadtracer.json")
    assert window.write_session(session)
    held.hold()
    click(qtbot, window, C)
    wait_held(qtbot, held)
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *args, **kwargs: QMessageBox.StandardButton.Save)
    assert window.open_image(str(SAMPLE_IMAGE))
    said = window.status_text
    with qtbot.waitSignal(window.image_loaded, timeout=30_000):
        held.open()
    wait_idle(qtbot, window)
    assert load_session(session).lines[0].anchors == (A, B, C)  # saved once it landed
    assert not window.model.dirty
    assert said.startswith("opening gsi_108.png once the trace in progress lands")


def run_jobs(qtbot, queue: JobQueue, *jobs: Job) -> None:
    for job in jobs:
        queue.submit(job)
    qtbot.waitUntil(lambda: queue.running is None and not queue.pending, timeout=10_000)


def test_a_job_raising_system_exit_fails_and_the_queue_goes_on(qtbot):
    queue, got = JobQueue(), []

    def leave():
        raise SystemExit(3)

    run_jobs(qtbot, queue,
             Job(leave, lambda result: got.append(("done", result)), got.append),
             Job(lambda: 42, lambda result: got.append(("done", result)), got.append))
    assert [type(item) for item in got] == [SystemExit, tuple]
    assert got[1] == ("done", 42)
    assert queue.shutdown(1000)


def test_an_exception_in_done_goes_to_failed_and_the_followers_and_next_job_go_on(
        qtbot, monkeypatch):
    queue, got, reported = JobQueue(), [], []
    monkeypatch.setattr(sys, "excepthook", lambda *info: reported.append(info[1]))
    let_go = threading.Event()

    def done(result):
        raise ValueError(f"bad result {result}")

    def failed(exc):
        got.append(exc)
        raise KeyError("failed failed")

    queue.submit(Job(lambda: let_go.wait(10) and 1, done, failed, key="k"))
    assert queue.follow("k", lambda result: got.append(("follower", result)), got.append)
    let_go.set()
    run_jobs(qtbot, queue, Job(lambda: 2, lambda result: got.append(("next", result)),
                               got.append))
    assert [str(item) for item in got] == ["bad result 1", "('follower', 1)", "('next', 2)"]
    assert [type(exc) for exc in reported] == [KeyError]
    assert queue.shutdown(1000)
