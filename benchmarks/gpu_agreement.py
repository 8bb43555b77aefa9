"""Does the GPU backend trace what the CPU backend traces? Polylines on evaluation cases.

For every case of each cases file (``core.evaluate`` format) the default trace runs on the CPU
backend and on the GPU backend in float64 and in float32 (surface model on the device in
both). Two polylines are the same when every vertex agrees to 1e-6 px; otherwise their
symmetric Hausdorff distance (polylines sampled every 0.1 px) is reported. The surface model's
logits on the device are compared with ONNX Runtime's on a window around each case's clicks.

Usage: ``python benchmarks/gpu_agreement.py CASES.json [CASES.json ...] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import surface  # noqa: E402
from core.backend import CpuBackend  # noqa: E402
from core.errors import TraceError  # noqa: E402
from core.evaluate import RasterCache, case_params, load_cases  # noqa: E402
from core.scores import endpoint_similarity  # noqa: E402
from core.tracer import trace  # noqa: E402
from gpu.backend import GpuBackend  # noqa: E402


def densify(polyline: np.ndarray, spacing: float = 0.1) -> np.ndarray:
    """Points every ``spacing`` px along a polyline (n, 2)."""
    pieces = [polyline[:1]]
    for p, q in zip(polyline[:-1], polyline[1:], strict=True):
        count = max(1, int(np.ceil(np.hypot(*(q - p)) / spacing)))
        pieces.append(p + np.outer(np.arange(1, count + 1) / count, q - p))
    return np.vstack(pieces)


def hausdorff(first: np.ndarray, second: np.ndarray) -> float:
    from scipy.spatial import cKDTree

    a, b = densify(first), densify(second)
    return float(max(cKDTree(b).query(a)[0].max(), cKDTree(a).query(b)[0].max()))


def polyline(raster, case, backend):
    try:
        return trace(raster, case.a, case.b, case_params(None, case), backend).polyline
    except TraceError as exc:
        return f"{type(exc).__name__}: {exc}"


def compare(first, second) -> float | None:
    """0 for the same polyline (or the same failure), else the Hausdorff distance (inf when
    only one failed)."""
    if isinstance(first, str) or isinstance(second, str):
        return 0.0 if first == second else float("inf")
    if first.shape == second.shape and np.allclose(first, second, rtol=0, atol=1e-6):
        return 0.0
    return hausdorff(first, second)


def logit_error(raster, case, backend) -> float:
    """max |Δlogit| of the device's surface model (surface and path) against ONNX Runtime
    around the case."""
    import onnxruntime

    a, b = np.asarray(case.a, float), np.asarray(case.b, float)
    margin = 0.25 * np.hypot(*(b - a)) + 10
    low = np.maximum(np.floor(np.minimum(a, b) - margin), 0).astype(int)
    high = np.minimum(np.ceil(np.maximum(a, b) + margin), (raster.width, raster.height)).astype(int)
    pixels = raster.read_window(low[1], high[1], low[0], high[0])
    image = surface.model_inputs(pixels, endpoint_similarity(pixels, a - low, b - low),
                                 a - low, b - low)
    expected = onnxruntime.InferenceSession(str(surface.MODEL_PATH)).run(
        None, {"image": image})[0][0]
    network = backend.surface_network()
    with backend.context.active():
        got = network.run(image)
    return float(np.abs(got - expected).max())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    cpu = CpuBackend()
    try:
        gpu64 = GpuBackend.create(precision="float64")
        gpu32 = GpuBackend.create(precision="float32")
    except TraceError as exc:  # no pycuda, no GPU
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if gpu64.model_note:
        print(f"warning: {gpu64.model_note}", file=sys.stderr)
    report = {"device": gpu64.description, "sets": []}
    for path in args.cases:
        cases, rasters, rows = load_cases(path), RasterCache(), []
        for case in cases:
            raster = rasters.get(case.image)
            lines = {name: polyline(raster, case, backend)
                     for name, backend in (("cpu", cpu), ("f64", gpu64), ("f32", gpu32))}
            rows.append({"id": case.id, "cpu_vs_f64": compare(lines["cpu"], lines["f64"]),
                         "cpu_vs_f32": compare(lines["cpu"], lines["f32"]),
                         "f64_vs_f32": compare(lines["f64"], lines["f32"]),
                         "logit_error": logit_error(raster, case, gpu64)})
        summary = {"cases": path, "n": len(rows),
                   "max_logit_error": max(row["logit_error"] for row in rows)}
        for key in ("cpu_vs_f64", "cpu_vs_f32", "f64_vs_f32"):
            distances = [row[key] for row in rows]
            differing = [d for d in distances if d > 0]
            summary[key] = {"same": len(distances) - len(differing),
                            "share_same": (len(distances) - len(differing)) / len(distances),
                            "max_hausdorff_px": max(differing, default=0.0),
                            "over_0.5px": sum(d > 0.5 for d in differing),
                            "over_1px": sum(d > 1.0 for d in differing)}
        report["sets"].append({"summary": summary, "rows": rows})
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"device: {report['device']}")
    print("| cases | n | comparison | same polyline | max Hausdorff of the rest, px | > 0.5 px "
          "| > 1 px | max abs logit error |")
    print("|---|---|---|---|---|---|---|---|")
    for entry in report["sets"]:
        summary = entry["summary"]
        for key in ("cpu_vs_f64", "cpu_vs_f32", "f64_vs_f32"):
            values = summary[key]
            print(f"| {summary['cases']} | {summary['n']} | {key} | {values['same']} "
                  f"({100 * values['share_same']:.1f} %) | {values['max_hausdorff_px']:.3f} | "
                  f"{values['over_0.5px']} | {values['over_1px']} | "
                  f"{summary['max_logit_error']:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
