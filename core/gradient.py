"""Gaussian-derivative image gradients.

Colour rule: each band is differentiated separately and, at every pixel, the gradient of the
band with the largest gradient magnitude is kept (the "strongest channel" colour gradient;
it keeps the sign and direction of a real edge, unlike a sum of magnitudes).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

#: Gaussian kernels are cut at this many σ (scipy's ``truncate``).
TRUNCATE = 4.0


def gradient_margin(sigma: float) -> int:
    """Pixels of context a window needs so its gradient equals the whole image's."""
    return int(TRUNCATE * sigma + 0.5) + 1


def gaussian_gradient(pixels: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of an image at scale σ.

    Parameters
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    sigma : float
        Gaussian scale in px (> 0).

    Returns
    -------
    gx, gy : ndarrays of shape (rows, cols), float32
        Derivatives along x (columns) and y (rows), per px.
    """
    best_gx = best_gy = best_mag = None
    for band in range(pixels.shape[2]):
        plane = pixels[:, :, band]
        gx = ndimage.gaussian_filter(plane, sigma, order=(0, 1), mode="reflect", truncate=TRUNCATE)
        gy = ndimage.gaussian_filter(plane, sigma, order=(1, 0), mode="reflect", truncate=TRUNCATE)
        mag = gx * gx + gy * gy
        if best_mag is None:
            best_gx, best_gy, best_mag = gx, gy, mag
        else:
            stronger = mag > best_mag
            best_gx = np.where(stronger, gx, best_gx)
            best_gy = np.where(stronger, gy, best_gy)
            best_mag = np.where(stronger, mag, best_mag)
    return best_gx.astype(np.float32), best_gy.astype(np.float32)
