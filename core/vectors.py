"""Line vectors (GeoJSON) on an image's pixel grid: batch seeds and the app's imported lines.

Both read a GeoJSON file (:func:`read_geojson`): a FeatureCollection, a Feature or a bare
(Multi)LineString, or a GeoJSON text sequence (GDAL's GeoJSONSeq, ``.geojsonl`` or
``.geojsons``: one Feature per line, or per record begun by RS, 0x1E). A GeoPackage, a
Shapefile or UTF-16/UTF-32 text is refused with what it is and how to convert it.

Seeds (:func:`read_seeds`, batch mode) are LineStrings or MultiLineStrings in RFC 7946
longitude/latitude, or in an image's pixel coordinates when ``properties.image`` names it
(in a document whose ``"coordinate_space"`` is ``"pixel"``, roadtracer's ``source_image``
names it too, else the seed fails); :func:`seeds_in_image` puts them on one image's grid,
clipped to it (:func:`pieces_in_image`).

Imported lines (:func:`read_lines`, the app's File ▸ Import lines) are read as their document
says:

* ``"coordinate_space": "pixel"``, or a ``"crs"`` member naming roadtracer's CRS of pixels
  (:data:`core.geojson.PIXEL_CRS`: roadtracer's export of an image without georeferencing):
  pixel (x, y) of the image each feature names (``properties.image``, else
  ``properties.source_image``), a feature naming another image skipped; of this image where
  it names none;
* a ``"crs"`` member naming a projected CRS (roadtracer's ``--crs source`` export, or older
  GeoJSON: type ``"name"``, or ``"EPSG"`` with a code): map coordinates in that CRS, those of
  another CRS than the image's read as the lon/lat they stand for and placed as lon/lat lines
  are (below); any other ``"crs"`` member (type ``"link"``, a CRS PROJ does not know or
  cannot place on the globe) is an error naming the file and the member;
* otherwise WGS84 longitude/latitude, projected through the image's georeferencing (the
  parts of a MultiLineString cut at the antimeridian read as one line again); a feature whose
  ``properties.image`` names this image is in its pixels and one naming another image is
  skipped. Lines are placed near the image (:func:`seeds_near_image`, :func:`near_centre`):
  on an image across the antimeridian, from either side of it.

Image names match as batch matches them (:func:`core.raster.image_named`: but for case on
Windows and macOS).

A line exported by roadtracer carries its anchors in pixels (``anchors`` from the app,
``anchors_px`` from batch): vertices of its geometry, in order, from its first vertex to its
last. Where their two ends agree with the geometry's (within :data:`ANCHOR_TOLERANCE_PX`) they
are checked whole: each must be a pair of finite numbers inside the image (its pixels' area,
to its outer edge: a batch line's straight leg to the edge ends there), at most
:data:`MAX_LINE_VERTICES`, else the feature is skipped with the reason. They become the
imported line's anchors, so that the line comes back as it was drawn, while the geometry is
still the exported line: each anchor a vertex of it, in order, and (where the feature keeps
its exported polyline, ``properties.pixels``) every vertex of the geometry on that polyline
and every vertex of the polyline on the geometry (within the tolerance). Otherwise the
geometry was edited since (in QGIS: a vertex moved, inserted or deleted): it is taken as
drawn, every vertex an anchor, and the line's :attr:`ImportedLine.note` says why. The app's
export also says which segments between its anchors were drawn straight
(``segment_details[k].straight``, :attr:`ImportedLine.straight`): a ``segment_details`` that
is not one such object per segment skips the feature too. Otherwise (anchors of another
image, or none) every vertex of the geometry is an anchor, and no segment is straight. Lines
are clipped to the image's pixel centres (where the app's anchors may lie: a batch line's leg
to the image's edge, under 2 px, is dropped there), and anchors closer than
:data:`MIN_SEGMENT_PX` to the previous one are dropped, as for seeds.

Every check and conversion of a line's vertices runs on the whole line at once (numpy, or a
compiled loop where each vertex depends on the one kept before it), and the lines of
:data:`FEATURES_PER_STEP` features are placed on the image together (one projection for all
of them), so that reading a file of a million vertices takes well under a second. The app
reads in its worker thread, which can stop the reading between two features (``stop``).
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import chain, islice, repeat

import numpy as np

from core.errors import BadParameter
from core.geojson import MAX_LONGITUDE, PIXEL_CRS
from core.georef import GeorefError, parse_crs, transform_points, wgs84, world_shift
from core.jit import numba
from core.output import READ_CHARS, collector_paused, decode_json, read_json, shortened
from core.raster import Raster, image_named
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
#: How far (px) the image's outer edge lies beyond the centres of its edge pixels: the
#: pixel-area box ``[-0.5, W-0.5] × [-0.5, H-0.5]``, which a batch line's straight leg to the
#: edge reaches (:func:`pieces_in_image`) and an exported anchor may lie in (:func:`_anchors`).
PIXEL_AREA_MARGIN = 0.5


def feature_lines(feature, index: int, space: str = "lonlat") -> tuple[list[Seed],
                                                                       list[Failure]]:
    """The seed lines of one GeoJSON feature (``index``: its place in the file), or why it is
    not one, in a document whose coordinates are ``space`` (:func:`_coordinates_of`). In
    "lonlat", vertices of features naming no image must be longitude/latitude (longitudes
    within ±:data:`core.geojson.MAX_LONGITUDE`, as an image across the antimeridian gives),
    and MultiLineString parts cut at the antimeridian are one line again
    (:func:`joined_at_antimeridian`); else they are taken as they are (pixels, or a projected
    CRS). A seed's image is the one its feature names (:func:`image_key`)."""
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
    key = image_key(properties, space)
    image = properties.get(key)
    if image is not None and (not isinstance(image, str) or not image):
        return [], [Failure(f"properties.{key}={shortened(image)} is not a file name", seed_id)]
    kind = geometry.get("type")
    coordinates = geometry.get("coordinates")
    if kind == "LineString":
        parts = [(seed_id, coordinates)]
    elif kind == "MultiLineString" and isinstance(coordinates, list):
        parts = [(f"{seed_id}/{k}", c) for k, c in enumerate(coordinates)]
    elif kind == "MultiLineString":
        return [], [Failure(f"MultiLineString coordinates {shortened(coordinates)} are not a "
                            "list of lines of [x, y] number pairs", seed_id)]
    else:
        return [], [Failure(f"geometry type {kind!r} is not a LineString or "
                            "MultiLineString", seed_id)]
    lines, failures = [], []
    for part_id, coords in parts:
        try:
            lines.append((part_id, line_vertices(coords)))
        except BadParameter as exc:
            failures.append(Failure(str(exc), part_id))
    lonlat = space == "lonlat"
    if lonlat and image is None:
        joined = joined_at_antimeridian(lines)
        lines = [(seed_id, joined[0][1])] if len(joined) == 1 < len(lines) else joined
    seeds = []
    for part_id, vertices in lines:
        if lonlat and image is None and (np.abs(vertices[:, 0]).max() > MAX_LONGITUDE
                                           or np.abs(vertices[:, 1]).max() > 90):
            failures.append(Failure(
                f"vertex {vertices[np.argmax(np.abs(vertices).max(1))].tolist()} is not "
                "longitude/latitude (seeds in pixel coordinates need properties.image)",
                part_id))
        else:
            seeds.append(Seed(part_id, vertices, image, properties))
    return seeds, failures


