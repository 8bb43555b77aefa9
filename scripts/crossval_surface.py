"""Cross-validated accuracy of the ``surface`` score kind: each case is traced with the model
of the fold that left its image out (``train_surface_model.py --folds K`` wrote ``folds.json``
and ``fold<k>.onnx``), then summarised like ``python main.py eval``.

Usage:

    python scripts/crossval_surface.py MODELS_DIR CASES.json [CASES.json ...] [--line-kind river]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import core.surface  # noqa: E402
from core.evaluate import OURS, RasterCache, evaluate, format_summary, load_cases, summarise  # noqa: E402
from core.tracer import TraceParams  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", help="folder with folds.json and fold<k>.onnx")
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--line-kind", default="road", choices=("road", "river"))
    args = parser.parse_args()
    with open(os.path.join(args.models, "folds.json"), encoding="utf-8") as handle:
        fold_of = json.load(handle)
    for path in args.cases:
        by_image: dict[str, list] = {}
        for case in load_cases(path):
            by_image.setdefault(Path(case.image).stem, []).append(case)
        rasters, results = RasterCache(), []
        for image, cases in by_image.items():
            core.surface.MODEL_PATH = Path(args.models) / f"fold{fold_of[image]}.onnx"
            results += evaluate(cases, OURS, TraceParams(score="surface",
                                                          line_kind=args.line_kind),
                                rasters=rasters)
        nontrivial = [result for result in results if "nontrivial" in result.case.tags]
        print(path)
        print(format_summary(f"{OURS} (cross-validated)", summarise(results)))
        print(format_summary("nontrivial cases only", summarise(nontrivial)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
