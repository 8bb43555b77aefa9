"""Sessions with many lines and more than one window: autosaves written off the window's thread
(the newest lines last, one write at a time), sessions read and lines exported in the worker,
a session file changed on disk or an image open in two windows, an image moved or resized
since its lines were drawn, and closing while a segment is traced.

The work in question is held in its thread (:class:`Held`) until the test lets it go, so that
"while it runs" does not depend on timing."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import json
import shutil
import threading

import imageio.v3 as iio
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

import app.files
import app.main_window
import app.traces
from app.files import autosave_path
from app.model import Line, Segment
from app.session import read_session, write_session
from core.tracer import TraceParams
from tests import test_app
from tests.conftest import SAMPLE_IMAGE
from tests.test_app import A, B, click, wait_idle
from tests.test_app_folder_walk import ON_A, autosaved, draw_straight

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped

Save = QMessageBox.StandardButton.Save
Cancel = QMessageBox.StandardButton.Cancel
SHIFT = Qt.KeyboardModifier.ShiftModifier
# Straight lines (Shift + click): drawn at once, no trace to wait for.
LINES = (((100.0, 450.0), (200.0, 380.0)), ((300.0, 100.0), (350.0, 150.0)),
         ((50.0, 50.0), (80.0, 120.0)), ((400.0, 400.0), (450.0, 420.0)))


class Held:
    """A function as the window calls it: off the window's thread, each call waits while
    :meth:`hold` is in force (until :meth:`release`); on it, it runs at once (waiting there
    would freeze the test), and ``on_window_thread`` says so."""

    def __init__(self, real) -> None:
        self.real = real
        self.go = threading.Event()
        self.go.set()
        self.on_window_thread: list[bool] = []  # for every call
        self.waiting = 0  # calls held now
        self.running = 0  # calls in progress now
        self.most_running = 0

    def hold(self) -> None:
        self.go.clear()

    def release(self) -> None:
        self.go.set()

    def __call__(self, *args, **kwargs):
        window_thread = threading.current_thread() is threading.main_thread()
        self.on_window_thread.append(window_thread)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if not window_thread:
                self.waiting += 1
                assert self.go.wait(30)
                self.waiting -= 1
            return self.real(*args, **kwargs)
        finally:
            self.running -= 1


@pytest.fixture
def held(make_window, monkeypatch):
    """``held(module, name)``: that function of the module, :class:`Held`; all let go before
    the windows close."""
    made: list[Held] = []

    def hold(module, name: str) -> Held:
        function = Held(getattr(module, name))
        monkeypatch.setattr(module, name, function)
        made.append(function)
        return function

    yield hold
    for function in made:
        function.release()


class Answers(list):
    """Answers queued for ``QMessageBox.question``; ``asked``: the text of every question."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []


@pytest.fixture
def questions(make_window, monkeypatch) -> Answers:
    """The answers to ``QMessageBox.question``, used in order (Cancel once they run out)."""
    answers = Answers()

    def question(parent, title, text, *args, **kwargs):
        answers.asked.append(text)
        return answers.pop(0) if answers else Cancel

    monkeypatch.setattr(QMessageBox, "question", question)
    return answers


def open_session_and_wait(qtbot, window, path) -> None:
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        assert window.open_session(str(path))
    wait_idle(qtbot, window)


