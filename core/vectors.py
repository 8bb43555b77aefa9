"""Line vectors (GeoJSON) on an image's pixel grid: batch seeds and the app's imported lines.

Seeds (:func:`read_seeds`, batch mode) are LineStrings or MultiLineStrings in RFC 7946
longitude/latitude, or in an image's pixel coordinates when ``properties.image`` names it;
:func:`seeds_in_image` puts them on one image's grid, clipped to it (:func:`lines_in_image`).

Imported lines (:func:`read_lines`, the app's File ▸ Import lines) are read as their document
says:

* ``"coordinate_space": "pixel"`` (roadtracer's export of an image without georeferencing):
  pixel (x, y) of this image;
* a ``"crs"`` member naming a projected CRS (roadtracer's ``--crs source`` export, or older
  GeoJSON): map coordinates in that CRS;
* otherwise WGS84 longitude/latitude, projected through the image's georeferencing; a feature
  whose ``properties.image`` names this image is in its pixels and one naming another image is
  skipped.

A line exported by roadtracer carries its anchors in pixels (``anchors`` from the app,
``anchors_px`` from batch). Where they agree with the geometry's two ends (within
:data:`ANCHOR_TOLERANCE_PX`) they become the imported line's anchors, so the line comes back
as it was drawn; otherwise every vertex of the geometry is an anchor. Lines are clipped to the
image, and anchors closer than :data:`MIN_SEGMENT_PX` to the previous one are dropped, as for
seeds.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field

import numpy as np

from core.errors import BadParameter
from core.georef import parse_crs, transform_points
from core.output import read_json, shortened
from core.raster import Raster
from core.tracer import LINE_KINDS


@dataclass(frozen=True)
class Seed:
    """One seed line.

    Attributes
    ----------
    id : str
        The feature's ``id``, else ``#<index>`` in the file; ``/<k>`` for MultiLineString parts.
    vertices : ndarray of shape (N, 2), float64
        Pixel (x, y) when ``image`` is set, else WGS84 (longitude, latitude).
    image : str or None
        File name in IMAGES_DIR whose pixel coordinates ``vertices`` are in.
    properties : dict
        The feature's properties, copied to every line traced from it.
    """

    id: str
    vertices: np.ndarray
    image: str | None = None
    properties: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    """Something that did not trace: a whole image, a seed, or one segment of a seed."""

    reason: str
    seed: str | None = None
    segment: int | None = None

    def describe(self) -> str:
        """One line: where (seed, segment) and why."""
        where = "" if self.seed is None else f"seed {self.seed}" + (
            "" if self.segment is None else f" segment {self.segment}")
        return f"{where}: {self.reason}" if where else self.reason


# ----------------------------------------------------------------------------------- seeds
#: Most vertices a line of a GeoJSON file may have (an OpenStreetMap way has hundreds; a
#: million would hold the application's window for many seconds).
MAX_LINE_VERTICES = 100_000


def feature_lines(feature, index: int, lonlat: bool = True) -> tuple[list[Seed], list[Failure]]:
    """The seed lines of one GeoJSON feature (``index``: its place in the file), or why it is
    not one. With ``lonlat``, vertices of features naming no image must be longitude/latitude;
    without, they are taken as they are (a document in pixels or a projected CRS)."""
    if not isinstance(feature, dict) or feature.get("type") != "Feature":
        return [], [Failure(f"feature #{index} is not a GeoJSON Feature", f"#{index}")]
    feature_id = feature.get("id")
    if feature_id is not None and (not isinstance(feature_id, str | numbers.Real)
                                   or isinstance(feature_id, bool)):
        return [], [Failure(f"id {shortened(feature_id)} is not a string or number "
                            "(RFC 7946)", f"#{index}")]
    seed_id = f"#{index}" if feature_id is None else str(feature_id)
    properties = feature.get("properties") or {}
    geometry = feature.get("geometry") or {}
    if not isinstance(properties, dict) or not isinstance(geometry, dict):
        return [], [Failure("properties and geometry must be objects", seed_id)]
    image = properties.get("image")
    if image is not None and (not isinstance(image, str) or not image):
        return [], [Failure(f"properties.image={image!r} is not a file name", seed_id)]
    kind = geometry.get("type")
    if kind == "LineString":
        parts = [(seed_id, geometry.get("coordinates"))]
    elif kind == "MultiLineString" and isinstance(geometry.get("coordinates"), list):
        parts = [(f"{seed_id}/{k}", c) for k, c in enumerate(geometry["coordinates"])]
    else:
        return [], [Failure(f"geometry type {kind!r} is not a LineString or "
                            "MultiLineString", seed_id)]
    seeds, failures = [], []
    for part_id, coords in parts:
        if isinstance(coords, list) and len(coords) > MAX_LINE_VERTICES:
            failures.append(Failure(f"a line of {len(coords)} vertices: at most "
                                    f"{MAX_LINE_VERTICES} are read", part_id))
            continue
        try:
            vertices = np.array([_position(vertex) for vertex in coords])
        except (TypeError, ValueError, OverflowError):
            failures.append(Failure(f"coordinates {shortened(coords)} are not [x, y] "
                                    "number pairs", part_id))
            continue
        if vertices.ndim != 2 or vertices.shape[0] < 2 or vertices.shape[1] != 2:
            failures.append(Failure(f"a line needs at least 2 [x, y] vertices, got "
                                    f"{shortened(coords)}", part_id))
        elif not np.all(np.isfinite(vertices)):
            failures.append(Failure("coordinates are not finite", part_id))
        elif lonlat and image is None and (np.abs(vertices[:, 0]).max() > 180
                                           or np.abs(vertices[:, 1]).max() > 90):
            failures.append(Failure(
                f"vertex {vertices[np.argmax(np.abs(vertices).max(1))].tolist()} is not "
                "longitude/latitude (seeds in pixel coordinates need properties.image)",
                part_id))
        else:
            seeds.append(Seed(part_id, vertices, image, properties))
    return seeds, failures


def _position(vertex) -> list[float]:
    """(x, y) of a GeoJSON position: a list of 2 or more numbers (a height and any further
    values, such as a GPS track's time, are dropped).

    Raises
    ------
    TypeError
        If ``vertex`` is anything else (text, an object, a bool, a single number).
    """
    if not (isinstance(vertex, list | tuple) and len(vertex) >= 2 and all(
            isinstance(value, numbers.Real) and not isinstance(value, bool) for value in vertex)):
        raise TypeError(f"{vertex!r} is not a position")
    return [float(vertex[0]), float(vertex[1])]


def read_seeds(path: str | os.PathLike) -> tuple[list[Seed], list[Failure]]:
    """Seed lines of a GeoJSON file, and the features that are not usable seeds.

    Accepts a FeatureCollection, a single Feature, or a bare (Multi)LineString geometry.

    Returns
    -------
    seeds : list of Seed
    failures : list of Failure
        One per feature (or MultiLineString part) that is not a usable seed, e.g. one whose
        ``kind`` property is not one of :data:`core.tracer.LINE_KINDS` while no OpenStreetMap
        tag says its kind (:func:`line_kind_of`).

    Raises
    ------
    BadParameter
        If the file cannot be read or is not a GeoJSON object at all.
    """
    seeds, failures = [], []
    for index, feature in enumerate(geojson_features(read_json(path, "seeds file"), path)):
        found, bad = feature_lines(feature, index)
        failures += bad
        for seed in found:
            kind = seed.properties.get("kind")
            if kind is None or line_kind_of(seed.properties) is not None:
                seeds.append(seed)
            else:
                failures.append(Failure(f"properties.kind={shortened(kind)} is not a line kind "
                                        f"({' or '.join(LINE_KINDS)}), nor does a highway or "
                                        "waterway tag say one", seed.id))
    return seeds, failures


def geojson_features(document, path) -> list:
    """The features of a GeoJSON FeatureCollection, Feature or bare (Multi)LineString.

    Raises
    ------
    BadParameter
        If ``document`` (read from ``path``) is none of these.
    """
    kind = document.get("type") if isinstance(document, dict) else None
    if kind == "FeatureCollection":
        if not isinstance(document.get("features"), list):
            raise BadParameter(f'{path} is a FeatureCollection whose "features" must be a list '
                               f'(it is {shortened(document.get("features"), 40)})')
        return document["features"]
    if kind == "Feature":
        return [document]
    if kind in ("LineString", "MultiLineString"):
        return [{"type": "Feature", "geometry": document, "properties": {}}]
    raise BadParameter(f"{path} is not a GeoJSON FeatureCollection, Feature or LineString "
                       f"(type {kind!r})")


# -------------------------------------------------------------------------------- matching
def clip_segment(p: np.ndarray, q: np.ndarray, width: int,
                 height: int) -> tuple[np.ndarray, np.ndarray, bool, bool] | None:
    """Clip segment p–q to the pixel-centre box ``[0, width-1] × [0, height-1]``.

    Parameters
    ----------
    p, q : ndarray of shape (2,)
        Pixel (x, y) end points (non-finite: the segment is dropped).

    Returns
    -------
    (start, end, start_clipped, end_clipped) or None when the segment misses the box.
    """
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
        return None
    d = q - p
    t0, t1 = 0.0, 1.0
    for pk, qk in ((-d[0], p[0]), (d[0], width - 1 - p[0]),
                   (-d[1], p[1]), (d[1], height - 1 - p[1])):
        if pk == 0:
            if qk < 0:
                return None
            continue
        t = qk / pk
        if pk < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
    if t0 > t1:
        return None
    upper = np.array([width - 1, height - 1], dtype=np.float64)
    start = np.clip(p + t0 * d, 0, upper)
    end = np.clip(p + t1 * d, 0, upper)
    return start, end, t0 > 0, t1 < 1


def lines_in_image(vertices_px: np.ndarray, width: int, height: int) -> list[np.ndarray]:
    """Pieces of a polyline inside an image, each segment clipped to it.

    Consecutive segments that stay inside join into one piece; clipped pieces shorter
    than 2 px (a corner grazing the border) are dropped.

    Parameters
    ----------
    vertices_px : ndarray of shape (N, 2)
        Pixel (x, y); may lie outside the image or be non-finite.

    Returns
    -------
    list of ndarray of shape (K, 2), K >= 2
    """
    pieces: list[list[np.ndarray]] = []
    joined = False
    for p, q in zip(vertices_px[:-1], vertices_px[1:], strict=True):
        clipped = clip_segment(p, q, width, height)
        if clipped is None:
            joined = False
            continue
        start, end, start_clipped, end_clipped = clipped
        if (start_clipped or end_clipped) and np.hypot(*(end - start)) < 2:
            joined = False
            continue
        if joined and not start_clipped:
            pieces[-1].append(end)
        else:
            pieces.append([start, end])
        joined = not end_clipped
    return [np.array(piece) for piece in pieces]


def centre_longitude(raster: Raster) -> float | None:
    """The longitude of the centre of an image in degrees (its CRS geographic), which
    :func:`near_centre` reads lines near; None for an image in a projected CRS (or whose
    centre cannot be projected)."""
    georef = raster.georef
    if not georef.crs.is_geographic:
        return None
    centre = georef.pixel_to_lonlat([[(raster.width - 1) / 2, (raster.height - 1) / 2]])
    return float(centre[0, 0]) if np.all(np.isfinite(centre)) else None


def near_centre(line: np.ndarray, centre: float | None) -> np.ndarray:
    """A longitude/latitude line (N, 2) as an image in degrees whose centre lies at longitude
    ``centre`` reads it: its longitudes unwrapped along it (no jump of 360° between neighbours)
    and moved by a multiple of 360° so that its first vertex lies within 180° of the centre;
    with ``centre`` None (an image in a projected CRS), the line as it is. On an image that
    runs past 180° (or starts past it, 0..360°), -179.9° is then 180.1°."""
    if centre is None:
        return line
    line = np.array(line, dtype=np.float64)
    line[:, 0] = np.unwrap(line[:, 0], period=360.0)
    line[:, 0] += 360.0 * np.round((centre - line[0, 0]) / 360.0)
    return line


def seeds_in_image(seeds, image_name: str, raster: Raster) -> list[tuple[Seed, np.ndarray]]:
    """The seed lines to trace on one image, in its pixel coordinates.

    Seeds naming ``image_name`` are taken as they are; lon/lat seeds are projected through
    the raster's georeferencing and clipped to it (none when it has no CRS).

    Returns
    -------
    list of (Seed, ndarray of shape (K, 2) pixel vertices)
    """
    georef = raster.georef
    lines = [(seed, seed.vertices) for seed in seeds if seed.image == image_name]
    lonlat = [seed for seed in seeds if seed.image is None]
    if not lonlat or georef is None or georef.crs is None:
        return lines
    # One projection call for every vertex of every lon/lat seed, then split per seed.
    centre = centre_longitude(raster)
    pixels = georef.lonlat_to_pixel(np.vstack([near_centre(seed.vertices, centre)
                                               for seed in lonlat]))
    ends = np.cumsum([len(seed.vertices) for seed in lonlat])
    upper = (raster.width - 1, raster.height - 1)
    for seed, vertices in zip(lonlat, np.split(pixels, ends[:-1]), strict=True):
        finite = vertices[np.all(np.isfinite(vertices), axis=1)]
        if not finite.size or np.any(finite.max(0) < 0) or np.any(finite.min(0) > upper):
            continue  # the seed's bounding box misses the image
        lines += [(seed, piece) for piece in lines_in_image(vertices, raster.width,
                                                            raster.height)]
    return lines


#: Seed vertices closer than this (px) to the previous kept vertex are dropped before tracing.
MIN_SEGMENT_PX = 2.0


def without_close_vertices(vertices: np.ndarray) -> np.ndarray:
    """Drop each vertex closer than :data:`MIN_SEGMENT_PX` to the last one kept (repeated or
    near-repeated vertices are common in GIS data; a segment needs two distinct ends).

    Parameters
    ----------
    vertices : ndarray of shape (N, 2)

    Returns
    -------
    ndarray of shape (K, 2), K <= N
    """
    kept = [vertices[0]]
    for vertex in vertices[1:]:
        if np.hypot(*(vertex - kept[-1])) >= MIN_SEGMENT_PX:
            kept.append(vertex)
    return np.array(kept)


def line_kind_of(properties: dict) -> str | None:
    """"road" or "river" as a feature's properties say: its ``kind`` ("road" or "river"), else
    OpenStreetMap's tags (``waterway=*``: a river, ``highway=*``: a road); None if they say
    neither."""
    kind = properties.get("kind")
    if kind in LINE_KINDS:
        return kind
    if properties.get("waterway"):
        return "river"
    if properties.get("highway"):
        return "road"
    return None


#: Exported anchors are trusted when the geometry's ends lie this close to them (px).
ANCHOR_TOLERANCE_PX = 2.0
#: CRS names that mean longitude/latitude in a GeoJSON ``crs`` member.
LONLAT_NAMES = ("urn:ogc:def:crs:OGC:1.3:CRS84", "urn:ogc:def:crs:OGC::CRS84",
                "urn:ogc:def:crs:EPSG::4326", "EPSG:4326")


@dataclass(frozen=True)
class ImportedLine:
    """One line to trace on the image.

    Attributes
    ----------
    name : str
        The feature's ``name`` property, else its id (``#<index>`` in the file).
    kind : str or None
        "road" or "river" as the feature's properties say (:func:`line_kind_of`), if they do.
    anchors : ndarray of shape (K, 2), K >= 2
        Pixel (x, y), inside the image, consecutive ones at least ``MIN_SEGMENT_PX`` apart.
    """

    name: str
    kind: str | None
    anchors: np.ndarray


def read_lines(path: str | os.PathLike, raster: Raster,
               image_name: str) -> tuple[list[ImportedLine], list[Failure]]:
    """The lines of a GeoJSON file that lie on ``raster`` (the image file ``image_name``).

    Returns
    -------
    lines : list of ImportedLine
        One per piece of a feature inside the image.
    failures : list of Failure
        Features that are not lines, name another image, cannot be projected, or miss it.

    Raises
    ------
    BadParameter
        If the file cannot be read, is not GeoJSON, or names a CRS PROJ does not know.
    GeorefError
        If PROJ cannot transform from the CRS it names to the image's.
    """
    document = read_json(path, "GeoJSON file")
    features = geojson_features(document, path)
    space, crs = _coordinates_of(document)
    georef = raster.georef
    centre = centre_longitude(raster) if space == "lonlat" and georef is not None \
        and georef.crs is not None else None
    lines, failures = [], []
    for index, feature in enumerate(features):
        seeds, bad = feature_lines(feature, index, lonlat=space == "lonlat")
        failures += bad
        for seed in seeds:
            if seed.image is not None and seed.image != image_name:
                failures.append(Failure(f"properties.image names another image "
                                        f"({seed.image})", seed.id))
                continue
            try:
                pixels = _to_pixels(seed, space, crs, raster, centre)
            except BadParameter as exc:
                failures.append(Failure(str(exc), seed.id))
                continue
            pieces = [without_close_vertices(piece)
                      for piece in lines_in_image(_anchors(seed.properties, pixels),
                                                  raster.width, raster.height)]
            pieces = [piece for piece in pieces if len(piece) >= 2]
            if not pieces:
                failures.append(Failure(f"no part of it longer than {MIN_SEGMENT_PX:g} px "
                                        "lies on the image", seed.id))
            name = seed.properties.get("name")
            name = name if isinstance(name, str) and name else seed.id
            kind = line_kind_of(seed.properties)
            for number, piece in enumerate(pieces, 1):
                lines.append(ImportedLine(name if len(pieces) == 1 else f"{name} ({number})",
                                          kind, piece))
    return lines, failures


def _coordinates_of(document) -> tuple[str, object]:
    """("pixel" | "source" | "lonlat", the source pyproj CRS or None) of a GeoJSON document."""
    if not isinstance(document, dict):
        return "lonlat", None
    if document.get("coordinate_space") == "pixel":
        return "pixel", None
    member = document.get("crs")
    properties = member.get("properties") if isinstance(member, dict) else None
    name = properties.get("name") if isinstance(properties, dict) else None
    if not isinstance(name, str) or name in LONLAT_NAMES:
        return "lonlat", None
    return "source", parse_crs(name)


def _to_pixels(seed: Seed, space: str, crs, raster: Raster, centre: float | None) -> np.ndarray:
    """Pixel (x, y) of a seed's vertices, shape (N, 2), lon/lat read near the image's centre
    longitude ``centre`` (:func:`near_centre`); BadParameter if they cannot be."""
    if seed.image is not None or space == "pixel":
        return seed.vertices
    georef = raster.georef
    if georef is None or georef.crs is None:
        raise BadParameter("map coordinates, but the image has no georeferencing with a CRS "
                           "(lines in pixels come from an image without one)")
    if space == "lonlat":
        return georef.lonlat_to_pixel(near_centre(seed.vertices, centre))
    return georef.map_to_pixel(transform_points(seed.vertices, crs, georef.crs))


def _anchors(properties: dict, pixels: np.ndarray) -> np.ndarray:
    """The exported pixel anchors of a roadtracer line when they match its geometry's ends,
    else the geometry's vertices ``pixels`` (N, 2)."""
    for key in ("anchors", "anchors_px"):
        try:
            anchors = np.asarray(properties.get(key), dtype=np.float64)
        except (TypeError, ValueError, OverflowError):  # not numbers, ragged, beyond a float
            continue
        if anchors.ndim == 2 and anchors.shape[0] >= 2 and anchors.shape[1] == 2 \
                and np.all(np.isfinite(anchors)) and np.all(np.isfinite(pixels[[0, -1]])) \
                and np.hypot(*(anchors[[0, -1]] - pixels[[0, -1]]).T).max() \
                <= ANCHOR_TOLERANCE_PX:
            return anchors
    return pixels
