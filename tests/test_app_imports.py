"""File ▸ Import lines: the file is read in the worker while the window goes on, long imports
stop promptly (Esc, closing the window), big files are read without a Python step per vertex,
and bad files are named (exported anchors, MultiLineString coordinates)."""

from __future__ import annotations

import cProfile
import json
import pstats
import shutil
import threading
import time

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

import app.imports
import core.vectors
from app.imports import (
    SEGMENTS_PER_JOB,
    ImportRunner,
    job_size,
    unknown_kind_note,
    unknown_kinds,
)
from app.model import LinesModel, Segment
from app.traces import TraceOutcome
from core.output import shown_value
from core.tracer import TraceParams
from core.vectors import MAX_LINE_VERTICES, ImportedLine
from tests import test_app
from tests.conftest import SAMPLE_IMAGE
from tests.test_app import A, B, click, click_and_wait, wait_idle

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped



def zigzag(count: int, spacing: float = 40.0, size: float = 560.0) -> np.ndarray:
    """``count`` vertices (count, 2) running back and forth across the sample image, rows 7 px
    apart: a line of many segments, every one of them inside the image."""
    row = np.arange(10.0, size, spacing)
    x = np.concatenate([row, row[::-1]])
    rows = -(-count // len(row))
    y = (10.0 + 7.0 * np.arange(rows)) % (size - 20.0) + 5.0
    return np.column_stack([np.resize(x, count), np.repeat(y, len(row))[:count]])


def write_lines(tmp_path, *features, name: str = "lines.geojson") -> str:
    """A pixel-space FeatureCollection of ``features``: (coordinates, properties) or a
    geometry dict with properties."""
    path = tmp_path / name
    path.write_text(json.dumps({"type": "FeatureCollection", "coordinate_space": "pixel",
                                "features": [
        {"type": "Feature", "properties": properties,
         "geometry": geometry if isinstance(geometry, dict) else
         {"type": "LineString", "coordinates": np.asarray(geometry).tolist()}}
        for geometry, properties in features]}))
    return str(path)


@pytest.fixture
def traced_segments(monkeypatch) -> list[int]:
    """The segments every import job traced (worker thread), one entry per job as it ends."""
    import app.tracing

    counted: list[int] = []
    real = app.tracing.trace_anchors

    def counting(raster, anchors, params, backend):
        result = real(raster, anchors, params, backend)
        counted.append(len(anchors) - 1)
        return result

    monkeypatch.setattr(app.tracing, "trace_anchors", counting)
    return counted


def import_errors(qtbot, window, path) -> list[str]:
    """Import ``path`` and wait until it is read and traced (or refused): the errors shown,
    each also the text of a message box still open."""
    errors: list[str] = []
    open_before = set(message_boxes(window))
    window.error_shown.connect(errors.append)
    assert window.import_lines(str(path))  # the file is read in the worker
    wait_idle(qtbot, window)
    window.error_shown.disconnect(errors.append)
    boxes = [box for box in message_boxes(window) if box not in open_before]
    assert [(box.text(), box.textFormat()) for box in boxes] == [
        (error, Qt.TextFormat.PlainText) for error in errors]
    return errors


def message_boxes(window) -> list[QMessageBox]:
    """The window's message boxes on screen."""
    return [box for box in window.findChildren(QMessageBox) if box.isVisible()]


def python_calls(work) -> int:
    """Python function calls (and C functions called from Python) that ``work()`` makes."""
    profile = cProfile.Profile()
    profile.runcall(work)
    return pstats.Stats(profile).total_calls


# ------------------------------------------------------------------- reading in the worker
class HeldReads:
    """``read_lines`` as the window calls it, held in the worker until :attr:`go` is set."""

    def __init__(self, real) -> None:
        self.real = real
        self.go = threading.Event()
        self.threads: list[int] = []  # the thread of each read, as it starts
        self.ends: list[str] = []  # how each read ended: "read", or the exception's name

    def __call__(self, path, raster, image_name, stop=None):
        self.threads.append(threading.get_ident())
        assert self.go.wait(30)
        try:
            result = self.real(path, raster, image_name, stop=stop)
        except Exception as exc:
            self.ends.append(type(exc).__name__)
            raise
        self.ends.append("read")
        return result


@pytest.fixture
def held_reads(make_window, monkeypatch):
    """The window's reads held (:class:`HeldReads`); let go before the windows close."""
    import app.main_window

    reads = HeldReads(app.main_window.read_lines)
    monkeypatch.setattr(app.main_window, "read_lines", reads)
    yield reads
    reads.go.set()


def test_the_file_is_read_in_the_worker_while_the_window_goes_on(make_window, qtbot, tmp_path,
                                                                 held_reads):
    window = test_app.window_with_a_line(make_window, qtbot)
    (drawn,) = window.model.lines
    line = zigzag(12)
    assert window.import_lines(write_lines(tmp_path, (line, {"name": "long"})))
    # import_lines returned; the worker now reads the file.
    qtbot.waitUntil(lambda: bool(held_reads.threads), timeout=10_000)
    assert held_reads.threads != [threading.get_ident()]
    assert held_reads.ends == []
    assert window.statusBar().currentMessage() == "reading lines.geojson… (Esc cancels)"
    assert window.controller.imports.running
    # The window handles clicks meanwhile: one starts a new line.
    click(qtbot, window, A)
    assert window.controller.tail == A
    assert window.model.lines == (drawn,)
    held_reads.go.set()
    wait_idle(qtbot, window)
    assert held_reads.ends == ["read"]
    kept, imported = window.model.lines
    assert kept == drawn
    assert (imported.name, imported.anchors) == ("long", tuple(map(tuple, line.tolist())))
    assert window.statusBar().currentMessage().startswith(
        "imported 1 line, 11 segments from lines.geojson")
    assert window.controller.tail == A  # the line started while reading goes on
    assert message_boxes(window) == []


@pytest.mark.parametrize("how", ["Esc", "another image", "closing the window"])
def test_an_import_dropped_while_its_file_is_read_changes_nothing(make_window, qtbot, tmp_path,
                                                                  held_reads, traced_segments,
                                                                  how):
    window = test_app.window_with_a_line(make_window, qtbot)
    window.model.mark_saved()  # nothing to ask before another image or closing
    before = window.model.lines
    path = write_lines(tmp_path, *[(zigzag(40), {}) for _ in range(5)])
    assert window.import_lines(path)
    qtbot.waitUntil(lambda: bool(held_reads.threads), timeout=10_000)
    if how == "Esc":
        qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
        assert window.statusBar().currentMessage() == "import cancelled: no line added"
        assert not window.controller.imports.running
        held_reads.go.set()
        wait_idle(qtbot, window)
    elif how == "another image":
        other = tmp_path / "other.png"
        shutil.copy(SAMPLE_IMAGE, other)
        with qtbot.waitSignal(window.image_loaded, timeout=60_000):
            window.open_image(str(other))  # waits behind the reading
            held_reads.go.set()
        wait_idle(qtbot, window)
        assert window.image_path == str(other)
        before = ()  # the lines of other.png: none
    else:
        threading.Timer(0.2, held_reads.go.set).start()  # close() waits for the reading
        window.close()
        assert window.jobs.running is None
        qtbot.wait(100)  # the reading's result arrives and is dropped
    # The file is read up to its first feature at most, or dropped when read (the other image
    # waited for it); no line was traced, none added, nothing reported.
    assert held_reads.ends == (["read"] if how == "another image" else ["ReadStopped"])
    assert traced_segments == []
    assert window.model.lines == before
    assert not window.controller.imports.running
    assert message_boxes(window) == []


@pytest.mark.parametrize("problem", ["cut short", "a folder", "no collection"])
def test_a_file_that_cannot_be_read_ends_in_one_message(make_window, qtbot, tmp_path, problem):
    window = test_app.window_with_a_line(make_window, qtbot)
    (drawn,) = window.model.lines
    path = write_lines(tmp_path, *[(zigzag(40), {}) for _ in range(3)])
    text = open(path).read()
    if problem == "cut short":
        with open(path, "w") as stream:
            stream.write(text[:len(text) // 2])
        with pytest.raises(json.JSONDecodeError) as decoding:
            json.loads(text[:len(text) // 2])
        expected = f"GeoJSON file {path} is not JSON: {decoding.value}"
    elif problem == "a folder":
        path = str(tmp_path)
        expected = f"cannot read GeoJSON file {path}: it is a folder"
    else:
        with open(path, "w") as stream:
            stream.write('{"type": "Topology", "objects": ' + text + "}")
        expected = f"{path} is not a GeoJSON FeatureCollection, Feature or LineString " \
                   "(type 'Topology')"
    assert import_errors(qtbot, window, path) == [expected]
    assert window.statusBar().currentMessage() == expected
    assert window.model.lines == (drawn,)
    assert not window.controller.imports.running


def test_a_file_imported_while_another_is_read_is_imported_too(make_window, qtbot, tmp_path,
                                                                held_reads):
    """As an import started while another is traced: each goes on, its own undo step."""
    window = make_window()
    first = write_lines(tmp_path, (zigzag(6), {"name": "first"}), name="first.geojson")
    second = write_lines(tmp_path, (zigzag(4) + [0.0, 50.0], {"name": "second"}),
                         name="second.geojson")
    assert window.import_lines(first)
    qtbot.waitUntil(lambda: bool(held_reads.threads), timeout=10_000)
    assert window.import_lines(second)
    assert window.statusBar().currentMessage() == "reading second.geojson… (Esc cancels)"
    held_reads.go.set()
    wait_idle(qtbot, window)
    assert held_reads.ends == ["read", "read"]
    assert [line.name for line in window.model.lines] == ["first", "second"]
    window.controller.undo()
    assert [line.name for line in window.model.lines] == ["first"]


# ------------------------------------------------------------------------ stopping promptly
def test_esc_stops_a_long_line_within_one_job(make_window, qtbot, tmp_path, traced_segments):
    window = make_window()
    assert window.import_lines(write_lines(tmp_path, (zigzag(2000), {})))
    qtbot.waitUntil(lambda: sum(traced_segments) >= 3, timeout=60_000)
    assert window.statusBar().currentMessage().startswith("importing lines from lines.geojson")
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    at_esc = sum(traced_segments)
    wait_idle(qtbot, window)
    # At most the job running at Esc ends; none starts after it.
    assert sum(traced_segments) <= at_esc + SEGMENTS_PER_JOB
    assert window.model.lines == ()
    assert window.statusBar().currentMessage() == "import cancelled: no line added"


def test_esc_drops_an_imports_jobs_waiting_at_once(make_window, qtbot, tmp_path,
                                                   traced_segments):
    window = test_app.window_with_a_line(make_window, qtbot)
    (drawn,) = window.model.lines
    undo = window.model.undo_label
    path = write_lines(tmp_path, *[(zigzag(8) + [0.0, 3.0 * k], {}) for k in range(30)])
    assert window.import_lines(path)
    qtbot.waitUntil(lambda: len(traced_segments) >= 1, timeout=60_000)
    assert window.jobs.pending >= 20  # the next job of every line waits
    started = []
    window.jobs.started.connect(started.append)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    assert window.jobs.pending == 0
    wait_idle(qtbot, window)
    assert started == []  # none ran after Esc, not even to do nothing
    assert window.statusBar().currentMessage() == "import cancelled: no line added"
    # No line of the import was added, those traced neither: the lines and their undo history
    # are as before it.
    assert window.model.lines == (drawn,)
    assert window.model.undo_label == undo
    window.controller.undo()
    assert window.model.lines == ()


def test_an_import_dropped_before_its_file_is_read_reads_nothing(make_window, qtbot, tmp_path,
                                                                 held_reads):
    from app.jobs import Job

    window = make_window()
    busy = threading.Event()
    window.jobs.submit(Job(lambda: busy.wait(30), lambda _: None, lambda _: None))
    assert window.import_lines(write_lines(tmp_path, (zigzag(12), {})))  # waits its turn
    qtbot.keyClick(window.canvas, Qt.Key.Key_Escape)
    held_reads.go.set()
    busy.set()
    wait_idle(qtbot, window)
    assert held_reads.threads == []  # never read
    assert window.model.lines == ()
    assert message_boxes(window) == []


def test_a_click_during_a_long_import_waits_for_one_job_at_most(make_window, qtbot, tmp_path,
                                                                traced_segments):
    window = make_window()
    assert window.import_lines(write_lines(tmp_path, (zigzag(2000), {})))
    qtbot.waitUntil(lambda: sum(traced_segments) >= 2, timeout=60_000)
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    # The segment landed while the import's line is still being traced.
    assert window.controller.imports.running
    assert sum(traced_segments) < 1999
    (drawn,) = window.model.lines
    assert drawn.anchors == (A, B)
    window.controller.cancel()  # Esc: the import first
    assert window.statusBar().currentMessage() == "import cancelled: no line added"
    wait_idle(qtbot, window)
    assert len(window.model.lines) == 1


def test_closing_the_window_stops_an_import_within_one_job(make_window, qtbot, tmp_path,
                                                           traced_segments):
    window = make_window()
    assert window.import_lines(write_lines(tmp_path, (zigzag(2000), {})))
    qtbot.waitUntil(lambda: sum(traced_segments) >= 2, timeout=60_000)
    window.close()
    # close() waited for the job running, and only for it: the worker is stopped.
    assert window.jobs.running is None
    assert window.jobs.shutdown(0)
    at_close = sum(traced_segments)
    assert at_close < 1999
    qtbot.wait(100)  # queued results arrive and are dropped; no job starts
    assert sum(traced_segments) == at_close
    assert window.model.lines == ()


def test_an_import_still_traces_every_segment_in_order(make_window, qtbot, tmp_path,
                                                       traced_segments):
    window = make_window()
    first, second = zigzag(12), zigzag(5)[::-1] + [0.0, 3.0]
    assert window.import_lines(write_lines(tmp_path, (first, {"name": "long"}),
                                           (second, {"name": "short", "kind": "river"})))
    wait_idle(qtbot, window)
    long, short = window.model.lines
    assert (long.name, long.kind, short.name, short.kind) == ("long", "road", "short", "river")
    assert long.anchors == tuple(map(tuple, first.tolist()))
    assert short.anchors == tuple(map(tuple, second.tolist()))
    for line in (long, short):
        for segment, a, b in zip(line.segments, line.anchors[:-1], line.anchors[1:],
                                 strict=True):
            np.testing.assert_allclose(segment.polyline[[0, -1]], [a, b])
    assert sum(traced_segments) == 11 + 4
    assert window.statusBar().currentMessage().startswith(
        "imported 2 lines, 15 segments from lines.geojson")
    window.controller.undo()  # still one undo step
    assert window.model.lines == ()


def test_the_apps_export_imports_as_drawn_with_its_kinds(make_window, qtbot, tmp_path):
    window = make_window()
    shift = Qt.KeyboardModifier.ShiftModifier
    for kind, points in (("river", [(100.0, 450.0), (200.0, 380.0), (260.0, 300.0)]),
                         ("road", [(300.0, 100.0), (350.0, 150.0)])):
        window.controller.kind = kind
        click(qtbot, window, points[0])
        for point in points[1:]:
            click(qtbot, window, point, shift)  # straight: drawn at once
        window.controller.finish()
    drawn = window.model.lines
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    wait_idle(qtbot, window)
    for feature, line in zip(json.loads(path.read_text())["features"], drawn, strict=True):
        assert feature["properties"]["anchors_px"] == [list(p) for p in line.anchors]
    window.model.reset()
    assert import_errors(qtbot, window, path) == []
    assert [(line.name, line.kind, line.anchors) for line in window.model.lines] == [
        (line.name, line.kind, line.anchors) for line in drawn]


def test_the_apps_export_imports_its_straight_segments_straight(make_window, qtbot, tmp_path):
    """Segments drawn straight (Shift) come back straight and exactly as drawn, traced ones
    traced, in the order of the line: traced, straight, straight, traced."""
    window = make_window()
    shift = Qt.KeyboardModifier.ShiftModifier
    points = [(100.0, 450.0), (200.0, 380.0), (260.0, 300.0), (330.0, 260.0), (420.0, 250.0)]
    click(qtbot, window, points[0])
    click_and_wait(qtbot, window, points[1])
    click(qtbot, window, points[2], shift)
    click(qtbot, window, points[3], shift)
    click_and_wait(qtbot, window, points[4])
    window.controller.finish()
    (drawn,) = window.model.lines
    assert [segment.is_straight for segment in drawn.segments] == [False, True, True, False]
    path = tmp_path / "lines.geojson"
    assert window.export_geojson(str(path))
    wait_idle(qtbot, window)
    window.model.reset()
    assert import_errors(qtbot, window, path) == []
    (back,) = window.model.lines
    assert back.anchors == drawn.anchors
    assert [segment.is_straight for segment in back.segments] == [False, True, True, False]
    for segment in back.segments[1:3]:
        np.testing.assert_array_equal(segment.polyline, [segment.polyline[0],
                                                         segment.polyline[-1]])
    assert all(len(segment.polyline) > 2 for segment in (back.segments[0], back.segments[3]))


# --------------------------------------------------------------------- lines of unknown kind
HOSTILE_KIND = "x" * 10_000 + "\n\x00\ud800"  # long, a line break, a NUL, a lone surrogate


def test_lines_of_an_unknown_kind_are_said_to_take_the_new_line_kind(make_window, qtbot,
                                                                     tmp_path):
    window = make_window()
    window.controller.kind = "river"  # the New line kind
    kinds = {"a": "street", "b": "street", "c": HOSTILE_KIND, "d": ["road"],
             "e": "road", "f": None, "g": "track"}
    path = write_lines(tmp_path, *[
        (zigzag(3) + [0.0, 20.0 * k], {"name": name} if kind is None else
         {"name": name, "kind": kind} | ({"highway": "track"} if name == "g" else {}))
        for k, (name, kind) in enumerate(kinds.items())])
    assert import_errors(qtbot, window, path) == []
    assert {line.name: line.kind for line in window.model.lines} == {
        "a": "river", "b": "river", "c": "river", "d": "river",  # the New line kind
        "e": "road",
        "f": "river",  # no kind: the New line kind, as before (nothing said)
        "g": "road"}  # its OpenStreetMap tag says which
    message = window.statusBar().currentMessage()
    assert message.startswith("imported 7 lines")
    assert message.endswith("; 4 lines of lines.geojson have kind 'street' and 2 other "
                            "values, not road or river: traced as river, the New line kind")
    assert len(message) < 300  # the values, however long, are not shown whole


def test_unknown_kinds_are_shown_cut_short_and_printable(tmp_path):
    from core.raster import load_image

    path = write_lines(tmp_path, *[(zigzag(3), {"kind": kind}) for kind in (
        HOSTILE_KIND, {"kind": "road"}, 7, {"a": 1}, "river", None)], (zigzag(3), {}),
        (zigzag(3) + [5000.0, 0.0], {"kind": "off the image"}))
    lines, failures = core.vectors.read_lines(path, load_image(SAMPLE_IMAGE), "gsi_108.png")
    assert len(failures) == 1  # the line off the image is not imported
    assert len(lines) == 7
    kinds = unknown_kinds(lines)
    assert kinds == [shown_value(HOSTILE_KIND), "dict", "7", "dict"]
    assert len(kinds[0]) <= 40
    note = unknown_kind_note(kinds[:1], "f.geojson", "road")
    assert note == (f"1 line of f.geojson has kind {kinds[0]}, not road or river: traced as "
                    "road, the New line kind")
    assert note.isprintable()
    assert unknown_kind_note(kinds[1:], "f.geojson", "river") == (
        "3 lines of f.geojson have kind dict and 1 other value, not road or river: traced as "
        "river, the New line kind")
    assert unknown_kind_note([], "f.geojson", "road") == ""


def test_a_line_without_a_kind_is_imported_without_a_word(make_window, qtbot, tmp_path):
    window = make_window()
    without = write_lines(tmp_path, (zigzag(3), {}), name="none.geojson")
    assert import_errors(qtbot, window, without) == []
    assert window.statusBar().currentMessage() == ("imported 1 line, 2 segments from "
                                                   "none.geojson")


class FakeHost:
    """An :class:`app.imports.ImportHost` whose jobs the test ends by hand."""

    def __init__(self) -> None:
        self.jobs: list[tuple] = []  # (anchors, done, failed, live)
        self.messages: list[str] = []
        self.selected = None

    def submit_anchors(self, anchors, params, done, failed, live) -> None:
        self.jobs.append((anchors, done, failed, live))

    def line_params(self, kind: str) -> TraceParams:
        return TraceParams(line_kind=kind)

    def select(self, line_id, segment=None) -> None:
        self.selected = line_id

    def drawing_changed(self) -> None:
        pass

    def tell(self, text: str) -> None:
        self.messages.append(text)


def land(job, reasons=()) -> None:
    """A fake host's job traced: its segments (straight here), ``reasons`` problems."""
    anchors, done, _, _ = job
    done((TraceOutcome(tuple(Segment.straight(a, b) for a, b in zip(
        anchors[:-1], anchors[1:], strict=True)), 1.0), list(reasons)))


def test_a_job_traces_a_few_short_segments_or_one_long_one():
    assert job_size(np.full(10, 10.0)) == SEGMENTS_PER_JOB
    assert job_size(np.array([50.0, 50.0, 50.0, 60.0, 1.0])) == 3  # 200 px at most
    assert job_size(np.array([150.0, 100.0])) == 1
    assert job_size(np.array([500.0, 1.0])) == 1
    assert job_size(np.array([2.0])) == 1


def test_import_jobs_trace_a_few_segments_each_and_stop_when_cancelled(monkeypatch):
    monkeypatch.setattr(app.imports, "SEGMENTS_PER_JOB", 2)
    model, host = LinesModel(), FakeHost()
    runner = ImportRunner(model, host)
    lines = [ImportedLine("a", None, np.array([[0.0, 0], [10, 0], [20, 0], [30, 5]])),
             ImportedLine("b", "river", np.array([[0.0, 50], [9, 50]]))]
    runner.start(lines, "f.geojson", "road")
    assert host.messages == ["importing lines from f.geojson: 0/2 lines, 0/4 segments "
                             "(Esc cancels)"]
    first_of_a, b = host.jobs  # every line's first job at once
    assert (first_of_a[0], b[0]) == (((0, 0), (10, 0), (20, 0)), ((0, 50), (9, 50)))
    first_of_a[2](RuntimeError("boom"))  # an unexpected error: these two stay straight
    rest_of_a = host.jobs[-1]
    assert rest_of_a[0] == ((20, 0), (30, 5))
    land(b, ["no polyline"])
    assert host.messages[-1] == ("importing lines from f.geojson: 1/2 lines, 3/4 segments "
                                 "(Esc cancels)")
    assert model.lines == ()
    land(rest_of_a)
    b, a = model.lines  # in the order they were done, as one undo step
    assert (a.anchors, b.anchors) == (((0, 0), (10, 0), (20, 0), (30, 5)), ((0, 50), (9, 50)))
    assert (a.kind, b.kind) == ("road", "river")
    assert [segment.is_straight for segment in a.segments] == [True, True, True]
    assert model.undo_label == "Import lines"
    assert host.messages[-1] == ("imported 2 lines, 4 segments from f.geojson; 3 segments kept "
                                 "straight (RuntimeError: boom)")
    assert not runner.running
    assert host.selected == a.id
    # Cancelled: the jobs end unheard, and no further job is submitted.
    runner.start(lines, "f.geojson", "road")
    submitted = len(host.jobs)
    assert runner.cancel()
    assert not runner.cancel()
    assert not host.jobs[-1][3]()  # live() tells the worker
    land(host.jobs[-2])
    land(host.jobs[-1])
    assert len(host.jobs) == submitted
    assert len(model.lines) == 2


def test_a_bulk_jobs_continuation_runs_before_the_other_bulk_jobs(qtbot):
    """The next segments of an imported line run before the next line's (lines are done in
    the file's order); a click made meanwhile still runs first."""
    from app.jobs import Job, JobQueue

    queue = JobQueue()
    order = []

    def job(name, then=(), **kind):
        def done(result):
            order.append(result)
            for follow_up in then:
                queue.submit(follow_up)

        return Job(lambda: time.sleep(0.02) or name, done, lambda exc: None, **kind)

    with qtbot.waitSignal(queue.idle, timeout=10_000):
        queue.submit(job("line 1 (1)", then=[job("line 1 (2)", [job("line 1 (3)", bulk=True)],
                                                 bulk=True), job("line 1 (2')", bulk=True)],
                         bulk=True))  # starts at once
        queue.submit(job("line 2", bulk=True))
        queue.submit(job("click"))
    assert order == ["line 1 (1)", "click", "line 1 (2)", "line 1 (3)", "line 1 (2')",
                     "line 2"]
    assert queue.shutdown(1000)


JOBS_MAKING_CRSS = """
import pyproj
from PySide6.QtCore import QCoreApplication

from app.jobs import Job, JobQueue

application = QCoreApplication([])
queue, names = JobQueue(), []
for code in ("EPSG:32654", "EPSG:4326", "EPSG:3857", "EPSG:32654"):
    queue.submit(Job(lambda code=code: pyproj.CRS.from_user_input(code).name, names.append,
                     lambda exc: names.append(repr(exc))))
queue.idle.connect(application.quit)
application.exec()
print(names)
"""


def test_jobs_one_after_another_may_use_pyproj():
    """Reading a file in a map CRS, opening a georeferenced image: each job on the worker
    thread may make CRSs. pyproj 3.7 let each job free the thread's PROJ context, and the next
    job's CRS crashed the program (run in a child process here, which died of it)."""
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run([sys.executable, "-c", JOBS_MAKING_CRSS], capture_output=True,
                         text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == str(["WGS 84 / UTM zone 54N", "WGS 84",
                                               "WGS 84 / Pseudo-Mercator",
                                               "WGS 84 / UTM zone 54N"])


def test_starting_an_import_of_many_vertices_has_no_step_per_vertex(make_window, qtbot):
    window = make_window()
    lines = [ImportedLine(f"track {k}", None, zigzag(MAX_LINE_VERTICES - 1, spacing=3.0))
             for k in range(3)]
    calls = python_calls(lambda: window.controller.imports.start(lines, "tracks", "road"))
    assert calls < 1000, calls
    window.controller.cancel()
    wait_idle(qtbot, window)


# -------------------------------------------------------------------- reading big files fast
def test_reading_a_million_vertices_has_no_python_step_per_vertex(make_window, qtbot,
                                                                  tmp_path):
    window = make_window()
    line = zigzag(MAX_LINE_VERTICES - 1, spacing=3.0)
    line[1::1000] = line[::1000] + 0.5  # some close vertices to drop
    small = write_lines(tmp_path, (line[:50], {}), name="small.geojson")
    core.vectors.read_lines(small, window.raster, "gsi_108.png")  # compiled kernels loaded
    path = write_lines(tmp_path, *[(line, {"name": f"track {k}"}) for k in range(10)])
    found = []
    calls = python_calls(lambda: found.append(core.vectors.read_lines(
        path, window.raster, "gsi_108.png")))
    assert calls < 5000, calls  # 10 lines of 99,999 vertices
    lines, failures = found[0]
    assert failures == []
    assert len(lines) == 10
    np.testing.assert_array_equal(lines[0].anchors, core.vectors.without_close_vertices(line))
    calls = python_calls(lambda: window.import_lines(path))
    assert calls < 10_000, calls
    window.controller.cancel()
    wait_idle(qtbot, window)


# ------------------------------------------------------------------------ bad files named
#: The geometry of the features of the tests below, and its vertices as the line's anchors.
GEOMETRY = [[10, 10], [100, 100], [150, 150], [200, 200]]
AS_DRAWN = tuple(map(tuple, GEOMETRY))


@pytest.mark.parametrize(("anchors", "expected"), [
    ([[10, 10], [1e9, -1e9], [200, 200]],
     "anchor 1 [1000000000.0, -1000000000.0] of properties.anchors lies outside the image "
     "(572 × 572 px)"),
    # An anchor off the geometry, or not in order: it was edited, and is taken as drawn.
    ([[10, 10], [300, 40], [200, 200]], AS_DRAWN),
    ([[10, 10], [150, 150], [100, 100], [200, 200]], AS_DRAWN),
    ([[10, 10], [True, 5], [200, 200]], "properties.anchors [[10, 10], [True, 5], [200, 200]] "
                                        "are not [x, y] number pairs"),
    ([[10, 10], ["5", 5], [200, 200]], "are not [x, y] number pairs"),
    ([[10, 10], [float("nan"), 5], [200, 200]], "properties.anchors are not finite"),
    ([[10, 10], [100, 100, 3], [200, 200]], ((10, 10), (100, 100), (200, 200))),  # a height
])                                                            # is dropped, as in geometries
def test_bad_exported_anchors_skip_their_feature_with_the_reason(make_window, qtbot, tmp_path,
                                                                 anchors, expected):
    window = make_window()
    path = write_lines(tmp_path, (GEOMETRY, {"name": "bad", "anchors": anchors}),
                       (GEOMETRY, {"name": "good", "anchors": [[10, 10], [150, 150],
                                                               [200, 200]]}))
    assert window.import_lines(path)
    wait_idle(qtbot, window)
    *bad, good = window.model.lines
    assert (good.name, good.anchors) == ("good", ((10, 10), (150, 150), (200, 200)))
    message = window.statusBar().currentMessage()
    if isinstance(expected, tuple):
        assert [line.anchors for line in bad] == [expected]
    else:
        assert bad == []
        assert "; 1 feature skipped (feature 1: " in message, message
        assert expected in message, message


def test_exported_anchors_are_bounded_like_vertices(make_window, qtbot, tmp_path):
    window = make_window()
    anchors = zigzag(MAX_LINE_VERTICES + 1)
    path = write_lines(tmp_path, (anchors[[0, -1]], {"anchors": anchors.tolist()}))
    assert import_errors(qtbot, window, path) == [
        f"no line of lines.geojson lies on this image: feature 1: properties.anchors lists "
        f"{MAX_LINE_VERTICES + 1} anchors: at most {MAX_LINE_VERTICES} are read"]
    assert window.model.lines == ()


@pytest.mark.parametrize("anchors", [
    [[50, 10], [900, 900], [250, 200]],  # another image's: their ends are not the geometry's
    [[10, 10]], "10,10 200,200", [[10, 10], "x"], {"a": 1}, [[10, 10], [1e400, 200]]])
def test_anchors_whose_ends_are_not_the_geometrys_give_way_to_its_vertices(
        make_window, qtbot, tmp_path, anchors):
    window = make_window()
    geometry = [[10.0, 10.0], [100.0, 100.0], [200.0, 200.0]]
    path = write_lines(tmp_path, (geometry, {"anchors": anchors}))
    assert window.import_lines(path)
    wait_idle(qtbot, window)
    (line,) = window.model.lines
    assert line.anchors == tuple(map(tuple, geometry))


def test_a_multilinestring_with_malformed_coordinates_is_named_as_such(make_window, qtbot,
                                                                        tmp_path):
    window = make_window()
    path = write_lines(tmp_path, ({"type": "MultiLineString", "coordinates": "x"}, {}))
    assert import_errors(qtbot, window, path) == [
        "no line of lines.geojson lies on this image: feature 1: MultiLineString coordinates "
        "'x' are not a list of lines of [x, y] number pairs"]
