"""The CUDA tracer backend: link scores, bidirectional DP, merge and backtracking on the GPU.

``GpuBackend.create()`` is what ``gpu.select`` calls; it raises
:class:`~core.errors.BackendUnavailable` with a one-line reason when pycuda, the driver, a device
or the kernel build is missing. Every call pushes the device's retained primary context and pops
it afterwards, so the backend may be used from any thread (calls are serialised).
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np

from core import surface
from core.backend import BackendSolution, TracerBackend
from core.dp import DPProblem, DPSolution
from core.errors import BackendUnavailable, ModelUnavailable, NoAdmissiblePath
from core.guides import Corridor, Windows
from core.resources import OverMemoryBudget
from core.scores import Evidence, ScoreKind, pad_each
from gpu.context import GpuContext, fast_float64, open_context
from gpu.engine import DeviceTracer
from gpu.evidence import DeviceEvidence, centre_supported
from gpu.kinds import device_kind
from gpu.network import DeviceNetwork


def _corridor_sizes(corridor: Corridor) -> tuple[int, ...]:
    return (1, *[corridor.points] * corridor.guides, 1)


def _problem_sizes(problem: DPProblem) -> tuple[int, ...]:
    return (*(np.shape(link)[0] for link in problem.links), np.shape(problem.links[-1])[1])


#: What to lower where a trace does not fit in the GPU's memory.
DEVICE_MEMORY_ADVICE = "lower the points per guide, the guides or the half-width"


def _within_device_memory(method):
    """``method`` (work on the device) run again once, the device memory the backend caches
    freed first, where the device runs out of memory; where it does again, that memory freed
    too and :class:`~core.resources.OverMemoryBudget` naming what to lower (the backend goes
    on working for smaller traces)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        out_of_memory = self._tracer.cuda.MemoryError
        try:
            return method(self, *args, **kwargs)
        except out_of_memory:
            self.release()
        try:
            return method(self, *args, **kwargs)
        except out_of_memory as exc:
            self.release()
            reason = str(exc).strip() or type(exc).__name__
            raise OverMemoryBudget(f"the trace does not fit in the GPU's memory ({reason})",
                                   DEVICE_MEMORY_ADVICE, shorter_legs=True) from None

    return run


def _no_path(windows: Windows) -> NoAdmissiblePath:
    return NoAdmissiblePath(
        f"no polyline turns by at most {np.rad2deg(windows.max_angle_rad):.4g}° at every guide; "
        "raise the max angle, add guides or widen the corridor")


