"""Hostile files the app reads: sessions and autosaves with out-of-range numbers or segments the
canvas cannot paint, and GeoJSON imports with a malformed or untransformable ``crs``."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from app.files import autosave_path, load_autosave, set_aside_bad_autosave
from app.model import Line, LinesModel, Segment
from app.session import SessionReadError, read_session, write_session
from core.errors import OutputWriteError
from core.georef import GeorefError, transform_points
from core.tracer import TraceParams
from core.vectors import read_lines
from tests.helpers import traced
from tests.test_vectors import PIXELS, collection, georeferenced_raster, write

HUGE = "1" + "0" * 400  # a JSON integer no float holds
ENGINEERING_CRS = ('ENGCRS["site",EDATUM["site datum"],CS[Cartesian,2],'
                   'AXIS["x",east,LENGTHUNIT["metre",1]],AXIS["y",north,LENGTHUNIT["metre",1]]]')


def session_document(tmp_path) -> dict:
    """A session of one line: segment 0 traced (3 polyline points), segment 1 straight."""
    model = LinesModel()
    line = model.add_line((1, 2), (30, 4), traced((1, 2), (30, 4)))
    model.append_segment(line.id, (40, 40), Segment.straight((30, 4), (40, 40)))
    path = tmp_path / "valid.json"
    write_session(path, str(tmp_path / "image.png"), model.lines, TraceParams(), "cpu")
    return json.loads(path.read_text())


def read_text(tmp_path, text: str):
    path = tmp_path / "hostile.json"
    path.write_text(text)
    return read_session(path)


def read_document(tmp_path, document: dict):
    return read_text(tmp_path, json.dumps(document))


def segment(document: dict, index: int) -> dict:
    return document["lines"][0]["segments"][index]


def put(document: dict, field: str, value) -> None:
    """Set a dotted field ("lines.0.segments.1.polyline.1.0") of a session document."""
    *parents, last = field.split(".")
    for part in parents:
        document = document[int(part)] if isinstance(document, list) else document[part]
    document[int(last) if isinstance(document, list) else last] = value


@pytest.mark.parametrize(("field", "message"), [
    ("lines.0.anchors.2.0", r"lines\[0\].anchors must"),
    ("lines.0.segments.1.polyline.1.1", r"lines\[0\].segments\[1\].polyline must"),
    ("lines.0.segments.0.link_scores.0", r"lines\[0\].segments\[0\].link_scores must be 2 "),
    ("lines.0.segments.0.score", r"lines\[0\].segments\[0\].score must be a number"),
    ("lines.0.segments.1.score", r"lines\[0\].segments\[1\].score must be a number"),
])
def test_integers_beyond_a_float_are_refused_naming_the_field(tmp_path, field, message):
    document = session_document(tmp_path)
    put(document, field, "HUGE")
    with pytest.raises(SessionReadError, match=message) as caught:
        read_text(tmp_path, json.dumps(document).replace('"HUGE"', HUGE))
    assert len(str(caught.value)) < 300  # the number is cut short, not printed whole


@pytest.mark.parametrize("scores", [[], [1.0], [1.0, 2.0, 3.0]])
def test_a_traced_segment_needs_one_link_score_per_link(tmp_path, scores):
    """The canvas pairs every link of a traced segment with its score."""
    document = session_document(tmp_path)
    segment(document, 0)["link_scores"] = scores
    with pytest.raises(SessionReadError, match=r"segments\[0\].link_scores must be 2 numbers "
                                               rf"\(finite, one per link\), got {len(scores)}"):
        read_document(tmp_path, document)


def test_an_empty_request_is_a_traced_segment_and_needs_its_link_scores(tmp_path):
    """``"request": {}`` is a trace at the default parameters, not a straight segment."""
    document = session_document(tmp_path)
    segment(document, 0).update(request={}, link_scores=[])
    with pytest.raises(SessionReadError, match=r"segments\[0\].link_scores must be 2 numbers"):
        read_document(tmp_path, document)
    segment(document, 0)["link_scores"] = [-1.0, -2.0]
    assert not read_document(tmp_path, document)[1][0].segments[0].is_straight


def test_a_straight_segment_has_no_link_scores(tmp_path):
    document = session_document(tmp_path)
    segment(document, 1)["link_scores"] = [1.0]
    with pytest.raises(SessionReadError, match=r"segments\[1\].link_scores must be empty"):
        read_document(tmp_path, document)


@pytest.mark.parametrize("score", ["null", "Infinity", "-Infinity", "NaN"])
def test_a_traced_segment_needs_a_finite_score(tmp_path, score):
    """A traced score that is not a finite number would make the GeoJSON export fail."""
    document = session_document(tmp_path)
    segment(document, 0)["score"] = "SCORE"
    with pytest.raises(SessionReadError, match=r"segments\[0\].score must be a number \(finite"):
        read_text(tmp_path, json.dumps(document).replace('"SCORE"', score))


@pytest.mark.parametrize(("score", "accepted"), [("null", True), ("4.5", True),
                                                 ("Infinity", False), ("NaN", False)])
def test_a_straight_segment_score_is_null_or_finite(tmp_path, score, accepted):
    document = session_document(tmp_path)
    segment(document, 1)["score"] = "SCORE"
    text = json.dumps(document).replace('"SCORE"', score)
    if accepted:
        assert math.isnan(read_text(tmp_path, text)[1][0].segments[1].score)
    else:
        with pytest.raises(SessionReadError, match=r"segments\[1\].score must be a number"):
            read_text(tmp_path, text)


def test_the_writer_writes_straight_scores_as_null_and_traced_ones_as_numbers(tmp_path):
    session_document(tmp_path)
    text = (tmp_path / "valid.json").read_text()
    scores = [s["score"] for s in json.loads(text)["lines"][0]["segments"]]
    assert scores == [-3.0, None]
    (line,) = read_text(tmp_path, text)[1]
    assert line.segments[0].score == -3.0
    assert math.isnan(line.segments[1].score)


@pytest.mark.parametrize("bad", [
    Line(1, "Road 1", "road", ((0.0, 0.0), (math.inf, 5.0)),
         (Segment.straight((0.0, 0.0), (math.inf, 5.0)),)),
    Line(1, "Road 1", "road", ((0.0, 0.0), (10.0, 5.0)),
         (dataclasses.replace(traced((0.0, 0.0), (10.0, 5.0)), score=math.inf),)),
    Line(1, "Road 1", "road", ((0.0, 0.0), (10.0, 5.0)),
         (dataclasses.replace(traced((0.0, 0.0), (10.0, 5.0)),
                              polyline=np.array([[0.0, 0.0], [np.nan, 3.0], [10.0, 5.0]])),)),
    Line(1, "Road 1", "road", ((0.0, 0.0), (10.0, 5.0)),
         (dataclasses.replace(traced((0.0, 0.0), (10.0, 5.0)),
                              link_scores=np.array([-1.0, -math.inf])),))],
    ids=["anchor", "traced score", "polyline point", "link score"])
def test_a_line_that_is_not_finite_is_not_written_over_a_session(tmp_path, bad):
    """No bare NaN or Infinity token (which no JSON reader accepts) is ever written."""
    path = tmp_path / "work.json"
    path.write_text("the session before")
    with pytest.raises(OutputWriteError, match="not a finite number"):
        write_session(path, str(tmp_path / "image.png"), (bad,), TraceParams(), "cpu")
    assert path.read_text() == "the session before"


def test_a_session_keeps_every_number_to_the_last_bit(tmp_path):
    """Lines read back from a session are the lines written: every float64 of the polylines
    and link scores (written in their fewest digits) comes back the same."""
    rng = np.random.default_rng(0)
    polyline = np.cumsum(rng.normal(0, 1, (500, 2)), axis=0) * np.array([1e-3, 1e5])
    segment = Segment(polyline, rng.normal(0, 1, 499) * 10.0 ** rng.integers(-300, 300, 499),
                      -1e-308, TraceParams(), TraceParams(guides=3, points=5, halfwidth=2.0),
                      "cpu")
    line = Line(7, "Road 7", "road", (tuple(polyline[0]), tuple(polyline[-1])), (segment,))
    path = tmp_path / "work.json"
    write_session(path, str(tmp_path / "image.png"), (line,), TraceParams(), "cpu")
    (back,) = read_session(path)[1]
    np.testing.assert_array_equal(back.segments[0].polyline, polyline)
    np.testing.assert_array_equal(back.segments[0].link_scores, segment.link_scores)
    assert back.segments[0].score == -1e-308
    assert back.anchors == line.anchors


@pytest.mark.parametrize(("line_id", "accepted"), [(0, True), (2 ** 31 - 1, True),
                                                   (2 ** 31, False), (2 ** 63, False),
                                                   (-1, False)])
def test_line_ids_stay_in_a_safe_range(tmp_path, line_id, accepted):
    """Qt's item data overflows from 2**63 on: ids (and those new lines get) stay far below."""
    document = session_document(tmp_path)
    document["lines"][0]["id"] = line_id
    if accepted:
        assert read_document(tmp_path, document)[1][0].id == line_id
    else:
        with pytest.raises(SessionReadError,
                           match=r"lines\[0\].id must be a whole number in \[0, 2147483647\]"):
            read_document(tmp_path, document)


