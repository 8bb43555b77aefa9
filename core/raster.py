"""Loading images and reading pixel windows from them.

A :class:`Raster` hands out float32 windows of shape ``(rows, cols, bands)``; tracing reads
only the corridor around a and b, so a raster backed by a windowed reader (GeoTIFF) needs
never be loaded whole. Values are scaled by the integer type's range (8-bit /255, 16-bit
/65535); float images are kept as they are. Alpha channels are dropped. EXIF orientation
tags are ignored: pixels are used in the order the file stores them.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from core.errors import ImageReadError


def to_float_bands(array: np.ndarray, source: str = "image") -> np.ndarray:
    """Convert a decoded image to float32 of shape ``(rows, cols, bands)``.

    Accepts grey ``(H, W)``, grey+alpha ``(H, W, 2)``, RGB ``(H, W, 3)`` and RGBA
    ``(H, W, 4)`` arrays of bool, unsigned/signed integer or float type.
    """
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4):
        raise ImageReadError(f"{source}: unsupported pixel layout {array.shape}; "
                             "expected grey, grey+alpha, RGB or RGBA")
    if array.shape[2] in (2, 4):
        array = array[:, :, :-1]
    if array.dtype == bool:
        return array.astype(np.float32)
    if np.issubdtype(array.dtype, np.integer):
        scale = float(np.iinfo(array.dtype).max)
        return (array.astype(np.float32) / np.float32(scale))
    if np.issubdtype(array.dtype, np.floating):
        out = array.astype(np.float32)
        if not np.all(np.isfinite(out)):
            out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
        return out
    raise ImageReadError(f"{source}: unsupported pixel type {array.dtype}")


@dataclass
class Raster:
    """An image held in memory as float32 ``(rows, cols, bands)``.

    Attributes
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    path : str or None
        The file it came from, if any.
    georef : object or None
        Georeferencing (transform and CRS) when the file carries it; None in pixel space.
    """

    pixels: np.ndarray
    path: str | None = None
    georef: object | None = field(default=None)

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def bands(self) -> int:
        return int(self.pixels.shape[2])

    def read_window(self, row0: int, row1: int, col0: int, col1: int) -> np.ndarray:
        """Pixels of rows ``row0:row1`` and columns ``col0:col1`` (clipped to the image).

        Returns
        -------
        ndarray of shape (row1 - row0, col1 - col0, bands), float32
        """
        return self.pixels[max(row0, 0):min(row1, self.height),
                           max(col0, 0):min(col1, self.width)]


def load_image(path: str | os.PathLike) -> Raster:
    """Read a PNG/JPEG/TIFF (anything imageio reads) into a :class:`Raster`.

    Raises
    ------
    ImageReadError
        If the file is missing, cannot be decoded, or has an unsupported layout.
    """
    import imageio.v3 as iio

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ImageReadError(f"image file not found: {path}")
    if os.path.isdir(path):
        raise ImageReadError(f"expected an image file, got a folder: {path}")
    try:
        with warnings.catch_warnings():  # plugins probed on undecodable files warn noisily
            warnings.simplefilter("ignore")
            array = iio.imread(path)
    except Exception as exc:  # imageio raises many types for undecodable files
        raise ImageReadError(f"cannot read image {path}: {type(exc).__name__}: {exc}") from None
    if array.ndim == 3 and array.shape[0] in (2, 3, 4) and array.shape[2] > 4:
        raise ImageReadError(f"{path}: multi-page or planar image {array.shape} not supported")
    pixels = to_float_bands(array, source=path)
    if pixels.shape[0] < 2 or pixels.shape[1] < 2:
        raise ImageReadError(
            f"{path}: image of {pixels.shape[1]}×{pixels.shape[0]} px is too small")
    return Raster(pixels=np.ascontiguousarray(pixels), path=path)
