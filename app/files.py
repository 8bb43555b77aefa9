"""The application's files besides sessions (Qt-free): autosaves and GeoJSON exports.

Sessions themselves are :mod:`app.session`'s; images are read by :mod:`core.raster`, imported
lines by :mod:`core.vectors`.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

from app.model import Line
from app.session import SessionReadError, read_session, write_session
from core.errors import OutputWriteError
from core.geojson import feature_collection, line_feature, write_geojson
from core.raster import Raster
from core.tracer import TraceParams

#: Suffix of an autosave file (:func:`autosave_path`), kept by the copies moved aside.
AUTOSAVE_SUFFIX = ".roadtracer.json"


def autosave_path(folder: str, image_path: str) -> str:
    """The autosave file of an image: one per image, named by a hash of its absolute path."""
    digest = hashlib.sha1(os.path.abspath(image_path).encode("utf-8")).hexdigest()[:16]
    return os.path.join(folder, f"{Path(image_path).stem}-{digest}{AUTOSAVE_SUFFIX}")


def write_autosave(folder: str, image_path: str, lines: tuple[Line, ...], params: TraceParams,
                   backend: str) -> None:
    """Write the lines of an image to its autosave file in ``folder`` (a session, written
    atomically); raises ``OutputWriteError``."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise OutputWriteError(f"cannot create the autosave folder {folder}: "
                               f"{exc.strerror or exc}") from None
    write_session(autosave_path(folder, image_path), image_path, lines, params, backend)


def _unused_name(stem: str, suffix: str = "") -> str:
    """``stem + suffix``, or ``stem-2 + suffix``, ``stem-3 + suffix``, …: the first name that
    nothing has yet."""
    name, number = stem + suffix, 1
    while os.path.lexists(name):
        number += 1
        name = f"{stem}-{number}{suffix}"
    return name


def read_autosave(folder: str, image_path: str) -> tuple[Line, ...]:
    """The autosaved lines of an image (none if it has no autosave).

    Raises
    ------
    SessionReadError
        For an autosave that cannot be read; the file is first moved aside to
        ``<autosave>.bad`` (``.bad-2``, ``.bad-3``, … when that is taken; named in the
        message), so that neither the next autosave nor the next bad one overwrites what it
        holds.
    """
    path = autosave_path(folder, image_path)
    if not os.path.exists(path):
        return ()
    try:
        return read_session(path)[1]
    except SessionReadError as exc:
        kept = _unused_name(path + ".bad")
        try:
            os.replace(path, kept)
        except OSError:
            raise exc from None
        raise SessionReadError(f"{exc} (the file is kept as {kept})") from None


def keep_autosave(folder: str, image_path: str) -> str:
    """Move the image's autosave aside, to ``<autosave>.kept.roadtracer.json``
    (``.kept-2.roadtracer.json``, … when taken), so that lines installed from elsewhere (a
    session) are not autosaved over unsaved ones; the path it now has (a session file).

    Raises
    ------
    OutputWriteError
        If it cannot be moved (it then stays where it was).
    """
    path = autosave_path(folder, image_path)
    kept = _unused_name(path[:-len(AUTOSAVE_SUFFIX)] + ".kept", AUTOSAVE_SUFFIX)
    try:
        os.replace(path, kept)
    except OSError as exc:
        raise OutputWriteError(f"cannot keep the autosave {path}: {exc.strerror or exc}") \
            from None
    return kept


def remove_autosave(folder: str, image_path: str) -> None:
    Path(autosave_path(folder, image_path)).unlink(missing_ok=True)


def export_lines(path: str, lines: tuple[Line, ...], raster: Raster, crs: str = "wgs84") -> None:
    """One LineString feature per line, with name, kind, anchors, score, length and every
    segment's score and parameters; coordinates as :func:`core.geojson.feature_collection`
    writes them for ``crs`` ("wgs84": RFC 7946 lon/lat, "source": the image's CRS; pixels for
    an image without georeferencing). Written atomically; raises ``TraceError``."""
    features = []
    for line in lines:
        score = line.score
        properties = {
            "name": line.name, "kind": line.kind,
            "anchors": [list(p) for p in line.anchors],
            "score": None if math.isnan(score) else round(score, 6),
            "length_px": round(line.length, 3),
            "segments": [{"score": None if s.is_straight else round(s.score, 6),
                          "straight": s.is_straight,
                          "params": None if s.params is None else s.params.as_dict()}
                         for s in line.segments]}
        features.append(line_feature(line.polyline, raster, properties, crs))
    write_geojson(path, feature_collection(features, raster, crs))