def image_key(properties: dict, space: str) -> str:
    """The property of a feature (its ``properties``) that names the image whose pixels its
    coordinates are: ``"image"``; in a document in pixels (``space`` "pixel"), where that is
    not given, ``"source_image"``, which roadtracer's exports write."""
    return "source_image" if space == "pixel" and properties.get("image") is None else "image"


def joined_at_antimeridian(lines: list[tuple[str, np.ndarray]]) -> list[tuple[str, np.ndarray]]:
    """Longitude/latitude lines (id, vertices of shape (N, 2)), each one that begins on the
    antimeridian (±180°) where the one before it ends, at the same latitude, joined to that
    one: the parts of a line cut there (RFC 7946, 3.1.9, as :func:`core.geojson.coordinates`
    writes them) one line again, its longitudes moved by 360° to continue past ±180°. A
    joined line keeps its first part's id."""
    joined = []
    for line_id, vertices in lines:
        if joined and _meet_on_antimeridian(joined[-1][1][-1], vertices[0]):
            first_id, before = joined[-1]
            shift = 360.0 * np.round((before[-1, 0] - vertices[0, 0]) / 360.0)
            joined[-1] = (first_id, np.vstack([before, vertices[1:] + [shift, 0.0]]))
        else:
            joined.append((line_id, vertices))
    return joined


def _meet_on_antimeridian(end: np.ndarray, start: np.ndarray) -> bool:
    """Whether lon/lat points ``end`` and ``start`` are one point on the antimeridian (each at
    ±180°, or a turn of 360° further, at the same latitude)."""
    return bool(np.abs(end[0]) % 360.0 == 180.0 and np.abs(start[0]) % 360.0 == 180.0
                and end[1] == start[1])


def line_vertices(coords, key: str | None = None) -> np.ndarray:
    """(x, y) of a line's GeoJSON positions, checked for the whole line at once.

    Parameters
    ----------
    coords
        A geometry's ``coordinates`` (or a feature's ``properties[key]``): a list of at least
        2 and at most :data:`MAX_LINE_VERTICES` positions, each a list of 2 or more numbers (a
        height and any further values, such as a GPS track's time, are dropped).
    key : str, optional
        The property ``coords`` is (``"anchors"``), to name it in the messages; None for a
        geometry's coordinates.

    Returns
    -------
    ndarray of shape (N, 2), float64, finite

    Raises
    ------
    BadParameter
        Naming what is wrong: too many positions, a position that is not numbers (text, an
        object, a bool, a single number, a number beyond a float), fewer than 2, or a value
        that is not finite.
    """
    what, items, line = ("coordinates", "vertices", "a line") if key is None else (
        f"properties.{key}", "anchors", f"properties.{key}")
    if isinstance(coords, list) and len(coords) > MAX_LINE_VERTICES:
        counted = "a line of" if key is None else f"properties.{key} lists"
        raise BadParameter(f"{counted} {len(coords)} {items}: at most {MAX_LINE_VERTICES} are "
                           "read")
    try:
        vertices = _positions(coords)
    except (TypeError, ValueError, OverflowError):
        raise BadParameter(f"{what} {shortened(coords)} are not [x, y] number pairs") from None
    if len(vertices) < 2:
        raise BadParameter(f"{line} needs at least 2 [x, y] {items}, got {shortened(coords)}")
    if not np.all(np.isfinite(vertices)):
        raise BadParameter(f"{what} are not finite")
    return vertices


def _positions(coords) -> np.ndarray:
    """(x, y) of GeoJSON positions (a list of lists of 2 or more numbers), shape (N, 2), with
    no Python step per vertex: the types of the positions and of their values are gathered by
    C-level iterators and numpy converts the numbers.

    Raises
    ------
    TypeError, ValueError or OverflowError
        If ``coords`` is no list of positions, a position has fewer than 2 values, or a value
        is no number (text, an object, a bool) or beyond a float.
    """
    if not isinstance(coords, list | tuple):
        raise TypeError(f"{type(coords).__name__} is not a list of positions")
    if not coords:
        return np.empty((0, 2))
    if not all(issubclass(kind, list | tuple) for kind in set(map(type, coords))):
        raise TypeError("a position is not a list")
    lengths = set(map(len, coords))
    if min(lengths) < 2:
        raise TypeError("a position has fewer than 2 values")
    if not all(issubclass(kind, numbers.Real) and not issubclass(kind, bool)
               for kind in set(map(type, chain.from_iterable(coords)))):
        raise TypeError("a position holds something else than numbers")
    if len(lengths) > 1:  # some with a height, some without
        coords = [position[:2] for position in coords]
    return np.array(coords, dtype=np.float64)[:, :2]


