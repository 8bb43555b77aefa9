"""Gaussian-derivative image gradients (separable, compiled: no scipy import on the
interactive path, which saves a large share of a cold ``trace``'s start-up).

Kernels follow ``scipy.ndimage.gaussian_filter`` (``truncate=4``). Borders: the gradient
mirrors the image (scipy's ``mode="reflect"``, numpy.pad's ``"symmetric"``); the blur repeats
the edge pixel by default (scipy's ``"nearest"``, numpy.pad's ``"edge"``). The tests check both
against scipy.

Colour rule: each band is differentiated separately and, at every pixel, the gradient of the
band with the largest gradient magnitude is kept (the "strongest channel" colour gradient;
it keeps the sign and direction of a real edge, unlike a sum of magnitudes).
"""

from __future__ import annotations

import numpy as np

from core.jit import numba

#: Gaussian kernels are cut at this many σ (scipy's ``truncate``).
TRUNCATE = 4.0
#: Smallest gradient scale σ (px): below it the sampled derivative kernel answers an edge
#: with less than half of the continuous Gaussian derivative (3 % at 0.3 px, nothing below
#: 0.125 px, where the kernel is [0]).
MIN_SIGMA = 0.5
#: Longest side of an image (px): GDAL's raster sizes are 32-bit signed integers.
MAX_IMAGE_SIDE = 2**31 - 1
#: Largest gradient scale σ (px): the Gaussian's reach (``TRUNCATE``·σ) spans the longest image
#: side. Any σ of use is far smaller (the resource plan refuses σ whose window does not fit in
#: memory), but beyond this one the window's size is no longer a finite number.
MAX_SIGMA = MAX_IMAGE_SIDE / TRUNCATE


def gradient_margin(sigma: float) -> int:
    """Pixels of context a window needs so its gradient equals the whole image's."""
    return int(TRUNCATE * sigma + 0.5) + 1


def gaussian_kernel(sigma: float, order: int, truncate: float = TRUNCATE) -> np.ndarray:
    """1-D Gaussian (order 0) or first-derivative (order 1) kernel, shape (2r + 1),
    r = int(truncate·σ + 0.5)."""
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 * x * x / (sigma * sigma))
    phi /= phi.sum()
    return phi if order == 0 else -x / (sigma * sigma) * phi


def filter_axis(plane: np.ndarray, kernel: np.ndarray, axis: int, mode: str) -> np.ndarray:
    """Convolve a (rows, cols) plane with a (2r + 1,) kernel along ``axis``; ``mode`` is
    numpy.pad's ("symmetric" = scipy's "reflect", "edge" = scipy's "nearest"). Returns the
    (rows, cols) float64 result."""
    radius = len(kernel) // 2
    pad = [(0, 0), (0, 0)]
    pad[axis] = (radius, radius)
    padded = np.pad(plane.astype(np.float64), pad, mode=mode)
    return _correlate(padded, np.ascontiguousarray(kernel[::-1]), axis)


@numba.njit(cache=True, fastmath=True)
def _correlate(padded, weights, axis):
    """out[r, c] = Σ_t weights[t] · padded[r + t, c] (axis 0) or padded[r, c + t] (axis 1)."""
    taps = weights.shape[0]
    if axis == 0:
        rows, cols = padded.shape[0] - taps + 1, padded.shape[1]
    else:
        rows, cols = padded.shape[0], padded.shape[1] - taps + 1
    out = np.zeros((rows, cols))
    for r in range(rows):
        for t in range(taps):
            weight = weights[t]
            if axis == 0:
                for c in range(cols):
                    out[r, c] += weight * padded[r + t, c]
            else:
                for c in range(cols):
                    out[r, c] += weight * padded[r, c + t]
    return out


def gaussian_blur(plane: np.ndarray, sigma: float, mode: str = "edge",
                  truncate: float = TRUNCATE) -> np.ndarray:
    """Gaussian smoothing of a 2-D plane (rows, cols), float64; ``mode`` as in
    :func:`filter_axis`."""
    kernel = gaussian_kernel(sigma, 0, truncate)
    return filter_axis(filter_axis(plane, kernel, 0, mode), kernel, 1, mode)


def gaussian_gradient(pixels: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of an image at scale σ.

    Parameters
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    sigma : float
        Gaussian scale in px (at least :data:`MIN_SIGMA`).

    Returns
    -------
    gx, gy : ndarrays of shape (rows, cols), float32
        Derivatives along x (columns) and y (rows), per px.
    """
    smooth, derivative = gaussian_kernel(sigma, 0), gaussian_kernel(sigma, 1)
    best_gx = best_gy = best_mag = None
    for band in range(pixels.shape[2]):
        plane = pixels[:, :, band]
        gx = filter_axis(filter_axis(plane, smooth, 0, "symmetric"), derivative, 1, "symmetric")
        gy = filter_axis(filter_axis(plane, derivative, 0, "symmetric"), smooth, 1, "symmetric")
        if best_mag is None:
            best_gx, best_gy, best_mag = gx, gy, gx * gx + gy * gy
        else:
            _keep_stronger(best_gx, best_gy, best_mag, gx, gy)
    return best_gx.astype(np.float32), best_gy.astype(np.float32)


@numba.njit(cache=True)
def _keep_stronger(best_gx, best_gy, best_mag, gx, gy):
    """In place: where (gx, gy) is stronger than the best so far, take it. All (rows, cols)."""
    for r in range(gx.shape[0]):
        for c in range(gx.shape[1]):
            magnitude = gx[r, c] * gx[r, c] + gy[r, c] * gy[r, c]
            if magnitude > best_mag[r, c]:
                best_mag[r, c] = magnitude
                best_gx[r, c] = gx[r, c]
                best_gy[r, c] = gy[r, c]
