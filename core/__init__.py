"""Tracing engine: pure numpy/numba, no Qt and no CUDA.

Vocabulary used everywhere in the project:

* A point is ``(x, y) = (column, row)`` in pixel coordinates; integer values are pixel
  centres. Arrays are indexed ``[row, col]``.
* A polyline is an ``(N, 2)`` float64 array of such points.
* A corridor holds ``m`` guides of ``d`` points each, perpendicular to the segment [a, b]
  (see :mod:`core.guides`); a candidate trace picks one point per guide.
"""

import os as _os

# numba's OpenMP layer busy-waits between parallel regions by default, which on small shared
# machines costs milliseconds per DP stage; passive waiting measured 10-20× faster there.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _writable_folder(path: str) -> bool:
    """Whether a file can be created in ``path`` (made if missing), as numba's cache needs."""
    import tempfile

    try:
        _os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def _private_cache_folder() -> str:
    """A folder of the temporary directory that only this user can write (numba loads what is
    cached there, so a folder another user made is never used)."""
    import stat
    import tempfile

    path = _os.path.join(tempfile.gettempdir(), f"roadtracer-numba-{_os.getuid()}")
    try:
        _os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="roadtracer-numba-")
    status = _os.lstat(path)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != _os.getuid() \
            or status.st_mode & 0o022:
        return tempfile.mkdtemp(prefix="roadtracer-numba-")
    return path


# numba caches compiled functions beside the sources, else in the user's cache folder; where
# neither is writable (a read-only install, no writable HOME) it refuses to compile at all, so
# point it at a private folder of the temporary directory instead.
if "NUMBA_CACHE_DIR" not in _os.environ and not any(
        _writable_folder(folder) for folder in (
            _os.path.join(_os.path.dirname(__file__), "__pycache__"),
            _os.path.join(_os.environ.get("XDG_CACHE_HOME")
                          or _os.path.join(_os.path.expanduser("~"), ".cache"), "numba"))):
    _os.environ["NUMBA_CACHE_DIR"] = _private_cache_folder()
