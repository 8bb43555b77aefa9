"""Trace the optimal angle-constrained polyline between two clicked points.

:func:`trace` validates the request, reads only the corridor window of the raster (plus the
gradient margin), builds evidence with the chosen score kind, and asks a backend for the
optimum.

Defaults scale with the click distance L = |b - a| (px); they were chosen by measurement on
real roads and rivers (docs/ACCURACY.md):

* halfwidth w = clip(0.25·L, 8, 150) px (curved roads leave a 0.2·L corridor); where the
  optimum touches the corridor's edge, the corridor held it back: it is traced once more with
  w × 1.6 (at most 150 px) and as many points per guide as before (so ~2.4 px apart: a
  re-traced click costs about 2.5 plain ones, not 3.5);
* guides m = clip(round(L / 20), 1, 40), i.e. one guide every ~20 px;
* points d = 2·round(w / 1.5) + 1, i.e. guide points ~1.5 px apart;
* max angle 60°, σ = 1.5 px, score ``surface``.

Evidence from the user: ``TraceParams.evidence_path`` names a raster on the image's pixel
grid (same width and height, e.g. a road-probability map from a segmentation model); the
score kind then reads its pixels instead of the image's (the default ``surface``, a model of
imagery, then runs as ``centre``). With ``score="evidence"`` band 0 is
used as a probability p (0 = none, 1 = certain; 8/16-bit rasters are scaled to [0, 1]) and the
path is the angle-constrained geodesic on cost 1 − p + 0.5 per px (core/scores.py).

Near the image border the corridor may leave the image; evidence there counts as the worst in
the window (:func:`corridor_evidence`), so no path gains by leaving the image.

A long slanted click pair's axis-aligned window is mostly image far from the corridor (an
11 300 px diagonal: a 7800² px box around a 320 px wide strip). Where that window would hold
over ``TURNED_FRAME_PIXELS`` and at least ``TURNED_FRAME_SAVING`` times the pixels of a window
turned to [a, b], and the turned one lies inside the image, the corridor is built and its
evidence made in the turned frame, the image resampled into it bilinearly
(:func:`_read_turned`); the polyline is turned back to the image at the end.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from core.backend import CpuBackend, TracerBackend
from core.centring import centre_on_surface
from core.errors import (
    BadParameter,
    ImageReadError,
    NoAdmissiblePath,
    PointOutsideImage,
    TraceError,
)
from core.gradient import MAX_IMAGE_SIDE, MAX_SIGMA, MIN_SIGMA, TRUNCATE, gradient_margin
from core.guides import (
    MIN_ENDPOINT_DISTANCE,
    Corridor,
    admissible_windows,
    build_corridor,
    check_count,
    check_halfwidth,
    check_max_angle,
    real_number,
)
from core.raster import (
    IMAGE_SUFFIXES,
    WINDOWED_SUFFIXES,
    Raster,
    finite_float32,
    has_grid,
    image_size,
    load_image,
    on_same_grid,
    read_image_georef,
)
from core.resources import check_trace_plan, window_pixels
from core.scores import (
    PATCH_RADIUS,
    SCALAR,
    SINE,
    Evidence,
    ScoreInputs,
    get_score_kind,
    gradient_floor,
    pad_planes,
    patch_colours,
    trace_window_memory,
)

#: Default corridor half-width per px of click distance.
HALFWIDTH_PER_LENGTH = 0.25
#: Default distance between guides (px).
GUIDE_SPACING = 20.0
#: Default distance between points on a guide (px).
POINT_SPACING = 1.5
#: Default half-width growth when the optimum touches the corridor's edge (one re-trace).
CORRIDOR_GROWTH = 1.6
#: Largest default half-width (px).
MAX_HALFWIDTH = 150.0
#: Most guides per px of click distance: more guides asked for are lowered to this (guides
#: closer than ~1 px apart follow nothing finer, and each costs memory the resource plan does
#: not count).
MAX_GUIDES_PER_PX = 1.0
#: Most corridor pixels whose evidence :func:`trace_many` makes in one pass (bounds its memory).
BATCH_PIXELS = 4_000_000
#: Most segments :func:`trace_many` traces in one pass: a GPU launches one block row per
#: window, at most 65 535 of them (short segments of densified lines are many to 4 Mpx).
BATCH_SEGMENTS = 16_384
#: Axis-aligned corridor windows of more pixels than this (about 1.2 GB of evidence with the
#: surface model; a diagonal of some 2 500 px) may be read in a frame turned to [a, b] (module
#: docstring); every smaller window, every click of the accuracy cases among them, is read as
#: it lies in the image, with the context around the corridor that the model reads better.
TURNED_FRAME_PIXELS = 4_000_000
#: How many times fewer pixels the turned window must hold for a trace to use it.
TURNED_FRAME_SAVING = 2.0
#: Columns of the turned window resampled from one read of the image (bounds the read's box).
TURNED_PIECE_COLUMNS = 512
#: What ``TraceParams.line_kind`` may be.
LINE_KINDS = ("road", "river")
#: Gradient score kinds take a window for blank where all but this share of its values read
#: one value (stray pixels on a uniform area: nothing to follow but rounding residue).
GRADIENT_BLANK_SHARE = 1e-4
#: Share of an endpoint's patch (``PATCH_RADIUS``) reading 0 in every band (no data) above
#: which the trace notes that the point lies on no data (on the image, not an evidence raster).
NO_DATA_SHARE = 0.5
#: The default gradient scale σ (px). Score kinds that do not read the gradient
#: (``ScoreKind.uses_gradient`` False) read the window of this σ's margin whatever
#: ``TraceParams.sigma`` says (:func:`evidence_sigma`): σ does not change their lines.
DEFAULT_SIGMA = 1.5
#: How far (px) a point may lie beyond the image's edge and still be taken, moved onto the
#: edge: float noise of a coordinate conversion (an anchor at 571 + 1e-9 on a 572 px wide
#: image), as :attr:`core.guides.Corridor.pixel_bounds` rounds it away.
POINT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class TraceParams:
    """Tracing parameters; ``None`` means "scale with the click distance" (module docstring).

    ``evidence_path``: optional raster on the image's grid whose pixels the score kind reads
    instead of the image's (module docstring). ``line_kind``: "road", or "river": score kinds that
    follow a surface then run as for water (``ScoreKind.river``) and the traced line is moved
    to the middle of the water surface (core/centring.py). ``ground_resolution``: the imagery's
    metres per pixel where the image's georeferencing does not say (a PNG or JPEG); the
    surface model runs at full resolution on larger windows of imagery 0.3 m per pixel or
    coarser, and reads imagery finer than 0.16 m per pixel on block means (core/surface.py).
    """

    guides: int | None = None
    points: int | None = None
    halfwidth: float | None = None
    max_angle: float = 60.0
    sigma: float = DEFAULT_SIGMA
    score: str = "surface"
    evidence_path: str | None = None
    line_kind: str = "road"
    ground_resolution: float | None = None

    def resolve(self, length: float) -> TraceParams:
        """A copy with every ``None`` replaced by its default for click distance ``length``;
        with an evidence raster, ``surface`` (a model of imagery) becomes ``centre``."""
        halfwidth = self.halfwidth if self.halfwidth is not None else float(
            min(max(HALFWIDTH_PER_LENGTH * length, 8.0), MAX_HALFWIDTH))
        guides = self.guides if self.guides is not None else int(
            min(max(round(length / GUIDE_SPACING), 1), 40))
        points = self.points if self.points is not None else 2 * int(
            round(halfwidth / POINT_SPACING)) + 1
        return replace(self, guides=guides, points=points, halfwidth=halfwidth,
                       score=self.traced_score)

    def check(self) -> None:
        """Raise :class:`BadParameter` naming the first field of the wrong type or out of its
        range (guides >= 1 and points >= 2 whole numbers, halfwidth > 0 px, max angle in
        (0, 180]°, σ from ``MIN_SIGMA`` to ``MAX_SIGMA`` px, a registered score kind, a line kind of
        :data:`LINE_KINDS`, a ground resolution in :data:`GROUND_RESOLUTION_RANGE`, an
        evidence path). Whole numbers of guides and points given as floats (3.0) become
        ints."""
        if self.guides is not None:
            object.__setattr__(self, "guides", check_count(self.guides, "guides", 1))
        if self.points is not None:
            object.__setattr__(self, "points", check_count(self.points, "points per guide", 2))
        if self.halfwidth is not None:
            check_halfwidth(self.halfwidth)
        check_max_angle(self.max_angle)
        check_sigma(self.sigma)
        get_score_kind(self.score)
        if self.line_kind not in LINE_KINDS:
            raise BadParameter(f"line kind must be one of {', '.join(LINE_KINDS)}, got "
                               f"{self.line_kind!r}")
        if self.ground_resolution is not None:
            check_ground_resolution(self.ground_resolution)
        if self.evidence_path is not None and not isinstance(self.evidence_path,
                                                             str | os.PathLike):
            raise BadParameter(f"evidence path must be a file path, got {self.evidence_path!r}")

    @property
    def traced_score(self) -> str:
        """The score kind that traces: ``score``, but ``centre`` for ``surface`` (a model of
        imagery) on an evidence raster."""
        return "centre" if self.evidence_path is not None and self.score == "surface" \
            else self.score

    def as_dict(self) -> dict:
        """The parameters by field name (JSON-ready)."""
        return asdict(self)


@dataclass(frozen=True)
class TraceResult:
    """The optimal polyline and how it was found.

    polyline : (m+2, 2) float64, a → guide points → b, pixel (x, y); in river mode the guide
        points moved to the middle of the water surface (core/centring.py).
    indices : (m,) chosen point index on each guide.
    score : total score; link_scores : (m+1,) per link (of the DP's optimum, before any
        river-mode move).
    notes : what a user should know of the trace, one sentence each (an endpoint on no data,
        a re-trace in a wider corridor refused); empty where there is nothing to say.
    """

    polyline: np.ndarray
    indices: np.ndarray
    score: float
    link_scores: np.ndarray
    params: TraceParams
    backend: str
    timings_ms: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()


#: The ground resolutions (metres per pixel) a trace accepts: drone imagery of 1 mm to
#: coarse satellite imagery of 10 km; beyond them a stated resolution is a mistake.
GROUND_RESOLUTION_RANGE = (0.001, 10000.0)


def check_ground_resolution(value: float, what: str = "ground resolution") -> float:
    """``value`` if it is a number of metres per pixel within :data:`GROUND_RESOLUTION_RANGE`,
    else :class:`BadParameter` naming ``what`` it is."""
    low, high = GROUND_RESOLUTION_RANGE
    number = real_number(value, what)
    if not low <= number <= high:  # NaN fails too
        text = f"{number:.3g}"
        if low <= float(text) <= high:  # rounded into the range (0.0009999 as 0.001): exactly
            text = exact_text(number)
        raise BadParameter(f"{what} {text} m per pixel, outside {low:g} to {high:g} m"
                           + ("" if what == "ground resolution" else
                              "; state the right one (--ground-resolution, or the app's "
                              "ground resolution parameter)"))
    return value


def check_sigma(value) -> float:
    """The gradient scale σ ``value`` (px) as a float if it is a number from
    :data:`core.gradient.MIN_SIGMA` to :data:`core.gradient.MAX_SIGMA`, else
    :class:`BadParameter`."""
    sigma = real_number(value, "sigma")
    if not math.isfinite(sigma):
        raise BadParameter(f"sigma must be a finite number of px, got {value}")
    if not sigma >= MIN_SIGMA:
        raise BadParameter(f"sigma must be at least {MIN_SIGMA:g} px (finer, the Gaussian "
                           f"derivative no longer sees edges), got {value}")
    if sigma > MAX_SIGMA:
        raise BadParameter(f"sigma must be at most {MAX_SIGMA:.3g} px (coarser, its Gaussian "
                           f"reaches, at {TRUNCATE:g}σ, beyond the {MAX_IMAGE_SIDE} px side of "
                           f"the largest image), got {sigma:g}")
    return sigma


def evidence_sigma(params: TraceParams) -> float:
    """The gradient scale σ (px) the evidence of a trace with ``params`` is made with, and
    its window's margin read for (:func:`core.gradient.gradient_margin`): ``params.sigma`` for
    a score kind that reads the gradient, else :data:`DEFAULT_SIGMA` (σ is no parameter of
    theirs: their lines, and the memory they need, are those of the default σ)."""
    if get_score_kind(params.traced_score).uses_gradient:
        return params.sigma
    return DEFAULT_SIGMA


def exact_text(value: float) -> str:
    """``value`` as short text (``:g``) where that reads back as the same number, else as
    Python writes it exactly (571.000000001, not 571)."""
    text = f"{value:g}"
    return text if float(text) == value else repr(float(value))


def resolve_for_length(params: TraceParams, length: float) -> TraceParams:
    """``params`` as a trace between clicks ``length`` px apart takes them: guides given lowered
    to :data:`MAX_GUIDES_PER_PX` per px (e.g. on a short leg of a line), every automatic value
    resolved (:meth:`TraceParams.resolve`)."""
    most_guides = max(1, int(MAX_GUIDES_PER_PX * length))
    if params.guides is not None and params.guides > most_guides:
        params = replace(params, guides=most_guides)
    return params.resolve(length)


def check_params(params: TraceParams) -> None:
    """Raise :class:`BadParameter` for parameters that every trace would reject.

    The checks are the tracer's own (:func:`trace`, its resource plan included, for a 100 px
    segment: its score kind's memory at ``params.ground_resolution``, unknown where not
    given), run once before any work (``batch``, ``eval``) so that a bad option is a usage
    error rather than a failure of every segment or case.
    """
    params.check()
    sigma = evidence_sigma(params)
    resolved = replace(params.resolve(100.0), sigma=sigma)
    chord, margin = (100.0, 0.0), gradient_margin(sigma)
    window_px = window_pixels(chord, resolved.halfwidth, margin)
    check_trace_plan(params, resolved, margin,
                     (window_px, trace_window_memory(resolved, window_px,
                                                     params.ground_resolution)))
    build_corridor((0.0, 0.0), (100.0, 0.0), resolved.guides, resolved.points,
                   resolved.halfwidth)


def check_point(raster: Raster, point, name: str) -> np.ndarray:
    """Return the point as (2,) float64, or raise if it is not two finite numbers (a bool or
    a string is none) inside the image. A point at most :data:`POINT_TOLERANCE` px beyond the
    image's edge is moved onto it."""
    try:
        coordinates = point.reshape(2).tolist() if isinstance(point, np.ndarray) else [
            value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
            for value in point]
    except (TypeError, ValueError):
        coordinates = None
    if coordinates is None or len(coordinates) != 2 or not all(
            isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
            for value in coordinates):
        raise BadParameter(f"point {name}={point!r} is not an (x, y) pair of numbers")
    try:
        xy = np.array([float(value) for value in coordinates], dtype=np.float64)
    except OverflowError:  # an integer beyond a float's range
        raise BadParameter(f"point {name}={point!r} is not finite") from None
    x, y = (exact_text(value) for value in xy)
    if not np.all(np.isfinite(xy)):
        raise BadParameter(f"point {name}=({x}, {y}) is not finite")
    high = np.array([raster.width - 1, raster.height - 1], dtype=np.float64)
    if np.any(xy < -POINT_TOLERANCE) or np.any(xy > high + POINT_TOLERANCE):
        raise PointOutsideImage(f"point {name}=({x}, {y}) lies outside the "
                                f"{raster.width}×{raster.height} image")
    return np.clip(xy, 0.0, high)


