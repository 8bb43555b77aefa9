"""Synthetic road images: a bright band along a known polyline, noise and occluding blobs."""

from __future__ import annotations

import numpy as np

from core.raster import Raster

#: A road bulging 66 px (0.33·L) from its 200 px chord: outside the default 0.25·L corridor,
#: inside the 0.4·L one of the tracer's re-trace (core.tracer.CORRIDOR_GROWTH).
_BULGE_X = np.linspace(30.0, 230.0, 41)
BULGE = np.column_stack([_BULGE_X, 170.0 - 66.0 * np.sin(np.pi * (_BULGE_X - 30.0) / 200.0)])


def distance_to_polyline(points: np.ndarray, polyline: np.ndarray) -> np.ndarray:
    """Distance of each of ``points`` (N, 2) to the polyline (M, 2): shape (N,)."""
    starts, ends = polyline[:-1], polyline[1:]
    delta = ends - starts
    rel = points[:, None, :] - starts[None, :, :]
    f = np.clip((rel * delta).sum(-1) / (delta * delta).sum(-1), 0, 1)
    nearest = starts[None] + f[..., None] * delta[None]
    return np.hypot(*(points[:, None, :] - nearest).transpose(2, 0, 1)).min(axis=1)


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.hypot(*vector)


def densify(polyline: np.ndarray, step: float = 0.5) -> np.ndarray:
    """Points along the polyline (M, 2) about ``step`` px apart: shape (N, 2)."""
    out = [polyline[0]]
    for p, q in zip(polyline[:-1], polyline[1:], strict=True):
        count = max(1, int(np.ceil(np.hypot(*(q - p)) / step)))
        out.extend(p + (q - p) * (np.arange(1, count + 1)[:, None] / count))
    return np.array(out)


def road_image(centreline: np.ndarray, size=(200, 260), width=6.0, noise=0.05, blobs=(),
               colour=(0.75, 0.7, 0.65), background=(0.3, 0.4, 0.25), seed=0) -> Raster:
    """An RGB image (rows, cols) = size with a band of ``width`` px around the centreline,
    which runs on 30 px past both ends (clicks land mid-road, as a user's do).

    blobs : iterable of (x, y, radius) dark discs occluding the road (e.g. tree crowns).
    """
    rows, cols = size
    y, x = np.mgrid[0:rows, 0:cols]
    grid = np.stack([x.ravel(), y.ravel()], axis=1).astype(float)
    head = centreline[0] - 30 * unit(centreline[1] - centreline[0])
    tail = centreline[-1] + 30 * unit(centreline[-1] - centreline[-2])
    extended = np.vstack([head, centreline, tail])
    distance = distance_to_polyline(grid, extended).reshape(rows, cols)
    road = np.clip(width / 2 + 0.5 - distance, 0, 1)[..., None]
    image = road * np.array(colour) + (1 - road) * np.array(background)
    for bx, by, radius in blobs:
        disc = np.clip(radius + 0.5 - np.hypot(x - bx, y - by), 0, 1)[..., None]
        image = disc * np.array([0.1, 0.2, 0.1]) + (1 - disc) * image
    image += np.random.default_rng(seed).normal(0, noise, image.shape)
    return Raster(image.astype(np.float32), path="synthetic.png")


def edge_image(boundary: np.ndarray, size=(200, 260), noise=0.03, seed=0) -> Raster:
    """A grey image bright above and dark below an x-monotone ``boundary`` (M, 2) polyline."""
    rows, cols = size
    y, x = np.mgrid[0:rows, 0:cols].astype(float)
    height = np.interp(x, boundary[:, 0], boundary[:, 1])
    image = 0.3 + 0.4 * np.clip(height - y + 0.5, 0, 1)
    image += np.random.default_rng(seed).normal(0, noise, image.shape)
    return Raster(image[..., None].astype(np.float32), path="synthetic-edge.png")
