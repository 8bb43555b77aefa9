"""core.offset.offset_ridge on the CPU (tests/test_gpu_surface.py holds the device to it): the
ridge along the clicked relative offset across a surface, and none where the cross-section is
too wide to say anything of the offset.

Geometry of every case: a horizontal surface, clicks a → b along +x, so the normal of [a, b]
points down the rows and a pixel's relative position across the surface is
t = (row − first row + ½) / width (its distance to the upper edge over the section's width)."""

from __future__ import annotations

import numpy as np
import pytest

from core.offset import OFFSET_TOLERANCE, OPEN_WIDTH, offset_ridge

ROWS, COLS = 140, 200
TOP, WIDTH = 40, 30  # the band: rows 40–69
CLICK_ROW = 47
A, B = np.array([20.0, CLICK_ROW]), np.array([180.0, CLICK_ROW])


def band(membership_value=1.0, widened=None):
    """membership (rows, cols) of the 30 px band, ``widened`` = (col0, col1, width) making the
    section ``width`` px wide (from the same top row) in columns col0..col1 − 1, and its mask."""
    membership = np.zeros((ROWS, COLS))
    membership[TOP:TOP + WIDTH] = membership_value
    if widened is not None:
        col0, col1, width = widened
        membership[TOP:TOP + width, col0:col1] = membership_value
    return membership, membership > 0.5


def expected_column(membership, width, clicked_t):
    """The docstring's ridge in a column whose section starts at TOP and is ``width`` px wide:
    membership · max(0, 1 − |t − t*| / OFFSET_TOLERANCE), t = (row − TOP + ½) / width."""
    rows = np.arange(ROWS)
    t = (rows - TOP + 0.5) / width
    inside = (rows >= TOP) & (rows < TOP + width)
    tent = np.maximum(0.0, 1.0 - np.abs(t - clicked_t) / OFFSET_TOLERANCE)
    return np.where(inside, membership * tent, 0.0)


def test_the_ridge_runs_along_the_clicked_offset():
    """Clicks on row 47 of a band of rows 40–69: t* = 7.5 / 30 = 0.25, so the ridge is 1 on
    row 47 in every column and falls linearly to 0 at t* ± 0.5 (15 rows away)."""
    membership, mask = band()
    ridge = offset_ridge(membership, mask, A, B, float(WIDTH))
    assert ridge.shape == (ROWS, COLS)
    assert np.all(np.argmax(ridge, axis=0) == CLICK_ROW)
    np.testing.assert_array_equal(ridge[CLICK_ROW], 1.0)
    expected = expected_column(1.0, WIDTH, (CLICK_ROW - TOP + 0.5) / WIDTH)
    np.testing.assert_allclose(ridge, np.repeat(expected[:, None], COLS, axis=1), atol=1e-12)
    assert ridge[CLICK_ROW + 15].max() == 0.0  # |t − t*| = 0.5: the tent's foot
    assert ridge[:TOP].max() == ridge[TOP + WIDTH:].max() == 0.0  # off the surface


def test_the_ridge_is_scaled_by_the_membership():
    membership, mask = band(membership_value=0.8)
    ridge = offset_ridge(membership, mask, A, B, float(WIDTH))
    assert np.all(np.argmax(ridge, axis=0) == CLICK_ROW)
    np.testing.assert_allclose(ridge[:, 100], expected_column(0.8, WIDTH, 0.25), atol=1e-12)


def test_a_section_much_wider_than_at_the_clicks_gets_no_ridge():
    """A 78 px cross-section (a junction) is wider than OPEN_WIDTH × 30 = 75 px: no ridge
    anywhere on it, while the 30 px band on either side keeps its ridge on row 47."""
    assert 78 > OPEN_WIDTH * WIDTH
    membership, mask = band(widened=(90, 110, 78))
    ridge = offset_ridge(membership, mask, A, B, float(WIDTH))
    assert ridge[:, 90:110].max() == 0.0
    assert mask[:, 90:110].sum() == 78 * 20  # the section is surface, only too wide
    outside = np.r_[0:90, 110:COLS]
    assert np.all(np.argmax(ridge[:, outside], axis=0) == CLICK_ROW)
    np.testing.assert_array_equal(ridge[CLICK_ROW, outside], 1.0)


@pytest.mark.parametrize("width", [74, 75])
def test_a_wider_section_within_the_limit_keeps_the_relative_offset(width):
    """A section up to OPEN_WIDTH × 30 px wide keeps a ridge, at the clicks' relative offset
    t* = 0.25 of its own width: on row 40 + 0.25 · width − ½ (row 58 of a 74 px section)."""
    assert width <= OPEN_WIDTH * WIDTH
    membership, mask = band(widened=(90, 110, width))
    ridge = offset_ridge(membership, mask, A, B, float(WIDTH))
    expected = expected_column(1.0, width, 0.25)
    np.testing.assert_allclose(ridge[:, 90:110], np.repeat(expected[:, None], 20, axis=1),
                               atol=1e-12)
    assert np.all(np.argmax(ridge[:, 90:110], axis=0) == np.argmax(expected))
    assert ridge[:, 90:110].max() > 0.98


def test_a_click_off_the_surface_counts_as_its_middle():
    """Clicks off the mask take t* = 0.5: the ridge peaks at the band's middle (rows 54 and 55,
    t = 14.5 / 30 and 15.5 / 30, alike)."""
    membership, mask = band()
    a, b = np.array([20.0, 10.0]), np.array([180.0, 10.0])  # above the band
    ridge = offset_ridge(membership, mask, a, b, float(WIDTH))
    np.testing.assert_allclose(ridge, np.repeat(expected_column(1.0, WIDTH, 0.5)[:, None],
                                                COLS, axis=1), atol=1e-12)
    np.testing.assert_allclose(ridge[54], ridge[55], atol=1e-12)
    assert set(np.argmax(ridge, axis=0)) <= {54, 55}