@lru_cache(maxsize=4)
def _load_evidence(path: str, modified_ns: int, grid=None) -> Raster:
    _check_one_band(path)
    return load_image(path, grid=grid)


#: Side of the decimated read in which :func:`_check_one_band` compares an evidence raster's
#: bands (px).
BAND_CHECK_PX = 256


def _check_one_band(path: str) -> None:
    """Refuse an evidence raster read through GDAL (a GeoTIFF, …) whose bands, alpha aside,
    differ: score "evidence" reads its first band as the road probability, and a map of
    several (a segmentation model's background and road classes) would be traced on the
    wrong one without a word. Grey stored as RGB (equal bands) passes; so do PNGs and JPEGs
    (grey + alpha, or RGB pictures of a mask)."""
    if not path.lower().endswith(WINDOWED_SUFFIXES):
        return
    try:
        import rasterio
        from rasterio.enums import ColorInterp
    except ImportError:  # the reading says what to install
        return
    try:
        with rasterio.open(path) as dataset:
            bands = [number for number, tag in enumerate(dataset.colorinterp, 1)
                     if tag != ColorInterp.alpha]
            if len(bands) < 2:
                return
            shape = (len(bands), min(dataset.height, BAND_CHECK_PX),
                     min(dataset.width, BAND_CHECK_PX))
            sample = dataset.read(bands, out_shape=shape)
    except Exception:  # noqa: BLE001 (rasterio's errors: the reading says what is wrong)
        return
    if all(np.array_equal(sample[0], other) for other in sample[1:]):
        return
    raise BadParameter(f"evidence raster {path} has {len(bands)} bands that differ: score "
                       "'evidence' reads one band as the road probability; save the road "
                       f"band alone, e.g. gdal_translate -b {bands[-1]} {os.path.basename(path)} "
                       "road.tif")


