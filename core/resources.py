"""Resource plan of a trace: refuse, before any work, a trace that would not fit in memory.

A trace holds the link scores and the DP's argmax tables of every stage, (m + 1)·d² values
for m guides of d points, and the evidence planes of its corridor window (the corridor's box
grown by the gradient margin, ~4σ, on every side; the tracer passes the bytes its score kind
needs over the window it reads, :func:`core.scores.window_memory`). :func:`check_trace_plan`
estimates both and raises :class:`core.errors.BadParameter` naming the parameter to lower when
their sum exceeds the memory budget: ``ROADTRACER_MEMORY_BUDGET`` (bytes, or with a K, M, G
or T suffix, binary) when set, else :data:`AVAILABLE_FRACTION` of the memory available now
(Linux's ``MemAvailable``, or the room a control group's limit leaves where that is less: a
container's; plans up to :data:`ALWAYS_AFFORDABLE` pass it unasked). The processes of a batch
that trace at once (its local workers and the process that runs them) each plan with their
part of it (:func:`share_memory`). It runs inside
:func:`core.tracer.trace`, so the command line, batch workers and the app refuse alike.
:func:`check_decode_memory` holds images decoded whole (PNG, JPEG, …) to the same budget,
from their header, before :func:`core.raster.load_image` decodes them. Both raise
:class:`OverMemoryBudget`.
"""

from __future__ import annotations

import math
import os
import re
from functools import lru_cache
from pathlib import Path

from core.errors import BadParameter

#: Environment variable holding the memory budget of one trace.
BUDGET_VARIABLE = "ROADTRACER_MEMORY_BUDGET"
#: Environment variable naming the command-line option that set ``BUDGET_VARIABLE``, with the
#: value given (``--memory-budget=4G``: :func:`set_memory_budget`), for messages to name it.
BUDGET_OPTION_VARIABLE = "ROADTRACER_MEMORY_BUDGET_OPTION"
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
#: Peak memory of decoding an image whole that is kept in its decoded type (a PNG, JPEG, …
#: too large to read whole: ``core.raster.keeps_decoded``), per byte of its decoded values:
#: Pillow's own image (RGB at 4 bytes a pixel), the bytes it hands numpy and numpy's array
#: (measured on a 16000² px 8-bit RGB PNG: 3.2).
KEPT_DECODE_FACTOR = 3.3
#: Share of the memory available now that decoding an image may take where no budget is set
#: (a trace's own budget, :data:`AVAILABLE_FRACTION`, leaves room for the decoded image).
DECODE_AVAILABLE_FRACTION = 0.9
#: Plans up to this size pass the default budget without asking how much memory is available.
ALWAYS_AFFORDABLE = 256 * 2**20
#: How a trace too long for the memory budget is split into shorter legs, as its message
#: advises by default (:meth:`OverMemoryBudget.advising`): in the app and with ``trace``.
CLICK_LEGS = "click a point in between; --via X,Y on the command line"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
#: Where Linux says how much memory is available, which control groups this process is in,
#: and where their files are.
MEMINFO = "/proc/meminfo"
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
#: Per cgroup version (the controllers of a line of ``PROC_CGROUP``: none for v2), the folder
#: of its memory hierarchy under ``CGROUP_ROOT``, its limit and usage files, and the key of
#: ``memory.stat`` counting the file cache the kernel can drop.
CGROUP_MEMORY = {"": ("", "memory.max", "memory.current", "inactive_file"),
                 "memory": ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                            "total_inactive_file")}
#: A cgroup v1 limit this large or larger is none (v1 writes none as 2**63 - 4096).
NO_CGROUP_LIMIT = 2**62
#: (processes sharing the memory budget, memory available as they started): :func:`share_memory`.
_sharing: tuple[int, int | None] = (1, None)


class OverMemoryBudget(BadParameter):
    """A trace or an image's decoding planned to need more memory than the budget: a rerun
    with more memory available, a larger budget or fewer processes sharing it may pass.

    Parameters
    ----------
    plan : str
        What needs how much memory, over which budget; made from one message (as
        ``type(exc)(message)`` does), the error is that message.
    advice : str
        What to change.
    shorter_legs : bool
        Whether tracing in shorter legs helps too (the segment's length sets the half-width).
    """

    def __init__(self, plan: str, advice: str = "", shorter_legs: bool = False):
        super().__init__(plan, advice, shorter_legs)

    def advising(self, legs: str) -> str:
        """The message, ``legs`` saying how to trace in shorter legs where that helps."""
        plan, advice, shorter_legs = self.args
        if shorter_legs:
            advice = f"trace it in shorter legs ({legs}) or {advice}"
        return f"{plan}: {advice}" if advice else plan

    def __str__(self) -> str:
        return self.advising(CLICK_LEGS)


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


