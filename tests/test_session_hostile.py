"""Session files are hostile until validated.

Text that is not Unicode is refused where it is read and never written; messages stay short
whatever a file holds; a file or one of its values too large to read is refused before it is
read or decoded; line ids and names stay within what a session holds; segments run between their
anchors; a relative image path that is a folder is not the image; an evidence raster of the
wrong size is refused from its header, in the worker."""

from __future__ import annotations

import builtins
import io
import json
import os
import threading
import tracemalloc

import imageio.v3 as iio
import numpy as np
import pytest

import app.main_window
import core.tracer
from app.files import AutosaveWriter, autosave_path, write_autosave
from app.model import LINE_ID_LIMIT, MAX_NAME_CHARS, Line, LinesModel, Segment
from app.session import (
    MAX_POINTS,
    MAX_SESSION_BYTES,
    MAX_VALUE_CHARS,
    SessionReadError,
    load_session,
    write_session,
)
from core.errors import BadParameter, OutputWriteError
from core.output import MAX_JSON_BYTES, JsonLimits, decode_json, read_json
from core.raster import Raster
from core.tracer import TraceParams, evidence_source
from tests import test_app
from tests.conftest import SAMPLE_IMAGE
from tests.helpers import traced
from tests.test_app_hostile_files import put, session_document

make_window = test_app.make_window  # the fixture: windows closed, their workers stopped

#: Longest message a bad file may give (its path included).
MAX_MESSAGE = 500


def read_document(tmp_path, document: dict | str):
    path = tmp_path / "hostile.roadtracer.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return load_session(path)


def refusal(tmp_path, document: dict | str) -> str:
    with pytest.raises(SessionReadError) as caught:
        read_document(tmp_path, document)
    return str(caught.value)


def straight_line(line_id: int, name: str = "Road") -> Line:
    return Line(line_id, name, "road", ((1.0, 2.0), (30.0, 4.0)),
                (Segment.straight((1.0, 2.0), (30.0, 4.0)),))


# -- 1. text that is not Unicode ------------------------------------------------------------------
@pytest.mark.parametrize("field", [
    "lines.0.name", "lines.0.kind", "lines.0.segments.0.backend", "image", "image_relative",
    "backend", "params.evidence_path", "lines.0.segments.0.request.evidence_path",
])
def test_a_lone_surrogate_is_refused_naming_its_field(tmp_path, field):
    document = session_document(tmp_path)
    put(document, field, "Road \udc80")  # json.dumps writes it "\udc80": valid JSON
    message = refusal(tmp_path, document)
    where = field.replace(".0", "[0]")
    assert f"{where} must be valid Unicode text (no lone surrogate), got 'Road \\udc80'" \
        in message


def test_a_line_that_is_not_unicode_text_is_not_written(tmp_path):
    path = tmp_path / "work.roadtracer.json"
    with pytest.raises(OutputWriteError, match=r"cannot write session .*work.roadtracer.json: "
                                               r"line 7 'Road \\udc80' cannot be written: "
                                               r"str is not valid UTF-8"):
        write_session(path, str(SAMPLE_IMAGE), (straight_line(7, "Road \udc80"),),
                      TraceParams(), "cpu")
    with pytest.raises(OutputWriteError, match="its image path or parameters are not valid "
                                               "Unicode text"):
        write_session(path, str(tmp_path / "a\udc80.png"), (), TraceParams(), "cpu")
    assert not path.exists()
    writer = AutosaveWriter(str(tmp_path / "autosave"))
    writer.put(str(SAMPLE_IMAGE), (straight_line(7, "Road \udc80"),), TraceParams(), "cpu",
               None)
    with pytest.raises(OutputWriteError, match="str is not valid UTF-8"):
        writer.write_waiting()


def test_an_image_whose_name_is_not_utf8_has_an_autosave_that_says_it_cannot_be_written(
        tmp_path):
    """Python keeps a file name's bytes that are not UTF-8 as lone surrogates: the autosave's
    name is made of them, its writing fails with a message, not a UnicodeEncodeError."""
    image = str(tmp_path / "caf\udce9.png")
    assert autosave_path(str(tmp_path), image) != autosave_path(str(tmp_path), "caf\udce8.png")
    with pytest.raises(OutputWriteError, match="its image path or parameters are not valid "
                                               "Unicode text"):
        write_autosave(str(tmp_path / "autosave"), image, (straight_line(1),), TraceParams(),
                       "cpu")