def evidence_source(raster: Raster, params: TraceParams) -> Raster:
    """The raster the score kind reads: ``params.evidence_path`` if set, else ``raster``.

    An evidence raster of the image's size is read as it is, unless both are georeferenced
    (transform and CRS) on different grids; then, and when the sizes differ, it is resampled
    onto the image's grid through both georeferencings (bilinear; 0 where it has no data).
    A PNG, JPEG, … that cannot be resampled is refused from its header, before it is decoded.

    Raises
    ------
    ImageReadError
        If the evidence raster cannot be read (or needs resampling and rasterio is missing).
    BadParameter
        If its size differs from the image's and the two cannot be aligned (either lacks
        georeferencing with a CRS).
    """
    if params.evidence_path is None:
        return raster
    path = os.fspath(params.evidence_path)
    if not os.path.isfile(path):
        raise ImageReadError(f"evidence raster not found: {path}")
    stamp = os.stat(path).st_mtime_ns
    header = _evidence_header(path, stamp)
    if header is not None:
        _check_alignable(path, *header, raster)
    evidence = _load_evidence(path, stamp)
    if (evidence.width, evidence.height) == (raster.width, raster.height) \
            and on_same_grid(evidence.georef, raster.georef):
        return evidence
    _check_alignable(path, (evidence.width, evidence.height), evidence.georef, raster)
    return _load_evidence(path, stamp, (raster.georef, raster.width, raster.height))


