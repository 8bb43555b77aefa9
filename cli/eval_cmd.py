"""``python main.py eval CASES.json``: trace accuracy against ground truth, ours vs peers."""

from __future__ import annotations

import argparse
import json
import os
import sys

from cli import explains_gpu_fallback, note, note_compiling, set_examples
from cli.trace_cmd import (
    add_trace_parameters,
    output_file,
    params_from_args,
    positive_pixels,
    use_process_options,
)

METHOD_CHOICES = ("ours", "livewire", "route_flat", "route_edge", "straight", "all")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    set_examples(parser, "resources/eval/roads/cases.json --method all",
                 "resources/eval/roads/cases.json --method all --corrections 2",
                 "resources/sample/gsi_108_cases.json --stability 3 -o report.json")
    parser.add_argument("cases", help="cases JSON file (images relative to its folder)")
    parser.add_argument("--method", default="ours", choices=METHOD_CHOICES,
                        help="tracer to measure; 'all' runs ours and every peer "
                             "(default: %(default)s)")
    add_trace_parameters(parser)
    parser.add_argument("--evidence-dir", metavar="DIR",
                        help="trace ours on rasters named like the images in DIR (e.g. a "
                             "segmentation model's road-probability maps) instead of the images")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N cases")
    parser.add_argument("--tags", action="store_true",
                        help="print a row for every tag (default: all, nontrivial and the "
                             "headline tags)")
    parser.add_argument("--stability", type=positive_pixels, metavar="PX",
                        help="also measure how far our trace moves when an endpoint moves by "
                             "PX px (8 moves per case)")
    parser.add_argument("--corrections", type=int, metavar="N",
                        help="also simulate a user who adds up to N vertices per line (0-5), "
                             "each where the line misses the road worst, and report the share "
                             "of good lines (90%% of the road within 5 px) after each")
    parser.add_argument("-o", "--json", metavar="FILE", type=output_file,
                        help="write the full report (per case too) as JSON here ('-': stdout, "
                             "the printed report then going to stderr)")


#: Rows printed by default.
HEADLINE_GROUPS = ("all", "nontrivial", "curved", "through_junction", "occluded")


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm import tqdm

    from core import surface
    from core.errors import BadParameter
    from core.evaluate import (
        OURS,
        SOURCES_FILE,
        RasterCache,
        case_params,
        check_cases,
        check_corrections,
        corrections,
        corrections_report,
        evaluate,
        format_summary,
        load_cases,
        report_document,
        stability,
        summarise,
    )
    from core.output import is_stdout, refuse_overwriting_input, write_text_or_stdout
    from core.peers import PEERS, check_libraries
    from core.surface import UNKNOWN_GROUND_NOTE
    from core.tracer import check_params, evidence_folder, ground_resolution_unknown
    from gpu.select import choose_backend

    methods = [OURS, *PEERS] if args.method == "all" else [args.method]
    check_libraries(methods)
    # --stability moves the clicks of our tracer, whichever the methods.
    ours = OURS in methods or args.stability is not None
    runs_model = use_process_options(args, traces=ours)
    if args.limit is not None and args.limit < 1:
        raise BadParameter(f"--limit must be >= 1, got {args.limit}")
    check_corrections(args.corrections)
    if args.evidence_dir is not None:
        evidence_folder(args.evidence_dir)
    params = params_from_args(args)
    if ours:  # parameters every case would refuse: a usage error, as in batch
        check_params(params)
    cases = load_cases(args.cases, args.limit)
    rasters = RasterCache()
    inputs = check_cases(cases, rasters, params, args.evidence_dir)
    sources = os.path.join(os.path.dirname(os.path.abspath(args.cases)), SOURCES_FILE)
    refuse_overwriting_input(args.json, (args.cases, sources, *inputs,
                                         *surface.model_files(args.surface_model)), "--json")
    backend = None
    if OURS in methods:
        backend, backend_note = choose_backend(args.backend,
                                               notify=lambda text: note(args, text))
        shown = backend_note if explains_gpu_fallback(args, backend) else backend.description
        note(args, f"ours: {shown}")
        unknown = sorted({case.image for case in cases if ground_resolution_unknown(
            rasters.get(case.image), case_params(params, case, args.evidence_dir))})
        if unknown:
            note(args, f"{len(unknown)} image(s) have no ground resolution (no georeferencing, "
                       "no \"ground_resolution\" in their cases, no \"gsd_m\" in a sources.json "
                       f"beside them): {UNKNOWN_GROUND_NOTE}; give --ground-resolution M or the "
                       "cases' \"ground_resolution\" to run it once: "
                       + ", ".join(os.path.basename(path) for path in unknown[:5])
                       + (" …" if len(unknown) > 5 else ""))
        note_compiling(args, backend)
    # With the JSON report on stdout, the printed one goes to stderr.
    report = sys.stderr if args.json is not None and is_stdout(args.json) else sys.stdout
    runs = {}
    total = len(cases) * (len(methods) * (1 + (args.corrections is not None))
                          + (args.stability is not None))
    needed = {}
    with tqdm(total=total, unit="case", file=sys.stderr, leave=False,
              disable=True if args.quiet else None) as bar:  # None: on a terminal only
        for method in methods:
            bar.set_description(method)
            runs[method] = results = evaluate(cases, method, params, backend, rasters,
                                              args.evidence_dir, bar.update)
            bar.clear()
            summary = summarise(results)
            print(format_summary(method, summary, None if args.tags else HEADLINE_GROUPS),
                  file=report)
            for result in results:
                if result.error:
                    print(f"  failed {result.case.id}: {result.error}", file=sys.stderr)
        for method in methods if args.corrections is not None else ():
            bar.set_description(f"{method}, corrected")
            needed[method] = corrections(cases, method, args.corrections, params, backend,
                                         rasters, args.evidence_dir, bar.update)
        if args.stability is not None:
            bar.set_description("stability")
            shifts = stability(cases, params, args.stability, backend, rasters,
                               args.evidence_dir, bar.update)
    document = report_document(runs, params)
    document["evidence_dir"] = args.evidence_dir
    document["surface_model"] = os.fspath(surface.MODEL_PATH) if runs_model else None
    if args.stability is not None:
        median = float(np.median(shifts)) if len(shifts) else None  # JSON has no NaN
        moves = "no case could be traced" if median is None else f"line moves {median:.2f} px"
        print(f"stability: endpoint moved {args.stability:g} px → {moves} "
              f"(median over {len(shifts)} cases)", file=report)
        document["stability"] = {"shift_px": args.stability, "median_px": median,
                                 "cases": shifts.round(3).tolist()}
    if needed:
        text, document["corrections"] = corrections_report(cases, needed, args.corrections)
        print(text, file=report)
    if args.json is not None:
        write_text_or_stdout(args.json, json.dumps(document) + "\n")
    return 0
