"""The surface model on the device (gpu/network.py, the ``surface`` kind of gpu/kinds.py)
against ONNX Runtime on the CPU and the CPU backend's inputs, outputs, planes and traces. Needs
a GPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import scores, surface
from core.backend import CpuBackend
from core.gradient import gaussian_blur
from core.offset import offset_ridge
from core.raster import load_image
from core.scores import endpoint_similarity, get_score_kind, pad_planes
from core.tracer import TraceParams, trace, trace_many
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():
    from gpu.backend import GpuBackend

    return GpuBackend.create()


@pytest.fixture(scope="module")
def sample():
    return load_image(SAMPLE_IMAGE), json.loads(SAMPLE_CASES.read_text())


def _windows(sample):
    """(pixels, a, b) of a window around each sample case's clicks, in window coordinates:
    small ones run the model at full resolution, large ones at half."""
    raster, cases = sample
    for case in cases:
        a, b = np.asarray(case["a"], float), np.asarray(case["b"], float)
        margin = 0.25 * np.hypot(*(b - a)) + 10
        low = np.maximum(np.floor(np.minimum(a, b) - margin), 0).astype(int)
        high = np.minimum(np.ceil(np.maximum(a, b) + margin),
                          (raster.width, raster.height)).astype(int)
        pixels = raster.read_window(low[1], high[1], low[0], high[0])
        yield pixels, a - low, b - low


def test_device_network_matches_onnx_runtime_on_real_windows(backend, sample):
    network = backend.surface_network()
    assert network is not None, backend.model_note
    import onnxruntime

    session = onnxruntime.InferenceSession(str(surface.MODEL_PATH),
                                           providers=["CPUExecutionProvider"])
    worst = 0.0
    for pixels, a, b in _windows(sample):
        similarity = endpoint_similarity(pixels, a, b)
        image = surface.model_inputs(pixels, similarity, a, b)
        expected = session.run(None, {"image": image})[0][0]
        with backend.context.active():
            got = network.run(image)
        assert got.shape == expected.shape == (surface.OUTPUT_PLANES, *image.shape[2:])
        worst = max(worst, float(np.abs(got - expected).max()))
    assert worst <= 1e-3


def test_inputs_of_one_size_bucket_replay_its_graph_with_their_own_sizes(backend):
    """Sizes that share a program (PROGRAM_BUCKET) one after another, twice over (the second
    round replays the captured graph), each against ONNX Runtime."""
    from gpu.network import PROGRAM_BUCKET

    network = backend.surface_network()
    assert network is not None, backend.model_note
    import onnxruntime

    session = onnxruntime.InferenceSession(str(surface.MODEL_PATH),
                                           providers=["CPUExecutionProvider"])
    top = 3 * PROGRAM_BUCKET
    sizes = [(top - 16, top), (top, top), (top, top - 16), (top - 16, top - 16)]
    rng = np.random.default_rng(3)
    images = {size: rng.uniform(-0.5, 1.5, (1, surface.INPUT_PLANES, *size)).astype(np.float32)
              for size in sizes}
    with backend.context.active():
        programs = {id(network.prepared(*size)) for size in sizes}
        assert len(programs) == 1
        for _ in range(2):
            for size in sizes:
                expected = session.run(None, {"image": images[size]})[0][0]
                got = network.run(images[size])
                assert got.shape == expected.shape
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)
        assert network.prepared(*sizes[0]).graph is not None


def test_programs_beyond_the_cache_s_bytes_are_freed_and_made_again(sample, monkeypatch):
    """With room for about two programs' activations, inputs of five size buckets in turn
    (twice over) keep at most what fits, the one in use always, and each output stays ONNX
    Runtime's."""
    import onnxruntime

    from gpu import network as device_network
    from gpu.backend import GpuBackend

    bucket = device_network.PROGRAM_BUCKET
    top = 8 * bucket
    sizes = [(top - bucket * k, top) for k in range(4)] + [(top, top - bucket)]
    rng = np.random.default_rng(4)
    images = {size: rng.uniform(-0.5, 1.5, (1, surface.INPUT_PLANES, *size)).astype(np.float32)
              for size in sizes}
    session = onnxruntime.InferenceSession(str(surface.MODEL_PATH),
                                           providers=["CPUExecutionProvider"])
    backend = GpuBackend.create()
    try:
        network = backend.surface_network()
        assert network is not None, backend.model_note
        with backend.context.active():
            largest = network.prepared(top, top).capacity
            monkeypatch.setattr(device_network, "CACHED_BYTES", 2 * largest + largest // 2)
            for _ in range(2):
                for size in sizes:
                    got = network.run(images[size])
                    expected = session.run(None, {"image": images[size]})[0][0]
                    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)
                    held = network.cached_bytes()
                    assert held <= device_network.CACHED_BYTES
                    assert held >= network.prepared(*size).capacity
    finally:
        backend.release()


