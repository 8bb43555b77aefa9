"""GPU benchmarks: the paper's Table 2 grid and the interactive default, CUDA-event medians.

Geometry as ``main.py bench`` (cli/bench_cmd.py): the sample image, a horizontal click pair
300 px apart through its centre, corridor half-width 50 px, m = n - 2 guides, d points each.

* DP only: random link scores already on the device; DP rounds + merge + backtracking + result
  copy (``GpuBackend.time_dp``), for the sparse-table kernel (``rmq``, what ``auto`` picks) and
  the paper's reduction kernel (``reduce``); the CPU backend's DP beside them.
* End-to-end: evidence (``cross``: the gradient) resident on the device; link scores + DP +
  backtracking + result copy (``GpuBackend.time_trace``).
* Both in float64 and float32 (``GpuBackend(precision=...)``): what a GPU with a low float64
  rate runs by default.
* Interactive: a 300 px pair on the sample with default ``TraceParams``: device time, the
  surface model on the device, the backend's wall time with uploads, and the whole
  ``core.tracer.trace`` call (evidence on the device too), in both precisions.

Usage: ``python benchmarks/gpu_bench.py [--repeats N] [--markdown FILE] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli.bench_cmd import PAPER_TABLE2_MS, POINTS, table2_case  # noqa: E402
from core import surface  # noqa: E402
from core.backend import CpuBackend  # noqa: E402
from core.guides import admissible_windows, build_corridor, check_max_angle  # noqa: E402
from core.raster import load_image  # noqa: E402
from core.tracer import TraceParams, corridor_evidence, trace  # noqa: E402
from gpu.backend import GpuBackend  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "resources" / "sample" / "gsi_108.png"
#: Metres per pixel of the coarse-imagery click (full-resolution model on its window).
COARSE_IMAGERY = 0.5


def median(values) -> float:
    return float(statistics.median(values))


def wall_ms(function, repeats: int) -> list[float]:
    """Host wall-clock milliseconds of ``repeats`` calls after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(1e3 * (time.perf_counter() - start))
    return times


