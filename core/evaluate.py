"""Accuracy runner: trace every ground-truth case with our tracer or a peer and summarise.

A cases file is a JSON list of ``{"id", "image", "a": [x, y], "b": [x, y], "gt": [[x, y], …],
"tags": […]}``; ``image`` is relative to the cases file's folder; an optional
``"ground_resolution"`` (metres per pixel) says what a PNG's georeferencing cannot, and where a
case does not say it, a ``sources.json`` beside the cases file may (:data:`SOURCES_FILE`: the
layout of the project's data sets, a list of ``{"image", "gsd_m"}``). Every case
yields one :class:`CaseResult`; a trace that raises counts as a failure (completeness 0,
distances ∞), it is never dropped. :func:`summarise` reports, overall (``all``) and per tag,
the count, the failures, and the median and mean of every metric and of the latency.

Latency is wall time of one click (tracing only; the image is already in memory). Our
tracer is warmed up once before timing so that numba's one-off compilation is not counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from core.errors import BadParameter, PointOutsideImage, TraceError
from core.guides import MIN_ENDPOINT_DISTANCE
from core.metrics import (
    FAILED,
    PathMetrics,
    densify,
    line_shift,
    path_metrics,
    point_to_polyline,
)
from core.output import json_number, read_json
from core.raster import Raster, load_image
from core.tracer import (
    GROUND_RESOLUTION_RANGE,
    TraceParams,
    check_point,
    join_polylines,
    trace,
    with_evidence_from,
)

#: Metric names in report order (fields of :class:`PathMetrics`) plus latency.
METRICS = tuple(f.name for f in fields(PathMetrics))
OURS = "ours"
#: A line is good once this share of the true line lies within 5 px of it (corrections).
GOOD_COMPLETENESS_5 = 0.9
#: Where a data set describes its images: beside the cases file, a JSON list of objects whose
#: ``"image"`` (relative to its folder) and ``"gsd_m"`` (metres per pixel) give a case's
#: ground resolution when the case does not.
SOURCES_FILE = "sources.json"
#: How far (px) a case's true line may reach beyond the outer edges of its image's pixels (half
#: a pixel beyond the outermost centres): a line drawn to the image's edge, rounded.
GT_TOLERANCE = 1.0


@dataclass(frozen=True)
class Case:
    """One click-to-trace case; ``gt`` has shape (g, 2), ``a`` and ``b`` shape (2,), (x, y);
    ``ground_resolution``: the image's metres per pixel where the case says it."""

    id: str
    image: str
    a: np.ndarray
    b: np.ndarray
    gt: np.ndarray
    tags: tuple[str, ...]
    ground_resolution: float | None = None

    @property
    def dataset(self) -> str | None:
        """The case's data set: its first tag (None when it has none, or the first is
        ``nontrivial``)."""
        return self.tags[0] if self.tags and self.tags[0] != "nontrivial" else None


@dataclass(frozen=True)
class CaseResult:
    """Outcome of one method on one case; ``polyline`` (n, 2) is None when it failed."""

    case: Case
    method: str
    metrics: PathMetrics
    latency_ms: float
    polyline: np.ndarray | None
    error: str | None = None


def load_cases(path: str | os.PathLike, limit: int | None = None) -> list[Case]:
    """Read a cases file; image paths become absolute (relative to the file's folder).

    Raises
    ------
    BadParameter
        If the file is unreadable, not JSON, not a non-empty list of cases, a case is
        malformed (one message naming the case and its field), or two cases share an id.
    """
    path = os.fspath(path)
    records = read_json(path, "cases file")
    if not isinstance(records, list) or not records:
        raise BadParameter(f"cases file {path} must be a non-empty JSON list of cases "
                           '({"id", "image", "a", "b", "gt", "tags"}), got '
                           + ("an empty list" if records == [] else
                              "null" if records is None else type(records).__name__))
    folder = os.path.dirname(os.path.abspath(path))
    cases = [_case(record, index, folder, path)
             for index, record in enumerate(records[:limit] if limit is not None else records)]
    seen = set()
    for case in cases:  # reports key cases by id
        if case.id in seen:
            raise BadParameter(f"{path}: case id {case.id!r} is given twice; ids must be unique")
        seen.add(case.id)
    if any(case.ground_resolution is None for case in cases):
        stated = sources_ground_resolutions(folder)
        cases = [case if case.ground_resolution is not None else
                 replace(case, ground_resolution=stated.get(os.path.normpath(case.image)))
                 for case in cases]
    return cases