def test_saving_a_line_that_is_not_unicode_text_says_so(make_window, qtbot, tmp_path):
    """Ctrl+S shows a message box; the autosave says it failed; closing does not raise."""
    window = make_window()
    window.model.reset((straight_line(1, "Road \udc80"),))
    with qtbot.capture_exceptions() as raised:
        with qtbot.waitSignal(window.error_shown, timeout=5_000):
            assert not window.write_session(str(tmp_path / "work.roadtracer.json"))
        window.autosave()
    assert not raised
    assert "cannot be written: str is not valid UTF-8" in window.last_error
    assert window.status_text.startswith("autosave failed: cannot write session")
    with qtbot.capture_exceptions() as raised:
        window.close()
    assert not raised


def test_imported_and_renamed_lines_get_names_a_session_holds(tmp_path):
    model = LinesModel()
    (line,) = model.add_lines([("Ro\udc80d", "road", ((1.0, 2.0), (30.0, 4.0)),
                                (Segment.straight((1.0, 2.0), (30.0, 4.0)),))])
    assert line.name == "Ro\\x80d"
    long_name = model.rename(line.id, "N" * 10_000_000).name
    assert long_name == "N" * (MAX_NAME_CHARS - 1) + "…"
    path = tmp_path / "names.roadtracer.json"
    write_session(path, str(SAMPLE_IMAGE), model.lines, TraceParams(), "cpu")
    assert load_session(path).lines[0].name == long_name


# -- 2. short messages ----------------------------------------------------------------------------
MEGABYTE = "A" * 1_000_000
DIGITS = "9" * 4000


def _hostile_documents(tmp_path) -> dict[str, str]:
    """Documents (as text) whose messages once held what they hold: up to a megabyte."""
    base = session_document(tmp_path)
    cases = {}
    for name, field, value in [
        ("score of 1 MB", "params.score", MEGABYTE),
        ("backend of 1 MB", "backend", MEGABYTE),
        ("segment backend of 1 MB", "lines.0.segments.1.backend", ["B" * 1_000_000]),
        ("line kind of 1 MB", "lines.0.kind", MEGABYTE),
        ("line kind of a request", "lines.0.segments.0.request.line_kind", MEGABYTE),
        ("evidence path a list of 1 MB", "params.evidence_path", [MEGABYTE]),
        ("evidence path of 1 MB with a surrogate", "params.evidence_path",
         MEGABYTE + "\udc80"),
        ("name of 1 MB", "lines.0.name", MEGABYTE),
    ]:
        document = json.loads(json.dumps(base))
        put(document, field, value)
        cases[name] = json.dumps(document)
    document = json.loads(json.dumps(base))
    document["params"].update({f"key {k} " + "k" * 100: 1 for k in range(100_000)})
    cases["100 000 unknown parameters"] = json.dumps(document)
    document = json.loads(json.dumps(base))
    document["lines"] = [document["lines"][0]] * 20_000
    cases["20 000 repeated ids"] = json.dumps(document)
    text = json.dumps(base)
    for name, old, new in [
        ("max_angle of 4000 digits", '"max_angle": 60.0', f'"max_angle": {DIGITS}'),
        ("guides of 4000 digits", '"guides": null', f'"guides": {DIGITS}'),
        ("traced points of 4000 digits", '"points": 5', f'"points": {DIGITS}'),
        ("id of 4000 digits", '"id": 1', f'"id": {DIGITS}'),
        ("version of 4000 digits", '"version": 1', f'"version": {DIGITS}'),
        ("anchor of 4000 digits", '"anchors": [[1', f'"anchors": [[{DIGITS}'),
    ]:
        assert old in text, old
        cases[name] = text.replace(old, new, 1)
    return cases


def test_every_message_of_a_hostile_session_is_short(tmp_path):
    for name, text in _hostile_documents(tmp_path).items():
        message = refusal(tmp_path, text)
        assert len(message) < MAX_MESSAGE, (name, len(message), message[:300])


def test_short_messages_name_the_first_keys_and_ids(tmp_path):
    document = session_document(tmp_path)
    document["params"].update({f"k{k:06}": 1 for k in range(100_000)})
    assert "params has unknown tracing parameters ['k000000', 'k000001', 'k000002', " \
           "'k000003', 'k000004'] and 99995 more" in refusal(tmp_path, document)
    document = session_document(tmp_path)
    document["lines"] = [dict(document["lines"][0], id=k) for k in range(1, 20_000)] + \
        [document["lines"][0]]
    assert "lines: line ids repeat ([1, 1])" in refusal(tmp_path, document)


