"""The click's faster paths give, bit for bit, what the plain computations give: the surface
model's input and output handling (core/surface.py) and the DP's link scores, of which the CPU
backend scores only those the DP's result reads (core/links.py, core/backend.py)."""

from __future__ import annotations

import numpy as np
import pytest

from core import surface
from core.backend import CpuBackend
from core.dp import DPProblem, solve_fast
from core.errors import NoAdmissiblePath
from core.guides import admissible_windows, build_corridor
from core.links import integrate_links, useful_links
from core.scores import CROSS, SCALAR, SINE, Evidence

# --- Surface model: percentiles, input planes, block means, sigmoid ---------------------------


def _percentile_arrays(rng):
    """Arrays of many kinds: 1 to 260 000 values, ties, infinities, NaN, views, float64."""
    yield rng.random((270, 321, 3), dtype=np.float32)
    yield (rng.integers(0, 256, (135, 161, 3)) / 255).astype(np.float32)  # 256 values: ties
    yield np.full((40, 50, 3), 0.25, dtype=np.float32)
    # Ties across the ranks interpolated between (1 % of zeros, 1 % of twos).
    yield rng.choice(np.float32([0, 1, 2]), size=(100, 100, 3), p=[0.01, 0.98, 0.01])
    yield rng.normal(size=(60, 70, 4)).astype(np.float32)[:, :, :3]  # a view, not contiguous
    yield rng.normal(size=20000)
    sampled_low = rng.random(30000, dtype=np.float32)
    sampled_low[::surface.PERCENTILE_SAMPLE_STRIDE] -= 2  # the sample misleads: numpy answers
    yield sampled_low
    infinite = rng.random((90, 90, 3), dtype=np.float32)
    infinite[5, 5, 1], infinite[7, 7, 0] = np.inf, -np.inf
    yield infinite
    not_a_number = rng.random((90, 90, 3), dtype=np.float32)
    not_a_number[40, 3, 2] = np.nan
    yield not_a_number
    for size in (1, 2, 3, 17, 640):
        yield rng.random(size, dtype=np.float32)


@pytest.mark.parametrize("q", [(1.0, 99.0), (0.0, 100.0), (0.1, 50.0, 99.9), (25.0,)])
def test_percentiles_equal_numpys(q):
    for values in _percentile_arrays(np.random.default_rng(len(q))):
        with np.errstate(invalid="ignore"):  # inf − inf, in numpy's interpolation
            got, expected = surface.percentiles(values, q), np.percentile(values, q)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)  # NaN where numpy's is


def test_percentiles_of_a_window_select_without_numpys_percentile(monkeypatch):
    values = np.random.default_rng(1).random((270, 321, 3), dtype=np.float32)
    expected = np.percentile(values, surface.STRETCH_PERCENTILES)
    monkeypatch.setattr(np, "percentile", None)  # the fast path does not fall back
    np.testing.assert_array_equal(surface.percentiles(values, surface.STRETCH_PERCENTILES),
                                  expected)


def _plain_model_inputs(pixels, similarity, a, b):
    """model_inputs as plain numpy: np.percentile, concatenated planes, np.pad."""
    bands = pixels[:, :, :3] if pixels.shape[2] >= 3 else np.repeat(pixels[:, :, :1], 3, axis=2)
    low, high = np.percentile(bands, surface.STRETCH_PERCENTILES)
    span = max(float(high - low), surface.STRETCH_SPAN_FLOOR)
    stretched = np.clip((bands - np.float32(low)) / np.float32(span), *surface.STRETCH_CLIP)
    planes = np.concatenate([stretched.transpose(2, 0, 1), similarity[None]]).astype(np.float32)
    rows, cols = similarity.shape
    pad = ((0, 0), (0, (-rows) % surface.SIZE_MULTIPLE), (0, (-cols) % surface.SIZE_MULTIPLE))
    planes = np.pad(planes, pad, mode="reflect")
    clicks = surface.endpoint_plane(a, b, *planes.shape[1:])
    return np.concatenate([planes, clicks[None]])[None]


@pytest.mark.parametrize("bands", [1, 3, 4])
@pytest.mark.parametrize("shape", [(1, 1), (5, 40), (15, 17), (16, 32), (17, 33), (31, 47),
                                   (135, 161), (270, 321)])
