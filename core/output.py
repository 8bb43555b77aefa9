"""The project's files: JSON read with one clear error, results written safely.

Regular files are replaced atomically (a temporary file beside the target, then a rename),
keeping the mode of the file replaced and writing through a symbolic link to its target,
wherever they are (``/dev/shm`` too); a path that is not a regular file (a device such as
``/dev/null``, a FIFO) or names an open descriptor (``/dev/stdout``, ``/dev/fd/1``) is written in
place and never replaced.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, compress
from json.decoder import scanstring

from core.errors import BadParameter, OutputWriteError, TraceError
from core.resources import format_size


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The process's umask, read once at import (reading it means setting it, which is not thread-safe).
UMASK = _read_umask()
#: Prefix of the temporary files of atomic writes (``.roadtracer-*.part``).
TEMPORARY_PREFIX = ".roadtracer-"
#: Deepest nesting of arrays and objects accepted in a JSON document we read.
MAX_JSON_DEPTH = 64
#: A process's folder of open descriptors, where ``/dev/stdout`` and ``/dev/fd/N`` lead:
#: ``/proc/PID/fd`` on Linux (``/dev/fd`` links there), ``/dev/fd`` itself on macOS and BSD.
DESCRIPTOR_FOLDER = re.compile(r"/proc/(self|[0-9]+)/fd|/dev/fd")
#: Seconds between the attempts to replace a file on Windows (:func:`_replace`), where a
#: program that has it open (GIS software, an antivirus scanner, a search indexer) may refuse
#: the rename for a moment.
REPLACE_RETRY_SECONDS = (0.05, 0.1, 0.2, 0.4, 0.8)
#: Said of a file that Windows would not let us replace.
HELD_OPEN = " (it may be open in another program, such as QGIS: close it and try again)"


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that readers see the old file or the whole new one,
    also after a crash (the new file's data reach the disk before it replaces the old one).

    A symbolic link is followed (its target is replaced, the link stays); an existing file
    keeps its permission bits (a new one gets those ``open()`` would give) and is replaced only
    where it could be written; a path that is not a regular file, or names an open descriptor
    (:func:`names_descriptor`), is written in place.

    Raises
    ------
    OutputWriteError
        Naming the path, when it cannot be written (the target is then left as it was); on
        Windows, saying that it may be open in another program when that refuses its
        replacement a while (:func:`_replace`).
    """
    path = os.fspath(path)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: a bug upstream, never a torn file
        raise OutputWriteError(f"cannot write {path}: text is not valid Unicode ({exc})") \
            from None
    try:
        mode = os.stat(path).st_mode  # through links, /proc's links to descriptors too
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # a loop of symbolic links, a folder we may not look into
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    if (mode is not None and not stat.S_ISREG(mode)) or names_descriptor(path):
        _write_in_place(path, data)
        return
    if path.endswith(os.sep):  # "file.json/" names a folder, never that file
        raise OutputWriteError(f"cannot write {path}: Not a directory")
    target = os.path.realpath(path)
    if mode is not None and not os.access(target, os.W_OK):  # replacing would get round it
        raise OutputWriteError(f"cannot write {path}: {_why_unwritable(target)}")
    keep = stat.S_IMODE(mode) if mode is not None else 0o666 & ~UMASK
    try:
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target),
                                             prefix=TEMPORARY_PREFIX, suffix=".part")
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())  # on disk before the rename: no empty file after a crash
        os.chmod(temporary, keep)  # mkstemp makes 0600
        _replace(temporary, target)
    except BaseException as exc:  # also an interrupt: never leave the temporary file behind
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if isinstance(exc, OSError):
            held = sys.platform == "win32" and isinstance(exc, PermissionError)
            raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}"
                                   + (HELD_OPEN if held else "")) from None
        raise


