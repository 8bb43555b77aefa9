"""The tracing parameters the application accepts (Qt-free).

The parameter panel builds its fields from :data:`PARAM_RANGES`, and parameters read from a
session go through :func:`params_from_dict`, which accepts exactly what the panel can show:
what a session holds is what the panel shows and what the tracer gets. Both accept only what
the tracer accepts (:func:`core.tracer.check_params`). An image whose georeferencing gives a
ground resolution is traced with its own (:func:`traced_params`); a trace too large to be of
use is refused before it starts (:func:`check_trace_size`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from core.errors import BadParameter
from core.gradient import MIN_SIGMA
from core.output import is_unicode_text, shown_items, shown_value
from core.raster import Raster
from core.scores import SCORE_KINDS
from core.tracer import (
    GROUND_RESOLUTION_RANGE,
    LINE_KINDS,
    POINT_SPACING,
    TraceParams,
    check_params,
    ground_resolution_of,
    resolve_for_length,
)

#: Backends offered in the panel (``gpu.select.BACKEND_CHOICES`` without the slow reference).
PANEL_BACKENDS = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class ParamRange:
    """The values a numeric parameter may take: ``low`` to ``high`` with at most ``decimals``
    digits after the point (0: whole numbers); with ``auto``, also None (scale with the click
    distance; 0 in the panel). ``traced_high`` bounds the value a trace resolved it to from
    the panel's settings (default ``high``). With ``any_precision``, ``decimals`` is only the
    panel's (an image's own ground resolution is kept as its georeferencing gives it)."""

    low: float
    high: float
    decimals: int = 0
    auto: bool = False
    traced_high: float | None = None
    any_precision: bool = False

    def upper(self, rounded: bool = True) -> float:
        """The largest value: the panel's, or (not ``rounded``) what a trace may resolve."""
        return self.high if rounded or self.traced_high is None else self.traced_high

    def describe(self, rounded: bool = True) -> str:
        kind = "a whole number" if self.decimals == 0 else "a number"
        text = f"{kind} in [{self.low:g}, {self.upper(rounded):g}]"
        if self.decimals and rounded and not self.any_precision:
            text += f" with at most {self.decimals} decimal(s)"
        return text + (" or null (auto)" if self.auto else "")


def _least_accepted(name: str, values) -> float:
    """The first of ``values`` that the tracer accepts for the parameter ``name``, the others
    automatic (:func:`core.tracer.check_params`)."""
    for value in values:
        try:
            check_params(TraceParams(**{name: value}))
        except BadParameter:
            continue
        return value
    raise ValueError(f"the tracer accepts none of the values tried for {name}")


_MAX_HALFWIDTH = 1000.0
#: The fewest points per guide a trace accepts (2: a guide of one point leaves no choice).
_LEAST_POINTS = _least_accepted("points", range(1, 10))
#: The narrowest half-width (px, one decimal) that automatic points per guide accept: they
#: follow the half-width (:meth:`core.tracer.TraceParams.resolve`), and a narrower one gives a
#: guide a single point.
AUTO_POINTS_HALFWIDTH = _least_accepted("halfwidth", [tenths / 10 for tenths in range(1, 100)])

PARAM_RANGES = {
    "guides": ParamRange(1, 200, auto=True),
    # Automatic points per guide follow the half-width (core.tracer.TraceParams.resolve).
    "points": ParamRange(_LEAST_POINTS, 1001, auto=True,
                         traced_high=2 * round(_MAX_HALFWIDTH / POINT_SPACING) + 1),
    # At least AUTO_POINTS_HALFWIDTH where the points per guide are automatic.
    "halfwidth": ParamRange(0.1, _MAX_HALFWIDTH, decimals=1, auto=True),
    "max_angle": ParamRange(1.0, 180.0, decimals=1),
    "sigma": ParamRange(MIN_SIGMA, 20.0, decimals=2),
    # The imagery's metres per pixel where its georeferencing does not say (null: unknown);
    # where it does, the image's own, as precise as it gives it (traced_params).
    "ground_resolution": ParamRange(*GROUND_RESOLUTION_RANGE, decimals=3, auto=True,
                                    any_precision=True),
}

#: Most link samples a trace may take (:func:`check_trace_size`): its links, every point of a
#: guide to every point of the next, are scored at about one sample per px of their length. On
#: a 2-core CPU (numba) 5e9 samples take 13–23 s (score ``surface`` to ``cross``, measured), and
#: the engine cannot be stopped midway; the automatic parameters stay under 1e9 (40 guides of
#: 321 points at the widest automatic half-width, 240 px).
MAX_LINK_SAMPLES = 5e9


def _check_number(value: object, limits: ParamRange, where: str,
                  rounded: bool) -> float | int | None:
    if value is None and limits.auto:
        return None
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    checks_decimals = (rounded and not limits.any_precision) or limits.decimals == 0
    if not is_number or not limits.low <= value <= limits.upper(rounded) \
            or (checks_decimals and round(value, limits.decimals) != value):
        raise BadParameter(f"{where} must be {limits.describe(rounded)}, got "
                           f"{shown_value(value)}")
    return float(value) if limits.decimals else int(value)


