"""Memory of long slanted traces: read in a frame turned to [a, b], and planned honestly."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from core.errors import BadParameter
from core.raster import Raster
from core.resources import BUDGET_VARIABLE, window_pixels
from core.scores import get_score_kind, window_memory
from core.tracer import TURNED_FRAME_PIXELS, TraceParams, trace

SIZE = 20000


@dataclass
class DiagonalRoad(Raster):
    """A SIZE² image of a 13 px wide grey road along x = y on green, made window by window
    (nothing is held in memory); ``reads`` records the pixels of every window read."""

    reads: list = field(default_factory=list)

    def read_window(self, row0, row1, col0, col1):
        """The road's pixels of rows ``row0:row1``, columns ``col0:col1`` (clipped)."""
        row0, row1 = max(row0, 0), min(row1, self.height)
        col0, col1 = max(col0, 0), min(col1, self.width)
        self.reads.append((row1 - row0) * (col1 - col0))
        assert self.reads[-1] <= 4_000_000, "a window far larger than any corridor's"
        rows = np.arange(row0, row1, dtype=np.float32)[:, None]
        cols = np.arange(col0, col1, dtype=np.float32)[None, :]
        road = np.clip(7.0 - np.abs(cols - rows) / np.sqrt(np.float32(2)), 0, 1)[:, :, None]
        ground, paving = np.float32([0.27, 0.39, 0.22]), np.float32([0.65, 0.63, 0.59])
        return (ground + road * (paving - ground)).astype(np.float32)


def diagonal_road() -> DiagonalRoad:
    return DiagonalRoad(np.broadcast_to(np.zeros((1, 1, 3), np.float32), (SIZE, SIZE, 3)))


def test_a_long_diagonal_reads_only_the_strip_around_its_corridor(monkeypatch):
    """A 7071 px diagonal click: its axis-aligned window would be 5200² px (2.6 GiB for
    ``centre``); the turned one is 7090 × 339 px, read in pieces."""
    monkeypatch.setenv(BUDGET_VARIABLE, "600M")
    raster = diagonal_road()
    a, b = (3000.0, 3000.0), (8000.0, 8000.0)
    result = trace(raster, a, b, TraceParams(score="centre"))
    assert sum(raster.reads) < 3 * 7090 * 339
    np.testing.assert_array_equal(result.polyline[[0, -1]], [a, b])
    assert np.abs(result.polyline[:, 0] - result.polyline[:, 1]).max() / np.sqrt(2) <= 1.0


def test_an_ordinary_diagonal_reads_its_axis_aligned_window():
    """Clicks whose window holds at most TURNED_FRAME_PIXELS are traced as before: one read
    of the corridor's box (the accuracy cases' polylines stay the same)."""
    raster = diagonal_road()
    a, b = (3000.0, 3000.0), (3400.0, 3400.0)
    trace(raster, a, b, TraceParams(score="centre"))
    # 565.7 px, 28 guides, half-width 141.4: the first and last guides' ends span columns
    # (and rows) 2913 to 3487; 9 px margins.
    assert raster.reads == [(3487 - 2913 + 1 + 2 * 9) ** 2]
    assert raster.reads[0] < TURNED_FRAME_PIXELS


def test_a_long_diagonal_at_the_border_is_refused_with_what_to_do(monkeypatch):
    """Where the turned window leaves the image the axis-aligned one is read: 8230² px for the
    surface model at about 290 bytes a pixel (measured: 245 to 290), refused under a 10 GiB
    budget (the old estimate, 128 bytes a pixel, let it through to a 16 GB peak)."""
    monkeypatch.setenv(BUDGET_VARIABLE, "10G")
    raster = diagonal_road()
    with pytest.raises(BadParameter, match=r"corridor window of 6\.7\de\+07 px .*score surface"
                                           r"\) needs 1\d\.\d GiB \(1\d\.\d GiB in all\), over the "
                                           r"memory budget of "
                                           r"10\.0 GiB .*: trace it in shorter legs \(click a "
                                           r"point in between; --via X,Y on the command line\) "
                                           r"or lower halfwidth$"):
        trace(raster, (10.0, 10.0), (8010.0, 8010.0),
              TraceParams(score="surface", ground_resolution=0.3))
    assert raster.reads == []


@pytest.mark.parametrize(("kind", "river", "ground", "measured"), [
    ("surface", False, 0.3, 288.5),  # model on 2×2 block means
    ("surface", True, 0.3, 280.6),
    ("surface", False, 0.1, 139.7),  # on 4×4 block means
    ("centre", True, None, 89.3),
    ("colour", False, None, 77.3),
    ("cross", False, None, 164.0),
    ("sine", False, None, 164.0),
    ("flat", False, None, 92.5),
])
def test_window_memory_covers_the_measured_peaks(kind, river, ground, measured):
    """Peak RSS of one trace per pixel of its window (tracemalloc misses ONNX Runtime),
    measured on 0.8, 2.5 and 6.7 M px windows of a 0.3 m GeoTIFF (the largest per kind)."""
    window_px = 6.7e6
    estimate = window_memory(get_score_kind(kind), window_px, river, ground) / window_px
    assert measured <= estimate <= 1.25 * measured


def test_window_pixels_is_the_corridor_box():
    """300 px along a row, half-width 75: (300 + 22) × (150 + 22) with a 9 px margin."""
    assert window_pixels((300.0, 0.0), 75.0, 9) == pytest.approx(322 * 172)