def read_seeds(path: str | os.PathLike) -> tuple[list[Seed], list[Failure]]:
    """Seed lines of a GeoJSON file (:func:`read_geojson`), and the features that are not
    usable seeds.

    Accepts a FeatureCollection, a single Feature, or a bare (Multi)LineString geometry.

    Returns
    -------
    seeds : list of Seed
    failures : list of Failure
        One per feature (or MultiLineString part) that is not a usable seed, e.g. one whose
        ``kind`` property is not one of :data:`core.tracer.LINE_KINDS` while no OpenStreetMap
        tag says its kind (:func:`line_kind_of`), or one in pixels that names no image.

    Map coordinates in a projected CRS that the document's ``crs`` member names (a batch
    output written with ``--crs source``) are read in it and become lon/lat; pixels (its
    ``coordinate_space`` "pixel") are those of the image each feature names
    (:func:`image_key`).

    Raises
    ------
    BadParameter
        If the file cannot be read, is not GeoJSON (:func:`read_geojson`), or its ``crs``
        member is not read (:func:`_coordinates_of`).
    GeorefError
        If PROJ cannot transform from the CRS it names to WGS84 (:func:`_coordinates_of`).
    """
    seeds, failures = [], []
    document = read_geojson(path, "seeds file")
    space, crs = _coordinates_of(document, path)
    for index, feature in enumerate(geojson_features(document, path)):
        found, bad = feature_lines(feature, index, space)
        if space == "source":
            found, unplaced = seeds_in_lonlat(found, crs)
            bad += unplaced
        failures += bad
        for seed in found:
            kind = seed.properties.get("kind")
            if space == "pixel" and seed.image is None:
                failures.append(Failure("the document is in pixels, of no image it names "
                                        "(seeds in pixel coordinates need properties.image)",
                                        seed.id))
            elif kind is None or line_kind_of(seed.properties) is not None:
                seeds.append(seed)
            else:
                failures.append(Failure(f"properties.kind={shortened(kind)} is not a line kind "
                                        f"({' or '.join(LINE_KINDS)}), nor does a highway or "
                                        "waterway tag say one", seed.id))
    return seeds, failures


def seeds_in_lonlat(seeds, crs) -> tuple[list[Seed], list[Failure]]:
    """``seeds`` whose vertices are map coordinates in ``crs`` (those naming no image) as the
    WGS84 longitude/latitude they stand for, and a failure for each with a vertex PROJ cannot
    place on the globe.

    Raises
    ------
    GeorefError
        If PROJ cannot transform from ``crs`` to WGS84 at all.
    """
    placed, failures = [], []
    for seed in seeds:
        if seed.image is None:
            lonlat = transform_points(seed.vertices, crs, wgs84())
            if not np.all(np.isfinite(lonlat)):
                failures.append(Failure(f"a vertex cannot be placed on the globe from "
                                        f"{crs.name}", seed.id))
                continue
            seed = replace(seed, vertices=lonlat)
        placed.append(seed)
    return placed, failures


#: How to convert text of another encoding to UTF-8 (:data:`FOREIGN_FILES`).
_ICONV = "iconv -f {kind} -t UTF-8 {name} > {stem}-utf8.geojson"
#: Files that are no UTF-8 GeoJSON, from their first bytes: (those bytes, what the file is,
#: how to convert it: ``{name}`` the file's name, ``{stem}`` that name without its suffix).
FOREIGN_FILES = (
    (b"SQLite format 3\x00", "a GeoPackage (SQLite)",
     "ogr2ogr -f GeoJSON {stem}.geojson {name} (and the layer's name, if it holds several)"),
    (b"\x00\x00\x27\x0a", "a Shapefile", "ogr2ogr -f GeoJSON {stem}.geojson {stem}.shp"),
    (b"\xff\xfe\x00\x00", "UTF-32", _ICONV),
    (b"\x00\x00\xfe\xff", "UTF-32", _ICONV),
    (b"\xff\xfe", "UTF-16", _ICONV),
    (b"\xfe\xff", "UTF-16", _ICONV),
)


def read_geojson(path: str | os.PathLike, what: str):
    """The JSON document of a GeoJSON file (:func:`core.output.read_json`; ``what`` names the
    file in messages), or a FeatureCollection of the records of a GeoJSON text sequence
    (GDAL's GeoJSONSeq: a JSON text per line, or per record begun by RS, 0x1E).

    Raises
    ------
    BadParameter
        As :func:`core.output.read_json`; saying what the file is and how to convert it where
        it is one of :data:`FOREIGN_FILES`; naming the line (record) of a sequence that is
        not JSON.
    """
    head = _first_bytes(path, max(len(magic) for magic, _, _ in FOREIGN_FILES))
    for magic, kind, how in FOREIGN_FILES:
        if head.startswith(magic):
            name = os.path.basename(path)
            how = how.format(kind=kind, name=name, stem=os.path.splitext(name)[0])
            raise BadParameter(f"{what} {path} is {kind}, not UTF-8 GeoJSON: convert it, e.g. "
                               f"{how}")
    try:
        return read_json(path, what)
    except BadParameter as exc:
        # Text that is no one JSON value (read_json raises from its JSONDecodeError) may be a
        # sequence of them.
        if not isinstance(exc.__context__, json.JSONDecodeError):
            raise
        features = _sequence_records(path, what)
        if features is None:
            raise
        return {"type": "FeatureCollection", "features": features}


def _first_bytes(path, count: int) -> bytes:
    """The first ``count`` bytes of the regular file ``path``; none of anything else (a FIFO
    would block) or of a file that cannot be read (:func:`core.output.read_json` says why)."""
    try:
        if not os.path.isfile(path):
            return b""
        with open(path, "rb") as stream:
            return stream.read(count)
    except OSError:
        return b""


