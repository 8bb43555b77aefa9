"""Display images: a percentile contrast stretch to 8 bits and a pyramid of halved levels.

Built in a worker thread when an image opens. Every step is a numpy operation on a band of
rows (numpy releases the GIL there), so the GUI thread keeps running while a large image
opens; the levels are RGB32, the format Qt draws without converting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QImage

from core.raster import FULL_READ_LIMIT, Raster, load_image

#: Percentiles mapped to 0 and 255 by the contrast stretch.
STRETCH_PERCENTILES = (1.0, 99.0)
#: Pixels sampled (on a regular grid) to estimate the percentiles.
STRETCH_SAMPLES = 1_000_000
#: Rows converted at a time (bounds the temporaries and the time the GIL is held).
CHUNK_ROWS = 512
#: The pyramid halves until both sides fit in this many pixels.
SMALLEST_LEVEL = 1024


@dataclass(frozen=True)
class DisplayLevel:
    """A pyramid level: ``image`` (a view of ``array``, kept alive here) at 1/``factor`` size."""

    array: np.ndarray
    image: QImage
    factor: int


def stretch_limits(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-band values shown as black and white: percentiles of a regular sample, each (bands,)."""
    rows, cols, bands = pixels.shape
    step = max(1, int(np.sqrt(rows * cols / STRETCH_SAMPLES)))
    sample = pixels[::step, ::step].reshape(-1, bands)
    low, high = np.percentile(sample, STRETCH_PERCENTILES, axis=0).astype(np.float32)
    return low, low + np.maximum(high - low, np.float32(1e-6))  # a flat image shows black


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


def display_pyramid(pixels: np.ndarray, base_factor: int = 1) -> list[DisplayLevel]:
    """Stretched levels of grey or RGB float pixels: full size first, each half the previous.

    ``pixels`` may be an overview of the image decimated by ``base_factor`` (huge rasters);
    the levels' factors are then relative to the full image.
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
    return [DisplayLevel(array, QImage(array.data, array.shape[1], array.shape[0],
                                       array.strides[0], QImage.Format.Format_RGB32),
                         factor * base_factor)
            for factor, array in zip(factors, arrays, strict=True)]


#: Longest side of the display image of a raster too large to read whole.
OVERVIEW_SIZE = 8192


def load_for_display(path: str) -> tuple[Raster, list[DisplayLevel]]:
    """Worker side of opening an image: the raster and its stretched display pyramid."""
    raster = load_image(path)
    return raster, display_levels(raster)


def display_levels(raster: Raster) -> list[DisplayLevel]:
    """The stretched display pyramid of a raster (from an overview when it is too large to
    read whole)."""
    if raster.height * raster.width <= FULL_READ_LIMIT:
        return display_pyramid(raster.pixels)
    step = math.ceil(max(raster.height, raster.width) / OVERVIEW_SIZE)
    return display_pyramid(raster.overview(OVERVIEW_SIZE), step)
