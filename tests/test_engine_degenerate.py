"""The engine on degenerate input: gradient "evidence" that is rounding noise, corridors with no
edge at all, σ given to kinds that do not read the gradient, imagery of a tiny value range,
links a rounding longer than a whole number of px, and points or parameters at the edges of
what a trace accepts. CPU and reference backends here; the GPU's at the end (marked ``gpu``)."""

from __future__ import annotations

import imageio.v3 as iio
import numpy as np
import pytest

from core import links, scores, surface, tracer
from core.backend import CpuBackend, ReferenceBackend
from core.errors import BadParameter, PointOutsideImage
from core.gradient import gradient_margin
from core.raster import Raster, load_image
from core.resources import BUDGET_VARIABLE, OverMemoryBudget
from core.scores import SINE, Evidence
from core.tracer import (
    DEFAULT_SIGMA,
    TraceParams,
    check_params,
    check_point,
    corridor_evidence,
    evidence_sigma,
    trace,
    trace_through,
)
from tests.conftest import SAMPLE_IMAGE

BACKENDS = [CpuBackend(), ReferenceBackend()]
#: A click pair on the sample image (a road), traced in several tests.
A, B = (430.0, 241.0), (486.0, 172.0)
#: A click pair across the middle of the 200 × 200 images below, 60 px from their spot.
ACROSS = ((40.0, 100.0), (160.0, 100.0))
NO_EDGE = ("the image holds no edge to trace between a and b: score '{}' follows the gradient, "
           "and no line in the corridor meets any (a uniform area); score 'surface' (the "
           "default) follows the surface under a and b")


@pytest.fixture(scope="module")
def sample():
    return load_image(SAMPLE_IMAGE)


@pytest.fixture(scope="module")
def flat_blob(tmp_path_factory):
    """The audit's image: an 8-bit PNG of 128 with a 2 × 2 spot of 230 (rows 61–62, cols
    31–32), inside the corridor's window of ACROSS but 8 px beyond its corridor: its gradient
    never reaches the corridor, whose gradient is rounding noise (~1e-17)."""
    pixels = np.full((200, 200), 128, np.uint8)
    pixels[61:63, 31:33] = 230
    path = tmp_path_factory.mktemp("degenerate") / "flat_blob.png"
    iio.imwrite(path, pixels)
    return load_image(path)


def black_with_spot() -> Raster:
    """A float image of zeros with a 2 × 2 spot of 0.9 at rows 61–62, cols 31–32: the
    corridor of ACROSS has no gradient at all (every link scores exactly 0)."""
    pixels = np.zeros((200, 200, 3), np.float32)
    pixels[61:63, 31:33] = 0.9
    return Raster(pixels=pixels)


def same_trace(got, expected) -> None:
    np.testing.assert_array_equal(got.polyline, expected.polyline)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.link_scores, expected.link_scores)
    assert got.score == expected.score
    assert got.params.halfwidth == expected.params.halfwidth


# -- 1. rounding noise is no gradient evidence --------------------------------------------------


@pytest.mark.parametrize("kind", ["sine", "cross"])
def test_rounding_noise_of_a_uniform_area_is_below_the_noise_floor(flat_blob, kind):
    params = TraceParams(score=kind).resolve(120.0)
    corridor = tracer.build_corridor(*ACROSS, params.guides, params.points, params.halfwidth)
    evidence = corridor_evidence(flat_blob, corridor, params)
    rows = np.arange(evidence.planes.shape[1]) + evidence.origin[1]
    noise = float(np.hypot(*evidence.planes[:, np.abs(rows - 100) <= 30]).max())
    assert 0 < noise < 1e-15  # the corridor's gradient: rounding residue, not zero
    floor = scores.value_floor(float(np.ptp(flat_blob.pixels)))  # the spot is in the window
    assert evidence.noise_floor == floor
    assert evidence.tau == (floor if kind == "sine" else 0.0)
    nodes = corridor.node_sets()
    for backend in BACKENDS:
        for t, scored in enumerate(backend.link_scores(evidence, corridor)):
            if kind == "sine":  # every sample at or below the threshold: exactly 0
                np.testing.assert_array_equal(scored, 0.0)
            else:  # |g × v| <= |g|: noise, far below the floor times the link's length
                lengths = np.hypot(*(nodes[t + 1][None, :] - nodes[t][:, None]).T).T
                assert np.all((scored >= 0) & (scored <= 1e-9 * floor * lengths))