# ------------------------------------------------------------------------------------ autosave
def test_the_timers_autosave_is_written_off_the_window_thread_newest_last(
        make_window, qtbot, held, monkeypatch):
    monkeypatch.setattr(app.main_window, "AUTOSAVE_DELAY_MS", 10)
    window = make_window()
    qtbot.waitUntil(lambda: os.path.exists(autosave_path(window.autosave_dir,
                                                         str(SAMPLE_IMAGE))), timeout=10_000)
    qtbot.wait(50)  # the autosave of the image opened (no lines) is done
    writes = held(app.files, "write_autosave")
    writes.hold()
    draw_straight(qtbot, window, LINES[0])
    qtbot.waitUntil(lambda: writes.waiting == 1, timeout=10_000)  # the window goes on
    draw_straight(qtbot, window, LINES[1])
    qtbot.wait(50)  # the timer's autosave waits for the write in progress...
    draw_straight(qtbot, window, LINES[2])
    qtbot.wait(50)  # ... and is replaced by a newer one
    writes.release()
    qtbot.waitUntil(lambda: len(writes.on_window_thread) == 2 and not writes.running,
                    timeout=10_000)
    assert writes.on_window_thread == [False, False]
    assert autosaved(window, SAMPLE_IMAGE) == list(LINES[:3])  # the middle state was never written
    # Flushing (closing, another image) while a write is in progress waits for it, then
    # writes the newest lines: never two writes at once, never an older one last.
    writes.hold()
    draw_straight(qtbot, window, LINES[3])
    qtbot.waitUntil(lambda: writes.waiting == 1, timeout=10_000)
    model_lines = window.model.lines
    window.model.delete(model_lines[0].id)
    threading.Timer(0.2, writes.release).start()
    window.autosave()
    assert writes.most_running == 1
    assert autosaved(window, SAMPLE_IMAGE) == list(LINES[1:])


# ------------------------------------------------------------------------------ opening sessions
def test_a_session_and_its_images_autosave_are_read_off_the_window_thread(
        make_window, qtbot, tmp_path, held):
    window = make_window()
    draw_straight(qtbot, window, LINES[0])
    session = tmp_path / "work.roadtracer.json"
    assert window.write_session(str(session))
    window.shutdown()  # gone without asking: its autosave stays
    reads = held(app.main_window, "load_session")
    autosave_reads = held(app.main_window, "load_autosave")
    other = make_window(open_sample=False)
    reads.hold()
    assert other.open_session(str(session))  # returns while the file is read
    qtbot.waitUntil(lambda: reads.waiting == 1, timeout=10_000)
    assert other.status_text == f"opening {session}…"
    with qtbot.waitSignal(other.image_loaded, timeout=60_000):
        reads.release()
    assert reads.on_window_thread == autosave_reads.on_window_thread == [False]
    assert [line.anchors for line in other.model.lines] == [LINES[0]]
    assert other.session_path == str(session)
    assert other.last_notice is None  # the autosave holds the same lines: nothing kept


def test_showing_a_session_read_works_out_no_segment_length_again(make_window, qtbot,
                                                                  tmp_path, monkeypatch):
    """A segment's length is worked out where the segment is made (the worker reading the
    session), not again on the window's thread when the lines panel shows it (at 10 000
    lines, a second of the window's time)."""
    lines = tuple(Line(k, f"Road {k}", "road", anchors, (Segment.straight(*anchors),))
                  for k, anchors in enumerate(LINES, 1))
    session = tmp_path / "work.roadtracer.json"
    write_session(session, str(SAMPLE_IMAGE), lines, TraceParams(), "auto")
    on_window_thread = []
    real = Segment.link_lengths
    monkeypatch.setattr(Segment, "link_lengths", property(lambda segment: on_window_thread.append(
        threading.current_thread() is threading.main_thread()) or real.fget(segment)))
    window = make_window(open_sample=False)
    open_session_and_wait(qtbot, window, session)
    assert [line.length for line in window.model.lines] == [line.length for line in lines]
    assert len(on_window_thread) == len(LINES)
    assert not any(on_window_thread)


def test_a_session_that_cannot_be_read_is_reported_once_read(make_window, qtbot, tmp_path):
    window = make_window()
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with qtbot.waitSignal(window.error_shown, timeout=10_000):
        assert window.open_session(str(bad))
    assert window.last_error.startswith(f"session {bad} is not JSON")
    assert window.image_path == str(SAMPLE_IMAGE)


