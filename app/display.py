"""Display images: a percentile contrast stretch to 8 bits and a pyramid of halved levels.

Runs in a worker thread when an image opens, so the window never waits on a large image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QImage

#: Percentiles mapped to 0 and 255 by the contrast stretch.
STRETCH_PERCENTILES = (1.0, 99.0)
#: Pixels sampled (on a regular grid) to estimate the percentiles.
STRETCH_SAMPLES = 1_000_000
#: Rows converted at a time (bounds the float temporaries).
CHUNK_ROWS = 512
#: The pyramid halves until both sides fit in this many pixels.
SMALLEST_LEVEL = 1024


def stretch_to_uint8(pixels: np.ndarray) -> np.ndarray:
    """Per-band percentile stretch of float pixels ``(rows, cols, bands)`` to uint8, same shape.

    Works for grey, RGB and 16-bit images alike: the range shown is the one the data occupies.
    """
    rows, cols, bands = pixels.shape
    step = max(1, int(np.sqrt(rows * cols / STRETCH_SAMPLES)))
    sample = pixels[::step, ::step].reshape(-1, bands)
    low, high = np.percentile(sample, STRETCH_PERCENTILES, axis=0).astype(np.float32)
    scale = np.float32(255.0) / np.maximum(high - low, np.float32(1e-12))
    out = np.empty((rows, cols, bands), dtype=np.uint8)
    for row0 in range(0, rows, CHUNK_ROWS):
        chunk = (pixels[row0:row0 + CHUNK_ROWS] - low) * scale
        np.clip(chunk, 0, 255, out=chunk)
        out[row0:row0 + CHUNK_ROWS] = (chunk + 0.5).astype(np.uint8)
    return out


@dataclass(frozen=True)
class DisplayLevel:
    """A pyramid level: ``image`` shows the full image at 1/``factor`` of its size."""

    image: QImage
    factor: int


def _qimage(array: np.ndarray) -> QImage:
    """An RGB32 copy of an 8-bit grey or RGB array (the format Qt draws without converting)."""
    rows, cols, bands = array.shape
    fmt = QImage.Format.Format_Grayscale8 if bands == 1 else QImage.Format.Format_RGB888
    view = QImage(array.data, cols, rows, array.strides[0], fmt)
    return view.convertToFormat(QImage.Format.Format_RGB32)


def display_pyramid(pixels: np.ndarray) -> list[DisplayLevel]:
    """Stretched 8-bit levels, full size first, each half the previous (nearest sampling)."""
    array = stretch_to_uint8(pixels)
    levels = [DisplayLevel(_qimage(array), 1)]
    while max(array.shape[:2]) > SMALLEST_LEVEL:
        array = np.ascontiguousarray(array[::2, ::2])
        levels.append(DisplayLevel(_qimage(array), levels[-1].factor * 2))
    return levels
