"""core.tracer.trace_many: trace()'s result pair by pair, errors per pair, any chunking."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import tracer
from core.backend import CpuBackend
from core.errors import BadParameter, PointOutsideImage
from core.guides import build_corridor
from core.raster import load_image
from core.scores import CROSS, SCALAR, pad_planes
from core.tracer import TraceParams, TraceResult, trace, trace_many
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE
from tests.synthetic import BULGE, road_image


@pytest.fixture(scope="module")
def sample():
    return load_image(SAMPLE_IMAGE), json.loads(SAMPLE_CASES.read_text())


def _pairs(cases):
    """40 px segments along the sample's centrelines, and each case's own clicks (a mix of
    small and large windows, some touching the corridor's edge and traced again)."""
    pairs = []
    for case in cases:
        vertices = np.asarray(case["gt"], float)[::40]
        pairs += [(vertices[k], vertices[k + 1]) for k in range(len(vertices) - 1)]
        pairs.append((np.asarray(case["a"], float), np.asarray(case["b"], float)))
    return pairs


def _same(got, expected):
    assert isinstance(got, TraceResult)
    np.testing.assert_array_equal(got.polyline, expected.polyline)
    np.testing.assert_array_equal(got.indices, expected.indices)
    assert got.score == expected.score
    assert got.params == expected.params
    assert ("retrace" in got.timings_ms) == ("retrace" in expected.timings_ms)


@pytest.mark.parametrize("params", [TraceParams(), TraceParams(score="centre"),
                                    TraceParams(line_kind="river")],
                         ids=["surface", "centre", "river"])
def test_trace_many_equals_trace_pair_by_pair(sample, params):
    raster, cases = sample
    pairs = _pairs(cases)
    results = trace_many(raster, pairs, params)
    assert len(results) == len(pairs)
    for (a, b), got in zip(pairs, results, strict=True):
        _same(got, trace(raster, a, b, params))


def test_trace_many_traces_again_those_that_touch_the_corridors_edge():
    raster = road_image(BULGE)  # the bulge leaves the first corridor: traced again, wider
    pairs = [(BULGE[0], BULGE[-1]), (BULGE[0], BULGE[10]), (BULGE[20], BULGE[-1])]
    results = trace_many(raster, pairs)
    assert "retrace" in results[0].timings_ms
    for (a, b), got in zip(pairs, results, strict=True):
        _same(got, trace(raster, a, b))


def test_trace_many_reports_each_pairs_error_and_traces_the_rest(sample):
    raster, cases = sample
    good = _pairs(cases)[:2]
    pairs = [good[0], ((10.0, 10.0), (1e4, 10.0)), ((50.0, 50.0), (50.5, 50.0)), good[1]]
    results = trace_many(raster, pairs)
    assert isinstance(results[1], PointOutsideImage)
    assert isinstance(results[2], BadParameter)
    assert "at least 2 px apart" in str(results[2])
    _same(results[0], trace(raster, *good[0]))
    _same(results[3], trace(raster, *good[1]))
    with pytest.raises(PointOutsideImage):
        trace(raster, *pairs[1])


def test_trace_many_in_small_chunks_gives_the_same_results(sample, monkeypatch):
    raster, cases = sample
    pairs = _pairs(cases)
    whole = trace_many(raster, pairs)
    monkeypatch.setattr(tracer, "BATCH_PIXELS", 1)  # one pair a chunk
    for got, expected in zip(trace_many(raster, pairs), whole, strict=True):
        _same(got, expected)


def test_trace_many_passes_hold_at_most_batch_segments(sample, monkeypatch):
    raster, cases = sample
    pairs = _pairs(cases)[:5]
    whole = trace_many(raster, pairs)
    monkeypatch.setattr(tracer, "BATCH_SEGMENTS", 2)
    backend = _RecordingBackend()
    for got, expected in zip(trace_many(raster, pairs, TraceParams(), backend), whole,
                             strict=True):
        _same(got, expected)
    assert backend.traced == [2, 2, 1]


def test_trace_many_of_nothing_is_nothing(sample):
    assert trace_many(sample[0], []) == []


class _RecordingBackend(CpuBackend):
    """The CPU backend, noting the ``deferred`` and ``pads`` of every score_planes_many call
    and the number of problems of every trace_many call."""

    def __init__(self):
        self.deferred, self.pads, self.traced = [], [], []

    def score_planes_many(self, kind, windows, sigma, deferred=False, pads=None,
                          ground_resolution=None):
        self.deferred.append(deferred)
        self.pads.append(pads)
        return super().score_planes_many(kind, windows, sigma, deferred, pads, ground_resolution)

    def trace_many(self, problems):
        self.traced.append(len(problems))
        return super().trace_many(problems)


def test_trace_many_defers_the_planes_and_has_the_backend_pad_them(sample):
    raster, cases = sample
    inside = _pairs(cases)[:3]
    at_border = ((2.0, 100.0), (60.0, 110.0))  # its window leaves the image on the left
    backend = _RecordingBackend()
    results = trace_many(raster, [*inside, at_border], TraceParams(), backend)
    assert backend.deferred == [True]  # the trace alone reads them: the device may go on
    assert backend.traced == [4]  # none traced again here: no second, empty call
    pads = backend.pads[0]
    assert all(pad == ((0, 0), (0, 0)) for pad in pads[:3])
    assert pads[3][0] == (0, 0)  # rows: none
    assert pads[3][1][0] > 0  # columns on the left
    assert pads[3][1][1] == 0
    _same(results[3], trace(raster, *at_border))
    corridor = build_corridor(np.array(inside[0][0]), np.array(inside[0][1]), 4, 9, 8.0)
    tracer.corridor_evidence(raster, corridor, TraceParams(), backend=backend)
    assert backend.deferred[-1] is False  # public evidence always holds its values


@pytest.mark.parametrize("sampler", [SCALAR, CROSS])
def test_padded_planes_keep_theirs_and_fill_with_the_worst_value_or_zero(sampler):
    planes = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) - 5
    padded = pad_planes(planes, ((1, 2), (0, 3)), sampler)
    assert padded.shape == (2, 6, 7)
    np.testing.assert_array_equal(padded[:, 1:4, :4], planes)
    fill = -5.0 if sampler == SCALAR else 0.0
    assert np.all(padded[:, 0] == fill)
    assert np.all(padded[:, 4:] == fill)
    assert np.all(padded[:, :, 4:] == fill)
    assert pad_planes(planes, ((0, 0), (0, 0)), sampler) is planes
