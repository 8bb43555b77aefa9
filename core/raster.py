"""Loading images and reading pixel windows from them.

A :class:`Raster` hands out float32 windows of shape ``(rows, cols, bands)``; tracing reads
only the corridor around a and b. PNG/JPEG images are decoded whole (imageio) into a
:class:`Raster`, once their header shows that they fit the memory budget (which stands in for
Pillow's own pixel limit); TIFFs and GeoTIFFs open as a :class:`WindowedRaster` (rasterio)
that reads from disk only the windows asked for, so tracing latency does not grow with the
image size. Values are scaled by the integer type's range (8-bit /255, 16-bit /65535); float
images are kept as they are. 16-bit TIFFs and 16-bit grey PNGs keep their depth; 16-bit colour
PNGs (RGB, RGBA, grey+alpha) do where rasterio is installed (read through GDAL), else Pillow
reads them at 8 bits per band and :attr:`Raster.notes` says so. Alpha channels (the 2nd of 2
or the 4th of 4 bands) are dropped. EXIF orientation is not applied: pixels are used in the
order the file stores them, as GIS software (and world files) use them, and
:attr:`Raster.notes` says so where a file asks viewers to turn it.

Multispectral images (more than 4 bands: Sentinel-2 or Landsat stacks, 8-band WorldView) are
traced on three of their bands: those a GeoTIFF tags red, green and blue, else those its band
descriptions name so (:func:`described_colours`), else its first three non-alpha bands;
``bands`` (the CLI's ``--bands``) names others, e.g. (8, 4, 3) for a false-colour composite
where vegetation and water stand apart (:func:`choose_bands`).

Display images: every raster has ``overview(max_size)``, a decimated float32 image whose
longer side is at most ``max_size`` px, decimated by ``overview_step(max_size)`` (a
:class:`WindowedRaster` reads it in bands of rows, reporting ``progress`` and stopping with
:class:`ReadCancelled` when asked, from the file's overviews when it has them: build them with
``gdaladdo`` for fast display of huge GeoTIFFs), and ``read_window`` with a ``step`` reads a
window averaged over blocks of step × step pixels (from the overviews too, where they are
fine enough). ``pixels`` is the whole image; a :class:`WindowedRaster` reads it on first use
and refuses above :data:`FULL_READ_LIMIT` pixels, where a viewer should show ``overview`` and
read windows. A PNG, JPEG, … over that size is held in its decoded type (a
:class:`DecodedRaster`, :func:`keeps_decoded`), its windows converted as they are read.
"""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
import threading
import unicodedata
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from core.errors import BadParameter, ImageReadError
from core.georef import (
    Georef,
    GeorefError,
    RpcGeoref,
    crs_label,
    ground_resolution,
    read_georef,
    world_file_candidates,
)
from core.output import printable, shortened
from core.resources import check_decode_memory

#: TIFF file suffixes (lower case).
TIFF_SUFFIXES = (".tif", ".tiff", ".gtiff")
#: Other GIS raster formats GDAL reads (lower-case suffix → name), opened like TIFFs.
GDAL_FORMATS = {".jp2": "JPEG 2000", ".j2k": "JPEG 2000", ".img": "ERDAS Imagine"}
#: The one GDAL driver each suffix is opened with: a file whose content is of another format
#: (a GDAL virtual raster or web-service description saved as .tif, which would read other
#: files, devices or the network) is refused, not opened as that format.
GDAL_DRIVERS = {**dict.fromkeys(TIFF_SUFFIXES, "GTiff"), ".jp2": "JP2OpenJPEG",
                ".j2k": "JP2OpenJPEG", ".img": "HFA", ".png": "PNG", ".jpg": "JPEG",
                ".jpeg": "JPEG"}
#: File suffixes opened through rasterio as windowed rasters, georeferenced by the file itself.
WINDOWED_SUFFIXES = TIFF_SUFFIXES + tuple(GDAL_FORMATS)
#: Formats not read (suffix → name): decoders GDAL's free builds lack, and GDAL virtual
#: rasters (which may read any file, device or URL): to convert first.
UNREAD_FORMATS = {".ecw": "ECW", ".sid": "MrSID", ".vrt": "GDAL virtual raster"}
#: Image files a folder is searched for (batch images, evidence rasters).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".jp2", ".j2k")


def is_image_name(name: str) -> bool:
    """Whether a folder's entry ``name`` names an image file: one of :data:`IMAGE_SUFFIXES`,
    and not a macOS AppleDouble file (``._a.png``: the Finder's metadata of ``a.png``,
    which it leaves beside it on a FAT or exFAT drive or a network share, no image)."""
    return not name.startswith("._") and Path(name).suffix.lower() in IMAGE_SUFFIXES


def same_name_key(name: str) -> str:
    """What two file names share when macOS or Windows take them for one: their NFC form
    (macOS may hand a name back decomposed, NFD, as typed composed), case folded."""
    return unicodedata.normalize("NFC", name).casefold()


def image_named(name: str, names: list[str]) -> str | None:
    """The image file of ``names`` that ``name`` means (a batch seed's or an imported line's
    ``properties.image``).

    The one named exactly so; else the only one named so in another Unicode normalisation
    (``é`` composed or decomposed: a folder copied from macOS); else, on Windows and macOS,
    whose file systems ignore case by default, the only one named so but for case and
    normalisation (``A.PNG`` for ``a.png``: :func:`same_name_key`); else None (never two
    images for one seed).
    """
    if name in names:
        return name
    key = same_name_key if sys.platform in ("win32", "darwin") \
        else partial(unicodedata.normalize, "NFC")
    same = [other for other in names if key(other) == key(name)]
    return same[0] if len(same) == 1 else None


def list_images(folder: Path) -> list[Path]:
    """Image files (:func:`is_image_name`) directly in ``folder``, sorted by name.

    Raises
    ------
    ImageReadError
        If the folder cannot be listed (gone, not a folder, no permission).
    """
    try:
        return sorted(path for path in folder.iterdir()
                      if is_image_name(path.name) and path.is_file())
    except OSError as exc:
        raise ImageReadError(f"cannot list the folder {folder}: {exc.strerror or exc}") from None


#: Largest image (in pixels) a :class:`WindowedRaster` reads whole for ``pixels``.
FULL_READ_LIMIT = 32 * 2**20
#: Longer side (px) of the decimated grid on which a resampled raster's coverage is checked.
COVERAGE_SIZE = 1024
#: GDAL block cache (bytes) while :meth:`WindowedRaster.overview` reads: at least this, or
#: twice one row of the file's blocks where that is more. GDAL's default (5 % of the RAM)
#: fills with every decoded block of the file, and stays full after the read (1.1 GB kept
#: after the overview of a 20000² px RGB GeoTIFF). The overview is read in bands of whole
#: block rows, so the cache need hold only the blocks of one band (rows read one by one reuse
#: a block while it is cached, each decoded once): with 64 MB that file's overview read in
#: 2.8-3.9 s (as with 256 MB), its whole-image read with GDAL's default cache in 3.3-7.7 s.
OVERVIEW_CACHE_BYTES = 64 * 2**20
#: Fewest image rows (of the level read) in one band of an overview read, in whole rows of
#: the file's blocks: a progress step, and what ``cancelled`` is checked between.
OVERVIEW_BAND_ROWS = 512
#: Decimation step from which an overview read reads only the rows it keeps, one by one (a
#: GDAL read each), rather than the whole band of rows.
SPARSE_ROWS_STEP = 3