def _replace(temporary: str, target: str) -> None:
    """``os.replace(temporary, target)``; on Windows, while a program that has the target
    open refuses it (PermissionError), tried again after each of :data:`REPLACE_RETRY_SECONDS`."""
    for wait in REPLACE_RETRY_SECONDS if sys.platform == "win32" else ():
        try:
            os.replace(temporary, target)
            return
        except PermissionError:  # WinError 5 (access denied) or 32 (in use)
            time.sleep(wait)
    os.replace(temporary, target)


def names_descriptor(path: str) -> bool:
    """Whether ``path`` leads, through symbolic links, into a process's folder of open
    descriptors (:data:`DESCRIPTOR_FOLDER`: ``/dev/stdout``, ``/dev/fd/1``,
    ``/proc/self/fd/1``): written in place, whatever file the descriptor is open on."""
    seen = set()
    while path not in seen:
        seen.add(path)
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        if DESCRIPTOR_FOLDER.fullmatch(folder):
            return True
        if not os.path.islink(path):
            return False
        path = os.path.join(folder, os.readlink(path))
    return False


def _why_unwritable(target: str) -> str:
    """Why the existing file ``target``, which ``os.access`` says may not be written, cannot
    be: the system's reason for refusing to open it for writing (a read-only file system,
    a file without write permission), else "Permission denied"."""
    try:
        os.close(os.open(target, os.O_WRONLY))  # neither truncated nor changed
    except OSError as exc:
        return exc.strerror or str(exc)
    return os.strerror(errno.EACCES)


def _write_in_place(path: str, data: bytes) -> None:
    """Write to a device, FIFO or descriptor path as it is (no temporary file, no rename),
    appending: a descriptor open on a file (standard output redirected to it) keeps what was
    written to it before."""
    try:
        with open(path, "ab") as stream:
            stream.write(data)
    except BrokenPipeError:
        pass  # the reader went away: what it did not read is not wanted
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def refuse_empty_path(path: str | os.PathLike | None, what: str) -> None:
    """Raise :class:`BadParameter` when ``path`` (``what`` it names, e.g. "output") is the
    empty string: as a :class:`~pathlib.Path` it would be the current folder."""
    if path is not None and os.fspath(path) == "":
        raise BadParameter(f"empty {what} path")


def refuse_overwriting_input(output: str | os.PathLike | None, inputs, option: str) -> None:
    """Raise :class:`BadParameter` when the output file ``output`` (given as ``option``) is one
    of the files ``inputs`` read (None entries skipped): writing it would destroy that input."""
    if is_stdout(output) or not os.path.isfile(output):
        return
    for source in inputs:
        if source is not None and os.path.isfile(source) and os.path.samefile(output, source):
            raise BadParameter(f"{option} {os.fspath(output)} is the input {os.fspath(source)}: "
                               "writing it would destroy the input; choose another file")


@contextmanager
def new_folder(out: str | os.PathLike, prefix: str = ".partial-") -> Iterator[str]:
    """A folder to fill that becomes ``out`` when the block ends without an error, and is
    removed when it raises: nothing is left half-written at ``out``.

    Raises
    ------
    BadParameter
        If ``out`` exists and is not an empty folder, or no folder can be made beside it
        (checked before the block runs).
    """
    out = os.fspath(out)
    if os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise BadParameter(f"output {out} exists and is not an empty folder (nothing written)")
    try:
        partial = tempfile.mkdtemp(prefix=prefix, dir=os.path.dirname(os.path.abspath(out)))
    except OSError as exc:
        raise BadParameter(f"cannot make output folder {out}: {exc.strerror or exc}") from None
    try:
        yield partial
        if os.path.isdir(out):
            os.rmdir(out)  # empty, checked above
        os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


#: Output names that mean standard output.
STDOUT_NAMES = ("-", "/dev/stdout")


def is_stdout(path: str | os.PathLike | None) -> bool:
    """Whether an output ``path`` means standard output: None or one of :data:`STDOUT_NAMES`
    (``/dev/stdout`` too: written there, not replaced by a renamed file, so that what else the
    command printed to it stays)."""
    return path is None or os.fspath(path) in STDOUT_NAMES


