"""Link scores: pluggable per-pixel evidence integrated along every guide-to-guide link.

A *score kind* is one small function that turns an image window into evidence planes
(:class:`Evidence`); the link score is the line integral of a per-sample *term* of those
planes along the link (core/links.py integrates it; every backend follows the same rule).
Three *samplers* turn planes into terms (the GPU implements the same three):

* ``SCALAR``: term = plane 0 (any direction-free evidence: colour, flatness, user rasters);
* ``CROSS``: term = |g × v| = |∇I|·|sin φ| from planes (gx, gy) and link direction v;
* ``SINE``:  term = |sin φ| where |∇I| > τ, else 0 (the paper read literally).

The rounding noise of a uniform area's gradient (|∇I| ~ 1e-17 of the value range) is no edge:
the tracer makes ``SINE``'s τ at least the window's :func:`gradient_floor`, and refuses a
gradient kind's optimum whose mean term per px is at most it (``Evidence.noise_floor``).

Kinds: ``surface`` (default: centre of the surface under a and b, colour match refined by a
learned model, core/surface.py), ``centre`` (the colour match alone), ``colour``, ``flat``,
``cross``, ``sine`` and ``evidence`` (a user's probability raster; see core/tracer.py). The
choice of default and its constants were measured on real roads and rivers
(docs/ACCURACY.md). A new kind registers with :func:`register_score_kind`; the DP never
changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.errors import BadParameter
from core.gradient import gaussian_blur
from core.offset import offset_ridge
from core.resources import BYTES_PER_WINDOW_PX
from core.surface import STRETCH_SPAN_ABSOLUTE, model_memory, surface_model

SCALAR, CROSS, SINE = 0, 1, 2


@dataclass(frozen=True)
class Evidence:
    """Evidence planes over a window of the image.

    Attributes
    ----------
    planes : ndarray of shape (P, rows, cols), float32
    origin : tuple (col0, row0)
        Image pixel at the window's [0, 0].
    image_size : tuple (width, height)
        Size of the whole image; samples outside it contribute 0.
    sampler : int
        SCALAR, CROSS or SINE.
    tau : float
        Gradient-magnitude threshold of the SINE sampler (the tracer makes it at least
        ``noise_floor``).
    surface : ndarray of shape (rows, cols), float32, or None
        The clicked surface's membership (:attr:`ScoreKind.river`), in river mode.
    on_no_data : (bool, bool)
        Whether a and b lie on no data in the image (core.tracer.NO_DATA_SHARE).
    noise_floor : float
        For the gradient samplers (CROSS, SINE), the window's :func:`gradient_floor`: gradient
        magnitudes at most this are rounding noise, no edge; 0 for SCALAR.
    """

    planes: np.ndarray
    origin: tuple[int, int]
    image_size: tuple[int, int]
    sampler: int
    tau: float = 0.0
    surface: np.ndarray | None = None
    on_no_data: tuple[bool, bool] = (False, False)
    noise_floor: float = 0.0


def pad_planes(planes: np.ndarray, pad, sampler: int) -> np.ndarray:
    """``planes`` (P, rows, cols) with ``pad`` ((top, bottom), (left, right)) rows and columns
    added around them, filled with their smallest value for ``SCALAR`` planes (worse than
    anything inside) and with 0 for gradient planes: a corridor's evidence where its window
    leaves the image, so that a path gains nothing by leaving it. Unpadded planes come back as
    they are (the same array)."""
    if not any(pad[0]) and not any(pad[1]):
        return planes
    fill = float(planes.min()) if sampler == SCALAR else 0.0
    return np.pad(planes, ((0, 0), *pad), constant_values=fill)


def pad_each(made: list, pads: list | None, sampler: int) -> list:
    """``made``, a list of ``(planes (P, rows, cols), tau)``, with each window's planes padded
    by its entry of ``pads`` (:func:`pad_planes`; None: as they are)."""
    if pads is None:
        return made
    return [(pad_planes(planes, pad, sampler), tau)
            for (planes, tau), pad in zip(made, pads, strict=True)]


@dataclass(frozen=True)
class ScoreInputs:
    """What a score kind may look at (all in window coordinates).

    pixels : (rows, cols, bands) float32; gx, gy : (rows, cols) float32, or None for kinds
    registered with ``uses_gradient=False``; a, b : (2,) endpoints (x, y) relative to the
    window origin; ground_resolution : the imagery's metres per pixel, or None where not known
    (core.surface.model_steps).
    """

    pixels: np.ndarray
    gx: np.ndarray | None
    gy: np.ndarray | None
    a: np.ndarray
    b: np.ndarray
    ground_resolution: float | None = None


@dataclass(frozen=True)
class ScoreKind:
    """A named way of scoring links: ``planes(inputs) -> (planes (P, rows, cols), tau)``.

    ``uses_gradient=False`` lets the tracer skip computing gx, gy (they arrive as None).
    ``needs`` names what ``planes`` reads (of "pixels", "gradient", "endpoints", "surface
    model") and ``produces`` says, in one line, which planes it makes from them: a device
    implementation of the kind (gpu/kinds.py) names the ``produces`` it computes, so a kind whose
    planes change must change ``produces``, and the device then uses these host planes until
    it is updated.
    Kinds that follow the centre of a surface also have ``river(inputs) -> (planes, tau,
    surface)``: the kind as the tracer's river mode runs it, with ``surface`` (rows, cols) in
    [0, 1], how likely each pixel lies on the clicked surface, which the traced line is then
    centred on (core/centring.py).
    ``bytes_per_px``: peak bytes per window pixel of making the planes and scoring links on
    them on the CPU, the surface model's run aside (:func:`window_memory`).
    """

    name: str
    summary: str
    sampler: int
    planes: Callable[[ScoreInputs], tuple[np.ndarray, float]]
    uses_gradient: bool = True
    river: Callable[[ScoreInputs], tuple[np.ndarray, float, np.ndarray]] | None = None
    needs: tuple[str, ...] = ("pixels",)
    produces: str = ""
    bytes_per_px: float = BYTES_PER_WINDOW_PX


def window_memory(kind: ScoreKind, window_px: float, river: bool,
                  ground_resolution: float | None) -> float:
    """Estimated peak bytes of ``kind``'s evidence over a window of ``window_px`` pixels and of
    the link scores on it (CPU backend): ``kind.bytes_per_px`` per pixel, and the surface
    model's run (:func:`core.surface.model_memory`; at half resolution for a ``river`` line)
    where the kind reads it."""
    total = kind.bytes_per_px * window_px
    if "surface model" in kind.needs:
        total += model_memory(window_px, river and kind.river is not None, ground_resolution)
    return total


SCORE_KINDS: dict[str, ScoreKind] = {}


def register_score_kind(kind: ScoreKind) -> ScoreKind:
    """Add a kind to the registry (the CLI and GUI list what is registered)."""
    SCORE_KINDS[kind.name] = kind
    return kind


def get_score_kind(name: str) -> ScoreKind:
    """The registered kind called ``name``.

    Raises
    ------
    BadParameter
        If no kind of that name is registered (the message lists those that are).
    """
    try:
        return SCORE_KINDS[name]
    except (KeyError, TypeError):  # TypeError: a name that is no string (unhashable)
        raise BadParameter(f"unknown score kind {name!r}; choose from "
                           f"{', '.join(sorted(SCORE_KINDS))}") from None


def _gradient_planes(inputs: ScoreInputs) -> np.ndarray:
    return np.stack([inputs.gx, inputs.gy]).astype(np.float32)


def _magnitude(inputs: ScoreInputs) -> np.ndarray:
    return np.hypot(inputs.gx, inputs.gy)


def patch_colours(pixels: np.ndarray, point: np.ndarray, radius: int = 2) -> np.ndarray:
    """Pixels of the (2r+1)² patch around a point (x, y), shape (n, bands); the patch is cut
    at the window's edges."""
    col, row = int(round(point[0])), int(round(point[1]))
    patch = pixels[max(row - radius, 0):row + radius + 1, max(col - radius, 0):col + radius + 1]
    return patch.reshape(-1, pixels.shape[2])


def _cross_planes(inputs):
    return _gradient_planes(inputs), 0.0


def _sine_planes(inputs):
    return _gradient_planes(inputs), float(np.median(_magnitude(inputs)))


#: Smallest spread or gradient scale the kinds divide by, as a fraction of the window's
#: value range: imagery of any range (1e-7 reflectances or 16-bit counts) scores alike.
RELATIVE_FLOOR = 1e-6
#: ... and at least this (a float32 holds 1 / s² above it; a blank window's range is 0): the
#: floor of the surface model's stretch too (core.surface.STRETCH_SPAN_ABSOLUTE, one value).
ABSOLUTE_FLOOR = STRETCH_SPAN_ABSOLUTE


def value_floor(value_range: float) -> float:
    """The floor of a spread or gradient scale in a window whose largest minus smallest value
    is ``value_range``: :data:`RELATIVE_FLOOR` × ``value_range``, at least
    :data:`ABSOLUTE_FLOOR`."""
    return max(RELATIVE_FLOOR * value_range, ABSOLUTE_FLOOR)


def gradient_floor(pixels: np.ndarray) -> float:
    """The gradient magnitude at and below which a gradient is rounding noise, no edge, in a
    window of ``pixels`` (rows, cols, bands): :func:`value_floor` of its value range (a uniform
    area's gradient is ~1e-17 of the range; an edge's, ~0.1 of its step)."""
    return value_floor(float(np.ptp(pixels))) if pixels.size else ABSOLUTE_FLOOR


def _flat_planes(inputs):
    magnitude = _magnitude(inputs)
    g0 = 3.0 * float(np.median(magnitude)) + value_floor(float(np.ptp(inputs.pixels)))
    return (-(magnitude / (g0 + magnitude) + 0.05))[None].astype(np.float32), 0.0


#: Scale (px) of the blur that turns the flat colour-match band into a ridge on its centreline.
COLOUR_CENTRING_SIGMA = 1.5


def _colour_planes(inputs):
    """Similarity to the median colour under a and b (robust to patches overlapping the
    verge), blurred so that the middle of a uniform road or river scores highest."""
    samples = np.vstack([patch_colours(inputs.pixels, inputs.a),
                         patch_colours(inputs.pixels, inputs.b)])
    centre = np.median(samples, axis=0)
    bands = samples.shape[1]
    deviation = np.sqrt(bands) * 1.4826 * float(np.median(np.abs(samples - centre), axis=0).mean())
    value_range = float(np.ptp(inputs.pixels))
    spread = max(deviation, 0.04 * value_range + value_floor(value_range))
    distance2 = ((inputs.pixels - centre) ** 2).sum(axis=2)
    term = -(1.0 - np.exp(-distance2 / (2.0 * spread * spread)) + 0.05)
    term = gaussian_blur(term, COLOUR_CENTRING_SIGMA)
    return term[None].astype(np.float32), 0.0


#: ``centre`` kind: colour patches of (2r+1)² px around a and b.
PATCH_RADIUS = 2
#: ``centre`` kind: colour spread floor, as a fraction of the window's value range.
SPREAD_FLOOR = 0.04
#: ``centre`` kind: centring blur σ as a fraction of the band width measured at a and b.
CENTRE_BLUR = 0.25
#: ``centre`` kind: how far (px) the band width is measured to either side of a and b.
WIDTH_REACH = 60
#: ``centre`` kind: cost per px even on the band's centre (prefers the shorter of equal paths).
LENGTH_COST = 0.5
#: ``surface`` kind: weight of the centre ridge beside the clicked-offset ridge (road lines).
CENTRE_WEIGHT = 0.85
#: ``surface`` kind: model probability under the clicks at and above which its map is trusted.
MODEL_TRUST = 0.2


def endpoint_similarity(pixels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much each pixel looks like the surface under a or under b.

    Each endpoint gets its own colour model: the mean c and spread s (mean per-band standard
    deviation, at least (``SPREAD_FLOOR`` + ``RELATIVE_FLOOR``) × the window's value range) of
    its patch; a pixel's similarity is the larger of exp(−‖x − c‖² / 2s²) over the two models.

    Parameters
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    a, b : ndarrays of shape (2,)
        Endpoints (x, y) in window coordinates.

    Returns
    -------
    ndarray of shape (rows, cols), float32, values in [0, 1]
    """
    value_range = float(np.ptp(pixels))
    floor = SPREAD_FLOOR * value_range + value_floor(value_range)
    best = np.zeros(pixels.shape[:2], dtype=np.float32)
    for point in (a, b):
        patch = patch_colours(pixels, point, PATCH_RADIUS)
        spread = max(float(patch.std(axis=0).mean()), floor)
        distance2 = np.zeros_like(best)
        for band, mean in enumerate(patch.mean(axis=0)):
            difference = pixels[:, :, band] - np.float32(mean)
            distance2 += difference * difference
        distance2 *= np.float32(-0.5 / (spread * spread))
        np.maximum(best, np.exp(distance2), out=best)
    return best


def _run_length(mask: np.ndarray, point: np.ndarray, step: np.ndarray) -> float:
    """Distance (px) from ``point`` along unit ``step`` to the first pixel outside ``mask``."""
    rows, cols = mask.shape
    for distance in range(1, WIDTH_REACH + 1):
        col, row = (int(round(value)) for value in point + distance * step)
        if not (0 <= col < cols and 0 <= row < rows) or not mask[row, col]:
            return distance - 0.5
    return float(WIDTH_REACH)


def band_width(mask: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Width (px) of the band ``mask`` (rows, cols) across [a, b], the median at a and at b."""
    unit = (b - a) / np.hypot(*(b - a))
    normal = np.array([-unit[1], unit[0]])
    return float(np.median([_run_length(mask, point, normal) + _run_length(mask, point, -normal)
                            for point in (a, b)]))


def _ridge_term(ridge: np.ndarray):
    """Planes of the term −(1 − ridge + LENGTH_COST) of a (rows, cols) plane in [0, 1] that is
    1 along the wanted line."""
    return -(1.0 - ridge + LENGTH_COST)[None].astype(np.float32), 0.0


def _centred_term(membership: np.ndarray, a: np.ndarray, b: np.ndarray):
    """Planes of the term −(1 − G_σ * membership + LENGTH_COST), σ = CENTRE_BLUR × the band
    width of membership > 0.5 across a and b (≥ 1 px); membership (rows, cols) in [0, 1].

    The blur turns the flat plateau of a band into a ridge along its centre, so the optimum
    runs down the middle of a road or river instead of along either side.
    """
    mask = surface_mask(membership)
    return _ridge_term(_centre_ridge(membership, band_width(mask, a, b)))


def surface_mask(membership: np.ndarray) -> np.ndarray:
    """The surface: membership (rows, cols) > ½ after a σ = 1 px blur; bool (rows, cols)."""
    return gaussian_blur(membership, 1.0, "symmetric") > 0.5


def _centre_ridge(membership: np.ndarray, width: float) -> np.ndarray:
    """G_σ * membership, σ = CENTRE_BLUR × ``width`` (≥ 1 px): a ridge along the centre of
    each band of the (rows, cols) membership."""
    sigma = max(CENTRE_BLUR * width, 1.0)
    return gaussian_blur(membership, sigma, "symmetric", truncate=3.0)


def _offset_term(membership: np.ndarray, a: np.ndarray, b: np.ndarray,
                 path: np.ndarray | None = None):
    """Planes of the term −(1 − max(O, CENTRE_WEIGHT · C, P) + LENGTH_COST): O the ridge along
    the clicked offset across the surface (:func:`core.offset.offset_ridge`), C the centre
    ridge of :func:`_centred_term`, P the model's path (rows, cols) (0 where None). Where the
    surface's cross-section is clear, the line keeps the clicks' place on it; elsewhere (a
    junction, trees over the road, a weak membership) the centre ridge guides it, and the
    path wherever the model sees the clicked road's course.
    """
    mask = surface_mask(membership)
    width = band_width(mask, a, b)
    ridge = np.maximum(offset_ridge(membership, mask, a, b, width),
                       CENTRE_WEIGHT * _centre_ridge(membership, width))
    return _ridge_term(ridge if path is None else np.maximum(ridge, path))


def _centre_river(inputs):
    """:func:`_centre_planes`, and the colour similarity s as the surface."""
    similarity = endpoint_similarity(inputs.pixels, inputs.a, inputs.b)
    return (*_centred_term(similarity, inputs.a, inputs.b), similarity)


def _centre_planes(inputs):
    """Centre of the band whose colour matches a or b (:func:`_centred_term` of the
    similarity)."""
    return _centre_river(inputs)[:2]


def _surface_terms(inputs, half_resolution: bool):
    """The clicked line on the clicked surface: :func:`_offset_term` of √(p' · s) and the
    model's path (with ``half_resolution``, for water: :func:`_centred_term` of √(p' · s)), s
    the endpoint colour similarity, p the learned surface model's probability
    (core/surface.py) and p' = t·p + (1 − t)·s with trust t = min(1, mean p under the endpoint
    patches / MODEL_TRUST); returns (planes, tau, p').

    The clicks lie on the surface by definition: where the model does not see it there (an
    image unlike its training data), its map is not trusted and the colour match decides.
    """
    similarity = endpoint_similarity(inputs.pixels, inputs.a, inputs.b)
    probability, path = surface_model(inputs.pixels, similarity, inputs.a, inputs.b,
                                      half_resolution=half_resolution,
                                      ground_resolution=inputs.ground_resolution)
    at_clicks = np.vstack([patch_colours(probability[:, :, None], point, PATCH_RADIUS)
                           for point in (inputs.a, inputs.b)])
    trust = min(1.0, float(at_clicks.mean()) / MODEL_TRUST)
    surface = trust * probability + (1.0 - trust) * similarity
    membership = np.sqrt(surface * similarity)
    if half_resolution:
        return (*_centred_term(membership, inputs.a, inputs.b), surface)
    return (*_offset_term(membership, inputs.a, inputs.b, path), surface)


def _surface_planes(inputs):
    return _surface_terms(inputs, half_resolution=False)[:2]


def _surface_river(inputs):
    """:func:`_surface_terms` with the model at half resolution on every window (water: its
    context matters more than detail), and p' as the surface."""
    return _surface_terms(inputs, half_resolution=True)


def _evidence_river(inputs):
    """:func:`_evidence_planes`, and the probability p itself as the surface."""
    return (*_evidence_planes(inputs), inputs.pixels[:, :, 0])


#: The largest probability near a line below which an evidence raster says nothing: one step
#: of an 8-bit raster (a 0/1 mask stored in 8 or 16 bits, or percent in 16 bits, reads so).
FAINT_EVIDENCE = 1.0 / 255.0 + 1e-6


def _evidence_planes(inputs):
    """Term −(1 − p + LENGTH_COST) of a probability raster p (band 0, values in [0, 1]).

    Raises
    ------
    BadParameter
        If the window holds values outside [0, 1] or NaN: a float raster of 0..255 values,
        logits or no-data would make some links pay for length (8/16-bit rasters are scaled
        to [0, 1] when read).
    """
    probability = inputs.pixels[:, :, 0]
    low, high = float(probability.min()), float(probability.max())
    if not (-1e-6 <= low and high <= 1.0 + 1e-6):  # also false for NaN
        raise BadParameter(f"score 'evidence' reads band 0 as a probability in [0, 1]; this "
                           f"part of the raster holds values from {low:g} to {high:g} (8/16-bit "
                           "rasters are scaled to [0, 1] when read: rescale a float raster, "
                           "fill its no-data)")
    if 0.0 < high <= FAINT_EVIDENCE:
        raise BadParameter(f"score 'evidence' reads band 0 as a probability in [0, 1]; this "
                           f"part of the raster holds values of at most {high:.2g}, which "
                           "trace a straight line: an 8/16-bit raster is read over its type's "
                           "whole range, so a 0/1 mask reads 1/255 (save it as 0/255 or as "
                           "float 0/1) and percent 100/65535 (rescale it to [0, 1])")
    return _ridge_term(probability)


#: What the ``centre`` and ``surface`` kinds' planes are made of (ScoreKind.produces).
_CENTRED = ("1 plane: -(1 - G_w * m + LENGTH_COST), G_w a Gaussian of σ = CENTRE_BLUR × the width "
            "of m > 0.5 across a and b (≥ 1 px, truncate 3), m = ")

register_score_kind(ScoreKind(
    "surface", "follows the road or water surface under a and b at the clicks' place across "
    "it (colour match refined by the learned surface model)", SCALAR, _surface_planes,
    uses_gradient=False, river=_surface_river,
    needs=("pixels", "endpoints", "surface model"),
    produces="1 plane: -(1 - max(O, CENTRE_WEIGHT · G_w * m, P) + LENGTH_COST), O = offset_ridge "
    "of m (OPEN_WIDTH, OFFSET_TOLERANCE), G_w a Gaussian of σ = CENTRE_BLUR × the width of "
    "m > 0.5 across a and b (≥ 1 px, truncate 3), m = √(p'·s), s = endpoint_similarity, "
    "p' = t·p + (1 − t)·s, (p, P) = surface_model (surface, path), t = min(1, mean p in the "
    "endpoint patches / MODEL_TRUST)", bytes_per_px=100))
register_score_kind(ScoreKind(
    "centre", "follows the centre of the band whose colour matches a or b (roads, rivers)",
    SCALAR, _centre_planes, uses_gradient=False, river=_centre_river,
    needs=("pixels", "endpoints"), produces=_CENTRED + "endpoint_similarity", bytes_per_px=95))
register_score_kind(ScoreKind(
    "evidence", "a probability raster's band 0 (0 = none .. 1 = certain), e.g. a model's "
    "road map: cost 1 - p", SCALAR,
    _evidence_planes, uses_gradient=False, river=_evidence_river,
    produces="1 plane: -(1 - p + LENGTH_COST), p = band 0 checked to lie in [0, 1]"))
register_score_kind(ScoreKind(
    "colour", "prefers pixels of the colour found under a and b (road/river surface)",
    SCALAR, _colour_planes, uses_gradient=False, needs=("pixels", "endpoints"),
    produces="1 plane: G_1.5 * -(1 - exp(-d² / 2s²) + 0.05), d the distance to the median "
    "colour of the endpoint patches", bytes_per_px=85))
register_score_kind(ScoreKind(
    "cross", "gradient magnitude across the link, |∇I × v| (edge following)", CROSS, _cross_planes,
    needs=("gradient",), produces="2 planes: gx, gy; tau 0", bytes_per_px=170))
register_score_kind(ScoreKind(
    "sine", "the paper's |sin φ| between gradient and link where |∇I| > median", SINE,
    _sine_planes, needs=("gradient",), produces="2 planes: gx, gy; tau = median |∇I|",
    bytes_per_px=170))
register_score_kind(ScoreKind(
    "flat", "prefers low gradient (homogeneous surface)", SCALAR, _flat_planes,
    needs=("gradient",), produces="1 plane: -(|∇I| / (g0 + |∇I|) + 0.05), g0 = 3·median |∇I|",
    bytes_per_px=100))


def trace_window_memory(params, window_px: float, ground_resolution: float | None) -> float:
    """:func:`window_memory` of a trace with ``params`` (a resolved
    :class:`core.tracer.TraceParams`: its score kind; the model at half resolution for a river
    line) over a window of ``window_px`` pixels of imagery of ``ground_resolution`` metres per
    pixel (None: unknown).

    Raises
    ------
    BadParameter
        If ``params.score`` names no registered kind.
    """
    return window_memory(get_score_kind(params.score), window_px, params.line_kind == "river",
                         ground_resolution)