# ------------------------------------------------------------------------- two windows, one file
def test_saving_over_a_session_changed_on_disk_asks_first(make_window, qtbot, tmp_path,
                                                          questions):
    first = make_window()
    draw_straight(qtbot, first, LINES[0])
    session = tmp_path / "shared.roadtracer.json"
    assert first.write_session(str(session))
    second = make_window(open_sample=False)
    open_session_and_wait(qtbot, second, session)
    draw_straight(qtbot, first, LINES[1])
    assert first.save_session()  # unchanged since it saved it: nothing asked
    draw_straight(qtbot, second, LINES[2])
    assert not second.save_session()  # Cancel
    assert "changed on disk since this window read or saved it" in questions.asked[0]
    assert [line.anchors for line in read_session(session)[1]] == list(LINES[:2])
    assert second.model.dirty
    questions.append(Save)
    assert second.save_session()
    assert [line.anchors for line in read_session(session)[1]] == [LINES[0], LINES[2]]
    assert second.save_session()  # its own save: nothing asked
    assert len(questions.asked) == 2


def test_a_second_window_on_an_image_neither_autosaves_nor_discards_its_autosave(
        make_window, qtbot, tmp_path):
    first = make_window()
    draw_straight(qtbot, first, LINES[0])
    first.autosave()
    second = make_window()  # its lines are the first window's autosave, read
    assert [line.anchors for line in second.model.lines] == [LINES[0]]
    assert "also open in another roadtracer window: not autosaved here" in \
        second.status_text
    draw_straight(qtbot, second, LINES[1])
    second.autosave()
    assert autosaved(first, SAMPLE_IMAGE) == [LINES[0]]
    other = tmp_path / "other.png"
    shutil.copy(SAMPLE_IMAGE, other)
    with qtbot.waitSignal(second.image_loaded, timeout=60_000):
        second.open_image(str(other))  # its lines discarded (the fixture's answer)
    assert autosaved(first, SAMPLE_IMAGE) == [LINES[0]]
    first.shutdown()  # gone: its autosave is free
    third = make_window()
    assert "another roadtracer window" not in third.status_text
    draw_straight(qtbot, third, LINES[2])
    third.autosave()
    assert autosaved(third, SAMPLE_IMAGE) == [LINES[0], LINES[2]]


# ------------------------------------------------------------------------------------ exporting
def test_export_runs_in_the_worker_and_says_so(make_window, qtbot, tmp_path, held):
    window = make_window()
    draw_straight(qtbot, window, LINES[0])
    exports = held(app.main_window, "export_lines")
    exports.hold()
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    qtbot.waitUntil(lambda: exports.waiting == 1, timeout=10_000)
    assert window.status_text == f"exporting 1 line to {path}…"
    exports.release()
    wait_idle(qtbot, window)
    assert exports.on_window_thread == [False]
    assert len(json.loads(path.read_text())["features"]) == 1
    assert window.status_text.startswith(f"exported 1 line to {path} in pixel coordinates")


# ------------------------------------------------------------------------ image moved or resized
@pytest.fixture
def saved_on_a_copy(make_window, qtbot, tmp_path):
    """(window, image, session): a line drawn on a copy of the sample, saved in a session of
    another folder; the window gone."""
    image = tmp_path / "images" / "photo.png"
    image.parent.mkdir()
    shutil.copy(SAMPLE_IMAGE, image)
    window = make_window(open_sample=False)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        window.open_image(str(image))
    draw_straight(qtbot, window, LINES[0])
    session = tmp_path / "sessions" / "s.roadtracer.json"
    session.parent.mkdir()
    assert window.write_session(str(session))
    window.shutdown()
    return image, session


