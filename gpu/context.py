"""One retained primary CUDA context per device, pushed and popped around all GPU work.

Never ``pycuda.autoinit``: importing this module touches no device. :func:`open_context`
initialises the driver on first use and raises :class:`~core.errors.BackendUnavailable` with a
one-line reason when pycuda, a driver or a device is missing. :meth:`GpuContext.active` makes
the context current on the calling thread (a Qt worker, a batch worker, the main thread) for the
duration of a ``with`` block and serialises GPU work from several threads.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import BackendUnavailable

_CONTEXTS: dict[int, GpuContext] = {}
_CONTEXTS_LOCK = threading.Lock()


class GpuContext:
    """The retained primary context of one device.

    Attributes
    ----------
    device : pycuda.driver.Device
    context : pycuda.driver.Context
        The device's primary context (shared with any other library in the process).
    name : str
        The device's name, e.g. ``"NVIDIA H100 80GB HBM3"``.
    """

    def __init__(self, cuda, ordinal: int):
        self._cuda = cuda
        self.device = cuda.Device(ordinal)
        self.name = self.device.name()
        self.context = self.device.retain_primary_context()
        self._lock = threading.RLock()

    def attribute(self, name: str) -> int:
        """A device attribute by its pycuda name, e.g. ``"MULTIPROCESSOR_COUNT"``."""
        return self.device.get_attribute(getattr(self._cuda.device_attribute, name))

    @contextmanager
    def active(self) -> Iterator[None]:
        """Hold the lock and make the context current on this thread for the block."""
        with self._lock:
            self.context.push()
            try:
                yield
            finally:
                self._cuda.Context.pop()


#: Compute capabilities whose float64 rate is at least half the float32 rate (data-centre parts:
#: P100, V100, A100, H100/H200, B200); the others (GeForce, RTX, Jetson, ...) run float64 at
#: 1/32 to 1/64 of float32.
FAST_FLOAT64 = {(6, 0), (7, 0), (8, 0), (9, 0), (10, 0)}


def fast_float64(context: GpuContext) -> bool:
    """Whether the device of ``context`` computes float64 at a high rate (:data:`FAST_FLOAT64`)."""
    return tuple(context.device.compute_capability()) in FAST_FLOAT64


def gpu_extra_installed() -> bool:
    """Whether pycuda (the ``gpu`` extra) is installed: only then can a user expect the GPU
    backend, and only then is a fall-back to the CPU worth a note."""
    return importlib.util.find_spec("pycuda") is not None


def open_context(ordinal: int = 0) -> GpuContext:
    """The :class:`GpuContext` of device ``ordinal``, created on first use.

    Raises
    ------
    BackendUnavailable
        When pycuda cannot be imported, the driver does not initialise or there is no such device.
    """
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        if not gpu_extra_installed():
            raise BackendUnavailable('GPU unavailable: pycuda is not installed; install the gpu '
                                     'extra (pip install -e ".[gpu]")') from None
        raise BackendUnavailable(f"GPU unavailable: pycuda cannot be imported ({exc})") from None
    with _CONTEXTS_LOCK:
        if ordinal in _CONTEXTS:
            return _CONTEXTS[ordinal]
        try:
            cuda.init()
            count = cuda.Device.count()
        except cuda.Error as exc:
            raise BackendUnavailable(f"GPU unavailable: the CUDA driver did not start ({exc})") \
                from None
        if ordinal >= count:
            raise BackendUnavailable(f"GPU unavailable: no CUDA device {ordinal} "
                                     f"({count} device(s) found)")
        try:
            context = GpuContext(cuda, ordinal)
        except cuda.Error as exc:
            raise BackendUnavailable(f"GPU unavailable: device {ordinal} cannot be used ({exc})") \
                from None
        _CONTEXTS[ordinal] = context
        return context
