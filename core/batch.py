"""Batch mode: snap seed lines to the imagery of a whole folder.

Seeds are GeoJSON LineStrings (or MultiLineStrings): rough lines such as stale map vectors
or anchor points saved from the app. A feature whose ``properties.image`` names a file of
the folder is in that image's pixel coordinates (x = column, y = row); any other feature is
RFC 7946 longitude/latitude and is matched to every georeferenced image whose footprint it
crosses (the planner keeps, per image, the seeds whose lon/lat box meets the image's
footprint box, read from headers and sidecar files; the worker then decides exactly): its
vertices are transformed to the image's CRS and then to pixels, and each segment is
clipped to the image (a segment leaving the image ends at its border; reading and matching:
:mod:`core.vectors`). Each consecutive vertex pair is traced; consecutive traced segments of
one seed form one LineString feature, which goes on straight from an end so clipped to where
the seed leaves the image's outer edge (:func:`_line_features`: adjacent tiles' lines meet).

The work is one task per image (:func:`process_image`), run in this process, in a pool of
local processes (:func:`local_executor`) or on a Dask distributed cluster (through its
client's ``concurrent.futures`` executor): :func:`run_tasks`; in this process and in a local
worker, which is handed a few images at once, the next image is read while one is traced
(one small enough to decode). While local workers start, this process traces images from the
end of the queue itself; each of these processes plans with its part of the memory budget. A
local worker that dies (killed, e.g. out of memory) fails the image it was tracing alone:
the others are traced by a new pool. Workers return the GeoJSON document; the caller writes
it atomically to ``OUT_DIR/<image stem>.geojson`` (``<image name>.geojson`` when two images
share a stem, and never one file for two images: :func:`output_names`), then
``summary.json`` and ``summary.csv``. Images whose output exists are skipped unless
``overwrite``, or their seeds, parameters or files changed since, or the output records
failures that a rerun may not repeat (:data:`TRANSIENT_ERRORS`): every output carries the
fingerprint of what made it (:data:`RECORD_MEMBER`), so resuming needs no summary. One run
at a time owns an output folder (:func:`lock_output_folder`).

Evidence rasters: with ``evidence_dir``, each image is traced on the raster of that folder
named like it (``<image name>``, else ``<image stem>`` with any image suffix) instead of its
own pixels, e.g. a segmentation model's road-probability maps (``TraceParams.evidence_path``;
with the score kind ``evidence`` the folder is vectorised: the angle-constrained optimum over
each map, snapped to the seeds). An image without one fails, naming the file it looked for.

This module never imports :mod:`gpu`: tasks are handed a ``backend_factory``, a picklable
callable returning a :class:`core.backend.TracerBackend` in the worker process.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import math
import multiprocessing.connection
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ThreadPoolExecutor,
    as_completed,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from itertools import chain, count
from pathlib import Path

import numpy as np

from core import surface
from core.backend import TracerBackend
from core.errors import (
    BackendUnavailable,
    BadParameter,
    ImageReadError,
    ModelUnavailable,
    OutputWriteError,
    TraceError,
)
from core.geojson import (
    check_crs,
    coordinate_space,
    feature_collection,
    traced_line_feature,
    write_geojson,
)
from core.georef import parse_crs, sidecar_files
from core.jit import numba
from core.output import (
    TEMPORARY_PREFIX,
    printable,
    read_json,
    refuse_empty_path,
    refuse_overwriting_input,
    write_text_atomic,
)
from core.raster import (
    IMAGE_SUFFIXES,
    WINDOWED_SUFFIXES,
    Raster,
    choose_bands,
    image_named,
    image_size,
    is_image_name,
    list_images,
    load_image,
    read_image_georef,
    same_name_key,
)
from core.resources import (
    OverMemoryBudget,
    available_memory,
    decode_memory,
    share_memory,
)
from core.tracer import (
    TraceParams,
    TraceResult,
    check_params,
    evidence_folder,
    evidence_source,
    trace_many,
    with_evidence_from,
)
from core.vectors import (
    MIN_SEGMENT_PX,
    Failure,
    Seed,
    line_kind_of,
    read_seeds,
    seeds_in_image,
    without_close_vertices,
)

SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
CSV_COLUMNS = ("image", "status", "coordinate_space", "lines", "segments", "failures",
               "seconds", "reasons")
#: The ``reasons`` of an image without failures that no seed crosses, in ``summary.csv``.
NO_SEED_REASON = "no seed crosses it"
#: What ``summary.csv`` starts with: UTF-8's byte-order mark, without which Excel reads a
#: CSV file in the system's code page (on Windows, é of a file name as Ã©).
CSV_BOM = "\ufeff"
#: First characters that make a spreadsheet read a CSV cell as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: Most ids of the seeds that cross none of the images listed in ``summary.json``
#: (:func:`summarize`); the others are counted.
MAX_OUTSIDE_IDS = 100
#: Lock file of an output folder, held (``flock``; Windows: ``msvcrt.locking``) by the one
#: batch run that owns the folder.
LOCK_FILE = ".roadtracer-batch.lock"
#: The byte of :data:`LOCK_FILE` that is locked on Windows (``msvcrt.locking``), whose locks
#: are mandatory: well past the owner line, which must stay readable to a refused run.
WINDOWS_LOCK_BYTE = 1 << 16
#: Times a run opens an output folder's lock file that its holder removes meanwhile before
#: it holds the one it opened last (:func:`_locked`).
LOCK_ATTEMPTS = 8
#: Start of the name of a run's folder of call marks (:func:`run_tasks`) in its output
#: folder: the next run removes one that a killed run left (:func:`lock_output_folder`).
CALLS_PREFIX = f"{TEMPORARY_PREFIX}calls-"
#: Modules every local worker needs, imported once by the server workers are forked from
#: (:func:`local_executor`; callers add those of their backend).
WORKER_MODULES = ("core.batch",)
#: Member of every output document that records what made it (see :func:`write_output`).
RECORD_MEMBER = "roadtracer_batch"
#: Largest decoding (bytes, :func:`core.resources.decode_memory`) of a PNG, JPEG, … read while
#: the image before it is traced.
READ_AHEAD_BYTES = 256 << 20
#: The reason of an image whose local worker process died while it traced it.
WORKER_DIED = "the worker process tracing it died (killed, e.g. out of memory?)"
#: The reason of an image left when local worker processes died and new ones traced nothing.
WORKERS_LOST = ("not traced: the worker processes died before tracing it (killed, e.g. out "
                "of memory?)")
#: Most images a local worker is handed at once (:func:`images_per_call`): it reads the next of
#: them while it traces one.
WORKER_IMAGES = 4
#: Segments of an image traced in this process before its progress is first told, and the
#: seconds between later reports (:func:`run_tasks`' ``progress``).
PROGRESS_SEGMENTS = 16
PROGRESS_SECONDS = 0.5
#: Errors that come from the machine a trace ran on, not from its inputs (the seeds, the
#: image, the parameters: what :meth:`ImageTask.fingerprint` records, which a rerun of the
#: same inputs fails on again): a plan over the memory budget (which depends on
#: ``--memory-budget``, the processes sharing it and the memory available), memory running
#: out, pixels that could not be read (storage, a network share), the compute backend or the
#: surface model unavailable. A resumed run traces again an output that records one.
TRANSIENT_ERRORS = (OverMemoryBudget, MemoryError, ImageReadError, BackendUnavailable,
                    ModelUnavailable)
#: How a batch traces a segment in shorter legs, in the advice of a failure over the memory
#: budget (:func:`failure_reason`).
BATCH_LEGS = "seeds with more vertices, closer together"


@dataclass
class ImageReport:
    """What became of one image.

    ``status`` is ``"ok"`` (every segment traced), ``"partial"`` (some failed, or all;
    output written), ``"failed"`` (no output: unreadable image or unwritable output) or
    ``"skipped"`` (output from an earlier run kept: ``output_status`` is the status it
    records, and the counts and failures are those it records). ``inputs`` is the
    :meth:`ImageTask.fingerprint` of what produced the output; ``notes``, what a user should
    know of how the image was read (the bands traced, an EXIF orientation, …);
    ``transient_failures``, how many of ``failures`` came from :data:`TRANSIENT_ERRORS`.
    """

    image: str
    status: str = "ok"
    coordinate_space: str | None = None
    lines: int = 0
    segments: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    matched_seeds: list[str] = field(default_factory=list)
    output: str | None = None
    inputs: str | None = None
    notes: list[str] = field(default_factory=list)
    output_status: str | None = None
    transient_failures: int = 0

    def as_dict(self) -> dict:
        r"""The summary's record (file names that are not UTF-8 shown with ``\xNN``)."""
        record = asdict(self)
        record["seconds"] = round(self.seconds, 3)
        record["image"] = printable(self.image)
        record["output"] = None if self.output is None else printable(self.output)
        return record