def sources_ground_resolutions(folder: str) -> dict[str, float]:
    """{normalised absolute image path: metres per pixel} of the :data:`SOURCES_FILE` in
    ``folder`` (empty where there is none; entries without an ``image`` name or a ``gsd_m``
    within :data:`core.tracer.GROUND_RESOLUTION_RANGE` are left out).

    Raises
    ------
    BadParameter
        If the file exists but cannot be read or is not JSON.
    """
    path = os.path.join(folder, SOURCES_FILE)
    if not os.path.lexists(path):
        return {}
    document = read_json(path, "image sources file beside the cases")
    stated = {}
    for entry in document if isinstance(document, list) else ():
        if not isinstance(entry, dict):
            continue
        image, ground = entry.get("image"), _metres_per_pixel(entry.get("gsd_m"))
        if isinstance(image, str) and image and ground is not None:
            stated[os.path.normpath(os.path.join(folder, image))] = ground
    return stated


def _case(record, index: int, folder: str, path: str) -> Case:
    """One checked case of a cases file (``index``: its place in the list)."""
    def bad(field: str, why: str) -> BadParameter:
        name = record.get("id") if isinstance(record, dict) else None
        which = f"case {name!r}" if isinstance(name, (str, int)) else f"case #{index}"
        return BadParameter(f"{path}: {which}: {field} {why}")

    if not isinstance(record, dict):
        raise bad("the case", "is not a JSON object")
    for key in ("id", "image", "a", "b", "gt"):
        if key not in record:
            raise bad(key, "is missing")
    if not isinstance(record["id"], (str, int)) or isinstance(record["id"], bool):
        raise bad("id", "must be a string or an integer")
    if not isinstance(record["image"], str) or not record["image"]:
        raise bad("image", "must be a file name")
    points = {}
    for key in ("a", "b", "gt"):
        pairs = record[key] if key == "gt" else [record[key]]
        if not isinstance(pairs, list) or not all(
                isinstance(pair, list) and len(pair) == 2 for pair in pairs):
            raise bad(key, "must be " + ("an [x, y] pair" if key != "gt" else
                                         "a list of [x, y] pairs"))
        numbers = [json_number(value) for pair in pairs for value in pair]
        if None in numbers:
            raise bad(key, "must hold finite numbers only")
        points[key] = np.array(numbers, dtype=np.float64).reshape((-1, 2) if key == "gt" else 2)
    if len(points["gt"]) < 2:
        raise bad("gt", "needs at least 2 points")
    if np.hypot(*(points["b"] - points["a"])) < MIN_ENDPOINT_DISTANCE:
        raise bad("a and b", f"must be at least {MIN_ENDPOINT_DISTANCE:g} px apart")
    tags = record.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise bad("tags", "must be a list of strings")
    given = record.get("ground_resolution")
    ground = _metres_per_pixel(given)
    if given is not None and ground is None:
        low, high = GROUND_RESOLUTION_RANGE
        raise bad("ground_resolution", f"must be a number of metres per pixel from {low:g} "
                                       f"to {high:g}")
    return Case(str(record["id"]), os.path.join(folder, record["image"]), points["a"],
                points["b"], points["gt"], tuple(tags), ground)


def _metres_per_pixel(value) -> float | None:
    """``value`` (from JSON) as a float if it is a number within
    :data:`core.tracer.GROUND_RESOLUTION_RANGE`, else None."""
    number = json_number(value)
    low, high = GROUND_RESOLUTION_RANGE
    return number if number is not None and low <= number <= high else None


def read_report(path: str | os.PathLike) -> dict[str, dict[str, dict]]:
    """The per-case rows of a report written by ``eval --json`` (or scripts/crossval_surface.py).

    Returns
    -------
    dict
        ``{method: {case id: row}}``, each row a dict with ``completeness_3`` and
        ``completeness_5`` in [0, 1] (a failed case's null read as 0) and the other fields of
        :func:`report_document`.

    Raises
    ------
    BadParameter
        If the file is unreadable or not such a report (one message naming what is wrong).
    """
    path = os.fspath(path)
    document = read_json(path, "report")
    methods = document.get("methods") if isinstance(document, dict) else None
    if not isinstance(methods, dict) or not methods:
        raise BadParameter(f"report {path} lists no methods: expected the JSON that eval --json "
                           "writes")
    runs = {}
    for method, run in methods.items():
        rows = run.get("cases") if isinstance(run, dict) else None
        if not isinstance(rows, list):
            raise BadParameter(f"report {path}: method {method!r} has no list of cases")
        by_id = {}
        for row in rows:
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise BadParameter(f"report {path}: method {method!r} has a case without an id")
            if row["id"] in by_id:
                raise BadParameter(f"report {path}: method {method!r} lists case {row['id']!r} "
                                   "twice")
            row = dict(row)
            for metric in ("completeness_3", "completeness_5"):
                value = 0.0 if row.get(metric) is None else row[metric]
                if (isinstance(value, bool) or not isinstance(value, (int, float))
                        or not 0.0 <= value <= 1.0):
                    raise BadParameter(f"report {path}: case {row['id']!r}: {metric} must be a "
                                       "number in [0, 1]")
                row[metric] = float(value)
            by_id[row["id"]] = row
        runs[method] = by_id
    return runs