def test_device_model_inputs_and_outputs_match_the_host(backend, sample, monkeypatch):
    """The model's input planes on the device (block means, stretch, similarity, and the
    endpoint plane, which must be equal) and its surface and path probabilities against
    core.surface.surface_model's (the input it gives ONNX Runtime, and what it returns)."""
    from gpu.engine import DeviceTracer
    from gpu.evidence import DeviceEvidence

    network = backend.surface_network()
    assert network is not None, backend.model_note
    import onnxruntime

    session = onnxruntime.InferenceSession(str(surface.MODEL_PATH),
                                           providers=["CPUExecutionProvider"])
    fed = []

    class Recording:
        def run(self, names, feeds):
            fed.append(feeds["image"])
            return session.run(names, feeds)

    monkeypatch.setattr(surface, "_session", lambda path: Recording())
    # |Δp| <= |Δlogit| / 4 (the sigmoid's steepest slope; the upsampling averages), and rounding.
    atol = 1e-3 / 4 + 1e-6
    steps = set()
    with backend.context.active():
        tracer = DeviceTracer(backend.context, "auto", "float64")
        try:
            evidence = DeviceEvidence(tracer)
            # Ground resolution not known, 0.2 m per pixel (larger windows at half only) and
            # 0.067 m (3×3 block means: an odd step; larger windows 6×6).
            for ground in (None, 0.2, 0.067):
                for pixels, a, b in _windows(sample):
                    rows, cols = pixels.shape[:2]
                    runs = surface.model_steps(rows, cols, ground_resolution=ground)
                    steps.add(runs)
                    expected = surface.surface_model(pixels, endpoint_similarity(pixels, a, b),
                                                     a, b, ground_resolution=ground)
                    image = fed[-1]
                    evidence.surface_many([(pixels, a, b)], network, ground_resolution=ground)
                    if len(runs) == 1:  # two runs use the batched pass's own buffers
                        got_image = tracer.download(network.prepared(*image.shape[2:]).input,
                                                    image.shape, np.float32)
                        np.testing.assert_allclose(got_image[0, :4], image[0, :4], rtol=0,
                                                   atol=1e-6)
                        np.testing.assert_array_equal(got_image[0, 4], image[0, 4])
                    for slot, plane in zip(("surface_probability", "surface_path"), expected,
                                           strict=True):
                        got = tracer.download(tracer.slot(slot, 0), (rows, cols), np.float32)
                        np.testing.assert_allclose(got, plane, rtol=0, atol=atol, err_msg=slot)
        finally:
            tracer.release()
    # Full resolution, half (clicks in block coordinates), both, and the finer imagery's.
    assert {(1,), (2,), (1, 2), (3,)} <= steps


@pytest.mark.parametrize("ground_resolution", [None, 0.2, 0.5])
def test_device_surface_planes_match_the_cpu(backend, sample, ground_resolution):
    """Where the ground resolution is not known (larger windows run the model at full and half
    resolution, the larger of the two maps counts), on fine imagery (0.2 m per pixel: larger
    windows at half resolution) and on coarse imagery (0.5 m: at full resolution)."""
    kind = get_score_kind("surface")
    for pixels, a, b in _windows(sample):
        got, tau = backend.score_planes(kind, pixels, a, b, 1.5, ground_resolution)
        expected, _ = CpuBackend().score_planes(kind, pixels, a, b, 1.5, ground_resolution)
        assert got.dtype == np.float32
        assert got.shape == expected.shape
        assert tau == 0.0
        np.testing.assert_allclose(got, expected, atol=2e-3)


