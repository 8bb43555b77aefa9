"""Live-preview rate: traces per second while the cursor moves, with a fixed first click.

Traces from a fixed anchor on the bundled sample to 60 cursor positions along a road, with the
default parameters and the chosen backend, as the application's preview does (one trace at a
time, each to a new cursor position). Prints the median and 90th-percentile trace time and
the rate.

Usage: ``python benchmarks/preview_rate.py [--backend auto|cpu|gpu]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.raster import load_image  # noqa: E402
from core.tracer import trace  # noqa: E402
from gpu.select import BACKEND_CHOICES, choose_backend  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "resources" / "sample" / "gsi_108.png"
ANCHOR = (246.0, 354.0)
CURSOR_PATH = [(379.0 + 1.5 * k, 284.0 - 1.0 * k) for k in range(60)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    args = parser.parse_args()
    backend, note = choose_backend(args.backend)
    raster = load_image(SAMPLE)
    trace(raster, ANCHOR, CURSOR_PATH[0], backend=backend)  # warm-up (compilation, uploads)
    times = []
    for cursor in CURSOR_PATH:
        start = time.perf_counter()
        trace(raster, ANCHOR, cursor, backend=backend)
        times.append(1e3 * (time.perf_counter() - start))
    median = statistics.median(times)
    print(f"backend: {note}")
    print(f"{len(times)} preview traces of {np.hypot(*np.subtract(CURSOR_PATH[0], ANCHOR)):.0f}-"
          f"{np.hypot(*np.subtract(CURSOR_PATH[-1], ANCHOR)):.0f} px: median {median:.1f} ms, "
          f"p90 {np.percentile(times, 90):.1f} ms, {1e3 / median:.0f} previews/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
