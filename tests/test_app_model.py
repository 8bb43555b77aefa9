"""The Qt-free parts of the application: lines model, undo/redo, sessions."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace

import numpy as np
import pytest

import app.session
from app.model import MAX_UNDO, Line, LinesModel, Segment, nearest_on_polyline, same_lines
from app.session import LineEncoder, SessionReadError, load_session, read_session, write_session
from core.tracer import TraceParams, trace
from tests.helpers import traced
from tests.synthetic import BULGE, road_image


def straight(a, b) -> Segment:
    return Segment.straight(a, b)


def test_edits_undo_redo_and_dirty():
    model = LinesModel()
    calls = []
    model.subscribe(lambda change: calls.append(len(model.lines)))
    line = model.add_line((0, 0), (10, 0), traced((0, 0), (10, 0)))
    model.append_segment(line.id, (20, 5), straight((10, 0), (20, 5)))
    assert model.dirty
    assert model.undo_label == "Add segment"
    assert model.line(line.id).anchors == ((0, 0), (10, 0), (20, 5))
    assert model.line(line.id).polyline.shape == (4, 2)  # joint kept once
    model.remove_last_segment(line.id)
    assert len(model.line(line.id).segments) == 1
    model.undo()
    assert len(model.line(line.id).segments) == 2
    model.redo()
    assert len(model.line(line.id).segments) == 1
    assert model.remove_last_segment(line.id) is None
    assert model.lines == ()
    while model.undo():
        pass
    assert model.lines == ()
    assert not model.dirty
    assert calls[-1] == 0


def test_mark_saved_and_undo_back_to_saved_state_is_clean():
    model = LinesModel()
    line = model.add_line((0, 0), (10, 0), traced((0, 0), (10, 0)))
    model.mark_saved()
    assert not model.dirty
    model.rename(line.id, "Main road")
    assert model.dirty
    model.undo()
    assert not model.dirty


def test_line_scores_ignore_straight_segments():
    model = LinesModel()
    line = model.add_line((0, 0), (10, 0), traced((0, 0), (10, 0)))
    line = model.append_segment(line.id, (20, 0), straight((10, 0), (20, 0)))
    assert line.score == -3.0
    assert line.score_per_px == pytest.approx(-3.0 / line.segments[0].length)
    assert np.isnan(model.add_line((0, 0), (5, 5), straight((0, 0), (5, 5))).score)


def test_segment_knows_when_the_tracer_widened_its_corridor():
    raster = road_image(BULGE)
    auto, fixed = TraceParams(), TraceParams(halfwidth=50.0)
    widened = Segment.from_result(trace(raster, BULGE[0], BULGE[-1], auto), auto)
    kept = Segment.from_result(trace(raster, BULGE[0], BULGE[-1], fixed), fixed)
    assert widened.corridor_widened
    assert not kept.corridor_widened
    assert not straight((0, 0), (10, 0)).corridor_widened


def test_bad_kind_is_refused():
    with pytest.raises(ValueError, match="kind"):
        LinesModel().add_line((0, 0), (1, 1), straight((0, 0), (1, 1)), kind="canal")


def test_nearest_on_polyline():
    polyline = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])
    nearest, distances = nearest_on_polyline([[5, 3], [12, 5], [-3, -4]], polyline)
    np.testing.assert_allclose(distances, [3, 2, 5])
    np.testing.assert_allclose(nearest, [[5, 0], [10, 5], [0, 0]])


def test_session_round_trip(tmp_path):
    model = LinesModel()
    line = model.add_line((1, 2), (30, 4), traced((1, 2), (30, 4)), kind="river")
    model.append_segment(line.id, (40, 40), straight((30, 4), (40, 40)))
    image = tmp_path / "image.png"
    params = TraceParams(halfwidth=12.0, max_angle=20.0, score="cross",
                         evidence_path=str(tmp_path / "roads.tif"))
    path = tmp_path / "work" / "s.roadtracer.json"
    path.parent.mkdir()
    write_session(path, str(image), model.lines, params, "cpu")
    assert json.loads(path.read_text())["lines"][0]["segments"][1]["score"] is None
    image_path, lines, read_params, backend = read_session(path)
    assert image_path == str(image)
    assert read_params == params
    assert backend == "cpu"
    (original,), (loaded,) = model.lines, lines
    assert isinstance(loaded, Line)
    assert (loaded.name, loaded.kind, loaded.anchors) == (original.name, "river", original.anchors)
    np.testing.assert_array_equal(loaded.polyline, original.polyline)
    # A river line's segments are traced as water (sessions older than river mode said road).
    assert original.segments[0].request.line_kind == "road"
    assert loaded.segments[0].request == replace(original.segments[0].request,
                                                 line_kind="river")
    assert loaded.segments[1].is_straight


@pytest.mark.parametrize("text", ["not json", '{"format": "other"}',
                                  '{"format": "roadtracer-session", "lines": [{}], "params": {}}'])
def test_bad_session_is_named(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SessionReadError, match="bad.json"):
        read_session(path)


def _valid_session(tmp_path) -> dict:
    """A session document of one river line: a traced segment and a straight one."""
    model = LinesModel()
    line = model.add_line((1, 2), (30, 4), traced((1, 2), (30, 4)), kind="river")
    model.append_segment(line.id, (40, 40), straight((30, 4), (40, 40)))
    path = tmp_path / "valid.json"
    write_session(path, str(tmp_path / "image.png"), model.lines, TraceParams(), "cpu")
    return json.loads(path.read_text())


def _set(document: dict, field: str, value) -> None:
    """Set a dotted field ("lines.0.segments.1.polyline") of a session document."""
    *parents, last = field.split(".")
    for part in parents:
        document = document[int(part)] if isinstance(document, list) else document[part]
    document[int(last) if isinstance(document, list) else last] = value


HOSTILE_FIELDS = [  # (field, value, what the message names)
    ("image", 12345, "image must be a file path or null, got 12345"),
    ("version", 99, "session version 99"),
    ("backend", "quantum", "backend must be one of auto, cpu, gpu"),
    ("params", [], "params must be an object, got list"),
    ("params.max_angle", "30", r"params.max_angle must be a number in \[1, 180\]"),
    ("params.max_angle", 500, r"params.max_angle must be a number in \[1, 180\]"),
    ("params.max_angle", 0.5, r"params.max_angle must be a number in \[1, 180\]"),
    ("params.guides", 3.5, r"params.guides must be a whole number in \[1, 200\]"),
    ("params.guides", True, r"params.guides must be a whole number"),
    ("params.points", 5000, r"params.points must be a whole number in \[2, 1001\]"),
    ("params.halfwidth", -5, r"params.halfwidth must be a number in \[0.1, 1000\]"),
    ("params.sigma", 22.555, r"params.sigma must be a number in \[0.5, 20\] with at most 2"),
    ("params.score", "magic", "params.score must be one of surface"),
    ("params.evidence_path", 7, "params.evidence_path must be a file path or null"),
    ("params.colour", "red", r"params has unknown tracing parameters \['colour'\]"),
    ("lines", {}, "lines must be a list of lines, got dict"),
    ("lines.0", 5, r"lines\[0\] must be an object, got 5"),
    ("lines.0.id", "1", r"lines\[0\].id must be a whole number, got '1'"),
    ("lines.0.name", None, r"lines\[0\].name must be a string, got None"),
    ("lines.0.kind", "canal", r"lines\[0\].kind must be one of road, river, got 'canal'"),
    ("lines.0.visible", "yes", r"lines\[0\].visible must be true or false"),
    ("lines.0.anchors", [[1, 2], [30, "x"], [40, 40]], r"lines\[0\].anchors must be a list"),
    ("lines.0.anchors", [[1, 2], [30, 4], [40, float("nan")]], r"lines\[0\].anchors must be"),
    ("lines.0.anchors", [[1, 2], [30, 4], [1e300, 40]], r"lines\[0\].anchors must be"),
    ("lines.0.anchors", [[1, 2], [40, 40]], r"lines\[0\]: 2 anchors for 2 segments"),
    ("lines.0.segments", "none", r"lines\[0\].segments must be a list of segments"),
    ("lines.0.segments.0", [], r"lines\[0\].segments\[0\] must be an object, got list"),
    ("lines.0.segments.0.polyline", [[1, 2]], r"lines\[0\].segments\[0\].polyline must be"),
    ("lines.0.segments.0.link_scores", [1.0], r"lines\[0\].segments\[0\].link_scores must be "
                                              "2 numbers"),
    ("lines.0.segments.0.score", "high", r"lines\[0\].segments\[0\].score must be a number"),
    ("lines.0.segments.0.request", {"max_angle": 1000},
     r"lines\[0\].segments\[0\].request.max_angle must be a number in \[1, 180\]"),
    ("lines.0.segments.0.params", None, r"lines\[0\].segments\[0\].params must be the param"),
    ("lines.0.segments.0.params.points", 10 ** 9,
     r"lines\[0\].segments\[0\].params.points must be a whole number in \[2, 1335\]"),
    ("lines.0.segments.1.backend", 3, r"lines\[0\].segments\[1\].backend must be a string"),
]


@pytest.mark.parametrize(("field", "value", "message"), HOSTILE_FIELDS,
                         ids=[f"{field}={value!r}"[:40] for field, value, _ in HOSTILE_FIELDS])
def test_hostile_session_names_the_bad_field(tmp_path, field, value, message):
    document = _valid_session(tmp_path)
    path = tmp_path / "hostile.json"
    _set(document, field, value)
    path.write_text(json.dumps(document))
    with pytest.raises(SessionReadError, match=message) as caught:
        read_session(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_valid_session_document_reads(tmp_path):
    """The document the hostile cases start from is itself accepted."""
    path = tmp_path / "valid-again.json"
    path.write_text(json.dumps(_valid_session(tmp_path)))
    _, (line,), params, backend = read_session(path)
    assert (line.kind, len(line.segments), params, backend) == ("river", 2, TraceParams(), "cpu")


def test_repeated_line_ids_are_refused(tmp_path):
    document = _valid_session(tmp_path)
    document["lines"].append(document["lines"][0])
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SessionReadError, match=r"line ids repeat \(\[1, 1\]\)"):
        read_session(path)


def test_deeply_nested_session_is_refused(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(SessionReadError, match="deep.json nests arrays or objects deeper than"):
        read_session(path)


def test_a_session_of_lines_traced_at_the_panels_limits_reads_back(tmp_path):
    """Automatic points per guide follow the half-width: at the panel's widest half-width a
    trace uses more points than the panel offers, and its session must still read back."""
    used = TraceParams(halfwidth=1000.0).resolve(300.0)
    assert used.points > 1001
    segment = replace(traced((0, 0), (300, 0)), request=TraceParams(halfwidth=1000.0),
                      params=used)
    model = LinesModel()
    model.add_line((0, 0), (300, 0), segment)
    path = tmp_path / "wide.json"
    write_session(path, str(tmp_path / "image.png"), model.lines, TraceParams(), "cpu")
    assert read_session(path)[1][0].segments[0].params.points == used.points


def test_an_unreadable_autosave_is_kept_aside(tmp_path):
    from app.files import autosave_path, load_autosave, set_aside_bad_autosave

    image = str(tmp_path / "image.png")
    path = autosave_path(str(tmp_path), image)
    with open(path, "w") as handle:
        handle.write("{not json")
    with pytest.raises(SessionReadError) as caught:
        load_autosave(str(tmp_path), image)
    assert re.search(r"the file is kept as .*\.bad",
                     str(set_aside_bad_autosave(str(tmp_path), image, caught.value)))
    assert not os.path.exists(path)
    assert open(path + ".bad").read() == "{not json"
    assert load_autosave(str(tmp_path), image) is None


def test_undo_keeps_the_last_steps_only():
    model = LinesModel()
    line = model.add_line((0, 0), (10, 0), straight((0, 0), (10, 0)))
    for number in range(MAX_UNDO + 20):
        model.rename(line.id, f"name {number}")
    undone = 0
    while model.undo():
        undone += 1
    assert undone == MAX_UNDO
    assert model.line(line.id).name == "name 19"  # the oldest step kept, undone
    while model.redo():
        pass
    assert model.line(line.id).name == f"name {MAX_UNDO + 19}"


def test_lines_are_found_by_id_after_every_kind_of_edit_without_a_search():
    model = LinesModel()
    first = model.add_line((0, 0), (10, 0), straight((0, 0), (10, 0)))
    middle, last = model.add_lines([(f"Road {n}", "road", ((n, 0), (n, 9)),
                                     (straight((n, 0), (n, 9)),)) for n in (1, 2)])
    model.delete(middle.id)
    assert model.line(middle.id) is None
    assert model.line(last.id) is last
    renamed = model.rename(last.id, "Last")
    assert [line.name for line in model.lines] == [first.name, "Last"]
    model.undo()
    model.undo()
    assert model.line(middle.id) is middle
    assert model.line(last.id) is last
    model.redo()
    assert model.line(middle.id) is None
    model.redo()
    assert model.line(last.id) is renamed
    # Found by id, not looked for through the lines: once the lines are counted (after a
    # reset), a look-up reads one line by its index and walks none of them.
    model.reset(tuple(Line(n, f"Road {n}", "road", ((0, 0), (1, 1)), (straight((0, 0), (1, 1)),))
                      for n in range(1, 20_001)))
    assert model.line(1).id == 1  # counted here

    class Unsearchable(tuple):
        """The lines, to be read by index only: walking or searching them fails."""

        reads = 0

        def __getitem__(self, index):
            Unsearchable.reads += 1
            return super().__getitem__(index)

        def _searched(self, *args):
            raise AssertionError("a look-up by id walked the lines")

        __iter__ = __contains__ = __reversed__ = index = count = _searched

    model._lines = Unsearchable(model._lines)
    assert all(model.line(n).id == n for n in (20_000, 1, 10_000) * 100)
    assert Unsearchable.reads == 300  # one line read by index per look-up
    assert model.line(20_001) is None
    assert Unsearchable.reads == 300


def test_same_lines_compares_what_a_session_holds(tmp_path):
    model = LinesModel()
    line = model.add_line((1, 2), (30, 4), traced((1, 2), (30, 4)))
    model.append_segment(line.id, (40, 40), straight((30, 4), (40, 40)))
    path = tmp_path / "s.json"
    write_session(path, str(tmp_path / "image.png"), model.lines, TraceParams(), "cpu")
    read = read_session(path)[1]
    assert read[0] is not model.lines[0]
    assert same_lines(read, model.lines)
    moved = model.line(line.id).segments[0]
    model.replace_segments(line.id, model.line(line.id).anchors, {0: replace(
        moved, polyline=moved.polyline + [[0, 0], [0, 0.5], [0, 0]])}, "Move vertex")
    assert not same_lines(read, model.lines)
    assert not same_lines(read, ())


def test_sessions_are_written_compact_and_indented_ones_still_read(tmp_path):
    model = LinesModel()
    model.add_line((1, 2), (30, 4), traced((1, 2), (30, 4)))
    path = tmp_path / "s.json"
    write_session(path, str(tmp_path / "image.png"), model.lines, TraceParams(), "cpu",
                  (640, 480))
    text = path.read_text()
    assert text.count("\n") == 1  # one line, no spaces
    assert ", " not in text
    document = json.loads(text)
    assert list(document)[-1] == "lines"
    assert document["image_size"] == [640, 480]
    assert load_session(path).image_size == (640, 480)
    del document["image_size"]  # as written before sessions recorded it, indented
    path.write_text(json.dumps(document, indent=1))
    session = load_session(path)
    assert session.image_size is None
    assert same_lines(session.lines, model.lines)


def test_an_edit_re_encodes_only_the_lines_it_replaced(tmp_path, monkeypatch):
    model = LinesModel()
    for n in range(3):
        model.add_line((n, 0), (n, 9), traced((n, 0), (n, 9)))
    encoded, line_to_dict = [], app.session.line_to_dict
    monkeypatch.setattr(app.session, "line_to_dict",
                        lambda line: encoded.append(line.id) or line_to_dict(line))
    encoder = LineEncoder()
    path = tmp_path / "s.json"
    write_session(path, "image.png", model.lines, TraceParams(), "cpu", encoder=encoder)
    model.rename(2, "Renamed")
    write_session(path, "image.png", model.lines, TraceParams(), "cpu", encoder=encoder)
    assert encoded == [1, 2, 3, 2]
    assert same_lines(read_session(path)[1], model.lines)



def test_a_lines_box_is_worked_out_where_it_is_made():
    """A line's box (and its joined polyline) are made with the line: for a session read, in
    the worker, not when the canvas first shows thousands of lines."""
    line = Line(1, "L", "road", ((0.0, 0.0), (30.0, 5.0), (10.0, 40.0)),
                (straight((0.0, 0.0), (30.0, 5.0)), straight((30.0, 5.0), (10.0, 40.0))))
    assert "polyline" in vars(line)
    np.testing.assert_array_equal(line.bounds, [[0.0, 0.0], [30.0, 40.0]])
    renamed = replace(line, name="M")
    assert renamed.bounds is not line.bounds
    np.testing.assert_array_equal(renamed.bounds, line.bounds)


def test_lines_changed_back_to_the_saved_state_are_not_dirty():
    """Renamed and renamed back, hidden and shown again: the lines are as saved, with new
    objects; a real change among them still counts."""
    model = LinesModel()
    line = model.add_line((0, 0), (10, 0), traced((0, 0), (10, 0)))
    other = model.add_line((0, 5), (10, 5), traced((0, 5), (10, 5)))
    model.mark_saved()
    model.rename(line.id, "Main road")
    model.rename(line.id, line.name)
    assert not model.dirty
    model.set_visible(other.id, False)
    assert model.dirty
    model.set_visible(other.id, True)
    assert not model.dirty
    model.append_segment(line.id, (20, 5), straight((10, 0), (20, 5)))
    assert model.dirty
    model.undo()
    assert not model.dirty