def _host_road_term(membership, a, b):
    """core.scores' road-line term of ``surface`` (rows, cols) from its public parts: the
    larger of the clicked-offset ridge and CENTRE_WEIGHT x the centre ridge, and that ridge."""
    mask = scores.surface_mask(membership)
    width = scores.band_width(mask, a, b)
    centre = gaussian_blur(membership, max(scores.CENTRE_BLUR * width, 1.0), "symmetric",
                           truncate=3.0)
    offset = offset_ridge(membership, mask, a, b, width)
    term = -(1.0 - np.maximum(offset, scores.CENTRE_WEIGHT * centre) + scores.LENGTH_COST)
    return term.astype(np.float32), offset, scores.CENTRE_WEIGHT * centre


def test_device_colour_models_equal_the_cpus_exactly(backend):
    """The colour models the similarity kernel reads (evidence.cu's colour_models) are
    core.scores' values exactly: 1 to 16 bands, reflectances, 8- and 16-bit values, whole
    patches and patches cut at the window's edges."""
    from core import scores
    from gpu.engine import DeviceTracer
    from gpu.evidence import DeviceEvidence, _Batch
    from gpu.kernels import WINDOW_DTYPE

    rng = np.random.default_rng(0)
    windows = []
    for bands in (1, 2, 3, 4, 9, 16):
        for _ in range(40):
            pixels = (rng.random((30, 40, bands)) * rng.choice([1.0, 255.0, 65535.0])
                      * rng.uniform(0.1, 1.2)).astype(np.float32)
            windows.append((pixels, rng.uniform((0, 0), (39, 29)), rng.uniform(3, 25, 2)))
    with backend.context.active():
        tracer = DeviceTracer(backend.context, "auto", "float64")
        try:
            batch = _Batch(DeviceEvidence(tracer), windows)
            batch.similarity()
            batch._flush()
            models = tracer.download(batch.at, (len(windows),), WINDOW_DTYPE)["models"]
        finally:
            tracer.release()
    for k, (pixels, a, b) in enumerate(windows):
        bands = pixels.shape[2]
        for e, point in enumerate((a, b)):
            patch = scores.patch_colours(pixels, point, scores.PATCH_RADIUS)
            assert models[k, e] == float(patch.std(axis=0).mean()), (k, e, bands)
            np.testing.assert_array_equal(models[k, 2 + e * bands:2 + (e + 1) * bands],
                                          patch.mean(axis=0))


def test_device_road_term_equals_the_host_on_real_windows(backend, sample):
    """The clicked-offset ridge, the centring and their maximum on the device (float64 path)
    equal the host's on the sample cases' memberships (each case's colour similarity)."""
    from gpu.engine import DeviceTracer
    from gpu.evidence import DeviceEvidence

    offset_wins = 0
    with backend.context.active():
        tracer = DeviceTracer(backend.context, "auto", "float64")
        try:
            evidence = DeviceEvidence(tracer)
            for pixels, a, b in _windows(sample):
                membership = endpoint_similarity(pixels, a, b)
                expected, offset, centre = _host_road_term(membership, a, b)
                got = evidence.road_term(membership, a, b)
                assert got.shape == (1, *membership.shape)
                np.testing.assert_allclose(got[0], expected, rtol=0, atol=1e-5)
                offset_wins += int((offset > centre + 1e-3).sum())
        finally:
            tracer.release()
    assert offset_wins > 100  # the offset ridge decides the term on many pixels