def test_a_megabyte_message_box_is_not_shown(make_window, qtbot, tmp_path):
    window = test_app.window_with_a_line(make_window, qtbot)
    path = tmp_path / "score.roadtracer.json"
    assert window.write_session(str(path))
    document = json.loads(path.read_text())
    document["params"]["score"] = MEGABYTE
    path.write_text(json.dumps(document))
    with qtbot.waitSignal(window.error_shown, timeout=30_000):
        assert window.open_session(str(path))
    assert "params.score must be one of" in window.last_error
    assert len(window.last_error) < MAX_MESSAGE
    assert len(window.model.lines) == 1  # what the window had stays


# -- 3. files and values too large ----------------------------------------------------------------
def sparse_file(path, size: int):
    with open(path, "wb") as stream:
        stream.truncate(size)
    return path


def test_a_session_over_its_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = sparse_file(tmp_path / "sparse.roadtracer.json", 2 * MAX_SESSION_BYTES)
    opened = []

    def guarded(real):
        def open_(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and os.fspath(file) in (
                    str(path), bytes(path)):
                opened.append(file)
                raise AssertionError(f"{file} was opened to be read")
            return real(file, *args, **kwargs)
        return open_

    monkeypatch.setattr(builtins, "open", guarded(builtins.open))
    monkeypatch.setattr(io, "open", guarded(io.open))
    with pytest.raises(SessionReadError, match=r"cannot read session .*sparse.roadtracer.json: "
                                               r"it is 2.0 GiB, over the limit of 1.0 GiB"):
        load_session(path)
    assert opened == []  # refused from its size: not a byte of it read


def test_a_json_file_over_the_limit_of_its_reader_is_refused_before_it_is_read(tmp_path):
    path = sparse_file(tmp_path / "seeds.geojson", MAX_JSON_BYTES + 1024 ** 3)
    with pytest.raises(BadParameter, match=r"cannot read seeds file .*seeds.geojson: it is "
                                           r"3.0 GiB, over the limit of 2.0 GiB"):
        read_json(path, "seeds file")
    path.write_text('{"a": 1}')
    with pytest.raises(BadParameter, match=r"it is 8 B, over the limit of 7 B"):
        read_json(path, "cases file", limits=JsonLimits(file_bytes=7))
    assert read_json(path, "cases file", limits=JsonLimits(file_bytes=8)) == {"a": 1}


def test_a_polyline_too_long_to_decode_is_refused_before_it_is_decoded(tmp_path):
    """Ten times MAX_POINTS points: decoded, several hundred MB; refused, the file's text."""
    document = session_document(tmp_path)
    put(document, "lines.0.segments.1.polyline", "POLYLINE")
    points = ",".join(["[35.5,22.25]"] * (10 * MAX_POINTS))
    text = json.dumps(document).replace('"POLYLINE"', f"[[30.0,4.0],{points},[40.0,40.0]]")
    path = tmp_path / "long.roadtracer.json"
    path.write_text(text)
    tracemalloc.start()
    try:
        with pytest.raises(SessionReadError, match=r"lines\[0\].segments\[1\].polyline is longer "
                                                   rf"than {MAX_VALUE_CHARS} characters"):
            load_session(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(text)  # the text read (and its copy), not a list per point


@pytest.mark.parametrize("value", [
    '{"x": [' + ",".join(["[1,2]"] * 3_000_000) + "]}",  # an object: decoded in windows
    '"' + "s" * (MAX_VALUE_CHARS + 1) + '"',
    "[" + ",".join(['"a"'] * 4_000_000) + "]",
])
def test_any_value_too_long_is_refused_naming_it(tmp_path, value):
    document = session_document(tmp_path)
    put(document, "lines.0.segments.0.request", "VALUE")
    message = refusal(tmp_path, json.dumps(document).replace('"VALUE"', value))
    assert f"lines[0].segments[0].request is longer than {MAX_VALUE_CHARS} characters" in message


def test_the_longest_polylines_the_app_writes_read_back(tmp_path):
    """MAX_POINTS points at full precision, and as json.dumps pretty-prints them."""
    rng = np.random.default_rng(0)
    polyline = np.vstack([[30.0, 4.0], rng.uniform(-9e6, 9e6, (MAX_POINTS - 2, 2)) / 3,
                          [40.0, 40.0]])
    segment = Segment(polyline, -rng.random(MAX_POINTS - 1) / 7, -3.0, TraceParams(),
                      TraceParams(guides=1, points=5, halfwidth=2.0), "cpu")
    line = Line(1, "Road 1", "road", ((30.0, 4.0), (40.0, 40.0)), (segment,))
    path = tmp_path / "longest.roadtracer.json"
    write_session(path, str(SAMPLE_IMAGE), (line,), TraceParams(), "cpu")
    np.testing.assert_array_equal(load_session(path).lines[0].segments[0].polyline, polyline)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=2))
    assert len(path.read_text()) > MAX_VALUE_CHARS / 2
    np.testing.assert_array_equal(load_session(path).lines[0].segments[0].polyline, polyline)