def test_the_noise_floor_is_that_of_gradient_kinds_alone(flat_blob):
    params = TraceParams(score="flat").resolve(120.0)
    corridor = tracer.build_corridor(*ACROSS, params.guides, params.points, params.halfwidth)
    assert corridor_evidence(flat_blob, corridor, params).noise_floor == 0.0


def test_the_sine_threshold_of_real_imagery_is_its_median(sample):
    params = TraceParams(score="sine").resolve(float(np.hypot(*np.subtract(B, A))))
    corridor = tracer.build_corridor(A, B, params.guides, params.points, params.halfwidth)
    evidence = corridor_evidence(sample, corridor, params)
    median = float(np.median(np.hypot(evidence.planes[0], evidence.planes[1])))
    assert evidence.tau == median > scores.value_floor(1.0)


def test_the_sine_sampler_counts_magnitudes_up_to_tau_as_zero():
    """12 px links along y: on gx = 1e-7 (at most tau: 0) and on gx = 0.5 (an edge across
    them: |sin φ| = 1 a px); with tau 0, the faint gradient counts too."""
    planes = np.zeros((2, 20, 20), np.float32)
    planes[0, :, :10] = 1e-7
    planes[0, :, 10:] = 0.5
    starts, ends = np.array([[2.0, 3.0], [14.0, 3.0]]), np.array([[2.0, 15.0], [14.0, 15.0]])
    for tau, expected in ((1e-6, 0.0), (0.0, 12.0)):
        evidence = Evidence(planes, (0, 0), (20, 20), SINE, tau=tau)
        for scored in (links.integrate_links(evidence, starts, ends),
                       links.integrate_links_reference(evidence, starts, ends)):
            assert scored[0, 0] == pytest.approx(expected, rel=1e-12, abs=0)
            assert scored[1, 1] == pytest.approx(12.0, rel=1e-12)


# -- 2. a corridor without any edge is refused, not traced along its edge ------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda backend: backend.name)
@pytest.mark.parametrize("kind", ["cross", "sine"])
def test_a_corridor_without_an_edge_is_refused_without_widening(monkeypatch, backend, kind):
    segments = []
    segment = tracer._segment

    def recorded(raster, a, b, params):
        segments.append(params.halfwidth)
        return segment(raster, a, b, params)

    monkeypatch.setattr(tracer, "_segment", recorded)
    with pytest.raises(BadParameter) as refused:
        trace(black_with_spot(), *ACROSS, TraceParams(score=kind), backend)
    assert str(refused.value) == NO_EDGE.format(kind)
    assert segments == [None]  # the first attempt only: no wider corridor


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda backend: backend.name)
@pytest.mark.parametrize("kind", ["cross", "sine"])
def test_rounding_noise_alone_is_refused_too(flat_blob, backend, kind):
    with pytest.raises(BadParameter) as refused:
        trace(flat_blob, *ACROSS, TraceParams(score=kind), backend)
    assert str(refused.value) == NO_EDGE.format(kind)


def test_flat_traces_the_straight_line_where_there_is_no_edge():
    """``flat`` (a gradient kind with a length cost) needs no refusal: with no gradient its
    optimum is the shortest line, unique, off the corridor's edge."""
    for backend in BACKENDS:
        result = trace(black_with_spot(), *ACROSS, TraceParams(score="flat"), backend)
        assert result.params.halfwidth == 30.0
        np.testing.assert_array_equal(result.indices, [20] * 6)
        np.testing.assert_array_equal(result.polyline[:, 1], 100.0)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda backend: backend.name)
def test_an_edge_in_part_of_the_corridor_still_traces(backend):
    pixels = np.zeros((200, 200, 3), np.float32)
    pixels[100:, 90:110] = 0.9  # an edge crossing the corridor's second half
    for kind in ("cross", "sine"):
        assert trace(Raster(pixels=pixels), *ACROSS, TraceParams(score=kind), backend).score > 0


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda backend: backend.name)
def test_a_faint_edge_beside_a_bright_spot_is_an_edge(backend):
    """The floor is a millionth of the window's value range: an edge of a thousandth of it
    (its gradient ~300 times the floor) is traced along."""
    pixels = black_with_spot().pixels
    pixels[:106] += 0.0009  # an edge along row 105.5, 5.5 px beside [a, b]
    result = trace(Raster(pixels=pixels), *ACROSS, TraceParams(score="cross"), backend)
    np.testing.assert_allclose(result.polyline[1:-1, 1], 105.0, atol=1.0)


