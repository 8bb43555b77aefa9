"""Sessions as JSON (Qt-free): the image, the lines with their anchors and polylines, parameters.

The document is written atomically; reading validates it and names what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import numpy as np

from app.model import LINE_KINDS, Line, Segment
from app.params import check_backend, params_from_dict
from core.errors import BadParameter, TraceError
from core.output import read_json, write_text_atomic
from core.tracer import TraceParams

SESSION_FORMAT = "roadtracer-session"
SESSION_VERSION = 1


class SessionReadError(TraceError, ValueError):
    """A session file is missing, not JSON, or not a roadtracer session."""


def _number(value: float) -> float | None:
    """JSON has no NaN: NaN scores are written as null."""
    return None if math.isnan(value) else float(value)


def params_to_dict(params: TraceParams | None) -> dict | None:
    return None if params is None else params.as_dict()


def _fail(where: str, expected: str, value: object) -> SessionReadError:
    shown = repr(value) if isinstance(value, str | int | float | bool | None) \
        else type(value).__name__
    return SessionReadError(f"{where} must be {expected}, got {shown}")


def _is_number(value: object) -> bool:
    """A JSON number (true and false are not numbers, although Python's bool is an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _get(data: dict, key: str, where: str, types: tuple[type, ...], expected: str,
         default: object = ...) -> object:
    """``data[key]`` if it is of one of ``types`` (a bool only if ``bool`` is named), else a
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
    return value


#: Largest pixel coordinate a session may hold (far outside any image, still safe to draw).
MAX_COORDINATE = 1e7


def _points(value: object, where: str) -> np.ndarray:
    """At least two (x, y) pixel points as shape (n, 2) float64."""
    expected = f"a list of at least 2 [x, y] pairs of numbers within ±{MAX_COORDINATE:g}"
    if not isinstance(value, list) or len(value) < 2 or not all(
            isinstance(p, list) and len(p) == 2 and all(_is_number(c) for c in p)
            for p in value):
        raise _fail(where, expected, value)
    points = np.asarray(value, dtype=np.float64)
    if not np.all(np.abs(points) <= MAX_COORDINATE):  # NaN fails too
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
    return {"polyline": segment.polyline.tolist(), "link_scores": segment.link_scores.tolist(),
            "score": _number(segment.score), "request": params_to_dict(segment.request),
            "params": params_to_dict(segment.params), "backend": segment.backend}


def _segment_from_dict(data: object, where: str, kind: str) -> Segment:
    """A segment of a line of ``kind``; its request is traced as that kind (sessions older
    than river mode stored none)."""
    if not isinstance(data, dict):
        raise _fail(where, "an object", data)
    polyline = _points(data.get("polyline"), f"{where}.polyline")
    scores = _get(data, "link_scores", where, (list,), "a list of numbers", [])
    if not all(_is_number(v) for v in scores) \
            or len(scores) not in (0, len(polyline) - 1):
        raise _fail(f"{where}.link_scores", f"{len(polyline) - 1} numbers (one per link) or "
                    "none", scores)
    score = _get(data, "score", where, (int, float, type(None)), "a number or null", None)
    request = _params(data.get("request"), f"{where}.request", rounded=True)
    params = _params(data.get("params"), f"{where}.params", rounded=False)
    if request is not None and params is None:
        raise _fail(f"{where}.params", "the parameters the trace used", None)
    return Segment(polyline, np.asarray(scores, dtype=np.float64).reshape(-1),
                   float("nan") if score is None else float(score),
                   None if request is None else replace(request, line_kind=kind), params,
                   _get(data, "backend", where, (str,), "a string", ""))


def line_to_dict(line: Line) -> dict:
    return {"id": line.id, "name": line.name, "kind": line.kind, "visible": line.visible,
            "anchors": [list(p) for p in line.anchors],
            "segments": [_segment_to_dict(s) for s in line.segments]}


def line_from_dict(data: object, where: str = "line") -> Line:
    """A line from its JSON object; :class:`SessionReadError` names the first bad field."""
    if not isinstance(data, dict):
        raise _fail(where, "an object", data)
    line_id = _get(data, "id", where, (int,), "a whole number")
    name = _get(data, "name", where, (str,), "a string")
    kind = _get(data, "kind", where, (str,), f"one of {', '.join(LINE_KINDS)}")
    if kind not in LINE_KINDS:
        raise _fail(f"{where}.kind", f"one of {', '.join(LINE_KINDS)}", kind)
    anchors = _points(data.get("anchors"), f"{where}.anchors")
    items = _get(data, "segments", where, (list,), "a list of segments")
    if len(items) != len(anchors) - 1:
        raise SessionReadError(f"{where}: {len(anchors)} anchors for {len(items)} segments")
    segments = tuple(_segment_from_dict(item, f"{where}.segments[{i}]", kind)
                     for i, item in enumerate(items))
    return Line(line_id, name, kind, tuple((float(x), float(y)) for x, y in anchors), segments,
                _get(data, "visible", where, (bool,), "true or false", True))


def session_document(image_path: str | None, lines: tuple[Line, ...], params: TraceParams,
                     backend: str, base_dir: str | None = None) -> dict:
    """The session as a JSON-ready dict; the image is stored absolute and relative to base_dir."""
    image = os.path.abspath(image_path) if image_path else None
    relative = None
    if image and base_dir:
        try:
            relative = os.path.relpath(image, base_dir)
        except ValueError:  # another drive on Windows
            relative = None
    return {"format": SESSION_FORMAT, "version": SESSION_VERSION, "image": image,
            "image_relative": relative, "params": params.as_dict(), "backend": backend,
            "lines": [line_to_dict(line) for line in lines]}


def write_session(path: str | os.PathLike, image_path: str | None, lines: tuple[Line, ...],
                  params: TraceParams, backend: str) -> None:
    """Write a session file atomically (raises ``OutputWriteError``)."""
    folder = os.path.dirname(os.path.abspath(path))
    document = session_document(image_path, lines, params, backend, folder)
    write_text_atomic(path, json.dumps(document, indent=1) + "\n")


def read_session(path: str | os.PathLike) -> tuple[str | None, tuple[Line, ...], TraceParams, str]:
    """Read a session file: ``(image_path, lines, params, backend)``.

    The image path is the relative one resolved against the session's folder when that file
    exists, else the absolute one. Every field is checked (parameters as the panel accepts
    them); :class:`SessionReadError` names the file and the first bad field.
    """
    path = os.fspath(path)
    document = read_json(path, "session", SessionReadError)
    if not isinstance(document, dict) or document.get("format") != SESSION_FORMAT:
        raise SessionReadError(f"{path} is not a roadtracer session")
    try:
        version = _get(document, "version", "", (int,), "a whole number", SESSION_VERSION)
        if version > SESSION_VERSION:
            raise SessionReadError(f"session version {version} is newer than this roadtracer "
                                   f"reads ({SESSION_VERSION})")
        image = _get(document, "image", "", (str, type(None)), "a file path or null",
                     None)
        relative = _get(document, "image_relative", "", (str, type(None)),
                        "a file path or null", None)
        items = _get(document, "lines", "", (list,), "a list of lines")
        lines = tuple(line_from_dict(item, f"lines[{i}]") for i, item in enumerate(items))
        ids = [line.id for line in lines]
        if len(set(ids)) != len(ids):
            raise SessionReadError(f"lines: line ids repeat ({ids})")
        params = _params(_get(document, "params", "", (dict,), "an object"), "params",
                         rounded=True)
        backend = _get(document, "backend", "", (str,), "a string", "auto")
        check_backend(backend)
    except (SessionReadError, BadParameter) as exc:
        raise SessionReadError(f"{path}: {exc}") from None
    if relative:
        candidate = os.path.join(os.path.dirname(os.path.abspath(path)), relative)
        if os.path.exists(candidate):
            image = os.path.normpath(candidate)
    return image, lines, params, backend
