"""``python main.py trace IMAGE --a X,Y --b X,Y``: one trace, printed as JSON or GeoJSON."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import replace

from cli import explains_gpu_fallback, note, note_compiling, set_examples
from core.errors import BadParameter
from core.tracer import TraceParams

#: File name endings that say which format ``trace -o`` writes (without ``--format``).
OUTPUT_SUFFIXES = {".json": "json", ".geojson": "geojson"}


def point(text: str) -> tuple[float, float]:
    """Parse ``X,Y`` (pixel column, row)."""
    try:
        x, y = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected X,Y (two numbers), got {text!r}") from None
    return x, y


def band_numbers(text: str) -> tuple[int, ...]:
    """Parse ``B`` or ``R,G,B`` (1-based band numbers)."""
    try:
        bands = tuple(int(part) for part in text.split(","))
    except ValueError:
        bands = ()
    if len(bands) not in (1, 3) or min(bands) < 1:
        raise argparse.ArgumentTypeError(f"expected one band number or three (R,G,B), counted "
                                         f"from 1, got {text!r}")
    return bands


def positive_number(what: str):
    """An argparse type: a positive, finite number of ``what`` (named in its error)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"expected {what} (a positive number), got "
                                             f"{text!r}")
        return value
    return parse


def gradient_scale(text: str) -> float:
    """An argparse type: σ in px, as :func:`core.tracer.check_sigma` accepts it."""
    from core.tracer import check_sigma

    try:
        return check_sigma(float(text))
    except ValueError as exc:  # not a number (float's), or out of range (BadParameter's)
        raise argparse.ArgumentTypeError(
            str(exc) if isinstance(exc, BadParameter) else
            f"expected sigma in px (a number), got {text!r}") from None


def output_file(text: str) -> str:
    """An argparse type: a path to write to (not empty: an empty path names no file)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file to write, got an empty path")
    return text


#: argparse types: the imagery's metres per pixel; a distance in pixels.
metres_per_pixel = positive_number("metres per pixel")
positive_pixels = positive_number("a distance in px")


def add_trace_parameters(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that traces (trace, batch, eval)."""
    from core.scores import SCORE_KINDS
    from core.tracer import GUIDE_SPACING, HALFWIDTH_PER_LENGTH, LINE_KINDS, POINT_SPACING
    from gpu.select import BACKEND_CHOICES

    defaults = TraceParams()
    group = parser.add_argument_group("tracing parameters (default: scale with |ab|)")
    group.add_argument("--guides", type=int, metavar="N",
                       help=f"number of guides m (default: one every {GUIDE_SPACING:g} px)")
    group.add_argument("--points", type=int, metavar="N",
                       help=f"points per guide d (default: {POINT_SPACING:g} px apart)")
    group.add_argument("--halfwidth", "--half-width", type=float, metavar="PX",
                       help=f"corridor half-width, px (default: {HALFWIDTH_PER_LENGTH:g}·|ab|)")
    group.add_argument("--max-angle", type=float, default=defaults.max_angle, metavar="DEG",
                       help="largest turn at a guide, degrees in (0, 180] (default: %(default)s)")
    group.add_argument("--sigma", type=gradient_scale, default=defaults.sigma, metavar="PX",
                       help="gradient scale σ, px (default: %(default)s)")
    group.add_argument("--score", default=defaults.score, choices=sorted(SCORE_KINDS),
                       metavar="KIND",
                       help="link score kind: %(choices)s (default: %(default)s)")
    group.add_argument("--line-kind", default=defaults.line_kind, choices=LINE_KINDS,
                       metavar="KIND",
                       help="what is traced (%(choices)s): with 'river' the surface kinds run "
                            "as for water and the line is moved to the middle of the water "
                            "surface (default: %(default)s)")
    group.add_argument("--ground-resolution", type=metres_per_pixel, metavar="M",
                       help="the imagery's metres per pixel where its georeferencing does not "
                            "say (a PNG or JPEG): imagery of 0.3 m or coarser is read by the "
                            "surface model at full resolution on larger windows, imagery finer "
                            "than 0.16 m on block means of at least 0.16 m (default: from "
                            "the georeferencing, else unknown)")
    group.add_argument("--surface-model", metavar="ONNX",
                       help="the surface model to run instead of the bundled one, e.g. one "
                            "trained on imagery like yours with scripts/train_surface_model.py "
                            "(default: $ROADTRACER_SURFACE_MODEL, else the bundled model)")
    group.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, metavar="NAME",
                       help="compute backend: %(choices)s (default: %(default)s: GPU if "
                            "available)")
    group.add_argument("--memory-budget", metavar="SIZE",
                       help="refuse a trace planned to need more memory than this, e.g. 4G "
                            "(default: $ROADTRACER_MEMORY_BUDGET, else half the available "
                            "memory)")


