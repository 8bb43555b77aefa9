"""The Qt-free parts of the application: lines model, undo/redo, sessions."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from app.model import Line, LinesModel, Segment, distance_to_polyline
from app.session import SessionReadError, read_session, write_session
from core.tracer import TraceParams, trace
from tests.synthetic import BULGE, road_image


def straight(a, b) -> Segment:
    return Segment.straight(a, b)


def traced(a, b) -> Segment:
    polyline = np.array([a, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 1), b], dtype=float)
    return Segment(polyline, np.array([-1.0, -2.0]), -3.0, TraceParams(),
                   TraceParams(guides=1, points=5, halfwidth=2.0), "cpu")


def test_edits_undo_redo_and_dirty():
    model = LinesModel()
    calls = []
    model.subscribe(lambda: calls.append(len(model.lines)))
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


def test_distance_to_polyline():
    polyline = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])
    distances = distance_to_polyline([[5, 3], [12, 5], [-3, -4]], polyline)
    np.testing.assert_allclose(distances, [3, 2, 5])


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