def report_cases(runs: dict[str, dict[str, dict]], cases_path: str | os.PathLike
                 ) -> dict[str, Case]:
    """Case id → :class:`Case` (its first tag: its dataset) for every case of ``runs``
    (:func:`read_report`), from the cases file the report measured.

    Raises
    ------
    BadParameter
        If the cases file cannot be read (:func:`load_cases`) or lacks a case of the report.
    """
    cases = {case.id: case for case in load_cases(cases_path)}
    unknown = sorted({case for rows in runs.values() for case in rows} - cases.keys())
    if unknown:
        raise BadParameter(f"{len(unknown)} cases of the report are not in {os.fspath(cases_path)} "
                           f"(e.g. {unknown[0]!r}): give the cases file it measured")
    return {name: case for name, case in cases.items()
            if any(name in rows for rows in runs.values())}


class RasterCache:
    """Loads each image once (cases share images)."""

    def __init__(self):
        self._rasters: dict[str, Raster] = {}

    def get(self, path: str) -> Raster:
        """The image at ``path``, loaded on first use."""
        if path not in self._rasters:
            self._rasters[path] = load_image(path)
        return self._rasters[path]


def check_truth(raster: Raster, gt: np.ndarray) -> None:
    """Raise :class:`PointOutsideImage` naming the first point of the true line ``gt`` (g, 2)
    that lies more than :data:`GT_TOLERANCE` px beyond the edges of ``raster``'s pixels (the
    metrics would densify a line to a far point into millions of points, or overflow)."""
    low = -0.5 - GT_TOLERANCE
    high = np.array([raster.width, raster.height]) - 0.5 + GT_TOLERANCE
    outside = np.flatnonzero(np.any((gt < low) | (gt > high), axis=1))
    if outside.size:
        x, y = gt[outside[0]]
        raise PointOutsideImage(f"point gt[{outside[0]}]=({x:g}, {y:g}) lies outside the "
                                f"{raster.width}×{raster.height} image (more than "
                                f"{GT_TOLERANCE:g} px beyond its edge)")


def check_cases(cases: list[Case], rasters: RasterCache, params: TraceParams | None = None,
                evidence_dir: str | os.PathLike | None = None) -> list[str]:
    """Check that every case's image can be read and holds its endpoints and its true line
    (:func:`check_truth`), and that its evidence raster (with ``evidence_dir``) exists; return
    every file the cases read (the images and evidence rasters).

    Raises
    ------
    BadParameter, ImageReadError, PointOutsideImage
        Naming the first case whose image cannot be read, whose a, b or true line lies
        outside its image, or whose evidence raster is missing.
    """
    files = []
    for case in cases:
        try:
            raster = rasters.get(case.image)
            for name, point in (("a", case.a), ("b", case.b)):
                check_point(raster, point, name)
            check_truth(raster, case.gt)
        except TraceError as exc:
            raise type(exc)(f"case {case.id!r}: {exc}") from None
        files.append(case.image)
        evidence = case_params(params, case, evidence_dir).evidence_path
        if evidence is not None:
            if not os.path.isfile(evidence):
                raise BadParameter(f"case {case.id!r}: evidence raster {evidence} not found")
            files.append(evidence)
    return files


def ours_method(params: TraceParams, backend=None) -> Callable:
    """Our tracer as a method ``(raster, a, b) -> polyline (n, 2)``."""

    def run(raster, a, b):
        return trace(raster, a, b, params, backend).polyline

    return run