def _sequence_records(path, what: str) -> list | None:
    """The JSON texts of a GeoJSON text sequence (RFC 8142, or one per line), each decoded as
    :func:`core.output.decode_json` does; None where its first one is not JSON (it is no
    sequence). The file is one that :func:`core.output.read_json` read (a regular file within
    its limits) but could not decode.

    Raises
    ------
    BadParameter
        Naming the line (or record) of ``what`` ``path`` that is not JSON.
    """
    try:
        with open(path, encoding="utf-8-sig") as stream:  # a piece at a time, as read_json
            text = "".join(iter(lambda: stream.read(READ_CHARS), ""))
    except (OSError, ValueError):  # gone, or changed since it was read
        return None
    separated = text.lstrip(" \t\r\n").startswith("\x1e")  # str.lstrip() drops RS too
    unit, records = ("record", text.split("\x1e")[1:]) if separated else ("line",
                                                                          text.split("\n"))
    found = []
    for number, record in enumerate(records, 1):
        if not record.strip():
            continue
        try:
            found.append(decode_json(record))
        except (ValueError, RecursionError) as exc:
            if not found:
                return None
            raise BadParameter(f"{what} {path}: {unit} {number} of its GeoJSON text sequence "
                               f"is not JSON: {exc}") from None
    return found


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
def clip_segments(p: np.ndarray, q: np.ndarray, width: int, height: int) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clip segments p[i]–q[i] to the pixel-centre box ``[0, width-1] × [0, height-1]``, all
    at once (Liang–Barsky, :func:`clip_to_box`): where the tracer's ends may lie
    (:func:`core.tracer.check_point`), half a pixel inside the image's edge.

    Parameters
    ----------
    p, q : ndarray of shape (M, 2)
        Pixel (x, y) end points (a segment with a non-finite one misses the box).

    Returns
    -------
    start, end : ndarray of shape (M, 2)
        The clipped segments (meaningful where ``inside``).
    start_clipped, end_clipped : ndarray of shape (M,), bool
        Whether each end was moved onto the box's border.
    inside : ndarray of shape (M,), bool
        Whether each segment meets the box.
    """
    return clip_to_box(p, q, (0.0, 0.0), (width - 1.0, height - 1.0))


def clip_to_box(p: np.ndarray, q: np.ndarray, low, high) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clip segments p[i]–q[i] to the box ``[low[0], high[0]] × [low[1], high[1]]``, all at
    once (Liang–Barsky): :func:`clip_segments`' box of pixel centres, or the image's outer
    edge (:data:`PIXEL_AREA_MARGIN` beyond it, :func:`pieces_in_image`). Returns as
    :func:`clip_segments` does."""
    p = np.asarray(p, dtype=np.float64).reshape(-1, 2)
    q = np.asarray(q, dtype=np.float64).reshape(-1, 2)
    low = np.asarray(low, dtype=np.float64)
    high = np.asarray(high, dtype=np.float64)
    inside = np.all(np.isfinite(p), axis=1) & np.all(np.isfinite(q), axis=1)
    t0, t1 = np.zeros(len(p)), np.ones(len(p))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = q - p
        for pk, qk in ((-d[:, 0], p[:, 0] - low[0]), (d[:, 0], high[0] - p[:, 0]),
                       (-d[:, 1], p[:, 1] - low[1]), (d[:, 1], high[1] - p[:, 1])):
            inside &= (pk != 0) | (qk >= 0)  # parallel to this border and beyond it: missed
            t = qk / np.where(pk == 0, 1.0, pk)
            t0 = np.where(pk < 0, np.maximum(t0, t), t0)
            t1 = np.where(pk > 0, np.minimum(t1, t), t1)
        start = np.clip(p + t0[:, None] * d, low, high)
        end = np.clip(p + t1[:, None] * d, low, high)
    inside &= (t0 <= t1) & np.all(np.isfinite(start), axis=1) & np.all(np.isfinite(end), axis=1)
    return start, end, t0 > 0, t1 < 1, inside


def pieces_in_image(vertices_px: np.ndarray, width: int, height: int) -> list[
        tuple[np.ndarray, np.ndarray, tuple[np.ndarray | None, np.ndarray | None]]]:
    """Pieces of a polyline inside an image, each segment clipped to it, with the segment of
    the polyline each of their segments is (or is a clipped part of), and their edge points.

    Consecutive segments that stay inside join into one piece; clipped pieces shorter
    than 2 px (a corner grazing the border) are dropped. All segments are clipped at once
    (:func:`clip_segments`), unless the polyline's bounding box misses the image (that of a
    polyline with a NaN vertex is not looked at). A piece's edge point at an end that was
    clipped (the polyline goes on beyond the image) is where the segment it lies on leaves the
    image's outer edge, the pixel-area box ``[-0.5, width-0.5] × [-0.5, height-0.5]``
    (:func:`clip_to_box`: half a pixel beyond the clipped end, in the segment's direction, or
    the segment's own end vertex where it lies within that half pixel); None at an end not
    clipped.

    Parameters
    ----------
    vertices_px : ndarray of shape (N, 2)
        Pixel (x, y); may lie outside the image or be non-finite.

    Returns
    -------
    list of (piece (K, 2), segments (K - 1,) int, (start edge (2,) or None, end edge (2,) or
    None)), K >= 2
        Each piece's vertices; per segment of it the index i of the segment
        ``vertices_px[i]``–``vertices_px[i + 1]`` it lies on; its edge points.
    """
    vertices = np.asarray(vertices_px, dtype=np.float64).reshape(-1, 2)
    if len(vertices) < 2:
        return []
    (left, top), (right, bottom) = vertices.min(0), vertices.max(0)  # NaN where one is
    if right < 0 or bottom < 0 or left > width - 1 or top > height - 1:
        return []
    start, end, start_clipped, end_clipped, inside = clip_segments(
        vertices[:-1], vertices[1:], width, height)
    kept = inside & ~((start_clipped | end_clipped) & (np.hypot(*(end - start).T) < 2))
    if not kept.any():
        return []
    # A kept segment continues the piece before it where that one was kept and ended inside
    # (it then starts inside too); any other starts a piece.
    continues = np.zeros_like(kept)
    continues[1:] = kept[:-1] & ~end_clipped[:-1]
    first = (kept & ~(continues & ~start_clipped))[kept]
    # The vertices: every piece's start, then every kept segment's end.
    ends_at = np.cumsum(1 + first) - 1
    starts_at = ends_at[first] - 1
    points = np.empty((ends_at[-1] + 1, 2))
    points[ends_at] = end[kept]
    points[starts_at] = start[kept][first]
    pieces = list(zip(np.split(points, starts_at[1:]),
                      np.split(np.flatnonzero(kept), np.flatnonzero(first)[1:]), strict=True))
    margin = PIXEL_AREA_MARGIN
    edge_start, edge_end, *_ = clip_to_box(vertices[:-1], vertices[1:], (-margin, -margin),
                                           (width - 1 + margin, height - 1 + margin))
    return [(piece, segments,
             (edge_start[segments[0]] if start_clipped[segments[0]] else None,
              edge_end[segments[-1]] if end_clipped[segments[-1]] else None))
            for piece, segments in pieces]


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