def write_text_or_stdout(path: str | os.PathLike | None, text: str) -> None:
    """Write ``text`` to ``path`` (:func:`write_text_atomic`), or to standard output when
    ``path`` means it (:func:`is_stdout`; a reader that went away raises ``BrokenPipeError``,
    which the command line's entry point turns into a quiet exit)."""
    if not is_stdout(path):
        write_text_atomic(path, text)
        return
    sys.stdout.write(text)
    sys.stdout.flush()


class PipeTolerantStream:
    """A text stream (stderr) whose writes never fail: once its reader is gone
    (``2>&1 | head -1``) or its device breaks, further text is dropped."""

    def __init__(self, stream):
        self._stream = stream
        self._broken = False

    def write(self, text: str) -> int:
        """Write ``text`` unless the stream broke; the length of ``text`` either way."""
        if not self._broken:
            try:
                self._stream.write(text)
            except (BrokenPipeError, OSError, ValueError):
                self._broken = True
        return len(text)

    def flush(self) -> None:
        """Flush unless the stream broke."""
        if not self._broken:
            try:
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self._broken = True

    def isatty(self) -> bool:
        """Whether the stream is unbroken and a terminal."""
        return not self._broken and self._stream.isatty()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def printable(text: str) -> str:
    r"""``text`` made writable anywhere: bytes of a file name that are not UTF-8 (kept by
    Python as lone surrogates) are shown as ``\xNN``, any other lone surrogate as
    ``\udNNN``."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shortened(value, limit: int = 80) -> str:
    """``value`` as text for a message (``repr``), at most ``limit`` characters: a number of
    thousands of digits, a long list or a file's content is cut short (``…``), never printed
    whole."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 1] + "…"


#: Longest value :func:`shown_value` shows (a number of hundreds of digits is cut short).
MAX_SHOWN = 40
#: Most items of a list :func:`shown_items` shows.
MAX_SHOWN_ITEMS = 5


def shown_value(value: object) -> str:
    """``value`` (read from a JSON file) for a message: a scalar as Python writes it, cut
    short, else its type's name ("list", "dict")."""
    return shortened(value, MAX_SHOWN) if isinstance(value, str | int | float | bool | None) \
        else type(value).__name__


def shown_items(items: list) -> str:
    """The first :data:`MAX_SHOWN_ITEMS` of ``items`` for a message, each :func:`shown_value`,
    and how many more there are: ``[1, 1]``, ``['a', 'b', 'c', 'd', 'e'] and 99995 more``."""
    shown = f"[{', '.join(map(shown_value, items[:MAX_SHOWN_ITEMS]))}]"
    more = len(items) - MAX_SHOWN_ITEMS
    return f"{shown} and {more} more" if more > 0 else shown


def is_unicode_text(text: str) -> bool:
    r"""Whether ``text`` is Unicode text that UTF-8 can write: a string decoded from JSON may
    hold a lone surrogate (``"\udc80"``), which no file can hold as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_depth_exceeds(document, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects in ``document`` nest deeper than ``limit`` (iterative: no
    recursion however deep).

    One level at a time, its children gathered and sorted by type through C-level iterators
    (no Python step per number): a file of a million coordinates is checked in well under a
    second.
    """
    level = [document] if isinstance(document, dict | list) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        if any(issubclass(kind, dict) for kind in set(map(type, level))):
            children = list(chain.from_iterable(
                value.values() if isinstance(value, dict) else value for value in level))
        else:  # arrays only (a line's coordinates)
            children = list(chain.from_iterable(level))
        kinds = list(map(type, children))
        containers = {kind for kind in set(kinds) if issubclass(kind, dict | list)}
        level = list(compress(children, map(containers.__contains__, kinds)))
        depth += 1
    return False