def case_params(params: TraceParams | None, case: Case,
                evidence_dir: str | os.PathLike | None = None) -> TraceParams:
    """Our parameters for ``case``: with ``evidence_dir``, traced on the evidence raster there
    that is named like the case's image (:func:`core.tracer.with_evidence_from`); the case's
    ground resolution where it gives one and ``params`` do not."""
    params = params or TraceParams()
    if case.ground_resolution is not None and params.ground_resolution is None:
        params = replace(params, ground_resolution=case.ground_resolution)
    return with_evidence_from(params, None if evidence_dir is None else Path(evidence_dir),
                              Path(case.image).name)


def method_function(name: str, params: TraceParams | None = None, backend=None) -> Callable:
    """``ours`` (with ``params``) or a peer from :data:`core.peers.PEERS`."""
    if name == OURS:
        return ours_method(params or TraceParams(), backend)
    from core.peers import PEERS

    try:
        return PEERS[name]
    except KeyError:
        raise BadParameter(f"unknown method {name!r}; choose from "
                           f"{', '.join([OURS, *PEERS])}") from None


def case_method(method: str, params: TraceParams | None, case: Case, backend=None,
                evidence_dir: str | os.PathLike | None = None) -> Callable:
    """The method that traces ``case``: ours with the case's parameters (:func:`case_params`),
    a peer as it is."""
    if method == OURS:
        return ours_method(case_params(params, case, evidence_dir), backend)
    return method_function(method)


def run_case(function: Callable, method: str, case: Case, raster: Raster) -> CaseResult:
    """Trace one case and score it.

    Any exception of the method (ours: :class:`TraceError`; peers: whatever OpenCV or
    scikit-image raise) becomes a failed result whose ``error`` says what happened.
    """
    start = time.perf_counter()
    try:
        polyline = np.asarray(function(raster, case.a, case.b), dtype=np.float64)
    except Exception as exc:  # noqa: BLE001 - any failure of a method is a failed case
        latency = 1e3 * (time.perf_counter() - start)
        return CaseResult(case, method, FAILED, latency, None, f"{type(exc).__name__}: {exc}")
    latency = 1e3 * (time.perf_counter() - start)
    if polyline.ndim != 2 or polyline.shape[1:] != (2,) or len(polyline) == 0 \
            or not np.isfinite(polyline).all():
        return CaseResult(case, method, FAILED, latency, None,
                          f"the method returned no finite polyline (shape {polyline.shape})")
    return CaseResult(case, method, path_metrics(polyline, case.gt), latency, polyline)


def evaluate(cases: list[Case], method: str, params: TraceParams | None = None, backend=None,
             rasters: RasterCache | None = None,
             evidence_dir: str | os.PathLike | None = None,
             progress: Callable[[], object] | None = None) -> list[CaseResult]:
    """Run one method on every case (images loaded once; ours warmed up before timing).
    ``evidence_dir``: ours traces each case on its image's evidence raster there
    (:func:`case_params`); the peers always trace the images. ``progress()`` is called after
    each case."""
    rasters = rasters or RasterCache()
    method_function(method, params, backend)  # an unknown method fails here
    functions = [case_method(method, params, case, backend, evidence_dir) for case in cases]
    if method == OURS and cases:
        first = cases[0]
        try:
            functions[0](rasters.get(first.image), first.a, first.b)
        except TraceError:
            pass  # the timed run reports it
    results = []
    for function, case in zip(functions, cases, strict=True):
        results.append(run_case(function, method, case, rasters.get(case.image)))
        if progress is not None:
            progress()
    return results


@dataclass(frozen=True)
class Correction:
    """A line corrected by a simulated user: ``added`` vertices until it was good (None: not
    good after the most allowed, or a leg failed), the last line traced (n, 2) (None if a leg
    failed) and the vertices added, (k, 2)."""

    added: int | None
    polyline: np.ndarray | None
    vertices: np.ndarray


