"""GeoJSON documents of traced lines (plain dicts).

Images without georeferencing give pixel coordinates, marked as such with the
``"coordinate_space": "pixel"`` member and the ``"crs"`` note; georeferenced images are
handled in :mod:`core.georef`.
"""

from __future__ import annotations

import os

from core.raster import Raster

PIXEL_SPACE_NOTE = ("coordinates are image pixels (x = column, y = row, integer values at "
                    "pixel centres), not longitude/latitude: the image has no georeferencing")


def trace_feature(result, raster: Raster, properties: dict | None = None) -> dict:
    """A LineString Feature for one :class:`core.tracer.TraceResult` in pixel space."""
    props = {
        "source_image": os.path.basename(raster.path) if raster.path else None,
        "score": round(float(result.score), 6),
        "link_scores": [round(float(v), 6) for v in result.link_scores],
        "anchors_px": [result.polyline[0].tolist(), result.polyline[-1].tolist()],
        "pixels": [[round(float(x), 3), round(float(y), 3)] for x, y in result.polyline],
        "params": result.params.as_dict(),
        "backend": result.backend,
    }
    props.update(properties or {})
    coordinates = [[round(float(x), 3), round(float(y), 3)] for x, y in result.polyline]
    return {"type": "Feature", "geometry": {"type": "LineString", "coordinates": coordinates},
            "properties": props}


def feature_collection(features: list[dict], raster: Raster) -> dict:
    """A FeatureCollection; in pixel space it says so."""
    return {"type": "FeatureCollection", "coordinate_space": "pixel",
            "coordinate_note": PIXEL_SPACE_NOTE, "features": features}