@pytest.mark.parametrize("ground_resolution", [None, 0.5])
def test_device_surface_traces_match_the_cpu(backend, sample, ground_resolution):
    raster, cases = sample
    params = TraceParams(ground_resolution=ground_resolution)
    for case in cases:
        got = trace(raster, case["a"], case["b"], params, backend)
        expected = trace(raster, case["a"], case["b"], params, CpuBackend())
        np.testing.assert_allclose(got.polyline, expected.polyline, atol=1e-9)


def test_launches_replayed_as_cuda_graphs_give_what_the_first_launches_gave(sample, monkeypatch):
    """The evidence kernels' and the DP's launch lists are captured once they come back and
    replayed as CUDA graphs after that: the planes and traces stay those of the first, direct
    launches (the sample cases, each four times, the others in between)."""
    from gpu import graphs
    from gpu.backend import GpuBackend

    captured = []
    real_capture = graphs.capture

    def capture(stream, queue):
        graph = real_capture(stream, queue)
        captured.append(graph is not None)
        return graph

    monkeypatch.setattr(graphs, "capture", capture)
    backend = GpuBackend.create()
    try:
        kind = get_score_kind("surface")
        windows = list(_windows(sample))
        first = [backend.score_planes(kind, pixels, a, b, 1.5)[0] for pixels, a, b in windows]
        raster, cases = sample
        cpu = [trace(raster, case["a"], case["b"], TraceParams(), CpuBackend()) for case in cases]
        for _ in range(4):
            for (pixels, a, b), expected in zip(windows, first, strict=True):
                np.testing.assert_array_equal(backend.score_planes(kind, pixels, a, b, 1.5)[0],
                                              expected)
            for case, expected in zip(cases, cpu, strict=True):
                got = trace(raster, case["a"], case["b"], TraceParams(), backend)
                np.testing.assert_allclose(got.polyline, expected.polyline, atol=1e-9)
    finally:
        backend.release()
    assert len(captured) >= 3  # the evidence kernels before and after the network, the DP
    assert all(captured)


@pytest.mark.parametrize("score", ["surface", "centre"])
def test_device_traces_at_the_image_border_match_the_cpu(backend, sample, score):
    raster, _ = sample
    # Windows leaving the image on the right and at the bottom (padded on the device), with
    # one inside it, traced together and alone.
    pairs = [((540.0, 100.0), (560.0, 400.0)), ((300.0, 540.0), (500.0, 560.0)),
             ((246.0, 354.0), (379.0, 284.0))]
    params = TraceParams(score=score)
    together = trace_many(raster, pairs, params, backend)
    for (a, b), got in zip(pairs, together, strict=True):
        expected = trace(raster, a, b, params, CpuBackend())
        np.testing.assert_allclose(got.polyline, expected.polyline, atol=1e-9)
        np.testing.assert_array_equal(trace(raster, a, b, params, backend).polyline,
                                      got.polyline)


def test_an_unsupported_model_runs_on_the_cpu_and_says_why(tmp_path, monkeypatch, sample):
    import onnx

    from gpu.backend import GpuBackend

    model = onnx.load(str(surface.MODEL_PATH))
    model.graph.node[1].op_type = "Elu"  # ONNX Runtime runs it; the device does not
    path = tmp_path / "elu.onnx"
    onnx.save(model, str(path))
    monkeypatch.setattr(surface, "MODEL_PATH", path)
    backend = GpuBackend.create()
    assert "surface model on the CPU" in backend.model_note
    assert "Elu" in backend.model_note
    assert "Elu" in backend.description
    kind = get_score_kind("surface")
    pixels, a, b = next(_windows(sample))
    got, _ = backend.score_planes(kind, pixels, a, b, 1.5)
    expected, _ = CpuBackend().score_planes(kind, pixels, a, b, 1.5)
    np.testing.assert_array_equal(got, expected)


def _batch_windows(sample):
    """Windows of twelve sizes (more model input sizes than the device network keeps) and the
    sample cases' windows (the model at full and at half resolution); every other one a copy,
    the rest views into the image (read in place on the device)."""
    raster, _ = sample
    windows = list(_windows(sample))
    for i in range(12):
        rows, cols = 20 + 8 * i, 30 + 9 * i
        pixels = raster.read_window(40 + 7 * i, 40 + 7 * i + rows, 60 + 5 * i, 60 + 5 * i + cols)
        windows.append((pixels, np.array([3.0 + i, 4.0]), np.array([cols - 5.0, rows - 6.0])))
    return [(np.array(pixels) if k % 2 else pixels, a, b)
            for k, (pixels, a, b) in enumerate(windows)]