def test_model_inputs_equal_the_plain_computation(shape, bands):
    rng = np.random.default_rng(shape[0] * bands)
    pixels = rng.uniform(0, 255, size=(*shape, bands)).astype(np.float32)
    similarity = rng.random(shape, dtype=np.float32)
    a, b = np.array([0.5, 0.0]), np.array([shape[1] - 1.0, shape[0] / 2])
    got = surface.model_inputs(pixels, similarity, a, b)
    expected = _plain_model_inputs(pixels, similarity, a, b)
    assert got.dtype == expected.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


def _plain_block_mean(planes, step):
    rows, cols, _ = planes.shape
    padded = np.pad(planes, ((0, (-rows) % step), (0, (-cols) % step), (0, 0)), mode="edge")
    total = sum(padded[i::step, j::step].astype(np.float32)
                for i in range(step) for j in range(step))
    return total / np.float32(step * step)


@pytest.mark.parametrize("step", [2, 3, 4])
def test_block_means_equal_the_plain_computation(step):
    rng = np.random.default_rng(step)
    for shape in ((1, 1, 1), (7, 9, 3), (64, 48, 1), (135, 161, 3)):
        planes = rng.normal(size=shape).astype(np.float32)
        planes.flat[::5] = -0.0  # blocks of negative zeros sum from +0, as the plain sum
        got, expected = surface._block_mean(planes, step), _plain_block_mean(planes, step)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


class _FixedLogits:
    """Stands in for an ONNX Runtime session: returns the same logits whatever it is fed."""

    def __init__(self, logits):
        self.logits = logits

    def run(self, names, feeds):
        return [self.logits]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("step", [1, 2])