def set_memory_budget(size: str, option: str) -> None:
    """Make ``size`` (e.g. ``4G``) the budget of every trace of this process and of the
    processes it starts, as given by the command-line ``option``, which messages then name.

    Raises
    ------
    BadParameter
        Naming ``option`` when ``size`` is not a size (:func:`parse_size`).
    """
    parse_size(size, option)
    os.environ[BUDGET_VARIABLE] = size
    os.environ[BUDGET_OPTION_VARIABLE] = f"{option}={size}"


def _budget_setting(setting: str) -> str:
    """Where the budget ``setting`` of ``BUDGET_VARIABLE`` comes from, for a message: the
    option that set it (:func:`set_memory_budget`), else the variable; ``--memory-budget=1K``
    or ``ROADTRACER_MEMORY_BUDGET=1K``."""
    given = os.environ.get(BUDGET_OPTION_VARIABLE, "")
    return given if given.partition("=")[2] == setting else f"{BUDGET_VARIABLE}={setting}"


def available_memory() -> int | None:
    """Bytes of memory available to new allocations now: Linux's ``MemAvailable`` (Windows and
    macOS: psutil's ``available``; else free physical pages), or less where this process's
    control group has less room (:func:`cgroup_room`); None where the system does not say."""
    found = [room for room in (_meminfo_available(), cgroup_room()) if room is not None]
    return min(found, default=None)