class GpuBackend(TracerBackend):
    """CUDA backend (pycuda).

    Parameters
    ----------
    context : gpu.context.GpuContext
    method : {"auto", "rmq", "reduce"}
        DP step kernel (see :class:`gpu.engine.DeviceTracer`); ``auto`` picks the sparse-table
        kernel whenever it fits the device.
    precision : {"auto", "float64", "float32"}
        Arithmetic of link scores and DP; ``auto``: float64 where the device computes it at
        full rate or half (:func:`gpu.context.fast_float64`), float32 elsewhere.
    blocking_sync : bool
        Wait for the device without spinning on a CPU core (batch workers sharing a GPU).
    """

    name = "gpu"

    def __init__(self, context: GpuContext, method: str = "auto", precision: str = "auto",
                 blocking_sync: bool = False):
        self.context = context
        if precision == "auto":
            precision = "float64" if fast_float64(context) else "float32"
        self.description = f"GPU: {context.name}" + ("" if precision == "float64"
                                                    else ", float32 link scores and DP")
        with context.active():
            self._tracer = DeviceTracer(context, method, precision, blocking_sync)
            self._evidence = DeviceEvidence(self._tracer)
        self._centre_on_device = centre_supported()
        self._network = None
        self._network_path = None
        self._network_note = ""
        if self.model_note:
            self.description += f" ({self.model_note})"

    @classmethod
    def create(cls, method: str = "auto", device: int = 0, precision: str = "auto",
               blocking_sync: bool = False) -> GpuBackend:
        """The backend on device ``device``, or :class:`BackendUnavailable` saying why not."""
        context = open_context(device)
        import pycuda.driver as cuda

        try:
            return cls(context, method, precision, blocking_sync)
        except (cuda.Error, cuda.CompileError, OSError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            what = ("its memory is full (other programs hold it)"
                    if isinstance(exc, cuda.MemoryError)
                    else "the CUDA kernels cannot be built or loaded")
            raise BackendUnavailable(f"GPU unavailable: {what} ({reason})") from None

    def __del__(self):
        # Destroy the stream, events and buffers with the context current: pycuda cannot make it
        # current itself on a thread other than the one that opened it (it would leak them).
        tracer = self.__dict__.pop("_tracer", None)
        evidence = self.__dict__.pop("_evidence", None)  # holds the tracer too
        network = self.__dict__.pop("_network", None)
        if tracer is None:
            return
        try:
            with self.context.active():
                if network is not None:
                    network.release()
                del evidence, tracer, network
        except Exception:  # interpreter shutdown: the driver may already be gone
            pass

    @property
    def precision(self) -> str:
        """Arithmetic of link scores and DP on the device: ``float64`` or ``float32``."""
        return self._tracer.precision

    @property
    def method(self) -> str:
        """The DP step kernel requested (``auto``, ``rmq`` or ``reduce``)."""
        return self._tracer.method

    def release(self) -> None:
        """Free the device memory this backend holds (it is allocated again when needed)."""
        with self.context.active():
            self._evidence.release()
            self._tracer.release()
            if self._network is not None:
                self._network.release()
            self._network, self._network_path = None, None

    # -- TracerBackend ----------------------------------------------------------------------

    def score_planes(self, kind: ScoreKind, pixels: np.ndarray, a: np.ndarray, b: np.ndarray,
                     sigma: float, ground_resolution: float | None = None
                     ) -> tuple[np.ndarray, float]:
        """``(planes (P, rows, cols), tau)`` of a (rows, cols, bands) window: the kinds of
        :data:`gpu.kinds.DEVICE_KINDS` computed on the device (the surface model too), other
        kinds on the CPU. The planes stay in the device's evidence
        buffer too, so the trace that follows uploads nothing."""
        return self.score_planes_many(kind, [(pixels, a, b)], sigma,
                                      ground_resolution=ground_resolution)[0]

    @_within_device_memory
    def score_planes_many(self, kind: ScoreKind, windows: list, sigma: float,
                          deferred: bool = False, pads: list | None = None,
                          ground_resolution: float | None = None
                          ) -> list[tuple[np.ndarray, float]]:
        """:meth:`score_planes` of every (pixels, a, b) of ``windows``, each device kernel
        launched once for all of them, padded by ``pads`` (on the device for ``surface`` and
        ``centre``); the planes stay on the device too. With ``deferred``, the device's planes
        come back to the host by the end of the next :meth:`trace_many`, which uses them where
        they are."""
        implementation, _ = device_kind(kind)
        if (implementation is None
                or not all(self._evidence.supports(pixels) for pixels, _, _ in windows)
                or (implementation.centred and not self._centre_on_device)):
            return self._host_planes(kind, windows, sigma, pads, ground_resolution)
        windows = [(pixels, np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
                   for pixels, a, b in windows]
        with self.context.active():
            network = None
            if implementation.needs_model:
                network = self._surface_network()
                if network is None:
                    return self._host_planes(kind, windows, sigma, pads, ground_resolution)
            return implementation.planes(self._evidence, windows, sigma, network, deferred,
                                         pads, ground_resolution)

    def _host_planes(self, kind: ScoreKind, windows: list, sigma: float, pads,
                     ground_resolution: float | None) -> list:
        """The CPU's planes of every window (:meth:`TracerBackend.score_planes`), padded."""
        return pad_each([TracerBackend.score_planes(self, kind, pixels, a, b, sigma,
                                                    ground_resolution)
                         for pixels, a, b in windows], pads, kind.sampler)

    @property
    def model_note(self) -> str:
        """Where the surface model runs: "" on the device, else the one-line reason it runs
        on the CPU."""
        with self.context.active():
            self._surface_network()
        return self._network_note

    def surface_network(self):
        """The surface model as the device runs it (:class:`gpu.network.DeviceNetwork`), or
        None (``model_note`` says why). Call its methods inside ``context.active()``."""
        with self.context.active():
            return self._surface_network()

    def _surface_network(self):
        """The device copy of core.surface.MODEL_PATH's network, or None (the reason in
        ``_network_note``). Call inside ``context.active()``."""
        path = os.fspath(surface.MODEL_PATH)
        if self._network_path != path:
            if self._network is not None:
                self._network.release()
            self._network, self._network_path, self._network_note = None, path, ""
            try:
                self._network = DeviceNetwork(
                    path, self._tracer.stream, self._tracer.kernels.network,
                    (surface.INPUT_PLANES, surface.OUTPUT_PLANES))
            except ModelUnavailable as exc:
                self._network_note = f"surface model on the CPU: {exc}"
            except self._tracer.cuda.MemoryError:
                self._network_path = None  # prepared again once memory is freed
                raise
            except Exception as exc:  # onnx's evaluator, the driver: any failure means the CPU
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                self._network_note = (f"surface model on the CPU: it cannot be prepared on the "
                                      f"device ({type(exc).__name__}: {reason})")
        return self._network

    @_within_device_memory
    def link_scores(self, evidence: Evidence, corridor: Corridor) -> list[np.ndarray]:
        """links[t] of shape (n_t, n_{t+1}), float64, for t = 0..m, computed on the device (in
        the backend's precision)."""
        tracer = self._tracer
        with self.context.active():
            plan = tracer.plan(_corridor_sizes(corridor))
            plan.bind_corridor(tracer, corridor)
            tracer.launch_links(plan, evidence, tracer.bind_evidence(evidence))
            plan.host_links = None
            sizes = plan.schedule.sizes
            stored = []
            for t, buffer in enumerate(plan.links):
                shape = (sizes[t], sizes[t + 1])
                host = np.empty(shape[::-1] if plan.schedule.transposed(t) else shape,
                                dtype=tracer.real)
                tracer.cuda.memcpy_dtoh_async(host, buffer, tracer.stream)
                stored.append(host)
            tracer.synchronize()
        return [np.ascontiguousarray(host.T if plan.schedule.transposed(t) else host,
                                     dtype=np.float64) for t, host in enumerate(stored)]

    @_within_device_memory
    def solve(self, problem: DPProblem) -> DPSolution:
        """The optimal indices (m,) and total score of ``problem`` (links from the host)."""
        with self.context.active():
            plan = self._bind_problem(problem)
            plan.launch_dp(self._tracer)
            result = self._tracer.fetch(plan)
            self._tracer.synchronize()
            total, _, indices = plan.solution(result)
        if not np.isfinite(total):
            raise _no_path(problem.windows)
        return DPSolution(indices, total)

    @_within_device_memory
    def trace(self, evidence: Evidence, corridor: Corridor, windows: Windows) -> BackendSolution:
        """Link scores + DP + backtracking on the device; timings_ms from CUDA events.

        timings_ms keys: ``gpu_upload`` (evidence, geometry), ``link_scores``, ``dp`` (DP rounds,
        merge, backtracking) and ``gpu_download`` (the result).
        """
        tracer = self._tracer
        with self.context.active():
            marks = tracer.events
            marks[0].record(tracer.stream)
            with tracer.aside():  # while the evidence kernels queued before run
                plan = self._bind_trace(evidence, corridor, windows)
            image = tracer.bind_evidence(evidence)
            marks[1].record(tracer.stream)
            tracer.launch_links(plan, evidence, image)
            marks[2].record(tracer.stream)
            plan.launch_dp(tracer)
            marks[3].record(tracer.stream)
            result = tracer.fetch(plan)
            marks[4].record(tracer.stream)
            tracer.synchronize()
            total, along, indices = plan.solution(result)
            spans = [marks[i].time_till(marks[i + 1]) for i in range(4)]
        if not np.isfinite(total):
            raise _no_path(windows)
        timings = dict(zip(("gpu_upload", "link_scores", "dp", "gpu_download"), spans,
                           strict=True))
        return BackendSolution(indices, total, along, timings)

    @_within_device_memory
    def trace_many(self, problems: list) -> list:
        """:meth:`trace` of every (evidence, corridor, windows) of ``problems``, all queued on
        the device before one wait for their results; timings_ms: ``device`` (the whole
        queue's wall time, shared evenly). One problem is :meth:`trace` itself. Planes made
        with ``deferred`` are filled when it returns, whatever ``problems`` holds."""
        if not problems:
            with self.context.active():
                self._tracer.synchronize()
            return []
        if len(problems) == 1:
            return super().trace_many(problems)
        tracer = self._tracer
        start = time.perf_counter()
        # Problems of the same shape one after the other: they share the tracer's plan.
        order = sorted(range(len(problems)), key=lambda k: _corridor_sizes(problems[k][1]))
        with self.context.active():
            # Every problem's result side by side on the device, copied back at once.
            total_size = sum(2 * corridor.guides + 4 for _, corridor, _ in problems)
            results = tracer.slot("results", 8 * total_size)
            queued, at = {}, 0
            for k in order:
                evidence, corridor, windows = problems[k]
                plan = self._bind_trace(evidence, corridor, windows)
                tracer.launch_links(plan, evidence, tracer.bind_evidence(evidence))
                plan.launch_dp(tracer, results + 8 * at)
                queued[k] = (plan, at)
                at += plan.result_size
            host = tracer.result_host(total_size)
            tracer.cuda.memcpy_dtoh_async(host[:total_size], results, tracer.stream)
            tracer.synchronize()
            solved = [plan.solution(host[first:first + plan.result_size])
                      for plan, first in (queued[k] for k in range(len(problems)))]
        share = {"device": 1e3 * (time.perf_counter() - start) / len(problems)}
        return [BackendSolution(indices, total, along, dict(share))
                if np.isfinite(total) else _no_path(windows)
                for (total, along, indices), (_, _, windows) in zip(solved, problems,
                                                                    strict=True)]

    def time_dp(self, problem: DPProblem, repeats: int) -> list[float]:
        """CUDA-event milliseconds of DP + merge + backtracking + result copy, links resident."""
        with self.context.active():
            plan = self._bind_problem(problem)
            return self._time(lambda: plan.launch_dp(self._tracer), plan, repeats)

    def time_trace(self, evidence: Evidence, corridor: Corridor, windows: Windows,
                   repeats: int) -> list[float]:
        """CUDA-event milliseconds of link scores + DP + backtracking + result copy.

        Evidence, points and windows are uploaded once beforehand (resident), as when the same
        image is traced again.
        """
        tracer = self._tracer
        with self.context.active():
            plan = self._bind_trace(evidence, corridor, windows)
            image = tracer.bind_evidence(evidence)

            def run():
                tracer.launch_links(plan, evidence, image)
                plan.launch_dp(tracer)

            return self._time(run, plan, repeats)

    # -- helpers ----------------------------------------------------------------------------

    def _bind_problem(self, problem: DPProblem):
        plan = self._tracer.plan(_problem_sizes(problem))
        plan.bind_windows(self._tracer, problem.windows)
        plan.bind_links(self._tracer, problem.links)
        return plan

    def _bind_trace(self, evidence: Evidence, corridor: Corridor, windows: Windows):
        plan = self._tracer.plan(_corridor_sizes(corridor))
        plan.bind(self._tracer, corridor, windows)
        plan.host_links = None
        return plan

    def _time(self, run, plan, repeats: int) -> list[float]:
        """Run ``run`` + result copy once to warm up, then ``repeats`` timed times."""
        tracer = self._tracer
        start, end = tracer.events[:2]
        times = []
        for repeat in range(repeats + 1):
            start.record(tracer.stream)
            run()
            tracer.fetch(plan)
            end.record(tracer.stream)
            end.synchronize()
            if repeat:
                times.append(start.time_till(end))
        return times
