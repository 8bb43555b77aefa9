"""Walking a folder and reopening sessions without losing lines: PgDown pressed again while the
next image loads steps on from that image, asks about the unsaved lines once, and drops the
superseded load (it installs nothing and discards nothing); reopening the session being worked
on and answering Save shows what the file then holds.

Loads are held in the worker (:class:`HeldLoads`) until the test lets them go, so that "pressed
before the image had loaded" does not depend on timing."""

from __future__ import annotations

import os
import shutil
import threading

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

import app.main_window
from app.files import autosave_path, load_autosave
from app.session import LineEncoder, read_session
from tests import test_app
from tests.conftest import SAMPLE_IMAGE
from tests.helpers import open_and_wait
from tests.test_app import A, B, C, click, wait_idle

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped

Save = QMessageBox.StandardButton.Save
Discard = QMessageBox.StandardButton.Discard

# Straight segments (Shift + click): drawn at once, no trace to wait for.
ON_A, ON_B = (A, B), ((100.0, 450.0), (200.0, 380.0))


class HeldLoads:
    """``load_for_display`` as the window calls it: while :meth:`hold` is in force, every load
    waits in the worker until :meth:`release`."""

    def __init__(self, real) -> None:
        self.real = real
        self.go = threading.Event()
        self.go.set()
        self.started: list[str] = []  # the base name of each image whose load began

    def hold(self) -> None:
        self.go.clear()

    def release(self) -> None:
        self.go.set()

    def __call__(self, path, **options):
        self.started.append(os.path.basename(path))
        assert self.go.wait(30)
        return self.real(path, **options)


@pytest.fixture
def held_loads(make_window, monkeypatch):
    """The window's image loads, holdable (:class:`HeldLoads`); let go before the windows
    close."""
    loads = HeldLoads(app.main_window.load_for_display)
    monkeypatch.setattr(app.main_window, "load_for_display", loads)
    yield loads
    loads.release()


class Answers(list):
    """The answers queued for ``QMessageBox.question`` and the questions it was asked."""

    asked: list[str]


@pytest.fixture
def answers(make_window, monkeypatch) -> Answers:
    """Answers to "Save them first?", used in order (Discard once they run out); ``asked``
    holds the text of every question asked."""
    queue = Answers()
    queue.asked = []

    def question(parent, title, text, *args, **kwargs):
        queue.asked.append(text)
        return queue.pop(0) if queue else Discard

    monkeypatch.setattr(QMessageBox, "question", question)
    return queue


@pytest.fixture
def folder(tmp_path):
    """A folder of three images, a.png, b.png, c.png (copies of the sample)."""
    path = tmp_path / "folder"
    path.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        shutil.copy(SAMPLE_IMAGE, path / name)
    return path


def draw_straight(qtbot, window, points) -> None:
    """A finished line of straight segments through ``points``."""
    count = len(window.model.lines)
    click(qtbot, window, points[0])
    for point in points[1:]:
        click(qtbot, window, point, Qt.KeyboardModifier.ShiftModifier)
    window.controller.finish()
    assert len(window.model.lines) == count + 1


def anchors(lines) -> list:
    return [line.anchors for line in lines]


def autosaved(window, image) -> list | None:
    """The anchors of the lines autosaved for ``image``; None if it has no autosave."""
    if not os.path.exists(autosave_path(window.autosave_dir, str(image))):
        return None
    return anchors(load_autosave(window.autosave_dir, str(image)).lines)


def loads_recorded(window) -> list[str]:
    """The base names of the images the window goes on to load (``image_loaded``)."""
    loaded: list[str] = []
    window.image_loaded.connect(lambda path: loaded.append(os.path.basename(path)))
    return loaded


def window_on_a_after_b(make_window, qtbot, folder, answers):
    """A window that saved b.png's line in a session (autosaved too), then opened a.png."""
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, folder / "b.png")
    draw_straight(qtbot, window, ON_B)
    assert window.write_session(str(folder / "b.roadtracer.json"))
    window.autosave()
    open_and_wait(qtbot, window, folder / "a.png")  # b's lines saved: nothing asked
    assert answers.asked == []
    assert window.model.lines == ()
    return window


