"""Background work: a :class:`JobQueue` runs its jobs (:class:`Job`) one at a time on a worker
thread of its own, from a FIFO and at most one pending preview.

The window's queue runs everything slow (opening an image, choosing a backend, tracing),
which also keeps the compiled tracer from ever running twice at once; the canvas has a second
queue beside it, for reading sharp tiles of huge rasters (previews: a newer tile replaces one
still waiting). In a queue, jobs run in submission order; a preview job waits behind them and
is replaced by a newer preview while it waits, so moving the mouse never piles up work: at
most one job runs and one preview waits. *Bulk* jobs (an import of many lines) wait behind
both, so a click or a preview made meanwhile runs next; the bulk jobs that a bulk job's
``done`` or ``failed`` submits (its continuation: the next segments of an imported line) run
before the other bulk jobs waiting, so that a chain of them ends before the next chain goes
on. Results and exceptions come back to the GUI thread through queued signals.

A *detachable* job (a trace: the engine cannot be interrupted midway) runs its ``work`` on the
queue's daemon trace thread, which the worker waits for; :meth:`JobQueue.shutdown` stops
waiting for it, so that closing the window never waits for a long trace: the daemon thread
finishes it unheeded (:meth:`JobQueue.wait_for_trace` waits for that, before the process ends).

An exception that a job's work raises, whatever its kind, or that its ``done`` raises, goes to
its ``failed``: the queue always goes on with the next job.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot


@dataclass(eq=False)
class Job:
    """``work()`` runs in the worker, then ``done(result)`` or ``failed(exc)`` in the GUI thread,
    then those of every follower (:meth:`JobQueue.follow`). An ``awaited`` job is one whose
    end closing the window waits for (:attr:`JobQueue.awaiting`: a file the user asked for)."""

    work: Callable[[], object]
    done: Callable[[object], None]
    failed: Callable[[BaseException], None]
    preview: bool = False
    key: object = None
    bulk: bool = False
    detachable: bool = False
    awaited: bool = False
    followers: list[tuple[Callable[[object], None], Callable[[BaseException], None]]] = field(
        default_factory=list)


class _Relay(QObject):
    """Lives in the GUI thread; the worker emits, so connections are queued."""

    finished = Signal(object, object, object)  # job, result, exception (one of them None)


def _proj_context() -> object | None:
    """The owner of the PROJ context that pyproj made for this thread's Python thread state,
    if pyproj is in use and made one (else None)."""
    context = sys.modules.get("pyproj._context")
    owner = getattr(context, "get_context_manager", None)
    return owner() if owner is not None else None


class _Detached(Exception):
    """The queue was shut down while a detachable job ran: its result is not waited for."""


#: How often (s) the worker looks whether the queue was shut down while a detachable job runs.
DETACH_POLL_S = 0.05


class _TraceThread:
    """A daemon thread of a queue's own that runs its detachable jobs' work, one at a time and
    always on the same thread: numba's OpenMP threads and ONNX Runtime's state are made for a
    thread once, and a fresh thread per trace made a click 3–7 ms slower."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()  # clear while a work runs (or waits to)
        self._idle.set()

    def run(self, work: Callable[[], object], detach: threading.Event) -> object:
        """``work()`` on the thread, waited for until it ends (its result, or its exception
        raised here) or ``detach`` is set (:class:`_Detached`; the work goes on unheeded)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="roadtracer trace",
                                            daemon=True)
            self._thread.start()
        outcome: list = []
        ended = threading.Event()
        self._idle.clear()
        self._tasks.put((work, outcome, ended))
        while not ended.wait(DETACH_POLL_S):
            if detach.is_set():
                raise _Detached
        result, error = outcome[0]
        if error is not None:
            raise error
        return result

    def stop(self) -> None:
        """End the thread once the work it runs (if any) is done."""
        self._tasks.put(None)

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the work running (if any) to end; True if none runs."""
        return self._idle.wait(timeout_s)

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            work, outcome, ended = task
            try:
                outcome.append((work(), None))
            except BaseException as exc:  # noqa: BLE001 (raised again in the worker)
                outcome.append((None, exc))
            finally:
                ended.set()
                self._idle.set()


def _hand_over(done: Callable[[object], None], failed: Callable[[BaseException], None],
               result: object, error: BaseException | None) -> None:
    """``done(result)``, or ``failed(error)`` where the job failed; an exception that ``done``
    raises goes to ``failed`` too, one that ``failed`` raises to :func:`sys.excepthook`: the
    followers and the next job go on."""
    try:
        if error is None:
            done(result)
            return
    except Exception as exc:  # noqa: BLE001 (the job's own failure)
        error = exc
    try:
        failed(error)
    except Exception:  # noqa: BLE001 (reported, the queue goes on)
        sys.excepthook(*sys.exc_info())


