"""Resource plan of a trace: refuse, before any work, a trace that would not fit in memory.

A trace holds the link scores and the DP's argmax tables of every stage, (m + 1)·d² values
for m guides of d points, and the evidence planes of its corridor window (the corridor's box
grown by the gradient margin, ~4σ, on every side; the tracer passes the bytes its score kind
needs over the window it reads, :func:`core.scores.window_memory`). :func:`check_trace_plan`
estimates both and raises :class:`core.errors.BadParameter` naming the parameter to lower when
their sum exceeds the memory budget: ``ROADTRACER_MEMORY_BUDGET`` (bytes, or with a K, M, G
or T suffix, binary) when set, else :data:`AVAILABLE_FRACTION` of the memory available now
(plans up to :data:`ALWAYS_AFFORDABLE` pass it unasked). It runs inside
:func:`core.tracer.trace`, so the command line, batch workers and the app refuse alike.
:func:`check_decode_memory` holds images decoded whole (PNG, JPEG, …) to the same budget,
from their header, before :func:`core.raster.load_image` decodes them.
"""

from __future__ import annotations

import math
import os
import re
from functools import lru_cache

from core.errors import BadParameter

#: Environment variable holding the memory budget of one trace.
BUDGET_VARIABLE = "ROADTRACER_MEMORY_BUDGET"
#: Share of the available memory one trace may plan to use when no budget is set.
AVAILABLE_FRACTION = 0.5
#: Bytes per DP state: a float64 link score and an int32 argmax entry, plus working copies.
BYTES_PER_STATE = 16
#: Bytes per pixel of the corridor window where the caller names no score kind's own figure
#: (``ScoreKind.bytes_per_px``): the largest of the kinds without the surface model.
BYTES_PER_WINDOW_PX = 170
#: Peak memory of decoding an image whole, per byte of its float32 planes (one per value of
#: the header, alpha included): the decoder's and numpy's copies come on top (measured on
#: 4000 × 4000 images: 1.27 8-bit RGB PNG or JPEG, 1.30 8-bit grey, 1.55 16-bit grey).
DECODE_FACTOR = 1.6
#: Share of the memory available now that decoding an image may take where no budget is set
#: (a trace's own budget, :data:`AVAILABLE_FRACTION`, leaves room for the decoded image).
DECODE_AVAILABLE_FRACTION = 0.9
#: Plans up to this size pass the default budget without asking how much memory is available.
ALWAYS_AFFORDABLE = 256 * 2**20
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@lru_cache(maxsize=8)
def parse_size(text: str, what: str = BUDGET_VARIABLE) -> int:
    """Bytes of a size written ``123``, ``512M``, ``2G``, ``1.5T`` (K/M/G/T: binary units,
    an optional trailing ``B`` or ``iB``).

    Raises
    ------
    BadParameter
        Naming ``what`` when ``text`` is not such a size, or is not positive.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(?:i?B)?\s*", str(text),
                         re.IGNORECASE)
    size = float(match[1]) * _UNITS[match[2].upper()] if match else 0.0
    if not math.isfinite(size) or size < 1:
        raise BadParameter(f"{what} must be a size in bytes such as 4G or 512M, got {text!r}")
    return int(size)


def available_memory() -> int | None:
    """Bytes of memory available to new allocations now (Linux ``MemAvailable``, else free
    physical pages), None where the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_budget(share: float = AVAILABLE_FRACTION) -> tuple[int | None, str]:
    """The budget of one trace in bytes (None: no limit known) and where it comes from:
    ``ROADTRACER_MEMORY_BUDGET`` when set, else ``share`` of the memory available now."""
    setting = os.environ.get(BUDGET_VARIABLE)
    if setting:
        return parse_size(setting), f"{BUDGET_VARIABLE}={setting}"
    available = available_memory()
    if available is None:
        return None, "no limit"
    return int(share * available), \
        f"{share:.0%} of the {format_size(available)} available; set " \
        f"{BUDGET_VARIABLE} to change it"


