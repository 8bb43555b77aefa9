"""``python main.py bench``: the paper's Table 2 grid, DP only and end-to-end, medians.

Geometry: the bundled sample image, a horizontal click pair 300 px apart through its centre,
corridor half-width 50 px, ``m = n - 2`` guides for n division points, d points per guide.
DP only: random link scores (normal), windows for θ. End-to-end: gradient and evidence on the
corridor window (on the backend's device) + link scores + DP + backtracking (``cross``, the paper's
score).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from cli import set_examples
from cli.trace_cmd import output_file

#: Paper, Table 2: GTX 750 Ti, DP only, unconstrained, ms; rows n = 5..8, columns d.
PAPER_TABLE2_MS = {5: [1.9, 7.5, 53.1, 460.9], 6: [2.5, 11.4, 88.5, 787.8],
                   7: [3.6, 14.8, 108.1, 1004.4], 8: [5.4, 22.0, 157.0, 1397.8]}
POINTS = [128, 256, 512, 1024]
#: Largest grid cell the command times (d points per guide, n division points: the DP's link
#: scores then take about 0.5 GB) and most runs per cell.
MAX_POINTS, MAX_DIVISIONS, MAX_REPEATS = 2048, 16, 1000
HALFWIDTH = 50.0
CLICK_LENGTH = 300.0


def number_list(kind, low, high, what: str):
    """argparse type: comma-separated ``kind`` values (int or float) in [low, high]."""
    def parse(text: str) -> list:
        try:
            values = [kind(part) for part in text.split(",")]
        except ValueError:
            values = []
        if not values or not all(low <= value <= high for value in values):
            raise argparse.ArgumentTypeError(f"expected {what}, comma-separated, each from "
                                             f"{low:g} to {high:g}; got {text!r}")
        return values
    return parse


def repeat_count(text: str) -> int:
    """argparse type: runs per cell, 1 to MAX_REPEATS."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_REPEATS:
        raise argparse.ArgumentTypeError(f"expected a number of runs from 1 to {MAX_REPEATS}, "
                                         f"got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpu.select import BACKEND_CHOICES

    set_examples(parser, "", "--backend gpu -o table2.json",
                 "--angles 30 --divisions 8 --points 1024 --repeats 3")
    parser.add_argument("--backend", default="cpu", choices=BACKEND_CHOICES, metavar="NAME",
                        help="compute backend to time: %(choices)s (default: %(default)s; auto: "
                             "the GPU if usable)")
    parser.add_argument("--repeats", type=repeat_count, default=5, metavar="N",
                        help="runs per cell, the median reported (default: %(default)s)")
    parser.add_argument("--angles", type=number_list(float, 1e-3, 180, "angles in degrees"),
                        default="180,30", metavar="DEG,…",
                        help="max angles θ to time, degrees (default: %(default)s)")
    parser.add_argument("--points", type=number_list(int, 2, MAX_POINTS, "points per guide"),
                        default=",".join(map(str, POINTS)), metavar="N,…",
                        help="points per guide d to time (default: %(default)s)")
    parser.add_argument("--divisions", type=number_list(int, 3, MAX_DIVISIONS,
                                                        "division points"),
                        default="5,6,7,8", metavar="N,…",
                        help="division points n = m + 2 (default: %(default)s)")
    parser.add_argument("--image", default=None, metavar="IMAGE",
                        help="image for end-to-end (default: sample)")
    parser.add_argument("-o", "--json", metavar="FILE", type=output_file,
                        help="also write the raw figures as JSON here ('-': stdout, the "
                             "table then going to stderr)")


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            names = [line.split(":", 1)[1].strip() for line in info
                     if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def sample_image_path() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "resources", "sample", "gsi_108.png")


def table2_case(raster, theta: float, n: int, d: int, rng: np.random.Generator):
    """One cell of the grid: ``(problem, params)`` — the corridor, its windows and random link
    scores (normal) for the DP alone, and the tracing parameters for end-to-end runs."""
    from core.dp import DPProblem
    from core.guides import admissible_windows, build_corridor, check_max_angle
    from core.tracer import TraceParams

    centre = np.array([raster.width / 2, raster.height / 2])
    m = n - 2
    corridor = build_corridor(centre - [CLICK_LENGTH / 2, 0], centre + [CLICK_LENGTH / 2, 0],
                              m, d, HALFWIDTH)
    windows = admissible_windows(corridor, check_max_angle(theta))
    sizes = [1] + [d] * m + [1]
    links = [rng.normal(size=(sizes[t], sizes[t + 1])) for t in range(m + 1)]
    params = TraceParams(guides=m, points=d, halfwidth=HALFWIDTH, max_angle=theta, score="cross")
    return DPProblem(corridor, windows, links), params


def run(args: argparse.Namespace) -> int:
    from core.output import is_stdout, refuse_overwriting_input, write_text_or_stdout
    from core.raster import load_image
    from core.tracer import corridor_evidence
    from gpu.select import choose_backend

    refuse_overwriting_input(args.json, (args.image or sample_image_path(),), "--json")
    backend, note = choose_backend(args.backend,
                                   notify=lambda text: print(f"note: {text}", file=sys.stderr))
    raster = load_image(args.image or sample_image_path())
    rng = np.random.default_rng(0)
    rows = []
    print(f"backend: {note}\nmachine: {machine_description()}", file=sys.stderr)
    for theta in args.angles:
        for n in args.divisions:
            for d in args.points:
                m = n - 2
                problem, params = table2_case(raster, theta, n, d, rng)
                corridor, windows = problem.corridor, problem.windows
                backend.time_dp(problem, 1)  # warm-up (compilation, allocations)
                dp_ms = statistics.median(backend.time_dp(problem, args.repeats))
                evidence = corridor_evidence(raster, corridor, params, backend=backend)
                backend.time_trace(evidence, corridor, windows, 1)
                e2e = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    evidence = corridor_evidence(raster, corridor, params, backend=backend)
                    gradient_ms = 1e3 * (time.perf_counter() - start)
                    e2e.append(gradient_ms + backend.time_trace(evidence, corridor, windows, 1)[0])
                row = {"theta": theta, "n": n, "m": m, "d": d, "dp_ms": dp_ms,
                       "end_to_end_ms": statistics.median(e2e),
                       "paper_ms": PAPER_TABLE2_MS.get(n, [None] * 4)[POINTS.index(d)]
                       if d in POINTS else None}
                rows.append(row)
                print(f"θ={theta:5.0f}° n={n} d={d:5d}  DP {row['dp_ms']:9.3f} ms  "
                      f"end-to-end {row['end_to_end_ms']:9.3f} ms  paper {row['paper_ms']} ms",
                      file=sys.stderr, flush=True)
    peak_mb = peak_memory_mb()
    # With the JSON figures on stdout, the table goes to stderr.
    table = sys.stderr if args.json is not None and is_stdout(args.json) else sys.stdout
    print(markdown_table(rows, note), file=table)
    if peak_mb is not None:
        print(f"\nPeak resident memory of the whole run: {peak_mb:.0f} MB.", file=table)
    if args.json is not None:
        write_text_or_stdout(args.json, json.dumps({"backend": note,
                                                    "machine": machine_description(),
                                                    "rows": rows}, indent=1) + "\n")
    return 0


def peak_memory_mb() -> float | None:
    """Peak resident memory of this process so far, MB (MiB); None where the ``resource``
    module is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in bytes on macOS, in KiB elsewhere.
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def markdown_table(rows: list[dict], note: str) -> str:
    lines = [f"Backend: {note}. Machine: {machine_description()}.", "",
             "| θ | n (m) | d | DP only, ms | end-to-end, ms | paper GPU DP, ms |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['theta']:g}° | {row['n']} ({row['m']}) | {row['d']} | "
                     f"{row['dp_ms']:.2f} | {row['end_to_end_ms']:.1f} | {row['paper_ms']} |")
    return "\n".join(lines)
