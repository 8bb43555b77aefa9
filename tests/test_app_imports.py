"""File ▸ Import lines: long imports stop promptly (Esc, closing the window), big files are read
without a Python step per vertex, and bad files are named (exported anchors, MultiLineString
coordinates)."""

from __future__ import annotations

import cProfile
import json
import pstats
import time

import numpy as np
import pytest
from PySide6.QtCore import Qt

import app.imports
import core.vectors
from app.imports import SEGMENTS_PER_JOB, ImportRunner, job_size
from app.model import LinesModel, Segment
from app.traces import TraceOutcome
from core.tracer import TraceParams
from core.vectors import MAX_LINE_VERTICES, ImportedLine
from tests import test_app
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


def python_calls(work) -> int:
    """Python function calls (and C functions called from Python) that ``work()`` makes."""
    profile = cProfile.Profile()
    profile.runcall(work)
    return pstats.Stats(profile).total_calls


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
        "imported 2 line(s), 15 segment(s) from lines.geojson")
    window.controller.undo()  # still one undo step
    assert window.model.lines == ()


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
    assert host.messages == ["importing lines from f.geojson: 0/2 line(s), 0/4 segment(s) "
                             "(Esc cancels)"]
    first_of_a, b = host.jobs  # every line's first job at once
    assert (first_of_a[0], b[0]) == (((0, 0), (10, 0), (20, 0)), ((0, 50), (9, 50)))
    first_of_a[2](RuntimeError("boom"))  # an unexpected error: these two stay straight
    rest_of_a = host.jobs[-1]
    assert rest_of_a[0] == ((20, 0), (30, 5))
    land(b, ["no polyline"])
    assert host.messages[-1] == ("importing lines from f.geojson: 1/2 line(s), 3/4 segment(s) "
                                 "(Esc cancels)")
    assert model.lines == ()
    land(rest_of_a)
    b, a = model.lines  # in the order they were done, as one undo step
    assert (a.anchors, b.anchors) == (((0, 0), (10, 0), (20, 0), (30, 5)), ((0, 50), (9, 50)))
    assert (a.kind, b.kind) == ("road", "river")
    assert [segment.is_straight for segment in a.segments] == [True, True, True]
    assert model.undo_label == "Import lines"
    assert host.messages[-1] == ("imported 2 line(s), 4 segment(s) from f.geojson; 3 kept "
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


def test_starting_an_import_of_many_vertices_has_no_step_per_vertex(make_window, qtbot):
    window = make_window()
    lines = [ImportedLine(f"track {k}", None, zigzag(MAX_LINE_VERTICES - 1, spacing=3.0))
             for k in range(3)]
    calls = python_calls(lambda: window.controller.import_lines(lines, "tracks"))
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
@pytest.mark.parametrize(("anchors", "reason"), [
    ([[10, 10], [1e9, -1e9], [200, 200]],
     "anchor 1 [1000000000.0, -1000000000.0] of properties.anchors lies outside the image "
     "(572 × 572 px)"),
    ([[10, 10], [300, 40], [200, 200]],
     "anchor 1 [300.0, 40.0] of properties.anchors is not on the line's geometry"),
    ([[10, 10], [150, 150], [100, 100], [200, 200]],  # on it, but not in order
     "anchor 2 [100.0, 100.0] of properties.anchors is not on the line's geometry"),
    ([[10, 10], [True, 5], [200, 200]], "properties.anchors [[10, 10], [True, 5], [200, 200]] "
                                        "are not [x, y] number pairs"),
    ([[10, 10], ["5", 5], [200, 200]], "are not [x, y] number pairs"),
    ([[10, 10], [float("nan"), 5], [200, 200]], "properties.anchors are not finite"),
    ([[10, 10], [100, 100, 3], [200, 200]], None),  # a height is dropped, as in geometries
])
def test_bad_exported_anchors_skip_their_feature_with_the_reason(make_window, qtbot, tmp_path,
                                                                 anchors, reason):
    window = make_window()
    geometry = [[10, 10], [100, 100], [150, 150], [200, 200]]
    path = write_lines(tmp_path, (geometry, {"name": "bad", "anchors": anchors}),
                       (geometry, {"name": "good", "anchors": [[10, 10], [150, 150],
                                                               [200, 200]]}))
    assert window.import_lines(path)
    wait_idle(qtbot, window)
    *bad, good = window.model.lines
    assert (good.name, good.anchors) == ("good", ((10, 10), (150, 150), (200, 200)))
    message = window.statusBar().currentMessage()
    if reason is None:
        assert [line.anchors for line in bad] == [((10, 10), (100, 100), (200, 200))]
    else:
        assert bad == []
        assert "(1 feature(s) skipped: feature #0: " in message, message
        assert reason in message, message


def test_exported_anchors_are_bounded_like_vertices(make_window, qtbot, tmp_path):
    window = make_window()
    anchors = zigzag(MAX_LINE_VERTICES + 1)
    path = write_lines(tmp_path, (anchors[[0, -1]], {"anchors": anchors.tolist()}))
    assert not window.import_lines(path)
    assert window.last_error == (
        f"no line of lines.geojson lies on this image: feature #0: properties.anchors lists "
        f"{MAX_LINE_VERTICES + 1} anchors: at most {MAX_LINE_VERTICES} are read")
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


def test_a_multilinestring_with_malformed_coordinates_is_named_as_such(make_window, tmp_path):
    window = make_window()
    path = write_lines(tmp_path, ({"type": "MultiLineString", "coordinates": "x"}, {}))
    assert not window.import_lines(path)
    assert window.last_error == ("no line of lines.geojson lies on this image: feature #0: "
                                 "MultiLineString coordinates 'x' are not a list of lines of "
                                 "[x, y] number pairs")
