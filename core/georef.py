"""Georeferencing: the affine map from pixels to map coordinates, and the map's CRS.

Sources, in order of precedence:

* the file itself (a GeoTIFF's geotransform and CRS, read through rasterio), or GDAL's
  ``.aux.xml`` (PAM) file beside a PNG or JPEG, where rasterio is installed
  (:func:`core.raster.read_image_georef`);
* a world file beside the image (``.pgw``/``.jgw``/``.tfw``/``.wld``, also the
  ``.pngw``/``.jpgw``/``.tifw`` spellings), with its CRS from a ``.prj`` beside it or from
  a CRS option given by the caller (a CRS in the file or its ``.aux.xml`` wins);
* the GeoTIFF's ground control points (least-squares affine fit, residual reported);
* the GeoTIFF's rational polynomial coefficients (RPCs, an unorthorectified satellite scene):
  :class:`RpcGeoref`, through GDAL's RPC transformer at the scene's mean height;
* none of these: the image stays in pixel space (:func:`read_georef` returns None).

The half-pixel rule
-------------------
Points are pixel ``(x, y) = (column, row)`` with integer values at pixel *centres* (the
engine's convention, see :mod:`core`). A raster transform maps the *corner* of a pixel, so
a point maps to map coordinates through ``transform · (x + 0.5, y + 0.5)``: the centre of
the upper-left pixel, (0, 0), lands half a pixel inside the image's corner. World files
store the centre of the upper-left pixel (lines 5–6); they are turned into the corner-based
transform when read. GDAL already shifts ``AREA_OR_POINT=Point`` GeoTIFFs to the corner
convention, so every :class:`Georef` here is corner-based.

pyproj and affine (the ``geo`` extra, with rasterio) are imported only when an image has
georeferencing: images without it load and trace without them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from core.errors import BadParameter, ImageReadError
from core.output import shortened

if TYPE_CHECKING:
    import pyproj
    from affine import Affine


class GeorefError(ImageReadError):
    """A world file or ``.prj`` beside an image cannot be read (or used)."""


#: What to do where an image's georeferencing names no CRS, or a wrong one.
GIVE_THE_CRS = "add a .prj beside the image or give its CRS with --image-crs EPSG:…"


def _pyproj():
    try:
        import pyproj
    except ImportError:
        raise GeorefError("georeferenced images need pyproj and rasterio: "
                          'pip install -e ".[geo]"') from None
    return pyproj


@lru_cache(maxsize=1)
def wgs84() -> pyproj.CRS:
    """The CRS of RFC 7946 GeoJSON: WGS84 longitude, latitude (in that axis order)."""
    return _pyproj().CRS.from_epsg(4326)


@dataclass(frozen=True)
class Georef:
    """Pixel ↔ map coordinates of one image.

    Attributes
    ----------
    transform : affine.Affine
        Maps pixel-corner coordinates (column, row) to map coordinates (x, y).
    crs : pyproj.CRS or None
        The map's coordinate reference system; None when the source names none (a world
        file without ``.prj`` and no CRS option): map coordinates are then known but cannot
        be turned into longitude/latitude.
    source : str
        Where the georeferencing came from, e.g. ``"GeoTIFF"`` or ``"world file a.pgw"``.
    """

    transform: Affine
    crs: pyproj.CRS | None
    source: str

    def __repr__(self) -> str:
        return (f"Georef(transform={tuple(self.transform[:6])}, crs={self.crs_name!r}, "
                f"source={self.source!r})")

    @property
    def crs_name(self) -> str | None:
        """``"EPSG:32654"`` when the CRS is an EPSG one (:func:`epsg_code`), else its WKT; None
        without a CRS."""
        if self.crs is None:
            return None
        code = epsg_code(self.crs)
        return f"EPSG:{code}" if code is not None else self.crs.to_wkt()

    def pixel_to_map(self, points) -> np.ndarray:
        """Map coordinates of pixel points (integer values at pixel centres).

        Parameters
        ----------
        points : array_like of shape (N, 2) or (2,)
            Pixel (x, y) = (column, row).

        Returns
        -------
        ndarray of shape (N, 2), float64
            Map (x, y) in the units of :attr:`crs`.
        """
        xy = as_points(points)
        a, b, c, d, e, f = self.transform[:6]
        col, row = xy[:, 0] + 0.5, xy[:, 1] + 0.5
        return np.column_stack([a * col + b * row + c, d * col + e * row + f])

    def map_to_pixel(self, points) -> np.ndarray:
        """Pixel (x, y) of map points: the inverse of :meth:`pixel_to_map`.

        Parameters
        ----------
        points : array_like of shape (N, 2) or (2,)

        Returns
        -------
        ndarray of shape (N, 2), float64
        """
        xy = as_points(points)
        a, b, c, d, e, f = (~self.transform)[:6]
        return np.column_stack([a * xy[:, 0] + b * xy[:, 1] + c - 0.5,
                                d * xy[:, 0] + e * xy[:, 1] + f - 0.5])

    def pixel_to_lonlat(self, points) -> np.ndarray:
        """WGS84 (longitude, latitude) in degrees of pixel points (in a geographic CRS, their
        longitudes as the map has them, past ±180° too: :func:`transform_points`).

        Parameters
        ----------
        points : array_like of shape (N, 2) or (2,)

        Returns
        -------
        ndarray of shape (N, 2), float64
        """
        return transform_points(self.pixel_to_map(points), self._require_crs(), wgs84())

    def lonlat_to_pixel(self, points) -> np.ndarray:
        """Pixel (x, y) of WGS84 (longitude, latitude) points.

        Parameters
        ----------
        points : array_like of shape (N, 2) or (2,)

        Returns
        -------
        ndarray of shape (N, 2), float64
            Non-finite where a point cannot be projected into :attr:`crs`.

        Notes
        -----
        In a CRS whose map repeats along x (:func:`world_shift`: Mercator, plate carrée), a
        longitude past 180° lands one map's width further east per turn of 360° than the
        longitude that many turns back within ±180° (past -180°, further west): in EPSG:3857,
        180.01° lands just east of 180°, past the map's east edge, where an image across it
        has its pixels, not at the map's west edge as -179.99° does. In a geographic CRS it
        keeps its turn (:func:`transform_points`): 180.01° lies at 180.01° in NAD83 as in
        WGS84. In any other CRS, PROJ places it as that longitude within ±180°.
        """
        crs = self._require_crs()
        shift = world_shift(crs)
        if shift is None:
            return self.map_to_pixel(transform_points(points, wgs84(), crs))
        lonlat = as_points(points)
        turns = _turns_past_180(lonlat[:, 0])
        wrapped = np.column_stack([lonlat[:, 0] - 360.0 * turns, lonlat[:, 1]])
        return self.map_to_pixel(transform_points(wrapped, wgs84(), crs)
                                 + turns[:, None] * shift)

    def _require_crs(self) -> pyproj.CRS:
        if self.crs is None:
            raise GeorefError(f"georeferencing from {self.source} names no CRS: {GIVE_THE_CRS}")
        return self.crs


@dataclass(frozen=True)
class RpcGeoref:
    """Pixel ↔ WGS84 through a scene's rational polynomial coefficients (RPCs), for satellite
    scenes delivered unorthorectified: same interface as :class:`Georef`, with WGS84
    longitude/latitude as the map coordinates.

    GDAL's RPC transformer (rasterio's ``RPCTransformer``) needs the ground height of each
    point; with no elevation model every point is taken at ``height``, the scene's mean height
    (the RPCs' height offset). Where the ground lies h m above or below it, a point lands
    about h · tan(off-nadir angle) off on the map: exact on flat ground, an approximation in
    relief (orthorectify first with a DEM where that matters: ``gdalwarp -rpc -to
    RPC_DEM=…``). RPC pixel coordinates have (0, 0) at the centre of the upper-left pixel,
    the engine's own convention.

    Attributes
    ----------
    rpcs : rasterio.rpc.RPC
    height : float
        Height (m above the WGS84 ellipsoid) at which points are projected.
    source : str
    """

    rpcs: object
    height: float
    source: str
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __repr__(self) -> str:
        return f"RpcGeoref(height={self.height:g}, crs='EPSG:4326', source={self.source!r})"

    @property
    def crs(self) -> pyproj.CRS:
        """WGS 84: RPCs map pixels to longitude and latitude."""
        return wgs84()

    @property
    def crs_name(self) -> str:
        """``"EPSG:4326"``."""
        return "EPSG:4326"

    def _transformer(self):
        from rasterio.transform import RPCTransformer

        return RPCTransformer(self.rpcs, rpc_height=self.height)

    def pixel_to_map(self, points) -> np.ndarray:
        """WGS84 (longitude, latitude) of pixel points (N, 2) or (2,): shape (N, 2)."""
        xy = as_points(points)
        with self._lock, self._transformer() as transformer:
            lon, lat = transformer.xy(xy[:, 1], xy[:, 0], offset="center")
        return np.column_stack([np.asarray(lon, dtype=np.float64),
                                np.asarray(lat, dtype=np.float64)])

    def map_to_pixel(self, points) -> np.ndarray:
        """Pixel (x, y) of WGS84 (longitude, latitude) points (N, 2) or (2,): shape (N, 2)."""
        xy = as_points(points)
        with self._lock, self._transformer() as transformer:
            rows, cols = transformer.rowcol(xy[:, 0], xy[:, 1], op=lambda value: value)
        # GDAL answers in corner-based pixel coordinates.
        return np.column_stack([np.asarray(cols, dtype=np.float64) - 0.5,
                                np.asarray(rows, dtype=np.float64) - 0.5])

    pixel_to_lonlat = pixel_to_map
    lonlat_to_pixel = map_to_pixel


def ground_resolution(georef, point) -> float | None:
    """Metres on the ground per pixel of an image around pixel ``point`` (x, y).

    The geodesic lengths (WGS84 ellipsoid) of one pixel's step along x and along y, averaged.

    Parameters
    ----------
    georef : Georef, RpcGeoref or None
    point : array_like of shape (2,)

    Returns
    -------
    float or None
        None without a georeferencing, without a CRS, or where the point cannot be placed.

    Call it where the georeferencing was made (PROJ objects must not cross threads):
    :mod:`core.raster` does, when it reads an image.
    """
    if georef is None or georef.crs is None:
        return None
    x, y = (float(value) for value in point)
    try:
        lonlat = georef.pixel_to_lonlat([[x, y], [x + 1.0, y], [x, y + 1.0]])
    except (GeorefError, ValueError):
        return None
    if not np.all(np.isfinite(lonlat)):
        return None
    geod = _pyproj().Geod(ellps="WGS84")
    _, _, steps = geod.inv(lonlat[[0, 0], 0], lonlat[[0, 0], 1], lonlat[1:, 0], lonlat[1:, 1])
    metres = float(np.mean(steps))
    return metres if np.isfinite(metres) and metres > 0 else None


def as_points(points) -> np.ndarray:
    """``points`` as a float64 array of shape (N, 2)."""
    xy = np.asarray(points, dtype=np.float64)
    if xy.ndim == 1:
        xy = xy.reshape(1, -1)
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise BadParameter(f"expected (x, y) points of shape (N, 2), got shape {xy.shape}")
    return xy


@lru_cache(maxsize=64)
def _transformer(source_wkt: str, target_wkt: str) -> pyproj.Transformer:
    return _pyproj().Transformer.from_crs(source_wkt, target_wkt, always_xy=True)


def transform_points(points, source: pyproj.CRS, target: pyproj.CRS) -> np.ndarray:
    """Points from CRS ``source`` to CRS ``target``, in (x, y) = (easting/lon, northing/lat) order.

    Parameters
    ----------
    points : array_like of shape (N, 2) or (2,)

    Returns
    -------
    ndarray of shape (N, 2), float64
        Non-finite where PROJ cannot transform a point.

    Raises
    ------
    GeorefError
        Naming both CRSs when PROJ has no transformation between them at all (e.g. from a
        local engineering CRS to a map projection).

    Notes
    -----
    Between two geographic CRSs a longitude keeps its turn, as it does from WGS84 to itself:
    PROJ's longitude is moved by whole turns of 360° to lie within half a turn of the one
    given (compared in degrees east of Greenwich, :func:`_longitude_axis`). 180.0013° in NAD83
    is so 180.0013° in WGS84, where PROJ gives -179.9987°, and 204.2° stays 204.2°: an image
    across the antimeridian, or in 0..360° longitudes, keeps its longitudes both ways.
    """
    xy = as_points(points)
    if source == target:
        return xy.copy()
    source_wkt, target_wkt = source.to_wkt(), target.to_wkt()
    try:
        transformer = _transformer(source_wkt, target_wkt)
    except _pyproj().exceptions.ProjError:
        raise GeorefError(f"PROJ cannot transform coordinates from {source.name!r} to "
                          f"{target.name!r}") from None
    x, y = transformer.transform(xy[:, 0], xy[:, 1], errcheck=False)
    x = np.asarray(x, dtype=np.float64)
    given, found = _longitude_axis(source_wkt), _longitude_axis(target_wkt)
    if given is not None and found is not None:
        with np.errstate(invalid="ignore"):  # points PROJ cannot place: NaN, kept
            east = (xy[:, 0] * given[0] + given[1] - x * found[0] - found[1]) / 360.0
            x = x + np.round(east) * 360.0 / found[0]
    return np.column_stack([x, np.asarray(y, dtype=np.float64)])


@lru_cache(maxsize=64)
def _longitude_axis(crs_wkt: str) -> tuple[float, float] | None:
    """(degrees per unit of its longitudes, longitude of its prime meridian in degrees east of
    Greenwich) of a geographic CRS: a longitude x in it lies ``x · unit + meridian`` degrees
    east of Greenwich. None for any other CRS: projected, or derived (a rotated pole's
    longitudes are not the Earth's), or without an east axis."""
    crs = _pyproj().CRS.from_wkt(crs_wkt)
    if not crs.is_geographic or crs.is_derived:
        return None
    geodetic = crs.geodetic_crs
    east = next((axis for axis in geodetic.axis_info if axis.direction == "east"), None)
    if east is None:
        return None
    meridian = geodetic.prime_meridian
    return (float(np.degrees(east.unit_conversion_factor)),
            float(np.degrees(meridian.longitude * meridian.unit_conversion_factor)))


def _turns_past_180(lon: np.ndarray) -> np.ndarray:
    """Whole turns of 360° by which longitudes (degrees) lie past ±180°: 0 within
    [-180°, 180°], 1 in (180°, 540°], -1 in [-540°, -180°) and so on (NaN for NaN)."""
    return np.sign(lon) * np.maximum(np.ceil((np.abs(lon) - 180.0) / 360.0), 0.0)


#: Longitudes (degrees) and latitudes at which :func:`world_shift` samples a CRS's map.
_SAMPLED_LONGITUDES = -157.5 + 45.0 * np.arange(8)
_SAMPLED_LATITUDES = (-40.0, 0.0, 40.0)


def world_shift(crs: pyproj.CRS) -> np.ndarray | None:
    """The map vector (x, y) from a point to its copy 360° of longitude east, in a projected
    CRS whose map repeats along x: a cylindrical projection (Mercator, Web Mercator, plate
    carrée, equal-area cylindrical), whose map PROJ cuts at the antimeridian of its central
    meridian. None for any other CRS (geographic, or a projection that puts a point and its
    copy at one place).

    Read from PROJ's map of eight meridians 45° apart on three parallels: each parallel is a
    line along x, on which every 45° of longitude is one same step but the one across the
    cut, which goes back one map's width (eight steps).
    """
    shift = _world_shift(crs.to_wkt()) if crs.is_projected else None
    return None if shift is None else np.array(shift)


@lru_cache(maxsize=64)
def _world_shift(crs_wkt: str) -> tuple[float, float] | None:
    lon, lat = np.meshgrid(_SAMPLED_LONGITUDES, _SAMPLED_LATITUDES)
    xy = transform_points(np.column_stack([lon.ravel(), lat.ravel()]), wgs84(),
                          _pyproj().CRS.from_wkt(crs_wkt)).reshape(*lon.shape, 2)
    if not np.all(np.isfinite(xy)):
        return None
    steps = np.diff(xy, axis=1)
    step = float(np.median(steps[..., 0]))
    width = len(_SAMPLED_LONGITUDES) * step
    tolerance = 1e-6 * abs(width)
    along_x = np.all(np.abs(steps[..., 1]) <= tolerance)
    even = np.all((np.abs(steps[..., 0] - step) <= tolerance)
                  | (np.abs(steps[..., 0] - step + width) <= tolerance))
    return (width, 0.0) if width and along_x and even else None


def check_map_crs(crs: pyproj.CRS | None, where: str,
                  error: type[Exception] = GeorefError) -> pyproj.CRS | None:
    """``crs`` (or None), unless it cannot place an image on a map.

    Parameters
    ----------
    crs : pyproj.CRS or None
    where : str
        Where the CRS comes from, the error message's beginning (``"a.prj: "``, ``"CRS "``).
    error : exception class
        What to raise.

    Raises
    ------
    error
        Naming the CRS when it is geocentric (x, y, z from the Earth's centre) or only
        vertical (heights): an image's CRS must be projected or geographic.
    """
    if crs is None:
        return None
    if crs.is_geocentric:
        kind = "a geocentric CRS (x, y, z from the Earth's centre)"
    elif crs.is_vertical and not crs.is_compound:
        kind = "a vertical CRS (heights only)"
    else:
        return crs
    raise error(f"{where}{crs_label(crs)} is {kind}, not the map CRS of an image: give a "
                "projected or geographic CRS")


def epsg_code(crs: pyproj.CRS) -> int | None:
    """The EPSG code of ``crs`` where that code's definition is ``crs`` itself, else None.

    PROJ's best match (``crs.to_epsg()``) may be one of the same projection on another datum:
    UTM zone 33 on the International 1924 ellipsoid with no datum matches EPSG:23033 (ED50),
    whose datum shift moves points by some 100 m. A code is kept where PROJ identifies ``crs``
    with it for sure (100 %: equivalent, with the same name) or where the code's definition
    equals ``crs`` (but for a geographic CRS's axis order).
    """
    sure = crs.to_epsg(min_confidence=100)
    if sure is not None:
        return sure
    code = crs.to_epsg()
    return code if code is not None and _pyproj().CRS.from_epsg(code).equals(
        crs, ignore_axis_order=True) else None


def crs_label(crs: pyproj.CRS) -> str:
    """A CRS in a few words for a message: ``EPSG:32654 (WGS 84 / UTM zone 54N)``, or its
    quoted name where it is no EPSG one (:func:`epsg_code`)."""
    code = epsg_code(crs)
    return f"EPSG:{code} ({crs.name})" if code is not None else repr(crs.name)


def parse_crs(text: str) -> pyproj.CRS:
    """A CRS from user input (``"EPSG:32654"``, a PROJ string or WKT).

    Raises
    ------
    BadParameter
        Naming the text when PROJ does not understand it, or the CRS when it is geocentric
        or vertical (:func:`check_map_crs`).
    """
    pyproj = _pyproj()
    try:
        crs = pyproj.CRS.from_user_input(text)
    except pyproj.exceptions.CRSError as exc:
        raise BadParameter(f"unknown CRS {text!r}: {exc}") from None
    return check_map_crs(crs, "CRS ", BadParameter)


def world_file_candidates(image: str | os.PathLike) -> list[Path]:
    """Possible world files of an image, in the order they are tried.

    For ``a.png``: ``a.pgw``, ``a.pngw``, ``a.wld`` (and their upper-case spellings): the
    extension's first and last letters + ``w``, the extension + ``w``, then ``.wld``.
    """
    image = Path(image)
    ext = image.suffix.lower().lstrip(".")
    suffixes = ([f"{ext[0]}{ext[-1]}w", f"{ext}w"] if ext else []) + ["wld"]
    candidates = []
    for suffix in suffixes:
        candidates += [image.with_suffix(f".{suffix}"), image.with_suffix(f".{suffix.upper()}")]
    return candidates


#: Largest world file or ``.prj`` read (bytes): either holds a few hundred bytes.
MAX_SIDECAR_BYTES = 64 * 1024

#: Most characters of a file's content quoted in an error message.
MAX_QUOTED_CHARS = 80


def _read_sidecar(path: str | os.PathLike, what: str) -> str:
    """The text of a world file or ``.prj`` (UTF-8, a byte-order mark dropped), refused
    unread beyond :data:`MAX_SIDECAR_BYTES`."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_SIDECAR_BYTES + 1)
    except OSError as exc:
        raise GeorefError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SIDECAR_BYTES:
        raise GeorefError(f"{what} {path} is larger than {MAX_SIDECAR_BYTES // 1024} KiB: "
                          f"not a {what}")
    return data.decode("utf-8-sig", errors="replace")


#: Largest magnitude of a geotransform's terms (map units: larger ones are no place on Earth).
MAX_TRANSFORM_VALUE = 1e12

#: Smallest area of a pixel on the map (map units²): (1e-12 m)², or about (1e-7 m)² in
#: degrees; a smaller one is a degenerate transform, whatever its determinant's sign.
MIN_PIXEL_AREA = 1e-24

#: What a usable geotransform needs, as error messages say it (a pixel of zero area, or of
#: less than :data:`MIN_PIXEL_AREA`, has no size).
_USABLE_TRANSFORM = (f"it needs finite values below {MAX_TRANSFORM_VALUE:g} in magnitude and "
                     "a pixel size that is not zero")


def _is_usable_transform(a, b, c, d, e, f) -> bool:
    """Whether affine terms (``x = a·col + b·row + c``, ``y = d·col + e·row + f``) are finite,
    below :data:`MAX_TRANSFORM_VALUE` in magnitude and invertible (pixel area at least
    :data:`MIN_PIXEL_AREA`)."""
    terms = np.array([a, b, c, d, e, f], dtype=np.float64)
    return bool(np.all(np.abs(terms) < MAX_TRANSFORM_VALUE)
                and abs(a * e - b * d) >= MIN_PIXEL_AREA)


def _terms(values) -> str:
    """Numbers as ``"0.2, 0, 388000"`` for an error message."""
    return ", ".join(f"{value:g}" for value in values)


def read_world_file(path: str | os.PathLike) -> Affine:
    """The corner-based transform of a world file.

    A world file holds six numbers, one a line: A (x pixel size), D (rotation), B (rotation),
    E (y pixel size, negative for north-up), C, F (map x, y of the *centre* of the upper-left
    pixel). The returned transform maps pixel corners, so its offset is moved half a pixel
    back: ``(C - A/2 - B/2, F - D/2 - E/2)``.

    Raises
    ------
    GeorefError
        If the file cannot be read, is larger than :data:`MAX_SIDECAR_BYTES`, does not hold
        six numbers, or is degenerate.
    """
    text = _read_sidecar(path, "world file")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    try:
        a, d, b, e, c, f = (float(line) for line in lines)
    except ValueError:
        raise GeorefError(f"world file {path}: expected six numbers one a line, "
                          f"got {shortened(lines[:8], MAX_QUOTED_CHARS)}") from None
    if not _is_usable_transform(a, b, c, d, e, f):
        raise GeorefError(f"world file {path}: not a usable transform "
                          f"({_terms([a, d, b, e, c, f])}): {_USABLE_TRANSFORM}")
    _pyproj()  # a world file is of no use without pyproj: say so now
    from affine import Affine

    return Affine(a, b, c - a / 2 - b / 2, d, e, f - d / 2 - e / 2)


def read_prj(path: str | os.PathLike) -> pyproj.CRS:
    """The CRS in a ``.prj`` file (ESRI or OGC WKT, or anything PROJ reads).

    Raises
    ------
    GeorefError
        If the file cannot be read, is larger than :data:`MAX_SIDECAR_BYTES`, PROJ does not
        understand it, or its CRS is geocentric or vertical (:func:`check_map_crs`).
    """
    text = _read_sidecar(path, ".prj file").strip()
    pyproj = _pyproj()
    try:
        crs = pyproj.CRS.from_user_input(text)
    except pyproj.exceptions.CRSError as exc:
        reason = (str(exc).replace(text, shortened(text, MAX_QUOTED_CHARS)) if text
                  else "the file is empty")
        raise GeorefError(f"{path}: not a CRS PROJ understands: {reason}") from None
    return check_map_crs(crs, f"{os.fspath(path)}: ")


def prj_candidates(image: str | os.PathLike) -> list[Path]:
    """Possible ``.prj`` files of an image, in the order they are tried."""
    image = Path(image)
    return [image.with_suffix(".prj"), image.with_suffix(".PRJ")]


def sidecar_files(image: str | os.PathLike) -> list[Path]:
    """Every file beside an image that can change its georeferencing: world files, ``.prj``
    and GDAL's ``.aux.xml`` (existing or not)."""
    image = Path(image)
    return (world_file_candidates(image) + prj_candidates(image)
            + [image.with_name(image.name + ".aux.xml")])


def sidecar_crs(image: str | os.PathLike, crs: str | pyproj.CRS | None) -> pyproj.CRS | None:
    """The CRS of an image's sidecar georeferencing: its ``.prj`` if any, else ``crs``."""
    for prj in prj_candidates(image):
        if prj.is_file():
            return read_prj(prj)
    if isinstance(crs, str):
        return parse_crs(crs)
    return check_map_crs(crs, "CRS ", BadParameter)


#: Largest RMS residual of a ground control point fit, as a share of the points' extent (px)
#: and at least :data:`MIN_GCP_RESIDUAL_LIMIT` px: points further off every affine map are
#: mistaken (a large scene's grid of points, such as a radar scene's, fits within it).
MAX_GCP_RESIDUAL_SHARE = 0.02
MIN_GCP_RESIDUAL_LIMIT = 5.0


def gcp_georef(gcps, crs: pyproj.CRS | None, file_kind: str = "GeoTIFF") -> Georef:
    """Georeferencing from ground control points: the least-squares affine fit.

    Parameters
    ----------
    gcps : sequence of rasterio.control.GroundControlPoint
        Pixel (col, row) corner-based, map (x, y); at least 3 not on one line.
    crs : pyproj.CRS or None
        The CRS the GCPs' map coordinates are in.
    file_kind : str
        Where the GCPs come from, for :attr:`Georef.source`.

    Raises
    ------
    GeorefError
        If there are fewer than 3 GCPs, their pixels or map points are collinear, the fit is
        no usable transform, or its RMS residual is above :data:`MAX_GCP_RESIDUAL_SHARE` of
        the points' extent (and :data:`MIN_GCP_RESIDUAL_LIMIT` px).
    """
    from rasterio.transform import from_gcps

    pixels = np.array([[gcp.col, gcp.row] for gcp in gcps], dtype=np.float64)
    world = np.array([[gcp.x, gcp.y] for gcp in gcps], dtype=np.float64)
    if np.linalg.matrix_rank(np.column_stack([pixels, np.ones(len(gcps))])) < 3:
        raise GeorefError(f"{len(gcps)} ground control points do not fix an affine "
                          "georeferencing (need 3 or more, not on one line)")
    # GDAL's fit fails on map points on one line, and rasterio then returns uninitialised
    # memory: check the map points, and what comes back.
    transform = None
    if (np.all(np.isfinite(world))
            and np.linalg.matrix_rank(np.column_stack([world, np.ones(len(gcps))])) == 3):
        transform = from_gcps(gcps)
    if transform is None or not _is_usable_transform(*transform[:6]):
        raise GeorefError(f"its {len(gcps)} ground control points do not determine a transform "
                          "(their map points are on one line, not finite, or fit no invertible "
                          "affine map)")
    fitted = Georef(transform, crs, "")
    residual = fitted.map_to_pixel(world) - (pixels - 0.5)
    rms = float(np.sqrt((residual ** 2).sum(axis=1).mean()))
    limit = max(MIN_GCP_RESIDUAL_LIMIT, MAX_GCP_RESIDUAL_SHARE * float(np.ptp(pixels, 0).max()))
    if not rms <= limit:
        raise GeorefError(f"its {len(gcps)} ground control points fit no affine map: RMS "
                          f"residual {rms:.3g} px, above {limit:.3g} px")
    return Georef(transform, crs, f"{file_kind} ground control points ({len(gcps)}, affine "
                                  f"fit, RMS residual {rms:.2f} px)")


def read_georef(image: str | os.PathLike, crs: str | pyproj.CRS | None = None,
                transform: Affine | None = None,
                file_crs: pyproj.CRS | None = None, gcps=None, rpcs=None,
                file_kind: str = "GeoTIFF") -> Georef | RpcGeoref | None:
    """The georeferencing of an image, or None for pixel space.

    Parameters
    ----------
    image : path
        The image file; its world file and ``.prj`` are looked for beside it.
    crs : str or pyproj.CRS, optional
        CRS to assume when neither the file nor a ``.prj`` names one.
    transform : affine.Affine, optional
        The geotransform stored in the file itself (a GeoTIFF's), if any; it wins over a
        world file.
    file_crs : pyproj.CRS, optional
        The CRS stored in the file itself, if any; it wins over ``.prj`` and ``crs``.
    gcps : (non-empty list of GroundControlPoint, pyproj.CRS or None), optional
        The file's ground control points and their CRS, used (affine fit, :func:`gcp_georef`)
        when it has no geotransform and no world file is beside it.
    rpcs : rasterio.rpc.RPC, optional
        The file's RPCs, used (:class:`RpcGeoref`) when nothing above georeferences it.
    file_kind : str
        What gave ``transform``, ``file_crs``, ``gcps`` and ``rpcs``, for
        :attr:`Georef.source`: ``"GeoTIFF"``, or a PNG's or JPEG's ``.aux.xml`` (GDAL's PAM
        file), e.g. ``"a.png.aux.xml"``.

    Raises
    ------
    GeorefError
        If a world file or ``.prj`` is unreadable, the geotransform is not invertible, or
        the GCPs fix no affine map.
    BadParameter
        If ``crs`` is not a CRS.
    """
    file_crs = check_map_crs(file_crs, f"{os.fspath(image)}: ")
    if transform is not None and not transform.is_identity:
        if not _is_usable_transform(*transform[:6]):
            raise GeorefError(f"{os.fspath(image)}: its geotransform ({_terms(transform[:6])}) "
                              f"is not usable: {_USABLE_TRANSFORM}")
        return Georef(transform, file_crs or sidecar_crs(image, crs), file_kind)
    for candidate in world_file_candidates(image):
        if candidate.is_file():
            return Georef(read_world_file(candidate), file_crs or sidecar_crs(image, crs),
                          f"world file {candidate.name}")
    if gcps is not None:
        points, gcp_crs = gcps
        gcp_crs = check_map_crs(gcp_crs, f"{os.fspath(image)}: its ground control points' ")
        try:
            return gcp_georef(points, gcp_crs or file_crs or sidecar_crs(image, crs), file_kind)
        except GeorefError as exc:
            raise GeorefError(f"{os.fspath(image)}: {exc}") from None
    if rpcs is not None:
        height = float(rpcs.height_off)
        georef = RpcGeoref(rpcs, height, f"{file_kind} RPCs (no elevation model: every point "
                                         f"at the scene's mean height, {height:g} m)")
        _check_rpcs(georef, image)
        return georef
    return None


def _check_rpcs(georef: RpcGeoref, image: str | os.PathLike) -> None:
    """Raise GeorefError unless the RPCs map the scene's centre pixel to a lon/lat that maps
    back to it (degenerate coefficients: GDAL refuses them, or they give no finite point)."""
    import warnings

    import rasterio
    import rasterio.errors

    centre = np.array([[georef.rpcs.samp_off, georef.rpcs.line_off]], dtype=np.float64)
    try:  # in a rasterio.Env, GDAL reports through Python instead of printing to stderr
        with rasterio.Env(), warnings.catch_warnings():
            warnings.simplefilter("ignore", rasterio.errors.TransformWarning)
            lonlat = georef.pixel_to_lonlat(centre)
            back = georef.lonlat_to_pixel(lonlat) if np.all(np.isfinite(lonlat)) else lonlat
    except Exception as exc:  # GDAL's errors (rasterio._err.CPLE_*) have no public class
        raise GeorefError(f"{os.fspath(image)}: its RPCs cannot be used: {exc}") from None
    if not (np.all(np.isfinite(back)) and np.abs(lonlat[0, 1]) <= 90
            and np.hypot(*(back - centre)[0]) <= 1.0):
        raise GeorefError(f"{os.fspath(image)}: its RPCs do not map pixels to the ground "
                          f"(the scene's centre pixel {centre[0].tolist()} goes to "
                          f"lon/lat {lonlat[0].tolist()} and back to {back[0].tolist()})")
