"""Accuracy of the ``surface`` score kind on images its model never saw: each case is traced with
the model trained without its image, then summarised like ``python main.py eval``.

Which model traces which image:

* ``--folds DIR``: ``train_surface_model.py --folds K`` wrote ``DIR/folds.json`` (image id →
  fold) and ``DIR/fold<k>.onnx``;
* ``--model PREFIXES=MODEL`` (repeatable): images whose file name starts with one of the
  comma-separated PREFIXES are traced by MODEL, e.g. a model trained with ``--exclude PREFIX``
  (leave one source out); cases on other images are skipped.

Usage:

    python scripts/crossval_surface.py CASES.json [CASES.json ...] --folds DIR [--line-kind river]
    python scripts/crossval_surface.py CASES.json --model gsi_=no_gsi.onnx \\
        --model sn3shanghai,spacenet_shanghai=no_shanghai.onnx --json report.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import core.surface  # noqa: E402
from core.errors import BadParameter, TraceError  # noqa: E402
from core.evaluate import (  # noqa: E402
    OURS,
    RasterCache,
    check_cases,
    check_corrections,
    corrections,
    corrections_report,
    evaluate,
    format_summary,
    load_cases,
    report_document,
    summarise,
)
from core.output import read_json  # noqa: E402
from core.tracer import TraceParams  # noqa: E402


def fold_models(folder: str) -> dict[str, Path]:
    """Image id → its fold's model, from ``folder``/folds.json."""
    path = os.path.join(folder, "folds.json")
    fold_of = read_json(path, "the folds file")
    if not isinstance(fold_of, dict):
        raise BadParameter(f"{path} must map image ids to folds")
    return {image: Path(folder) / f"fold{fold}.onnx" for image, fold in fold_of.items()}


def prefix_models(specs: list[str]) -> list[tuple[tuple[str, ...], Path]]:
    """``["P1,P2=MODEL", ...]`` → [((P1, P2), MODEL), ...]."""
    parsed = []
    for spec in specs:
        prefixes, separator, model = spec.partition("=")
        names = tuple(prefix for prefix in prefixes.split(",") if prefix)
        if not separator or not names or not model:
            raise BadParameter(f"--model {spec!r}: expected PREFIX[,PREFIX...]=MODEL.onnx")
        parsed.append((names, Path(model)))
    return parsed


def model_for(image: str, folds: dict[str, Path] | None,
              prefixes: list[tuple[tuple[str, ...], Path]]) -> Path | None:
    """The model that traces ``image`` (a path), or None to skip it."""
    name = Path(image).name
    if folds is not None:
        if Path(image).stem not in folds:
            raise BadParameter(f"image {name} is in no fold of folds.json")
        return folds[Path(image).stem]
    return next((model for names, model in prefixes if name.startswith(names)), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--folds", metavar="DIR", help="folder with folds.json and fold<k>.onnx")
    which.add_argument("--model", action="append", metavar="PREFIXES=MODEL",
                       help="trace images whose name starts with a prefix by MODEL (repeatable)")
    parser.add_argument("--line-kind", default="road", choices=("road", "river"))
    parser.add_argument("--corrections", type=int, metavar="N",
                        help="also the share of good lines with up to N vertices added, as "
                             "eval --corrections")
    parser.add_argument("--json", metavar="OUT",
                        help="write the per-case report (one cases file only), as eval --json")
    args = parser.parse_args(argv)
    if args.json and len(args.cases) > 1:
        parser.error("--json takes one cases file")
    params = TraceParams(score="surface", line_kind=args.line_kind)
    try:
        check_corrections(args.corrections)
        folds = fold_models(args.folds) if args.folds else None
        prefixes = prefix_models(args.model or [])
        for path in args.cases:
            by_model: dict[Path, list] = {}
            skipped = 0
            for case in load_cases(path):
                model = model_for(case.image, folds, prefixes)
                if model is None:
                    skipped += 1
                else:
                    by_model.setdefault(model, []).append(case)
            for model in by_model:
                if not model.is_file():
                    raise BadParameter(f"model {model} not found")
            rasters, results, traced, needed = RasterCache(), [], [], []
            for cases in by_model.values():
                check_cases(cases, rasters, params)
            for model, cases in by_model.items():
                core.surface.MODEL_PATH = model
                results += evaluate(cases, OURS, params, rasters=rasters)
                if args.corrections is not None:
                    traced += cases
                    needed += corrections(cases, OURS, args.corrections, params,
                                          rasters=rasters)
            print(path + (f" ({skipped} cases on images no model is given for: skipped)"
                          if skipped else ""))
            if not results:
                raise BadParameter(f"{path}: no case lies on an image a model is given for")
            print(format_summary(f"{OURS} (model without the image)", summarise(results)))
            document = report_document({OURS: results}, params)
            if args.corrections is not None:
                text, document["corrections"] = corrections_report(
                    traced, {OURS: needed}, args.corrections)
                print(text)
            if args.json:
                with open(args.json, "w", encoding="utf-8") as handle:
                    json.dump(document, handle)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
