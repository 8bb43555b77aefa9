"""Lines of a GeoJSON file on one image's pixel grid: what the app's File ▸ Import lines reads.

The coordinates are read as the document says:

* ``"coordinate_space": "pixel"`` (roadtracer's export of an image without georeferencing):
  pixel (x, y) of this image;
* a ``"crs"`` member naming a projected CRS (roadtracer's ``--crs source`` export, or older
  GeoJSON): map coordinates in that CRS;
* otherwise WGS84 longitude/latitude (RFC 7946), projected through the image's
  georeferencing; a feature whose ``properties.image`` names this image is in its pixels (the
  batch seeds' convention) and one naming another image is skipped.

A line exported by roadtracer carries its anchors in pixels (``anchors`` from the app,
``anchors_px`` from batch). Where they agree with the geometry's two ends (within
:data:`ANCHOR_TOLERANCE_PX`) they become the imported line's anchors, so the line comes back
as it was drawn; otherwise every vertex of the geometry is an anchor. Lines are clipped to the
image, and anchors closer than ``MIN_SEGMENT_PX`` to the previous one are dropped, as in
batch mode (core/batch.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from core.batch import (
    MIN_SEGMENT_PX,
    Failure,
    Seed,
    feature_lines,
    geojson_features,
    lines_in_image,
    without_close_vertices,
)
from core.errors import BadParameter
from core.georef import parse_crs, transform_points
from core.output import read_json
from core.raster import Raster

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
        The feature's ``kind`` property (e.g. "road", "river"), if any.
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
    """
    document = read_json(path, "GeoJSON file")
    features = geojson_features(document, path)
    space, crs = _coordinates_of(document)
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
                pixels = _to_pixels(seed, space, crs, raster)
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
            kind = seed.properties.get("kind")
            for number, piece in enumerate(pieces, 1):
                lines.append(ImportedLine(name if len(pieces) == 1 else f"{name} ({number})",
                                          kind if isinstance(kind, str) else None, piece))
    return lines, failures


def _coordinates_of(document) -> tuple[str, object]:
    """("pixel" | "source" | "lonlat", the source pyproj CRS or None) of a GeoJSON document."""
    if not isinstance(document, dict):
        return "lonlat", None
    if document.get("coordinate_space") == "pixel":
        return "pixel", None
    member = document.get("crs")
    name = member.get("properties", {}).get("name") if isinstance(member, dict) else None
    if not isinstance(name, str) or name in LONLAT_NAMES:
        return "lonlat", None
    return "source", parse_crs(name)


def _to_pixels(seed: Seed, space: str, crs, raster: Raster) -> np.ndarray:
    """Pixel (x, y) of a seed's vertices, shape (N, 2); BadParameter if they cannot be."""
    if seed.image is not None or space == "pixel":
        return seed.vertices
    georef = raster.georef
    if georef is None or georef.crs is None:
        raise BadParameter("map coordinates, but the image has no georeferencing with a CRS "
                           "(lines in pixels come from an image without one)")
    if space == "lonlat":
        return georef.lonlat_to_pixel(seed.vertices)
    return georef.map_to_pixel(transform_points(seed.vertices, crs, georef.crs))


def _anchors(properties: dict, pixels: np.ndarray) -> np.ndarray:
    """The exported pixel anchors of a roadtracer line when they match its geometry's ends,
    else the geometry's vertices ``pixels`` (N, 2)."""
    for key in ("anchors", "anchors_px"):
        try:
            anchors = np.asarray(properties.get(key), dtype=np.float64)
        except (TypeError, ValueError):
            continue
        if anchors.ndim == 2 and anchors.shape[0] >= 2 and anchors.shape[1] == 2 \
                and np.all(np.isfinite(anchors)) and np.all(np.isfinite(pixels[[0, -1]])) \
                and np.hypot(*(anchors[[0, -1]] - pixels[[0, -1]]).T).max() \
                <= ANCHOR_TOLERANCE_PX:
            return anchors
    return pixels