def corrections_needed(function: Callable, case: Case, raster: Raster, most: int
                       ) -> Correction:
    """How many vertices a user adds before the line of ``function`` (a method
    ``(raster, a, b) -> polyline``) is good (completeness @5 px ≥ ``GOOD_COMPLETENESS_5``):
    each one where the line misses the road worst (the true line's point farthest from it),
    the line then traced leg by leg through the vertices, as the app does when a point of a
    line is dragged onto the road (only the leg a vertex splits is traced again); 0 to
    ``most``."""
    truth, _ = densify(case.gt)
    stops = [(-1, case.a), (len(truth), case.b)]  # (place along the true line, vertex)
    traced = {}  # (start, end) → the leg between them
    polyline = None
    for added in range(most + 1):
        vertices = np.array([point for _, point in stops[1:-1]], dtype=np.float64).reshape(-1, 2)
        try:
            legs = []
            for (_, p), (_, q) in zip(stops[:-1], stops[1:], strict=False):
                key = (tuple(p), tuple(q))
                if key not in traced:
                    traced[key] = np.asarray(function(raster, p, q), dtype=np.float64)
                legs.append(traced[key])
        except Exception:  # noqa: BLE001 - a failed leg: as a failed case in run_case
            return Correction(None, None, vertices)
        polyline = join_polylines(legs)
        if path_metrics(polyline, case.gt).completeness_5 >= GOOD_COMPLETENESS_5:
            return Correction(added, polyline, vertices)
        if added < most:
            worst = int(np.argmax(point_to_polyline(truth, polyline)))
            stops = sorted([*stops, (worst, truth[worst])], key=lambda stop: stop[0])
    return Correction(None, polyline, vertices)


#: Most vertices ``--corrections`` adds to a line.
MOST_CORRECTIONS = 5


def check_corrections(most: int | None) -> None:
    """BadParameter unless ``most`` (``--corrections``; None: not asked for) is 0 to
    :data:`MOST_CORRECTIONS`."""
    if most is not None and not 0 <= most <= MOST_CORRECTIONS:
        raise BadParameter(f"--corrections must be 0 to {MOST_CORRECTIONS}, got {most}")


def corrections(cases: list[Case], method: str, most: int, params: TraceParams | None = None,
                backend=None, rasters: RasterCache | None = None,
                evidence_dir: str | os.PathLike | None = None,
                progress: Callable[[], object] | None = None) -> list[Correction]:
    """:func:`corrections_needed` of every case for ``method`` (``evidence_dir`` and
    ``progress`` as for :func:`evaluate`); BadParameter if ``most`` < 0."""
    if most < 0:
        raise BadParameter(f"the most vertices to add must be >= 0, got {most}")
    rasters = rasters or RasterCache()
    needed = []
    for case in cases:
        function = case_method(method, params, case, backend, evidence_dir)
        needed.append(corrections_needed(function, case, rasters.get(case.image), most))
        if progress is not None:
            progress()
    return needed


def corrections_summary(cases: list[Case], needed: list[Correction], most: int) -> dict:
    """Per group (``all`` and every tag): n, and the share of its cases whose line is good
    after at most k added vertices, k = 0 … ``most`` (``good_after``, a list)."""
    groups = {"all": list(range(len(cases)))}
    for tag in sorted({tag for case in cases for tag in case.tags}):
        groups[tag] = [i for i, case in enumerate(cases) if tag in case.tags]
    added = [each.added for each in needed]
    return {group: {"n": len(members),
                    "good_after": [float(np.mean([added[i] is not None and added[i] <= k
                                                  for i in members])) for k in range(most + 1)]}
            for group, members in groups.items()}


def corrections_report(cases: list[Case], needed: dict[str, list[Correction]], most: int
                       ) -> tuple[str, dict]:
    """The text and the ``corrections`` member of a report of :func:`corrections` runs:
    ``needed`` maps each method to its corrections, case by case (in the report: the
    vertices each case needed, and its last line and vertices)."""
    lines = [f"good lines ({GOOD_COMPLETENESS_5:.0%} of the road within 5 px) with 0 to "
             f"{most} vertices added, each where the line misses worst:"]
    document = {"most": most, "good_completeness_5": GOOD_COMPLETENESS_5, "methods": {}}
    for method, counts in needed.items():
        summary = corrections_summary(cases, counts, most)
        lines.append(f"  {method:<12} " + "; ".join(
            f"{group} " + " / ".join(f"{share:.0%}" for share in summary[group]["good_after"])
            for group in ("all", "nontrivial") if group in summary))
        document["methods"][method] = {
            "summary": summary,
            "cases": {case.id: each.added for case, each in zip(cases, counts, strict=True)},
            "lines": {case.id: {"vertices": each.vertices.round(2).tolist(),
                                "polyline": None if each.polyline is None
                                else each.polyline.round(2).tolist()}
                      for case, each in zip(cases, counts, strict=True)}}
    return "\n".join(lines), document


def _statistics(values: np.ndarray) -> dict:
    return {"median": float(np.median(values)), "mean": float(np.mean(values))}