def test_versions_below_1_are_refused_and_huge_ones_cut_short(tmp_path):
    document = session_document(tmp_path)
    document["version"] = 0
    with pytest.raises(SessionReadError, match="version must be a whole number from 1, got 0"):
        read_document(tmp_path, document)
    document["version"] = "HUGE"
    with pytest.raises(SessionReadError, match="is newer than") as caught:
        read_text(tmp_path, json.dumps(document).replace('"HUGE"', HUGE))
    assert len(str(caught.value)) < 300


def test_every_broken_autosave_is_kept(tmp_path):
    """A second broken autosave is kept beside the first, not over it."""
    image = str(tmp_path / "image.png")
    path = autosave_path(str(tmp_path), image)
    contents = ["{not json", json.dumps(session_document(tmp_path)).replace("[1, 2]",
                                                                           f"[{HUGE}, 2]")]
    for number, text in enumerate(contents, 1):
        with open(path, "w") as handle:
            handle.write(text)
        kept = path + (".bad" if number == 1 else f".bad-{number}")
        with pytest.raises(SessionReadError) as caught:
            load_autosave(str(tmp_path), image)
        assert str(set_aside_bad_autosave(str(tmp_path), image, caught.value)).endswith(
            f"(the file is kept as {kept})")
        assert not os.path.exists(path)
    assert [open(path + suffix).read() for suffix in (".bad", ".bad-2")] == contents