@pytest.mark.parametrize("score", ["surface", "centre"])
def test_device_planes_of_many_windows_equal_those_made_one_at_a_time(backend, sample, score):
    """Equal up to float32 rounding: a batch's network pass may run the wide convolutions
    (gpu.network.WIDE_PIXELS), which add the same terms in another order."""
    kind = get_score_kind(score)
    windows = _batch_windows(sample)
    together = backend.score_planes_many(kind, windows, 1.5)
    assert len(together) == len(windows)
    for (pixels, a, b), (planes, tau) in zip(windows, together, strict=True):
        alone, alone_tau = backend.score_planes(kind, pixels, a, b, 1.5)
        assert planes.shape == (1, *pixels.shape[:2])
        np.testing.assert_allclose(planes, alone, rtol=1e-5, atol=1e-6)
        assert tau == pytest.approx(alone_tau, rel=1e-5)


def test_gpu_trace_many_equals_trace_one_at_a_time(backend, sample):
    raster, cases = sample
    pairs = []
    for case in cases:
        vertices = np.asarray(case["gt"], float)[::40]
        pairs += [(vertices[k], vertices[k + 1]) for k in range(len(vertices) - 1)]
        pairs.append((np.asarray(case["a"], float), np.asarray(case["b"], float)))
    results = trace_many(raster, pairs, TraceParams(), backend)
    for (a, b), got in zip(pairs, results, strict=True):
        expected = trace(raster, a, b, TraceParams(), backend)
        np.testing.assert_array_equal(got.polyline, expected.polyline)
        assert got.score == pytest.approx(expected.score, rel=1e-6)  # float32 model sums


def test_a_backend_that_waits_asleep_traces_the_same(backend, sample):
    from gpu.backend import GpuBackend

    raster, cases = sample
    pairs = [(np.asarray(case["a"], float), np.asarray(case["b"], float)) for case in cases]
    sleeping = GpuBackend.create(blocking_sync=True)  # a batch worker's
    for _ in range(2):  # the second time on the same buffers and network programs
        for got, expected in zip(trace_many(raster, pairs, TraceParams(), sleeping),
                                 trace_many(raster, pairs, TraceParams(), backend), strict=True):
            np.testing.assert_array_equal(got.polyline, expected.polyline)
            assert got.score == expected.score


@pytest.mark.parametrize("score", ["surface", "centre"])
def test_deferred_planes_are_filled_by_the_next_trace_many(backend, sample, score):
    kind = get_score_kind(score)
    windows = _batch_windows(sample)
    expected = [planes.copy() for planes, _ in backend.score_planes_many(kind, windows, 1.5)]
    first = backend.score_planes_many(kind, windows[:5], 1.5, deferred=True)
    second = backend.score_planes_many(kind, windows[5:], 1.5, deferred=True)
    assert backend.trace_many([]) == []
    for (planes, _), values in zip(first + second, expected, strict=True):
        np.testing.assert_array_equal(planes, values)


@pytest.mark.parametrize("score", ["surface", "centre"])
def test_device_padding_equals_padding_the_planes_on_the_host(backend, sample, score):
    kind = get_score_kind(score)
    windows = _batch_windows(sample)[:9]
    pads = [((k % 3, 0), (0, 2 * (k % 2))) for k in range(len(windows))]  # some none
    plain = [planes.copy() for planes, _ in backend.score_planes_many(kind, windows, 1.5)]
    padded = backend.score_planes_many(kind, windows, 1.5, pads=pads)
    for (planes, _), values, pad in zip(padded, plain, pads, strict=True):
        np.testing.assert_array_equal(planes, pad_planes(values, pad, kind.sampler))
