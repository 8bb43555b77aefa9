"""Display images: a percentile contrast stretch to 8 bits, a pyramid of halved levels, and
sharp tiles of rasters too large to hold whole.

Built in a worker thread when an image opens. Every step is a numpy operation on a band of
rows (numpy releases the GIL there), so the GUI thread keeps running while a large image
opens; the levels are RGB32, the format Qt draws without converting. A raster too large to
read whole is shown from an overview; :func:`read_tile` reads the part of it in view at the
resolution the zoom needs (averaged down to it), stretched as the pyramid is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QImage

from core.raster import FULL_READ_LIMIT, Raster, ReadCancelled, load_image

#: Percentiles mapped to 0 and 255 by the contrast stretch.
STRETCH_PERCENTILES = (1.0, 99.0)
#: Pixels sampled (on a regular grid) to estimate the percentiles.
STRETCH_SAMPLES = 1_000_000
#: Rows converted at a time (bounds the temporaries and the time the GIL is held).
CHUNK_ROWS = 512
#: The pyramid halves until both sides fit in this many pixels.
SMALLEST_LEVEL = 1024
#: Longest side of the display image of a raster too large to read whole.
OVERVIEW_SIZE = 8192


@dataclass(frozen=True)
class DisplayLevel:
    """A pyramid level: ``image`` (a view of ``array``, kept alive here) at 1/``factor`` size."""

    array: np.ndarray
    image: QImage
    factor: int


@dataclass(frozen=True)
class TileWindow:
    """Rows ``row0:row1`` and columns ``col0:col1`` of an image, averaged over blocks of
    ``factor`` × ``factor`` pixels."""

    row0: int
    row1: int
    col0: int
    col1: int
    factor: int

    def covers(self, other: TileWindow) -> bool:
        """Whether this window shows all of ``other`` at the same resolution."""
        return (self.factor == other.factor and self.row0 <= other.row0
                and other.row1 <= self.row1 and self.col0 <= other.col0
                and other.col1 <= self.col1)


@dataclass(frozen=True)
class DisplayTile:
    """A window of a raster, stretched: ``level`` pixel (i, j) shows the mean of the block of
    ``factor`` × ``factor`` image pixels from ``(window.row0 + i·factor, window.col0 +
    j·factor)`` (:meth:`core.raster.Raster.read_window` with ``step=factor``)."""

    level: DisplayLevel
    window: TileWindow


@dataclass(frozen=True, eq=False)
class DisplayPyramid(Sequence):
    """The stretched levels of an image, sharpest first (``pyramid[0]``), each half the last.

    Attributes
    ----------
    levels : tuple of DisplayLevel
    low, high : ndarray of shape (bands,), float32
        The values shown as black and white (:func:`stretch_limits`).
    source : Raster or None
        The raster to read sharper tiles from (:func:`read_tile`) when the sharpest level is
        coarser than it; None when ``levels[0]`` is at full resolution.
    """

    levels: tuple[DisplayLevel, ...]
    low: np.ndarray
    high: np.ndarray
    source: Raster | None = None

    def __getitem__(self, index):
        return self.levels[index]

    def __len__(self) -> int:
        return len(self.levels)


def stretch_limits(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-band values shown as black and white: percentiles of a regular sample of the valid
    pixels of ``pixels`` (rows, cols, bands), each of shape (bands,).

    Pixels that are 0 in every band are left out: the rasters read no-data, NaN and transparent
    pixels as 0 and expose no mask, so counting them would wash out images with holes (a real
    black pixel left out shifts the percentiles by a negligible amount). Where a band's
    percentiles coincide (at least 98 % of its valid pixels share one value: a white map sheet
    with a thin dark road), it is stretched over its valid range instead; where that is one
    value too, from 0 to that value (a 0/1 or 0/255 mask shows white on black, a uniform image
    white). An image that is 0 everywhere shows black.
    """
    rows, cols, bands = pixels.shape
    step = max(1, int(np.sqrt(rows * cols / STRETCH_SAMPLES)))
    sample = pixels[::step, ::step].reshape(-1, bands)
    valid = sample[np.any(sample != 0, axis=1)]
    if valid.size:
        low, high = np.percentile(valid, STRETCH_PERCENTILES, axis=0).astype(np.float32)
        flat = high <= low
        low = np.where(flat, valid.min(axis=0), low)
        high = np.where(flat, valid.max(axis=0), high)
        flat = high <= low
        low, high = np.where(flat, np.minimum(low, 0), low), np.where(flat, np.maximum(high, 0),
                                                                        high)
    else:
        low = high = np.zeros(bands, np.float32)
    return low, low + np.maximum(high - low, np.float32(1e-6))  # 0 everywhere shows black


