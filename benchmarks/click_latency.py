"""Click latency: the whole ``core.tracer.trace`` call of one click, warm, with the defaults.

Times, on the bundled sample, the interactive pair (a = (27, 431), b = (296.84, 299.9), 300 px
apart) as the application traces it — without a ground resolution (the sample is a PNG: the
model reads the window at full and at half resolution), with ``--ground-resolution 0.2`` (one
model run, at half resolution) and with ``--score centre`` (no model) — and a short batch
segment: 40 px pieces of the sample cases' first three centrelines. The settings alternate
round by round in one process, so that a machine's changing speed touches all alike. Prints
each setting's median over its calls and the median split of its time (``timings_ms``).

Usage: ``python benchmarks/click_latency.py [--backend cpu|gpu|auto] [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli.bench_cmd import machine_description  # noqa: E402
from core.raster import load_image  # noqa: E402
from core.tracer import TraceParams, trace  # noqa: E402
from gpu.select import BACKEND_CHOICES, choose_backend  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "resources" / "sample" / "gsi_108.png"
SAMPLE_CASES = SAMPLE.with_name("gsi_108_cases.json")
CLICK = ((27.0, 431.0), (296.84, 299.9))
#: Length of the batch-like segments, px (a batch traces seeds vertex to vertex).
SEGMENT_PX = 40.0


def segment_pairs(count: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first ``SEGMENT_PX`` of each of the sample cases' first ``count`` centrelines:
    (start, the first vertex at least ``SEGMENT_PX`` from it), each of shape (2,)."""
    cases = json.loads(SAMPLE_CASES.read_text())[:count]
    pairs = []
    for case in cases:
        line = np.asarray(case["gt"], dtype=float)
        far = np.flatnonzero(np.hypot(*(line - line[0]).T) >= SEGMENT_PX)
        pairs.append((line[0], line[far[0]]))
    return pairs


def settings() -> dict[str, tuple[list, TraceParams]]:
    """Each timed setting: its click pairs and parameters."""
    click = [tuple(np.asarray(point) for point in CLICK)]
    return {"click, default": (click, TraceParams()),
            "click, ground resolution 0.2 m": (click, TraceParams(ground_resolution=0.2)),
            "click, --score centre": (click, TraceParams(score="centre")),
            f"{SEGMENT_PX:.0f} px batch segment, default": (segment_pairs(), TraceParams())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=BACKEND_CHOICES)
    parser.add_argument("--calls", type=int, default=15, help="timed calls per setting and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the settings")
    args = parser.parse_args()
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    backend, note = choose_backend(args.backend)
    raster = load_image(SAMPLE)
    cases = settings()
    for pairs, params in cases.values():  # warm-up: compilation, the model's session
        for a, b in pairs:
            trace(raster, a, b, params, backend)
    print(f"backend: {note}\nmachine: {machine_description()}")
    for round_number in range(1, args.rounds + 1):
        for name, (pairs, params) in cases.items():
            totals, splits = [], {}
            for call in range(args.calls):
                a, b = pairs[call % len(pairs)]
                start = time.perf_counter()
                result = trace(raster, a, b, params, backend)
                totals.append(1e3 * (time.perf_counter() - start))
                for part, ms in result.timings_ms.items():
                    splits.setdefault(part, []).append(ms)
            split = ", ".join(f"{part} {statistics.median(values):.1f}"
                              for part, values in splits.items() if part != "total")
            print(f"round {round_number}  {name}: median {statistics.median(totals):.1f} ms "
                  f"over {args.calls} calls ({split})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
