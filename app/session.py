"""Sessions as JSON (Qt-free): the image, the lines with their anchors and polylines, parameters.

The document is written atomically, compact (every line's text encoded once, see
:class:`LineEncoder`); reading validates it and names what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import PurePath

import numpy as np

from app.model import LINE_ID_LIMIT, LINE_KINDS, MAX_NAME_CHARS, Line, Point, Segment
from app.params import check_backend, params_from_dict
from core.errors import BadParameter, OutputWriteError, TraceError
from core.output import (
    JsonLimits,
    collector_paused,
    is_unicode_text,
    json_number,
    read_json,
    shortened,
    shown_items,
    shown_value,
    write_text_atomic,
)
from core.resources import format_size
from core.tracer import TraceParams

SESSION_FORMAT = "roadtracer-session"
SESSION_VERSION = 1


class SessionReadError(TraceError, ValueError):
    """A session file is missing, not JSON, or not a roadtracer session."""


def params_to_dict(params: TraceParams | None) -> dict | None:
    return None if params is None else params.as_dict()


def _fail(where: str, expected: str, value: object) -> SessionReadError:
    return SessionReadError(f"{where} must be {expected}, got {shown_value(value)}")


def _finite(value: object, where: str, expected: str) -> float:
    """``value`` as a float if it is a finite JSON number (:func:`core.output.json_number`),
    else a SessionReadError naming ``where``."""
    number = json_number(value)
    if number is None:
        raise _fail(where, expected, value)
    return number


def _get(data: dict, key: str, where: str, types: tuple[type, ...], expected: str,
         default: object = ...) -> object:
    """``data[key]`` if it is of one of ``types`` (a bool only if ``bool`` is named; a string
    only if it is valid Unicode text: :func:`core.output.is_unicode_text`), else a
    SessionReadError naming ``where.key`` (``key`` alone at the top level, ``where=""``); a
    missing key gives ``default`` if one is given."""
    name = f"{where}.{key}" if where else key
    if key not in data:
        if default is not ...:
            return default
        raise SessionReadError(f"{name} is missing")
    value = data[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise _fail(name, expected, value)
    if isinstance(value, str) and not is_unicode_text(value):
        raise _fail(name, "valid Unicode text (no lone surrogate)", value)
    return value


#: Largest pixel coordinate a session may hold (far outside any image, still safe to draw).
MAX_COORDINATE = 1e7
#: Most points of one list (anchors, polyline) in a session: a trace has tens; a million
#: would hold the window for seconds at every repaint.
MAX_POINTS = 100_000
#: Largest session file read: 2.5 times a session of 10 000 traced lines of 100–600 px
#: (7 million vertices at full precision: 430 MB, read in 20–25 s on 2 cores with 2 GB of
#: memory). A larger file is refused from its size, before it is read; a larger session is
#: not written (it could not be opened).
MAX_SESSION_BYTES = 1024 ** 3
#: Most characters of one value of a segment, decoded in one piece (its polyline, its link
#: scores): a list of :data:`MAX_POINTS` points takes at most 5 MB as sessions are written,
#: 10 MB pretty-printed with an indent of 2. A longer value is refused before it is decoded:
#: decoding it would hold the window for seconds.
MAX_VALUE_CHARS = 128 * MAX_POINTS
#: How a session is read (:func:`core.output.read_json`): a member at a time down to its
#: segments' members, each of which is at most MAX_VALUE_CHARS long.
SESSION_LIMITS = JsonLimits(MAX_SESSION_BYTES, levels=5, value_chars=MAX_VALUE_CHARS)


def _points(value: object, where: str) -> np.ndarray:
    """At least two (x, y) pixel points as shape (n, 2) float64."""
    expected = (f"a list of 2 to {MAX_POINTS} [x, y] pairs of numbers within "
                f"±{MAX_COORDINATE:g}")
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_POINTS or not all(
            isinstance(p, list) and len(p) == 2 for p in value):
        raise _fail(where, expected, value)
    points = np.array([[_finite(c, where, expected) for c in p] for p in value])
    if not np.all(np.abs(points) <= MAX_COORDINATE):
        raise _fail(where, expected, "a coordinate beyond it")
    return points


def _params(value: object, where: str, rounded: bool) -> TraceParams | None:
    if value is None:
        return None
    try:
        return params_from_dict(value, where, rounded)
    except BadParameter as exc:
        raise SessionReadError(str(exc)) from None


def _segment_to_dict(segment: Segment) -> dict:
    """A segment as its JSON object, its polyline (N, 2) and link scores (N - 1,) as the
    float64 arrays they are (:class:`LineEncoder` writes them); a straight segment's score
    (NaN) is null."""
    return {"polyline": np.ascontiguousarray(segment.polyline, dtype=np.float64),
            "link_scores": np.ascontiguousarray(segment.link_scores, dtype=np.float64),
            "score": None if segment.is_straight else float(segment.score),
            "request": params_to_dict(segment.request), "params": params_to_dict(segment.params),
            "backend": segment.backend}


def _all_finite(line: Line) -> bool:
    """Whether every coordinate and score of ``line`` is a finite number (a straight segment's
    score, NaN, is not written)."""
    return (all(math.isfinite(value) for point in line.anchors for value in point)
            and all(np.isfinite(segment.polyline).all() and np.isfinite(segment.link_scores).all()
                    and (segment.is_straight or math.isfinite(segment.score))
                    for segment in line.segments))


def _segment_from_dict(data: object, where: str, kind: str, ends: tuple[Point, Point]
                       ) -> Segment:
    """A segment of a line of ``kind`` between the anchors ``ends``; its request is traced as
    that kind (sessions older than river mode stored none).

    Its polyline runs from its start anchor to its end anchor, exactly (a session holds every
    number as written). A traced segment (one with a request) has a finite score and one
    finite score per link of its polyline; a straight one (``"request": null``) has no link
    scores and no score (null, or a finite number that is not kept: its score is NaN).
    """
    if not isinstance(data, dict):
        raise _fail(where, "an object", data)
    polyline = _points(data.get("polyline"), f"{where}.polyline")
    runs = tuple(polyline[0].tolist()), tuple(polyline[-1].tolist())
    if runs != ends:
        raise SessionReadError(f"{where}.polyline must run from its anchors {ends[0]} to "
                               f"{ends[1]}, got {runs[0]} to {runs[1]}")
    request = _params(data.get("request"), f"{where}.request", rounded=True)
    params = _params(data.get("params"), f"{where}.params", rounded=False)
    if request is not None and params is None:
        raise _fail(f"{where}.params", "the parameters the trace used", None)
    traced = request is not None
    links = len(polyline) - 1 if traced else 0
    expected = f"{links} numbers (finite, one per link)" if traced \
        else "empty (a straight segment has no link scores)"
    scores = _get(data, "link_scores", where, (list,), expected, [])
    if len(scores) != links:
        raise SessionReadError(f"{where}.link_scores must be {expected}, got {len(scores)}")
    link_scores = np.array([_finite(v, f"{where}.link_scores", expected) for v in scores],
                           dtype=np.float64)
    score = data.get("score")
    if traced or score is not None:
        score = _finite(score, f"{where}.score", "a number (finite: the trace's score)"
                        if traced else "a number (finite) or null")
    return Segment(polyline, link_scores, score if traced else math.nan,
                   replace(request, line_kind=kind) if traced else None, params,
                   _get(data, "backend", where, (str,), "a string", ""))


def line_to_dict(line: Line) -> dict:
    """A line as its JSON object (polylines and link scores as arrays: :func:`_segment_to_dict`)."""
    return {"id": line.id, "name": line.name, "kind": line.kind, "visible": line.visible,
            "anchors": [list(p) for p in line.anchors],
            "segments": [_segment_to_dict(s) for s in line.segments]}


def line_from_dict(data: object, where: str = "line") -> Line:
    """A line from its JSON object; :class:`SessionReadError` names the first bad field."""
    if not isinstance(data, dict):
        raise _fail(where, "an object", data)
    line_id = _get(data, "id", where, (int,), "a whole number")
    if not 0 <= line_id < LINE_ID_LIMIT:
        raise _fail(f"{where}.id", f"a whole number in [0, {LINE_ID_LIMIT - 1}]", line_id)
    name = _get(data, "name", where, (str,), "a string")
    if len(name) > MAX_NAME_CHARS:
        raise _fail(f"{where}.name", f"at most {MAX_NAME_CHARS} characters", name)
    kind = _get(data, "kind", where, (str,), f"one of {', '.join(LINE_KINDS)}")
    if kind not in LINE_KINDS:
        raise _fail(f"{where}.kind", f"one of {', '.join(LINE_KINDS)}", kind)
    anchors = tuple(map(tuple, _points(data.get("anchors"), f"{where}.anchors").tolist()))
    items = _get(data, "segments", where, (list,), "a list of segments")
    if len(items) != len(anchors) - 1:
        raise SessionReadError(f"{where}: {len(anchors)} anchors for {len(items)} segments")
    segments = tuple(_segment_from_dict(item, f"{where}.segments[{i}]", kind, anchors[i:i + 2])
                     for i, item in enumerate(items))
    return Line(line_id, name, kind, anchors, segments,
                _get(data, "visible", where, (bool,), "true or false", True))


class LineEncoder:
    """Lines as compact JSON text, each line encoded once: lines are immutable, so a line of
    the last lines encoded keeps its text (an edit re-encodes only the lines it replaced).

    Safe to share between threads: each call replaces the cache whole.
    """

    def __init__(self) -> None:
        self._texts: dict[int, tuple[Line, str]] = {}  # line id -> (line, its text)

    def texts(self, lines: tuple[Line, ...]) -> list[str]:
        """The JSON text of every line (``ValueError`` naming the line for a number that is
        not finite or text that is not valid Unicode).

        Written by orjson, arrays and all, many times faster than the standard library: a
        session of thousands of traced lines holds millions of numbers. Each number is written
        in the fewest digits that read back as the same float64."""
        import orjson

        known, cache, texts = self._texts, {}, []
        for line in lines:
            cached = known.get(line.id)
            if cached is None or cached[0] is not line:
                if not _all_finite(line):
                    raise ValueError(f"line {line.id} holds a coordinate or score that is not "
                                     "a finite number")
                try:
                    text = orjson.dumps(line_to_dict(line), option=orjson.OPT_SERIALIZE_NUMPY)
                except orjson.JSONEncodeError as exc:  # a lone surrogate in its name, say
                    raise ValueError(f"line {line.id} {shortened(line.name)} cannot be "
                                     f"written: {exc}") from None
                cached = line, text.decode()
            cache[line.id] = cached
            texts.append(cached[1])
        self._texts = cache
        return texts


#: How much of a ``.json`` file :func:`is_session_file` reads.
SESSION_HEAD_BYTES = 4096


def is_session_file(path: str) -> bool:
    """Whether ``path`` (a file dropped on the window) is a session to open rather than
    GeoJSON lines to import: a ``.json`` file (any case) whose start names
    :data:`SESSION_FORMAT` (:func:`write_session` writes it first). One that is no regular
    file or cannot be read counts as a session: opening it says why."""
    if not path.lower().endswith(".json"):
        return False
    try:
        if not os.path.isfile(path):
            return True
        with open(path, "rb") as stream:
            return SESSION_FORMAT.encode() in stream.read(SESSION_HEAD_BYTES)
    except OSError:
        return True


def write_session(path: str | os.PathLike, image_path: str, lines: tuple[Line, ...],
                  params: TraceParams, backend: str, image_size: tuple[int, int] | None = None,
                  encoder: LineEncoder | None = None) -> None:
    """Write a session file atomically (raises ``OutputWriteError``): the image stored absolute
    and relative to the file's folder, with its ``image_size`` (width, height) where given, and
    the lines last (their texts from ``encoder`` where given). The relative path has ``/``
    separators on every system, so that a session written on Windows opens elsewhere.

    Neither a number that is not finite, nor text that is not valid Unicode, nor a file over
    :data:`MAX_SESSION_BYTES` is written: :func:`load_session` would refuse it."""
    folder = os.path.dirname(os.path.abspath(path))
    image = os.path.abspath(image_path)
    try:
        relative = PurePath(os.path.relpath(image, folder)).as_posix()
    except ValueError:  # another drive on Windows
        relative = None
    header = {"format": SESSION_FORMAT, "version": SESSION_VERSION, "image": image,
              "image_relative": relative,
              "image_size": None if image_size is None else list(image_size),
              "params": params.as_dict(), "backend": backend}
    try:
        texts = (encoder or LineEncoder()).texts(lines)
        text = json.dumps(header, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except ValueError as exc:  # a number that is not finite, text that is not Unicode
        raise OutputWriteError(f"cannot write session {path}: {exc}") from None
    if not is_unicode_text(text):
        raise OutputWriteError(f"cannot write session {path}: its image path or parameters "
                               "are not valid Unicode text (a lone surrogate)")
    document = f'{text[:-1]},"lines":[{",".join(texts)}]}}\n'
    size = len(document) if document.isascii() else len(document.encode())
    if size > MAX_SESSION_BYTES:
        raise OutputWriteError(f"cannot write session {path}: it would be {format_size(size)}, "
                               f"over the limit of {format_size(MAX_SESSION_BYTES)} for a "
                               "session; export the lines as GeoJSON instead")
    write_text_atomic(path, document)


@dataclass(frozen=True)
class Session:
    """A session as read (:func:`load_session`).

    Attributes
    ----------
    image : str or None
        The image's path (the relative one where that file exists).
    lines : tuple of Line
    params : TraceParams
        The parameter panel's.
    backend : str
    image_size : (int, int) or None
        The image's width and height when saved; None in sessions older than it.
    """

    image: str | None
    lines: tuple[Line, ...]
    params: TraceParams
    backend: str
    image_size: tuple[int, int] | None


def read_session(path: str | os.PathLike) -> tuple[str | None, tuple[Line, ...], TraceParams, str]:
    """``(image_path, lines, params, backend)`` of a session file (:func:`load_session`)."""
    session = load_session(path)
    return session.image, session.lines, session.params, session.backend


#: Largest image width or height a session may record.
MAX_IMAGE_SIDE = 2 ** 31 - 1


def _image_size(document: dict) -> tuple[int, int] | None:
    """The ``image_size`` recorded, (width, height); None where there is none (older
    sessions)."""
    expected = f"null or [width, height], whole numbers in [1, {MAX_IMAGE_SIDE}]"
    size = _get(document, "image_size", "", (list, type(None)), expected, None)
    if size is None:
        return None
    if len(size) != 2 or not all(isinstance(n, int) and not isinstance(n, bool)
                                 and 1 <= n <= MAX_IMAGE_SIDE for n in size):
        raise _fail("image_size", expected, size)
    return size[0], size[1]


def load_session(path: str | os.PathLike) -> Session:
    """Read a session file.

    The image path is the relative one resolved against the session's folder when that file
    exists, else the absolute one. Every field is checked (parameters as the panel accepts
    them, strings as valid Unicode text, names of at most :data:`MAX_NAME_CHARS` characters,
    each segment's polyline from its start anchor to its end anchor);
    :class:`SessionReadError` names the file and the first bad field. A file over
    :data:`MAX_SESSION_BYTES` is refused before it is read, a value of a segment over
    :data:`MAX_VALUE_CHARS` characters before it is decoded.
    """
    path = os.fspath(path)
    with collector_paused():  # also while its lines are read: see collector_paused
        session = _session_of(read_json(path, "session", SessionReadError, SESSION_LIMITS),
                              path)
    return session


def _relative_image(path: str, relative: str) -> str | None:
    """The file at ``relative`` to the folder of the session ``path`` where there is one (a
    folder there is not the image), else None; ``\\`` separators (older sessions written on
    Windows) are also tried as ``/``."""
    folder = os.path.dirname(os.path.abspath(path))
    for name in dict.fromkeys((relative, relative.replace("\\", "/"))):
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None


def _lines_of(items: list) -> tuple[Line, ...]:
    """The lines of a session's ``lines`` list, each item dropped from the list once read (a
    large document is freed a line at a time, not all at once at the end)."""
    lines = []
    for index in range(len(items)):
        item, items[index] = items[index], None
        lines.append(line_from_dict(item, f"lines[{index}]"))
    return tuple(lines)


def _session_of(document: object, path: str) -> Session:
    """:func:`load_session` of the JSON ``document`` read from ``path``."""
    if not isinstance(document, dict) or document.get("format") != SESSION_FORMAT:
        raise SessionReadError(f"{path} is not a roadtracer session")
    try:
        version = _get(document, "version", "", (int,), "a whole number", SESSION_VERSION)
        if version < 1:
            raise _fail("version", "a whole number from 1", version)
        if version > SESSION_VERSION:
            raise SessionReadError(f"session version {shown_value(version)} is newer than this "
                                   f"roadtracer reads ({SESSION_VERSION})")
        image = _get(document, "image", "", (str, type(None)), "a file path or null",
                     None)
        relative = _get(document, "image_relative", "", (str, type(None)),
                        "a file path or null", None)
        image_size = _image_size(document)
        lines = _lines_of(_get(document, "lines", "", (list,), "a list of lines"))
        ids = [line.id for line in lines]
        if len(set(ids)) != len(ids):
            counts = Counter(ids)
            repeated = [line_id for line_id in ids if counts[line_id] > 1]
            raise SessionReadError(f"lines: line ids repeat ({shown_items(repeated)})")
        params = _params(_get(document, "params", "", (dict,), "an object"), "params",
                         rounded=True)
        backend = _get(document, "backend", "", (str,), "a string", "auto")
        check_backend(backend)
    except (SessionReadError, BadParameter) as exc:
        raise SessionReadError(f"{path}: {exc}") from None
    if relative:
        image = _relative_image(path, relative) or image
    return Session(image, lines, params, backend, image_size)
