"""The application's files besides sessions (Qt-free): autosaves and GeoJSON exports.

Sessions themselves are :mod:`app.session`'s; images are read by :mod:`core.raster`, imported
lines by :mod:`core.vectors`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from app.model import Line
from app.session import LineEncoder, Session, SessionReadError, load_session, write_session
from core.errors import OutputWriteError
from core.geojson import traced_line_feature, write_feature_collection
from core.output import collector_paused
from core.raster import Raster
from core.tracer import TraceParams

#: Suffix of an autosave file (:func:`autosave_path`), kept by the copies moved aside.
AUTOSAVE_SUFFIX = ".roadtracer.json"


def autosave_path(folder: str, image_path: str) -> str:
    """The autosave file of an image: one per image, named by a hash of its absolute path
    (:func:`os.path.normcase`: on Windows ``c:/data/A.png`` and ``C:\\data\\a.png`` share one;
    a name's bytes that are not UTF-8, kept by Python as lone surrogates, are hashed too)."""
    key = os.path.normcase(os.path.abspath(image_path))
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return os.path.join(folder, f"{Path(image_path).stem}-{digest}{AUTOSAVE_SUFFIX}")


def write_autosave(folder: str, image_path: str, lines: tuple[Line, ...], params: TraceParams,
                   backend: str, image_size: tuple[int, int] | None = None,
                   encoder: LineEncoder | None = None) -> None:
    """Write the lines of an image to its autosave file in ``folder`` (a session, written
    atomically; see :func:`app.session.write_session`); raises ``OutputWriteError``."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise OutputWriteError(f"cannot create the autosave folder {folder}: "
                               f"{exc.strerror or exc}") from None
    write_session(autosave_path(folder, image_path), image_path, lines, params, backend,
                  image_size, encoder)


class AutosaveWriter:
    """The autosaves of a folder, written one at a time, the newest lines of an image winning.

    :meth:`put` leaves an image's lines to autosave (replacing those of that image still
    waiting); :meth:`write_waiting` writes what waits, off the window's thread or, to flush,
    on it. A write, removal or move of an autosave waits for the one in progress, so an older
    state never lands after a newer one, and a removed autosave is not written again.
    """

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.encoder = LineEncoder()
        self._waiting: dict[str, tuple] = {}  # image path -> write_autosave's arguments after it
        self._waiting_lock = threading.Lock()  # guards _waiting
        self._file_lock = threading.Lock()  # held while an autosave file is written or moved

    def put(self, image_path: str, lines: tuple[Line, ...], params: TraceParams, backend: str,
            image_size: tuple[int, int] | None) -> None:
        """Leave ``lines`` to autosave for ``image_path`` (never waits for a write)."""
        with self._waiting_lock:
            self._waiting[image_path] = (lines, params, backend, image_size)

    def _take(self, image_path: str | None = None) -> tuple | None:
        """The image path and arguments of a write waiting (``image_path``'s, or any), no
        longer waiting; None if there is none."""
        with self._waiting_lock:
            if image_path is None:
                return self._waiting.popitem() if self._waiting else None
            arguments = self._waiting.pop(image_path, None)
            return None if arguments is None else (image_path, arguments)

    def write_waiting(self) -> None:
        """Write every autosave waiting (raises ``OutputWriteError`` at the first that cannot
        be written: the others still wait)."""
        with self._file_lock:
            while (write := self._take()) is not None:
                image_path, arguments = write
                write_autosave(self.folder, image_path, *arguments, encoder=self.encoder)

    def remove(self, image_path: str) -> None:
        """Drop the image's autosave, and the write of it waiting."""
        with self._file_lock:
            self._take(image_path)
            Path(autosave_path(self.folder, image_path)).unlink(missing_ok=True)

    def keep(self, image_path: str) -> str:
        """:func:`keep_autosave` once the write in progress is done."""
        with self._file_lock:
            return keep_autosave(self.folder, image_path)


def file_stamp(path: str) -> tuple[int, int] | None:
    """(modification time in ns, size) of a file, to tell whether it changed since; None where
    there is no such file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _unused_name(stem: str, suffix: str = "") -> str:
    """``stem + suffix``, or ``stem-2 + suffix``, ``stem-3 + suffix``, …: the first name that
    nothing has yet."""
    name, number = stem + suffix, 1
    while os.path.lexists(name):
        number += 1
        name = f"{stem}-{number}{suffix}"
    return name


def load_autosave(folder: str, image_path: str) -> Session | None:
    """The autosave of an image as a session (None if it has no autosave); a
    :class:`SessionReadError` for one that cannot be read, left where it is
    (:func:`set_aside_bad_autosave`)."""
    path = autosave_path(folder, image_path)
    return load_session(path) if os.path.exists(path) else None


def set_aside_bad_autosave(folder: str, image_path: str, error: SessionReadError
                           ) -> SessionReadError:
    """Move an autosave that cannot be read (``error``, from :func:`load_autosave`) aside to
    ``<autosave>.bad`` (``.bad-2``, ``.bad-3``, … when that is taken), so that neither the next
    autosave nor the next bad one overwrites what it holds; the error to show, naming where it
    is kept (``error`` itself if it cannot be moved)."""
    path = autosave_path(folder, image_path)
    kept = _unused_name(path + ".bad")
    try:
        os.replace(path, kept)
    except OSError:
        return error
    return SessionReadError(f"{error} (the file is kept as {kept})")


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


def export_lines(path: str, lines: tuple[Line, ...], raster: Raster, crs: str = "wgs84") -> None:
    """One LineString feature per line, with the properties of every traced line written
    (:func:`core.geojson.traced_line_feature`, as ``trace`` and batch write them: ``kind``,
    ``score``, ``segment_scores``, ``link_scores``, ``anchors_px``, ``segment_params``,
    ``backend``, and ``params``: what its traced segments asked for, null where they asked
    for different parameters or none is traced) and the application's own: ``name``,
    ``anchors``, ``length_px`` and ``segment_details`` (each segment's ``straight`` and resolved
    ``params``). Coordinates as :func:`core.geojson.feature_collection` writes them for
    ``crs`` ("wgs84": RFC 7946 lon/lat, "source": the image's CRS; pixels for an image
    without georeferencing). Written atomically, each feature encoded as soon as it is made
    and the garbage collector paused meanwhile (what a feature holds is freed with it, and
    its full collections would walk every line, holding the window); raises
    ``TraceError``."""
    with collector_paused():
        write_feature_collection(path, (traced_line_feature(line.segments, raster,
                                                            _own_properties(line), crs,
                                                            line.kind)
                                        for line in lines), raster, crs)


def _own_properties(line: Line) -> dict:
    """The properties of an exported line besides those of every traced line."""
    requests = {segment.request for segment in line.segments if not segment.is_straight}
    return {"params": requests.pop().as_dict() if len(requests) == 1 else None,
            "name": line.name, "anchors": [list(p) for p in line.anchors],
            "length_px": round(line.length, 3),
            "segment_details": [{"straight": s.is_straight,
                                 "params": None if s.params is None else s.params.as_dict()}
                                for s in line.segments]}
