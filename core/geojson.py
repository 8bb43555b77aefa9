"""GeoJSON documents of traced lines (plain dicts).

Coordinates, chosen by the ``crs`` argument and the raster's georeferencing
(:mod:`core.georef`):

* ``crs="wgs84"`` (default) on a georeferenced image: RFC 7946 longitude/latitude in
  degrees;
* ``crs="source"`` on a georeferenced image: the image's own map coordinates, and the
  collection names the CRS in the non-standard but widely read ``"crs"`` member (GeoJSON
  2008 style, read by GDAL/QGIS);
* an image without georeferencing (or whose world file names no CRS): pixel (x, y) =
  (column, row) with integer values at pixel centres, marked by
  ``"coordinate_space": "pixel"``, a ``"coordinate_note"`` and a ``"crs"`` member naming a
  local (engineering) CRS of pixels, :data:`PIXEL_CRS` (without one, GIS tools would read the
  pixels as longitude/latitude).

A CRS is named by its EPSG code only where it is that code's CRS
(:func:`core.georef.epsg_code`), else by its WKT.

Every feature also carries its pixel coordinates in ``properties["pixels"]``.

Precision: map coordinates are rounded to the fewest decimals that keep every point within
1/100 px of where it was (:func:`coordinate_decimals`), and never fewer than
:data:`LONLAT_DECIMALS` for degrees (1e-7° ≈ 1 cm) or :data:`MAP_DECIMALS` otherwise: 8
decimals of degrees for 20 cm pixels, 3 of metres.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable

import numpy as np

from core.errors import BadParameter
from core.georef import GIVE_THE_CRS, GeorefError, epsg_code
from core.output import printable, write_text_atomic
from core.raster import Raster
from core.tracer import join_legs

#: Values of the ``crs`` argument (and of the CLI's ``--crs``).
CRS_CHOICES = ("wgs84", "source")
#: Fewest decimals of degrees (1e-7° ≈ 1.1 cm).
LONLAT_DECIMALS = 7
#: Fewest decimals of projected map coordinates (millimetres for metre units).
MAP_DECIMALS = 3
#: Decimals of pixel coordinates.
PIXEL_DECIMALS = 3
#: Largest longitude (degrees) exported: beyond it the image's CRS must be wrong (within it,
#: a longitude past ±180° is an image across the antimeridian).
MAX_LONGITUDE = 360.0

#: The CRS of coordinates in pixels (WKT 1, which GDAL reads as ``LOCAL_CS``): x = column
#: (east), y = row (south), in pixels.
PIXEL_CRS = ('LOCAL_CS["image pixels",LOCAL_DATUM["image",32767],UNIT["pixel",1],'
             'AXIS["column (x)",EAST],AXIS["row (y)",SOUTH]]')

PIXEL_SPACE_NOTE = ("coordinates are image pixels (x = column, y = row, integer values at "
                    "pixel centres), not longitude/latitude: the image has no georeferencing")
NO_CRS_NOTE = ("coordinates are image pixels (x = column, y = row, integer values at pixel "
               "centres), not longitude/latitude: the image's georeferencing ({source}) names "
               f"no CRS; {GIVE_THE_CRS}")


def check_crs(crs: str) -> str:
    """Return ``crs`` if it is one of :data:`CRS_CHOICES`, else raise :class:`BadParameter`."""
    if crs not in CRS_CHOICES:
        raise BadParameter(f"unknown output crs {crs!r}; choose from {', '.join(CRS_CHOICES)}")
    return crs


def coordinate_space(raster: Raster, crs: str = "wgs84") -> str:
    """``"lonlat"``, ``"source"`` or ``"pixel"``: the coordinates a document will have."""
    check_crs(crs)
    if raster.georef is None or raster.georef.crs is None:
        return "pixel"
    return "lonlat" if crs == "wgs84" else "source"


def pixel_space_note(raster: Raster) -> str | None:
    """Why coordinates of ``raster`` stay in pixel space; None when they need not."""
    if raster.georef is None:
        return PIXEL_SPACE_NOTE
    if raster.georef.crs is None:
        return NO_CRS_NOTE.format(source=raster.georef.source)
    return None


def coordinate_decimals(raster: Raster, space: str) -> int:
    """Decimals that keep rounded coordinates within 1/100 px of the exact ones.

    Parameters
    ----------
    raster : Raster
        A georeferenced raster (with a CRS).
    space : {"lonlat", "source"}

    Returns
    -------
    int
        At least :data:`LONLAT_DECIMALS` for degrees, :data:`MAP_DECIMALS` otherwise.
    """
    georef = raster.georef
    centre = np.array([raster.width / 2, raster.height / 2])
    probe = np.vstack([centre, centre + (1, 0), centre + (0, 1)])
    out = georef.pixel_to_lonlat(probe) if space == "lonlat" else georef.pixel_to_map(probe)
    degrees = space == "lonlat" or georef.crs.is_geographic
    # How much each output axis moves per pixel step; rounding to 10^-d moves a point by
    # at most 0.5·10^-d per axis, i.e. 0.5·10^-d / per_px pixels: 10^-d <= 0.01·per_px.
    with np.errstate(invalid="ignore", over="ignore"):  # points off the CRS: inf, nan
        per_px = np.abs(out[1:] - out[0]).max(axis=0).min()
    fewest = LONLAT_DECIMALS if degrees else MAP_DECIMALS
    if not np.isfinite(per_px) or per_px <= 0:
        return fewest
    return int(np.clip(np.ceil(-np.log10(0.01 * per_px)), fewest, 12))


def coordinates(pixels: np.ndarray, raster: Raster, crs: str = "wgs84") -> list[list[list]]:
    """Output coordinates of a polyline's pixel points, rounded (see the module docstring),
    in one part, or in longitude/latitude one more per crossing of the antimeridian
    (:func:`antimeridian_parts`).

    Parameters
    ----------
    pixels : array_like of shape (N, 2)
        Pixel (x, y) = (column, row).

    Returns
    -------
    list of parts, each a list of [x, y] lists

    Raises
    ------
    GeorefError
        If a point cannot be projected, or falls beyond longitude/latitude (the image's CRS
        is then probably wrong).
    """
    points = np.asarray(pixels, dtype=np.float64).reshape(-1, 2)
    space = coordinate_space(raster, crs)
    if space == "pixel":
        return [np.round(points, PIXEL_DECIMALS).tolist()]
    georef = raster.georef
    out = georef.pixel_to_lonlat(points) if space == "lonlat" else georef.pixel_to_map(points)
    unprojected = points[~np.isfinite(out).all(1)]
    if len(unprojected):
        more = f" and {len(unprojected) - 2} more" if len(unprojected) > 2 else ""
        raise GeorefError(f"{raster.path}: pixel point{'s' if len(unprojected) > 1 else ''} "
                          f"{', '.join(map(_point, unprojected[:2]))}{more} cannot be "
                          f"projected from {georef.crs_name}")
    if space == "lonlat":
        beyond = (np.abs(out[:, 0]) > MAX_LONGITUDE) | (np.abs(out[:, 1]) > 90)
        if beyond.any():
            first = np.argmax(beyond)
            raise GeorefError(
                f"{raster.path}: pixel point {_point(points[first])} lies at longitude "
                f"{out[first, 0]:.10g}, latitude {out[first, 1]:.10g}, beyond "
                f"±{MAX_LONGITUDE:g}° or ±90°: the image's CRS ({georef.crs_name}) is "
                f"probably wrong; {GIVE_THE_CRS}")
    decimals = coordinate_decimals(raster, space)
    rounded = np.round(out, decimals)
    if space == "source":
        return [rounded.tolist()]
    return antimeridian_parts(rounded, points, georef.pixel_to_lonlat, decimals)


def _point(xy: np.ndarray) -> str:
    """``(x, y)`` for a message."""
    return f"({xy[0]:.10g}, {xy[1]:.10g})"


def line_feature(pixels: np.ndarray, raster: Raster, properties: dict | None = None,
                 crs: str = "wgs84") -> dict:
    """A LineString Feature for a polyline.

    Parameters
    ----------
    pixels : ndarray of shape (N, 2)
        The polyline in pixel (x, y), N >= 2.
    raster : Raster
        The image it was traced on (its ``path`` and ``georef`` are used).
    properties : dict, optional
        Added to the feature's properties (``source_image``, the image's file name, and
        ``pixels`` are always set).
    crs : {"wgs84", "source"}
    """
    props = {"source_image": printable(os.path.basename(raster.path)) if raster.path else None,
             "pixels": np.round(np.asarray(pixels, dtype=np.float64), PIXEL_DECIMALS).tolist()}
    props.update(properties or {})
    parts = coordinates(pixels, raster, crs)
    geometry = {"type": "LineString", "coordinates": parts[0]} if len(parts) == 1 else \
        {"type": "MultiLineString", "coordinates": parts}
    return {"type": "Feature", "geometry": geometry, "properties": props}


def traced_line_feature(legs: list, raster: Raster, properties: dict | None = None,
                        crs: str = "wgs84", kind: str | None = None) -> dict:
    """A Feature for a line traced leg by leg, the legs joined into one polyline. Every traced
    line written (``trace``, batch, the app's export) is one, with the same properties
    whatever its number of legs.

    Properties: ``kind`` (the line kind it was traced as, for a GIS to filter by),
    ``score`` (the traced legs' sum; null if none is), ``segment_scores`` and
    ``link_scores`` (per leg; null and [] for a leg drawn straight), ``anchors_px`` (where
    the legs start and end), ``segment_params`` (each leg's resolved ``guides``, ``points``
    and ``halfwidth``; null for a straight leg), ``backend`` (the first traced leg's, else
    the first leg's), plus ``properties`` (e.g. the ``params`` asked for); pixels and
    half-widths rounded to :data:`PIXEL_DECIMALS`, scores to 6 decimals.

    Parameters
    ----------
    legs : list
        Per leg, in order, each starting where the last ends: a
        :class:`core.tracer.TraceResult` (:func:`core.tracer.trace_through`'s results; one
        for a line traced in one piece) or alike (the app's segments): its ``polyline`` of
        shape (n, 2), ``score``, ``link_scores`` of shape (n - 1,), ``params`` (the resolved
        parameters; None for a leg drawn straight, not traced) and ``backend``.
    raster : Raster
        The image they were traced on.
    properties : dict, optional
        Added to the feature's properties.
    crs : {"wgs84", "source"}
    kind : str, optional
        The line kind (default: the first leg's, ``legs[0].params.line_kind``).
    """
    polyline, anchors = join_legs(legs)
    traced = [leg for leg in legs if leg.params is not None]
    props = {
        "kind": kind or legs[0].params.line_kind,
        "score": round(float(sum(leg.score for leg in traced)), 6) if traced else None,
        "segment_scores": [None if leg.params is None else round(float(leg.score), 6)
                           for leg in legs],
        "link_scores": [[round(float(v), 6) for v in leg.link_scores] for leg in legs],
        "anchors_px": np.round(anchors, PIXEL_DECIMALS).tolist(),
        "segment_params": [None if leg.params is None else
                           {"guides": leg.params.guides, "points": leg.params.points,
                            "halfwidth": round(float(leg.params.halfwidth), PIXEL_DECIMALS)}
                           for leg in legs],
        "backend": (traced or legs)[0].backend,
    }
    props.update(properties or {})
    return line_feature(polyline, raster, props, crs)


def antimeridian_parts(lonlat: np.ndarray, pixels: np.ndarray,
                       pixel_to_lonlat: Callable[[np.ndarray], np.ndarray],
                       decimals: int = LONLAT_DECIMALS) -> list[list]:
    """A line in longitude/latitude cut where it crosses the antimeridian (RFC 7946, 3.1.9).

    Parameters
    ----------
    lonlat : ndarray of shape (N, 2)
        The line's vertices, consecutive ones less than 180° of longitude apart the short way
        round (longitudes may lie beyond ±180°, as an image across the antimeridian gives).
    pixels : ndarray of shape (N, 2)
        The same vertices in the image's pixels, where the line is straight between them.
    pixel_to_lonlat : callable
        Longitude/latitude (K, 2) of pixel points (K, 2): the image's georeferencing's.
    decimals : int
        Decimals of the longitudes moved by 360° and of the crossing points' latitudes.

    Returns
    -------
    list of lists of [lon, lat]
        One part, or one more per crossing; longitudes in [-180, 180], each part ending at
        ±180° where the next begins at ∓180°, at the point of the segment in pixels that
        lies on the antimeridian (:func:`_antimeridian_latitudes`: near a pole a straight
        segment is no straight line in longitude/latitude).
    """
    lon = np.unwrap(lonlat[:, 0], period=360.0)
    lat = lonlat[:, 1]
    cell = np.floor((lon + 180.0) / 360.0)  # which copy of [-180, 180) each vertex is in
    wrapped = np.round(lon - 360.0 * cell, decimals)
    crossed = np.flatnonzero(cell[1:] != cell[:-1]) + 1  # segments i - 1 .. i that cross
    crossings = {}  # i → the latitude where segment i - 1 .. i crosses
    if crossed.size:
        latitudes = _antimeridian_latitudes(
            pixels[crossed - 1], pixels[crossed], lon[crossed - 1], lon[crossed],
            -180.0 + 360.0 * np.maximum(cell[crossed], cell[crossed - 1]), pixel_to_lonlat)
        crossings = dict(zip(crossed.tolist(), np.round(latitudes, decimals).tolist(),
                             strict=True))
    parts, current = [], [[float(wrapped[0]), float(lat[0])]]
    for i in range(1, len(lon)):
        if i in crossings:
            east = lon[i] > lon[i - 1]
            current.append([180.0 if east else -180.0, crossings[i]])
            parts.append(current)
            current = [[-180.0 if east else 180.0, crossings[i]]]
        current.append([float(wrapped[i]), float(lat[i])])
    parts.append(current)
    # A vertex on ±180° itself repeats the crossing point: keep each point once, and no part
    # that is a single point.
    parts = [[point for k, point in enumerate(part) if k == 0 or point != part[k - 1]]
             for part in parts]
    return [part for part in parts if len(part) >= 2] or parts[:1]


#: The pixel step (px) below which :func:`_antimeridian_latitudes` interpolates the longitude
#: along a segment instead of halving it further.
CROSSING_STEP_PX = 1e-3


def _antimeridian_latitudes(start: np.ndarray, end: np.ndarray, start_lon: np.ndarray,
                            end_lon: np.ndarray, boundary: np.ndarray,
                            pixel_to_lonlat: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The latitudes where pixel segments ``start``–``end`` (K, 2) cross the meridians
    ``boundary`` (K,) (±180°, or a turn further), between their ends' longitudes ``start_lon``
    and ``end_lon`` (K,) (unwrapped): found on each segment by halving it, its points taken
    to longitude/latitude, down to :data:`CROSSING_STEP_PX`, then within that step by linear
    interpolation of the longitude. Shape (K,)."""
    low, high = np.zeros(len(start)), np.ones(len(start))
    low_lon, high_lon = start_lon, end_lon
    length = np.hypot(*(end - start).T)
    west_first = low_lon < boundary
    for _ in range(int(np.ceil(np.log2(max(length.max(), CROSSING_STEP_PX)
                                       / CROSSING_STEP_PX)))):
        middle = (low + high) / 2
        lon = pixel_to_lonlat(start + middle[:, None] * (end - start))[:, 0]
        lon += 360.0 * np.round((low_lon - lon) / 360.0)  # the turn of the step's start
        before = (lon < boundary) == west_first
        low, low_lon = np.where(before, middle, low), np.where(before, lon, low_lon)
        high, high_lon = np.where(before, high, middle), np.where(before, high_lon, lon)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.nan_to_num((boundary - low_lon) / (high_lon - low_lon))
    at = low + np.clip(share, 0.0, 1.0) * (high - low)
    return pixel_to_lonlat(start + at[:, None] * (end - start))[:, 1]


def feature_collection(features: list[dict], raster: Raster, crs: str = "wgs84") -> dict:
    """A FeatureCollection that says which coordinates it holds.

    ``"coordinate_space"`` is ``"lonlat"`` (RFC 7946), ``"source"`` (with a ``"crs"``
    member naming the CRS: its EPSG code where it is an EPSG one, else its WKT) or ``"pixel"``
    (with a ``"coordinate_note"`` and a ``"crs"`` member naming :data:`PIXEL_CRS`).
    """
    space = coordinate_space(raster, crs)
    document = {"type": "FeatureCollection", "coordinate_space": space}
    if space == "pixel":
        document["coordinate_note"] = pixel_space_note(raster)
        document["crs"] = {"type": "name", "properties": {"name": PIXEL_CRS}}
    else:
        document["source_crs"] = raster.georef.crs_name
    if space == "source":
        code = epsg_code(raster.georef.crs)
        name = f"urn:ogc:def:crs:EPSG::{code}" if code is not None else raster.georef.crs_name
        document["crs"] = {"type": "name", "properties": {"name": name}}
    document["features"] = features
    return document


def write_geojson(path: str | os.PathLike, document: dict) -> None:
    """Write a GeoJSON document atomically.

    Raises
    ------
    OutputWriteError
        Naming the file when it cannot be written.
    """
    write_text_atomic(path, json.dumps(document, allow_nan=False) + "\n")


def write_feature_collection(path: str | os.PathLike, features: Iterable[dict], raster: Raster,
                             crs: str = "wgs84") -> None:
    """Write :func:`feature_collection` of ``features`` atomically, each feature encoded as it
    comes: features made one at a time (a generator) are never all held, and another thread
    (the app's window) runs between two. The text is :func:`write_geojson`'s.

    Raises
    ------
    OutputWriteError
        Naming the file when it cannot be written.
    """
    empty = json.dumps(feature_collection([], raster, crs), allow_nan=False)  # …"features": []}
    texts = [json.dumps(feature, allow_nan=False) for feature in features]
    write_text_atomic(path, f"{empty[:-2]}{', '.join(texts)}]}}\n")
