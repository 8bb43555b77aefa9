"""numba for the engine: every module that compiles kernels imports it from here.

numba caches compiled functions beside the sources, else in the user's cache folder; where
neither is writable (a read-only install, no writable HOME) it refuses to compile at all, so
this module points it at a private folder of the temporary directory first.

Before numba runs its first compiled function it loads its array library
(``numba.np.arraymath``), which imports ``scipy.linalg`` only to learn whether BLAS is there
for ``np.dot`` and its kin inside compiled code. That import costs about 0.3 s of a cold
``roadtracer trace`` and no kernel of ours calls BLAS, so the library is loaded here with
``scipy.linalg`` hidden: numba then falls back to its own loops for those functions, and
``scipy.linalg`` imports as usual afterwards for whoever needs it.

The first CPU trace on a machine compiles the tracer's kernels (several seconds) and caches
them; :func:`tracer_compiled` says beforehand whether that cache is there, so that the command
line can announce the wait (:data:`COMPILING_NOTE`).
"""

import os
import sys


def _writable_folder(path: str) -> bool:
    """Whether a file can be created in ``path`` (made if missing), as numba's cache needs."""
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def _private_cache_folder() -> str:
    """A folder of the temporary directory that only this user can write (numba loads what is
    cached there, so a folder another user made is never used). Windows has no user ids and
    its temporary directory is the user's own: the folder is shared by name only."""
    import stat
    import tempfile

    getuid = getattr(os, "getuid", None)
    path = os.path.join(tempfile.gettempdir(),
                        "roadtracer-numba" + ("" if getuid is None else f"-{getuid()}"))
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="roadtracer-numba-")
    status = os.lstat(path)
    if not stat.S_ISDIR(status.st_mode) or getuid is not None and (
            status.st_uid != getuid() or status.st_mode & 0o022):
        return tempfile.mkdtemp(prefix="roadtracer-numba-")
    return path


if "NUMBA_CACHE_DIR" not in os.environ and not any(
        _writable_folder(folder) for folder in (
            os.path.join(os.path.dirname(__file__), "__pycache__"),
            os.path.join(os.environ.get("XDG_CACHE_HOME")
                          or os.path.join(os.path.expanduser("~"), ".cache"), "numba"))):
    os.environ["NUMBA_CACHE_DIR"] = _private_cache_folder()

import numba  # noqa: E402  (after NUMBA_CACHE_DIR is settled)


def _load_array_library_without_blas() -> None:
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return  # too late to matter, or already paid for
    sys.modules["scipy.linalg"] = None  # makes ``import scipy.linalg`` fail at once
    try:
        import numba.np.arraymath  # noqa: F401
    except ImportError:
        pass  # numba imports it again, as usual, before its first compiled call
    finally:
        del sys.modules["scipy.linalg"]


_load_array_library_without_blas()

#: Said before a CPU trace whose kernels numba has yet to compile (:func:`tracer_compiled`).
COMPILING_NOTE = "compiling the tracer for this machine (once, about 10 s)"


def tracer_compiled() -> bool:
    """Whether numba's cache holds the CPU tracer's compiled kernels, so that a trace starts at
    once; False where the first trace will compile them.

    Checked on the link integration kernel, which every CPU trace runs: its cache index must
    exist and be no older than its source (numba compiles again after a source changes).
    """
    import inspect

    from core.links import _integrate_links

    try:  # numba's own cache layout (internal: where it changes, say nothing)
        from numba.core.caching import CompileResultCacheImpl

        cache = CompileResultCacheImpl(_integrate_links.py_func)
        index = os.path.join(cache.locator.get_cache_path(), f"{cache.filename_base}.nbi")
    except (ImportError, AttributeError, RuntimeError):  # RuntimeError: no usable cache folder
        return True
    source = inspect.getfile(_integrate_links.py_func)
    try:
        return os.path.getmtime(index) >= os.path.getmtime(source)
    except OSError:
        return False

__all__ = ["COMPILING_NOTE", "numba", "tracer_compiled"]