class _BlockCacheBound:
    """``bound(size)``: a context in which GDAL's block cache (one for the process) holds at
    most ``size`` bytes, or the largest size of the contexts open in other threads; the
    first context in saves GDAL's setting, the last out restores it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sizes: list[int] = []
        self._saved = None

    @contextmanager
    def __call__(self, size: int):
        from rasterio.env import get_gdal_config, set_gdal_config

        with self._lock:
            if not self._sizes:
                self._saved = get_gdal_config("GDAL_CACHEMAX")
            self._sizes.append(int(size))
            set_gdal_config("GDAL_CACHEMAX", max(self._sizes))
        try:
            yield
        finally:
            with self._lock:
                self._sizes.remove(int(size))
                set_gdal_config("GDAL_CACHEMAX", max(self._sizes) if self._sizes
                                else self._saved)


_BLOCK_CACHE_BOUND = _BlockCacheBound()


class ReadCancelled(Exception):
    """A read was stopped because its caller's ``cancelled()`` turned true (no error to
    report: the caller no longer wants the result)."""


def choose_bands(count: int, requested=None, alpha=(), colours=None) -> tuple[int, ...]:
    """Which bands of a ``count``-band image are traced (1-based, in order).

    Parameters
    ----------
    count : int
        Bands in the file.
    requested : sequence of 1 or 3 ints, optional
        The user's choice; checked against ``count``.
    alpha : set of ints
        Bands the file tags as alpha. Without tags, the last of 2 or 4 bands is alpha.
    colours : (red, green, blue) band numbers, optional
        The bands the file tags with these colours, when it tags all three, else those its
        band descriptions name so (:func:`described_colours`), when they name all three.

    Returns
    -------
    tuple of 1 or 3 ints: a grey band, or three bands read as red, green, blue.

    Raises
    ------
    BadParameter
        If ``requested`` is not 1 or 3 band numbers within 1..count.
    """
    if requested is not None:
        requested = tuple(int(band) for band in requested)
        if len(requested) not in (1, 3) or not all(1 <= band <= count for band in requested):
            raise BadParameter(f"bands {','.join(map(str, requested))}: give 1 or 3 band "
                               f"numbers between 1 and {count} (the image has {count} band"
                               f"{'s' if count > 1 else ''})")
        return requested
    if colours is not None:
        return tuple(colours)
    if not alpha and count in (2, 4):
        alpha = {count}
    kept = [band for band in range(1, count + 1) if band not in alpha] or [1]
    return tuple(kept[:3]) if len(kept) >= 3 else (kept[0],)


#: Words of a band description that say which band it is, not what it holds: "band", "channel",
#: band numbers ("4", "B4").
_BAND_NUMBER_WORDS = re.compile(r"(band|channel|b)?\d+|band|channel")
#: The colour a band description names, by its one remaining word (lower case).
_COLOUR_WORDS = {"red": "red", "r": "red", "green": "green", "g": "green", "blue": "blue",
                 "b": "blue"}


def described_colours(descriptions) -> tuple[int, int, int] | None:
    """The bands (1-based) whose descriptions name red, green and blue, one band each.

    A description names a colour when, in lower case and without band numbers and the words
    "band" and "channel", it is that colour's one word: "Red", "RED", "B4 (red)", "Band 3:
    blue", "G". "Red edge", "RedEdge" or "Coastal blue" name none.

    Parameters
    ----------
    descriptions : sequence of str or None
        The file's band descriptions, band 1 first.

    Returns
    -------
    (red, green, blue) band numbers, or None unless each colour is named by exactly one band.
    """
    named: dict[str, list[int]] = {"red": [], "green": [], "blue": []}
    for band, text in enumerate(descriptions, 1):
        words = [word for word in re.findall(r"[a-z]+\d*|\d+", (text or "").lower())
                 if not _BAND_NUMBER_WORDS.fullmatch(word)]
        if len(words) == 1 and words[0] in _COLOUR_WORDS:
            named[_COLOUR_WORDS[words[0]]].append(band)
    if any(len(bands) != 1 for bands in named.values()):
        return None
    return named["red"][0], named["green"][0], named["blue"][0]


#: Largest magnitude of a float image's pixels: squared gradients must not overflow float32.
MAX_FLOAT_VALUE = 1e15


def to_float_bands(array: np.ndarray, source: str = "image") -> np.ndarray:
    """Convert a decoded image to float32 of shape ``(rows, cols, bands)``.

    Accepts grey ``(H, W)``, grey+alpha ``(H, W, 2)``, RGB ``(H, W, 3)`` and RGBA
    ``(H, W, 4)`` arrays of bool, unsigned/signed integer or float type.
    """
    array = _colour_bands(array, source)
    if array.dtype == bool:
        return array.astype(np.float32)
    if np.issubdtype(array.dtype, np.integer):
        out = array.astype(np.float32)
        out *= np.float32(1.0 / np.iinfo(array.dtype).max)  # in place: one full-size copy
        return out
    if np.issubdtype(array.dtype, np.floating):
        return finite_float32(array, source)
    raise ImageReadError(f"{source}: unsupported pixel type {array.dtype}")


def _colour_bands(array: np.ndarray, source: str = "image") -> np.ndarray:
    """A decoded image (grey, grey+alpha, RGB or RGBA) as (rows, cols, bands) without its
    alpha band: a view of ``array``.

    Raises
    ------
    ImageReadError
        Naming ``source``, for another layout.
    """
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4):
        raise ImageReadError(f"{source}: unsupported pixel layout {array.shape}; "
                             "expected grey, grey+alpha, RGB or RGBA")
    return array[:, :, :-1] if array.shape[2] in (2, 4) else array


#: Float32 planes (bytes) above which a PNG, JPEG, … too large to read whole (over
#: :data:`FULL_READ_LIMIT` px) is held in its decoded type, 1 or 2 bytes a value, and converted
#: window by window (:class:`DecodedRaster`): a 16000² px RGB PNG holds 0.7 GB, not 2.9 GB.
#: Smaller images are held as float32, their windows views of it (which the GPU backend keeps
#: on the device, up to the same 256 MB: ``gpu.evidence.MAX_RESIDENT_BYTES``).
KEEP_DECODED_BYTES = 256 * 2**20


def keeps_decoded(rows: int, cols: int, values_per_pixel: int, dtype) -> bool:
    """Whether :func:`load_image` holds a decoded image of ``rows`` × ``cols`` px and
    ``values_per_pixel`` (alpha included) of type ``dtype`` as it is decoded
    (:class:`DecodedRaster`), not as float32: integers of at most 16 bits (or bool), over
    :data:`FULL_READ_LIMIT` px and :data:`KEEP_DECODED_BYTES` as float32."""
    dtype = np.dtype(dtype)
    small_type = dtype == np.bool_ or (np.issubdtype(dtype, np.integer) and dtype.itemsize <= 2)
    return (small_type and rows * cols > FULL_READ_LIMIT
            and 4 * rows * cols * values_per_pixel > KEEP_DECODED_BYTES)


def finite_float32(array: np.ndarray, source: str = "image") -> np.ndarray:
    """Pixel values (any shape, a real type) as float32, NaN and ±inf (no data) read as 0;
    ``array`` itself where it is float32 and finite.

    Raises
    ------
    ImageReadError
        Naming ``source``, if a value lies beyond ±:data:`MAX_FLOAT_VALUE`.
    """
    with np.errstate(over="ignore"):  # beyond float32: refused below as too large
        out = array.astype(np.float32, copy=False)
    finite = np.isfinite(array)
    if not finite.all():
        out = out.copy() if out is array else out
        out[~finite] = 0.0  # NaN and ±inf: no data
    if float(np.abs(out).max(initial=0.0)) > MAX_FLOAT_VALUE:
        largest = float(np.abs(array[finite]).max())
        raise ImageReadError(f"{source}: pixel values reach {largest:.3g}; float images "
                             f"must stay within ±{MAX_FLOAT_VALUE:g} (rescale it)")
    return out


def bands_last_float(data: np.ndarray, source: str = "image",
                     out: np.ndarray | None = None) -> np.ndarray:
    """``to_float_bands(np.moveaxis(data, 0, -1))`` (``data`` bands first, as rasterio reads
    them) as C-ordered float32, converted in one pass where the type allows (integers,
    float32), else copied once more; written into ``out`` (C-ordered, of that shape) where
    given."""
    moved = np.moveaxis(data, 0, -1)
    if data.shape[0] in (1, 3) and np.issubdtype(data.dtype, np.integer):
        if out is None:
            out = np.empty(moved.shape, np.float32)
        np.copyto(out, moved, casting="unsafe")  # as astype(np.float32)
        out *= np.float32(1.0 / np.iinfo(data.dtype).max)  # as to_float_bands
        return out
    if data.shape[0] in (1, 3) and data.dtype == np.float32:
        pixels = finite_float32(np.ascontiguousarray(moved), source)
    else:
        pixels = np.ascontiguousarray(to_float_bands(moved, source=source))
    if out is None:
        return pixels
    out[...] = pixels
    return out


def _nearest(size: int, count: int) -> np.ndarray:
    """The ``count`` indices GDAL's nearest-neighbour read of ``size`` pixels at ``count``
    picks: ``floor((i + 0.5) · size / count)`` (with GDAL's 1e-10 against rounding)."""
    picks = ((np.arange(count) + 0.5) * (size / count) + 1e-10).astype(np.intp)
    return np.minimum(picks, size - 1)


def overview_shape(height: int, width: int, max_size: int) -> tuple[int, int]:
    """Rows and columns of an overview whose longer side is at most ``max_size``.

    The image is decimated by the integer ``step = ceil(max(height, width) / max_size)``:
    the overview has ``ceil(height / step)`` rows and ``ceil(width / step)`` columns.
    """
    if not isinstance(max_size, int | np.integer) or max_size < 1:
        raise BadParameter(f"overview max_size must be a positive integer, got {max_size!r}")
    step = max(1, math.ceil(max(height, width) / max_size))
    return math.ceil(height / step), math.ceil(width / step)


@dataclass
class Raster:
    """An image held in memory as float32 ``(rows, cols, bands)``.

    Attributes
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    path : str or None
        The file it came from, if any.
    georef : core.georef.Georef, core.georef.RpcGeoref or None
        Georeferencing (transform and CRS, or RPCs) when the file carries it; None in pixel
        space.
    band_note : str or None
        Which of the file's bands are traced, where that is a choice a user should know of
        (a multispectral file, or bands asked for), e.g. "bands 4, 3, 2 of 13 (red, green,
        blue)"; None otherwise.
    ground_resolution : float or None
        Metres on the ground per pixel at the image's centre, from its georeferencing
        (core.georef.ground_resolution); None where it does not say.
    notes : tuple of str
        What a user should know of how the file was read, one sentence each without the
        file's name, e.g. that a JPEG's EXIF orientation was not applied, or a 16-bit PNG was
        read at 8 bits per band; empty where there is nothing to say.
    """

    pixels: np.ndarray
    path: str | None = None
    georef: Georef | RpcGeoref | None = field(default=None)
    band_note: str | None = None
    ground_resolution: float | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        shape = np.shape(self.pixels)
        if len(shape) != 3 or shape[2] < 1:
            raise BadParameter(f"a Raster's pixels must be an array of shape (rows, cols, bands), "
                               f"got shape {shape}")

    @property
    def height(self) -> int:
        """Rows of the image (px)."""
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        """Columns of the image (px)."""
        return int(self.pixels.shape[1])

    @property
    def bands(self) -> int:
        """Bands of the image."""
        return int(self.pixels.shape[2])

    def read_window(self, row0: int, row1: int, col0: int, col1: int,
                    step: int = 1) -> np.ndarray:
        """Pixels of rows ``row0:row1`` and columns ``col0:col1`` (clipped to the image),
        averaged over blocks of ``step`` × ``step`` pixels.

        Output pixel (i, j) is the mean of the window's rows ``i·step:(i + 1)·step`` and
        columns ``j·step:(j + 1)·step`` (fewer in the last row and column of blocks where the
        window's size is no multiple of ``step``); a :class:`WindowedRaster` reads it at that
        size, leaving out nodata and transparent pixels.

        Returns
        -------
        ndarray of shape (ceil(rows / step), ceil(cols / step), bands), float32
            ``rows`` and ``cols`` the clipped window's size; with ``step=1`` the window itself.

        Raises
        ------
        BadParameter
            If ``step`` is not a positive integer.
        """
        if not isinstance(step, int | np.integer) or step < 1:
            raise BadParameter(f"read_window step must be a positive integer, got {step!r}")
        row0, row1 = max(row0, 0), min(row1, self.height)
        col0, col1 = max(col0, 0), min(col1, self.width)
        if row1 <= row0 or col1 <= col0:
            return np.zeros((-(-max(row1 - row0, 0) // step), -(-max(col1 - col0, 0) // step),
                             self.bands), np.float32)
        return _joined([_joined([self._read_blocks(top, bottom, left, right, (rows, cols))
                                 for left, right, cols in _block_spans(col0, col1, step)], 1)
                        for top, bottom, rows in _block_spans(row0, row1, step)], 0)

    def _read_blocks(self, row0: int, row1: int, col0: int, col1: int,
                     shape: tuple[int, int]) -> np.ndarray:
        """Rows ``row0:row1`` and columns ``col0:col1`` (inside the image; their counts whole
        multiples of ``shape``'s) averaged down to ``shape`` (rows, cols): ndarray of shape
        (*shape, bands), float32."""
        return _block_means(self.pixels[row0:row1, col0:col1], shape)

    def overview_step(self, max_size: int) -> int:
        """The decimation step of :meth:`overview`: the image's ``(rows, cols)`` are
        ``(ceil(height / step), ceil(width / step))``; here the ``step`` of
        :func:`overview_shape`."""
        overview_shape(self.height, self.width, max_size)  # checks max_size
        return max(1, math.ceil(max(self.height, self.width) / max_size))

    def overview_factors(self) -> list[int] | None:
        """The decimation factors of the file's own overviews: None, the image being held in
        memory (:meth:`WindowedRaster.overview_factors`: a file's)."""
        return None

    def overview(self, max_size: int, progress=None, cancelled=None) -> np.ndarray:
        """A display image whose longer side is at most ``max_size`` px (nearest neighbour).

        With ``(rows, cols)`` from :func:`overview_shape` and scales ``sx = width / cols``,
        ``sy = height / rows``, overview pixel (x, y) shows image pixel
        ``(floor((x + 0.5)·sx), floor((y + 0.5)·sy))``: overview point (x, y) is image point
        ``((x + 0.5)·sx - 0.5, (y + 0.5)·sy - 0.5)``.

        ``progress(fraction)`` and ``cancelled()``, where given, are as
        :meth:`WindowedRaster.overview`'s (here the image is in memory: done at once).

        Returns
        -------
        ndarray of shape (rows, cols, bands), float32
        """
        pick_rows, pick_cols = self._overview_picks(max_size)
        if cancelled is not None and cancelled():
            raise ReadCancelled(f"reading the overview of {self.path or 'the image'} cancelled")
        result = self.pixels[pick_rows[:, None], pick_cols[None, :]]
        if progress is not None:
            progress(1.0)
        return result

    def _overview_picks(self, max_size: int) -> tuple[np.ndarray, np.ndarray]:
        """The image rows and columns that :meth:`overview` shows, shapes (rows,), (cols,)."""
        rows, cols = overview_shape(self.height, self.width, max_size)
        return (((np.arange(rows) + 0.5) * (self.height / rows)).astype(np.intp),
                ((np.arange(cols) + 0.5) * (self.width / cols)).astype(np.intp))

    def close(self) -> None:
        """Release the file behind the raster (nothing to do for one held in memory)."""

    def __enter__(self) -> Raster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _block_means(block: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``block`` (rows, cols, bands), float32, averaged down to ``shape`` (rows, cols), whole
    divisors of its own; ``block`` itself at its own shape."""
    if shape == block.shape[:2]:
        return block
    rows, cols = shape
    return block.reshape(rows, block.shape[0] // rows, cols, block.shape[1] // cols,
                         block.shape[2]).mean(axis=(1, 3))


#: Rows of a :class:`DecodedRaster`'s overview converted at a time (the temporaries stay small:
#: 2.5 times faster than converting it whole).
DECODED_OVERVIEW_ROWS = 256


class DecodedRaster(Raster):
    """A PNG, JPEG, … too large to read whole held in its decoded integer type
    (:func:`keeps_decoded`): windows and overviews are converted to float32 as they are read,
    to the values :func:`to_float_bands` gives the whole image; ``pixels`` converts the whole
    image on first use and keeps it instead (the decoded values are let go: every later read
    takes the floats).

    Parameters
    ----------
    decoded : ndarray of shape (rows, cols, bands), unsigned integer or bool
        The bands traced (no alpha), C-ordered.
    path, georef, band_note, ground_resolution, notes
        As :class:`Raster`'s.
    """

    def __init__(self, decoded: np.ndarray, path: str | None = None, georef=None,
                 band_note: str | None = None, ground_resolution: float | None = None,
                 notes: tuple[str, ...] = ()):
        self._decoded: np.ndarray | None = decoded  # None once converted whole
        self._shape = decoded.shape
        self._dtype = decoded.dtype
        self.path = path
        self.georef = georef
        self.band_note = band_note
        self.ground_resolution = ground_resolution
        self.notes = notes
        self._pixels: np.ndarray | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"DecodedRaster({self.path!r}, {self.width}×{self.height} px, {self.bands} "
                f"bands of {self._dtype}, georef={self.georef!r})")

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def height(self) -> int:
        """Rows of the image (px)."""
        return int(self._shape[0])

    @property
    def width(self) -> int:
        """Columns of the image (px)."""
        return int(self._shape[1])

    @property
    def bands(self) -> int:
        """Bands of the image."""
        return int(self._shape[2])

    @property
    def pixels(self) -> np.ndarray:
        """The whole image as float32 (rows, cols, bands), converted on first use."""
        with self._lock:
            if self._pixels is None:
                self._pixels = self._converted(self._decoded)
                self._decoded = None  # after the floats are in place: reads see either
            return self._pixels

    def _converted(self, decoded: np.ndarray) -> np.ndarray:
        """Decoded pixels (a part of the image) as C-ordered float32."""
        return np.ascontiguousarray(to_float_bands(decoded, source=self.path or "image"))

    def _read_blocks(self, row0: int, row1: int, col0: int, col1: int,
                     shape: tuple[int, int]) -> np.ndarray:
        """:meth:`Raster._read_blocks` of the window converted alone."""
        decoded = self._decoded
        if decoded is None:  # converted whole
            return super()._read_blocks(row0, row1, col0, col1, shape)
        return _block_means(self._converted(decoded[row0:row1, col0:col1]), shape)

    def overview(self, max_size: int, progress=None, cancelled=None) -> np.ndarray:
        """:meth:`Raster.overview`, the pixels picked converted alone, in bands of
        :data:`DECODED_OVERVIEW_ROWS` rows (``progress`` and ``cancelled`` as
        :meth:`WindowedRaster.overview`'s)."""
        decoded = self._decoded
        if decoded is None:  # converted whole
            return super().overview(max_size, progress, cancelled)
        pick_rows, pick_cols = self._overview_picks(max_size)
        rows = len(pick_rows)
        result = np.empty((rows, len(pick_cols), self.bands), np.float32)
        for first in range(0, rows, DECODED_OVERVIEW_ROWS):
            if cancelled is not None and cancelled():
                raise ReadCancelled(f"reading the overview of {self.path or 'the image'} "
                                    "cancelled")
            last = min(first + DECODED_OVERVIEW_ROWS, rows)
            result[first:last] = self._converted(
                decoded[pick_rows[first:last, None], pick_cols[None, :]])
            if progress is not None:
                progress(last / rows)
        return result


def _block_spans(start: int, stop: int, step: int) -> list[tuple[int, int, int]]:
    """``start:stop`` (not empty) cut into its whole blocks of ``step`` and the shorter rest,
    each as (start, stop, blocks in it)."""
    whole = (stop - start) // step * step
    spans = [(start, start + whole, whole // step), (start + whole, stop, 1)]
    return [span for span in spans if span[1] > span[0]]


def _joined(parts: list[np.ndarray], axis: int) -> np.ndarray:
    """``parts`` concatenated along ``axis``; a single part as it is (no copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)


def _check_pixel_type(name: str, path: str) -> None:
    """Raise :class:`ImageReadError` unless rasterio's band type ``name`` (e.g. ``"uint16"``,
    ``"complex_int16"``) is an integer or float type."""
    try:
        dtype = np.dtype(name)
    except TypeError:  # a GDAL type numpy lacks (complex_int16)
        dtype = None
    if dtype is None or not (np.issubdtype(dtype, np.integer)
                             or np.issubdtype(dtype, np.floating)):
        raise ImageReadError(f"{path}: unsupported pixel type {name}")


def _pyproj_crs(crs):
    """A rasterio CRS (or None) as a pyproj CRS (or None)."""
    if crs is None:
        return None
    import pyproj

    return pyproj.CRS.from_wkt(crs.to_wkt())


#: Most characters of a library's own reason quoted at the end of a message.
MAX_DETAIL_CHARS = 120
#: The image formats named where a file is none of them.
READABLE_FORMATS = "PNG, JPEG, TIFF/GeoTIFF, …"


def _detail(exc: BaseException, path: str) -> str:
    """A library's reason in ``exc`` for a message's end: its first line, without the file's
    quoted path or GDAL's leading "<file name>, " (the message names it) and the closing full
    stop, shortened to :data:`MAX_DETAIL_CHARS`."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    reason = lines[0].replace(f"'{path}'", "").removeprefix(f"{os.path.basename(path)}, ")
    reason = reason.replace(path, "the file").strip(" .")
    return textwrap.shorten(reason, MAX_DETAIL_CHARS, placeholder=" …")


#: The first bytes of the formats read (GDAL driver names) and a suffix to name each by.
MAGIC_BYTES = {b"\x89PNG\r\n\x1a\n": "PNG", b"\xff\xd8\xff": "JPEG", b"II*\x00": "GTiff",
               b"MM\x00*": "GTiff", b"II+\x00": "GTiff", b"MM\x00+": "GTiff",
               b"\x00\x00\x00\x0cjP  \r\n\x87\n": "JP2OpenJPEG", b"\xffO\xffQ": "JP2OpenJPEG"}
CONTENT_SUFFIXES = {"PNG": ".png", "JPEG": ".jpg", "GTiff": ".tif", "JP2OpenJPEG": ".jp2"}


def _content_format(path: str) -> str | None:
    """The format (a GDAL driver name) of the file ``path`` as its first bytes show it (PNG,
    JPEG, TIFF, JPEG 2000), or None (another format, or not a regular file, or not read)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as file:
            head = file.read(12)
    except OSError:
        return None
    return next((name for magic, name in MAGIC_BYTES.items() if head.startswith(magic)), None)


def _open_dataset(path: str, **options):
    """``path`` opened by rasterio, its georeferencing read from the file and its ``.aux.xml``
    only (world files and ``.prj`` are read by :mod:`core.georef`, the same way for every
    format), with rasterio's open ``options`` (``overview_level``); the caller closes it.

    Raises
    ------
    ImageReadError
        If GDAL cannot open the file as an image, or its name is not UTF-8 (rasterio passes
        names to GDAL in UTF-8); :class:`GeorefError` if the ``.aux.xml`` beside it is none
        (:func:`_check_aux_xml`).
    """
    import rasterio
    from rasterio.errors import NotGeoreferencedWarning, RasterioError

    driver = GDAL_DRIVERS.get(os.path.splitext(path)[1].lower())
    if driver is None:
        raise ImageReadError(f"{path} is not read through GDAL: name a TIFF/GeoTIFF, JPEG 2000, "
                             "ERDAS Imagine (.img), PNG or JPEG file by its suffix")
    # An .aux.xml that is no file (a FIFO would block the open forever) is left unread.
    aux = f"{path}.aux.xml"
    pam = not os.path.exists(aux) or os.path.isfile(aux)
    if os.path.isfile(aux):
        _check_aux_xml(aux)
    try:
        with rasterio.Env(GDAL_PAM_ENABLED="YES" if pam else "NO",
                          GDAL_GEOREF_SOURCES="PAM,INTERNAL" if pam else "INTERNAL"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            return rasterio.open(path, driver=driver, **options)
    except RasterioError as exc:
        content = _content_format(path)
        if content is not None and content != GDAL_DRIVERS[os.path.splitext(path)[1].lower()]:
            raise ImageReadError(
                f"{path} holds a {content} image under a {os.path.splitext(path)[1]} name, "
                "and a file is read only as the format its suffix names: rename it to "
                f"{CONTENT_SUFFIXES[content]}") from None
        raise ImageReadError(f"{path} is not an image this program can read "
                             f"({READABLE_FORMATS}; GDAL: {_detail(exc, path)})") from None
    except UnicodeEncodeError:  # bytes of the name that are not UTF-8 (lone surrogates)
        raise ImageReadError(f"cannot read {printable(path)}: its name is not UTF-8, which GDAL "
                             "needs to open it; rename the file") from None


def _dataset_georef(dataset, path: str, crs) -> Georef | RpcGeoref | None:
    """:func:`core.georef.read_georef` of an image opened by :func:`_open_dataset`, with
    what the file and its ``.aux.xml`` say (geotransform, CRS, GCPs, RPCs).

    A TIFF's own geotransform (or its ``.aux.xml``'s) wins over a world file; beside a PNG,
    JPEG, … a world file wins over the ``.aux.xml``'s, as in GDAL's PNG driver (which reads
    the world file itself whatever it is told, so that its geotransform is then the world
    file's, read here by :mod:`core.georef`).
    """
    gcps, gcp_crs = dataset.gcps
    suffix = os.path.splitext(path)[1].lower()
    windowed = suffix in WINDOWED_SUFFIXES
    world_file = not windowed and any(candidate.is_file()
                                      for candidate in world_file_candidates(path))
    kind = GDAL_FORMATS.get(suffix, "GeoTIFF") if windowed else \
        f"{os.path.basename(path)}.aux.xml"
    return read_georef(path, crs, transform=None if world_file else dataset.transform,
                       file_crs=_pyproj_crs(dataset.crs),
                       gcps=(gcps, _pyproj_crs(gcp_crs)) if gcps else None, rpcs=dataset.rpcs,
                       file_kind=kind)


def _rasterio_installed() -> bool:
    """Whether rasterio can be imported (it then is)."""
    try:
        import rasterio  # noqa: F401
    except ImportError:
        return False
    return True


def read_image_georef(path: str | os.PathLike, crs=None) -> Georef | RpcGeoref | None:
    """The georeferencing of a PNG, JPEG, … that :func:`load_image` gives it.

    :func:`core.georef.read_georef` (world file, ``.prj``, ``crs``), with what GDAL reads
    from the GDAL ``.aux.xml`` (PAM) file beside the image where there is one and rasterio
    is installed: its geotransform where no world file is beside the image, its CRS winning
    over a ``.prj`` (:func:`_dataset_georef`). Without rasterio an ``.aux.xml`` is not read.

    Raises
    ------
    GeorefError, ImageReadError, BadParameter
        As :func:`core.georef.read_georef`, or GDAL cannot open the image.
    """
    path = os.fspath(path)
    if (os.path.isfile(f"{path}.aux.xml") and _rasterio_installed()
            and os.path.splitext(path)[1].lower() in GDAL_DRIVERS):
        with _open_dataset(path) as dataset:
            return _dataset_georef(dataset, path, crs)
    return read_georef(path, crs)


#: Largest GDAL .aux.xml checked before GDAL reads it (a larger one is left to GDAL).
MAX_CHECKED_AUX_BYTES = 16 * 1024 * 1024


def _check_aux_xml(aux: str) -> None:
    """Raise :class:`GeorefError` where the GDAL ``.aux.xml`` ``aux`` is not one, or its
    ``<GeoTransform>`` is not six numbers (GDAL would ignore either silently, and the image
    would seem to have no georeferencing), or it declares entities (a document type: GDAL
    writes none, and expanding them can exhaust memory). A degenerate geotransform is refused
    where the georeferencing is read (:func:`core.georef.read_georef`)."""
    from xml.etree import ElementTree

    with open(aux, "rb") as file:
        data = file.read(MAX_CHECKED_AUX_BYTES + 1)
    if len(data) > MAX_CHECKED_AUX_BYTES:
        return
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise GeorefError(f"{aux} declares a document type, which a GDAL .aux.xml has not: "
                          "fix or remove it")
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise GeorefError(f"{aux} is not a readable GDAL .aux.xml ({exc}): fix or remove "
                          "it") from None
    if root.tag != "PAMDataset":
        raise GeorefError(f"{aux} is not a GDAL .aux.xml (its root is <{root.tag}>, not "
                          "<PAMDataset>): fix or remove it")
    transform = root.find("GeoTransform")
    if transform is not None and not _six_numbers(transform.text or ""):
        raise GeorefError(f"{aux} is not a usable GDAL .aux.xml (its <GeoTransform> "
                          f"{shortened(transform.text or '')} is not six numbers separated by "
                          "commas, and GDAL would ignore it): fix or remove it")


def _six_numbers(text: str) -> bool:
    """Whether ``text`` is six numbers separated by commas, as GDAL reads a geotransform
    (NaN or infinite ones too: :func:`core.georef.read_georef` refuses those)."""
    try:
        return len([float(term) for term in text.split(",")]) == 6
    except ValueError:
        return False


class WindowedRaster(Raster):
    """A (Geo)TIFF, or another format GDAL reads (:data:`GDAL_FORMATS`: JPEG 2000, …), left
    on disk: :meth:`read_window` reads only the window asked for.

    Holds the rasterio dataset open until :meth:`close` (or the end of a ``with`` block);
    reads are serialised by a lock, so one raster may serve a tracing thread and a display
    thread. Tiled GeoTIFFs read fastest; a stripped one reads whole rows of strips.

    Parameters
    ----------
    path : path
        The TIFF (or :data:`GDAL_FORMATS`) file.
    crs : str or pyproj.CRS, optional
        CRS to assume when neither the file nor a ``.prj`` beside it names one.
    bands : sequence of 1 or 3 ints, optional
        Band numbers (1-based) to trace; default: :func:`choose_bands`.
    grid : (Georef, width, height), optional
        Another image's pixel grid: the file is resampled onto it (bilinear, through both
        georeferencings; 0 where it has no data) and takes its size and georeferencing.

    Raises
    ------
    ImageReadError
        If rasterio cannot open the file or its pixel type is unsupported.
    BadParameter
        If ``bands`` names bands the file does not have, or ``grid`` is given and either
        georeferencing is not a transform with a CRS.
    GeorefError
        If ``grid`` is given and the file cannot be resampled onto it or does not cover it.
    """

    def __init__(self, path: str | os.PathLike, crs=None, bands=None, grid=None):
        path = os.fspath(path)
        if not _rasterio_installed():
            raise ImageReadError(f"cannot read {path}: TIFF, JPEG 2000, VRT and ERDAS images "
                                 "(and resampling onto another image's grid) need rasterio: "
                                 "pip install -e \".[geo]\"")
        from rasterio.enums import ColorInterp

        dataset = _open_dataset(path)
        try:
            count = dataset.count
            tags = dataset.colorinterp
            number_of = {tag: band for band, tag in enumerate(tags, 1)}
            colours = (ColorInterp.red, ColorInterp.green, ColorInterp.blue)
            indexes = choose_bands(
                count, bands, {band for band, tag in enumerate(tags, 1)
                               if tag == ColorInterp.alpha},
                tuple(number_of[tag] for tag in colours)
                if all(tag in number_of for tag in colours)
                else described_colours(dataset.descriptions))
            _check_pixel_type(dataset.dtypes[0], path)
            if dataset.width < 2 or dataset.height < 2:
                raise ImageReadError(f"{path}: image of {dataset.width}×{dataset.height} px "
                                     "is too small")
            georef = _dataset_georef(dataset, path, crs)
            warped = None if grid is None else _warped(dataset, georef, grid, path)
            palette = _palette(dataset) if tuple(indexes) == (1,) and grid is None \
                and tags[0] == ColorInterp.palette else None
        except BaseException:
            dataset.close()
            raise
        self.path = path
        self.georef = georef if warped is None else grid[0]
        # Each band used by its description, else by its colour tag (if a colour).
        names = [dataset.descriptions[band - 1]
                 or (tags[band - 1].name if tags[band - 1] in colours else None)
                 for band in indexes]
        self.band_note = "band 1 through its colour table" if palette is not None else \
            _band_note(count, indexes, names if all(names) else [], asked=bands is not None)
        self._palette = palette
        nodata = [dataset.nodatavals[band - 1] for band in indexes]
        # Replacing nodata by 0 needs doing only where every band declares a nodata value
        # other than 0 (NaN is read as 0 anyway).
        self._nodata = None if any(value is None or value == 0 or np.isnan(value)
                                   for value in nodata) else tuple(nodata)
        self._source = dataset
        self._dataset = dataset if warped is None else warped
        self._lock = threading.Lock()
        self._pixels: np.ndarray | None = None
        self._indexes = list(indexes)  # 1 or 3 bands, never alpha
        self.ground_resolution = ground_resolution(self.georef, (self.width / 2, self.height / 2))

    def __repr__(self) -> str:
        return (f"WindowedRaster({self.path!r}, {self.width}×{self.height} px, "
                f"{self.bands} bands, georef={self.georef!r})")

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def height(self) -> int:
        """Rows of the image (px)."""
        return int(self._dataset.height)

    @property
    def width(self) -> int:
        """Columns of the image (px)."""
        return int(self._dataset.width)

    @property
    def bands(self) -> int:
        """Bands of the image (3 for a colour-mapped one)."""
        return len(self._indexes) if self._palette is None else 3

    @property
    def pixels(self) -> np.ndarray:
        """The whole image, read on first use; ndarray of shape (rows, cols, bands), float32.

        Raises
        ------
        ImageReadError
            Above :data:`FULL_READ_LIMIT` pixels: use :meth:`overview` and :meth:`read_window`.
        """
        if self._pixels is None:
            if self.height * self.width > FULL_READ_LIMIT:
                raise ImageReadError(
                    f"{self.path}: {self.width}×{self.height} px is too large to read whole "
                    f"(limit {FULL_READ_LIMIT} px); use overview() and read_window()")
            self._pixels = np.ascontiguousarray(self._read(None, None))
        return self._pixels

    def _read_blocks(self, row0: int, row1: int, col0: int, col1: int,
                     shape: tuple[int, int]) -> np.ndarray:
        """:meth:`Raster._read_blocks` read from disk (unless ``pixels`` was read), averaged by
        GDAL: from the file's overviews where they are fine enough, leaving out nodata and
        transparent pixels, and for a colour-mapped raster as the table's colour nearest to
        the block's mean colour."""
        if self._pixels is not None:
            return super()._read_blocks(row0, row1, col0, col1, shape)
        from rasterio.windows import Window

        window = Window(col0, row0, col1 - col0, row1 - row0)
        if shape == (row1 - row0, col1 - col0):
            return self._read(window, None)
        return self._read(window, shape, "average")

    def overview_step(self, max_size: int) -> int:
        """The decimation step of :meth:`overview` (the image's ``(rows, cols)`` are
        ``(ceil(height / step), ceil(width / step))``): the step of :func:`overview_shape`,
        or where the file has internal overviews (``gdaladdo``: 2, 4, 8, …) the power of two
        just above it when that is one of them, so that the overview is that level read as
        it is (coarser than ``max_size`` asks by less than half)."""
        step = super().overview_step(max_size)
        power = 1 << (step - 1).bit_length()
        return power if step > 1 and power in (self.overview_factors() or ()) else step

    def overview_factors(self) -> list[int] | None:
        """The decimation factors of the file's internal overviews (of the first band read),
        as ``gdaladdo`` builds them; None for a raster resampled onto another grid (its
        overview is warped from the file's as GDAL chooses)."""
        if self._dataset is not self._source:
            return None
        with self._lock:
            return list(self._dataset.overviews(self._indexes[0]))

    def overview(self, max_size: int, progress=None, cancelled=None) -> np.ndarray:
        """A display image whose longer side is at most ``max_size`` px, decimated by
        :meth:`overview_step` (nearest neighbour).

        Read in bands of rows, with GDAL's block cache held to :data:`OVERVIEW_CACHE_BYTES`;
        from the coarsest of the file's own overviews that is not coarser than the step where
        it has them (the step's level read as it is, when the step is one), else sampling the
        full-resolution pixels as :meth:`Raster.overview` does. The pixels are those GDAL's
        nearest-neighbour read of that level at that size gives (where a file's overview
        factors are no powers of two, GDAL itself may take a level up to 1.2 times coarser
        than the step: the overview shown is then a little sharper than GDAL's).

        Parameters
        ----------
        max_size : int
        progress : callable, optional
            Called with the fraction read (0 < fraction ≤ 1, increasing; 1.0 last) after each
            band of rows.
        cancelled : callable, optional
            Asked before each band; when it returns true, the read stops.

        Returns
        -------
        ndarray of shape (rows, cols, bands), float32, C-ordered

        Raises
        ------
        ReadCancelled
            If ``cancelled()`` turned true.
        ImageReadError
            If GDAL cannot read the pixels.
        """
        step = self.overview_step(max_size)
        rows, cols = -(-self.height // step), -(-self.width // step)
        if cancelled is not None and cancelled():
            raise ReadCancelled(f"reading the overview of {self.path} cancelled")
        if step == 1:
            result = self.read_window(0, self.height, 0, self.width)
        elif self._dataset is not self._source:  # resampled: GDAL warps at the overview's size
            with _BLOCK_CACHE_BOUND(OVERVIEW_CACHE_BYTES):
                result = self._read(None, (rows, cols))
        else:
            factors = self.overview_factors()
            level = max(((factor, index) for index, factor in enumerate(factors)
                         if factor <= step), default=None)
            dataset = self._dataset if level is None else \
                _open_dataset(self.path, overview_level=level[1])
            try:
                result = self._sampled(dataset, rows, cols, progress, cancelled)
            finally:
                if dataset is not self._dataset:
                    dataset.close()
            return result
        if progress is not None:
            progress(1.0)
        return result

    def _sampled(self, dataset, rows: int, cols: int, progress, cancelled) -> np.ndarray:
        """Bands ``self._indexes`` of ``dataset`` (this raster's, or one of its overview
        levels) decimated to ``(rows, cols)`` by nearest neighbour, as GDAL would
        (:func:`_nearest`), read in bands of whole rows of the file's blocks."""
        from rasterio.windows import Window

        height, width = dataset.height, dataset.width
        pick_rows, pick_cols = _nearest(height, rows), _nearest(width, cols)
        block_rows, block_cols = dataset.block_shapes[self._indexes[0] - 1]
        band_rows = block_rows * max(1, -(-OVERVIEW_BAND_ROWS // block_rows))
        # Sharing no block between two bands: each block is decoded once.
        starts = np.flatnonzero(np.diff(pick_rows // band_rows)) + 1
        bounds = [0, *starts.tolist(), rows]
        sparse = height >= SPARSE_ROWS_STEP * rows
        # The blocks of one row of them, all bands (pixel-interleaved files decode them so).
        block_row_bytes = -(-width // block_cols) * block_rows * block_cols * dataset.count \
            * np.dtype(dataset.dtypes[0]).itemsize
        lock = self._lock if dataset is self._dataset else threading.Lock()
        out = np.empty((rows, cols, self.bands), np.float32)
        with _BLOCK_CACHE_BOUND(max(OVERVIEW_CACHE_BYTES, 2 * block_row_bytes)):
            for first, last in zip(bounds[:-1], bounds[1:], strict=True):
                if cancelled is not None and cancelled():
                    raise ReadCancelled(f"reading the overview of {self.path} cancelled")
                wanted = pick_rows[first:last]
                if sparse:  # only the rows kept, each read on its own
                    data = np.concatenate([
                        self._raw_read(dataset, lock, Window(0, int(row), width, 1))
                        for row in wanted], axis=1)
                else:  # the band's rows, those kept picked
                    top, span = int(wanted[0]), int(wanted[-1]) + 1 - int(wanted[0])
                    data = self._raw_read(dataset, lock, Window(0, top, width, span))
                    if span != len(wanted):
                        data = data[:, wanted - top]
                if cols != width:
                    data = data[:, :, pick_cols]
                self._pixels_of(data, out[first:last])
                if progress is not None:
                    progress(last / rows)
        return out

    def _raw_read(self, dataset, lock, window, out_shape=None, resampling: str = "nearest"):
        """Bands ``self._indexes`` of ``window`` of ``dataset`` as rasterio reads them (bands
        first, the file's pixel type), under ``lock``.

        Raises
        ------
        ImageReadError
            With GDAL's reason, if it cannot read them.
        """
        from rasterio.enums import Resampling
        from rasterio.errors import RasterioError

        try:
            with lock:
                return dataset.read(self._indexes, window=window, out_shape=out_shape,
                                    resampling=Resampling[resampling])
        except RasterioError as exc:
            reasons = [str(error) for error in (exc, exc.__cause__, exc.__context__) if error]
            reason = next((text for text in reversed(reasons) if "See previous" not in text),
                          reasons[0])
            raise ImageReadError(f"cannot read pixels of {self.path}: "
                                 f"{_detail(RuntimeError(reason), self.path)}") from None

    def _read(self, window, shape: tuple[int, int] | None,
              resampling: str = "nearest") -> np.ndarray:
        """Bands ``self._indexes`` of ``window`` (None: all), decimated to ``shape`` if given
        (by the rasterio ``Resampling`` named ``resampling``); pixels whose every band holds
        its nodata value read as 0, as NaN does. C-ordered float32 (rows, cols, bands)."""
        out_shape = None if shape is None else (len(self._indexes), *shape)
        return self._pixels_of(self._raw_read(self._dataset, self._lock, window, out_shape,
                                              resampling))

    def _pixels_of(self, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Pixels read (bands first, the file's type; changed in place) as C-ordered float32
        ``(rows, cols, bands)``, written into ``out`` where given: colour-mapped ones as their
        colours, those whose every band holds its nodata value as 0."""
        if self._palette is not None:  # colour-mapped: the colours of the indices
            rgb = self._palette[np.clip(data[0], 0, len(self._palette) - 1)]
            pixels = to_float_bands(rgb, source=self.path)
        else:
            if self._nodata is not None:  # pixels where every band holds its nodata value
                empty = np.all(data == np.asarray(self._nodata)[:, None, None], axis=0)
                data[:, empty] = 0
            return bands_last_float(data, source=self.path, out=out)
        if out is None:
            return np.ascontiguousarray(pixels)
        out[...] = pixels
        return out

    def close(self) -> None:
        """Close the file; later reads fail (``pixels`` already read stay available)."""
        self._dataset.close()
        self._source.close()  # the same dataset unless resampled


def _palette(dataset) -> np.ndarray | None:
    """The colour table of a dataset's band 1 as an (entries, 3) uint8 lookup of RGB by
    index; None when it has none."""
    try:
        table = dataset.colormap(1)
    except ValueError:  # no colour table after all
        return None
    lookup = np.zeros((max(table) + 1, 3), dtype=np.uint8)
    for index, colour in table.items():
        lookup[index] = colour[:3]
    return lookup


def has_grid(georef) -> bool:
    """Whether a raster's georeferencing (or None) places its pixel grid on the map: a
    transform with a CRS (what resampling onto another grid needs)."""
    return isinstance(georef, Georef) and georef.crs is not None


def on_same_grid(georef, other) -> bool:
    """Whether two georeferencings (or None) put pixels at the same places: False only when
    both are transforms with a CRS that differ."""
    if not (has_grid(georef) and has_grid(other)):
        return True
    return georef.crs == other.crs and georef.transform.almost_equals(other.transform)


def _warped(dataset, georef, grid, path: str):
    """A rasterio WarpedVRT of ``dataset`` (georeferenced by ``georef``) on ``grid``.

    Raises
    ------
    BadParameter
        If either georeferencing is not a transform with a CRS.
    GeorefError
        If GDAL cannot resample between the two (CRSs without a transformation between
        them, a transform it cannot invert), or no pixel of the raster falls on the grid
        (looked for on the grid decimated to at most :data:`COVERAGE_SIZE` px a side).
    """
    import rasterio
    from affine import Affine
    from rasterio.crs import CRS
    from rasterio.enums import Resampling
    from rasterio.errors import RasterioError
    from rasterio.vrt import WarpedVRT

    try:
        from rasterio._err import CPLE_BaseError  # GDAL's errors: rasterio has no public class
    except ImportError:  # a rasterio that moved it: then only its RasterioErrors are caught
        CPLE_BaseError = RasterioError

    target, width, height = grid
    for name, each in ((path, georef), ("the image", target)):
        if not has_grid(each):
            raise BadParameter(f"{path} cannot be resampled onto the image's grid: {name} has "
                               "no georeferencing with a CRS")
    options = {"src_crs": CRS.from_wkt(georef.crs.to_wkt()), "src_transform": georef.transform,
               "crs": CRS.from_wkt(target.crs.to_wkt()), "resampling": Resampling.bilinear}
    rows, cols = overview_shape(height, width, COVERAGE_SIZE)
    coarse = target.transform @ Affine.scale(width / cols, height / rows)
    try:
        with rasterio.Env():  # GDAL then reports errors through Python, not on stderr
            with WarpedVRT(dataset, transform=coarse, width=cols, height=rows, add_alpha=True,
                           **options) as probe:
                covered = bool(probe.read(probe.count).any())  # the alpha band: coverage
            warped = None if not covered else WarpedVRT(
                dataset, transform=target.transform, width=width, height=height, nodata=0,
                **options)
    except (RasterioError, CPLE_BaseError) as exc:
        reason = re.sub(r"'\{.*\}'", "(a CRS)", " ".join(str(exc).split()))  # PROJJSON out
        raise GeorefError(
            f"cannot resample the evidence raster {path} ({crs_label(georef.crs)}) onto the "
            f"image's grid ({crs_label(target.crs)}, {target.source}): "
            f"{reason[:200]}{'…' if len(reason) > 200 else ''}") from None
    if warped is None:
        raise GeorefError(f"the evidence raster {path} ({crs_label(georef.crs)}) does not "
                          f"cover the image ({crs_label(target.crs)}, {target.source}): "
                          "none of its pixels falls on the image's grid")
    return warped


def _band_note(count: int, indexes, names, asked: bool) -> str | None:
    """:attr:`Raster.band_note` for bands ``indexes`` (1-based) of a ``count``-band file."""
    if not asked and count <= 4 and tuple(indexes) in ((1,), (1, 2, 3)):
        return None
    text = f"band{'s' if len(indexes) > 1 else ''} {', '.join(map(str, indexes))} of {count}"
    return f"{text} ({', '.join(names)})" if names else text


def load_image(path: str | os.PathLike, crs=None, bands=None, grid=None) -> Raster:
    """Open an image: TIFF/GeoTIFF as a :class:`WindowedRaster`, PNG/JPEG/… in memory.

    Georeferencing (see :mod:`core.georef`) comes from the GeoTIFF itself, GDAL's
    ``.aux.xml`` beside the image (:func:`read_image_georef`) or a world file beside it, with
    its CRS from the file, the ``.aux.xml``, a ``.prj`` beside it, or ``crs``.

    Parameters
    ----------
    path : path
    crs : str or pyproj.CRS, optional
        CRS to assume when the image's georeferencing names none (e.g. ``"EPSG:32654"``).
    bands : sequence of 1 or 3 ints, optional
        Band numbers (1-based) to trace, e.g. (8, 4, 3); default: :func:`choose_bands`.
    grid : (Georef, width, height), optional
        Resample the image onto this pixel grid (:class:`WindowedRaster`; any format GDAL
        reads).

    Raises
    ------
    ImageReadError
        If the file is missing, is no image this program reads, cannot be decoded, or has
        an unsupported layout (also :class:`core.georef.GeorefError` for an unreadable world
        file or ``.prj``).
    BadParameter
        If ``crs`` is not a CRS, ``bands`` names bands the image does not have, or a PNG,
        JPEG, … would need more than the memory budget to decode
        (:func:`core.resources.check_decode_memory`, from its header).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ImageReadError(f"image file not found: {path}")
    if os.path.isdir(path):
        raise ImageReadError(f"expected an image file, got a folder: {path}")
    if not os.path.isfile(path):  # a FIFO or device would block or never end
        raise ImageReadError(f"expected an image file, got a special file: {path}")
    _check_readable(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in UNREAD_FORMATS:
        raise ImageReadError(f"{path}: {UNREAD_FORMATS[suffix]} images are not read; convert "
                             "it to a GeoTIFF, e.g. gdal_translate -co TILED=YES "
                             f"{os.path.basename(path)} out.tif")
    if grid is not None or suffix in WINDOWED_SUFFIXES:
        return WindowedRaster(path, crs, bands, grid)
    if os.path.getsize(path) == 0:
        raise ImageReadError(f"image file is empty: {path}")
    array, notes = _decode(path)
    if array.ndim == 4:  # frames (a GIF comes as one)
        if array.shape[0] != 1:
            raise ImageReadError(f"{path}: image of {array.shape[0]} frames not supported")
        array = array[0]
    if array.ndim == 3 and array.shape[0] in (2, 3, 4) and array.shape[2] > 4:
        raise ImageReadError(f"{path}: multi-page or planar image {array.shape} not supported")
    note = None
    if bands is not None:
        count = array.shape[2] if array.ndim == 3 else 1
        indexes = choose_bands(count, bands)
        array = (array if array.ndim == 3 else array[:, :, None])[:, :, [i - 1 for i in indexes]]
        note = _band_note(count, indexes, [], asked=True)
    decoded = array.ndim in (2, 3) and keeps_decoded(
        array.shape[0], array.shape[1], array.shape[2] if array.ndim == 3 else 1, array.dtype)
    if decoded:  # the bands traced, in their type (alpha dropped: a copy, then)
        pixels = np.ascontiguousarray(_colour_bands(array, source=path))
    else:
        pixels = to_float_bands(array, source=path)
    del array
    if pixels.shape[0] < 2 or pixels.shape[1] < 2:
        raise ImageReadError(f"{path}: image of {pixels.shape[1]}×{pixels.shape[0]} px "
                             "is too small")
    georef = read_image_georef(path, crs)
    centre = (pixels.shape[1] / 2, pixels.shape[0] / 2)
    details = {"path": path, "georef": georef, "band_note": note,
               "ground_resolution": ground_resolution(georef, centre), "notes": tuple(notes)}
    if decoded:
        return DecodedRaster(pixels, **details)
    return Raster(pixels=np.ascontiguousarray(pixels), **details)


class _PillowPixelLimitLifted:
    """A context in which Pillow's own pixel limit (its decompression-bomb check, which
    refuses images over 179 Mpx whatever the memory) is off, for every thread inside it:
    :func:`core.resources.check_decode_memory`, from the header, stands in for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._saved_limit = None

    def __enter__(self) -> None:
        from PIL import Image

        with self._lock:
            if self._inside == 0:
                self._saved_limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
            self._inside += 1

    def __exit__(self, *exc_info) -> None:
        from PIL import Image

        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                Image.MAX_IMAGE_PIXELS = self._saved_limit


_PILLOW_PIXEL_LIMIT_LIFTED = _PillowPixelLimitLifted()

#: What EXIF orientations 2 to 8 ask a viewer to do with the stored pixels.
EXIF_TURNS = {2: "mirror", 3: "rotate", 4: "mirror", 5: "rotate and mirror", 6: "rotate",
              7: "rotate and mirror", 8: "rotate"}


def _decode(path: str) -> tuple[np.ndarray, list[str]]:
    """Decode a PNG, JPEG, … whole, and say what a user should know of how it was read.

    Returns
    -------
    pixels : ndarray of shape (rows, cols), (rows, cols, channels) or (frames, rows, cols[,
        channels]), as decoded (unsigned integers, bool or float)
    notes : list of str
        For :attr:`Raster.notes`.

    Raises
    ------
    ImageReadError
        If the file is no image Pillow knows, or cannot be decoded (a JPEG also where libjpeg
        finds its compressed data corrupt: :func:`_check_jpeg_data`).
    BadParameter
        If decoding it would need more than the memory budget.
    """
    import imageio.v3 as iio
    from PIL import Image, UnidentifiedImageError

    notes = []
    try:
        with _PILLOW_PIXEL_LIMIT_LIFTED, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plugins probed on odd files warn noisily
            with Image.open(path) as image:  # the header only: nothing is decoded yet
                kind, deep = image.format, _decoded_at_8_bits(image)
            if deep and _rasterio_installed():
                return _read_through_gdal(path), notes
            if deep:
                notes.append(f"this {kind} stores 16 bits per band but is read at 8, as "
                             "rasterio is not installed (pip install -e \".[geo]\" keeps all 16)")
            # One opening for all (the metadata decodes the image, the read reuses it).
            with iio.imopen(path, "r", plugin="pillow") as file:
                header = file.properties()  # the header only: nothing is decoded yet
                frames = header.n_images if header.is_batch else 1
                rows, cols, *channels = header.shape[1:] if header.is_batch else header.shape
                values = frames * math.prod(channels)
                check_decode_memory(path, cols, rows, values,
                                    _kept_bytes(rows, cols, values, header.dtype))
                metadata = file.metadata(exclude_applied=False)
                # A CMYK JPEG would otherwise come as 4 bands whose last (K) reads as alpha.
                cmyk = metadata.get("mode") == "CMYK"
                array = np.asarray(file.read(mode="RGB") if cmyk else file.read())
            if kind == "JPEG":
                _check_jpeg_data(path)
    except UnidentifiedImageError:
        raise ImageReadError(f"{path} is not an image this program can read "
                             f"({READABLE_FORMATS})") from None
    except (BadParameter, ImageReadError):  # over the memory budget; GDAL's reason
        raise
    except Exception as exc:  # Pillow raises many types for undecodable files
        raise _damaged(path, _detail(exc, path)) from None
    turn = EXIF_TURNS.get(metadata.get("Orientation"))
    if turn:
        notes.append(f"this {kind} asks viewers to {turn} it (EXIF orientation "
                     f"{metadata['Orientation']}); it is shown and traced as stored, as GIS "
                     "software does")
    return array, notes


#: Scale divisor at which :func:`_check_jpeg_data` decodes a JPEG (libjpeg's smallest DCT
#: scaling: it still reads every coefficient, but transforms only one per block).
JPEG_CHECK_SCALE = 8
#: How libjpeg's warning on compressed data it cannot decode reads in a GDAL error (not its
#: "N extraneous bytes before marker", which many cameras' files give, the image whole).
LIBJPEG_CORRUPT = re.compile(r"libjpeg: (Corrupt JPEG data(?!: \d+ extraneous)[^\n]*)")


def _check_jpeg_data(path: str) -> None:
    """Raise the :func:`_damaged` error where libjpeg finds the compressed data of the JPEG
    ``path`` corrupt (a bad Huffman code, a marker amid the data, data left over): Pillow
    decodes such a file without a word, the image garbled from there on.

    Where rasterio is installed, GDAL reads the file again at 1/:data:`JPEG_CHECK_SCALE`
    scale (a fraction of a decoding's time) with libjpeg's warnings made errors, looking at
    no file beside it. Corruption that libjpeg decodes without noticing stays unseen.
    """
    if not _rasterio_installed():
        return
    import rasterio
    from rasterio.errors import RasterioError

    try:
        with rasterio.Env(GDAL_ERROR_ON_LIBJPEG_WARNING="YES", GDAL_PAM_ENABLED="NO",
                          GDAL_DISABLE_READDIR_ON_OPEN="EMPTY_DIR"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no georeferencing: not asked for
            with rasterio.open(path, driver="JPEG") as dataset:
                dataset.read(out_shape=(dataset.count,
                                        -(-dataset.height // JPEG_CHECK_SCALE),
                                        -(-dataset.width // JPEG_CHECK_SCALE)))
    except RasterioError as exc:  # else another warning, or a JPEG GDAL reads not: Pillow's
        corrupt = LIBJPEG_CORRUPT.search(f"{exc} {exc.__cause__}")  # decoding stands
        if corrupt:
            raise _damaged(path, corrupt[1]) from None
    except UnicodeEncodeError:  # a name GDAL cannot be given (not UTF-8): Pillow's word holds
        pass


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(width, height) px of a PNG, JPEG, … from its header (nothing decoded; any size).

    Raises
    ------
    ImageReadError
        If the file may not be read, is no image Pillow knows, or its header cannot be read.
    """
    from PIL import Image, UnidentifiedImageError

    path = os.fspath(path)
    _check_readable(path)
    try:
        with _PILLOW_PIXEL_LIMIT_LIFTED, Image.open(path) as image:
            return image.size
    except UnidentifiedImageError:
        raise ImageReadError(f"{path} is not an image this program can read "
                             f"({READABLE_FORMATS})") from None
    except Exception as exc:  # Pillow raises many types for broken headers
        raise _damaged(path, _detail(exc, path)) from None


def _check_readable(path: str) -> None:
    """Raise :class:`ImageReadError` if we may not read the file ``path`` (the decoders would
    report it damaged, or no image); other failures to open it are left to them."""
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        raise ImageReadError(f"cannot read {path}: permission denied") from None
    except OSError:
        pass


def _decoded_at_8_bits(image) -> bool:
    """Whether Pillow decodes an opened (not yet loaded) image at 8 bits per band although
    the file stores 16: a 16-bit colour or grey+alpha PNG (Pillow has no such modes)."""
    rawmode = image.tile[0].args if image.format == "PNG" and image.tile else None
    return (image.mode in ("RGB", "RGBA", "LA") and isinstance(rawmode, str)
            and rawmode.endswith(";16B"))


def _read_through_gdal(path: str) -> np.ndarray:
    """All bands of an image read by GDAL, once its header shows that they fit the memory
    budget: ndarray of shape (rows, cols, bands), of the file's pixel type."""
    from rasterio.errors import RasterioError

    with _open_dataset(path) as dataset:
        check_decode_memory(path, dataset.width, dataset.height, dataset.count,
                            _kept_bytes(dataset.height, dataset.width, dataset.count,
                                        dataset.dtypes[0]))
        try:
            return np.moveaxis(dataset.read(), 0, -1)
        except RasterioError as exc:
            raise _damaged(path, f"GDAL: {_detail(exc, path)}") from None


def _kept_bytes(rows: int, cols: int, values_per_pixel: int, dtype) -> int | None:
    """Bytes a value of an image of this header keeps when :func:`keeps_decoded` (its type's
    size), else None (float32 planes): for :func:`core.resources.check_decode_memory`."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return None
    return dtype.itemsize if keeps_decoded(rows, cols, values_per_pixel, dtype) else None


def _damaged(path: str, detail: str) -> ImageReadError:
    """The error for an image that cannot be decoded, with the decoder's ``detail``."""
    return ImageReadError(f"{path} is damaged or incomplete: save or download it again "
                          f"({detail})")