def grid(backends: dict, raster, repeats: int, angles, divisions, points) -> list[dict]:
    rng = np.random.default_rng(0)
    cpu = CpuBackend()
    rows = []
    for theta in angles:
        for n in divisions:
            for d in points:
                m = n - 2
                problem, params = table2_case(raster, theta, n, d, rng)
                corridor, windows = problem.corridor, problem.windows
                row = {"theta": theta, "n": n, "m": m, "d": d,
                       "paper_ms": PAPER_TABLE2_MS[n][POINTS.index(d)]
                       if n in PAPER_TABLE2_MS and d in POINTS else None}
                for name, backend in backends.items():
                    row[f"dp_{name}_ms"] = median(backend.time_dp(problem, repeats))
                row["dp_cpu_ms"] = median(cpu.time_dp(problem, max(3, repeats // 5)))
                evidence = corridor_evidence(raster, corridor, params)
                for name, suffix in (("rmq", ""), ("rmq32", "32")):
                    row[f"e2e{suffix}_ms"] = median(backends[name].time_trace(
                        evidence, corridor, windows, repeats))
                    fused = backends[name].trace(evidence, corridor, windows).timings_ms
                    row[f"e2e{suffix}_links_ms"] = fused["link_scores"]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def model_ms(backend: GpuBackend, rows: int, cols: int, repeats: int) -> float:
    """CUDA-event median of the device's surface model on a (1, INPUT_PLANES, rows, cols)
    input."""
    import pycuda.driver as cuda

    network = backend.surface_network()
    with backend.context.active():
        image = np.zeros((1, surface.INPUT_PLANES, rows, cols), np.float32)
        network.run(image)  # program, then graph
        prepared = network.prepared(rows, cols)
        start, end = cuda.Event(), cuda.Event()
        times = []
        for _ in range(repeats + 1):
            start.record(network.stream)
            prepared.launch(network.stream)
            end.record(network.stream)
            end.synchronize()
            times.append(start.time_till(end))
    return median(times[1:])


def interactive(backend: GpuBackend, raster, repeats: int, profile: bool = False,
                ground_resolution: float | None = None) -> dict:
    """A 300 px click pair along the sample's road of case gsi_108_05, default parameters
    (with ``ground_resolution``: as on imagery of that many metres per pixel)."""
    a = np.array([27.0, 431.0])
    direction = np.array([239.0, 328.0]) - a
    b = a + 300.0 * direction / np.hypot(*direction)
    chosen = TraceParams(ground_resolution=ground_resolution)
    params = chosen.resolve(300.0)
    corridor = build_corridor(a, b, params.guides, params.points, params.halfwidth)
    windows = admissible_windows(corridor, check_max_angle(params.max_angle))
    evidence = corridor_evidence(raster, corridor, params)
    rows, cols = evidence.planes.shape[1:]
    multiple = surface.SIZE_MULTIPLE
    model_shapes = [[-(-math.ceil(size / step) // multiple) * multiple for size in (rows, cols)]
                    for step in surface.model_steps(rows, cols,
                                                    ground_resolution=ground_resolution)]
    cpu = CpuBackend()
    result = trace(raster, a, b, chosen, backend)
    expected = trace(raster, a, b, chosen, cpu)
    # A fresh click: new evidence and windows objects, built before the clock starts.
    fresh = [(corridor_evidence(raster, corridor, params),
              admissible_windows(corridor, check_max_angle(params.max_angle)))
             for _ in range(repeats + 1)]

    def fresh_trace():
        evidence_i, windows_i = fresh.pop()
        backend.trace(evidence_i, corridor, windows_i)

    backend_wall = wall_ms(fresh_trace, repeats)
    if profile:
        import cProfile
        import pstats

        fresh = [(corridor_evidence(raster, corridor, params),
                  admissible_windows(corridor, check_max_angle(params.max_angle)))
                 for _ in range(50)]
        profiler = cProfile.Profile()
        profiler.enable()
        for evidence_i, windows_i in fresh:
            backend.trace(evidence_i, corridor, windows_i)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    return {
        "a": a.tolist(), "b": b.round(2).tolist(), "guides": params.guides,
        "points": params.points, "halfwidth": params.halfwidth, "max_angle": params.max_angle,
        "score": params.score, "precision": backend.precision, "window": [rows, cols],
        "ground_resolution": ground_resolution,
        "model_input": model_shapes, "model_note": backend.model_note,
        "same_path_as_cpu": bool(np.allclose(result.polyline, expected.polyline, atol=1e-9)),
        "model_device_ms": sum(model_ms(backend, *shape, repeats) for shape in model_shapes),
        "gpu_evidence_wall_ms": median(wall_ms(
            lambda: corridor_evidence(raster, corridor, params, backend=backend), repeats)),
        "device_ms": median(backend.time_trace(evidence, corridor, windows, repeats)),
        "backend_wall_ms": median(backend_wall),
        "evidence_wall_ms": median(wall_ms(lambda: corridor_evidence(raster, corridor, params),
                                           repeats)),
        "trace_wall_ms": median(wall_ms(lambda: trace(raster, a, b, chosen, backend),
                                        repeats)),
        "cpu_trace_wall_ms": median(wall_ms(lambda: trace(raster, a, b, chosen, cpu),
                                            repeats)),
        "gpu_trace_timings_ms": {k: round(v, 4) for k, v in result.timings_ms.items()},
        "cpu_trace_timings_ms": {k: round(v, 4) for k, v in expected.timings_ms.items()},
    }


def markdown(device: str, rows: list[dict], lives: list[dict], repeats: int) -> str:
    lines = [f"Device: {device}. Medians of {repeats} runs, CUDA events. Sizes as the paper: "
             "n division points (m = n - 2 guides), d points per guide; f64 / f32: float64 / "
             "float32 link scores and DP.", "",
             "| θ | n (m) | d | DP sparse-table f64 / f32, ms | DP paper-style reduction "
             "f64, ms | DP CPU backend, ms | end-to-end f64 / f32, ms | of which link scores "
             "f64 / f32, ms | paper GTX 750 Ti DP, ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['theta']:g}° | {row['n']} ({row['m']}) | {row['d']} | "
                     f"{row['dp_rmq_ms']:.3f} / {row['dp_rmq32_ms']:.3f} | "
                     f"{row['dp_reduce_ms']:.3f} | {row['dp_cpu_ms']:.2f} | "
                     f"{row['e2e_ms']:.3f} / {row['e2e32_ms']:.3f} | "
                     f"{row['e2e_links_ms']:.3f} / {row['e2e32_links_ms']:.3f} | "
                     f"{row['paper_ms']} |")
    lines += ["", "Share of float64 in the float64 kernels' time, 1 − t(f32) / t(f64), at "
              "n = 8 (what a GPU with a 1/32–1/64 float64 rate would pay many times over):", "",
              "| θ | d | link scores | DP sparse-table |", "|---|---|---|---|"]
    for row in rows:
        if row["n"] == 8:
            lines.append(f"| {row['theta']:g}° | {row['d']} | "
                         f"{1 - row['e2e32_links_ms'] / row['e2e_links_ms']:.2f} | "
                         f"{1 - row['dp_rmq32_ms'] / row['dp_rmq_ms']:.2f} |")
    for live in lives:
        lines += _interactive_lines(live)
    return "\n".join(lines)


def _interactive_lines(live: dict) -> list[str]:
    coarse = ("" if live["ground_resolution"] is None
              else f", as on imagery of {live['ground_resolution']:g} m per pixel")
    lines = ["", f"Interactive default ({live['precision']}{coarse}): a = {live['a']}, "
             f"b = {live['b']} (300 px), "
              f"m = {live['guides']}, d = {live['points']}, w = {live['halfwidth']:g} px, "
              f"θ = {live['max_angle']:g}°, score {live['score']}, window {live['window']}, "
              f"model input {live['model_input']} {live['model_note']}; "
              f"same polyline as the CPU backend: {live['same_path_as_cpu']}.", "",
              "| what | ms |", "|---|---|",
              f"| device: surface model (one CUDA graph per resolution) | "
              f"{live['model_device_ms']:.3f} |",
              f"| evidence planes on the device (corridor_evidence, wall) | "
              f"{live['gpu_evidence_wall_ms']:.3f} |",
              f"| device: link scores + DP + backtrack + result copy (evidence resident) | "
              f"{live['device_ms']:.3f} |",
              f"| GpuBackend.trace wall time: fresh evidence and windows uploaded, launches, "
              f"result copy | {live['backend_wall_ms']:.3f} |",
              f"| evidence on the CPU (corridor_evidence, CPU backend, wall) | "
              f"{live['evidence_wall_ms']:.3f} |",
              f"| core.tracer.trace total, GPU backend | {live['trace_wall_ms']:.3f} |",
              f"| core.tracer.trace total, CPU backend | {live['cpu_trace_wall_ms']:.3f} |",
              "", "core.tracer.trace timings_ms of one call, GPU backend: "
              + ", ".join(f"{k} {v:.3f}" for k, v in live["gpu_trace_timings_ms"].items())
              + "; CPU backend: "
              + ", ".join(f"{k} {v:.3f}" for k, v in live["cpu_trace_timings_ms"].items()) + "."]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--angles", default="180,30")
    parser.add_argument("--divisions", default="5,6,7,8")
    parser.add_argument("--points", default=",".join(map(str, POINTS)))
    parser.add_argument("--markdown", metavar="FILE")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--profile", action="store_true",
                        help="print a profile of GpuBackend.trace host time to stderr")
    args = parser.parse_args(argv)
    backends = {"rmq": GpuBackend.create(method="rmq", precision="float64"),
                "reduce": GpuBackend.create(method="reduce", precision="float64"),
                "rmq32": GpuBackend.create(method="rmq", precision="float32")}
    raster = load_image(SAMPLE)
    rows = grid(backends, raster, args.repeats, [float(v) for v in args.angles.split(",")],
                [int(v) for v in args.divisions.split(",")],
                [int(v) for v in args.points.split(",")])
    lives = [interactive(backends[name], raster, args.repeats, args.profile)
             for name in ("rmq", "rmq32")]
    lives.append(interactive(backends["rmq"], raster, args.repeats,
                             ground_resolution=COARSE_IMAGERY))
    text = markdown(backends["rmq"].description.removeprefix("GPU: "), rows, lives,
                    args.repeats)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": backends["rmq"].description,
                                               "grid": rows, "interactive": lives}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