def _check_choice(value: object, choices, where: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise BadParameter(f"{where} must be one of {', '.join(choices)}, got "
                           f"{shown_value(value)}")
    return value


def params_from_dict(data: object, where: str = "params", rounded: bool = True) -> TraceParams:
    """Tracing parameters from a JSON object, checked as the panel would accept them.

    Parameters
    ----------
    data : object
        The decoded JSON value: a dict of :class:`core.tracer.TraceParams` fields (missing
        ones take their defaults).
    where : str
        The field's name in the document, used in the error message ("params",
        "lines[0].segments[1].request").
    rounded : bool
        Whether numbers must have the panel's precision and range (False for the resolved
        parameters a trace used: an automatic half-width is any number in range, and automatic
        points per guide may exceed what the panel offers, up to ``traced_high``).

    Raises
    ------
    BadParameter
        Naming the first bad field (``params.max_angle must be a number in [1, 180], got 500``).
    """
    if not isinstance(data, dict):
        raise BadParameter(f"{where} must be an object, got {type(data).__name__}")
    unknown = set(data) - {f.name for f in fields(TraceParams)}
    if unknown:
        raise BadParameter(f"{where} has unknown tracing parameters "
                           f"{shown_items(sorted(unknown))}")
    values = {name: _check_number(data[name], limits, f"{where}.{name}", rounded)
              for name, limits in PARAM_RANGES.items() if name in data}
    halfwidth = values.get("halfwidth")
    if values.get("points") is None and halfwidth is not None \
            and halfwidth < AUTO_POINTS_HALFWIDTH:
        raise BadParameter(f"{where}.halfwidth must be at least {AUTO_POINTS_HALFWIDTH:g} px "
                           f"where points per guide is auto (null), got {halfwidth:g}: "
                           "a narrower corridor gives a guide a single point")
    if "score" in data:
        values["score"] = _check_choice(data["score"], tuple(SCORE_KINDS), f"{where}.score")
    if "line_kind" in data:
        values["line_kind"] = _check_choice(data["line_kind"], LINE_KINDS, f"{where}.line_kind")
    path = data.get("evidence_path")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise BadParameter(f"{where}.evidence_path must be a file path or null, got "
                               f"{shown_value(path)}")
        if not is_unicode_text(path):
            raise BadParameter(f"{where}.evidence_path must be valid Unicode text (no lone "
                               f"surrogate), got {shown_value(path)}")
        values["evidence_path"] = path
    return TraceParams(**values)


def check_backend(value: object, where: str = "backend") -> str:
    """``value`` if the panel offers it as a backend, else :class:`BadParameter`."""
    return _check_choice(value, PANEL_BACKENDS, where)


def reads_image_as_evidence(params: TraceParams) -> bool:
    """Whether ``params`` score the image's own band 0 as a road probability: score
    "evidence" with no evidence raster."""
    return params.score == "evidence" and params.evidence_path is None


def image_ground_resolution(raster: Raster) -> float | None:
    """The metres per pixel that the georeferencing of ``raster`` gives, where a trace accepts
    it; None where it gives none, or one beyond any imagery (the user's then applies)."""
    try:
        return ground_resolution_of(raster, TraceParams())
    except BadParameter:
        return None


def traced_params(params: TraceParams, raster: Raster) -> TraceParams:
    """``params`` as a trace on ``raster`` takes them: with the image's own ground resolution
    where its georeferencing gives one (the panel's is for images whose georeferencing does
    not say)."""
    ground = image_ground_resolution(raster)
    return params if ground is None else replace(params, ground_resolution=ground)


def check_trace_size(a, b, params: TraceParams, backend_name: str = "cpu") -> None:
    """Refuse a trace from ``a`` to ``b`` with ``params`` that would take more than
    :data:`MAX_LINK_SAMPLES` link samples on a CPU backend (``backend_name`` "gpu": any size;
    a GPU scores links many times faster).

    The estimate takes the parameters as the engine does
    (:func:`core.tracer.resolve_for_length`): (guides − 1) × points² links between guides,
    each about √(s² + (⅔ half-width)²) px long, s the distance between guides.

    Raises
    ------
    BadParameter
        Naming the parameter to lower (those given, not automatic).
    """
    length = math.dist(a, b)
    if length < 2 or backend_name == "gpu":
        return  # the tracer refuses the first; a GPU traces the second in seconds
    resolved = resolve_for_length(params, length)
    guides, points = resolved.guides, resolved.points
    links = (guides - 1) * points * points + 2 * points
    mean_px = math.hypot(length / (guides + 1), 2 * resolved.halfwidth / 3)
    samples = links * max(2.0, mean_px)
    if samples <= MAX_LINK_SAMPLES:
        return
    culprits = ["points per guide" if params.points is not None else
                "half-width (it sets the points per guide)" if params.halfwidth is not None
                else "", "guides" if params.guides is not None else ""]
    culprit = " or ".join(filter(None, culprits)) or "half-width or points per guide"
    raise BadParameter(f"trace too large: {guides} guides × {points} points per guide make "
                       f"{links:.2g} links of about {mean_px:.0f} px to score ({samples:.2g} "
                       f"samples, over the limit of {MAX_LINK_SAMPLES:.2g}: beyond 20 s of work "
                       f"that cannot be stopped midway); lower {culprit}")