class _Runnable(QRunnable):
    def __init__(self, job: Job, relay: _Relay, proj_contexts: dict[int, object],
                 trace_thread: _TraceThread, detach: threading.Event) -> None:
        super().__init__()
        self.job = job
        self.relay = relay
        self.proj_contexts = proj_contexts
        self.trace_thread = trace_thread
        self.detach = detach

    def run(self) -> None:
        try:
            result = (self.trace_thread.run(self.job.work, self.detach) if self.job.detachable
                      else self.job.work())
        except _Detached:  # shut down: nobody takes the result any more
            pass
        except BaseException as exc:  # noqa: BLE001 (a SystemExit too: lost, it jams the queue)
            self.relay.finished.emit(self.job, None, exc)  # relayed to the GUI thread
        else:
            self.relay.finished.emit(self.job, result, None)
        finally:
            self._keep_proj_context()

    def _keep_proj_context(self) -> None:
        """Keep the PROJ context pyproj made in this job for the jobs after it on this thread.

        pyproj (3.7) keeps a thread's context in the thread's own storage, but lets the
        Python thread state free it; Qt's pool thread gets a new thread state for every job,
        so the next job to use pyproj (a CRS, a transform) would find the freed one and crash
        (pyproj issues 1509, 1622). Held here, it lives as long as the thread; the context of
        a thread that has ended (the pool's only thread expires when idle) is let go.
        """
        owner = _proj_context()
        if owner is None:  # none made in this job (one made before is still held)
            return
        thread = threading.get_native_id()
        for other in [key for key in self.proj_contexts if key != thread]:
            del self.proj_contexts[other]  # the thread that made it has ended: one at a time
        self.proj_contexts[thread] = owner


class JobQueue(QObject):
    """Runs jobs one at a time on a private worker thread.

    Signals
    -------
    started(Job) : a job began (tests count them).
    finished(Job) : a job ended, before its ``done`` or ``failed`` runs.
    idle() : nothing is running or waiting any more.
    """

    started = Signal(object)
    finished = Signal(object)
    idle = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._relay = _Relay(self)
        self._relay.finished.connect(self._on_finished)
        self._proj_contexts: dict[int, object] = {}  # see _Runnable._keep_proj_context
        self._queue: deque[Job] = deque()
        self._bulk: deque[Job] = deque()
        self._preview: Job | None = None
        self._running: Job | None = None
        self._closed = False
        self._detach = threading.Event()  # set at shutdown: detachable jobs are not waited for
        self._trace_thread = _TraceThread()
        # While a bulk job's callbacks run: where the bulk jobs they submit go in ``_bulk``.
        self._continuation: int | None = None

    @property
    def running(self) -> Job | None:
        return self._running

    @property
    def awaiting(self) -> bool:
        """Whether an ``awaited`` job runs or waits."""
        return any(job is not None and job.awaited
                   for job in (self._running, *self._queue, *self._bulk))

    @property
    def pending(self) -> int:
        """Jobs waiting (not running), the pending preview and bulk jobs included."""
        return len(self._queue) + len(self._bulk) + (self._preview is not None)

    def submit(self, job: Job) -> None:
        """Queue a job; a preview replaces the preview that is still waiting, if any. A bulk
        job submitted by a bulk job's callback goes before the other bulk jobs waiting (after
        those the same callback submitted before it)."""
        if self._closed:
            return
        if job.preview:
            self._preview = job
        elif job.bulk and self._continuation is not None:
            self._bulk.insert(self._continuation, job)
            self._continuation += 1
        elif job.bulk:
            self._bulk.append(job)
        else:
            self._queue.append(job)
        if self._continuation is None:  # else the callbacks' end starts the next job
            self._start_next()

    def drop_preview(self) -> None:
        self._preview = None

    def drop_bulk(self) -> None:
        """Drop every bulk job waiting (an import cancelled): none of them runs, nor its
        ``done`` or ``failed``; a bulk job running still ends as usual."""
        self._bulk.clear()
        if self._continuation is not None:  # in a bulk job's callbacks: theirs go first again
            self._continuation = 0

    def follow(self, key: object, done: Callable[[object], None],
               failed: Callable[[BaseException], None]) -> bool:
        """If the running job has ``key``, also hand its result to ``done`` (or its error to
        ``failed``) and return True: a click where the preview being traced ends waits for
        that preview instead of tracing the segment again."""
        if key is None or self._running is None or self._running.key != key:
            return False
        self._running.followers.append((done, failed))
        return True

    def _start_next(self) -> None:
        if self._running is not None:
            return
        if self._queue:
            job = self._queue.popleft()
        elif self._preview is not None:
            job, self._preview = self._preview, None
        elif self._bulk:
            job = self._bulk.popleft()
        else:
            self.idle.emit()
            return
        self._running = job
        self.started.emit(job)
        self._pool.start(_Runnable(job, self._relay, self._proj_contexts, self._trace_thread,
                                   self._detach))

    @Slot(object, object, object)
    def _on_finished(self, job: Job, result: object, error: BaseException | None) -> None:
        self._running = None
        self._continuation = 0 if job.bulk else None
        try:
            if self._closed:
                return
            self.finished.emit(job)
            for done, failed in [(job.done, job.failed), *job.followers]:
                _hand_over(done, failed, result, error)
        finally:
            self._continuation = None
            self._start_next()

    def wait_for_trace(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the work of a detachable job still running (one that
        :meth:`shutdown` left to finish on the trace thread); True if none runs any more."""
        return self._trace_thread.wait(timeout_s)

    def shutdown(self, timeout_ms: int = 30_000) -> bool:
        """Drop waiting jobs, wait for the running one (a detachable one is left to finish on
        its daemon thread, unheeded); True if the worker stopped in time.

        Once it has, :attr:`running` is None: the result of the job that ran last is dropped
        (no ``done`` or ``failed`` runs after a shutdown).
        """
        self._closed = True
        self._detach.set()
        self._trace_thread.stop()
        self._queue.clear()
        self._bulk.clear()
        self._preview = None
        stopped = self._pool.waitForDone(timeout_ms)
        if stopped:
            self._running = None
        return stopped
