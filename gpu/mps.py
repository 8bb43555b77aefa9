"""NVIDIA's Multi-Process Service (MPS) for the worker processes of a GPU batch.

Processes that share a GPU without MPS get it by turns: the device switches between their
contexts, and each switch costs more than the kernels of a short trace, so eight batch workers
trace little faster than two. Under MPS the processes' kernels run side by side as if they
came from one process (measured: docs/BENCHMARKS.md, "Batch on the GPU").
:func:`shared_gpu` makes a batch's processes clients of an MPS control daemon: one that is
already running, or else a private one started for the batch (where the driver ships
``nvidia-cuda-mps-control``: Linux) and stopped after it. Nothing here touches a device; the
processes become clients when they initialise CUDA afterwards.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The driver's MPS control program.
CONTROL = "nvidia-cuda-mps-control"
#: Where clients find the daemon, and where it logs.
PIPE_VARIABLE, LOG_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
#: Where a daemon started without PIPE_VARIABLE (a system-wide one) listens.
SYSTEM_PIPE = Path("/tmp/nvidia-mps")
#: Seconds a private daemon may take to open its control socket.
START_SECONDS = 5.0
#: The private daemons started here and the processes stopping them, kept (not waited for)
#: while this process runs.
_CHILDREN: list[subprocess.Popen] = []
#: What the batch says when its GPU workers share the GPU by turns.
BY_TURNS = "the GPU workers share the GPU by turns, several times slower than under MPS"


def running_daemon(environ: dict | None = None) -> Path | None:
    """The pipe folder of an MPS control daemon that clients started with ``environ``
    (default: this process's environment) would reach, or None."""
    environ = os.environ if environ is None else environ
    pipe = Path(environ.get(PIPE_VARIABLE) or SYSTEM_PIPE)
    return pipe if (pipe / "control").exists() else None


@contextmanager
def shared_gpu(notify=None) -> Iterator[bool]:
    """Make the processes that initialise CUDA within the block (this one, and those it
    starts) clients of an MPS daemon: a running one, or a private one started here (its pipe
    and log in a temporary folder named in ``CUDA_MPS_PIPE_DIRECTORY`` and
    ``CUDA_MPS_LOG_DIRECTORY`` meanwhile), stopped when the block ends; it ends with this
    process too, even one that is killed. Yields whether the processes share the GPU under
    MPS; ``notify(text)`` is told why not."""
    notify = notify or (lambda text: None)
    if running_daemon() is not None:
        yield True
        return
    control = shutil.which(CONTROL) if sys.platform.startswith("linux") else None
    if control is None:
        notify(f"NVIDIA MPS is not available here (no {CONTROL}): {BY_TURNS}")
        yield False
        return
    folder = Path(tempfile.mkdtemp(prefix="roadtracer-mps-"))
    environment = {PIPE_VARIABLE: str(folder / "pipe"), LOG_VARIABLE: str(folder / "log")}
    if not _start_daemon(control, environment):
        shutil.rmtree(folder, ignore_errors=True)
        notify(f"NVIDIA MPS did not start ({CONTROL} -f; its log would be in "
               f"{environment[LOG_VARIABLE]}): {BY_TURNS}")
        yield False
        return
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        yield True
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _stop_daemon(control, environment, folder)


def _start_daemon(control: str, environment: dict) -> bool:
    """Start a control daemon in the foreground, a child of this thread that the kernel ends
    (SIGTERM) when this thread does; False if it does not open its control socket in
    ``START_SECONDS``."""
    for folder in environment.values():
        Path(folder).mkdir()
    try:
        daemon = subprocess.Popen([control, "-f"], env={**os.environ, **environment},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, preexec_fn=_end_with_parent)
    except OSError:
        return False
    deadline = time.monotonic() + START_SECONDS
    while running_daemon(environment) is None:
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.terminate()
            daemon.wait()
            return False
        time.sleep(0.005)
    _CHILDREN.append(daemon)
    return True


def _stop_daemon(control: str, environment: dict, folder: Path) -> None:
    """Ask the daemon to quit and remove ``folder`` once it has: in a process of its own,
    since the daemon waits for its clients, this process among them (its CUDA context lives
    until it exits)."""
    stop = ("import os, shutil, subprocess, sys, time\n"
            "subprocess.run([sys.argv[1]], input=b'quit\\n', capture_output=True)\n"
            "for _ in range(100):  # the daemon may still be closing its files\n"
            "    shutil.rmtree(sys.argv[2], ignore_errors=True)\n"
            "    if not os.path.exists(sys.argv[2]):\n"
            "        break\n"
            "    time.sleep(0.1)\n")
    try:
        _CHILDREN.append(subprocess.Popen(
            [sys.executable, "-c", stop, control, str(folder)], env={**os.environ, **environment},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))
    except OSError:
        pass  # the daemon still ends with this process


def _end_with_parent() -> None:
    """In the child before it runs the daemon: SIGTERM to it when its parent thread ends."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
