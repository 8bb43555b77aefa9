"""Sessions as JSON (Qt-free): the image, the lines with their anchors and polylines, parameters.

The document is written atomically; reading validates it and names what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import fields, replace

import numpy as np

from app.model import LINE_KINDS, Line, Segment
from core.errors import TraceError
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


def params_from_dict(data: dict | None) -> TraceParams | None:
    if data is None:
        return None
    known = {f.name for f in fields(TraceParams)}
    unknown = set(data) - known
    if unknown:
        raise SessionReadError(f"unknown tracing parameters {sorted(unknown)}")
    return TraceParams(**data)


def _segment_to_dict(segment: Segment) -> dict:
    return {"polyline": segment.polyline.tolist(), "link_scores": segment.link_scores.tolist(),
            "score": _number(segment.score), "request": params_to_dict(segment.request),
            "params": params_to_dict(segment.params), "backend": segment.backend}


def _segment_from_dict(data: dict) -> Segment:
    score = data.get("score")
    return Segment(np.asarray(data["polyline"], dtype=np.float64).reshape(-1, 2),
                   np.asarray(data.get("link_scores", []), dtype=np.float64),
                   float("nan") if score is None else float(score),
                   params_from_dict(data.get("request")), params_from_dict(data.get("params")),
                   str(data.get("backend", "")))


def line_to_dict(line: Line) -> dict:
    return {"id": line.id, "name": line.name, "kind": line.kind, "visible": line.visible,
            "anchors": [list(p) for p in line.anchors],
            "segments": [_segment_to_dict(s) for s in line.segments]}


def line_from_dict(data: dict) -> Line:
    anchors = tuple((float(x), float(y)) for x, y in data["anchors"])
    segments = tuple(_segment_from_dict(s) for s in data["segments"])
    if not segments or len(anchors) != len(segments) + 1:
        raise SessionReadError(f"line {data.get('name')!r}: {len(anchors)} anchors for "
                               f"{len(segments)} segments")
    if data["kind"] not in LINE_KINDS:
        raise SessionReadError(f"line {data.get('name')!r}: unknown kind {data['kind']!r}")
    # A segment is traced as its line's kind (sessions older than river mode stored none).
    segments = tuple(segment if segment.request is None else
                     replace(segment, request=replace(segment.request, line_kind=data["kind"]))
                     for segment in segments)
    return Line(int(data["id"]), str(data["name"]), data["kind"], anchors, segments,
                bool(data.get("visible", True)))


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
    exists, else the absolute one.
    """
    path = os.fspath(path)
    document = read_json(path, "session", SessionReadError)
    if not isinstance(document, dict) or document.get("format") != SESSION_FORMAT:
        raise SessionReadError(f"{path} is not a roadtracer session")
    try:
        lines = tuple(line_from_dict(item) for item in document["lines"])
        params = params_from_dict(document["params"])
    except SessionReadError as exc:
        raise SessionReadError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionReadError(f"{path}: malformed session ({type(exc).__name__}: {exc})") from None
    image = document.get("image")
    relative = document.get("image_relative")
    if relative:
        candidate = os.path.join(os.path.dirname(os.path.abspath(path)), relative)
        if os.path.exists(candidate):
            image = os.path.normpath(candidate)
    return image, lines, params, str(document.get("backend", "auto"))