def seeds_in_image(seeds, image_name: str, raster: Raster) -> list[
        tuple[Seed, np.ndarray, tuple[np.ndarray | None, np.ndarray | None]]]:
    """The seed lines to trace on one image, in its pixel coordinates, with the edge points of
    their ends.

    Seeds naming ``image_name`` are taken as they are; lon/lat seeds are projected through
    the raster's georeferencing and clipped to it (none when it has no CRS), their pieces'
    edge points those of :func:`pieces_in_image` (where a piece was clipped, the point where
    the seed leaves the image's outer edge; None for an end not clipped and for seeds in
    pixels).

    Returns
    -------
    list of (Seed, ndarray of shape (K, 2) pixel vertices, (start edge or None, end edge or
    None))
    """
    seeds = seeds_near_image(seeds, raster)
    lines = [(seed, seed.vertices, (None, None)) for seed in seeds if seed.image == image_name]
    for seed, vertices in zip(seeds, seeds_in_pixels(seeds, "lonlat", raster), strict=True):
        if seed.image is None and vertices is not None:
            lines += [(seed, piece, edges) for piece, _, edges
                      in pieces_in_image(vertices, raster.width, raster.height)]
    return lines


def seeds_in_pixels(seeds, space: str, raster: Raster) -> list[np.ndarray | None]:
    """Per seed, its vertices in the pixels of ``raster`` (shape (N, 2)), with one projection
    for every vertex of them all: as they are for a seed naming an image (or in a document in
    pixels, ``space`` "pixel"); through the image's georeferencing for lon/lat (``space``
    "lonlat", read near its centre longitude, :func:`near_centre`) or map coordinates in its
    CRS ("source"), None where it has no CRS."""
    pixels = [seed.vertices for seed in seeds]
    placed = [k for k, seed in enumerate(seeds) if seed.image is None and space != "pixel"]
    georef = raster.georef
    if not placed:
        return pixels
    if georef is None or georef.crs is None:
        found = [None] * len(placed)
    else:
        # One projection call for every vertex of every seed, then split per seed.
        vertices = [seeds[k].vertices for k in placed]
        if space == "lonlat":
            centre = centre_longitude(raster)
            found = georef.lonlat_to_pixel(np.vstack([near_centre(line, centre)
                                                      for line in vertices]))
        else:
            found = georef.map_to_pixel(np.vstack(vertices))
        found = np.split(found, np.cumsum([len(line) for line in vertices])[:-1])
    for k, vertices in zip(placed, found, strict=True):
        pixels[k] = vertices
    return pixels


def seeds_near_image(seeds, raster: Raster) -> tuple[Seed, ...]:
    """``seeds`` as an image in a projected CRS whose map repeats along x reads them
    (:func:`core.georef.world_shift`: Mercator, plate carrée): each vertex of a lon/lat line
    moved by whole turns of 360°, which :meth:`core.georef.Georef.lonlat_to_pixel` places one
    map's width away each (:func:`_turns_near`). An image across the map's edge (180° in
    EPSG:3857) so gets the lines on both sides of it, which PROJ puts at the map's two edges.
    Seeds in pixels, and every seed of an image in any other CRS, are left as they are.
    """
    georef = raster.georef
    lonlat = [k for k, seed in enumerate(seeds) if seed.image is None]
    shift = None if georef is None or georef.crs is None else world_shift(georef.crs)
    if not lonlat or shift is None:
        return tuple(seeds)
    period = np.subtract(*georef.map_to_pixel([shift, [0.0, 0.0]]))  # one map's width (px)
    centre = np.array([(raster.width - 1) / 2, (raster.height - 1) / 2])
    # One projection call for every vertex of every lon/lat seed, then split per seed.
    pixels = georef.lonlat_to_pixel(np.vstack([seeds[k].vertices for k in lonlat]))
    ends = np.cumsum([len(seeds[k].vertices) for k in lonlat])
    moved = list(seeds)
    for k, line in zip(lonlat, np.split(pixels, ends[:-1]), strict=True):
        turns = _turns_near(line, period, centre)
        moved[k] = replace(seeds[k], vertices=seeds[k].vertices
                           + np.column_stack([360.0 * turns, np.zeros_like(turns)]))
    return tuple(moved)