@pytest.mark.parametrize("member", [{"type": "name", "properties": "EPSG:3857"},
                                    {"type": "name", "properties": None},
                                    {"type": "name", "properties": [1]}, None, [1]])
def test_a_crs_member_without_a_name_reads_as_longitude_latitude(tmp_path, member):
    """Like a crs member that is a bare string: no CRS named, so RFC 7946 lon/lat."""
    raster = georeferenced_raster()
    lonlat = raster.georef.pixel_to_lonlat(PIXELS)
    (line,), failures = read_lines(write(tmp_path, collection(lonlat, crs=member)), raster,
                                   "scene.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, PIXELS, atol=1e-6)


def test_exported_anchors_beyond_a_float_give_way_to_the_geometry(tmp_path):
    path = write(tmp_path, collection(PIXELS, {"anchors": [[100, 200], "HUGE"]},
                                      coordinate_space="pixel"))
    with open(path) as handle:
        text = handle.read().replace('"HUGE"', f"[{HUGE}, 90]")
    with open(path, "w") as handle:
        handle.write(text)
    (line,), failures = read_lines(path, georeferenced_raster(), "scene.tif")
    assert failures == []
    np.testing.assert_allclose(line.anchors, PIXELS)


def test_a_crs_proj_cannot_transform_is_a_georef_error(tmp_path):
    import pyproj

    raster = georeferenced_raster()
    with pytest.raises(GeorefError, match="from 'site' to 'WGS 84 / UTM zone 54N'"):
        transform_points(PIXELS, pyproj.CRS.from_wkt(ENGINEERING_CRS), raster.georef.crs)
    document = collection(PIXELS, crs={"type": "name", "properties": {"name": ENGINEERING_CRS}})
    with pytest.raises(GeorefError, match="PROJ cannot transform coordinates from 'site'"):
        read_lines(write(tmp_path, document), raster, "scene.tif")


def test_a_polyline_of_too_many_points_is_refused_at_once(tmp_path):
    from app.session import MAX_POINTS

    document = session_document(tmp_path)
    points = np.linspace((30, 4), (40, 40), MAX_POINTS + 1).tolist()
    put(document, "lines.0.segments.1.polyline", points)
    with pytest.raises(SessionReadError, match=rf"segments\[1\].polyline must be a list of 2 "
                                               rf"to {MAX_POINTS}"):
        read_document(tmp_path, document)
    put(document, "lines.0.segments.1.polyline", points[:MAX_POINTS - 1] + points[-1:])
    (line,) = read_document(tmp_path, document)[1]
    assert len(line.segments[1].polyline) == MAX_POINTS


@pytest.mark.parametrize("value", [[572], [0, 10], [True, 5], [1.5, 2], "572x572",
                                   [10 ** 400, 3], {"width": 1}])
def test_a_bad_image_size_is_named(tmp_path, value):
    document = session_document(tmp_path)
    document["image_size"] = value
    with pytest.raises(SessionReadError, match=r"image_size must be null or \[width, height\]"):
        read_document(tmp_path, document)
    document["image_size"] = None  # as in a session of an image whose size was not known
    assert read_document(tmp_path, document)[1]