@lru_cache(maxsize=4)
def _evidence_header(path: str, modified_ns: int) -> tuple[tuple[int, int], object] | None:
    """The size (width, height) and georeferencing of the evidence raster ``path`` from its
    header and the files beside it, where it is decoded whole (a PNG, JPEG, …) and they can be
    read (else :func:`load_image` says why); None for a (Geo)TIFF, read as needed."""
    if os.path.splitext(path)[1].lower() in WINDOWED_SUFFIXES:
        return None
    try:
        return image_size(path), read_image_georef(path)
    except TraceError:
        return None


def _check_alignable(path: str, size: tuple[int, int], georef, raster: Raster) -> None:
    """Raise :class:`BadParameter` where the evidence raster ``path``, of ``size`` (width,
    height) px placed by ``georef``, cannot serve ``raster``: the sizes differ and either
    lacks georeferencing with a CRS to resample it through."""
    if size == (raster.width, raster.height) or (has_grid(georef) and has_grid(raster.georef)):
        return
    lacking = "the evidence raster" if has_grid(raster.georef) else "the image"
    raise BadParameter(f"evidence raster {path} is {size[0]}×{size[1]} px; the image is "
                       f"{raster.width}×{raster.height} (to resample it onto the image's "
                       f"grid, both need georeferencing with a CRS: {lacking} has none)")


def evidence_folder(path: str | os.PathLike) -> Path:
    """``path`` as a folder of evidence rasters, or :class:`BadParameter` if it is none."""
    if not os.path.isdir(path):
        raise BadParameter(f"evidence folder {path} does not exist or is not a folder")
    return Path(path)


def with_evidence_from(params: TraceParams, evidence_dir: Path | None,
                       image: str) -> TraceParams:
    """``params`` for tracing ``image`` (a file name) on its evidence raster in
    ``evidence_dir`` (unchanged when None): the file of the same name, else the first of the
    same stem with an image suffix, else the same name (missing: the trace fails naming it)."""
    if evidence_dir is None:
        return params
    candidates = [evidence_dir / image] + [evidence_dir / (Path(image).stem + suffix)
                                           for suffix in IMAGE_SUFFIXES]
    found = next((path for path in candidates if path.is_file()), candidates[0])
    return replace(params, evidence_path=str(found))


def border_shift(corridor: Corridor, params: TraceParams) -> np.ndarray:
    """Integer (dx, dy) >= 0 that moves the corridor's evidence window off negative coordinates.

    Returns
    -------
    ndarray of shape (2,), float64
    """
    low = corridor.pixel_bounds[0] - (gradient_margin(evidence_sigma(params)) + 2)
    return np.maximum(-low, 0).astype(np.float64)


def corridor_evidence(raster: Raster, corridor: Corridor, params: TraceParams,
                      shift=(0.0, 0.0), backend: TracerBackend | None = None) -> Evidence:
    """Read the corridor window (with gradient margin) and build the score kind's evidence.

    Parameters
    ----------
    raster : Raster
        The image; its pixels, or those of ``params.evidence_path``, feed the score kind.
    corridor : Corridor
        Guides in a frame where image pixel (col, row) sits at (col, row) + ``shift``.
    params : TraceParams
    shift : (2,) integers >= 0
        Frame offset (see :func:`border_shift`); (0, 0) is the image's own frame.
    backend : TracerBackend, optional
        Computes the score kind's planes (:meth:`TracerBackend.score_planes`; default: CPU).

    Returns
    -------
    Evidence
        In the corridor's frame; with ``shift`` from :func:`border_shift` it covers the whole
        corridor (with (0, 0), samples at negative coordinates still count 0). Where the
        corridor leaves the image, ``SCALAR`` planes are extended with their worst (smallest)
        value and gradient planes with 0, and ``image_size`` is enlarged to match, so a path
        never gains score by leaving the image.
    """
    return corridor_evidence_many(raster, [(corridor, params, shift)], backend)[0]


def corridor_evidence_many(raster: Raster, corridors: list, backend: TracerBackend | None = None
                           ) -> list[Evidence]:
    """:func:`corridor_evidence` of every (corridor, params, shift) of ``corridors``, the
    planes of all of them made by one :meth:`TracerBackend.score_planes_many` call. The params
    may differ in the corridor's size only (score kind, σ, line kind and evidence raster are
    those of the first).
    """
    return _evidence_many(raster, [(corridor, params, _Frame.shifted(shift))
                                   for corridor, params, shift in corridors],
                          backend or CpuBackend(), deferred=False)


def _evidence_many(raster: Raster, corridors: list, backend: TracerBackend,
                   deferred: bool) -> list[Evidence]:
    """:func:`corridor_evidence_many` of (corridor, params, :class:`_Frame`) tuples; with
    ``deferred``, the planes may be left for ``backend`` to fill by the end of its next
    ``trace_many`` (see :meth:`TracerBackend.score_planes_many`): only that call may read
    them."""
    if not corridors:
        return []
    params = corridors[0][1]
    kind = get_score_kind(params.score)
    source = evidence_source(raster, params)
    ground = ground_resolution_of(raster, params)
    stray_share = GRADIENT_BLANK_SHARE if "gradient" in kind.needs else 0.0
    sigma = evidence_sigma(params)
    reads = [_read_corridor(raster, source, corridor, frame, sigma, stray_share)
             for corridor, _, frame in corridors]
    if params.line_kind == "river" and kind.river is not None:
        made = []
        for read in reads:
            planes, tau, surface = kind.river(ScoreInputs(read.pixels, None, None, read.a,
                                                          read.b, ground))
            made.append((pad_planes(np.asarray(planes, dtype=np.float32), read.pad,
                                    kind.sampler), tau,
                         None if surface is None else np.pad(surface, read.pad)))
    else:
        made = [(planes, tau, None) for planes, tau in backend.score_planes_many(
            kind, [(read.pixels, read.a, read.b) for read in reads], sigma, deferred,
            [read.pad for read in reads], ground)]
    return [read.evidence(kind, planes, tau, surface, source is raster)
            for read, (planes, tau, surface) in zip(reads, made, strict=True)]


def reads_ground_resolution(params: TraceParams) -> bool:
    """Whether traces with ``params`` depend on the imagery's ground resolution: road lines
    scored ``surface`` on the image itself (the surface model's resolution follows it)."""
    return (params.score == "surface" and params.line_kind == "road"
            and params.evidence_path is None)


def runs_surface_model(params: TraceParams) -> bool:
    """Whether traces with ``params`` run the learned surface model (their score kind reads
    it)."""
    return "surface model" in get_score_kind(params.traced_score).needs


