"""CUDA graphs through the driver API (pycuda has no binding for them).

:func:`capture` records the launches a function queues on a stream into a graph and
instantiates it; :meth:`Graph.launch` replays them all with one call. When the driver lacks the
graph functions (or capture fails), :func:`capture` returns None and the caller launches as
before. Call inside the stream's context.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import lru_cache

#: CU_STREAM_CAPTURE_MODE_RELAXED: other threads may use the driver while a stream captures.
_RELAXED = 2


@lru_cache(maxsize=1)
def _driver():
    """libcuda's graph functions, or None."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None

    def function(*names):
        for name in names:
            if hasattr(lib, name):
                found = getattr(lib, name)
                found.restype = ctypes.c_int
                return found
        raise AttributeError(names[0])

    try:
        return {
            "begin": function("cuStreamBeginCapture_v2", "cuStreamBeginCapture"),
            "end": function("cuStreamEndCapture"),
            "instantiate": function("cuGraphInstantiateWithFlags"),
            "launch": function("cuGraphLaunch"),
            "destroy": function("cuGraphDestroy"),
            "destroy_exec": function("cuGraphExecDestroy"),
        }
    except AttributeError:
        return None


class Graph:
    """An instantiated CUDA graph (freed with the object)."""

    def __init__(self, driver: dict, executable: ctypes.c_void_p):
        self._driver = driver
        self._executable = executable

    def launch(self, stream) -> None:
        """Queue the graph's launches on ``stream`` (a pycuda Stream)."""
        status = self._driver["launch"](self._executable, ctypes.c_void_p(stream.handle))
        if status:
            raise RuntimeError(f"cuGraphLaunch failed (CUDA error {status})")

    def __del__(self):
        try:
            self._driver["destroy_exec"](self._executable)
        except Exception:  # interpreter shutdown
            pass


def capture(stream, queue: Callable[[object], None]) -> Graph | None:
    """The graph of what ``queue(stream)`` launches on ``stream``, or None if graphs are not
    available (nothing is launched then)."""
    driver = _driver()
    if driver is None:
        return None
    handle = ctypes.c_void_p(stream.handle)
    if driver["begin"](handle, ctypes.c_int(_RELAXED)):
        return None
    graph = ctypes.c_void_p()
    try:
        queue(stream)
    finally:
        status = driver["end"](handle, ctypes.byref(graph))
    if status:
        return None
    executable = ctypes.c_void_p()
    status = driver["instantiate"](ctypes.byref(executable), graph, ctypes.c_ulonglong(0))
    driver["destroy"](graph)
    return Graph(driver, executable) if status == 0 else None