class StoreGiven(argparse.Action):
    """Store an option's value and set ``given_<dest>`` to True: a command can then tell an
    option given from its default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"given_{self.dest}", True)


def add_crs_arguments(parser: argparse.ArgumentParser) -> None:
    """GeoJSON coordinate and image band options shared by ``trace`` and ``batch``."""
    from core.geojson import CRS_CHOICES

    parser.add_argument("--crs", default="wgs84", choices=CRS_CHOICES, action=StoreGiven,
                        help="output coordinates: wgs84 (longitude/latitude) or source (the "
                             "image's own CRS) (default: %(default)s)")
    parser.set_defaults(given_crs=False)
    parser.add_argument("--image-crs", metavar="CRS",
                        help="CRS of images whose georeferencing names none (world file "
                             "without .prj), e.g. EPSG:32654")
    parser.add_argument("--bands", type=band_numbers, metavar="R,G,B",
                        help="bands to trace, counted from 1: three read as red, green, blue "
                             "(e.g. 8,4,3: a false-colour composite) or one grey band "
                             "(default: the bands tagged red, green, blue, else those whose "
                             "descriptions name the colours, else the first three)")


def use_process_options(args: argparse.Namespace, traces: bool = True) -> bool:
    """Make ``--memory-budget`` the budget of every trace of this process and of the worker
    processes it starts (:mod:`core.resources`), and ``--surface-model`` (else
    ``$ROADTRACER_SURFACE_MODEL``) their surface model, checked before any work
    (:func:`core.surface.use_model`; a note names it) where the command ``traces`` with a
    score kind that runs the model (else a ``--surface-model`` given is noted as unused);
    BadParameter if the budget is not a size, ModelUnavailable if the model is not one this
    program can run. Returns whether the traces run the surface model."""
    from core import surface
    from core.resources import set_memory_budget
    from core.tracer import runs_surface_model

    if args.memory_budget is not None:
        set_memory_budget(args.memory_budget, "--memory-budget")
    # An evidence folder (batch, eval) puts every trace on an evidence raster too.
    evidence = getattr(args, "evidence", None) or getattr(args, "evidence_dir", None)
    if traces and args.score == "evidence" and evidence is None:
        option = "--evidence RASTER" if hasattr(args, "evidence") else "--evidence-dir DIR"
        note(args, f"score 'evidence' reads the image's own band 0 as a road probability: "
             f"give {option} (a segmentation model's road map) unless the image is one")
    if not (traces and runs_surface_model(replace(params_from_args(args),
                                                  evidence_path=evidence))):
        if args.surface_model:
            why = (f"score kind {args.score!r} runs no surface model" if traces
                   else "no method measured runs our tracer")
            note(args, f"--surface-model is not used: {why}")
        return False
    chosen = args.surface_model or os.environ.get(surface.MODEL_VARIABLE)
    if chosen:
        model = surface.use_model(chosen)
        if model != surface.BUNDLED_MODEL:
            note(args, f"surface model {model} (not the bundled one)")
    return True


def params_from_args(args: argparse.Namespace) -> TraceParams:
    return TraceParams(guides=args.guides, points=args.points, halfwidth=args.halfwidth,
                       max_angle=args.max_angle, sigma=args.sigma, score=args.score,
                       evidence_path=getattr(args, "evidence", None),
                       line_kind=args.line_kind, ground_resolution=args.ground_resolution)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    set_examples(parser, "resources/sample/gsi_108.png --a 430,241 --b 486,172",
                 "resources/sample/gsi_108.png --a 430,241 --via 455,215 --b 486,172 "
                 "-o line.geojson",
                 "resources/sample/gsi_108.png --a 430,241 --b 486,172 --format geojson -o -")
    parser.add_argument("image", help="image file (PNG, JPEG, TIFF/GeoTIFF, JPEG 2000, ERDAS .img)")
    parser.add_argument("--a", required=True, type=point, metavar="X,Y", help="start point (px)")
    parser.add_argument("--b", required=True, type=point, metavar="X,Y", help="end point (px)")
    parser.add_argument("--via", action="append", type=point, metavar="X,Y", default=[],
                        help="a point the line passes through, between a and b (repeatable, in "
                             "order): each leg is traced on its own, as the app's vertices are")
    add_trace_parameters(parser)
    parser.add_argument("--evidence", metavar="RASTER",
                        help="score a raster on the image's grid (or georeferenced: resampled "
                             "onto it) instead of the image, e.g. a "
                             "road-probability map (with --score evidence: cost 1 - p)")
    parser.add_argument("--format", choices=("json", "geojson"),
                        help="output format (default: geojson for an -o FILE ending in "
                             ".geojson, json for stdout or a FILE ending in .json)")
    add_crs_arguments(parser)
    parser.add_argument("-o", "--output", metavar="FILE", type=output_file,
                        help="write here instead of stdout ('-': stdout); a regular file is "
                             "replaced atomically (a symbolic link: its target), a device or "
                             "FIFO written in place")


def output_format(args: argparse.Namespace) -> str:
    """``--format`` if given, else the one the ``-o`` file's ending names
    (:data:`OUTPUT_SUFFIXES`, any case), else ``json``; BadParameter for an ``-o`` file whose
    name names neither (a device or FIFO, written in place, names none and needs none)."""
    from core.output import is_stdout

    if args.format is not None:
        return args.format
    if is_stdout(args.output):
        return "json"
    suffix = os.path.splitext(args.output)[1].lower()
    if suffix in OUTPUT_SUFFIXES:
        return OUTPUT_SUFFIXES[suffix]
    if os.path.exists(args.output) and not os.path.isfile(args.output):
        return "json"
    raise BadParameter(f"{args.output}: trace writes a JSON record (.json) or GeoJSON "
                       "(.geojson); name the file so, or give --format")


def leg_record(result) -> dict:
    """One traced leg as JSON: its ends, polyline, scores, chosen guide points, parameters and
    timings."""
    return {
        "a": result.polyline[0].tolist(),
        "b": result.polyline[-1].tolist(),
        "pixels": result.polyline.tolist(),
        "score": result.score,
        "link_scores": result.link_scores.tolist(),
        "indices": result.indices.tolist(),
        "params": result.params.as_dict(),
        "timings_ms": {key: round(value, 3) for key, value in result.timings_ms.items()},
    }


def result_record(results: list, image: str, note: str, load_ms: float) -> dict:
    """The JSON object printed by ``--format json``: one leg's :func:`leg_record` with the image
    and backend; for a line through ``--via`` points, the joined line, its total score and
    timings, the via points and each leg's record under ``legs``. ``load_ms`` (reading the
    image, choosing the backend) joins the timings."""
    if len(results) == 1:
        record = {"image": image, **leg_record(results[0]), "backend": results[0].backend,
                  "backend_note": note}
        record["timings_ms"]["load"] = round(load_ms, 3)
        return record
    from core.tracer import join_legs

    polyline, anchors = join_legs(results)
    timings = {"load": load_ms}
    for result in results:
        for key, value in result.timings_ms.items():
            timings[key] = timings.get(key, 0.0) + value
    return {
        "image": image,
        "a": anchors[0].tolist(),
        "b": anchors[-1].tolist(),
        "via": anchors[1:-1].tolist(),
        "pixels": polyline.tolist(),
        "score": float(sum(result.score for result in results)),
        "backend": results[0].backend,
        "backend_note": note,
        "timings_ms": {key: round(value, 3) for key, value in timings.items()},
        "legs": [leg_record(result) for result in results],
    }


def run(args: argparse.Namespace) -> int:
    from core.georef import sidecar_files
    from core.output import printable, refuse_overwriting_input, write_text_or_stdout
    from core.raster import load_image
    from core.surface import UNKNOWN_GROUND_NOTE, model_files
    from core.tracer import (
        ground_resolution_unknown,
        no_ground_resolution_reason,
        trace_through,
    )
    from gpu.select import choose_backend

    start = time.perf_counter()
    inputs = [args.image, args.evidence, *model_files(args.surface_model)]
    for raster in (args.image, args.evidence):  # and what georeferences them
        inputs += sidecar_files(raster) if raster else []
    refuse_overwriting_input(args.output, inputs, "-o")
    use_process_options(args)
    given_crs = None
    if args.image_crs is not None:  # checked whether or not the image needs it, as batch does
        from core.georef import parse_crs

        given_crs = parse_crs(args.image_crs)
    params = params_from_args(args)
    geojson = output_format(args) == "geojson"
    if args.given_crs and not geojson:
        note(args, "--crs applies to GeoJSON: the JSON record is in pixel coordinates; "
                   "--format geojson writes map coordinates")
    raster = load_image(args.image, crs=args.image_crs, bands=args.bands)
    named = getattr(raster.georef, "crs", None)
    if given_crs is not None and named is not None and named != given_crs:
        note(args, f"{args.image}: the image or its .prj names the CRS "
                   f"{raster.georef.crs_name}, which wins over --image-crs {args.image_crs}")
    backend, backend_note = choose_backend(args.backend, notify=lambda text: note(args, text))
    if explains_gpu_fallback(args, backend):
        note(args, f"using {backend_note}")
    if raster.band_note:
        note(args, f"{args.image}: tracing {raster.band_note}")
    for text in raster.notes:
        note(args, f"{args.image}: {text}")
    if ground_resolution_unknown(raster, params):
        note(args, f"{args.image}: ground resolution unknown "
                   f"({no_ground_resolution_reason(raster)}): {UNKNOWN_GROUND_NOTE}; give "
                   "--ground-resolution M to run it once")
    if geojson:
        from core.geojson import (
            coordinate_space,
            feature_collection,
            pixel_space_note,
            traced_line_feature,
        )

        if coordinate_space(raster, args.crs) == "pixel":
            note(args, f"{args.image}: GeoJSON {pixel_space_note(raster)}")
    names = ["a", *(f"via {k + 1}" for k in range(len(args.via))), "b"]
    note_compiling(args, backend)
    results = trace_through(raster, [args.a, *args.via, args.b], params, backend, names)
    noted = set()  # a via point's note comes from both its legs: once
    for k, result in enumerate(results):
        leg = f"{names[k]} → {names[k + 1]}: " if len(results) > 1 else ""
        for text in result.notes:
            if text not in noted:
                note(args, leg + text)
                noted.add(text)
    load_ms = 1e3 * (time.perf_counter() - start) - sum(result.timings_ms["total"]
                                                         for result in results)
    if geojson:
        feature = traced_line_feature(results, raster, {"params": params.as_dict()}, args.crs)
        document = feature_collection([feature], raster, args.crs)
    else:
        document = result_record(results, printable(args.image), backend_note, load_ms)
    text = json.dumps(document, indent=None if geojson else 1)
    # A closed pipe (trace ... | true) drops the output quietly, with the exit status of a
    # command ended by SIGPIPE.
    write_text_or_stdout(args.output, text + "\n")
    return 0