# -- 3. σ is no parameter of kinds that do not read the gradient --------------------------------


@pytest.mark.parametrize("kind", ["surface", "centre", "colour"])
def test_sigma_does_not_change_kinds_without_the_gradient(sample, kind):
    expected = trace(sample, A, B, TraceParams(score=kind))
    for sigma in (0.5, 1000.0, 1e6):
        same_trace(trace(sample, A, B, TraceParams(score=kind, sigma=sigma)), expected)
    river = trace(sample, A, B, TraceParams(score=kind, line_kind="river"))
    same_trace(trace(sample, A, B, TraceParams(score=kind, line_kind="river", sigma=0.5)), river)


def test_sigma_sets_no_window_of_kinds_without_the_gradient(sample, monkeypatch):
    monkeypatch.setenv(BUDGET_VARIABLE, "1G")
    assert DEFAULT_SIGMA == TraceParams().sigma
    for kind in ("surface", "centre", "colour", "evidence"):
        params = TraceParams(score=kind, sigma=1e6)
        assert evidence_sigma(params) == DEFAULT_SIGMA
        check_params(params)  # a plan of the default σ's window: within 1 GiB
        got, expected = (tracer._segment(sample, A, B, each)
                         for each in (params, TraceParams(score=kind)))
        np.testing.assert_array_equal(got.corridor.guide_points, expected.corridor.guide_points)
        np.testing.assert_array_equal(got.frame.offset, expected.frame.offset)
    assert evidence_sigma(TraceParams(score="surface", evidence_path="x.tif", sigma=3.0)) == 1.5
    for kind in ("cross", "sine", "flat"):  # σ is theirs: its window is planned and refused
        assert evidence_sigma(TraceParams(score=kind, sigma=3.0)) == 3.0
        with pytest.raises(OverMemoryBudget, match="lower sigma$"):
            check_params(TraceParams(score=kind, sigma=1e6))
    near_edge = tracer.build_corridor((3.0, 5.0), (60.0, 5.0), 3, 5, 2.0)  # box from (3, 3)
    shift = gradient_margin(DEFAULT_SIGMA) + 2 - 3
    for sigma in (0.5, 50.0):
        assert tracer.border_shift(near_edge, TraceParams(sigma=sigma).resolve(57.0)
                                   ).tolist() == [shift, shift]
    assert tracer.border_shift(near_edge, TraceParams(score="cross", sigma=50.0).resolve(57.0)
                               ).tolist() == [gradient_margin(50.0) - 1] * 2


# -- 4. the surface model's stretch does not depend on the imagery's scale -----------------------


@pytest.mark.parametrize("scale", [1e-7, 1e-12, 1e6])
def test_the_default_score_traces_imagery_of_any_scale_alike(sample, scale):
    expected = trace(sample, A, B)
    got = trace(Raster(pixels=sample.pixels * np.float32(scale)), A, B)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.polyline, expected.polyline)


def test_the_stretch_span_floor_is_relative():
    assert surface.stretch_span(0.2, 0.7) == 0.7 - 0.2
    assert surface.stretch_span(0.5, 0.5) == 0.5 * surface.STRETCH_SPAN_FLOOR
    assert surface.stretch_span(-3e-7, -3e-7) == 3e-7 * surface.STRETCH_SPAN_FLOOR
    assert surface.stretch_span(0.0, 0.0) == surface.STRETCH_SPAN_ABSOLUTE
    assert scores.ABSOLUTE_FLOOR == surface.STRETCH_SPAN_ABSOLUTE  # evidence.cu's one value
    pixels = np.full((40, 48, 3), 0.25, np.float32)  # blank but for a value beyond its
    pixels[3, 4] = 0.75  # percentiles: stretched by the span's floor
    similarity = np.ones((40, 48), np.float32)
    a, b = np.array([5.0, 5.0]), np.array([40.0, 30.0])
    at_one = surface.model_inputs(pixels, similarity, a, b)
    for scale in (1e-7, 1e-10, 1e5):
        np.testing.assert_array_equal(
            surface.model_inputs(pixels * np.float32(scale), similarity, a, b), at_one)


# -- 5. every backend takes as many samples of a link -------------------------------------------