def format_size(size: float) -> str:
    """``size`` bytes in binary units, e.g. ``74.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.3g} PiB"


def window_pixels(chord, halfwidth: float, margin: int) -> float:
    """Pixels of the axis-aligned window around a corridor: its box (the chord (2,) = b − a,
    the half-width across it on each side) grown by ``margin`` + 2 px on every side."""
    dx, dy = abs(float(chord[0])), abs(float(chord[1]))
    length = math.hypot(dx, dy)
    return ((dx + 2.0 * halfwidth * dy / length + 2 * margin + 4)
            * (dy + 2.0 * halfwidth * dx / length + 2 * margin + 4))


def check_trace_plan(requested, resolved, chord, margin: int,
                     window: tuple[float, float] | None = None) -> None:
    """Refuse a trace whose estimated memory exceeds the budget (module docstring).

    Parameters
    ----------
    requested : TraceParams
        The parameters as given (``None``: scaled with the click distance).
    resolved : TraceParams
        The same with every default filled in for the click distance |b - a|.
    chord : array_like of shape (2,)
        b - a (px).
    margin : int
        Gradient margin of the window on each side (px).
    window : (pixels, bytes), optional
        The window the trace reads and the bytes its evidence and link scores need; default
        :func:`window_pixels` at ``BYTES_PER_WINDOW_PX`` each.

    Raises
    ------
    BadParameter
        Naming the parameter to change: a corridor too narrow for two points per guide,
        or a plan over the budget.
    """
    if requested.points is None and resolved.points < 2:
        raise BadParameter(f"halfwidth {resolved.halfwidth:g} px is too narrow: a guide needs "
                           "two points, so give --points or a halfwidth of at least 0.75 px")
    if window is None:
        window_px = window_pixels(chord, resolved.halfwidth, margin)
        window = (window_px, float(BYTES_PER_WINDOW_PX) * window_px)
    window_px, window_bytes = window
    search = float(BYTES_PER_STATE) * (resolved.guides + 1) * float(resolved.points) ** 2
    if search + window_bytes <= ALWAYS_AFFORDABLE and not os.environ.get(BUDGET_VARIABLE):
        return  # the common case, without asking the system (a live preview traces often)
    budget, source = memory_budget()
    if budget is None or search + window_bytes <= budget:
        return
    if search >= window_bytes:
        given = [name for name in ("points", "guides") if getattr(requested, name) is not None]
        culprit = " or ".join(given) if given else "halfwidth (it sets the points per guide)"
        what = (f"{resolved.guides} guides × {resolved.points} points per guide need "
                f"{format_size(search)} for the path search")
    else:
        culprit = "sigma" if margin > resolved.halfwidth else "halfwidth"
        what = (f"a corridor window of {window_px:.3g} px (halfwidth {resolved.halfwidth:g}, "
                f"sigma {resolved.sigma:g}, score {resolved.score}) needs "
                f"{format_size(window_bytes)}")
    advice = f"lower {culprit}"
    if culprit == "halfwidth" and requested.halfwidth is None:  # the click distance sets it
        advice = ("trace it in shorter legs (click a point in between; --via X,Y on the command "
                  f"line) or {advice}")
    raise BadParameter(f"{what} ({format_size(search + window_bytes)} in all), over the memory "
                       f"budget of {format_size(budget)} ({source}): {advice}")


def check_decode_memory(path: str, width: int, height: int, values_per_pixel: int) -> None:
    """Refuse, before decoding, an image whose decoding would exceed the memory budget.

    Parameters
    ----------
    path : str
        The image, named in the message.
    width, height : int
        Its size (px), from its header.
    values_per_pixel : int
        Bands (alpha included) times frames, from its header.

    Raises
    ------
    BadParameter
        Naming the memory needed and the budget, when the first exceeds the second.
    """
    needed = DECODE_FACTOR * 4.0 * width * height * values_per_pixel
    if needed <= ALWAYS_AFFORDABLE and not os.environ.get(BUDGET_VARIABLE):
        return
    # The image is the whole of what is decoded: all that is available, near enough.
    budget, source = memory_budget(DECODE_AVAILABLE_FRACTION)
    if budget is None or needed <= budget:
        return
    raise BadParameter(f"{path}: decoding its {width}×{height} px needs about "
                       f"{format_size(needed)}, over the {format_size(budget)} it may use "
                       f"({source}): convert it to a tiled GeoTIFF (read window by window), "
                       "or free memory, or give a larger --memory-budget")
