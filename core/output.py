"""The project's files: JSON read with one clear error, results written atomically (a
temporary file beside the target, then a rename)."""

from __future__ import annotations

import json
import os
import tempfile

from core.errors import BadParameter, OutputWriteError, TraceError


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The process's umask, read once at import (reading it means setting it, which is not thread-safe).
UMASK = _read_umask()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".part")
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o666 & ~UMASK)  # mkstemp makes 0600; give what open() would
        os.replace(temporary, path)
    except OSError as exc:
        os.unlink(temporary)
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_json(path: str | os.PathLike, what: str, error: type[TraceError] = BadParameter):
    """The JSON document in ``path``; ``what`` names the file in the one-line ``error`` raised
    when it cannot be read or is not JSON (e.g. ``what="seeds file"``)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise error(f"{what} {path} is not JSON: {exc}") from None
    except RecursionError:
        raise error(f"{what} {path} is nested too deeply to read") from None