def two_quick_pgdowns(qtbot, window, held_loads) -> None:
    """PgDown, and PgDown again while the first image is still loading; the loads let go."""
    held_loads.hold()
    qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)
    qtbot.waitUntil(lambda: held_loads.started[-1:] == ["b.png"], timeout=10_000)
    qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)  # b.png has not loaded yet
    held_loads.release()
    wait_idle(qtbot, window)


# ---------------------------------------------------------------------- PgDown twice, quickly
def test_two_quick_pgdowns_over_discarded_lines_open_the_image_after_next(
        make_window, qtbot, folder, held_loads, answers):
    window = window_on_a_after_b(make_window, qtbot, folder, answers)
    draw_straight(qtbot, window, ON_A)  # unsaved
    window.autosave()
    assert autosaved(window, folder / "a.png") == [ON_A]
    loaded = loads_recorded(window)
    answers.extend([Discard, Discard])
    two_quick_pgdowns(qtbot, window, held_loads)
    assert len(answers.asked) == 1, answers.asked  # about a.png's line, once
    assert loaded == ["c.png"]  # b.png's load superseded: never installed
    assert window.image_path == str(folder / "c.png")
    assert window.model.lines == ()
    # Discard dropped a.png's lines and their autosave, and nothing of b.png's.
    assert autosaved(window, folder / "a.png") is None
    assert autosaved(window, folder / "b.png") == [ON_B]
    qtbot.keyClick(window.canvas, Qt.Key.Key_PageUp)
    qtbot.waitUntil(lambda: loaded[-1:] == ["b.png"], timeout=60_000)
    wait_idle(qtbot, window)
    assert anchors(window.model.lines) == [ON_B]
    assert len(answers.asked) == 1


def test_two_quick_pgdowns_over_saved_lines_open_the_image_after_next(
        make_window, qtbot, folder, held_loads, answers):
    window = window_on_a_after_b(make_window, qtbot, folder, answers)
    session = folder / "a.roadtracer.json"
    assert window.write_session(str(session))
    draw_straight(qtbot, window, ON_A)  # unsaved, in a session file: Save writes it there
    loaded = loads_recorded(window)
    answers.append(Save)
    two_quick_pgdowns(qtbot, window, held_loads)
    assert len(answers.asked) == 1, answers.asked
    assert loaded == ["c.png"]
    assert window.image_path == str(folder / "c.png")
    assert anchors(read_session(session)[1]) == [ON_A]
    assert autosaved(window, folder / "a.png") == [ON_A]
    assert autosaved(window, folder / "b.png") == [ON_B]


def test_an_open_superseded_before_its_load_began_is_not_loaded(make_window, qtbot, folder,
                                                                   held_loads, answers):
    shutil.copy(SAMPLE_IMAGE, folder / "d.png")
    window = make_window(open_sample=False)
    open_and_wait(qtbot, window, folder / "a.png")
    loaded = loads_recorded(window)
    held_loads.hold()
    held_loads.started.clear()
    for _ in range(3):
        qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)
        qtbot.waitUntil(lambda: held_loads.started == ["b.png"], timeout=10_000)
    held_loads.release()
    wait_idle(qtbot, window)
    assert held_loads.started == ["b.png", "d.png"]  # c.png's turn came once it was dropped
    assert loaded == ["d.png"]
    assert window.image_path == str(folder / "d.png")
    assert answers.asked == []