def ground_resolution_unknown(raster: Raster, params: TraceParams) -> bool:
    """Whether traces on ``raster`` with ``params`` depend on a ground resolution that neither
    the parameters nor the raster's georeferencing give (such imagery is traced as imagery
    finer than ``core.surface.COARSE_GROUND_RESOLUTION``)."""
    return reads_ground_resolution(params) and ground_resolution_of(raster, params) is None


def no_ground_resolution_reason(raster: Raster) -> str:
    """Why the georeferencing of ``raster`` gives no ground resolution, in a few words."""
    if raster.georef is None:
        return "no georeferencing"
    if raster.georef.crs is None:
        return f"{raster.georef.source} without a CRS: its units are unknown"
    return "its georeferencing cannot place the image's centre"


def ground_resolution_of(raster: Raster, params: TraceParams) -> float | None:
    """The imagery's metres per pixel: ``params.ground_resolution`` where given, else the
    raster's (from its georeferencing; None where neither says)."""
    if params.ground_resolution is not None:
        return params.ground_resolution
    if raster.ground_resolution is None:
        return None
    return check_ground_resolution(raster.ground_resolution,
                                   "the image's georeferencing gives a ground resolution of")


@dataclass(frozen=True)
class _CorridorWindow:
    """The pixels a corridor's evidence is made from and where they sit.

    pixels : (rows, cols, bands) float32, the part of the wanted window inside the image;
    a, b : the endpoints in its coordinates; origin : its corner (col, row) in the corridor's
    frame; outside : ((left, right), (top, bottom)) px of the wanted window beyond the image;
    size : the image's (width, height) in the corridor's frame, enlarged to the window.
    """

    pixels: np.ndarray
    a: np.ndarray
    b: np.ndarray
    origin: tuple[int, int]
    outside: tuple
    size: tuple[int, int]

    @property
    def pad(self) -> tuple:
        """((top, bottom), (left, right)): rows and columns of the wanted window beyond the
        image, by which its evidence planes are padded (:func:`core.scores.pad_planes`)."""
        return self.outside[1], self.outside[0]

    def evidence(self, kind, planes, tau: float, surface, of_image: bool) -> Evidence:
        """The :class:`Evidence` of ``planes`` (P, rows', cols') made from these pixels and
        padded by :attr:`pad` (and, in river mode, the water ``surface`` (rows', cols') or
        None); where the pixels are the image's (``of_image``), whether a and b lie on no data
        (more than ``NO_DATA_SHARE`` of their patch reads 0 in every band). For a gradient
        sampler, the window's :func:`core.scores.gradient_floor` (``noise_floor``), and the
        ``SINE`` threshold ``tau`` at least that."""
        floor = 0.0 if kind.sampler == SCALAR else gradient_floor(self.pixels)
        if kind.sampler == SINE:
            tau = max(float(tau), floor)
        on_no_data = tuple(
            of_image and bool(np.all(patch_colours(self.pixels, point, PATCH_RADIUS) == 0,
                                     axis=1).mean() > NO_DATA_SHARE)
            for point in (self.a, self.b))
        return Evidence(np.ascontiguousarray(planes, dtype=np.float32), self.origin, self.size,
                        kind.sampler, tau,
                        None if surface is None else np.asarray(surface, dtype=np.float32),
                        on_no_data, floor)


@dataclass(frozen=True)
class _Frame:
    """The frame a corridor is built and its evidence made in: image point = frame point @
    ``axes`` + ``offset``.

    axes : (2, 2) float64, rows the image directions of the frame's x and y: the identity
        (the image's own frame, shifted off negative coordinates) or u and n of [a, b];
    offset : (2,) float64;
    window : (cols, rows) of a turned frame's window, from its (0, 0); None for a shifted one;
    start : (2,) the frame point of a in a turned frame (None in a shifted one).
    """

    axes: np.ndarray
    offset: np.ndarray
    window: tuple[int, int] | None = None
    start: np.ndarray | None = None

    @classmethod
    def shifted(cls, shift) -> _Frame:
        """The image's own frame moved by ``shift`` (2,) integers >= 0 (:func:`border_shift`)."""
        return cls(np.eye(2), -np.asarray(shift, dtype=np.float64))

    def to_image(self, points: np.ndarray) -> np.ndarray:
        """Frame points (n, 2) as image points (n, 2) float64."""
        if self.window is None:  # a shift: exact
            return points + self.offset
        return points @ self.axes + self.offset


def _turned_frame(raster: Raster, a: np.ndarray, b: np.ndarray,
                  params: TraceParams) -> _Frame | None:
    """The frame turned to [a, b] (x along it, y across) whose window holds the corridor of
    ``params`` (resolved) with the gradient margin, where the trace should use it (module
    docstring), else None."""
    margin = gradient_margin(evidence_sigma(params))
    axis_aligned = window_pixels(b - a, params.halfwidth, margin)
    if axis_aligned <= TURNED_FRAME_PIXELS:
        return None
    margin += 2  # as _read_corridor's
    length = float(np.hypot(*(b - a)))
    across = math.ceil(params.halfwidth) + margin
    window = (math.ceil(length) + 2 * margin + 1, 2 * across + 1)
    if TURNED_FRAME_SAVING * window[0] * window[1] > axis_aligned:
        return None
    along = (b - a) / length
    axes = np.array([along, [-along[1], along[0]]])
    start = np.array([float(margin), float(across)])
    frame = _Frame(axes, a - start @ axes, window, start)
    corners = frame.to_image(np.array([[0.0, 0.0], [window[0] - 1, 0.0], [0.0, window[1] - 1],
                                       [window[0] - 1, window[1] - 1]]))
    if np.any(corners < 0) or np.any(corners > (raster.width - 1, raster.height - 1)):
        return None
    return frame