def json_number(value) -> float | None:
    """``value`` (from a JSON document) as a float if it is a finite number, else None (true
    and false are not numbers, although Python's bool is an int; NaN, infinity and integers
    beyond a float's range are refused)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


#: Nesting levels of a JSON document that :func:`decode_json` decodes one member at a time by
#: default: the document's own members and their members (a feature of a GeoJSON file);
#: deeper values are decoded whole.
PIECEWISE_LEVELS = 2
#: Characters :func:`read_json` reads (and decodes from UTF-8) at a time.
READ_CHARS = 1 << 22
#: Characters of the first window a value of limited length is decoded in
#: (:func:`_decode_bounded`); each next window is :data:`WINDOW_GROWTH` times longer.
FIRST_WINDOW_CHARS = 1024
WINDOW_GROWTH = 16
#: Characters before a window's end within which decoding may stop because the window cut a
#: value short (``-Infinit``, ``"\\ud834\\u``, ``1e``), not because the text is not JSON.
CUT_SHORT_CHARS = 12
#: Items of an array of numbers or of arrays of numbers (a polyline, its link scores): runs of
#: numbers and commas, and arrays of numbers (the last may run to the end of what is matched),
#: up to 1024 at a time (the memory of a match grows with its items). Holding no string, such
#: an array ends at the first bracket of its level.
_NUMBER_ITEMS = re.compile(r'(?:\[[^\[\]{}"]*+(?:\]|\Z)|[^\[\]{}"]++){1,1024}+')
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class JSONValueTooLong(ValueError):
    """A value that :func:`decode_json` would decode whole is longer than ``limit``
    characters: refused before it is decoded. ``keys`` lead to it from the document's top."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit
        self.keys: list[str | int] = []

    @property
    def where(self) -> str:
        """The value's place, as messages name fields: ``lines[0].segments[1].polyline``."""
        place = "".join(f"[{key}]" if isinstance(key, int)
                        else f".{key}" if key.isidentifier() and len(key) <= MAX_SHOWN
                        else f"[{shortened(key, MAX_SHOWN)}]" for key in self.keys)
        return place.removeprefix(".") or "the document"

    def __str__(self) -> str:
        return f"{self.where} is longer than {self.limit} characters"


def decode_json(text: str, depth_limit: int = MAX_JSON_DEPTH, levels: int = PIECEWISE_LEVELS,
                value_chars: int | None = None):
    """The JSON document ``text`` as :func:`json.loads` reads it (same value, same errors),
    decoded a piece at a time: down to ``levels`` levels, each member of an array or object on
    its own. Each piece is one call that holds the interpreter lock, so other threads (the
    app's window) run between pieces, however long the document; with ``value_chars``, no
    piece is longer than that, so that none holds it for long.

    Raises
    ------
    json.JSONDecodeError
        Where ``text`` is not JSON.
    RecursionError
        Where arrays and objects nest deeper than ``depth_limit`` (as :func:`json.loads`
        raises where they nest deeper than Python's recursion limit).
    JSONValueTooLong
        Where a value below ``levels`` levels is longer than ``value_chars`` characters.
    """
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    document, end = _decode_value(text, _WHITESPACE.match(text, 0).end(), levels, depth_limit,
                                  value_chars)
    end = _WHITESPACE.match(text, end).end()
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return document


def _decode_value(text: str, start: int, levels: int, depth_limit: int,
                  value_chars: int | None) -> tuple[object, int]:
    """The JSON value at ``text[start]`` and the index after it; an array or object member by
    member where ``levels`` > 0, else whole (at most ``value_chars`` long where given:
    :func:`_decode_bounded`). RecursionError where it nests deeper than ``depth_limit``."""
    opening = text[start:start + 1]
    if levels > 0 and opening in ("[", "{") and depth_limit > 0:
        members = _decode_array if opening == "[" else _decode_object
        return members(text, start + 1, levels - 1, depth_limit - 1, value_chars)
    value, end = _DECODER.raw_decode(text, start) if value_chars is None \
        else _decode_bounded(text, start, value_chars)
    if json_depth_exceeds(value, depth_limit):
        raise RecursionError(f"JSON nests deeper than {depth_limit} levels")
    return value, end


