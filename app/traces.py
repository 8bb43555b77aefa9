"""Traces as the worker runs them (Qt-free): a request for one segment, the outcome of a job,
and the functions that run them with the CPU as fallback for a failing GPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.model import Point, Segment
from app.params import check_trace_size
from core.errors import BadParameter, NoAdmissiblePath, PointOutsideImage, TraceError
from core.raster import Raster
from core.tracer import TraceParams, trace
from gpu.select import choose_backend

#: Errors that every backend raises alike; anything else from a non-CPU backend falls back.
USER_ERRORS = (BadParameter, NoAdmissiblePath, PointOutsideImage)


@dataclass(frozen=True)
class TraceRequest:
    """One segment to trace from a to b; ``params=None`` asks for a straight segment."""

    a: Point
    b: Point
    params: TraceParams | None


@dataclass(frozen=True)
class TraceOutcome:
    """Segments traced by one job, its time, ``(backend, note)`` if it fell back to the CPU,
    and the traces' notes (:attr:`core.tracer.TraceResult.notes`, e.g. an endpoint on no
    data)."""

    segments: tuple[Segment, ...]
    elapsed_ms: float
    fallback: tuple[object, str] | None = None
    notes: tuple[str, ...] = ()


def error_text(exc: BaseException) -> str:
    """A user-facing one-liner: the project's errors as they are, anything else with its type."""
    return str(exc) if isinstance(exc, TraceError) else f"{type(exc).__name__}: {exc}"


def run_requests(raster: Raster, requests: tuple[TraceRequest, ...], backend) -> TraceOutcome:
    """Trace every request (worker thread). A failing non-CPU backend is replaced by the CPU,
    for a trace within the CPU's size bound (:func:`app.params.check_trace_size`)."""
    start = time.perf_counter()
    segments, fallback, notes = [], None, []
    for request in requests:
        if request.params is None:
            segments.append(Segment.straight(request.a, request.b))
            continue
        try:
            result = trace(raster, request.a, request.b, request.params, backend)
        except USER_ERRORS:
            raise
        except Exception as exc:
            if backend.name == "cpu":
                raise
            failed = f"{backend.name} backend failed: {error_text(exc)}"
            try:
                check_trace_size(request.a, request.b, request.params)  # the CPU's bound
            except BadParameter as too_large:
                raise BadParameter(f"{failed}; on the CPU, {too_large}") from None
            backend, note = choose_backend("cpu")
            fallback = (backend, f"{note}: {failed}")
            result = trace(raster, request.a, request.b, request.params, backend)
        segments.append(Segment.from_result(result, request.params))
        notes += result.notes
    return TraceOutcome(tuple(segments), 1e3 * (time.perf_counter() - start), fallback,
                        tuple(notes))


def trace_anchors(raster: Raster, anchors: tuple[Point, ...], params: TraceParams,
                  backend) -> tuple[TraceOutcome, list[str]]:
    """Trace the segment between every two consecutive anchors (worker thread). One that
    cannot be traced (no admissible path, a bad parameter) stays straight; the reasons are
    returned in order."""
    start = time.perf_counter()
    segments, problems, fallback = [], [], None
    for a, b in zip(anchors[:-1], anchors[1:], strict=True):
        try:
            outcome = run_requests(raster, (TraceRequest(a, b, params),), backend)
        except USER_ERRORS as exc:
            segments.append(Segment.straight(a, b))
            problems.append(error_text(exc))
            continue
        if outcome.fallback is not None:
            fallback = outcome.fallback
            backend = fallback[0]
        segments += outcome.segments
    return TraceOutcome(tuple(segments), 1e3 * (time.perf_counter() - start), fallback), problems


def snap(point, exact: bool = False) -> Point:
    """The pixel centre nearest to a canvas point (x, y); with ``exact`` (a point on a line:
    a junction), the point itself."""
    if exact:
        return float(point[0]), float(point[1])
    return float(round(point[0])), float(round(point[1]))
