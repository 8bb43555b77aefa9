"""The one backend chooser: ``auto`` takes the GPU when pycuda and a device answer, else the CPU.

Returns the backend and a one-line note saying which was chosen and why, e.g.
``"CPU (numba, 2 threads): GPU unavailable: pycuda cannot be imported (No module named
'pycuda')"``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from core.backend import CpuBackend, ReferenceBackend, TracerBackend
from core.errors import BackendUnavailable, BadParameter

BACKEND_CHOICES = ("auto", "cpu", "gpu", "reference")
#: A GPU backend still starting after this many seconds is building its kernels (nvcc: the
#: first use after an install or an update; pycuda keeps them for later runs): the caller's
#: ``notify`` is told so while it waits.
SLOW_START_SECONDS = 2.0
SLOW_START_NOTE = ("building the GPU kernels for this device: the first use after an install "
                   "or an update takes about half a minute; later runs reuse them")


def gpu_backend(batch: bool = False, notify: Callable[[str], None] | None = None
                ) -> TracerBackend:
    """The CUDA backend, or :class:`BackendUnavailable` naming why it cannot run here. With
    ``batch``, it waits for the device without spinning on a CPU core (batch workers share a
    GPU and wait once per image; an interactive trace waits as briefly as it can). If starting
    takes longer than ``SLOW_START_SECONDS``, ``notify(SLOW_START_NOTE)`` is called (from
    another thread) while it goes on."""
    try:
        from gpu.backend import GpuBackend
    except ImportError as exc:
        raise BackendUnavailable(f"GPU unavailable: {exc}") from None
    timer = None
    if notify is not None:
        timer = threading.Timer(SLOW_START_SECONDS, notify, args=(SLOW_START_NOTE,))
        timer.daemon = True
        timer.start()
    try:
        return GpuBackend.create(blocking_sync=batch)
    finally:
        if timer is not None:
            timer.cancel()


def gpu_device_count() -> int:
    """CUDA devices visible to this process: 0 without pycuda or a working driver."""
    try:
        import pycuda.driver as cuda

        cuda.init()
        return cuda.Device.count()
    except Exception:  # ImportError, or pycuda's driver errors (no device, no driver)
        return 0


def choose_backend(name: str = "auto", batch: bool = False,
                   notify: Callable[[str], None] | None = None) -> tuple[TracerBackend, str]:
    """Pick a backend by name; returns ``(backend, note)``. ``batch``: for a batch worker;
    ``notify``: told when a GPU backend is slow to start (:func:`gpu_backend`)."""
    if name not in BACKEND_CHOICES:
        raise BadParameter(f"unknown backend {name!r}; choose from {', '.join(BACKEND_CHOICES)}")
    if name == "cpu":
        backend = CpuBackend()
        return backend, backend.description
    if name == "reference":
        backend = ReferenceBackend()
        return backend, backend.description
    if name == "gpu":
        backend = gpu_backend(batch, notify)
        return backend, backend.description
    try:
        backend = gpu_backend(batch, notify)
        return backend, backend.description
    except BackendUnavailable as exc:
        backend = CpuBackend()
        return backend, f"{backend.description}: {exc}"
