"""CUDA graphs through the driver API (pycuda has no binding for them).

:func:`capture` records the launches a function queues on a stream into a graph and
instantiates it; :meth:`Graph.launch` replays them all with one call. When the driver lacks the
graph functions (or capture fails), :func:`capture` returns None and the caller launches as
before. :class:`LaunchGraphs` captures lists of launches that come back. Call inside the
stream's context.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
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


class LaunchGraphs:
    """Lists of kernel launches replayed as CUDA graphs.

    :meth:`launch` queues a list of launches; once the very same list (the same functions,
    grids, blocks, arguments and shared memory, in the same order) has been launched
    ``direct`` times, it is captured, and from then on it is one graph launch. Until then it
    is launched as it is, so work whose arguments change every call or two (a drag's new
    sizes) pays for no capture it would not replay. At most ``graphs`` graphs (and ``seen``
    lists not yet captured) are kept, the least recently used dropped first. A graph replays
    exactly the launches of its key, so a key that comes back after its buffers were freed and
    allocated again at the same addresses is still right.
    """

    def __init__(self, direct: int = 2, graphs: int = 32, seen: int = 256):
        self._graphs: OrderedDict = OrderedDict()  # key -> (Graph or None, launches)
        self._seen: OrderedDict = OrderedDict()  # key -> direct launches so far
        self._limits = (direct, graphs, seen)

    def launch(self, stream, launches: list, key: tuple | None = None) -> None:
        """Queue ``launches``, a list of (function, grid, block, arguments, shared bytes) of
        pycuda prepared functions, on ``stream``. ``key``: :func:`launch_key` of ``launches``,
        where the caller keeps it (else worked out here)."""
        key = launch_key(launches) if key is None else key
        direct, graphs, seen = self._limits
        entry = self._graphs.get(key)
        if entry is not None:
            self._graphs.move_to_end(key)
        elif self._seen.get(key, 0) >= direct:
            del self._seen[key]
            # The launches are kept with the graph: their functions stay alive, their ids
            # (part of the key) are not reused.
            entry = self._graphs[key] = (capture(stream, lambda s: _queue(s, launches)),
                                         launches)
            if len(self._graphs) > graphs:
                self._graphs.popitem(last=False)
        else:
            self._seen[key] = self._seen.pop(key, 0) + 1
            if len(self._seen) > seen:
                self._seen.popitem(last=False)
        if entry is not None and entry[0] is not None:
            entry[0].launch(stream)
        else:
            _queue(stream, launches)

    def clear(self) -> None:
        """Forget every graph and every list seen."""
        self._graphs.clear()
        self._seen.clear()


def launch_key(launches: list) -> tuple:
    """What identifies a list of launches (:meth:`LaunchGraphs.launch`): each launch's
    function (its id), grid, block, arguments and shared bytes, in order."""
    return tuple((id(function), grid, block, args, shared)
                 for function, grid, block, args, shared in launches)


def _queue(stream, launches: list) -> None:
    for function, grid, block, args, shared in launches:
        function.prepared_async_call(grid, block, stream, *args, shared_size=shared)