def _decode_bounded(text: str, start: int, value_chars: int) -> tuple[object, int]:
    """The JSON value at ``text[start]`` and the index after it, if it is at most
    ``value_chars`` characters long, else :class:`JSONValueTooLong`, having decoded about
    ``value_chars`` characters at most, however long it is.

    An array of numbers or of arrays of numbers (a polyline) is decoded to its closing
    bracket, found first (:func:`_number_array_end`); any other value in windows of the text,
    from :data:`FIRST_WINDOW_CHARS` on, until one holds it and more (a number cut short, ``1e``
    of ``1e5``, reads as another)."""
    end = _number_array_end(text, start, value_chars)
    if end is not None:
        return _decode_window(text, start, end)
    limit = start + value_chars
    widest = value_chars + CUT_SHORT_CHARS + 1
    width = FIRST_WINDOW_CHARS
    while True:
        width = min(width, widest)
        whole = start + width >= len(text)  # the window reaches the text's end
        try:
            value, end = _decode_window(text, start, start + width)
        except json.JSONDecodeError as exc:
            cut_short = exc.msg.startswith("Unterminated string") \
                or exc.pos >= start + width - CUT_SHORT_CHARS
            if whole or not cut_short:
                raise
        else:
            if end > limit:
                raise JSONValueTooLong(value_chars)
            if whole or end < start + width - CUT_SHORT_CHARS:  # a number may go on
                return value, end
        if width == widest:
            raise JSONValueTooLong(value_chars)
        width *= WINDOW_GROWTH


def _number_array_end(text: str, start: int, value_chars: int) -> int | None:
    """The index after the array at ``text[start]`` if it is one of numbers or of arrays of
    numbers (:data:`_NUMBER_ITEMS`) at most ``value_chars`` long, :class:`JSONValueTooLong` if
    it is a longer one; None where it is no such array (it holds a string, an object or a
    deeper array, or is cut short) or ``text[start]`` starts none."""
    if text[start:start + 1] != "[":
        return None
    index, limit = start + 1, start + value_chars
    while (items := _NUMBER_ITEMS.match(text, index, limit)) is not None:
        index = items.end()
    if index == limit < len(text):
        raise JSONValueTooLong(value_chars)
    return index + 1 if text[index:index + 1] == "]" else None


def _decode_window(text: str, start: int, stop: int) -> tuple[object, int]:
    """The JSON value at ``text[start]`` decoded from ``text[start:stop]`` alone, and the
    index after it; a JSONDecodeError as one from ``text``."""
    try:
        value, end = _DECODER.raw_decode(text[start:stop])
    except json.JSONDecodeError as exc:
        raise json.JSONDecodeError(exc.msg, text, start + exc.pos) from None
    return value, start + end


def _next_member(text: str, index: int, closing: str) -> tuple[bool, int]:
    """After a member ending at ``index``: (whether another follows, the index of what
    follows: the next member, or past ``closing``)."""
    index = _WHITESPACE.match(text, index).end()
    if text[index:index + 1] == closing:
        return False, index + 1
    if text[index:index + 1] != ",":
        raise json.JSONDecodeError("Expecting ',' delimiter", text, index)
    return True, _WHITESPACE.match(text, index + 1).end()


def _decode_array(text: str, start: int, levels: int, depth_limit: int,
                  value_chars: int | None) -> tuple[list, int]:
    """The array whose ``[`` is just before ``text[start]``, element by element."""
    items: list = []
    index = _WHITESPACE.match(text, start).end()
    if text[index:index + 1] == "]":
        return items, index + 1
    more = True
    while more:
        try:
            item, index = _decode_value(text, index, levels, depth_limit, value_chars)
        except JSONValueTooLong as exc:
            exc.keys.insert(0, len(items))
            raise
        items.append(item)
        more, index = _next_member(text, index, "]")
    return items, index