def summarise(results: list[CaseResult]) -> dict:
    """Per group (``all`` and every tag): n, failures, median/mean of metrics and latency.

    Returns
    -------
    dict
        ``{group: {"n", "failures", METRIC: {"median", "mean"}, "latency_ms": {...}}}``, groups
        ordered ``all`` first, then tags alphabetically.
    """
    groups: dict[str, list[CaseResult]] = {"all": list(results)}
    for tag in sorted({tag for result in results for tag in result.case.tags}):
        groups[tag] = [result for result in results if tag in result.case.tags]
    summary = {}
    for group, members in groups.items():
        entry = {"n": len(members), "failures": sum(r.polyline is None for r in members)}
        for metric in METRICS:
            entry[metric] = _statistics(np.array([getattr(r.metrics, metric) for r in members]))
        entry["latency_ms"] = _statistics(np.array([r.latency_ms for r in members]))
        summary[group] = entry
    return summary


def stability(cases: list[Case], params: TraceParams | None = None, shift: float = 3.0,
              backend=None, rasters: RasterCache | None = None,
              evidence_dir: str | os.PathLike | None = None,
              progress: Callable[[], object] | None = None) -> np.ndarray:
    """How far our trace moves when one endpoint moves by ``shift`` px.

    For each case, a and then b is moved by ``shift`` px along ±u and ±n (u = direction a→b,
    n its normal; moves leaving the image are skipped) and the median distance between the
    original and the moved trace (:func:`core.metrics.line_shift`) is taken; the case's value
    is the median over its moves. Cases whose trace fails are skipped. ``evidence_dir`` and
    ``progress`` as for :func:`evaluate`.

    Returns
    -------
    ndarray of shape (n_cases_traced,), px
    """
    rasters = rasters or RasterCache()
    values = []
    for case in cases:
        if progress is not None:
            progress()
        function = case_method(OURS, params, case, backend, evidence_dir)
        raster = rasters.get(case.image)
        try:
            base = function(raster, case.a, case.b)
        except TraceError:
            continue
        unit = (case.b - case.a) / np.hypot(*(case.b - case.a))
        normal = np.array([-unit[1], unit[0]])
        shifts = []
        for moved_a in (True, False):
            for direction in (unit, -unit, normal, -normal):
                a = case.a + shift * direction if moved_a else case.a
                b = case.b if moved_a else case.b + shift * direction
                try:
                    shifts.append(line_shift(base, function(raster, a, b)))
                except TraceError:
                    continue
        if shifts:
            values.append(float(np.median(shifts)))
    return np.array(values)


def _cell(value: float, digits: int) -> str:
    return "inf" if not np.isfinite(value) else f"{value:.{digits}f}"


def format_summary(method: str, summary: dict, groups: Iterable[str] | None = None) -> str:
    """A fixed-width text table: one row per group, medians (and mean completeness)."""
    shown = [group for group in (groups if groups is not None else summary) if group in summary]
    width = max([20, *map(len, shown)])
    header = (f"{method:<{width + 2}} {'n':>4} {'fail':>4} {'c@3 med':>7} {'c@3 avg':>7} "
              f"{'c@5 med':>7} {'c@5 avg':>7} {'t→gt':>6} {'gt→t':>6} {'hausd':>6} {'ms med':>7}")
    lines = [header]
    for group in shown:
        entry = summary[group]
        lines.append(
            f"  {group:<{width}} {entry['n']:>4} {entry['failures']:>4} "
            f"{_cell(entry['completeness_3']['median'], 3):>7} "
            f"{_cell(entry['completeness_3']['mean'], 3):>7} "
            f"{_cell(entry['completeness_5']['median'], 3):>7} "
            f"{_cell(entry['completeness_5']['mean'], 3):>7} "
            f"{_cell(entry['trace_to_gt']['median'], 1):>6} "
            f"{_cell(entry['gt_to_trace']['median'], 1):>6} "
            f"{_cell(entry['hausdorff']['median'], 1):>6} "
            f"{_cell(entry['latency_ms']['median'], 1):>7}")
    return "\n".join(lines)


def _finite_or_none(value):
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def report_document(runs: dict[str, list[CaseResult]], params: TraceParams) -> dict:
    """JSON-ready report: parameters, per-method summary and per-case rows (∞ → null)."""
    document = {"params": params.as_dict(), "methods": {}}
    for method, results in runs.items():
        document["methods"][method] = {
            "summary": _finite_or_none(summarise(results)),
            "cases": [_finite_or_none({"id": r.case.id, **r.metrics.as_dict(),
                                       "latency_ms": r.latency_ms, "error": r.error,
                                       "polyline": None if r.polyline is None
                                       else r.polyline.round(2).tolist()})
                      for r in results],
        }
    return document
