"""Big JSON files read and written a piece at a time, so that the app's window runs while its
worker reads a session or a GeoJSON file, or exports one (core.output.decode_json and
read_json, core.geojson.write_feature_collection, app.session.load_session): the values and
errors of the json module, each line or feature decoded or encoded on its own, and Python's
garbage collector paused while a session is read."""

from __future__ import annotations

import cProfile
import gc
import json
import pstats
import threading

import numpy as np
import pytest

from app.model import Line, Segment
from app.session import load_session, write_session
from core.errors import BadParameter
from core.geojson import (
    feature_collection,
    line_feature,
    write_feature_collection,
    write_geojson,
)
from core.output import MAX_JSON_DEPTH, collector_paused, decode_json, read_json
from core.raster import load_image
from core.tracer import TraceParams
from tests.conftest import SAMPLE_IMAGE


def decodings(work) -> int:
    """How many decoding calls (``json.JSONDecoder.raw_decode``, each one call into the C
    scanner that holds the interpreter lock) ``work()`` makes."""
    profile = cProfile.Profile()
    profile.runcall(work)
    return sum(calls for (_, _, name), (calls, *_) in pstats.Stats(profile).stats.items()
               if name == "raw_decode")


@pytest.mark.parametrize("text", [
    '{"type": "FeatureCollection", "features": [{"a": [1, 2.5, -3e5]}, {"b": null}]}',
    ' [ {"a": 1} , [2, [3, {"c": [true, false]}]], "s", {} ] \n', "[]", "{}", '"text"', "3",
    '{"a": 1, "a": {"b": 2}}', '{"a": [NaN, Infinity, -Infinity]}', '{"\\u00e9": "\\ud800"}',
])
def test_decode_json_reads_what_json_loads_reads(text):
    assert repr(decode_json(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", [
    "", " ", "{", '{"a"', '{"a" 1}', '{"a": 1,}', '{"a": 1 "b": 2}', "[1,]", "[1 2]",
    '{"a": [1, 2', '{"a": {"b": 1}', '{"a": 1}x', "\ufeff{}", '{1: 2}', '["\x01"]',
    '{"features": [{"a": }]}', '{"a": "unterminated', "[{}, {]",
])
def test_decode_json_fails_where_json_loads_fails_with_its_message(text):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as decoding:
        decode_json(text)
    assert (str(decoding.value), decoding.value.pos) == (str(expected.value),
                                                           expected.value.pos)


@pytest.mark.parametrize(("wrap", "around"), [
    (lambda inner: inner, 0),
    (lambda inner: {"features": [inner]}, 2),  # inside a piece of its own
    (lambda inner: [{"lines": inner}], 2),
])
def test_decode_json_refuses_nesting_deeper_than_its_limit(wrap, around):
    def nested(depth: int) -> list:
        value: list = []
        for _ in range(depth - 1):
            value = [value]
        return value

    deepest = json.dumps(wrap(nested(MAX_JSON_DEPTH - around)))
    assert decode_json(deepest) == json.loads(deepest)
    with pytest.raises(RecursionError):
        decode_json(json.dumps(wrap(nested(MAX_JSON_DEPTH - around + 1))))


def test_a_collection_is_decoded_a_feature_at_a_time(tmp_path):
    raster = load_image(SAMPLE_IMAGE)
    features = [line_feature(np.array([[10.0, 10.0 + k], [200.0, 300.0 - k]]), raster,
                             {"name": f"line {k}"}) for k in range(50)]
    path = tmp_path / "lines.geojson"
    write_geojson(path, feature_collection(features, raster))
    document = []
    assert decodings(lambda: document.append(read_json(path, "GeoJSON file"))) >= 50
    assert document[0] == json.loads(path.read_text())


def test_a_file_that_is_not_json_or_nests_too_deep_is_one_error(tmp_path):
    path = tmp_path / "broken.geojson"
    path.write_text('{"features": [{"a": 1}, {"b": 2')
    with pytest.raises(BadParameter, match=r"GeoJSON file .* is not JSON: Expecting ',' "
                                           r"delimiter: line 1 column 32 \(char 31\)"):
        read_json(path, "GeoJSON file")
    path.write_text('{"features": [' + "[" * 100 + "]" * 100 + "]}")
    with pytest.raises(BadParameter, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        read_json(path, "GeoJSON file")


def straight_line(line_id: int) -> Line:
    """A line of 3 straight segments."""
    anchors = ((10.0, 10.0 + line_id), (100.0, 50.0), (200.0, 60.0), (300.0, 90.0))
    return Line(line_id, f"Road {line_id}", "road", anchors,
                tuple(Segment.straight(a, b) for a, b in zip(anchors[:-1], anchors[1:],
                                                             strict=True)))


def test_a_session_is_read_a_line_at_a_time_the_collector_paused(tmp_path):
    path = tmp_path / "s.roadtracer.json"
    lines = tuple(straight_line(k) for k in range(1, 201))
    write_session(path, str(SAMPLE_IMAGE), lines, TraceParams(), "auto")
    collections = []
    reading = threading.Event()

    def count(phase, info) -> None:  # while the session is read (not the profiler's work)
        if phase == "start" and reading.is_set():
            collections.append(info["generation"])

    def load() -> None:
        reading.set()
        try:
            read.append(load_session(path))
        finally:
            reading.clear()

    read = []
    gc.callbacks.append(count)
    try:
        assert decodings(load) >= len(lines)
    finally:
        gc.callbacks.remove(count)
    assert all(a.same_as(b) for a, b in zip(read[0].lines, lines, strict=True))
    # Without the pause, the collector walks the lines decoded every few hundred of them.
    assert len(collections) <= 1  # the one as the collector comes back on, at most
    assert gc.isenabled()


def test_the_collector_pause_nests_and_ends_with_its_block():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError, match="in the block"), collector_paused():
        raise ValueError("in the block")
    assert gc.isenabled()


class Feature(dict):
    """A feature that says when it is freed."""

    freed: list[int] = []

    def __del__(self) -> None:
        Feature.freed.append(self["id"])


def test_features_are_written_as_made_never_all_held(tmp_path):
    raster = load_image(SAMPLE_IMAGE)

    def feature(k: int) -> dict:
        return line_feature(np.array([[10.0, 10.0], [200.0, 300.0 - k]]), raster, {"k": k})

    def made_one_at_a_time():
        for k in range(20):
            assert Feature.freed == list(range(k - 1))  # all freed but the last made
            yield Feature(feature(k), id=k)

    Feature.freed = []
    written, whole = tmp_path / "made.geojson", tmp_path / "whole.geojson"
    write_feature_collection(written, made_one_at_a_time(), raster)
    write_geojson(whole, feature_collection([{**feature(k), "id": k} for k in range(20)],
                                            raster))
    assert written.read_text() == whole.read_text()  # the same text, byte for byte