@dataclass(frozen=True)
class ImageTask:
    """One unit of work: trace the seeds that concern one image (picklable).

    ``threads`` sets numba's threads while tracing it (None: leave the process's setting);
    parallel workers use 1 so that they do not oversubscribe the CPU.
    """

    image: str
    seeds: tuple[Seed, ...]
    params: TraceParams
    crs: str = "wgs84"
    image_crs: str | None = None
    bands: tuple[int, ...] | None = None
    threads: int | None = None

    @property
    def most_segments(self) -> int:
        """How many segments its seeds give at most (consecutive vertex pairs; clipping to
        the image and merging repeated vertices only take some away)."""
        return sum(max(len(seed.vertices) - 1, 0) for seed in self.seeds)

    def fingerprint(self) -> str:
        """A digest of what decides this image's output: its seeds (ids, vertices,
        properties), the tracing parameters, the CRS and band settings (not ``threads``), the
        size and modification time of every file read for it (the image, its georeferencing
        sidecars, the evidence raster) and the surface model's content, so that an image, map
        or model replaced since is traced again. The planner and the worker (on another
        machine of a cluster, with the same files but its own install) agree on it."""
        files = [self.image, *sidecar_files(self.image), self.params.evidence_path]
        record = {"seeds": [{"id": seed.id, "vertices": np.asarray(seed.vertices).tolist(),
                             "image": seed.image, "properties": seed.properties}
                            for seed in self.seeds],
                  "params": asdict(self.params), "crs": self.crs, "image_crs": self.image_crs,
                  "bands": self.bands,
                  "files": {os.fspath(path): _file_stamp(path) for path in files
                            if path is not None},
                  "model": _model_digest() if self.params.score == "surface" else None}
        text = json.dumps(record, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _file_stamp(path) -> list[int] | None:
    """(size, modification time in ns) of a file, None where there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return [status.st_size, status.st_mtime_ns]


def _model_digest() -> str | None:
    """A digest of the surface model file's content (None if it is missing)."""
    stamp = _file_stamp(surface.MODEL_PATH)
    return None if stamp is None else _content_digest(os.fspath(surface.MODEL_PATH), *stamp)


@lru_cache(maxsize=4)
def _content_digest(path: str, size: int, modified_ns: int) -> str:
    """SHA-256 (16 hex digits) of a file, read once per (path, size, modification time)."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


@dataclass
class BatchPlan:
    """The images to process, those skipped, and seeds rejected before any tracing.

    ``candidates`` maps every lon/lat seed to the images whose footprint box its box
    meets (the images it may cross; the worker decides exactly). ``changed`` names the
    images traced again because their output's record names other inputs
    (:meth:`ImageTask.fingerprint`) or none; ``retried``, those traced again because it
    records failures that a rerun may not repeat (:data:`TRANSIENT_ERRORS`).
    ``subfolders`` and ``broken_links`` count what the images folder holds that is not read
    (:func:`passed_over`); ``orphans`` names the outputs of an earlier batch in the output
    folder that belong to no image of this one (:func:`orphan_outputs`).
    """

    images_dir: Path
    out_dir: Path
    tasks: list[ImageTask]
    outputs: dict[str, Path]
    skipped: list[ImageReport]
    seed_failures: list[Failure]
    candidates: dict[str, set[str]]
    changed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    subfolders: int = 0
    broken_links: int = 0
    orphans: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------- tracing

def _trace_lines(raster: Raster, lines: list, params: TraceParams, backend: TracerBackend,
                 progress: Callable[[int], None] | None = None
                 ) -> list[tuple[np.ndarray, TraceParams, list]]:
    """Trace consecutive vertex pairs of every seed line of one image.

    A seed whose properties name a line kind (:func:`core.vectors.line_kind_of`: ``kind``, or
    OSM's ``waterway`` / ``highway``) is traced as such. The segments of all lines traced with
    the same parameters go to one :func:`core.tracer.trace_many` call (on the GPU, their
    evidence is made in one pass).

    Parameters
    ----------
    lines : list of (Seed, vertices (k, 2) pixel coordinates)
    progress : callable, optional
        Called with the number of segments traced as they are (:func:`_trace_reporting`).

    Returns
    -------
    list, per line, of (vertices without close repeats, its params, per segment the
    TraceResult or the TraceError that ended it)
    """
    jobs = []
    for seed, vertices in lines:
        kind = line_kind_of(seed.properties)
        jobs.append((without_close_vertices(vertices),
                     params if kind is None else replace(params, line_kind=kind)))
    outcomes: list[list] = [[] for _ in jobs]
    for each in dict.fromkeys(line_params for _, line_params in jobs):
        members = [i for i, (_, line_params) in enumerate(jobs) if line_params == each]
        pairs = [(jobs[i][0][k], jobs[i][0][k + 1]) for i in members
                 for k in range(len(jobs[i][0]) - 1)]
        results = iter(trace_many(raster, pairs, each, backend) if progress is None
                       else _trace_reporting(raster, pairs, each, backend, progress))
        for i in members:
            outcomes[i] = [next(results) for _ in range(len(jobs[i][0]) - 1)]
    return [(vertices, line_params, outcome)
            for (vertices, line_params), outcome in zip(jobs, outcomes, strict=True)]


def _trace_reporting(raster: Raster, pairs: list, params: TraceParams,
                     backend: TracerBackend, progress: Callable[[int], None]) -> list:
    """:func:`core.tracer.trace_many` of ``pairs`` in runs of consecutive pairs, calling
    ``progress`` with each run's length once it is traced: the first run
    :data:`PROGRESS_SEGMENTS` pairs, each next one sized to take about
    :data:`PROGRESS_SECONDS` (the GPU keeps making the evidence of many segments at once)."""
    results: list = []
    size = PROGRESS_SEGMENTS
    while len(results) < len(pairs):
        started = time.perf_counter()
        run = pairs[len(results):len(results) + size]
        results += trace_many(raster, run, params, backend)
        progress(len(run))
        seconds = max(time.perf_counter() - started, 1e-3)
        size = max(PROGRESS_SEGMENTS, round(len(run) * PROGRESS_SECONDS / seconds))
    return results


def _line_features(raster: Raster, seed: Seed, vertices: np.ndarray, params: TraceParams,
                   outcomes: list, crs: str,
                   edges: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
                   ) -> tuple[list[dict], int, list[Failure]]:
    """The features of one seed line's traced segments (``outcomes``: per segment a
    TraceResult or TraceError, from :func:`_trace_lines`): runs of traced segments become
    features; failures name their segment.

    ``edges`` are the edge points of the line's ends (:func:`core.vectors.seeds_in_image`:
    where the seed was clipped to the image's pixel centres and goes on beyond it, the point
    where it leaves the image's outer edge; else None): a run that starts (ends) at a clipped
    end gets a straight leg (:class:`EdgeLeg`) from that point to its traced start (from its
    traced end to that point), so that the lines of adjacent tiles meet on their shared edge;
    the feature's ``extended_to_edge`` names those ends (``"start"``, ``"end"``)."""
    if len(vertices) < 2:
        return [], 0, [Failure(f"seed line shorter than {MIN_SEGMENT_PX:g} px", seed.id)]
    runs: list[list[tuple[int, TraceResult]]] = [[]]
    failures = []
    for k, outcome in enumerate(outcomes):
        if isinstance(outcome, TraceError):
            failures.append(Failure(failure_reason(outcome), seed.id, k))
            runs.append([])
        else:
            runs[-1].append((k, outcome))
    features = []
    for run in runs:
        if not run:
            continue
        legs: list = [result for _, result in run]
        segments = [k for k, _ in run]
        extended = []
        start_edge, end_edge = edges
        if start_edge is not None and segments[0] == 0 and _off(start_edge, legs[0]
                                                                   .polyline[0]):
            legs.insert(0, EdgeLeg(np.array([start_edge, legs[0].polyline[0]]),
                                   legs[0].backend))
            segments.insert(0, 0)
            extended.append("start")
        if end_edge is not None and segments[-1] == len(vertices) - 2 and _off(
                end_edge, legs[-1].polyline[-1]):
            legs.append(EdgeLeg(np.array([legs[-1].polyline[-1], end_edge]), legs[-1].backend))
            segments.append(len(vertices) - 2)
            extended.append("end")
        properties = {"seed": seed.id, "seed_properties": json_compliant(seed.properties),
                      "segments": segments, "params": params.as_dict(),
                      "segment_details": [{"straight": leg.params is None} for leg in legs]}
        if extended:
            properties["extended_to_edge"] = extended
        features.append(traced_line_feature(legs, raster, properties, crs,
                                            run[0][1].params.line_kind))
    return features, sum(len(run) for run in runs), failures


@dataclass(frozen=True)
class EdgeLeg:
    """A batch line's straight leg between a traced end clipped to the image's pixel centres
    and the image's outer edge (:func:`_line_features`), as
    :func:`core.geojson.traced_line_feature` writes a leg drawn straight: no params, no
    score, no link scores."""

    polyline: np.ndarray
    backend: str
    score: float = 0.0
    link_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    params: None = None


def _off(edge: np.ndarray, end: np.ndarray) -> bool:
    """Whether the edge point ``edge`` lies off a traced end (by more than float rounding): a
    leg between them is then written."""
    return bool(np.hypot(*(np.asarray(edge) - end)) > 1e-9)


def failure_reason(error: TraceError) -> str:
    """The reason a batch records for ``error``: its message, advising a plan over the memory
    budget to be traced in shorter legs as a batch can (:data:`BATCH_LEGS`)."""
    return error.advising(BATCH_LEGS) if isinstance(error, OverMemoryBudget) else str(error)


def json_compliant(value):
    """``value`` (read from a JSON document, which Python's reader lets hold ``NaN`` and
    ``Infinity``) with every non-finite number replaced by None: JSON has no value for them
    (the output is written with ``allow_nan=False``), and null is what JavaScript's
    ``JSON.stringify`` writes for them too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_compliant(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_compliant(item) for item in value]
    return value


def open_task_image(task: ImageTask) -> Raster:
    """The image of ``task``, opened as :func:`process_image` reads it (raises
    ImageReadError, BadParameter)."""
    return load_image(task.image, crs=task.image_crs, bands=task.bands)


def process_image(task: ImageTask, backend_factory: Callable[[], TracerBackend],
                  opened: Callable[[], Raster] | None = None,
                  progress: Callable[[int], None] | None = None
                  ) -> tuple[ImageReport, dict | None]:
    """Trace every seed line that concerns one image (runs in a worker).

    Parameters
    ----------
    task : ImageTask
    backend_factory : callable
        Returns the tracer backend to use in this process.
    opened : callable, optional
        Returns the task's image (or raises as :func:`open_task_image` does), e.g. the result
        of a read started earlier; default: :func:`open_task_image`.
    progress : callable, optional
        Called with the number of segments traced, every half second or so while tracing.

    Returns
    -------
    report : ImageReport
    document : dict or None
        The GeoJSON FeatureCollection to write; None when the image could not be read.
    """
    start = time.perf_counter()
    name = os.path.basename(task.image)
    report = ImageReport(name, inputs=task.fingerprint())
    if task.threads is not None:
        numba.set_num_threads(max(1, min(task.threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        with (opened or (lambda: open_task_image(task)))() as raster:
            evidence_source(raster, task.params)  # a missing or misfit evidence raster: once
            report.notes = [f"tracing {raster.band_note}"] * bool(raster.band_note) + list(
                raster.notes)
            backend = backend_factory()
            features = []
            report.coordinate_space = coordinate_space(raster, task.crs)
            lines = seeds_in_image(task.seeds, name, raster)
            traced = _trace_lines(raster, [(seed, piece) for seed, piece, _ in lines],
                                  task.params, backend, progress)
            for (seed, _, edges), (vertices, params, outcomes) in zip(lines, traced,
                                                                      strict=True):
                found, segments, failures = _line_features(raster, seed, vertices, params,
                                                           outcomes, task.crs, edges)
                features += found
                report.segments += segments
                report.failures += failures
                report.transient_failures += sum(isinstance(outcome, TRANSIENT_ERRORS)
                                                 for outcome in outcomes)
                report.notes += [f"seed {seed.id}, segment {k}: {note}"
                                 for k, outcome in enumerate(outcomes)
                                 if not isinstance(outcome, TraceError) for note in outcome.notes]
                if seed.id not in report.matched_seeds:
                    report.matched_seeds.append(seed.id)
            document = feature_collection(features, raster, task.crs)
    except (TraceError, MemoryError) as exc:
        report.status = "failed"
        report.failures.append(Failure(failure_reason(exc) if isinstance(exc, TraceError) else
                                       "out of memory while tracing this image"))
        report.transient_failures += isinstance(exc, TRANSIENT_ERRORS)
        report.seconds = time.perf_counter() - start
        return report, None
    report.lines = len(features)
    report.status = "partial" if report.failures else "ok"
    report.seconds = time.perf_counter() - start
    return report, document


# -------------------------------------------------------------------------------- planning

def output_names(images: list[Path]) -> dict[str, str]:
    """Output file name per image: ``<stem>.geojson``, ``<name>.geojson`` if stems collide;
    where that is still another image's (``a.png`` beside ``a.png.tif``), the image later in
    name order gets ``<name>.geojson``, then ``<name>~2.geojson``, ``~3``, …: names that
    differ in case or Unicode normalisation only count as one (:func:`same_name_key`: macOS
    and Windows folders), and a folder's names are the same from run to run."""
    stems = Counter(same_name_key(image.stem) for image in images)
    taken, names = set(), {}
    for image in sorted(images, key=lambda image: (same_name_key(image.name), image.name)):
        wanted = image.stem if stems[same_name_key(image.stem)] == 1 else image.name
        choices = chain((wanted, image.name), (f"{image.name}~{k}" for k in count(2)))
        names[image.name] = next(f"{choice}.geojson" for choice in choices
                                 if same_name_key(f"{choice}.geojson") not in taken)
        taken.add(same_name_key(names[image.name]))
    return {image.name: names[image.name] for image in images}


def passed_over(folder: Path) -> tuple[int, int]:
    """How many subfolders, and links to nothing named like an image (:func:`is_image_name`),
    ``folder`` holds: entries that a batch of it does not read (only the images directly in
    it); none where it can no longer be listed (its images were: what fails later says why)."""
    subfolders = broken_links = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir():
                    subfolders += 1
                elif (entry.is_symlink() and not os.path.exists(entry.path)
                      and is_image_name(entry.name)):
                    broken_links += 1
    except OSError:
        return 0, 0
    return subfolders, broken_links


def _file_identity(path) -> tuple[int, int] | None:
    """(device, inode) of the regular file at ``path`` (links followed), None for none."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else None


def refuse_clobbering_inputs(outputs, inputs) -> None:
    """Raise :class:`BadParameter` (:func:`core.output.refuse_overwriting_input`'s) when a
    file of ``outputs`` (paths a run writes or removes) exists and is one of the files
    ``inputs`` (paths, None entries skipped) that it reads, under any name or link.

    Each file is looked at once (a folder of many images costs one ``stat`` per file, not
    one per pair), and the inputs only when an output exists."""
    existing = {}
    for output in outputs:
        identity = _file_identity(output)
        if identity is not None:
            existing.setdefault(identity, output)
    if not existing:
        return
    for source in inputs:
        output = None if source is None else existing.get(_file_identity(source))
        if output is not None:
            refuse_overwriting_input(output, (source,), "output")


def _check_writable(out_dir: Path) -> list[Path]:
    """Make ``out_dir`` (and its missing parents) and check that a file can be made in it.

    Returns
    -------
    list of Path
        The folders this call made, deepest first: not one that another process made
        meanwhile.

    Raises
    ------
    OutputWriteError
        If ``out_dir`` is a file, or cannot be made or written to.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputWriteError(f"output folder {out_dir} is a file, not a folder")
    made = []
    try:
        for folder in reversed([out_dir, *out_dir.parents]):
            if not folder.exists():
                with suppress(FileExistsError):
                    folder.mkdir()
                    made.insert(0, folder)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        raise OutputWriteError(f"cannot write to output folder {out_dir}: "
                               f"{exc.strerror or exc}") from None
    return made


@contextmanager
def lock_output_folder(out_dir: str | os.PathLike, inputs=()) -> Iterator[Path]:
    """Own ``out_dir`` for one batch run (created if missing): hold an exclusive lock
    (:func:`_try_lock`) on its :data:`LOCK_FILE` (which names the owner's process id and
    host), and remove what a run killed there left: its calls folders (:func:`run_tasks`)
    and the temporary files of its writes, none of which may be one of the files ``inputs``
    (e.g. the seeds file), which are left as they are.

    The system releases the lock when its holder exits, however it ends, so a lock file left
    by a killed run is stale and taken over. Only the holder cleans up: it removes the
    folders it created (``out_dir`` and any missing parents, deepest first), and its lock
    file, if nothing but that file is in them at the end (a run refused for a usage error
    leaves no trace; :func:`_close_lock`), and it ends normally if the folder was removed
    meanwhile. A run refused because another holds the lock changes nothing.

    Yields
    ------
    Path
        ``out_dir``.

    Raises
    ------
    BadParameter
        If ``out_dir`` is empty, another run holds the folder (naming its process), or the
        lock file or a leftover temporary file is one of ``inputs``.
    OutputWriteError
        If the folder cannot be created or written to, or its lock file locked.
    """
    refuse_empty_path(out_dir, "output")
    out_dir = Path(out_dir)
    refuse_clobbering_inputs([out_dir / LOCK_FILE, *_leftovers(out_dir)], inputs)
    handle, created = _locked(out_dir)
    try:
        os.ftruncate(handle, 0)
        _write_start(handle, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
        for leftover in _leftovers(out_dir):
            leftover.unlink(missing_ok=True)
        for folder in _leftover_folders(out_dir):
            shutil.rmtree(folder, ignore_errors=True)
        yield out_dir
    finally:
        _let_go(handle, out_dir, created)


def _let_go(handle: int, out_dir: Path, created: list[Path]) -> None:
    """Close the lock file ``handle`` of ``out_dir`` (:func:`_close_lock`), removing it and
    the folders ``created`` for it (deepest first) if nothing else is in them."""
    remove = bool(created) and _holds_only(out_dir, LOCK_FILE)
    _close_lock(handle, out_dir / LOCK_FILE, remove)
    if remove:
        _remove_empty(created)


def _locked(out_dir: Path) -> tuple[int, list[Path]]:
    """Make ``out_dir`` if missing and take the lock of its :data:`LOCK_FILE`.

    A lock file that its holder removed (:func:`_close_lock`) after this process opened it
    and before it locked it is no longer the folder's: it is opened again, up to
    :data:`LOCK_ATTEMPTS` times (Windows removes no open file: there, the first is the
    folder's).

    Returns
    -------
    handle : int
        The lock file, open and locked.
    created : list of Path
        The folders this process made for it, deepest first (:func:`_check_writable`).

    Raises
    ------
    BadParameter
        If another run holds the lock (naming its process).
    OutputWriteError
        If the folder or the lock file cannot be made, or the lock cannot be taken (a file
        system without locks).
    """
    path = out_dir / LOCK_FILE
    created: list[Path] = []
    for attempt in count(1):
        created = _check_writable(out_dir) + created
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            if not _try_lock(handle):
                owner = _read_start(handle, 200).decode("utf-8", "replace").strip()
                raise BadParameter(f"output folder {out_dir} is in use by another batch run "
                                   f"({owner.splitlines()[0] if owner else 'unknown'}); wait "
                                   "for it to end or choose another folder")
        except OSError as exc:
            _let_go(handle, out_dir, created)
            raise OutputWriteError(f"cannot lock {path}: {exc.strerror or exc} (the file "
                                   "system of the output folder may not support locks, as some "
                                   "network shares do: choose a folder on a local disk)") from None
        except BaseException:
            os.close(handle)
            raise
        if attempt == LOCK_ATTEMPTS or sys.platform == "win32" or _names(path, handle):
            return handle, created
        os.close(handle)


def _try_lock(handle: int) -> bool:
    """Take the exclusive lock of the open lock file ``handle`` without waiting.

    ``flock`` on Linux and macOS; on Windows, ``msvcrt.locking`` of the byte
    :data:`WINDOWS_LOCK_BYTE`. :func:`_close_lock` releases it.

    Returns
    -------
    bool
        False if another process holds it.

    Raises
    ------
    OSError
        If it cannot be taken otherwise (a file system without locks).
    """
    if sys.platform == "win32":
        import msvcrt

        os.lseek(handle, WINDOWS_LOCK_BYTE, os.SEEK_SET)
        try:
            msvcrt.locking(handle, msvcrt.LK_NBLCK, 1)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EDEADLK):
                return False
            raise
        return True
    import fcntl

    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_start(handle: int, size: int) -> bytes:
    """Up to ``size`` bytes from the start of the open file ``handle`` (``os.pread``, else
    seek and read where there is none: Windows)."""
    if hasattr(os, "pread"):
        return os.pread(handle, size, 0)
    os.lseek(handle, 0, os.SEEK_SET)
    return os.read(handle, size)


def _write_start(handle: int, data: bytes) -> None:
    """Write ``data`` at the start of the open file ``handle`` (``os.pwrite``, else seek and
    write where there is none: Windows)."""
    if hasattr(os, "pwrite"):
        os.pwrite(handle, data, 0)
    else:
        os.lseek(handle, 0, os.SEEK_SET)
        os.write(handle, data)


def _names(path: Path, handle: int) -> bool:
    """Whether ``path`` is the open file ``handle`` (not removed, nor replaced, since)."""
    try:
        named = os.stat(path)
    except OSError:
        return False
    opened = os.fstat(handle)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _holds_only(folder: Path, name: str) -> bool:
    """Whether ``folder`` holds the entry ``name`` and nothing else (False where it cannot
    be listed: removed, say)."""
    try:
        return [entry.name for entry in folder.iterdir()] == [name]
    except OSError:
        return False


def _close_lock(handle: int, path: Path, remove: bool) -> None:
    """Close the lock file ``handle`` at ``path``, releasing the lock (on Windows unlocked
    first, as Microsoft asks: closing releases it only once the system gets round to it), and
    with ``remove`` delete the file (else it stays: removing it would race with a run about
    to lock it).

    It is deleted while still locked, so that no other run takes it meanwhile (a run that
    opened it before and locks it after opens it again: :func:`_locked`); on Windows, which
    deletes no open file, once closed, unless another run opened it since. A file already
    gone is no error.
    """
    if remove and sys.platform != "win32":
        with suppress(OSError):
            path.unlink()
    if sys.platform == "win32":
        import msvcrt

        os.lseek(handle, WINDOWS_LOCK_BYTE, os.SEEK_SET)
        with suppress(OSError):  # closing releases it all the same
            msvcrt.locking(handle, msvcrt.LK_UNLCK, 1)
    os.close(handle)
    if remove and sys.platform == "win32":
        with suppress(OSError):
            path.unlink()


def _leftovers(out_dir: Path) -> list[Path]:
    """The temporary files of atomic writes in ``out_dir`` (none where it is no folder)."""
    try:
        return list(out_dir.glob(f"{TEMPORARY_PREFIX}*.part"))
    except OSError:
        return []


def _leftover_folders(out_dir: Path) -> list[Path]:
    """The calls folders (:data:`CALLS_PREFIX`, :func:`run_tasks`) in ``out_dir``."""
    try:
        return [path for path in out_dir.glob(f"{CALLS_PREFIX}*") if path.is_dir()]
    except OSError:
        return []


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


#: Largest count (lines, segments, failures, a segment's number) an output's record may hold.
MAX_RECORD_COUNT = 1_000_000


def earlier_record(output: Path) -> dict | None:
    """What made an existing output file: its :data:`RECORD_MEMBER` (``inputs``, the
    fingerprint, and the report's ``status``, ``coordinate_space``, ``lines``, ``segments``,
    ``matched_seeds``, ``failures``, these as :class:`~core.vectors.Failure`, and
    ``transient_failures``, 0 in a record written before it was kept); None when the file is
    unreadable or holds no valid record (not ours, from an older version, or not what the
    file holds: as many lines as features, counts and segment numbers within
    :data:`MAX_RECORD_COUNT`, no more transient failures than failures), so that its image
    is traced again."""
    try:
        document = read_json(output, "output")
    except TraceError:
        return None
    record = document.get(RECORD_MEMBER) if isinstance(document, dict) else None
    if not isinstance(record, dict):
        return None
    record = {"transient_failures": 0, **record}
    valid = (isinstance(record.get("inputs"), str)
             and record.get("status") in ("ok", "partial")
             and record.get("coordinate_space") in ("lonlat", "source", "pixel")
             and all(type(record.get(key)) is int and 0 <= record[key] <= MAX_RECORD_COUNT
                     for key in ("lines", "segments"))
             and isinstance(document.get("features"), list)
             and record["lines"] == len(document["features"])
             and isinstance(record.get("matched_seeds"), list)
             and all(isinstance(seed, str) for seed in record["matched_seeds"])
             and isinstance(record.get("failures"), list)
             and len(record["failures"]) <= MAX_RECORD_COUNT
             and all(_is_failure(failure) for failure in record["failures"])
             and (record["status"] == "partial") == bool(record["failures"])
             and type(record["transient_failures"]) is int
             and 0 <= record["transient_failures"] <= len(record["failures"]))
    if not valid:
        return None
    return {**record, "failures": [Failure(**failure) for failure in record["failures"]]}


def _is_failure(value) -> bool:
    """Whether ``value`` is a :class:`~core.vectors.Failure` as an output's record holds it."""
    return (isinstance(value, dict) and set(value) == {"reason", "seed", "segment"}
            and isinstance(value["reason"], str)
            and (value["seed"] is None or isinstance(value["seed"], str))
            and (value["segment"] is None
                 or (type(value["segment"]) is int and 0 <= value["segment"] <= MAX_RECORD_COUNT)))


def image_footprint(path: Path, image_crs: str | None) -> np.ndarray | None:
    """The lon/lat box ``[lon_min, lat_min, lon_max, lat_max]`` (4,) of an image, read cheaply.

    Reads only the header (rasterio for TIFFs and JPEG 2000, Pillow for the others) and the sidecar
    files; the box is that of the image's outline, sampled every 1/16 of a side, grown by
    1 % on each side (all longitudes up to the pole where the image holds one). Returns None
    when the image has no georeferencing with a CRS.

    Raises
    ------
    TraceError, OSError
        When the image or its georeferencing cannot be read (the worker will say why).
    """
    if path.suffix.lower() in WINDOWED_SUFFIXES:  # georeferenced by the file itself
        with load_image(path, crs=image_crs) as raster:
            georef, width, height = raster.georef, raster.width, raster.height
    else:
        georef = read_image_georef(path, image_crs)
        if georef is None or georef.crs is None:
            return None
        width, height = image_size(path)
    if georef is None or georef.crs is None:
        return None
    t = np.linspace(0, 1, 17)
    xs, ys = -0.5 + t * width, -0.5 + t * height
    outline = np.vstack([np.column_stack([xs, np.full_like(xs, -0.5)]),
                         np.column_stack([xs, np.full_like(xs, height - 0.5)]),
                         np.column_stack([np.full_like(ys, -0.5), ys]),
                         np.column_stack([np.full_like(ys, width - 0.5), ys])])
    lonlat = georef.pixel_to_lonlat(outline)
    lonlat = lonlat[np.all(np.isfinite(lonlat), axis=1)]
    if not lonlat.size:
        return None
    lonlat[:, 0] = np.unwrap(lonlat[:, 0], period=360.0)  # across 180°: past it, not round
    low, high = lonlat.min(axis=0), lonlat.max(axis=0)
    grow = 0.01 * (high - low)
    box = np.concatenate([low - grow, high + grow])
    for latitude in (90.0, -90.0):  # a pole inside the image: every longitude, up to it
        with np.errstate(invalid="ignore"):
            pole = georef.lonlat_to_pixel(np.array([[0.0, latitude]]))[0]
        if np.all(np.isfinite(pole)) and -0.5 <= pole[0] <= width - 0.5 \
                and -0.5 <= pole[1] <= height - 0.5:
            box[[0, 2]] = -180.0, 180.0
            box[1 if latitude < 0 else 3] = latitude
    return box


def seed_candidates(seeds: list[Seed], images: list[Path],
                    image_crs: str | None) -> dict[str, set[str]]:
    """For every image, which lon/lat seeds may cross it.

    Returns
    -------
    dict
        image name → ids of the seeds whose box meets the image's footprint box; an image
        whose footprint cannot be read, for whatever reason, gets every seed: its worker
        reports why, as that image's failure (one line; "unexpected error: …" for an error
        that is not a TraceError, as :func:`run_tasks` records it).
    """
    lonlat = [seed for seed in seeds if seed.image is None]
    if not lonlat:
        return {image.name: set() for image in images}
    boxes = np.array([lonlat_box(seed.vertices) for seed in lonlat])
    found = {}
    for image in images:
        try:
            box = image_footprint(image, image_crs)
        except Exception:  # TraceError, OSError, or (last resort) a library's unforeseen error
            found[image.name] = {seed.id for seed in lonlat}
            continue
        if box is None:
            found[image.name] = set()
            continue
        meets = boxes_meet(boxes, box)
        found[image.name] = {lonlat[i].id for i in np.flatnonzero(meets)}
    return found


def lonlat_box(vertices: np.ndarray) -> np.ndarray:
    """(lon min, lat min, lon max, lat max) of a line's (N, 2) lon/lat vertices, its
    longitudes unwrapped: a line across 180° spans past it (179.9 .. 180.1), not the globe."""
    lon = np.unwrap(vertices[:, 0], period=360.0)
    return np.array([lon.min(), vertices[:, 1].min(), lon.max(), vertices[:, 1].max()])


def boxes_meet(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Which lon/lat ``boxes`` (K, 4) meet ``box`` (4,) (each as :func:`lonlat_box`), the
    globe's longitudes round: shifted by 360° either way too. Returns (K,) bool."""
    lon = np.zeros(len(boxes), dtype=bool)
    for shift in (-360.0, 0.0, 360.0):
        lon |= (boxes[:, 2] + shift >= box[0]) & (boxes[:, 0] + shift <= box[2])
    return lon & (boxes[:, 3] >= box[1]) & (boxes[:, 1] <= box[3])


def plan_batch(images_dir: str | os.PathLike, seeds_path: str | os.PathLike,
               out_dir: str | os.PathLike, params: TraceParams | None = None, *,
               overwrite: bool = False, crs: str = "wgs84",
               image_crs: str | None = None, bands=None,
               evidence_dir: str | os.PathLike | None = None) -> BatchPlan:
    """Read the seeds, list the images, and decide what to do with each.

    ``bands``: band numbers to trace (:func:`core.raster.load_image`); an image without them
    fails. ``evidence_dir``: trace each image on its evidence raster there (module
    docstring).

    Raises
    ------
    BadParameter
        If a path is empty, ``images_dir`` or ``evidence_dir`` is not a folder,
        ``images_dir`` holds no image, the seeds file is unreadable, ``crs`` or ``image_crs``
        is unknown, ``bands`` is not 1 or 3 band numbers, a tracing parameter is out of
        range, or a file the run would write (an image's output, ``summary.json``,
        ``summary.csv``) is one it reads (the seeds file, an image, its georeferencing
        sidecars, an evidence raster, the surface model: :func:`core.surface.model_files`).
    OutputWriteError
        If ``out_dir`` cannot be created or written to.
    """
    for path, what in ((images_dir, "images folder"), (seeds_path, "seeds file"),
                       (out_dir, "output"), (evidence_dir, "evidence folder")):
        refuse_empty_path(path, what)
    images_dir, out_dir = Path(images_dir), Path(out_dir)
    params = params or TraceParams()
    check_batch_params(params)
    check_crs(crs)
    if image_crs is not None:
        parse_crs(image_crs)
    if bands is not None:  # their form (1 or 3 numbers from 1) now; each image's count later
        bands = choose_bands(max(bands, default=1), bands)
    if not images_dir.is_dir():
        raise BadParameter(f"images folder {images_dir} does not exist or is not a folder")
    images = list_images(images_dir)
    if not images:
        raise BadParameter(f"no images in {images_dir} (batch reads the files ending in "
                           f"{', '.join(IMAGE_SUFFIXES)})")
    if evidence_dir is not None:
        evidence_dir = evidence_folder(evidence_dir)
    seeds, seed_failures = read_seeds(seeds_path)
    _check_writable(out_dir)
    names = [image.name for image in images]
    for index, seed in enumerate(seeds):
        if seed.image is None:
            continue
        name = image_named(seed.image, names)
        if name is None:
            seed_failures.append(Failure(f"it names image {seed.image!r}, which is not in "
                                         f"{images_dir}", seed.id))
        else:
            seeds[index] = replace(seed, image=name)
    by_image = seed_candidates(seeds, images, image_crs)
    candidates = {seed.id: set() for seed in seeds if seed.image is None}
    for image, found in by_image.items():
        for seed_id in found:
            candidates[seed_id].add(image)
    outputs, tasks, skipped, changed_images, retried = {}, [], [], [], []
    # Every file the run reads (the surface model too): none may be replaced by an output.
    read = [seeds_path, *surface.model_files()]
    for image, output in output_names(images).items():
        outputs[image] = out_dir / output
        mine = tuple(seed for seed in seeds
                     if seed.image == image or (seed.image is None and seed.id in by_image[image]))
        task = ImageTask(str(images_dir / image), mine,
                         with_evidence_from(params, evidence_dir, image), crs, image_crs,
                         bands)
        read += [task.image, *sidecar_files(task.image), task.params.evidence_path]
        # An output is kept unless --overwrite, or the record it carries shows that it came
        # from other inputs (or it carries none: not ours, or an older version's), or that
        # some of its failures may not happen again.
        if not overwrite and outputs[image].exists():
            earlier = earlier_record(outputs[image])
            if earlier is None or earlier["inputs"] != task.fingerprint():
                changed_images.append(image)
            elif earlier["transient_failures"]:
                retried.append(image)
            else:
                skipped.append(ImageReport(
                    image, "skipped", earlier["coordinate_space"], earlier["lines"],
                    earlier["segments"], earlier["failures"],
                    matched_seeds=earlier["matched_seeds"], output=output,
                    inputs=earlier["inputs"], output_status=earlier["status"]))
                continue
        tasks.append(task)
    written = [out_dir / SUMMARY_JSON, out_dir / SUMMARY_CSV, *outputs.values()]
    refuse_clobbering_inputs(written, read)
    return BatchPlan(images_dir, out_dir, tasks, outputs, skipped, seed_failures, candidates,
                     changed_images, retried, *passed_over(images_dir),
                     orphan_outputs(out_dir, written))


def check_batch_params(params: TraceParams) -> None:
    """:func:`core.tracer.check_params` with the memory budget that every trace of the batch
    gets: this process's share (while a :func:`local_executor` is open, each of its
    processes has as much: :func:`core.resources.share_memory`); a plan over it is advised
    as a batch can follow (:func:`failure_reason`).

    Raises
    ------
    BadParameter
        As :func:`core.tracer.check_params`.
    """
    try:
        check_params(params)
    except OverMemoryBudget as exc:
        raise OverMemoryBudget(failure_reason(exc)) from None


def orphan_outputs(out_dir: Path, written: list[Path]) -> list[str]:
    """Names of the outputs of an earlier batch in ``out_dir`` (``*.geojson`` files holding
    a valid record: :func:`earlier_record`) that are none of the files ``written`` (under any
    name or link): those of images since removed from the images folder or renamed, or of an
    image whose output is named otherwise now (its stem is shared since). They are left as
    they are."""
    ours = {_file_identity(path) for path in written}
    try:
        found = sorted(out_dir.glob("*.geojson"))
    except OSError:
        return []
    return [path.name for path in found
            if _file_identity(path) not in ours and earlier_record(path) is not None]


# ------------------------------------------------------------------------------- execution
def _start_worker(devices, sharing: tuple[int, int | None]) -> None:
    """Process-pool initializer: end this worker as soon as the process that started it is
    gone (killed, even with SIGKILL), with ``devices`` see only the next GPU of that queue,
    and plan with this worker's part of the memory budget (``sharing``:
    :func:`core.resources.share_memory`'s arguments).

    A worker starts no processes of its own; spawn as its default way to start them keeps
    numba from making an inter-process lock for its threads (as it does under a fork
    server), a named semaphore that a terminated worker would leave behind."""
    multiprocessing.set_start_method("spawn", force=True)
    parent = multiprocessing.parent_process()
    if parent is not None:
        def watch() -> None:
            multiprocessing.connection.wait([parent.sentinel])  # ready when the parent exits
            os._exit(1)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get())
    share_memory(*sharing)


def _worker_context(modules: tuple[str, ...]) -> multiprocessing.context.BaseContext:
    """How local workers start: on Linux, forked from a server process that has imported
    ``modules`` (each worker skips those imports); elsewhere spawned, as CPython does by
    default on Windows and macOS (on macOS a forked child that calls Accelerate, numpy's
    BLAS there, may crash)."""
    if sys.platform != "linux" or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(modules))
    return context


def start_worker_server(modules: tuple[str, ...] = WORKER_MODULES) -> None:
    """Start the server that local workers are forked from (where there is one:
    :func:`_worker_context`), so that it imports ``modules`` (what the workers need; one
    that fails to import is left to them) while this process goes on; call it as soon as a
    :func:`local_executor` of the same ``modules`` is likely (a server once started keeps
    its modules). It never sees SIGINT, nor do the workers forked from it
    (:func:`_children_ignore_sigint`)."""
    if _worker_context(modules).get_start_method() == "forkserver":
        import multiprocessing.forkserver

        with _children_ignore_sigint():
            multiprocessing.forkserver.ensure_running()


@contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """The processes that this thread starts meanwhile never see SIGINT, from their very
    start (Python's resource tracker starts so too): Ctrl-C signals a terminal's whole
    foreground process group, a Windows console every process attached to it, and would end
    a worker still importing (or a fork server) with a traceback. This process stops them
    itself (:func:`stop_local_executor`), and they end when it does.

    On Windows this process ignores Ctrl-C meanwhile (``SetConsoleCtrlHandler(NULL, TRUE)``,
    which the processes it starts inherit: one pressed meanwhile is lost); elsewhere SIGINT
    is blocked in this thread (inherited through fork and exec; one that comes meanwhile is
    handled once the block ends)."""
    if sys.platform == "win32":
        import ctypes

        console = ctypes.windll.kernel32
        console.SetConsoleCtrlHandler(None, True)
        try:
            yield
        finally:
            console.SetConsoleCtrlHandler(None, False)
    else:
        import multiprocessing.resource_tracker

        multiprocessing.resource_tracker.ensure_running()  # first: starting it unblocks SIGINT
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class LocalPool(Executor):
    """A pool of ``workers`` local processes (:func:`local_executor`) that can start afresh
    once one of them died (:meth:`restart`).

    While it is open, this process and each worker plan with 1/(``workers`` + 1) of the
    memory budget (:func:`core.resources.share_memory`; they all decode and trace at once).
    """

    def __init__(self, workers: int, gpus: int, modules: tuple[str, ...]):
        self.workers, self.gpus, self.modules = workers, gpus, modules
        self.sharing = (workers + 1, available_memory())
        self._alone = share_memory(*self.sharing)
        self.pool = self._started()

    def _started(self):
        from concurrent.futures import ProcessPoolExecutor

        start_worker_server(self.modules)
        context = _worker_context(self.modules)
        devices = None
        if self.gpus:
            devices = context.Queue()
            for worker in range(self.workers):
                devices.put(worker % self.gpus)
        return ProcessPoolExecutor(self.workers, mp_context=context, initializer=_start_worker,
                                   initargs=(devices, self.sharing))

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Run ``fn(*args, **kwargs)`` in a worker (the pool starts one as it is handed a
        call: :func:`_children_ignore_sigint`)."""
        with _children_ignore_sigint():
            return self.pool.submit(fn, *args, **kwargs)

    def died(self) -> set[int]:
        """Process ids of the workers that died (killed, crashed), not those the pool
        terminated (SIGTERM) as it broke."""
        return {pid for pid, worker in (self.pool._processes or {}).items()
                if worker.exitcode not in (None, -signal.SIGTERM)}

    def restart(self) -> None:
        """Replace a broken pool (one of its workers died: the others are ended) by a new
        one of as many workers."""
        self.pool.shutdown(wait=True)
        self.pool = self._started()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut the pool down (``concurrent.futures.Executor.shutdown``); this process plans
        with the whole memory budget again."""
        self.pool.shutdown(wait, cancel_futures=cancel_futures)
        share_memory(*self._alone)


def local_executor(workers: int, gpus: int = 0, modules: tuple[str, ...] = WORKER_MODULES
                   ) -> LocalPool:
    """A pool of ``workers`` local processes (no state shared with this one: on Linux forked
    from a clean server process that has imported ``modules``, elsewhere spawned:
    :func:`_worker_context`, :func:`start_worker_server`), deaf to SIGINT (Ctrl-C).

    Workers end by themselves when this process dies. With ``gpus`` > 0, worker *i* sees only
    GPU *i* mod ``gpus`` (``CUDA_VISIBLE_DEVICES``, set before the worker imports anything
    CUDA): with more workers than GPUs, several processes share a GPU, each doing its host
    work while the device runs the others' kernels. Shut it down with
    :func:`stop_local_executor`.
    """
    return LocalPool(workers, gpus, modules)


def stop_local_executor(executor: LocalPool, interrupted: bool) -> None:
    """Shut a :func:`local_executor` down; when ``interrupted``, images not started are
    dropped and the workers are terminated at once (not left to finish their image): every
    multiprocessing child of this process is, which in the command line is the pool alone.

    ``shutdown(wait=False)`` asks the pool's thread to drop the images not started and
    forgets the thread, which is waited for here once the workers are terminated (as
    ``shutdown(wait=True)`` would, after waiting for the workers' images).
    """
    if interrupted:
        manager = executor.pool._executor_manager_thread
        executor.shutdown(wait=False, cancel_futures=True)
        for worker in multiprocessing.active_children():
            worker.terminate()
        if manager is not None:
            manager.join()
    else:
        executor.shutdown(wait=True, cancel_futures=True)


def images_per_call(tasks: int, workers: int) -> int:
    """Images to hand each of ``workers`` local workers at once for ``tasks`` images: up to
    ``WORKER_IMAGES``, while every worker still gets at least four calls (the last calls
    of the run keep all workers busy)."""
    return max(1, min(WORKER_IMAGES, tasks // (4 * max(workers, 1))))


def run_tasks(tasks: list[ImageTask], backend_factory: Callable[[], TracerBackend],
              executor: Executor | None = None, images: int = 1,
              here: Callable[[], TracerBackend] | None = None,
              progress: Callable[[int], None] | None = None,
              work_dir: Path | None = None
              ) -> Iterator[tuple[ImageReport, dict | None]]:
    """Run :func:`process_image` on every task; yield results as they complete.

    Parameters
    ----------
    tasks : list of ImageTask
    backend_factory : callable
        Picklable when ``executor`` is given (it runs in the workers).
    executor : concurrent.futures.Executor, optional
        Where to run the tasks: a :func:`local_executor`, or a Dask cluster's
        ``distributed.Client(...).get_executor(pure=False)``. None runs them one after
        the other in this process.
    images : int
        Tasks per call to ``executor`` (:func:`trace_images`: one after the other, the next
        image read while one is traced; their results come when the call ends).
    here : callable, optional
        A backend factory for this process, for an executor of this machine (a
        :func:`local_executor`; its calls mark in a file as they start, :func:`trace_images`):
        until the executor returns its first result (its workers are starting), this process
        takes the calls at the end of the queue back from the executor and runs them itself.
        And when a local worker dies (killed, e.g. out of memory, or crashed), only the image
        it was tracing fails (:data:`WORKER_DIED`): the others are traced again by a new pool,
        as long as each pool traces or loses an image (else they fail,
        :data:`WORKERS_LOST`).
    progress : callable, optional
        Called with the number of segments traced, as the images traced in this process
        advance (:func:`process_image`), before each of them is yielded; an executor's images
        are not followed.
    work_dir : Path, optional
        Where to make the folder of the calls' mark files (with ``here``; named
        :data:`CALLS_PREFIX`…, removed at the end): the output folder, so that the next run
        removes one that a killed run left (:func:`lock_output_folder`); default the
        system's temporary folder.

    Yields
    ------
    (ImageReport, dict or None)
        As they complete (in task order without an executor). A task that raised
        unexpectedly (or whose worker died) gives a ``"failed"`` report.
    """
    if executor is None:
        yield from _run_here(tasks, backend_factory, progress)
        return
    images = max(images, 1)
    # A worker may still hold its mark file open when an interrupt removes the folder: Windows
    # refuses to delete it, and that error must not replace the KeyboardInterrupt.
    with (tempfile.TemporaryDirectory(prefix=CALLS_PREFIX, dir=work_dir,
                                      ignore_cleanup_errors=True)
          if here is not None else nullcontext()) as marks:
        for attempt in count():
            folder = None if marks is None else Path(marks, str(attempt))
            lost = yield from _run_calls(tasks, backend_factory, executor, images, here,
                                         progress, folder)
            if not lost:
                return
            again, dying = _lost_images(lost, executor.died())
            yield from (_failed(task, WORKER_DIED) for task in dying)
            if len(again) == len(tasks):  # nothing traced, nothing lost: no new pool
                yield from (_failed(task, WORKERS_LOST) for task in again)
                return
            tasks = again
            executor.restart()


def _run_calls(tasks: list[ImageTask], backend_factory: Callable[[], TracerBackend],
               executor: Executor, images: int, here: Callable[[], TracerBackend] | None,
               progress: Callable[[int], None] | None, marks: Path | None
               ) -> Iterator[tuple[ImageReport, dict | None]]:
    """:func:`run_tasks` on ``executor``, ``images`` tasks per call, each call marked by a
    file of folder ``marks`` as it starts (with ``here``). Returns the calls lost with their
    local worker (the pool broke): (tasks, mark file) each."""
    calls = [tasks[first:first + images] for first in range(0, len(tasks), images)]
    if marks is not None:
        marks.mkdir()
    with _signals_deferred():  # a local worker's start is not cut short: see there
        futures = {}
        for number, called in enumerate(calls):
            mark = None if marks is None else marks / str(number)
            futures[executor.submit(trace_images, called, backend_factory, mark)] = called, mark
    lost = []

    def outcomes(future: Future) -> list[tuple[ImageReport, dict | None]]:
        called, mark = futures.pop(future)
        found = _call_outcomes(future, called, mark)
        if found is None:
            lost.append((called, mark))
        return found or []

    queue = list(futures)  # in submission order: workers take from the start, here from the end
    while here is not None and futures:
        done = wait(futures, timeout=0, return_when=FIRST_COMPLETED).done
        for future in done:
            yield from outcomes(future)
        taken = None if done else _take_back(queue, futures)
        if taken is None:  # the workers are up, or nothing is left to take
            break
        yield from _run_here(taken, here, progress)
    # No reference to a call's future may stay here once it is done: each holds its images'
    # outputs, and a batch of many images would keep them all until it ends.
    queue.clear()
    done = None
    for future in as_completed(list(futures)):
        yield from outcomes(future)
    return lost


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM handled once the block ends, not in it (in the main thread, where
    Python runs its signal handlers).

    A local executor starts a worker as a call is submitted, and waits until the server it is
    forked from has imported its modules: an interrupt in that wait (Ctrl-C) would leave a
    worker that this process does not know of, to start once the server is ready and fail,
    with a traceback, reading the task queue this process has since removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    handlers = {number: signal.signal(number, lambda number, frame: came.append(number))
                for number in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(number) is not None}  # None: not set from Python
    try:
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        if came:
            signal.raise_signal(came[0])


def _take_back(queue: list[Future], futures: dict[Future, tuple[list[ImageTask], Path]]
               ) -> list[ImageTask] | None:
    """The tasks of the last call of ``queue`` if no worker has started it (marked here as
    started, it leaves ``futures``; its worker returns nothing), else None: the executor
    starts calls in order, so none is left.

    Calls are not cancelled: a process pool that breaks with a cancelled call fails on it
    before it ends its other workers, on Python 3.11 (CPython gh-107219)."""
    while queue:
        future = queue.pop()
        if future not in futures:  # its result was handed on
            continue
        mark = _mark_started(futures[future][1])
        if mark is None:
            return None
        os.close(mark)
        return futures.pop(future)[0]
    return None


def _mark_started(path: Path) -> int | None:
    """Create the file ``path`` that marks a call as started, holding this process's id: its
    open descriptor, or None if it was there (another process started the call)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return None
    os.write(descriptor, f"{os.getpid()}\n".encode())
    return descriptor


def _call_outcomes(future: Future, called: list[ImageTask], mark: Path | None
                   ) -> list[tuple[ImageReport, dict | None]] | None:
    """The outcomes of an executor's call of :func:`trace_images` on ``called``; None for a
    call lost with its local worker, whose start ``mark`` tells (see :func:`run_tasks`)."""
    try:
        return future.result()
    except Exception as exc:  # a bug or a dead worker: record it, keep going
        if mark is not None and isinstance(exc, BrokenProcessPool):
            return None
        return [_crashed(task, exc) for task in called]


def _lost_images(lost: list[tuple[list[ImageTask], Path]], died: set[int]
                 ) -> tuple[list[ImageTask], list[ImageTask]]:
    """Of the calls ``lost`` with a broken pool: the tasks to trace again, and those that a
    worker of ``died`` was tracing as it died (its mark file: its process id, then the number
    of the call's images it had traced, one line per image)."""
    again, dying = [], []
    for called, mark in lost:
        try:
            worker, *traced = map(int, mark.read_text().split())
        except (OSError, ValueError):  # no worker started the call
            worker, traced = None, []
        tracing = traced[-1] if traced else 0
        for number, task in enumerate(called):
            (dying if worker in died and number == tracing else again).append(task)
    return again, dying


def trace_images(tasks: list[ImageTask], backend_factory: Callable[[], TracerBackend],
                 mark: Path | None = None) -> list[tuple[ImageReport, dict | None]]:
    """:func:`process_image` of each task in this process (a worker's call of
    :func:`run_tasks`), the next image read while one is traced.

    With ``mark``, nothing if that file exists (:func:`run_tasks` took the call back), else
    the file is made: it holds this process's id and, a line per image traced, how many are.
    """
    if mark is None:
        return list(_run_here(tasks, backend_factory))
    descriptor = _mark_started(mark)
    if descriptor is None:
        return []
    outcomes = []
    try:
        for outcome in _run_here(tasks, backend_factory):
            outcomes.append(outcome)
            os.write(descriptor, f"{len(outcomes)}\n".encode())
    finally:
        os.close(descriptor)
    return outcomes


def _run_here(tasks: list[ImageTask], backend_factory: Callable[[], TracerBackend],
              progress: Callable[[int], None] | None = None
              ) -> Iterator[tuple[ImageReport, dict | None]]:
    """:func:`run_tasks` in this process: one image after the other, the next one read (PNG
    or JPEG decoded; a GeoTIFF opened) in a thread while this one is traced."""
    with ThreadPoolExecutor(1, thread_name_prefix="image-reader") as reader:
        upcoming = None
        try:
            for k, task in enumerate(tasks):
                current = upcoming
                upcoming = (reader.submit(open_task_image, tasks[k + 1])
                            if k + 1 < len(tasks) and _read_ahead(tasks[k + 1]) else None)
                with _interrupts_kept():
                    try:
                        outcome = process_image(task, backend_factory,
                                                opened=current.result if current else None,
                                                progress=progress)
                    except Exception as exc:  # a bug: record it, keep going (as a worker would)
                        outcome = _crashed(task, exc)
                yield outcome
        finally:  # stopped early: close the image read ahead
            if upcoming is not None and not upcoming.cancel():
                with suppress(Exception):
                    upcoming.result().close()


@contextmanager
def _interrupts_kept() -> Iterator[None]:
    """The exception that the Python handler of SIGINT or SIGTERM raises meanwhile (the
    command line's KeyboardInterrupt) raised again as the block ends, if it did not get out.

    A handler that Python runs inside a callback from native code or inside a finalizer
    (numba compiling in this process, LLVM objects freed: while this process traces images
    as its workers start, or with no workers) has its exception printed ("Exception ignored
    in ...", with a traceback) and dropped: the command line, which ignores further signals
    once it is told to stop, would go on to the end. Here it is kept, not printed. Only in
    the main thread, where Python runs handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[BaseException] = []
    unraisable_hook = sys.unraisablehook

    def unless_kept(unraisable) -> None:
        if unraisable.exc_value not in raised:
            unraisable_hook(unraisable)

    def noting(handler):
        def noted(number, frame):
            try:
                handler(number, frame)
            except BaseException as exc:
                raised.append(exc)
                raise
        return noted

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    noted = {number: noting(handler) for number, handler in handlers.items() if callable(handler)}
    for number, handler in noted.items():
        signal.signal(number, handler)
    sys.unraisablehook = unless_kept
    try:
        yield
    finally:
        sys.unraisablehook = unraisable_hook
        for number, handler in noted.items():
            if signal.getsignal(number) is handler:  # not replaced by the handler it runs
                signal.signal(number, handlers[number])
    if raised:
        raise raised[0]


def _read_ahead(task: ImageTask) -> bool:
    """Whether :func:`_run_here` may read ``task``'s image while another is traced: a GeoTIFF,
    JPEG 2000, … (opened, read window by window), or one whose decoding takes at most
    ``READ_AHEAD_BYTES`` (:func:`core.resources.decode_memory`, from its header)."""
    import imageio.v3 as iio

    if Path(task.image).suffix.lower() in WINDOWED_SUFFIXES:
        return True
    try:
        width, height = image_size(task.image)
        # One band first: a header whose pixels alone are too many is not read again (over
        # Pillow's own pixel limit, it would warn).
        if decode_memory(width, height, 1) > READ_AHEAD_BYTES:
            return False
        header = iio.improps(task.image, plugin="pillow")  # frames × rows × columns × bands
    except Exception:  # unreadable: process_image reports it
        return False
    return decode_memory(width, height, math.prod(header.shape) // (width * height)) \
        <= READ_AHEAD_BYTES


def _crashed(task: ImageTask, exc: Exception) -> tuple[ImageReport, None]:
    return _failed(task, f"unexpected error: {type(exc).__name__}: {exc}")


def _failed(task: ImageTask, reason: str) -> tuple[ImageReport, None]:
    """The outcome of a task that failed for ``reason``, without output."""
    report = ImageReport(os.path.basename(task.image), status="failed")
    report.failures.append(Failure(reason))
    return report, None


def write_output(plan: BatchPlan, report: ImageReport, document: dict | None) -> ImageReport:
    """Write an image's GeoJSON atomically, with the record of what made it
    (:data:`RECORD_MEMBER`: the report's ``inputs``, ``status``, ``coordinate_space``,
    ``lines``, ``segments``, ``matched_seeds`` and ``failures``); a write failure (disk
    full, …) fails the image's report."""
    if document is None:
        return report
    path = plan.outputs[report.image]
    document[RECORD_MEMBER] = {key: value for key, value in asdict(report).items()
                               if key not in ("image", "seconds", "output", "output_status")}
    try:
        write_geojson(path, document)
    except OutputWriteError as exc:
        report.status = "failed"
        report.failures.append(Failure(str(exc)))
        return report
    report.output = path.name
    return report


def summarize(plan: BatchPlan, reports: list[ImageReport], seconds: float,
              settings: dict) -> dict:
    """The ``summary.json`` document.

    Its totals count what the outputs hold, those of skipped images included (their
    ``lines``, ``segments`` and ``failures``), but ``segments_traced`` and
    ``segments_per_second`` only this run's work. ``not_done`` names the images of the plan
    that this run did not finish (interrupted): an output of theirs, if any, is from other
    inputs and the next run traces them; ``orphan_outputs``, the outputs of an earlier
    batch in the output folder that belong to no image (:func:`orphan_outputs`).

    ``seeds_outside`` counts the lon/lat seeds that cross none of the images (no footprint
    box meets theirs, or every image they may cross has an output, traced in this run or
    kept, and none matched them: a failed image may have) and lists the first
    :data:`MAX_OUTSIDE_IDS` of their ids: seeds of more ground than the imagery (a region's
    extract for a few tiles) are no failure, and may be millions.
    """
    everything = sorted(reports + plan.skipped, key=lambda report: report.image)
    matched = {seed for report in everything for seed in report.matched_seeds}
    settled = {report.image for report in everything if report.status != "failed"}
    outside = [seed for seed, images in plan.candidates.items()
               if seed not in matched and images <= settled]
    done = {report.image for report in reports}
    traced = sum(report.segments for report in reports)
    counts = {status: sum(report.status == status for report in everything)
              for status in ("ok", "partial", "failed", "skipped")}
    return {
        "images_dir": str(plan.images_dir),
        "output_dir": str(plan.out_dir),
        **settings,
        "seconds": round(seconds, 3),
        "totals": {
            "images": len(everything), **counts,
            "lines": sum(report.lines for report in everything),
            "segments": sum(report.segments for report in everything),
            "segments_traced": traced,
            "failures": sum(len(report.failures) for report in everything)
            + len(plan.seed_failures),
            "segments_per_second": round(traced / seconds, 3) if seconds > 0 else None,
        },
        "seed_failures": [asdict(failure) for failure in plan.seed_failures],
        "seeds_outside": {"count": len(outside), "ids": outside[:MAX_OUTSIDE_IDS]},
        "images": [report.as_dict() for report in everything],
        "not_done": sorted(printable(os.path.basename(task.image)) for task in plan.tasks
                           if os.path.basename(task.image) not in done),
        "orphan_outputs": [printable(name) for name in plan.orphans],
    }


def inert_cell(cell):
    """``cell`` as a spreadsheet shows it as text: prefixed with ``'`` when it starts with
    :data:`FORMULA_STARTS` (OWASP's advice against CSV formula injection)."""
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) else cell


def summary_csv(summary: dict) -> str:
    """``summary.csv``: one row per image (:data:`CSV_COLUMNS`; the reasons of an image
    without failures that no seed concerns say so), then one for bad seeds; cells that a
    spreadsheet would read as a formula are made text (:func:`inert_cell`)."""
    stream = io.StringIO()
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in summary["images"]:
        reasons = "; ".join(Failure(**failure).describe() for failure in record["failures"])
        if not record["failures"] and not record["matched_seeds"]:
            reasons = NO_SEED_REASON
        writer.writerow(map(inert_cell, [
            record["image"], record["status"], record["coordinate_space"] or "",
            record["lines"], record["segments"], len(record["failures"]),
            f"{record['seconds']:.3f}", reasons]))
    if summary["seed_failures"]:
        failures = [Failure(**failure) for failure in summary["seed_failures"]]
        writer.writerow(map(inert_cell, ["(seeds)", "failed", "", 0, 0, len(failures), "0.000",
                                         "; ".join(failure.describe() for failure in failures)]))
    return stream.getvalue()


def write_summary(out_dir: Path, summary: dict) -> None:
    """Write ``summary.json`` and ``summary.csv`` (after :data:`CSV_BOM`) atomically (raises
    OutputWriteError)."""
    write_text_atomic(out_dir / SUMMARY_JSON, json.dumps(summary, indent=1) + "\n")
    write_text_atomic(out_dir / SUMMARY_CSV, CSV_BOM + printable(summary_csv(summary)))


def batch_failed(summary: dict) -> bool:
    """Whether anything failed: an image, a segment (in this run, or recorded in an output
    kept from an earlier one) or a seed."""
    totals = summary["totals"]
    return bool(totals["partial"] or totals["failed"] or totals["failures"])