def test_a_session_whose_image_was_resized_says_so(make_window, qtbot, saved_on_a_copy):
    image, session = saved_on_a_copy
    assert read_session(session)[0] == str(image)
    assert json.loads(session.read_text())["image_size"] == [572, 572]
    iio.imwrite(image, iio.imread(image)[:300, :300])  # cropped, saved over
    window = make_window(open_sample=False)
    open_session_and_wait(qtbot, window, session)
    assert window.last_notice == ("photo.png is 300×300 px, but its lines were drawn on it at "
                                  "572×572 px (was the file replaced, cropped or resized?): "
                                  "they may lie off the image or beside what they trace.")


def test_a_session_whose_image_moved_asks_where_it_is(make_window, qtbot, tmp_path,
                                                       saved_on_a_copy, monkeypatch):
    image, session = saved_on_a_copy
    moved = tmp_path / "moved" / "photo.png"
    shutil.move(image.parent, moved.parent)
    asked = []

    def locate(parent, title, folder, filters):
        asked.append(title)
        return (str(moved) if len(asked) == 1 else ""), ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", locate)
    window = make_window(open_sample=False)
    open_session_and_wait(qtbot, window, session)
    assert asked == ["Where is photo.png? (the session's image is not found)"]
    assert window.image_path == str(moved)
    assert [line.anchors for line in window.model.lines] == [LINES[0]]
    assert "its session names another place for it: save the session to keep this one" in \
        window.status_text
    # Not located (the dialog cancelled): not found, as before, and nothing changes.
    shutil.move(moved.parent, tmp_path / "gone")
    with qtbot.waitSignal(window.error_shown, timeout=60_000):
        assert window.open_session(str(session))
    assert len(asked) == 2
    assert window.last_error == f"image file not found: {image}"
    assert window.image_path == str(moved)


# -------------------------------------------------------------------------------------- closing
def test_closing_while_the_first_segment_is_traced_waits_for_it(make_window, qtbot, tmp_path,
                                                                 held, questions, monkeypatch):
    window = make_window()
    traces = held(app.traces, "trace")
    traces.hold()
    click(qtbot, window, A)
    click(qtbot, window, B)
    qtbot.waitUntil(lambda: traces.waiting == 1, timeout=10_000)
    assert window.model.lines == ()
    window.close()
    assert window.isVisible()
    assert window.status_text.startswith("closing once the trace in progress lands")
    assert questions.asked == []
    session = tmp_path / "closing.roadtracer.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args, **kwargs: (str(session),
                                                                                  ""))
    questions.append(Save)
    traces.release()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=30_000)
    assert questions.asked == ["1 traced line is not saved in a session. Save it first?"]
    (line,) = read_session(session)[1]
    assert line.anchors == (A, B)


def test_a_session_being_written_shows_the_wait_and_an_error_box_without_it(
        make_window, qtbot, tmp_path, monkeypatch):
    """A session is written on the window's thread (a question's Save goes on with it), which
    takes seconds for thousands of lines: the status says so and the cursor waits meanwhile;
    neither outlasts the write, nor shows over a failure's message box."""
    from PySide6.QtWidgets import QApplication

    from core.errors import OutputWriteError

    window = make_window()
    draw_straight(qtbot, window, ON_A)
    real_write, seen = app.main_window.write_session, []

    def write(*args, **kwargs):
        cursor = QApplication.overrideCursor()
        seen.append((window.status_text, cursor.shape() if cursor else None))
        if len(seen) == 2:
            raise OutputWriteError("disk full")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(app.main_window, "write_session", write)
    boxes = []
    window.error_shown.connect(lambda _text: boxes.append(QApplication.overrideCursor()))
    path = str(tmp_path / "s.json")
    assert window.write_session(path)
    assert seen[0] == (f"saving the session to {path}…", Qt.CursorShape.WaitCursor)
    assert window.status_text == f"session saved to {path}"
    assert QApplication.overrideCursor() is None
    assert not window.write_session(str(tmp_path / "t.json"))
    assert boxes == [None]  # the box shown once the cursor was restored
    assert QApplication.overrideCursor() is None