def test_a_link_a_rounding_longer_than_a_whole_px_takes_as_many_samples_everywhere(sample):
    a = (496.66939707106127, 461.93869697800125)
    b = (448.29808880455914, 352.1196797879579)
    params = TraceParams(score="colour", guides=1, points=3, halfwidth=0.5, max_angle=5e-324)
    cpu, reference = (trace(sample, a, b, params, backend) for backend in BACKENDS)
    np.testing.assert_array_equal(cpu.indices, reference.indices)
    assert cpu.score == pytest.approx(reference.score, rel=1e-13, abs=0)
    np.testing.assert_allclose(cpu.link_scores, reference.link_scores, rtol=1e-13, atol=0)


def test_the_sample_count_takes_its_slack():
    assert links.SAMPLE_COUNT_SLACK == 1e-9
    assert [links.sample_count(length) for length in (0.3, 2.0, 2.5, 60.0, 60.00000000000001,
                                                       60.0 + 2e-9)] == [2, 2, 3, 60, 60, 61]


def test_the_cuda_link_kernel_takes_the_same_slack():
    """links.cu holds no copy of the slack: it is compiled with core.links' value."""
    from gpu.kernels import source, source_options

    assert f"-DLINK_SAMPLE_SLACK={links.SAMPLE_COUNT_SLACK!r}" in source_options("links.cu")
    text = source("links.cu")
    assert "ceil(length64 - LINK_SAMPLE_SLACK)" in text
    assert "#define LINK_SAMPLE_SLACK" not in text


# -- 6. points and parameters at the edges of what a trace takes ---------------------------------


def test_a_point_a_rounding_beyond_the_edge_is_moved_onto_it(sample):
    assert check_point(sample, (571.000000001, 10), "b").tolist() == [571.0, 10.0]
    assert check_point(sample, (-1e-7, 571 + 1e-6), "a").tolist() == [0.0, 571.0]
    result = trace(sample, (430, 241), (571.000000001, 10), TraceParams(score="colour"))
    assert result.polyline[-1].tolist() == [571.0, 10.0]
    with pytest.raises(PointOutsideImage) as outside:
        check_point(sample, (571.00001, 10), "b")
    assert str(outside.value) == "point b=(571.00001, 10) lies outside the 572×572 image"
    with pytest.raises(PointOutsideImage, match=r"point a=\(-2e-06, 3\) lies outside"):
        check_point(sample, (-2e-6, 3), "a")


@pytest.mark.parametrize("point", [("430", "241"), (True, 241), (430, False), "12",
                                   np.array([True, False]), (np.bool_(True), 3.0), (1.0,),
                                   (1.0, 2.0, 3.0), None, 5.0, np.array(["1", "2"])])
def test_a_point_of_no_two_numbers_is_refused(sample, point):
    with pytest.raises(BadParameter, match=r"^point a=.* is not an \(x, y\) pair of numbers$"):
        check_point(sample, point, "a")


@pytest.mark.parametrize("point", [(np.float32(3.5), np.int64(4)), np.array([3.5, 4.0]),
                                   np.array([[3.5, 4.0]]), [3.5, 4], (3.5, 4.0),
                                   (np.array(3.5), np.array(4))])
def test_points_of_numbers_of_any_type_are_taken(sample, point):
    got = check_point(sample, point, "a")
    assert got.dtype == np.float64
    assert got.tolist() == [3.5, 4.0]


def test_a_point_beyond_a_float_is_not_finite(sample):
    with pytest.raises(BadParameter, match="is not finite"):
        check_point(sample, (10**400, 3), "a")
    with pytest.raises(BadParameter, match=r"^point a=\(inf, 3\) is not finite$"):
        check_point(sample, (float("inf"), 3), "a")


@pytest.mark.parametrize(("changes", "message"), [
    ({"ground_resolution": 0.0009999},
     "ground resolution 0.0009999 m per pixel, outside 0.001 to 10000 m"),
    ({"ground_resolution": 10000.000001},
     "ground resolution 10000.000001 m per pixel, outside 0.001 to 10000 m"),
    ({"sigma": float("inf")}, "sigma must be a finite number of px, got inf"),
    ({"sigma": float("nan")}, "sigma must be a finite number of px, got nan"),
    ({"halfwidth": float("inf")}, "halfwidth must be a finite number of px, got inf"),
    ({"halfwidth": 0.0}, "halfwidth must be > 0 px, got 0.0"),
    ({"guides": 2.5}, "guides must be an integer >= 1, got 2.5"),
])
def test_out_of_range_parameters_say_exactly_what_is_wrong(changes, message):
    with pytest.raises(BadParameter) as refused:
        TraceParams(**changes).check()
    assert str(refused.value) == message


