"""The CUDA backend against the CPU backend (and the oracle: tests/test_dp_oracle.py).

Tests marked ``gpu`` need pycuda and a device (``conftest.py`` skips them otherwise). The
schedule test runs everywhere: a numpy twin of the kernels' data layout checks the bidirectional
schedule (forward + backward halves, inverted windows, merge, backtracking) against the CPU DP.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from core.backend import CpuBackend
from core.dp import DPProblem, solve_fast
from core.errors import BackendUnavailable, NoAdmissiblePath
from core.guides import admissible_windows, build_corridor
from core.links import integrate_links
from core.raster import load_image
from core.scores import CROSS, SCALAR, SINE, Evidence
from core.tracer import TraceParams, corridor_evidence, trace
from gpu.schedule import Schedule
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE
from tests.oracle import assert_near_optimal, path_score, random_problem

# -- a numpy twin of dp.cu's steps, for the schedule ----------------------------------------------


def _inverted_windows(lo, hi, n_o):
    """reverse_windows of dp.cu: for (r, o), the q with lo[r, q] <= o <= hi[r, q]."""
    o = np.arange(n_o)
    rlo = np.array([np.searchsorted(-row, -o, side="left") for row in lo])
    rhi = np.array([np.searchsorted(-row, -o, side="right") - 1 for row in hi])
    return rlo, rhi


def _step(prev, link, lo, hi):
    """out[o, r] = link[r, o] + max prev[r, lo:hi+1]; arg[r, o] = its (first) argmax."""
    n_r, n_o = link.shape
    out, arg = np.full((n_o, n_r), -np.inf), np.full((n_r, n_o), -1)
    for r in range(n_r):
        for o in range(n_o):
            if lo[r, o] <= hi[r, o]:
                arg[r, o] = lo[r, o] + int(np.argmax(prev[r, lo[r, o]:hi[r, o] + 1]))
                out[o, r] = link[r, o] + prev[r, arg[r, o]]
    return out, arg


def _emulate(problem):
    links, windows = problem.links, problem.windows
    schedule = Schedule((*(link.shape[0] for link in links), 1))
    m, c, sizes = schedule.guides, schedule.middle, schedule.sizes
    stored = [link.T if schedule.transposed(t) else link for t, link in enumerate(links)]
    inverted = {s: _inverted_windows(windows.lo[s - 1], windows.hi[s - 1], sizes[s - 1])
                for s in schedule.reversed_turns}
    forward, backward, args = {0: stored[0].reshape(-1, 1)}, {m: stored[m].reshape(-1, 1)}, {}
    for steps in schedule.rounds:
        for step in steps:
            t = step.stage
            if step.kind == "forward":
                forward[t], args[t] = _step(forward[t - 1], stored[t], windows.lo[t - 1],
                                            windows.hi[t - 1])
            else:
                backward[t], args[t] = _step(backward[t + 1], stored[t], *inverted[t + 1])
    total, merge_arg = _step(forward[c - 1], backward[c], windows.lo[c - 1], windows.hi[c - 1])
    j, k = np.unravel_index(np.argmax(total.T), total.T.shape)
    x = np.zeros(m + 2, dtype=int)
    x[c], x[c + 1], x[c - 1] = j, k, merge_arg[j, k]
    for t in range(c - 1, 0, -1):
        x[t - 1] = args[t][x[t], x[t + 1]]
    for t in range(c, m):
        x[t + 2] = args[t][x[t + 1], x[t]]
    return total[k, j], x[1:m + 1]


def test_bidirectional_schedule_matches_cpu_dp():
    rng = np.random.default_rng(3)
    checked = 0
    for m in range(1, 9):
        for d in (2, 3, 6, 11):
            for theta in (5, 30, 90, 180):
                problem = random_problem(rng, m, d, theta)
                score, indices = _emulate(problem)
                try:
                    expected = solve_fast(problem)
                except NoAdmissiblePath:
                    assert score == -np.inf
                    continue
                assert score == pytest.approx(expected.score, rel=1e-12)
                np.testing.assert_array_equal(indices, expected.indices)
                checked += 1
    assert checked > 50


def test_unavailable_gpu_names_the_reason():
    try:
        import pycuda.driver  # noqa: F401
    except ImportError:
        from gpu.select import gpu_backend

        with pytest.raises(BackendUnavailable, match="pycuda"):
            gpu_backend()
    else:
        pytest.skip("pycuda is installed here")


@pytest.mark.gpu
@pytest.mark.parametrize(("failure", "reason"), [
    ("MemoryError", "GPU unavailable: its memory is full"),
    ("LogicError", "GPU unavailable: the CUDA kernels cannot be built or loaded")])
def test_a_backend_that_cannot_start_says_why(monkeypatch, failure, reason):
    """A device whose memory other programs hold is not mistaken for a build failure."""
    import pycuda.driver as cuda

    from gpu.backend import GpuBackend

    def fail(*args, **kwargs):
        raise getattr(cuda, failure)("cuMemAlloc failed: out of memory")

    monkeypatch.setattr(GpuBackend, "__init__", fail)
    with pytest.raises(BackendUnavailable, match=reason):
        GpuBackend.create()


def test_a_gpu_backend_slow_to_start_is_announced_while_it_starts(monkeypatch):
    """Building the kernels (the first use after an install) takes half a minute: the caller
    hears of it after SLOW_START_SECONDS, while the backend still starts, and not at all from
    a backend that starts at once (its timer is cancelled). No clock: the slow start waits
    until it is announced, and the fast one's timer is joined."""
    from gpu import select
    from gpu.backend import GpuBackend

    heard, told = [], threading.Event()

    def notify(note):
        heard.append(note)
        told.set()

    def slow(cls, blocking_sync=False):
        assert told.wait(30)  # announced while still starting (30 s: only a hang fails)
        return "slow"

    timers = []

    class RecordedTimer(threading.Timer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            timers.append(self)

    monkeypatch.setattr(select.threading, "Timer", RecordedTimer)
    monkeypatch.setattr(select, "SLOW_START_SECONDS", 0.0)
    monkeypatch.setattr(GpuBackend, "create", classmethod(slow))
    assert select.gpu_backend(notify=notify) == "slow"
    assert heard == [select.SLOW_START_NOTE]
    heard.clear()
    # A timer that would fire only after an hour: once the fast start returns it has been
    # cancelled, so its thread ends at once and nothing is heard.
    monkeypatch.setattr(select, "SLOW_START_SECONDS", 3600.0)
    monkeypatch.setattr(GpuBackend, "create", classmethod(lambda cls, blocking_sync=False: "fast"))
    assert select.gpu_backend(notify=notify) == "fast"
    assert len(timers) == 2
    assert timers[1].finished.is_set()  # cancelled
    timers[1].join(30)
    assert not timers[1].is_alive()
    assert heard == []


# -- GPU ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["auto", "reduce"])
def backend(request):
    from gpu.backend import GpuBackend

    return GpuBackend.create(method=request.param)


@pytest.fixture(scope="module")
def fast_backend():
    from gpu.backend import GpuBackend

    return GpuBackend.create()


def _assert_same_optimum(problem, got, expected, rel=1e-9):
    assert got.score == pytest.approx(expected.score, rel=rel, abs=1e-12)
    if not np.array_equal(got.indices, expected.indices):  # only an exact tie may differ
        score, admissible = path_score(problem, got.indices)
        assert admissible
        assert score == pytest.approx(expected.score, rel=1e-12, abs=1e-12)


RANDOM_CASES = [(m, d, theta) for m, d in [(1, 2), (2, 5), (3, 64), (4, 128), (5, 33), (6, 256),
                                           (7, 100), (8, 48), (9, 20), (10, 64), (11, 9), (12, 128)]
                for theta in (5, 30, 90, 180)]


@pytest.fixture(scope="module", params=[(method, precision) for method in ("auto", "reduce")
                                        for precision in ("float64", "float32")])
def any_precision_backend(request):
    from gpu.backend import GpuBackend

    method, precision = request.param
    return GpuBackend.create(method=method, precision=precision)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "d", "max_angle"), RANDOM_CASES)