def _read_turned(source: Raster, frame: _Frame) -> np.ndarray:
    """The turned ``frame``'s window (rows, cols, bands) float32, resampled bilinearly from
    ``source`` in pieces of ``TURNED_PIECE_COLUMNS`` columns, each from the image box of its
    own piece (the window lies inside the image)."""
    from scipy.ndimage import map_coordinates  # here only: scipy is slow to import

    cols, rows = frame.window
    across = np.arange(rows, dtype=np.float64)[:, None]
    pieces = []
    for first in range(0, cols, TURNED_PIECE_COLUMNS):
        along = np.arange(first, min(first + TURNED_PIECE_COLUMNS, cols),
                          dtype=np.float64)[None, :]
        x, y = (frame.offset[axis] + along * frame.axes[0, axis] + across * frame.axes[1, axis]
                for axis in (0, 1))
        col0, row0 = int(np.floor(x.min())), int(np.floor(y.min()))
        box = _read_finite(source, row0, int(np.floor(y.max())) + 2,
                           col0, int(np.floor(x.max())) + 2)
        points = np.stack([y - row0, x - col0])
        pieces.append(np.stack([map_coordinates(box[:, :, band], points, order=1,
                                                mode="nearest", output=np.float32)
                                for band in range(box.shape[2])], axis=2))
    return np.concatenate(pieces, axis=1)


def _read_finite(source: Raster, row0: int, row1: int, col0: int, col1: int) -> np.ndarray:
    """:meth:`Raster.read_window` of ``source`` with NaN and ±inf read as 0 (no data), as
    files are read (:func:`core.raster.finite_float32`: an in-memory raster may hold them)."""
    return finite_float32(source.read_window(row0, row1, col0, col1), source.path or "image")


def _read_corridor(raster: Raster, source: Raster, corridor: Corridor, frame: _Frame,
                   sigma: float, stray_share: float = 0.0) -> _CorridorWindow:
    """The window of ``source`` (``raster`` or its evidence raster) around ``corridor`` with
    the gradient margin of σ (see :func:`corridor_evidence`), in ``frame``; refused as blank
    where all but ``stray_share`` of its values read one value (:func:`_check_not_blank`)."""
    if frame.window is not None:
        pixels = _read_turned(source, frame)
        _check_not_blank(pixels, source is not raster, stray_share)
        return _CorridorWindow(pixels, corridor.a, corridor.b, (0, 0), ((0, 0), (0, 0)),
                               frame.window)
    sx, sy = (int(value) for value in -frame.offset)
    low, high = corridor.pixel_bounds
    margin = gradient_margin(sigma) + 2  # also covers the patches around a and b
    want0 = low - margin - (sx, sy)  # image frame
    want1 = high + margin + 1 - (sx, sy)
    col0, row0 = max(want0[0], 0), max(want0[1], 0)
    col1, row1 = min(want1[0], raster.width), min(want1[1], raster.height)
    pixels = _read_finite(source, row0, row1, col0, col1)
    _check_not_blank(pixels, source is not raster, stray_share)
    origin = np.array([col0, row0], dtype=np.float64)
    outside = ((col0 - min(want0[0], col0), max(want1[0], col1) - col1),
               (row0 - min(want0[1], row0), max(want1[1], row1) - row1))
    size = (max(raster.width, want1[0]) + sx, max(raster.height, want1[1]) + sy)
    return _CorridorWindow(pixels, corridor.a - (sx, sy) - origin, corridor.b - (sx, sy) - origin,
                           (col0 - outside[0][0] + sx, row0 - outside[1][0] + sy), outside, size)