def test_whole_counts_given_as_floats_become_ints(sample):
    params = TraceParams(score="colour", guides=3.0, points=np.int64(9))
    params.check()
    assert (params.guides, params.points) == (3, 9)
    assert type(params.guides) is int
    assert type(params.points) is int
    result = trace(sample, A, B, TraceParams(score="colour", guides=3.0, points=9.0))
    assert type(result.params.guides) is int
    assert type(result.params.points) is int
    same_trace(result, trace(sample, A, B, TraceParams(score="colour", guides=3, points=9)))


@pytest.mark.parametrize(("via", "message"), [
    ([B], "via 1 → b: endpoints via 1=(486, 172) and b=(486, 172) are the same point; the ends "
          "of a leg must be at least 2 px apart"),
    ([A], "a → via 1: endpoints a=(430, 241) and via 1=(430, 241) are the same point; the ends "
          "of a leg must be at least 2 px apart"),
    ([(455.0, 215.0), (455.0, 216.5)], "via 1 → via 2: endpoints via 1=(455, 215) and "
                                       "via 2=(455, 216.5) are 1.5 px apart; the ends of a leg "
                                       "must be at least 2 px apart"),
])
def test_a_leg_too_short_names_its_own_ends(sample, via, message):
    names = ["a", *(f"via {k + 1}" for k in range(len(via))), "b"]
    with pytest.raises(BadParameter) as refused:
        trace_through(sample, [A, *via, B], TraceParams(score="colour"), names=names)
    assert str(refused.value) == message


def test_one_leg_keeps_the_endpoints_wording(sample):
    with pytest.raises(BadParameter, match=r"^endpoints a=\(430, 241\) and b=\(431, 241\) must "
                                           r"be at least 2 px apart$"):
        trace_through(sample, [A, (431.0, 241.0)], names=["a", "b"])


# -- the GPU backend ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu():
    from gpu.backend import GpuBackend

    return GpuBackend.create()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cross", "sine"])
def test_the_gpu_refuses_a_corridor_without_an_edge(gpu, flat_blob, kind):
    for raster in (flat_blob, black_with_spot()):
        with pytest.raises(BadParameter) as refused:
            trace(raster, *ACROSS, TraceParams(score=kind), gpu)
        assert str(refused.value) == NO_EDGE.format(kind)


@pytest.mark.gpu
def test_the_gpu_traces_the_degenerate_cases_as_the_cpu(gpu, sample):
    expected = trace(sample, A, B, TraceParams(), gpu)
    for changed in (TraceParams(sigma=0.5), TraceParams(sigma=1e6)):
        same_trace(trace(sample, A, B, changed, gpu), expected)
    tiny = trace(Raster(pixels=sample.pixels * np.float32(1e-7)), A, B, TraceParams(), gpu)
    np.testing.assert_array_equal(tiny.indices, expected.indices)
    a = (496.66939707106127, 461.93869697800125)
    b = (448.29808880455914, 352.1196797879579)
    params = TraceParams(score="colour", guides=1, points=3, halfwidth=0.5, max_angle=5e-324)
    on_gpu, on_cpu = (trace(sample, a, b, params, backend) for backend in (gpu, CpuBackend()))
    np.testing.assert_array_equal(on_gpu.indices, on_cpu.indices)
    assert on_gpu.score == pytest.approx(on_cpu.score, rel=1e-6 if gpu.precision == "float32"
                                         else 1e-12)


@pytest.mark.gpu
def test_the_gpu_stretches_imagery_of_any_scale_alike(gpu, sample):
    window = np.ascontiguousarray(sample.pixels[150:260, 400:520])
    a, b = np.array([30.0, 91.0]), np.array([86.0, 22.0])
    assert gpu.surface_network() is not None, gpu.model_note
    kind = scores.get_score_kind("surface")
    expected = gpu.score_planes(kind, window, a, b, 1.5)[0]
    tiny = np.ascontiguousarray(window * np.float32(1e-7))
    np.testing.assert_allclose(gpu.score_planes(kind, tiny, a, b, 1.5)[0], expected, atol=1e-4)
    np.testing.assert_allclose(kind.planes(tiny_inputs(tiny, a, b))[0], expected, atol=1e-4)


def tiny_inputs(pixels, a, b):
    from core.scores import ScoreInputs

    return ScoreInputs(pixels, None, None, a, b)