def test_gpu_matches_cpu_on_random_scores(any_precision_backend, m, d, max_angle):
    """float64: the CPU's optimum (or an exact tie); float32: within float32 rounding of it."""
    backend = any_precision_backend
    rng = np.random.default_rng(m * 10007 + d * 31 + max_angle)
    problem = random_problem(rng, m, d, max_angle)
    try:
        expected = solve_fast(problem)
    except NoAdmissiblePath:
        with pytest.raises(NoAdmissiblePath):
            backend.solve(problem)
        return
    if backend.precision == "float32":
        assert_near_optimal(problem, backend.solve(problem), expected.score)
    else:
        _assert_same_optimum(problem, backend.solve(problem), expected)


def test_plan_buckets_round_guide_sizes_up_to_a_multiple():
    from gpu.engine import PLAN_ROUNDING, plan_bucket

    assert plan_bucket((1, 17, 17, 1)) == (1, 2 * PLAN_ROUNDING, 2 * PLAN_ROUNDING, 1)
    assert plan_bucket((1, PLAN_ROUNDING, 3, 1)) == (1, PLAN_ROUNDING, PLAN_ROUNDING, 1)
    assert plan_bucket((1, 101, 101, 101, 1)) == (1, 112, 112, 112, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["auto", "reduce"])