def _decode_object(text: str, start: int, levels: int, depth_limit: int,
                   value_chars: int | None) -> tuple[dict, int]:
    """The object whose ``{`` is just before ``text[start]``, member by member (a key given
    twice keeps its last value, as :func:`json.loads`)."""
    members: dict = {}
    index = _WHITESPACE.match(text, start).end()
    if text[index:index + 1] == "}":
        return members, index + 1
    more = True
    while more:
        if text[index:index + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes",
                                       text, index)
        key, index = scanstring(text, index + 1)
        index = _WHITESPACE.match(text, index).end()
        if text[index:index + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, index)
        index = _WHITESPACE.match(text, index + 1).end()
        try:
            members[key], index = _decode_value(text, index, levels, depth_limit, value_chars)
        except JSONValueTooLong as exc:
            exc.keys.insert(0, key)
            raise
        more, index = _next_member(text, index, "}")
    return members, index


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off meanwhile (if it was on), for decoding a large
    JSON document and reading it. Decoding makes a list per vertex, none of them garbage, and
    every so many allocations the collector walks all of them again, holding the interpreter
    lock (the app's window waits); once it is back on, its first collection walks all that
    is still held. Free what was decoded before the block ends, in short steps."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: Largest JSON file :func:`read_json` reads by default: decoded, a document of 2 GiB takes
#: about 10 GiB of memory and a minute or more; a larger file (a runaway or sparse one) is
#: refused from its size, before it is read.
MAX_JSON_BYTES = 2 * 1024 ** 3


@dataclass(frozen=True)
class JsonLimits:
    """What :func:`read_json` reads of a file: at most ``file_bytes``, decoded one member at a
    time down to ``levels`` levels (:func:`decode_json`), and each deeper value, decoded in
    one call, at most ``value_chars`` characters long (None: any)."""

    file_bytes: int = MAX_JSON_BYTES
    levels: int = PIECEWISE_LEVELS
    value_chars: int | None = None


#: What :func:`read_json` reads by default: files up to :data:`MAX_JSON_BYTES`.
JSON_LIMITS = JsonLimits()


def read_json(path: str | os.PathLike, what: str, error: type[TraceError] = BadParameter,
              limits: JsonLimits = JSON_LIMITS):
    """The JSON document in ``path`` (:func:`decode_json`: a piece at a time, within
    ``limits``); ``what`` names the file (e.g. ``what="seeds file"``) in the one-line ``error``
    raised when it cannot be read, is larger than ``limits.file_bytes`` (from its size, before
    it is read), is not JSON, nests deeper than :data:`MAX_JSON_DEPTH`, holds a value longer
    than ``limits.value_chars`` (before it is decoded), or is no regular file (a FIFO or
    device would block or never end). A leading UTF-8 byte-order mark (Notepad, PowerShell
    5.1) is skipped."""
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        kind = "a folder" if os.path.isdir(path) else "not a regular file"
        raise error(f"cannot read {what} {path}: it is {kind}")
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0  # open() says why it cannot be read
    if size > limits.file_bytes:
        raise error(f"cannot read {what} {path}: it is {format_size(size)}, over the limit "
                    f"of {format_size(limits.file_bytes)}")
    try:
        with open(path, encoding="utf-8-sig") as stream:
            text = "".join(iter(lambda: stream.read(READ_CHARS), ""))
        return decode_json(text, levels=limits.levels, value_chars=limits.value_chars)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except RecursionError:
        raise error(f"{what} {path} nests arrays or objects deeper than {MAX_JSON_DEPTH} "
                    "levels") from None
    except JSONValueTooLong as exc:
        raise error(f"{what} {path}: {exc}, more than one value may hold") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise error(f"{what} {path} is not JSON: {exc}") from None