def _turns_near(line: np.ndarray, period: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Per vertex of a line (K, 2) in pixels, the whole number of maps' widths ``period``
    (a vector in pixels) to move it by: the line unwrapped along the map's repeat (no step
    of more than half a map's width between neighbours, as :func:`lonlat_box` unwraps
    longitudes), then moved as a whole to put a vertex of it nearest ``centre``. 0 for a
    vertex that is not finite (it is not placed)."""
    widths = line @ period / (period @ period)  # where it lies along the repeat, in widths
    finite = np.isfinite(widths)
    turns = np.zeros(len(line))
    if not finite.any():
        return turns
    along = widths[finite]
    turns[finite] = np.round(np.unwrap(along, period=1.0) - along)
    placed = line[finite] + turns[finite, None] * period
    offsets = np.round((centre - placed) @ period / (period @ period))
    distances = np.hypot(*(placed + offsets[:, None] * period - centre).T)
    turns[finite] += offsets[np.argmin(distances)]
    return turns


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
    vertices = np.asarray(vertices, dtype=np.float64)
    return vertices[_far_from_the_last_kept(vertices, MIN_SEGMENT_PX)]


@numba.njit(cache=True)
def _far_from_the_last_kept(vertices: np.ndarray, distance: float) -> np.ndarray:
    """Which vertices (N, 2) to keep: the first, then each at least ``distance`` from the last
    one kept (a compiled loop: each vertex depends on the one kept before it)."""
    keep = np.zeros(len(vertices), dtype=np.bool_)
    if len(vertices) == 0:
        return keep
    keep[0] = True
    last = 0
    for i in range(1, len(vertices)):
        if np.hypot(vertices[i, 0] - vertices[last, 0],
                    vertices[i, 1] - vertices[last, 1]) >= distance:
            keep[i] = True
            last = i
    return keep


def line_kind_of(properties: dict) -> str | None:
    """"road" or "river" as a feature's properties say: its ``kind`` ("road" or "river"), else
    OpenStreetMap's tags (``waterway=*``: a river, ``highway=*``: a road), as properties of
    their own or in a ``tags`` object (as some OpenStreetMap exports nest them); None if they
    say neither."""
    kind = properties.get("kind")
    if kind in LINE_KINDS:
        return kind
    tags = properties.get("tags")
    for source in (properties, tags if isinstance(tags, dict) else {}):
        if source.get("waterway"):
            return "river"
        if source.get("highway"):
            return "road"
    return None


#: Exported anchors are trusted when the geometry's ends lie this close to them (px), and
#: the geometry is taken for the line exported while it lies this close to it (:func:`_edit_of`).
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
    stated_kind : object
        Where ``kind`` is None, the feature's own ``kind`` property as read (a value that is
        no line kind: the line takes the app's default), else None.
    straight : tuple of bool
        One per segment ``anchors[k]``–``anchors[k + 1]`` (K - 1 of them in
        :func:`read_lines`' lines): whether the app's export drew it straight, not traced
        (its ``segment_details[k].straight``; a segment standing for several exported ones,
        the anchors between them dropped, where all of them were); all False for a line of
        any other file. Empty (the default): none is straight.
    note : str or None
        Why the line's anchors are not those its feature's export gave: the geometry was
        edited since (:func:`_anchors`); None where they are, or where none were given.
    """

    name: str
    kind: str | None
    anchors: np.ndarray
    stated_kind: object = None
    straight: tuple[bool, ...] = ()
    note: str | None = None


def read_lines(path: str | os.PathLike, raster: Raster, image_name: str,
               stop: Callable[[], bool] | None = None) -> tuple[list[ImportedLine],
                                                               list[Failure]]:
    """The lines of a GeoJSON file (:func:`read_geojson`) that lie on ``raster`` (the image
    file ``image_name``).

    ``stop``, if given, is asked before each feature is read; once it returns True the reading
    ends with :class:`ReadStopped` (the app's worker thread: Esc, another image, the window
    closed).

    Returns
    -------
    lines : list of ImportedLine
        One per piece of a feature inside the image.
    failures : list of Failure
        Features that are not lines, name another image, cannot be projected, miss it, or
        whose exported anchors are bad (:func:`line_vertices`; outside the image) or whose
        ``segment_details`` do not say which of their segments are straight
        (:func:`_straight_segments`), in the file's order.

    Raises
    ------
    BadParameter
        If the file cannot be read, is not GeoJSON (:func:`read_geojson`), or its ``crs``
        member is not read (:func:`_coordinates_of`).
    GeorefError
        If PROJ cannot transform from the CRS it names to WGS84 (:func:`_coordinates_of`).
    ReadStopped
        Once ``stop()`` returns True.
    """
    with collector_paused():
        return _lines_on_image(read_geojson(path, "GeoJSON file"), path, raster, image_name,
                               stop)


#: Features read before their lines are placed on the image together (one projection).
FEATURES_PER_STEP = 1024


def _lines_on_image(document, path, raster: Raster, image_name: str,
                    stop: Callable[[], bool] | None) -> tuple[list[ImportedLine],
                                                              list[Failure]]:
    """:func:`read_lines` of the GeoJSON ``document`` read from ``path``, placed
    :data:`FEATURES_PER_STEP` features at a time; each feature is dropped from it once read
    (it is freed in short steps, before the collector runs again)."""
    features = geojson_features(document, path)
    georef = raster.georef
    image_crs = georef.crs if georef is not None else None
    space, crs = _coordinates_of(document, path, image_crs)
    # Map coordinates of another CRS than the image's are read as the lon/lat they stand
    # for, and placed near the image as lon/lat lines are.
    in_lonlat = space == "source" and image_crs is not None and crs != image_crs
    reading = "lonlat" if in_lonlat else space
    lines, failures = [], []
    for first in range(0, len(features), FEATURES_PER_STEP):
        read = []  # per feature: its seeds, and why its other lines are not read
        for index in range(first, min(first + FEATURES_PER_STEP, len(features))):
            if stop is not None and stop():
                raise ReadStopped(f"stopped reading {os.fspath(path)}")
            feature, features[index] = features[index], None
            seeds, bad = feature_lines(feature, index, space)
            if in_lonlat:
                seeds, unplaced = seeds_in_lonlat(seeds, crs)
                bad += unplaced
            read.append((seeds, bad))
        seeds = [seed for found, _ in read for seed in found]
        if reading == "lonlat":
            seeds = seeds_near_image(seeds, raster)
        placed = zip(seeds, seeds_in_pixels(seeds, reading, raster), strict=True)
        for found, bad in read:
            failures += bad
            for seed, vertices in islice(placed, len(found)):
                if seed.image is not None and image_named(seed.image, [image_name]) is None:
                    failures.append(Failure(f"properties.{image_key(seed.properties, space)} "
                                            f"names another image ({seed.image})", seed.id))
                    continue
                try:
                    lines += _imported_lines(seed, vertices, raster)
                except BadParameter as exc:
                    failures.append(Failure(str(exc), seed.id))
    return lines, failures


def _imported_lines(seed: Seed, vertices: np.ndarray | None, raster: Raster) -> list[
        ImportedLine]:
    """The pieces on ``raster`` of a seed whose vertices lie at pixel ``vertices`` (N, 2)
    (:func:`seeds_in_pixels`; None: map coordinates, but the image has no CRS), each an
    imported line with its anchors (:func:`_anchors`).

    Raises
    ------
    BadParameter
        Why it has none: no CRS, bad exported anchors, or no piece on the image.
    """
    if vertices is None:
        raise BadParameter("map coordinates, but the image has no georeferencing with a CRS "
                           "(lines in pixels come from an image without one)")
    anchors, straight, note = _anchors(seed.properties, vertices, raster.width, raster.height)
    pieces = [_without_close_anchors(piece, straight[segments]) for piece, segments, _
              in pieces_in_image(anchors, raster.width, raster.height)]
    pieces = [(piece, flags) for piece, flags in pieces if len(piece) >= 2]
    if not pieces:
        raise BadParameter(f"no part of it longer than {MIN_SEGMENT_PX:g} px lies on the image")
    name, kind = imported_name_and_kind(seed.properties, seed.id)
    stated = seed.properties.get("kind") if kind is None else None
    return [ImportedLine(name if len(pieces) == 1 else f"{name} ({number})", kind, piece,
                         stated, flags, note) for number, (piece, flags) in enumerate(pieces, 1)]


