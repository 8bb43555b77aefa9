"""GeoJSON documents of traced lines (plain dicts).

Images without georeferencing give pixel coordinates, marked as such with the
``"coordinate_space": "pixel"`` member and a note; georeferenced output is added by the
georeferencing layer (``crs`` argument).
"""

from __future__ import annotations

import json
import os

import numpy as np

from core.output import write_text_atomic
from core.raster import Raster

PIXEL_SPACE_NOTE = ("coordinates are image pixels (x = column, y = row, integer values at "
                    "pixel centres), not longitude/latitude: the image has no georeferencing")


def line_feature(pixels: np.ndarray, raster: Raster, properties: dict | None = None,
                 crs: str = "wgs84") -> dict:
    """A LineString Feature for a polyline ``pixels`` of shape (N, 2) in pixel (x, y)."""
    props = {"source_image": os.path.basename(raster.path) if raster.path else None,
             "pixels": [[round(float(x), 3), round(float(y), 3)] for x, y in pixels]}
    props.update(properties or {})
    coordinates = [[round(float(x), 3), round(float(y), 3)] for x, y in pixels]
    return {"type": "Feature", "geometry": {"type": "LineString", "coordinates": coordinates},
            "properties": props}


def trace_feature(result, raster: Raster, properties: dict | None = None,
                  crs: str = "wgs84") -> dict:
    """A Feature for one :class:`core.tracer.TraceResult` with its score, parameters, anchors."""
    props = {
        "score": round(float(result.score), 6),
        "link_scores": [round(float(v), 6) for v in result.link_scores],
        "anchors_px": [result.polyline[0].tolist(), result.polyline[-1].tolist()],
        "params": result.params.as_dict(),
        "backend": result.backend,
    }
    props.update(properties or {})
    return line_feature(result.polyline, raster, props, crs)


def feature_collection(features: list[dict], raster: Raster, crs: str = "wgs84") -> dict:
    """A FeatureCollection; in pixel space it says so."""
    return {"type": "FeatureCollection", "coordinate_space": "pixel",
            "coordinate_note": PIXEL_SPACE_NOTE, "features": features}


def write_geojson(path: str | os.PathLike, document: dict) -> None:
    """Write a GeoJSON document atomically."""
    write_text_atomic(path, json.dumps(document) + "\n")