def _meminfo_available() -> int | None:
    """Linux's ``MemAvailable`` in bytes, else psutil's ``available`` (Windows, macOS), else
    the free physical pages; None if unknown."""
    try:
        with open(MEMINFO, encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError, AttributeError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_room() -> int | None:
    """Bytes the memory limits of this process's control group and of those above it still
    leave (a container's limit): the least of limit − usage, the file cache the kernel can
    drop not counted as used; cgroup v2 or v1's memory controller. None where none is set."""
    try:
        with open(PROC_CGROUP, encoding="utf-8") as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        version = "memory" if "memory" in controllers.split(",") else controllers
        if version in CGROUP_MEMORY:
            rooms += _cgroup_rooms(path, *CGROUP_MEMORY[version])
    return min(rooms, default=None)


def _cgroup_rooms(path: str, hierarchy: str, limit_file: str, usage_file: str,
                  cache_key: str) -> list[int]:
    """limit − usage + dropped cache of cgroup ``path`` of ``hierarchy`` and of each cgroup
    above it that sets a limit (from the hierarchy's root where ``path`` is not there: a
    container sees its own cgroup as the root)."""
    root = Path(CGROUP_ROOT, hierarchy)
    folder = root / path.lstrip("/")
    levels = [folder, *folder.parents] if folder.is_dir() else [root]
    rooms = []
    for level in levels[:levels.index(root) + 1]:
        try:
            limit = (level / limit_file).read_text().strip()
            if limit != "max" and int(limit) < NO_CGROUP_LIMIT:
                cache = [int(line.split()[1]) for line in
                         (level / "memory.stat").read_text().splitlines()
                         if line.split()[:1] == [cache_key]]
                rooms.append(int(limit) - int((level / usage_file).read_text()) + sum(cache))
        except (OSError, ValueError, IndexError):
            pass  # no limit at this level, or one the kernel does not say
    return rooms


def memory_budget(share: float = AVAILABLE_FRACTION) -> tuple[int | None, str]:
    """The budget of one trace in bytes (None: no limit known) and where it comes from:
    ``ROADTRACER_MEMORY_BUDGET`` when set (named as the option that set it, if one did:
    :func:`set_memory_budget`), else ``share`` of the memory available now; in one of the
    processes that share memory (:func:`share_memory`), its part of either."""
    processes, available_then = _sharing
    setting = os.environ.get(BUDGET_VARIABLE)
    if setting:
        shared = f" shared by {processes} processes" if processes > 1 else ""
        return parse_size(setting) // processes, f"{_budget_setting(setting)}{shared}"
    known = [size for size in (available_memory(),
                               None if available_then is None else available_then // processes)
             if size is not None]
    if not known:
        return None, "no limit"
    available = min(known)
    each = f" to each of {processes} processes" if processes > 1 else ""
    return int(share * available), \
        f"{share:.0%} of the {format_size(available)} available{each}; set " \
        f"{BUDGET_VARIABLE} to change it"


def share_memory(processes: int, available: int | None) -> tuple[int, int | None]:
    """Make this process plan with its part of the memory budget from now on: it is one of
    ``processes`` that decode and trace at once (a batch's local workers and the process that
    runs them), each with 1/``processes`` of ``ROADTRACER_MEMORY_BUDGET``, else of the memory
    ``available`` as they started (of what is available now where that is less).

    Returns
    -------
    (processes, available)
        The setting it replaces, to restore (``(1, None)``: a process alone).
    """
    global _sharing
    previous, _sharing = _sharing, (processes, available)
    return previous


def _checked(needed: float) -> bool:
    """Whether a plan of ``needed`` bytes is held to the budget: plans that, in every process
    sharing the budget at once (:func:`share_memory`), need at most :data:`ALWAYS_AFFORDABLE`
    together pass the default budget unasked (a live preview, a batch's short segments: the
    memory available is not read for each)."""
    return needed * _sharing[0] > ALWAYS_AFFORDABLE or bool(os.environ.get(BUDGET_VARIABLE))


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


def check_trace_plan(requested, resolved, margin: int, window: tuple[float, float]) -> None:
    """Refuse a trace whose estimated memory exceeds the budget (module docstring).

    Parameters
    ----------
    requested : TraceParams
        The parameters as given (``None``: scaled with the click distance).
    resolved : TraceParams
        The same with every default filled in for the click distance |b - a|.
    margin : int
        Gradient margin of the window on each side (px).
    window : (pixels, bytes)
        The window the trace reads (:func:`window_pixels`) and the bytes its evidence and
        link scores need there.

    Raises
    ------
    BadParameter
        Naming the parameter to change: a corridor too narrow for two points per guide, or
        (:class:`OverMemoryBudget`) a plan over the budget.
    """
    if requested.points is None and resolved.points < 2:
        raise BadParameter(f"halfwidth {resolved.halfwidth:g} px is too narrow: a guide needs "
                           "two points, so give --points or a halfwidth wider than 0.75 px")
    window_px, window_bytes = window
    # Products, not powers: beyond a float's range they are infinite (refused), not errors.
    search = float(BYTES_PER_STATE) * (resolved.guides + 1) * float(resolved.points) \
        * float(resolved.points)
    if not _checked(search + window_bytes):
        return
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
    raise OverMemoryBudget(f"{what} ({format_size(search + window_bytes)} in all), over the "
                           f"memory budget of {format_size(budget)} ({source})",
                           f"lower {culprit}",
                           # the click distance sets the halfwidth
                           culprit == "halfwidth" and requested.halfwidth is None)


def decode_memory(width: int, height: int, values_per_pixel: int,
                  kept_bytes: int | None = None) -> float:
    """Peak bytes of decoding an image whole (PNG, JPEG, …) of ``width`` × ``height`` px and
    ``values_per_pixel`` (bands, alpha included, times frames) from its header: its float32
    planes times :data:`DECODE_FACTOR`; where it is kept in its decoded type, of
    ``kept_bytes`` a value, those values times :data:`KEPT_DECODE_FACTOR`."""
    if kept_bytes is not None:
        return KEPT_DECODE_FACTOR * kept_bytes * width * height * values_per_pixel
    return DECODE_FACTOR * 4.0 * width * height * values_per_pixel


def check_decode_memory(path: str, width: int, height: int, values_per_pixel: int,
                        kept_bytes: int | None = None) -> None:
    """Refuse, before decoding, an image whose decoding would exceed the memory budget.

    Parameters
    ----------
    path : str
        The image, named in the message.
    width, height : int
        Its size (px), from its header.
    values_per_pixel : int
        Bands (alpha included) times frames, from its header.
    kept_bytes : int, optional
        Bytes a value where the image is kept in its decoded type, not as float32
        (:func:`decode_memory`).

    Raises
    ------
    OverMemoryBudget
        Naming the memory needed and the budget, when the first exceeds the second.
    """
    needed = decode_memory(width, height, values_per_pixel, kept_bytes)
    if not _checked(needed):
        return
    # The image is the whole of what is decoded: all that is available, near enough.
    budget, source = memory_budget(DECODE_AVAILABLE_FRACTION)
    if budget is None or needed <= budget:
        return
    raise OverMemoryBudget(f"{path}: decoding its {width}×{height} px needs about "
                           f"{format_size(needed)}, over the {format_size(budget)} it may use "
                           f"({source})", "convert it to a tiled GeoTIFF (read window by "
                           "window), or free memory, or give a larger --memory-budget")