def test_a_session_the_reader_would_refuse_for_its_size_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setattr("app.session.MAX_SESSION_BYTES", 1000)
    path = tmp_path / "big.roadtracer.json"
    lines = tuple(straight_line(k) for k in range(1, 20))
    with pytest.raises(OutputWriteError, match=r"cannot write session .*big.roadtracer.json: it "
                                               r"would be \d.\d KiB, over the limit of 1000 B"):
        write_session(path, str(SAMPLE_IMAGE), lines, TraceParams(), "cpu")
    assert not path.exists()


@pytest.mark.parametrize("text", [
    '{"a": [[1, 2.5e-3], [-3e5, 4]], "b": [1e5, -0.5e-3, NaN], "c": {"d": "[x]"}}',
    ' [ {"a": 1} , [2, [3, {"c": [true, false]}]], "s", {} ] \n',
    '{"a": [[1, 2], [3, [4]]], "b": "\\ud834\\udd1e", "c": -Infinity}',
])
@pytest.mark.parametrize("window", [1, 3, 1024])
def test_values_of_bounded_length_decode_as_json_loads_decodes_them(monkeypatch, text, window):
    monkeypatch.setattr("core.output.FIRST_WINDOW_CHARS", window)
    monkeypatch.setattr("core.output.WINDOW_GROWTH", 2)
    for levels in range(4):
        assert repr(decode_json(text, levels=levels, value_chars=100)) == repr(json.loads(text))


@pytest.mark.parametrize("text", [
    '{"a": [[1, 2], [3, 4]', '{"a": [1, 2,]}', '{"a": [1e]}', '{"a": [-Infinit]}',
    '{"a": "unterminated', '{"a": {"b": 1,}}', '{"a": ["\\ud834\\u"]}', '{"a": [1 2]}',
])
@pytest.mark.parametrize("window", [1, 3, 1024])
def test_values_of_bounded_length_fail_as_json_loads_fails(monkeypatch, text, window):
    monkeypatch.setattr("core.output.FIRST_WINDOW_CHARS", window)
    monkeypatch.setattr("core.output.WINDOW_GROWTH", 2)
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    for levels in range(3):
        with pytest.raises(json.JSONDecodeError) as decoding:
            decode_json(text, levels=levels, value_chars=100)
        assert str(decoding.value) == str(expected.value)


# -- 4. line ids ----------------------------------------------------------------------------------
def test_lines_drawn_after_a_session_of_the_largest_id_can_be_saved_and_read(tmp_path):
    document = session_document(tmp_path)
    document["lines"][0]["id"] = LINE_ID_LIMIT - 1
    model = LinesModel()
    model.reset(read_document(tmp_path, document).lines)
    model.delete(LINE_ID_LIMIT - 1)
    model.undo()  # a line deleted, then brought back
    drawn = model.add_line((1.0, 2.0), (30.0, 4.0), traced((1, 2), (30, 4)))
    imported = model.add_lines([(f"Road {k}", "road", ((1.0, 2.0), (30.0, 4.0)),
                                 (Segment.straight((1.0, 2.0), (30.0, 4.0)),))
                                for k in range(3)])
    ids = [line.id for line in model.lines]
    assert ids == [LINE_ID_LIMIT - 1, 1, 2, 3, 4]
    assert (drawn.name, imported[0].name) == ("Road 1", "Road 0")
    path = tmp_path / "again.roadtracer.json"
    write_session(path, str(SAMPLE_IMAGE), model.lines, TraceParams(), "cpu")
    assert [line.id for line in load_session(path).lines] == ids


def test_new_ids_are_not_those_of_lines_in_the_undo_history():
    model = LinesModel()
    model.reset((straight_line(1), straight_line(LINE_ID_LIMIT - 1)))
    model.delete(1)
    assert model.add_line((1.0, 2.0), (30.0, 4.0), traced((1, 2), (30, 4))).id == 2
    model.undo()
    model.undo()  # line 1 is back
    assert [line.id for line in model.lines] == [1, LINE_ID_LIMIT - 1]
    model.redo()
    model.redo()
    assert [line.id for line in model.lines] == [LINE_ID_LIMIT - 1, 2]


