"""The numpy Gaussian filters agree with scipy.ndimage's."""

import numpy as np
import pytest
from scipy import ndimage

from core.gradient import gaussian_blur, gaussian_gradient


@pytest.mark.parametrize("sigma", [0.7, 1.5, 3.0])
def test_gradient_matches_scipy(sigma):
    plane = np.random.default_rng(0).normal(size=(37, 52))
    gx, gy = gaussian_gradient(plane[..., None].astype(np.float32), sigma)
    expected_gx = ndimage.gaussian_filter(plane.astype(np.float32), sigma, order=(0, 1))
    expected_gy = ndimage.gaussian_filter(plane.astype(np.float32), sigma, order=(1, 0))
    np.testing.assert_allclose(gx, expected_gx, atol=1e-5)
    np.testing.assert_allclose(gy, expected_gy, atol=1e-5)


def test_blur_matches_scipy():
    plane = np.random.default_rng(1).normal(size=(30, 20))
    np.testing.assert_allclose(gaussian_blur(plane, 1.5),
                               ndimage.gaussian_filter(plane, 1.5, mode="nearest"), atol=1e-12)


def test_colour_gradient_keeps_the_strongest_band():
    pixels = np.zeros((20, 20, 3), dtype=np.float32)
    pixels[:, 10:, 1] = 1.0   # vertical edge in green
    pixels[12:, :, 2] = 0.3   # weaker horizontal edge in blue
    gx, gy = gaussian_gradient(pixels, 1.0)
    assert gx[5, 9] > 0.3
    assert abs(gy[5, 9]) < 1e-6
    assert gy[11, 3] > 0.05
    assert abs(gx[11, 3]) < 1e-6
