"""Trace the optimal angle-constrained polyline between two clicked points.

:func:`trace` validates the request, reads only the corridor window of the raster (plus the
gradient margin), builds evidence with the chosen score kind, and asks a backend for the
optimum.

Defaults scale with the click distance L = |b - a| (px):

* halfwidth w = clip(0.2·L, 8, 150) px;
* guides m = clip(round(L / 25), 1, 40), i.e. one guide every ~25 px;
* points d = 2·round(w) + 1, i.e. guide points 1 px apart;
* max angle 30°, σ = 1.5 px, score ``colour``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from core.backend import CpuBackend, TracerBackend
from core.errors import BadParameter, PointOutsideImage
from core.gradient import gaussian_gradient, gradient_margin
from core.guides import Corridor, admissible_windows, build_corridor, check_max_angle
from core.raster import Raster
from core.scores import Evidence, ScoreInputs, get_score_kind


@dataclass(frozen=True)
class TraceParams:
    """Tracing parameters; ``None`` means "scale with the click distance" (module docstring)."""

    guides: int | None = None
    points: int | None = None
    halfwidth: float | None = None
    max_angle: float = 30.0
    sigma: float = 1.5
    score: str = "colour"

    def resolve(self, length: float) -> TraceParams:
        """A copy with every ``None`` replaced by its default for click distance ``length``."""
        halfwidth = self.halfwidth if self.halfwidth is not None else float(
            np.clip(0.2 * length, 8.0, 150.0))
        guides = self.guides if self.guides is not None else int(
            np.clip(round(length / 25.0), 1, 40))
        points = self.points if self.points is not None else 2 * int(round(halfwidth)) + 1
        return replace(self, guides=guides, points=points, halfwidth=halfwidth)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TraceResult:
    """The optimal polyline and how it was found.

    polyline : (m+2, 2) float64, a → guide points → b, pixel (x, y).
    indices : (m,) chosen point index on each guide.
    score : total score; link_scores : (m+1,) per link.
    """

    polyline: np.ndarray
    indices: np.ndarray
    score: float
    link_scores: np.ndarray
    params: TraceParams
    backend: str
    timings_ms: dict = field(default_factory=dict)


def check_point(raster: Raster, point, name: str) -> np.ndarray:
    """Return the point as (2,) float64, or raise if it is not finite and inside the image."""
    try:
        xy = np.asarray(point, dtype=np.float64).reshape(2)
    except (TypeError, ValueError):
        raise BadParameter(f"endpoint {name}={point!r} is not an (x, y) pair") from None
    if not np.all(np.isfinite(xy)):
        raise BadParameter(f"endpoint {name}=({xy[0]:g}, {xy[1]:g}) is not finite")
    if not (0 <= xy[0] <= raster.width - 1 and 0 <= xy[1] <= raster.height - 1):
        raise PointOutsideImage(f"endpoint {name}=({xy[0]:g}, {xy[1]:g}) lies outside the "
                                f"{raster.width}×{raster.height} image")
    return xy


def corridor_evidence(raster: Raster, corridor: Corridor, params: TraceParams) -> Evidence:
    """Read the corridor window (with gradient margin) and build the score kind's evidence."""
    kind = get_score_kind(params.score)
    points = np.vstack([corridor.a, corridor.b, corridor.guide_points.reshape(-1, 2)])
    margin = gradient_margin(params.sigma) + 2  # also covers the patches around a and b
    col0 = max(int(np.floor(points[:, 0].min())) - margin, 0)
    row0 = max(int(np.floor(points[:, 1].min())) - margin, 0)
    col1 = min(int(np.ceil(points[:, 0].max())) + margin + 1, raster.width)
    row1 = min(int(np.ceil(points[:, 1].max())) + margin + 1, raster.height)
    pixels = raster.read_window(row0, row1, col0, col1)
    gx, gy = gaussian_gradient(pixels, params.sigma)
    origin = np.array([col0, row0], dtype=np.float64)
    planes, tau = kind.planes(ScoreInputs(pixels, gx, gy, corridor.a - origin, corridor.b - origin))
    return Evidence(np.ascontiguousarray(planes, dtype=np.float32), (col0, row0),
                    (raster.width, raster.height), kind.sampler, tau)


def trace(raster: Raster, a, b, params: TraceParams | None = None,
          backend: TracerBackend | None = None) -> TraceResult:
    """Optimal polyline from a to b on ``raster``.

    Raises
    ------
    PointOutsideImage, BadParameter, NoAdmissiblePath
    """
    start = time.perf_counter()
    params = params or TraceParams()
    backend = backend or CpuBackend()
    a = check_point(raster, a, "a")
    b = check_point(raster, b, "b")
    if params.halfwidth is not None and not (np.isfinite(params.halfwidth)
                                             and params.halfwidth > 0):
        raise BadParameter(f"halfwidth must be > 0 px, got {params.halfwidth}")
    if not np.isfinite(params.sigma) or params.sigma <= 0:
        raise BadParameter(f"sigma must be > 0 px, got {params.sigma}")
    get_score_kind(params.score)
    max_angle_rad = check_max_angle(params.max_angle)
    length = float(np.hypot(*(b - a)))
    if length < 2:
        raise BadParameter(f"endpoints a=({a[0]:g}, {a[1]:g}) and b=({b[0]:g}, {b[1]:g}) "
                           "must be at least 2 px apart")
    params = params.resolve(length)
    corridor = build_corridor(a, b, params.guides, params.points, params.halfwidth)
    windows = admissible_windows(corridor, max_angle_rad)
    geometry_done = time.perf_counter()
    evidence = corridor_evidence(raster, corridor, params)
    evidence_done = time.perf_counter()
    solution = backend.trace(evidence, corridor, windows)
    timings = {"geometry": 1e3 * (geometry_done - start),
               "evidence": 1e3 * (evidence_done - geometry_done), **solution.timings_ms}
    timings["total"] = 1e3 * (time.perf_counter() - start)
    return TraceResult(corridor.polyline(solution.indices), solution.indices, solution.score,
                       solution.link_scores, params, backend.name, timings)