def test_a_superseding_open_that_fails_keeps_the_discarded_lines(make_window, qtbot, folder,
                                                                   held_loads, answers):
    """Discard drops the lines once an image is loaded: the image after next cannot be, and
    the one between was skipped over, so the window stays as it was."""
    (folder / "c.png").write_bytes(b"not a PNG")
    window = window_on_a_after_b(make_window, qtbot, folder, answers)
    draw_straight(qtbot, window, ON_A)
    window.autosave()
    loaded = loads_recorded(window)
    errors: list[str] = []
    window.error_shown.connect(errors.append)
    two_quick_pgdowns(qtbot, window, held_loads)
    assert len(answers.asked) == 1
    assert loaded == []
    (error,) = errors
    assert "c.png" in error
    assert window.image_path == str(folder / "a.png")
    assert anchors(window.model.lines) == [ON_A]
    assert window.model.dirty
    assert autosaved(window, folder / "a.png") == [ON_A]
    assert autosaved(window, folder / "b.png") == [ON_B]
    # Nothing is loading any more: PgDown steps from a.png again, and asks again (the
    # message box about c.png is open: File ▸ Next image in folder).
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        assert window.step_image(1)
    wait_idle(qtbot, window)
    assert len(answers.asked) == 2
    assert window.image_path == str(folder / "b.png")
    assert anchors(window.model.lines) == [ON_B]
    assert autosaved(window, folder / "a.png") is None


def test_a_session_opened_while_an_image_loads_is_asked_about_once(
        make_window, qtbot, folder, held_loads, answers):
    window = window_on_a_after_b(make_window, qtbot, folder, answers)
    draw_straight(qtbot, window, ON_A)
    loaded = loads_recorded(window)
    held_loads.hold()
    qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)  # Discard a.png's line
    qtbot.waitUntil(lambda: held_loads.started[-1:] == ["b.png"], timeout=10_000)
    assert window.open_session(str(folder / "b.roadtracer.json"))
    held_loads.release()
    wait_idle(qtbot, window)
    assert len(answers.asked) == 1
    assert loaded == ["b.png"]
    assert window.session_path == str(folder / "b.roadtracer.json")
    assert anchors(window.model.lines) == [ON_B]
    assert autosaved(window, folder / "b.png") == [ON_B]
    assert autosaved(window, folder / "a.png") is None


# ------------------------------------------------------------ reopening the session worked on
def test_reopening_the_session_worked_on_and_saving_shows_what_it_holds(
        make_window, qtbot, tmp_path, monkeypatch, answers):
    window = make_window()
    draw_straight(qtbot, window, (A, B))
    session = tmp_path / "work.roadtracer.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *args, **kwargs: (str(session), ""))
    qtbot.keyClick(window.canvas, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    assert anchors(read_session(session)[1]) == [(A, B)]
    draw_straight(qtbot, window, (B, C))  # a second line, not saved yet
    answers.append(Save)
    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        assert window.open_session(str(session))
    wait_idle(qtbot, window)
    assert len(answers.asked) == 1
    on_disk = read_session(session)[1]
    assert anchors(on_disk) == [(A, B), (B, C)]
    assert LineEncoder().texts(window.model.lines) == LineEncoder().texts(on_disk)
    assert not window.model.dirty
    assert window.session_path == str(session)
    # Nothing was set aside as "kept": the autosave holds the same two lines.
    assert window.last_notice is None
    assert [name for name in os.listdir(window.autosave_dir) if ".kept" in name] == []
    assert autosaved(window, SAMPLE_IMAGE) == [(A, B), (B, C)]
    # Saving again writes what the window shows.
    qtbot.keyClick(window.canvas, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    assert anchors(read_session(session)[1]) == [(A, B), (B, C)]


def test_a_session_that_cannot_be_read_after_saving_changes_nothing(
        make_window, qtbot, tmp_path, answers):
    """Asked first, saved, then the session is read: where it cannot be, the window keeps its
    (now saved) lines."""
    window = make_window()
    saved = tmp_path / "saved.json"
    draw_straight(qtbot, window, (A, B))
    assert window.write_session(str(saved))
    draw_straight(qtbot, window, (B, C))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    answers.append(Save)
    with qtbot.waitSignal(window.error_shown, timeout=5_000):
        assert window.open_session(str(bad))  # reading starts; the error comes later
    assert len(answers.asked) == 1
    assert anchors(read_session(saved)[1]) == [(A, B), (B, C)]
    assert anchors(window.model.lines) == [(A, B), (B, C)]
    assert not window.model.dirty
    assert window.session_path == str(saved)