def _without_close_anchors(anchors: np.ndarray, straight: np.ndarray) -> tuple[
        np.ndarray, tuple[bool, ...]]:
    """``anchors`` (K, 2) without those closer than :data:`MIN_SEGMENT_PX` to the last one
    kept (as :func:`without_close_vertices`), and which segments between those kept are
    straight: one that stands for several segments of ``straight`` (K - 1,) bool is where they
    all are (a dropped last anchor's segment counts with the one before it)."""
    kept = np.flatnonzero(_far_from_the_last_kept(anchors, MIN_SEGMENT_PX))
    if len(kept) < 2:
        return anchors[kept], ()
    return anchors[kept], tuple(np.logical_and.reduceat(straight, kept[:-1]).tolist())


def imported_name_and_kind(properties: dict, seed_id: str) -> tuple[str, str | None]:
    """An imported line's name and kind (None: the app's default) from its feature's
    ``properties``: its ``name`` and kind (:func:`line_kind_of`); for a line of batch output,
    else those of the seed it was traced from (``seed_properties``, ``seed``: the seed's id)
    and the kind the batch traced with (``params``); else the feature's id ``seed_id``."""
    seed = properties.get("seed_properties")
    seed = seed if isinstance(seed, dict) else {}
    params = properties.get("params")
    traced_as = params.get("line_kind") if isinstance(params, dict) else None
    names = (properties.get("name"), seed.get("name"), properties.get("seed"))
    name = next((n for n in names if isinstance(n, str) and n), seed_id)
    kind = line_kind_of(properties) or line_kind_of(seed) or (
        traced_as if traced_as in LINE_KINDS else None)
    return name, kind


class ReadStopped(Exception):
    """:func:`read_lines` stopped because its ``stop()`` said so (nothing to report: no
    :class:`core.errors.TraceError`)."""


def _coordinates_of(document, path, image_crs=None) -> tuple[str, object]:
    """("pixel" | "source" | "lonlat", the source pyproj CRS or None) of a GeoJSON document
    read from ``path``: pixels where its ``coordinate_space`` says so or its ``crs`` member
    names roadtracer's CRS of pixels (:data:`core.geojson.PIXEL_CRS`), else the CRS its
    ``crs`` member names (:func:`crs_member_name`), else longitude/latitude.

    Raises
    ------
    BadParameter
        Naming the file and its ``crs`` member where that is not read
        (:func:`crs_member_name`) or names a CRS that PROJ does not know.
    GeorefError
        Naming them where PROJ cannot transform that CRS to longitude/latitude (unless it is
        ``image_crs``, the image's own, whose map coordinates are read without PROJ).
    """
    if not isinstance(document, dict):
        return "lonlat", None
    if document.get("coordinate_space") == "pixel":
        return "pixel", None
    member = document.get("crs")
    name = crs_member_name(member, path)
    if name == PIXEL_CRS:
        return "pixel", None
    if name is None or name in LONLAT_NAMES:
        return "lonlat", None
    try:
        crs = parse_crs(name)
    except BadParameter as exc:
        raise _crs_member_error(member, path, str(exc)) from None
    try:
        if crs != image_crs:
            transform_points(np.empty((0, 2)), crs, wgs84())  # PROJ must place it on the globe
    except GeorefError as exc:
        raise _crs_member_error(member, path, str(exc), GeorefError) from None
    return "source", crs


def crs_member_name(member, path) -> str | None:
    """The CRS that the GeoJSON 2008 ``crs`` member of the document read from ``path`` names:
    its ``properties.name`` for type ``"name"``, ``"EPSG:<code>"`` for type ``"EPSG"`` (an
    older form GDAL reads too); None where it names none (no member, or one without a
    ``properties`` object: RFC 7946 longitude/latitude).

    Raises
    ------
    BadParameter
        Naming the member when it has properties but names no CRS so (type ``"link"``, a CRS
        in another file, or any other): its coordinates would be read in the wrong CRS.
    """
    properties = member.get("properties") if isinstance(member, dict) else None
    if not isinstance(properties, dict):
        return None
    kind, name, code = member.get("type"), properties.get("name"), properties.get("code")
    if kind == "name" and isinstance(name, str):
        return name
    if kind == "EPSG" and isinstance(code, int | str) and str(code).isdigit():
        return f"EPSG:{code}"
    raise _crs_member_error(member, path, 'give {"type": "name", "properties": {"name": '
                            '"EPSG:…"}} (or type "EPSG" with properties.code), or no "crs" for '
                            "longitude/latitude")


def _crs_member_error(member, path, why: str,
                      error: type[Exception] = BadParameter) -> Exception:
    """The ``error`` for a ``crs`` member of the document read from ``path`` that is not
    read, saying ``why``."""
    return error(f'{path}: its "crs" member {shortened(member)} is not read: {why}')