def test_problems_of_one_plan_bucket_in_turn_match_cpu(method):
    """Sizes that share a plan (its buffers and grids made for the bucket's largest) and sizes
    that do not, solved in turn on one backend, each its own optimum: the kernels stop at each
    problem's own sizes, and the DP's launches replayed as a CUDA graph give the same."""
    from gpu.backend import GpuBackend

    backend = GpuBackend.create(method=method)
    rng = np.random.default_rng(11)
    for d in (17, 30, 23, 32, 17, 33, 24, 30, 30, 30, 17):
        problem = random_problem(rng, 5, d, 45)
        _assert_same_optimum(problem, backend.solve(problem), solve_fast(problem))


@pytest.mark.gpu
def test_problems_of_kept_plans_in_turn_match_cpu(fast_backend):
    """Problems of two plan buckets solved in turn, the same objects again (their plans kept,
    the windows uploaded again when the other plan's were in between)."""
    rng = np.random.default_rng(12)
    problems = [random_problem(rng, 5, 20, 45), random_problem(rng, 5, 40, 45),
                random_problem(rng, 4, 20, 45)]
    expected = [solve_fast(problem) for problem in problems]
    for _ in range(3):
        for problem, optimum in zip(problems, expected, strict=True):
            _assert_same_optimum(problem, fast_backend.solve(problem), optimum)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "d", "max_angle"),
                         [(3, 1024, 180), (6, 1024, 30), (12, 1024, 5), (6, 512, 90),
                          (2, 2048, 45)])
def test_gpu_matches_cpu_at_paper_sizes(fast_backend, m, d, max_angle):
    rng = np.random.default_rng(d + m + max_angle)
    problem = random_problem(rng, m, d, max_angle)
    _assert_same_optimum(problem, fast_backend.solve(problem), solve_fast(problem))


@pytest.mark.gpu
def test_auto_chooses_the_gpu():
    from gpu.select import choose_backend

    backend, note = choose_backend("auto")
    assert backend.name == "gpu"
    assert note.startswith("GPU: ")


@pytest.mark.gpu
def test_gpu_ties_resolve_to_an_optimal_admissible_path(backend):
    """Integer scores make many exact ties: any optimal admissible path is right."""
    rng = np.random.default_rng(5)
    for m, d, theta in [(3, 16, 30), (6, 40, 60), (9, 25, 180)]:
        problem = random_problem(rng, m, d, theta)
        problem = DPProblem(problem.corridor, problem.windows,
                            [np.round(link) for link in problem.links])
        _assert_same_optimum(problem, backend.solve(problem), solve_fast(problem))