def _check_not_blank(pixels: np.ndarray, evidence_raster: bool, stray_share: float) -> None:
    """Raise :class:`BadParameter` if all but at most ``stray_share`` of the values of the
    window ``pixels`` (rows, cols, bands) are the same (from the evidence raster where
    ``evidence_raster``, else the image)."""
    if not pixels.size:
        return
    if stray_share:  # the value most read: the median of a sample, where nearly all read it
        rows, cols = pixels.shape[:2]
        common = np.median(pixels[::max(rows // 32, 1), ::max(cols // 32, 1)])
    else:
        common = pixels.flat[0]
    stray = int(np.count_nonzero(pixels != common))
    if stray > stray_share * pixels.size:
        return
    but = f" but for {stray} of its {pixels.size} values" if stray else ""
    raise BadParameter(f"{'the evidence raster' if evidence_raster else 'the image'} "
                       f"holds nothing to trace between a and b: every pixel there reads "
                       f"{float(common):g}{but} (a blank area, or no data or NaN in the file)")


def trace(raster: Raster, a, b, params: TraceParams | None = None,
          backend: TracerBackend | None = None) -> TraceResult:
    """Optimal polyline from a to b on ``raster``. With the default half-width, an optimum that
    touches the corridor's edge is traced again in a corridor ``CORRIDOR_GROWTH`` times wider,
    with the first attempt's number of points per guide (``timings_ms["retrace"]`` then holds
    the first attempt's total).

    Raises
    ------
    PointOutsideImage, BadParameter, NoAdmissiblePath
    """
    result = trace_many(raster, [(a, b)], params, backend)[0]
    if isinstance(result, TraceError):
        raise result
    return result


def trace_many(raster: Raster, pairs: list, params: TraceParams | None = None,
               backend: TracerBackend | None = None) -> list[TraceResult | TraceError]:
    """:func:`trace` of every endpoint pair (a, b) of ``pairs`` on ``raster``, the evidence of
    all of them made together (:func:`corridor_evidence_many`: on the GPU, each kernel launched
    once for all), then each traced.

    Returns
    -------
    list
        Per pair, its :class:`TraceResult`, or the :class:`~core.errors.TraceError` that
        :func:`trace` would raise for it (an error while making the evidence, or in
        ``params``, is every pair's). A re-trace in a wider corridor that fails keeps the
        first optimum (with a note saying why, unless the wider corridor had no admissible
        path).
    """
    params = params or TraceParams()
    backend = backend or CpuBackend()
    try:
        params.check()
    except TraceError as exc:
        return [exc] * len(pairs)
    results = _trace_many_once(raster, pairs, [params] * len(pairs), backend)
    again = [k for k, result in enumerate(results)
             if isinstance(result, TraceResult) and params.halfwidth is None
             and result.params.halfwidth < MAX_HALFWIDTH
             and _touches_edge(result.indices, result.params.points)]
    wider = [replace(params, halfwidth=min(CORRIDOR_GROWTH * results[k].params.halfwidth,
                                           MAX_HALFWIDTH), points=results[k].params.points)
             for k in again]
    widened = _trace_many_once(raster, [pairs[k] for k in again], wider, backend)
    for k, result, each in zip(again, widened, wider, strict=True):
        if isinstance(result, NoAdmissiblePath):  # other points, other turns: keep the first
            continue
        if isinstance(result, TraceError):  # refused (memory, say): the first still holds
            results[k] = replace(results[k], notes=results[k].notes + (
                f"the line touches its corridor's edge, but was not traced again in a wider "
                f"one (halfwidth {each.halfwidth:g} px): {result}",))
            continue
        result.timings_ms["retrace"] = results[k].timings_ms["total"]
        result.timings_ms["total"] += results[k].timings_ms["total"]
        results[k] = result
    return results


def trace_through(raster: Raster, points: list, params: TraceParams | None = None,
                  backend: TracerBackend | None = None,
                  names: list[str] | None = None) -> list[TraceResult]:
    """The optimal line through ``points`` (k ≥ 2 of (x, y), in order): every consecutive pair
    traced as by :func:`trace` (:func:`trace_many`: their evidence made together).

    Returns
    -------
    list of TraceResult
        Per leg (k − 1), in order; :func:`join_legs` makes one polyline of them.

    Raises
    ------
    TraceError
        Fewer than 2 points, or ``names`` not one per point (BadParameter); a point outside
        the image (named by ``names``, default "point 1", "point 2", …), else the first
        failing leg's error; with more than one leg its message is prefixed with the leg's
        ends.
    """
    if len(points) < 2:
        raise BadParameter(f"a line needs at least 2 points, got {len(points)}")
    names = names or [f"point {k + 1}" for k in range(len(points))]
    if len(names) != len(points):
        raise BadParameter(f"{len(names)} names for {len(points)} points")
    checked = [check_point(raster, point, name)
               for point, name in zip(points, names, strict=True)]
    if len(points) > 2:  # one leg's ends are a and b: trace_many words it
        for k, (start, end) in enumerate(zip(checked[:-1], checked[1:], strict=True)):
            apart = float(np.hypot(*(end - start)))
            if apart < MIN_ENDPOINT_DISTANCE:
                raise BadParameter(
                    f"{names[k]} → {names[k + 1]}: endpoints {names[k]}="
                    f"({start[0]:g}, {start[1]:g}) and {names[k + 1]}=({end[0]:g}, {end[1]:g}) "
                    + ("are the same point" if apart == 0 else
                       f"are {apart:.3g} px apart")
                    + f"; the ends of a leg must be at least {MIN_ENDPOINT_DISTANCE:g} px apart")
    results = trace_many(raster, list(zip(points[:-1], points[1:], strict=True)), params, backend)
    for k, result in enumerate(results):
        if isinstance(result, TraceError):
            if len(results) == 1:
                raise result
            raise type(result)(f"{names[k]} → {names[k + 1]}: {result}") from result
    return results


def join_legs(results: list[TraceResult]) -> tuple[np.ndarray, np.ndarray]:
    """One line of legs traced one after another (each starting where the last ends).

    Returns
    -------
    polyline : ndarray of shape (N, 2), float64
        The legs' polylines joined, their shared ends once.
    anchors : ndarray of shape (len(results) + 1, 2), float64
        Where the legs start and end.
    """
    anchors = np.vstack([results[0].polyline[:1]] + [r.polyline[-1:] for r in results])
    return join_polylines([result.polyline for result in results]), anchors


def join_polylines(polylines: list[np.ndarray]) -> np.ndarray:
    """Polylines (each (n_i, 2)) that follow one another, each starting where the last ends,
    as one (N, 2) float64 polyline with their shared ends once."""
    return np.vstack([polylines[0], *(line[1:] for line in polylines[1:])]).astype(
        np.float64, copy=False)


def _touches_edge(indices: np.ndarray, points: int) -> bool:
    """Whether any chosen guide point (indices (m,) in 0..points-1) is a corridor edge point."""
    return bool(np.any(indices == 0) or np.any(indices == points - 1))


@dataclass(frozen=True)
class _Segment:
    """One pair's checked request and geometry: endpoints a, b (2,), the resolved params, the
    corridor (in ``frame``: the image's, moved off negative coordinates, or turned to [a, b]),
    θ (rad) and the time (ms) this took. Its admissible windows are made while the evidence is
    computed (:func:`_solve_chunk`)."""

    a: np.ndarray
    b: np.ndarray
    params: TraceParams
    corridor: Corridor
    frame: _Frame
    max_angle_rad: float
    geometry_ms: float


def _trace_many_once(raster: Raster, pairs: list, params: list[TraceParams],
                     backend: TracerBackend) -> list[TraceResult | TraceError]:
    """:func:`trace_many` in the corridors ``params`` give (one per pair; they may differ in
    the corridor's size only), without the re-trace."""
    results: list = [None] * len(pairs)
    if pairs:
        try:  # the pairs share the evidence raster: checked (and read) once
            evidence_source(raster, params[0])
        except TraceError as exc:
            return [exc] * len(pairs)
    chunks: list[list] = [[]]
    pixels = 0
    for k, ((a, b), each) in enumerate(zip(pairs, params, strict=True)):
        try:
            segment = _segment(raster, a, b, each)
        except TraceError as exc:
            results[k] = exc
            continue
        low, high = segment.corridor.pixel_bounds
        area = int(np.prod(high - low + 1))
        if chunks[-1] and (pixels + area > BATCH_PIXELS or len(chunks[-1]) >= BATCH_SEGMENTS):
            chunks.append([])
            pixels = 0
        chunks[-1].append((k, segment))
        pixels += area
    for chunk in chunks:
        _solve_chunk(raster, chunk, backend, results)
    return results


def _evidence_or_error(raster: Raster, segment: _Segment, backend: TracerBackend
                       ) -> Evidence | TraceError:
    """The evidence of one segment's corridor, or the TraceError that stops it."""
    try:
        return _evidence_many(raster, [(segment.corridor, segment.params, segment.frame)],
                              backend, deferred=False)[0]
    except TraceError as exc:
        return exc


def _solve_chunk(raster: Raster, segments: list, backend: TracerBackend, results: list) -> None:
    """The evidence of every (k, segment) of ``segments`` made together, then each traced
    into ``results[k]`` (its TraceResult or TraceError)."""
    if not segments:
        return
    start = time.perf_counter()
    try:
        # Deferred: the device computes the planes while the host prepares the traces.
        evidences = _evidence_many(
            raster, [(segment.corridor, segment.params, segment.frame)
                     for _, segment in segments], backend, deferred=True)
    except TraceError as exc:  # one corridor's, as a rule: the others made one by one
        evidences = [exc] if len(segments) == 1 else \
            [_evidence_or_error(raster, segment, backend) for _, segment in segments]
    evidence_ms = 1e3 * (time.perf_counter() - start) / max(len(segments), 1)
    start = time.perf_counter()
    ready = []
    for (k, segment), evidence in zip(segments, evidences, strict=True):
        if isinstance(evidence, TraceError):
            results[k] = evidence
        else:
            ready.append((k, segment, evidence,
                          admissible_windows(segment.corridor, segment.max_angle_rad)))
    windows_ms = 1e3 * (time.perf_counter() - start) / max(len(ready), 1)
    start = time.perf_counter()
    try:
        solutions = backend.trace_many([(evidence, segment.corridor, windows)
                                        for _, segment, evidence, windows in ready])
    except TraceError as exc:
        solutions = [exc] * len(ready)
    solve_ms = 1e3 * (time.perf_counter() - start) / max(len(ready), 1)
    for (k, segment, evidence, _), solution in zip(ready, solutions, strict=True):
        if isinstance(solution, TraceError):
            results[k] = solution
        elif _meets_no_edge(segment, evidence, solution):
            results[k] = _no_edge_error(segment)
        else:
            results[k] = _finish(segment, evidence, solution,
                                 (windows_ms, evidence_ms, solve_ms), backend.name)


def _meets_no_edge(segment: _Segment, evidence: Evidence, solution) -> bool:
    """Whether the optimum ``solution`` (a BackendSolution) of a score kind whose terms are
    gradient evidence alone (``uses_gradient`` with a ``CROSS`` or ``SINE`` sampler: every
    term >= 0, no length cost) meets no edge: its mean term per px is at most the window's
    noise floor (``evidence.noise_floor``: ``CROSS``'s term is at most |∇I|), or, for
    ``SINE`` (whose threshold is at least that floor), it scores 0. The optimum is the best
    line, so no line in the corridor meets an edge: the links tie, up to rounding noise, and
    the tie-break (the corridor's edge, a re-trace wider still) would choose the line."""
    kind = get_score_kind(segment.params.traced_score)
    if not kind.uses_gradient or kind.sampler == SCALAR:
        return False
    limit = 0.0
    if kind.sampler != SINE:
        line = segment.corridor.polyline(solution.indices)
        limit = evidence.noise_floor * float(np.hypot(*np.diff(line, axis=0).T).sum())
    return not solution.score > limit


def _no_edge_error(segment: _Segment) -> BadParameter:
    """The refusal of a trace that :func:`_meets_no_edge` (no re-trace in a wider corridor
    follows it)."""
    params = segment.params
    source = "the image" if params.evidence_path is None else "the evidence raster"
    return BadParameter(f"{source} holds no edge to trace between a and b: score "
                        f"'{params.score}' follows the gradient, and no line in the corridor "
                        f"meets any (a uniform area); score 'surface' (the default) follows "
                        f"the surface under a and b")


def _segment(raster: Raster, a, b, params: TraceParams) -> _Segment:
    """Check one request (``params`` checked by :meth:`TraceParams.check`) and build its
    corridor (raises a TraceError)."""
    start = time.perf_counter()
    a = check_point(raster, a, "a")
    b = check_point(raster, b, "b")
    if params.halfwidth is not None and params.halfwidth > np.hypot(raster.width,
                                                                    raster.height):
        raise BadParameter(f"halfwidth {params.halfwidth:g} px is more than the image's "
                           f"diagonal ({np.hypot(raster.width, raster.height):.0f} px)")
    length = float(np.hypot(*(b - a)))
    if length < MIN_ENDPOINT_DISTANCE:
        raise BadParameter(f"endpoints a=({a[0]:g}, {a[1]:g}) and b=({b[0]:g}, {b[1]:g}) "
                           f"must be at least {MIN_ENDPOINT_DISTANCE:g} px apart")
    resolved = resolve_for_length(params, length)
    frame = _turned_frame(raster, a, b, resolved)
    sigma = evidence_sigma(resolved)
    margin = gradient_margin(sigma)
    window_px = window_pixels(b - a, resolved.halfwidth, margin) if frame is None \
        else float(frame.window[0] * frame.window[1])
    window_bytes = trace_window_memory(resolved, window_px, ground_resolution_of(raster, resolved))
    check_trace_plan(params, replace(resolved, sigma=sigma), margin, (window_px, window_bytes))
    params = resolved
    if frame is not None:
        corridor = build_corridor(frame.start, frame.start + (length, 0.0), params.guides,
                                  params.points, params.halfwidth)
    else:
        corridor = build_corridor(a, b, params.guides, params.points, params.halfwidth)
        shift = border_shift(corridor, params)
        frame = _Frame.shifted(shift)
        if np.any(shift):
            corridor = build_corridor(a + shift, b + shift, params.guides, params.points,
                                      params.halfwidth)
    return _Segment(a, b, params, corridor, frame, check_max_angle(params.max_angle),
                    1e3 * (time.perf_counter() - start))


def _finish(segment: _Segment, evidence: Evidence, solution, shares: tuple,
            backend: str) -> TraceResult:
    """One segment's result from ``backend``'s ``solution`` (a BackendSolution) on its
    ``evidence``; ``shares``: its share (ms) of the time the chunk's admissible windows, its
    evidence and its solving took."""
    start = time.perf_counter()
    windows_ms, evidence_ms, solve_ms = shares
    geometry_ms = segment.geometry_ms + windows_ms
    timings = {"geometry": geometry_ms, "evidence": evidence_ms, **solution.timings_ms}
    polyline = segment.corridor.polyline(solution.indices)
    if evidence.surface is not None:  # river mode
        polyline = centre_on_surface(polyline, evidence.surface, np.asarray(evidence.origin),
                                     segment.max_angle_rad)
        timings["centring"] = 1e3 * (time.perf_counter() - start)
    timings["total"] = (geometry_ms + evidence_ms + solve_ms
                        + 1e3 * (time.perf_counter() - start))
    polyline = segment.frame.to_image(polyline)
    polyline[0], polyline[-1] = segment.a, segment.b  # exact, whatever the frame rounded
    notes = tuple(f"the point ({x:g}, {y:g}) lies on no data: most pixels around it read 0 in "
                  "every band (no data or NaN in the file)"
                  for (x, y), on_no_data in zip((segment.a, segment.b), evidence.on_no_data,
                                                strict=True) if on_no_data)
    return TraceResult(polyline, solution.indices, solution.score, solution.link_scores,
                       segment.params, backend, timings, notes)