def _anchors(properties: dict, pixels: np.ndarray, width: int, height: int) -> tuple[
        np.ndarray, np.ndarray, str | None]:
    """The exported pixel anchors of a roadtracer line (``anchors``, else ``anchors_px``) when
    their two ends are the geometry's (within :data:`ANCHOR_TOLERANCE_PX`) and it is still
    the line exported (:func:`_edit_of`), else the geometry's vertices ``pixels`` (N, 2)
    (anchors of another image, none, or a geometry edited since); which segments between
    them are straight; and why the geometry's vertices were taken where it was edited.

    Anchors whose ends match are checked whole: at most :data:`MAX_LINE_VERTICES` pairs of
    finite numbers (:func:`line_vertices`), each inside the ``width`` × ``height`` image (the
    pixel-area box ``[-0.5, width-0.5] × [-0.5, height-0.5]``, where a batch line's leg to
    the image's edge ends; the pieces read are then clipped to the pixel centres).

    Returns
    -------
    anchors : ndarray of shape (K, 2)
    straight : ndarray of shape (K - 1,), bool
        The exported anchors' :func:`_straight_segments`; all False for the geometry's
        vertices.
    note : str or None
        Where the geometry was edited: what no longer matches, and that it was taken as drawn.

    Raises
    ------
    BadParameter
        Naming the property and what is wrong with it, or its first anchor outside the image.
    """
    note = None
    for key in ("anchors", "anchors_px"):
        value = properties.get(key)
        if not (isinstance(value, list) and value and np.all(np.isfinite(pixels[[0, -1]]))):
            continue
        try:
            ends = _positions([value[0], value[-1]])
        except (TypeError, ValueError, OverflowError):
            continue  # not a line's anchors
        if not (np.all(np.isfinite(ends))
                and np.hypot(*(ends - pixels[[0, -1]]).T).max() <= ANCHOR_TOLERANCE_PX):
            continue
        anchors = line_vertices(value, key)
        margin = PIXEL_AREA_MARGIN  # a batch line's leg to the image's edge ends there
        outside = np.flatnonzero(np.any((anchors < -margin)
                                        | (anchors > [width - 1 + margin, height - 1 + margin]),
                                        axis=1))
        if outside.size:
            raise BadParameter(f"anchor {outside[0]} {shortened(anchors[outside[0]].tolist())} "
                               f"of properties.{key} lies outside the image ({width} × "
                               f"{height} px)")
        edit = _edit_of(anchors, properties, pixels)
        if edit is None:
            return anchors, _straight_segments(properties, len(anchors) - 1), None
        note = (f"properties.{key} do not match the geometry: {edit} (edited since the "
                "export?); taken as drawn, every vertex an anchor")
        break
    return pixels, np.zeros(len(pixels) - 1, dtype=bool), note


def _edit_of(anchors: np.ndarray, properties: dict, pixels: np.ndarray) -> str | None:
    """How the geometry ``pixels`` (N, 2) of a feature is no longer the line exported with
    ``anchors`` (K, 2), within :data:`ANCHOR_TOLERANCE_PX`: an anchor that is no vertex of
    it, in order (:func:`_anchors_on_line`: one moved or deleted), or, where the feature's
    ``properties.pixels`` holds the polyline exported, a vertex of either off the other
    (:func:`_along_line`: one moved, inserted or deleted); None where it is that line."""
    matched = _anchors_on_line(anchors, pixels, ANCHOR_TOLERANCE_PX)
    if matched < len(anchors):
        return f"anchor {matched} {shortened(anchors[matched].tolist())} is no vertex of it"
    try:
        exported = line_vertices(properties.get("pixels"), "pixels")
    except BadParameter:
        return None  # no polyline of an export's: the anchors alone say
    off = _along_line(pixels, exported, ANCHOR_TOLERANCE_PX)
    if off < len(pixels):
        return (f"its vertex {off} {shortened(np.round(pixels[off], 3).tolist())} is off the "
                "line exported (properties.pixels)")
    off = _along_line(exported, pixels, ANCHOR_TOLERANCE_PX)
    if off < len(exported):
        return (f"vertex {off} {shortened(exported[off].tolist())} of the line exported "
                "(properties.pixels) is off it")
    return None


def _straight_segments(properties: dict, count: int) -> np.ndarray:
    """Which of the ``count`` segments between an exported line's anchors the app drew
    straight: its ``segment_details[k].straight``, shape (count,) bool, checked at once (as
    :func:`_positions` checks positions); none without ``segment_details``
    (an older batch output, another program's).

    Raises
    ------
    BadParameter
        Naming the property when it is not a list of ``count`` objects, each with
        ``"straight"`` true or false.
    """
    details = properties.get("segment_details")
    if details is None:
        return np.zeros(count, dtype=bool)
    straight = (list(map(dict.get, details, repeat("straight")))
                if isinstance(details, list) and len(details) == count
                and set(map(type, details)) <= {dict} else [None])
    if not set(map(type, straight)) <= {bool}:
        raise BadParameter(f"properties.segment_details {shortened(details)} is not one object "
                           f"per segment between the anchors ({count}), each with "
                           '"straight": true or false')
    return np.array(straight, dtype=bool)


@numba.njit(cache=True)
def _anchors_on_line(anchors: np.ndarray, vertices: np.ndarray, tolerance: float) -> int:
    """How many of the first ``anchors`` (K, 2) lie, in order, within ``tolerance`` of
    ``vertices`` (N, 2) of a line: each matched to the first vertex at or after the last
    match (a compiled walk along both, O(K + N)); K when all do."""
    j = 0
    for k in range(len(anchors)):
        while j < len(vertices) and not np.hypot(anchors[k, 0] - vertices[j, 0],
                                                 anchors[k, 1] - vertices[j, 1]) <= tolerance:
            j += 1
        if j == len(vertices):
            return k
    return len(anchors)


@numba.njit(cache=True)
def _along_line(points: np.ndarray, line: np.ndarray, tolerance: float) -> int:
    """How many of the first ``points`` (K, 2) lie, in order, within ``tolerance`` of the
    polyline ``line`` (N, 2), N >= 2: each near the first of its segments at or after the
    one the point before was near (a compiled walk along both, O(K + N)); K when all do."""
    j = 0
    for k in range(len(points)):
        x, y = points[k, 0], points[k, 1]
        while j < len(line) - 1:
            ax, ay = line[j, 0], line[j, 1]
            dx, dy = line[j + 1, 0] - ax, line[j + 1, 1] - ay
            length = dx * dx + dy * dy
            t = 0.0 if length == 0.0 else min(max(((x - ax) * dx + (y - ay) * dy) / length,
                                                  0.0), 1.0)
            if np.hypot(x - ax - t * dx, y - ay - t * dy) <= tolerance:
                break
            j += 1
        if j == len(line) - 1:
            return k
    return len(points)