def test_model_maps_are_the_plain_sigmoid_of_the_logits(step, dtype):
    rng = np.random.default_rng(step)
    rows, cols = 37, 50
    pixels = rng.random((rows, cols, 3), dtype=np.float32)
    similarity = rng.random((rows, cols), dtype=np.float32)
    model_rows, model_cols = -(-rows // step), -(-cols // step)
    padded = (-(-model_rows // surface.SIZE_MULTIPLE) * surface.SIZE_MULTIPLE,
              -(-model_cols // surface.SIZE_MULTIPLE) * surface.SIZE_MULTIPLE)
    logits = rng.normal(scale=8, size=(1, surface.OUTPUT_PLANES, *padded)).astype(dtype)
    got = surface._model_maps(_FixedLogits(logits), "fixed", pixels, similarity,
                              np.array([2.0, 3.0]), np.array([40.0, 30.0]), step)
    plain = 1.0 / (1.0 + np.exp(-logits[0][:, :model_rows, :model_cols]))
    for plane, expected in zip(got, plain, strict=True):
        if step > 1:
            expected = surface._upsample(expected, step, rows, cols)
        assert plane.dtype == np.float32
        np.testing.assert_array_equal(plane, expected.astype(np.float32))


# --- Link scores the DP reads ----------------------------------------------------------------


def _corridor(rng, guides, points):
    """A corridor of random direction and width well inside a 200 × 200 px window."""
    a = rng.uniform(80, 120, 2)
    angle = rng.uniform(0, 2 * np.pi)
    b = a + rng.uniform(5, 40) * np.array([np.cos(angle), np.sin(angle)])
    return build_corridor(a, b, guides, points, rng.uniform(0.5, 30))


def _stages(useful):
    """useful_links' (first, between, last) as m + 1 arrays, like the links."""
    first, between, last = useful
    return [first, *between, last]


def _on_admissible_paths(windows):
    """Per stage, the links of some admissible path from a to b (plain loops): reached from
    a through windows, and continued to b."""
    lo, hi = windows.lo, windows.hi
    reached = [np.ones((1, lo[0].shape[0]), dtype=bool)]
    for t in range(len(lo)):
        before = reached[-1]
        reached.append(np.array([[before[lo[t][j, k]:hi[t][j, k] + 1, j].any()
                                  for k in range(lo[t].shape[1])]
                                 for j in range(lo[t].shape[0])]))
    continued = reached[-1]
    on_paths = [continued]
    for t in range(len(lo) - 1, -1, -1):
        before = np.zeros_like(reached[t])
        for j, k in zip(*np.nonzero(continued), strict=True):
            before[lo[t][j, k]:hi[t][j, k] + 1, j] = True
        continued = before & reached[t]
        on_paths.insert(0, continued)
    return on_paths


def _problems(seed):
    """Random windows: 1 to 8 guides of 2 to 33 points, turn limits from 5° to 180°."""
    rng = np.random.default_rng(seed)
    for guides in (1, 2, 3, 8):
        for points in (2, 5, 16, 33):
            for theta in (5, 20, 60, 180):
                corridor = _corridor(rng, guides, points)
                yield rng, corridor, admissible_windows(corridor, np.deg2rad(theta))


def test_useful_links_hold_every_admissible_path_and_no_empty_window():
    left_out = 0
    for _, _, windows in _problems(0):
        useful = _stages(useful_links(windows))
        for t, (marked, exact) in enumerate(zip(useful, _on_admissible_paths(windows),
                                                strict=True)):
            assert marked.shape == exact.shape
            assert marked.dtype == bool
            assert not (exact & ~marked).any()
            if t:
                assert not (marked & (windows.lo[t - 1] > windows.hi[t - 1])).any()
            left_out += int((~marked).sum())
    assert left_out  # the narrower turn limits leave links out


@pytest.mark.parametrize("fill", [-np.inf, np.inf, np.nan, 1e300])
def test_the_dp_reads_only_useful_links(fill):
    """The DP's path, score and link scores along it stay the same whatever the other links
    score; also on paths along the corridor's edge (its first or last points)."""
    solved = 0
    for rng, corridor, windows in _problems(1):
        sizes = [1] + [corridor.points] * corridor.guides + [1]
        links = [rng.normal(size=(sizes[t], sizes[t + 1])) for t in range(len(sizes) - 1)]
        edge = int(rng.integers(2)) * (corridor.points - 1)
        for link in links[1:-1]:
            link[edge, edge] += 10.0  # a road along the corridor's edge
        kept = [np.where(marked, link, fill)
                for marked, link in zip(_stages(useful_links(windows)), links, strict=True)]
        try:
            expected = solve_fast(DPProblem(corridor, windows, links))
        except NoAdmissiblePath:
            with pytest.raises(NoAdmissiblePath):
                solve_fast(DPProblem(corridor, windows, kept))
            continue
        got = solve_fast(DPProblem(corridor, windows, kept))
        np.testing.assert_array_equal(got.indices, expected.indices)
        assert got.score == expected.score
        nodes = [0, *expected.indices.tolist(), 0]
        for t, link in enumerate(kept):
            assert link[nodes[t], nodes[t + 1]] == links[t][nodes[t], nodes[t + 1]]
        solved += 1
    assert solved > 40


@pytest.mark.parametrize("sampler", [SCALAR, CROSS, SINE])
def test_useful_link_scores_equal_the_full_ones(sampler):
    rng = np.random.default_rng(sampler)
    planes = rng.normal(size=(1 if sampler == SCALAR else 2, 200, 200)).astype(np.float32)
    evidence = Evidence(planes, (0, 0), (150, 150), sampler, tau=0.5)  # some links leave it
    starts, ends = rng.uniform(60, 190, (6, 7, 2)), rng.uniform(60, 190, (6, 9, 2))
    useful = rng.random((6, 7, 9)) < 0.7
    full = integrate_links(evidence, starts, ends)
    kept = integrate_links(evidence, starts, ends, useful=useful)
    np.testing.assert_array_equal(kept, np.where(useful, full, -np.inf))
    one = integrate_links(evidence, starts[2], ends[2], useful=useful[2])
    np.testing.assert_array_equal(one, kept[2])


@pytest.mark.parametrize("sampler", [SCALAR, CROSS, SINE])
def test_cpu_trace_equals_the_trace_of_every_link_score(sampler):
    """CpuBackend.trace (useful links only) against the DP on the full link_scores, which
    stay the full array (the GPU backend's are compared with them)."""
    backend = CpuBackend()
    traced = 0
    for rng, corridor, windows in _problems(2 + sampler):
        planes = rng.random((1 if sampler == SCALAR else 2, 200, 200), dtype=np.float32)
        evidence = Evidence(planes, (0, 0), (150, 150), sampler, tau=0.3)
        links = backend.link_scores(evidence, corridor)
        assert all(np.isfinite(link).all() for link in links)
        try:
            expected = solve_fast(DPProblem(corridor, windows, links))
        except NoAdmissiblePath:
            with pytest.raises(NoAdmissiblePath):
                backend.trace(evidence, corridor, windows)
            continue
        got = backend.trace(evidence, corridor, windows)
        nodes = [0, *expected.indices.tolist(), 0]
        np.testing.assert_array_equal(got.indices, expected.indices)
        assert got.score == expected.score
        np.testing.assert_array_equal(
            got.link_scores, [link[nodes[t], nodes[t + 1]] for t, link in enumerate(links)])
        traced += 1
    assert traced > 30