# -- 5. segments run between their anchors --------------------------------------------------------
@pytest.mark.parametrize(("point", "replacement", "got"), [
    ("0", [1.0, 2.5], "got (1.0, 2.5) to (30.0, 4.0)"),
    ("2", [30.0, 4.000001], "got (1.0, 2.0) to (30.0, 4.000001)"),
])
def test_a_segment_that_does_not_end_at_its_anchors_is_refused(tmp_path, point, replacement,
                                                               got):
    document = session_document(tmp_path)
    put(document, f"lines.0.segments.0.polyline.{point}", replacement)
    assert "lines[0].segments[0].polyline must run from its anchors (1.0, 2.0) to (30.0, 4.0), " \
           f"{got}" in refusal(tmp_path, document)


# -- 6. the relative image path -------------------------------------------------------------------
@pytest.mark.parametrize("relative", [".", "folder.png"])
def test_a_relative_path_that_is_a_folder_falls_back_to_the_absolute_one(tmp_path, relative):
    (tmp_path / "folder.png").mkdir()
    document = session_document(tmp_path)
    document.update(image=str(SAMPLE_IMAGE), image_relative=relative)
    assert read_document(tmp_path, document).image == str(SAMPLE_IMAGE)


# -- 7. line names --------------------------------------------------------------------------------
def test_a_name_longer_than_a_line_may_have_is_refused(tmp_path):
    document = session_document(tmp_path)
    put(document, "lines.0.name", "N" * MAX_NAME_CHARS)
    assert read_document(tmp_path, document).lines[0].name == "N" * MAX_NAME_CHARS
    put(document, "lines.0.name", "N" * 10_000_000)
    message = refusal(tmp_path, document)
    assert f"lines[0].name must be at most {MAX_NAME_CHARS} characters, got 'NNN" in message
    assert len(message) < MAX_MESSAGE


def test_a_line_renamed_in_the_lines_panel_gets_a_name_a_session_holds(make_window, qtbot):
    window = test_app.window_with_a_line(make_window, qtbot)
    table = window.lines_panel.table.model()
    assert table.setData(table.index(0, 0), "R" * 10_000_000)
    assert window.model.lines[0].name == "R" * (MAX_NAME_CHARS - 1) + "…"


# -- 8. the evidence raster -----------------------------------------------------------------------
def test_an_evidence_raster_of_another_size_is_refused_from_its_header(tmp_path, monkeypatch):
    evidence = tmp_path / "evidence.png"
    iio.imwrite(evidence, np.zeros((300, 400), dtype=np.uint8))
    raster = Raster(pixels=np.zeros((100, 100, 1), dtype=np.float32), path="image.png")
    core.tracer._load_evidence.cache_clear()

    def decode(*_):
        raise AssertionError("the evidence raster was decoded")

    monkeypatch.setattr(core.tracer, "load_image", decode)
    with pytest.raises(BadParameter, match=r"evidence raster .*evidence.png is 400×300 px; the "
                                           r"image is 100×100 \(to resample it onto the "
                                           r"image's grid, both need georeferencing with a "
                                           r"CRS: the image has none\)"):
        evidence_source(raster, TraceParams(evidence_path=str(evidence)))


def test_a_sessions_evidence_raster_is_checked_in_the_worker(make_window, qtbot, tmp_path,
                                                            monkeypatch):
    small = tmp_path / "small.png"
    iio.imwrite(small, np.zeros((100, 100), dtype=np.uint8))
    path = tmp_path / "evidence.roadtracer.json"
    write_session(path, str(SAMPLE_IMAGE), (straight_line(1),),
                  TraceParams(evidence_path=str(small)), "cpu")
    on_window_thread = []

    def checked(*args):
        on_window_thread.append(threading.current_thread() is threading.main_thread())
        return evidence_source(*args)

    monkeypatch.setattr(app.main_window, "evidence_source", checked)
    window = make_window(open_sample=False)
    with qtbot.waitSignal(window.error_shown, timeout=30_000):
        assert window.open_session(str(path))
    assert on_window_thread == [False]
    assert "small.png is 100×100 px" in window.last_error
    assert window.last_error.endswith("; tracing on the image itself")
    assert window.params_panel.params().evidence_path is None
    assert [line.id for line in window.model.lines] == [1]
    assert os.path.samefile(window.image_path, SAMPLE_IMAGE)