def _random_evidence(rng, sampler, image_size=(100, 110)):
    """Random planes over a whole (width, height) image."""
    planes = rng.normal(size=(1 if sampler == SCALAR else 2, image_size[1], image_size[0]))
    return Evidence(planes.astype(np.float32), (0, 0), image_size, sampler,
                    0.8 if sampler == SINE else 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("sampler", [SCALAR, CROSS, SINE])
def test_gpu_link_scores_match_cpu(fast_backend, sampler):
    rng = np.random.default_rng(sampler)
    evidence = _random_evidence(rng, sampler)
    # The corridor reaches outside the image (x < 0): those samples count 0.
    corridor = build_corridor((2.5, 30.25), (80.0, 104.0), 5, 37, 25.0)
    got = fast_backend.link_scores(evidence, corridor)
    nodes = corridor.node_sets()
    for t, link in enumerate(got):
        expected = integrate_links(evidence, nodes[t], nodes[t + 1])
        np.testing.assert_allclose(link, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("lane_links", [0, 1 << 20])
def test_gpu_link_scores_match_cpu_with_one_or_four_threads_per_link(lane_links, monkeypatch):
    """Each link's samples summed by one thread, or by four (problems of up to LANE_LINKS
    links), give the CPU's scores to rounding."""
    from gpu import engine
    from gpu.backend import GpuBackend

    monkeypatch.setattr(engine, "LANE_LINKS", lane_links)
    backend = GpuBackend.create()
    try:
        for sampler in (SCALAR, CROSS, SINE):
            evidence = _random_evidence(np.random.default_rng(20 + sampler), sampler)
            corridor = build_corridor((2.5, 30.25), (80.0, 104.0), 5, 37, 25.0)
            got = backend.link_scores(evidence, corridor)
            nodes = corridor.node_sets()
            for t, link in enumerate(got):
                np.testing.assert_allclose(link, integrate_links(evidence, nodes[t], nodes[t + 1]),
                                           rtol=1e-10, atol=1e-10)
    finally:
        backend.release()


@pytest.mark.gpu
@pytest.mark.parametrize("sampler", [SCALAR, CROSS, SINE])
def test_gpu_trace_matches_cpu_trace(backend, sampler):
    rng = np.random.default_rng(10 + sampler)
    evidence = _random_evidence(rng, sampler)
    corridor = build_corridor((10.0, 20.0), (90.0, 80.0), 4, 41, 20.0)
    windows = admissible_windows(corridor, np.deg2rad(35))
    got = backend.trace(evidence, corridor, windows)
    expected = CpuBackend().trace(evidence, corridor, windows)
    assert got.score == pytest.approx(expected.score, rel=1e-9)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_allclose(got.link_scores, expected.link_scores, rtol=1e-9, atol=1e-12)
    assert {"link_scores", "dp"} <= set(got.timings_ms)


@pytest.fixture(scope="module")
def sample():
    return load_image(SAMPLE_IMAGE), json.loads(SAMPLE_CASES.read_text())


SAMPLE_PARAMS = [TraceParams(), TraceParams(score="cross"), TraceParams(score="sine", max_angle=5),
                 TraceParams(score="flat", max_angle=180), TraceParams(guides=12, points=64),
                 TraceParams(guides=6, points=256, halfwidth=20.0, max_angle=90)]


@pytest.mark.gpu
@pytest.mark.parametrize("params", SAMPLE_PARAMS, ids=lambda p: f"{p.score}-{p.max_angle}")
def test_gpu_matches_cpu_on_the_sample_image(backend, sample, params):
    raster, cases = sample
    for case in cases:
        try:
            expected = trace(raster, case["a"], case["b"], params, CpuBackend())
        except NoAdmissiblePath:
            with pytest.raises(NoAdmissiblePath):
                trace(raster, case["a"], case["b"], params, backend)
            continue
        got = trace(raster, case["a"], case["b"], params, backend)
        assert got.score == pytest.approx(expected.score, rel=1e-5)
        if not np.array_equal(got.indices, expected.indices):  # exact tie only
            assert got.score == pytest.approx(expected.score, rel=1e-9)
        assert got.backend == "gpu"


@pytest.mark.gpu
def test_work_queued_aside_comes_before_the_main_streams_later_work(fast_backend):
    """An upload queued in ``aside()`` (the side stream) is done before the main stream's next
    work reads it, and ``download_later`` (a stream of its own) copies what that work wrote."""
    from gpu.engine import DeviceTracer

    count = 1 << 21  # 8 MB: copies long enough for a missing wait to show
    values = np.random.default_rng(5).random(count, dtype=np.float32)
    with fast_backend.context.active():
        tracer = DeviceTracer(fast_backend.context, "auto", "float64")
        try:
            main = tracer.stream
            source, copy = tracer.slot("source", 4 * count), tracer.slot("copy", 4 * count)
            for round_values in (values, values[::-1].copy()):
                with tracer.aside():
                    assert tracer.stream is not main
                    tracer.upload(round_values, source)
                assert tracer.stream is main
                tracer.cuda.memcpy_dtod_async(copy, source, 4 * count, main)
                got = tracer.download_later(copy, (count,), np.float32)
                tracer.synchronize()
                np.testing.assert_array_equal(got, round_values)
        finally:
            tracer.release()


@pytest.mark.gpu
def test_a_buffer_that_cannot_grow_is_never_handed_out_freed(fast_backend, monkeypatch):
    """Where a named buffer cannot grow to twice its size it takes just what is asked; where
    it cannot grow at all, the old (freed) block leaves the table: no later request gets it
    and release does not free it twice."""
    from gpu.engine import DeviceTracer

    with fast_backend.context.active():
        tracer = DeviceTracer(fast_backend.context, "auto", "float64")
        try:
            cuda, real = tracer.cuda, tracer.cuda.mem_alloc
            asked = []

            def at_most_3_mib(nbytes):
                asked.append(nbytes)
                if nbytes >= 3 << 20:
                    raise cuda.MemoryError("cuMemAlloc failed: out of memory")
                return real(nbytes)

            monkeypatch.setattr(cuda, "mem_alloc", at_most_3_mib)
            tracer.slot("grown", 1 << 20)  # 1.25 MiB held
            tracer.slot("grown", 2_516_582)  # 3 MiB wanted (refused), then just enough
            assert asked[-2:] == [3 << 20, 2_516_736]
            with pytest.raises(cuda.MemoryError):
                tracer.slot("grown", 4 << 20)
            monkeypatch.setattr(cuda, "mem_alloc", real)
            values = np.arange(1 << 18, dtype=np.float32)
            pointer = tracer.slot("grown", values.nbytes)  # a live block again
            tracer.upload(values, pointer)
            np.testing.assert_array_equal(tracer.download(pointer, values.shape, np.float32),
                                          values)
        finally:
            tracer.release()


@pytest.mark.gpu
def test_a_trace_the_gpu_memory_cannot_hold_is_one_message_and_later_traces_are_alike(
        sample, monkeypatch):
    from core.resources import OverMemoryBudget
    from gpu.backend import GpuBackend

    backend = GpuBackend.create()
    raster, cases = sample
    a, b = cases[0]["a"], cases[0]["b"]
    expected = trace(raster, a, b, TraceParams(), backend)
    import pycuda.driver as cuda

    real, failures = cuda.mem_alloc, [1]

    def running_out(nbytes):
        if failures[0]:
            failures[0] -= 1
            raise cuda.MemoryError("cuMemAlloc failed: out of memory")
        return real(nbytes)

    monkeypatch.setattr(cuda, "mem_alloc", running_out)
    backend.release()  # the next trace allocates again
    once = trace(raster, a, b, TraceParams(), backend)  # retried with the caches freed
    np.testing.assert_array_equal(once.indices, expected.indices)
    failures[0] = 10**9
    backend.release()
    with pytest.raises(OverMemoryBudget, match=r"does not fit in the GPU's memory .* lower "
                                               r"the points per guide, the guides or the half"):
        trace(raster, a, b, TraceParams(), backend)
    monkeypatch.setattr(cuda, "mem_alloc", real)
    again = trace(raster, a, b, TraceParams(), backend)
    np.testing.assert_array_equal(again.indices, expected.indices)
    assert again.score == expected.score


@pytest.mark.gpu
def test_gpu_works_from_worker_threads(fast_backend, sample):
    raster, cases = sample
    case = cases[0]
    expected = trace(raster, case["a"], case["b"], TraceParams(), CpuBackend())
    results, errors = [], []

    def work():
        try:
            results.append(trace(raster, case["a"], case["b"], TraceParams(), fast_backend))
        except Exception as exc:  # relayed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for result in results:
        np.testing.assert_array_equal(result.indices, expected.indices)


@pytest.mark.gpu
def test_gpu_follows_a_drag(fast_backend, sample):
    """b moves on every step, so the corridor size changes: buffers grow and are reused."""
    raster, _ = sample
    a = np.array([27.0, 431.0])
    direction = np.array([0.9, -0.44]) / np.hypot(0.9, -0.44)
    for length in (300, 40, 120, 12, 260, 180, 75, 300):
        b = a + length * direction
        expected = trace(raster, a, b, TraceParams(), CpuBackend())
        got = trace(raster, a, b, TraceParams(), fast_backend)
        # The device computes the evidence planes too, the surface model's some fifty float32
        # layers included, summed in another order than ONNX Runtime's: its logits agree to
        # ~1e-4, so scores agree to a few 1e-6 and paths are the same except near-exact ties.
        assert got.score == pytest.approx(expected.score, rel=5e-6)
        if not np.array_equal(got.indices, expected.indices):
            assert got.score == pytest.approx(expected.score, rel=1e-6)


@pytest.mark.gpu
def test_dropped_backends_free_their_memory_cleanly(sample):
    """Backends made, used and dropped on the main thread and on a worker: no abort, no leak."""
    import gc

    from gpu.backend import GpuBackend

    raster, cases = sample
    case = cases[1]
    expected = trace(raster, case["a"], case["b"], TraceParams(), CpuBackend())
    traced, errors = [], []

    def use_and_drop():
        try:
            backend = GpuBackend.create()
            traced.append(trace(raster, case["a"], case["b"], TraceParams(), backend))
            backend.release()
            traced.append(trace(raster, case["a"], case["b"], TraceParams(), backend))
            del backend
            gc.collect()
        except Exception as exc:  # relayed to the test thread
            errors.append(exc)

    use_and_drop()
    worker = threading.Thread(target=use_and_drop)
    worker.start()
    worker.join()
    gc.collect()
    assert not errors
    assert len(traced) == 4  # twice on each thread, before and after the release
    for got in traced:
        # As test_gpu_follows_a_drag: the device's float32 surface model moves scores by a
        # few 1e-6; the path is the CPU's except at a near-exact tie.
        assert got.score == pytest.approx(expected.score, rel=5e-6)
        if not np.array_equal(got.indices, expected.indices):
            assert got.score == pytest.approx(expected.score, rel=1e-6)


@pytest.mark.gpu
def test_gpu_timings_are_positive(fast_backend):
    rng = np.random.default_rng(9)
    problem = random_problem(rng, 6, 128, 30)
    times = fast_backend.time_dp(problem, 3)
    assert len(times) == 3
    assert min(times) > 0
    evidence = _random_evidence(rng, CROSS)
    corridor = build_corridor((10.0, 20.0), (90.0, 80.0), 6, 64, 20.0)
    windows = admissible_windows(corridor, np.deg2rad(30))
    times = fast_backend.time_trace(evidence, corridor, windows, 3)
    assert len(times) == 3
    assert min(times) > 0


# -- evidence planes on the device ----------------------------------------------------------------

DEVICE_KINDS = ["centre", "cross", "sine"]


def _assert_same_planes(got, expected):
    (planes, tau), (cpu_planes, cpu_tau) = got, expected
    assert planes.dtype == np.float32
    assert planes.shape == cpu_planes.shape
    np.testing.assert_allclose(planes, cpu_planes, rtol=1e-4, atol=1e-5)
    assert tau == pytest.approx(cpu_tau, rel=1e-5, abs=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("score", DEVICE_KINDS)
def test_gpu_evidence_planes_match_cpu_on_the_sample_image(fast_backend, sample, score):
    raster, cases = sample
    params = TraceParams(score=score)
    for case in cases:
        a, b = np.asarray(case["a"], float), np.asarray(case["b"], float)
        resolved = params.resolve(float(np.hypot(*(b - a))))
        corridor = build_corridor(a, b, resolved.guides, resolved.points, resolved.halfwidth)
        got = corridor_evidence(raster, corridor, resolved, backend=fast_backend)
        expected = corridor_evidence(raster, corridor, resolved, backend=CpuBackend())
        assert (got.origin, got.image_size, got.sampler) == (expected.origin,
                                                            expected.image_size,
                                                            expected.sampler)
        _assert_same_planes((got.planes, got.tau), (expected.planes, expected.tau))


@pytest.mark.gpu
@pytest.mark.parametrize("bands", [1, 3, 4])
@pytest.mark.parametrize("score", DEVICE_KINDS)
@pytest.mark.parametrize("shape", [(9, 12), (40, 57), (130, 90)])
def test_gpu_evidence_planes_match_cpu_on_synthetic_windows(fast_backend, score, bands, shape):
    """Contiguous windows (uploaded per call), any band count, windows smaller than the blurs."""
    from core.gradient import gaussian_blur
    from core.scores import get_score_kind

    rng = np.random.default_rng(bands * 100 + shape[0])
    noise = rng.random((*shape, bands))
    pixels = np.stack([gaussian_blur(noise[:, :, k], 2.0) for k in range(bands)], axis=2)
    rows, cols = shape
    stripe = np.abs(np.arange(rows)[:, None] - rows / 2 - 0.1 * np.arange(cols)) < rows / 6
    pixels = (pixels + 2.0 * stripe[:, :, None]).astype(np.float32)
    a = np.array([1.3, rows / 2 + 0.4])
    b = np.array([cols - 2.2, rows / 2 + 0.1 * cols - 1.7])
    kind = get_score_kind(score)
    for sigma in (1.5, 3.0):
        got = fast_backend.score_planes(kind, pixels, a, b, sigma)
        expected = CpuBackend().score_planes(kind, pixels, a, b, sigma)
        _assert_same_planes(got, expected)


@pytest.mark.gpu
def test_gpu_other_kinds_use_the_cpu_planes(fast_backend, sample):
    from core.scores import get_score_kind

    raster, _ = sample
    pixels = raster.read_window(100, 180, 200, 300)
    for score in ("flat", "colour", "evidence"):
        kind = get_score_kind(score)
        got = fast_backend.score_planes(kind, pixels, np.array([3.0, 4.0]),
                                        np.array([90.0, 70.0]), 1.5)
        expected = CpuBackend().score_planes(kind, pixels, np.array([3.0, 4.0]),
                                             np.array([90.0, 70.0]), 1.5)
        np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.gpu
def test_gpu_resident_planes_are_not_reused_for_other_evidence(fast_backend, sample):
    """Evidence made before the device planes were overwritten is uploaded again."""
    raster, cases = sample
    params = TraceParams().resolve(300.0)
    built = []
    for case in cases[:3]:
        a, b = np.asarray(case["a"], float), np.asarray(case["b"], float)
        corridor = build_corridor(a, b, params.guides, params.points, params.halfwidth)
        windows = admissible_windows(corridor, np.deg2rad(params.max_angle))
        built.append((corridor_evidence(raster, corridor, params, backend=fast_backend),
                      corridor, windows))
    for evidence, corridor, windows in [*built, *built[::-1]]:
        got = fast_backend.trace(evidence, corridor, windows)
        expected = CpuBackend().trace(evidence, corridor, windows)
        assert got.score == pytest.approx(expected.score, rel=1e-9)
        np.testing.assert_array_equal(got.indices, expected.indices)
