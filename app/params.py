"""The tracing parameters the application accepts (Qt-free).

The parameter panel builds its fields from :data:`PARAM_RANGES`, and parameters read from a
session go through :func:`params_from_dict`, which accepts exactly what the panel can show:
what a session holds is what the panel shows and what the tracer gets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from core.errors import BadParameter
from core.gradient import MIN_SIGMA
from core.output import is_unicode_text, shown_items, shown_value
from core.scores import SCORE_KINDS
from core.tracer import GROUND_RESOLUTION_RANGE, LINE_KINDS, POINT_SPACING, TraceParams

#: Backends offered in the panel (``gpu.select.BACKEND_CHOICES`` without the slow reference).
PANEL_BACKENDS = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class ParamRange:
    """The values a numeric parameter may take: ``low`` to ``high`` with at most ``decimals``
    digits after the point (0: whole numbers); with ``auto``, also None (scale with the click
    distance; 0 in the panel). ``traced_high`` bounds the value a trace resolved it to from
    the panel's settings (default ``high``)."""

    low: float
    high: float
    decimals: int = 0
    auto: bool = False
    traced_high: float | None = None

    def upper(self, rounded: bool = True) -> float:
        """The largest value: the panel's, or (not ``rounded``) what a trace may resolve."""
        return self.high if rounded or self.traced_high is None else self.traced_high

    def describe(self, rounded: bool = True) -> str:
        kind = "a whole number" if self.decimals == 0 else "a number"
        text = f"{kind} in [{self.low:g}, {self.upper(rounded):g}]"
        if self.decimals and rounded:
            text += f" with at most {self.decimals} decimal(s)"
        return text + (" or null (auto)" if self.auto else "")


_MAX_HALFWIDTH = 1000.0

PARAM_RANGES = {
    "guides": ParamRange(1, 200, auto=True),
    # Automatic points per guide follow the half-width (core.tracer.TraceParams.resolve).
    "points": ParamRange(1, 1001, auto=True,
                         traced_high=2 * round(_MAX_HALFWIDTH / POINT_SPACING) + 1),
    "halfwidth": ParamRange(0.1, _MAX_HALFWIDTH, decimals=1, auto=True),
    "max_angle": ParamRange(1.0, 180.0, decimals=1),
    "sigma": ParamRange(MIN_SIGMA, 20.0, decimals=2),
    # The imagery's metres per pixel where its georeferencing does not say (null: unknown).
    "ground_resolution": ParamRange(*GROUND_RESOLUTION_RANGE, decimals=3, auto=True),
}


def _check_number(value: object, limits: ParamRange, where: str,
                  rounded: bool) -> float | int | None:
    if value is None and limits.auto:
        return None
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    checks_decimals = rounded or limits.decimals == 0
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
