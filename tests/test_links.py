"""Compiled link integration against the plain-numpy reference, and window geometry."""

import numpy as np
import pytest

from core.guides import admissible_windows, build_corridor, link_angles, turn_is_admissible
from core.links import integrate_links, integrate_links_reference
from core.scores import CROSS, SCALAR, SINE, Evidence


def random_evidence(rng, sampler, width=60, height=50, origin=(3, 5), planes=2):
    rows, cols = height - origin[1] - 4, width - origin[0] - 6
    values = rng.normal(size=(planes, rows, cols)).astype(np.float32)
    return Evidence(values, origin, (width, height), sampler, tau=0.5)


@pytest.mark.parametrize("sampler", [SCALAR, CROSS, SINE])
def test_compiled_links_match_reference(sampler):
    rng = np.random.default_rng(sampler)
    evidence = random_evidence(rng, sampler)
    # Window covers x in [3, 53], y in [5, 45]; image is 60×50: some links leave the image
    # (x < 0 is impossible inside the window, so keep starts inside the window's span).
    starts = rng.uniform([3, 5], [49, 45], size=(7, 2))
    ends = rng.uniform([3, 5], [49, 45], size=(9, 2))
    np.testing.assert_allclose(integrate_links(evidence, starts, ends),
                               integrate_links_reference(evidence, starts, ends),
                               rtol=1e-12, atol=1e-12)  # measured: at most 4e-14 apart


def test_samples_outside_the_image_contribute_nothing():
    planes = np.ones((1, 20, 20), dtype=np.float32)
    evidence = Evidence(planes, (0, 0), (10, 10), SCALAR)
    # A horizontal link from x=5 to x=15 at y=2: only its part up to x = 9 lies in the image.
    score = integrate_links(evidence, np.array([[5.0, 2.0]]), np.array([[15.0, 2.0]]))[0, 0]
    expected = integrate_links_reference(evidence, np.array([[5.0, 2.0]]),
                                         np.array([[15.0, 2.0]]))[0, 0]
    assert score == pytest.approx(expected)
    assert score == pytest.approx(4.0)  # samples at 5.5, 6.5, 7.5, 8.5 inside; 9.5.. outside


def test_constant_plane_integrates_to_length():
    planes = np.full((1, 30, 30), 2.0, dtype=np.float32)
    evidence = Evidence(planes, (0, 0), (30, 30), SCALAR)
    score = integrate_links(evidence, np.array([[1.0, 1.0]]), np.array([[21.0, 16.0]]))
    assert score[0, 0] == pytest.approx(2.0 * 25.0)


@pytest.mark.parametrize("theta", [5, 30, 90, 180])
def test_windows_equal_the_direct_turn_test(theta):
    rng = np.random.default_rng(theta)
    for _ in range(5):
        a = rng.uniform(0, 50, 2)
        b = a + rng.uniform(10, 60, 2)
        corridor = build_corridor(a, b, int(rng.integers(1, 5)), int(rng.integers(2, 30)),
                                  rng.uniform(2, 40))
        windows = admissible_windows(corridor, np.deg2rad(theta))
        for t in range(1, corridor.guides + 1):
            incoming, outgoing = link_angles(corridor, t - 1), link_angles(corridor, t)
            for j in range(incoming.shape[1]):
                turn = np.abs(outgoing[j][None, :] - incoming[:, j][:, None])
                mask = turn_is_admissible(turn, np.deg2rad(theta))  # (i, k)
                i = np.arange(incoming.shape[0])[:, None]
                inside = (i >= windows.lo[t - 1][j]) & (i <= windows.hi[t - 1][j])
                np.testing.assert_array_equal(mask, inside)


def test_pixel_bounds_are_those_of_every_corridor_point_rounded_to_a_millionth():
    """Corridor.pixel_bounds (worked out from the grid's corners) equals floor / ceil of every
    node's coordinates rounded to 1e-6 px, on random corridors and on endpoints a hair off
    whole pixels (where the rounding decides the window)."""
    rng = np.random.default_rng(11)
    for k in range(400):
        a = rng.uniform(-50, 3000, 2)
        b = a + rng.uniform(-400, 400, 2)
        if k % 4 == 0:
            a, b = np.round(a) - 1e-9, np.round(b) + 1e-9
        if np.hypot(*(b - a)) < 2:
            continue
        guides, points = int(rng.integers(1, 30)), int(rng.integers(2, 160))
        corridor = build_corridor(a, b, guides, points, float(rng.uniform(0.5, 120)))
        nodes = np.vstack(corridor.node_sets())
        low, high = corridor.pixel_bounds
        np.testing.assert_array_equal(low, np.floor(np.round(nodes.min(axis=0), 6)))
        np.testing.assert_array_equal(high, np.ceil(np.round(nodes.max(axis=0), 6)))
        assert low.dtype.kind == high.dtype.kind == "i"
