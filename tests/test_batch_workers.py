"""Local batch workers: one that dies fails its own image alone, and each traces on one
thread (numba's and ONNX Runtime's alike)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool

import pytest

from core import surface
from core.backend import CpuBackend
from core.batch import WORKER_DIED, WORKERS_LOST, ImageTask, run_tasks
from core.jit import numba
from core.tracer import TraceParams
from core.vectors import Seed
from tests.conftest import ROOT
from tests.test_batch_integrity import road_png

#: Backends for :data:`DYING_WORKER`: in the workers, the first one made kills its process (as
#: the kernel's out-of-memory killer would); in the process that runs them, one made once a
#: worker died, so that the workers get calls (this process takes calls back meanwhile).
DYING = """
import os, signal, time

from core.backend import CpuBackend


def first_kills_its_worker(marker):
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return CpuBackend()
    os.kill(os.getpid(), signal.SIGKILL)


def once_a_worker_died(marker):
    deadline = time.monotonic() + 30
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return CpuBackend()
"""

#: Four images, one per call, on two local workers, the first image a worker traces killing it.
DYING_WORKER = """
import functools, sys

import dying
from core.batch import ImageTask, local_executor, run_tasks, stop_local_executor
from core.tracer import TraceParams
from core.vectors import Seed

image, marker = sys.argv[1:]
seed = Seed("s", [[10.0, 40.0], [80.0, 40.0]], "a.png")
tasks = [ImageTask(image, (seed,), TraceParams(score="centre"), threads=1) for _ in range(4)]
pool = local_executor(2)
for report, _ in run_tasks(tasks, functools.partial(dying.first_kills_its_worker, marker), pool,
                           1, functools.partial(dying.once_a_worker_died, marker)):
    print(report.status, *(failure.reason for failure in report.failures), sep=": ")
stop_local_executor(pool, False)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_dead_worker_fails_its_image_alone_and_the_batch_ends(tmp_path):
    """A worker killed (SIGKILL) while it traces: that image fails, naming why; the others
    (queued, or traced by the other worker, which the broken pool ends) are traced by a new
    pool, and the process ends (no worker left to wait for)."""
    (tmp_path / "dying.py").write_text(DYING)
    road_png(tmp_path / "a.png")
    done = subprocess.run(
        [sys.executable, "-c", DYING_WORKER, str(tmp_path / "a.png"), str(tmp_path / "died")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"failed: {WORKER_DIED}"] + ["ok"] * 3


class BreakingPool(Executor):
    """A local pool whose every call is lost as its workers die, before any image."""

    restarts = 0

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future = Future()
        future.set_exception(BrokenProcessPool("a process in the pool was terminated"))
        return future

    def died(self) -> set[int]:
        return {12345}  # a worker that started no call

    def restart(self) -> None:
        self.restarts += 1


def test_workers_that_die_before_any_image_fail_the_rest_without_a_new_pool(tmp_path):
    road_png(tmp_path / "a.png")
    seed = Seed("s", [[10.0, 40.0], [80.0, 40.0]], "a.png")
    tasks = [ImageTask(str(tmp_path / "a.png"), (seed,), TraceParams()) for _ in range(3)]
    pool = BreakingPool()
    reports = [report for report, _ in run_tasks(tasks, CpuBackend, pool, 1, CpuBackend)]
    assert [(report.status, [failure.reason for failure in report.failures])
            for report in reports] == [("failed", [WORKERS_LOST])] * 3
    assert pool.restarts == 0


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread is the default")
def test_the_surface_model_runs_on_the_threads_a_batch_task_allows():
    """A batch task's ``threads`` (one per local worker) holds ONNX Runtime's threads too;
    elsewhere ONNX Runtime keeps its default (0: one per core)."""
    model = os.fspath(surface.BUNDLED_MODEL)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert surface._session(model).get_session_options().intra_op_num_threads == 1
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        assert surface._session(model).get_session_options().intra_op_num_threads == 0
    finally:
        numba.set_num_threads(threads)