def _rgb32(pixels: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Stretch float pixels (rows, cols, bands) and pack them as 0xFFRRGGBB, shape (rows, cols)."""
    values = pixels - low
    values *= np.float32(255.0) / (high - low)
    np.clip(values, 0, 255, out=values)
    values += np.float32(0.5)
    channels = values.astype(np.uint32)
    if channels.shape[2] == 1:
        return channels[:, :, 0] * np.uint32(0x010101) | np.uint32(0xFF000000)
    return (channels[:, :, 0] << 16) | (channels[:, :, 1] << 8) | channels[:, :, 2] | np.uint32(
        0xFF000000)


def _level(array: np.ndarray, factor: int) -> DisplayLevel:
    """A level of packed pixels ``array`` (rows, cols), uint32, at 1/``factor`` size."""
    return DisplayLevel(array, QImage(array.data, array.shape[1], array.shape[0],
                                      array.strides[0], QImage.Format.Format_RGB32), factor)


def display_pyramid(pixels: np.ndarray, base_factor: int = 1,
                    source: Raster | None = None) -> DisplayPyramid:
    """Stretched levels of grey or RGB float pixels (rows, cols, bands): full size first, each
    half the previous.

    ``pixels`` may be an overview of the raster ``source`` decimated by ``base_factor`` (huge
    rasters); the levels' factors are then relative to the full image.
    """
    rows, cols, _ = pixels.shape
    factors = [1]
    while max(rows, cols) > SMALLEST_LEVEL * factors[-1]:
        factors.append(2 * factors[-1])
    chunk = max(CHUNK_ROWS, factors[-1])
    arrays = [np.empty((-(-rows // f), -(-cols // f)), dtype=np.uint32) for f in factors]
    low, high = stretch_limits(pixels)
    for row0 in range(0, rows, chunk):
        packed = _rgb32(pixels[row0:row0 + chunk], low, high)
        for factor, array in zip(factors, arrays, strict=True):
            level_rows = packed[::factor, ::factor]
            array[row0 // factor:row0 // factor + len(level_rows)] = level_rows
    levels = tuple(_level(array, factor * base_factor)
                   for factor, array in zip(factors, arrays, strict=True))
    return DisplayPyramid(levels, low, high, source if base_factor > 1 else None)


def read_tile(pyramid: DisplayPyramid, window: TileWindow,
              cancelled: Callable[[], bool]) -> DisplayTile | None:
    """Read ``window`` of ``pyramid.source`` at 1/``window.factor`` size and stretch it as the
    pyramid is.

    Read straight at that size (block means), in bands of about :data:`CHUNK_ROWS` image rows;
    None when ``cancelled()`` turns true between two bands (the view moved on).
    """
    factor = window.factor
    rows = -(-(window.row1 - window.row0) // factor)
    cols = -(-(window.col1 - window.col0) // factor)
    array = np.empty((rows, cols), dtype=np.uint32)
    chunk = max(1, CHUNK_ROWS // factor) * factor
    for row0 in range(window.row0, window.row1, chunk):
        if cancelled():
            return None
        pixels = pyramid.source.read_window(row0, min(row0 + chunk, window.row1),
                                            window.col0, window.col1, step=factor)
        first = (row0 - window.row0) // factor
        array[first:first + len(pixels)] = _rgb32(pixels, pyramid.low, pyramid.high)
    return DisplayTile(_level(array, factor), window)


def load_for_display(path: str, *, progress: Callable[[float], None] | None = None,
                     cancelled: Callable[[], bool] | None = None
                     ) -> tuple[Raster, DisplayPyramid]:
    """Worker side of opening an image: the raster and its stretched display pyramid.

    ``progress`` and ``cancelled`` are :func:`display_levels`'; the raster is closed when the
    load is cancelled (:class:`core.raster.ReadCancelled`) or fails.
    """
    raster = load_image(path)
    try:
        return raster, display_levels(raster, progress=progress, cancelled=cancelled)
    except BaseException:
        raster.close()
        raise


def display_levels(raster: Raster, *, progress: Callable[[float], None] | None = None,
                   cancelled: Callable[[], bool] | None = None) -> DisplayPyramid:
    """The stretched display pyramid of a raster (from an overview when it is too large to
    read whole: its sharp parts are then read as tiles, :func:`read_tile`).

    Parameters
    ----------
    progress : callable, optional
        Called, from this (worker) thread, with the fraction of the display image read
        (increasing, 1.0 last); in bands of rows while an overview is read.
    cancelled : callable, optional
        Asked between bands of rows (and before the pyramid is built): when it returns
        true, :class:`core.raster.ReadCancelled` is raised.
    """
    if raster.height * raster.width <= FULL_READ_LIMIT:
        pixels, step = raster.pixels, 1
        if progress is not None:
            progress(1.0)
    else:
        step = raster.overview_step(OVERVIEW_SIZE)
        pixels = raster.overview(OVERVIEW_SIZE, progress=progress, cancelled=cancelled)
    if cancelled is not None and cancelled():
        raise ReadCancelled(f"opening {raster.path or 'the image'} cancelled")
    return display_pyramid(pixels, step, raster)  # source None at step 1
