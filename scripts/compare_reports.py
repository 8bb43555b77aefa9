"""Did a change help? A case-by-case comparison of two ``eval --json`` reports on the same
cases: per group of cases, the mean completeness @3 / @5 px before and after, the mean of the
case-by-case differences with its standard error, how many cases got better or worse, the
share of gross misses (less than half of the true line within 5 px) and how many cases fall
more than 0.1 below the straight line a → b at 5 px.

A difference of less than about two standard errors is within the noise of the cases drawn.
A change to the model's training has a second noise: the same recipe trained again with another
random start moves the means by about as much. Give each side several reports then (trainings
with different ``--seed``; after ``--after``): each case counts with its mean over a side's
reports, and a second table gives every report's means, so that their spread shows that noise.

Usage:

    python main.py eval CASES.json --json before.json
    python main.py eval CASES.json --json after.json      # after the change
    python scripts/compare_reports.py before.json after.json --cases CASES.json
    python scripts/compare_reports.py seed3.json seed4.json --after new3.json new4.json \
        --cases CASES.json

Groups: the cases where a straight line misses the road (``nontrivial``), those per dataset
(a case's first tag), and those where a straight line is right. Reports of
scripts/crossval_surface.py compare the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli import fit_stream_encodings  # noqa: E402
from core.errors import BadParameter  # noqa: E402
from core.evaluate import OURS, Case, read_report, report_cases  # noqa: E402
from core.metrics import path_metrics  # noqa: E402

#: A case counts as better or worse when its completeness @3 px moves by more than this.
CHANGE = 0.01
#: A gross miss: completeness @5 px below this.
GROSS_MISS = 0.5
#: Below the straight line: completeness @5 px this much under the straight line's.
BELOW_STRAIGHT = 0.1


def pick_method(runs: dict[str, dict], wanted: str | None, path: str) -> dict[str, dict]:
    """The rows of method ``wanted`` in ``runs`` (default: ``ours``, or the report's only
    method)."""
    if wanted is None:
        wanted = OURS if OURS in runs or len(runs) > 1 else next(iter(runs))
    if wanted not in runs:
        raise BadParameter(f"report {path} has no method {wanted!r} (it has "
                           f"{', '.join(sorted(runs))}): choose one with --method")
    return runs[wanted]


def groups(cases: dict[str, Case]) -> list[tuple[str, list[str]]]:
    """(name, case ids) of each group: nontrivial, nontrivial per dataset, straight line right;
    empty groups left out."""
    hard = [name for name, case in cases.items() if "nontrivial" in case.tags]
    easy = [name for name, case in cases.items() if "nontrivial" not in case.tags]
    datasets = sorted({cases[name].dataset for name in hard} - {None})
    chosen = [("nontrivial", hard)]
    chosen += [(f"nontrivial, {dataset}", [name for name in hard if cases[name].dataset == dataset])
               for dataset in datasets]
    chosen.append(("straight line right", easy))
    return [(name, ids) for name, ids in chosen if ids]


def compare(before: dict[str, dict], after: dict[str, dict], ids: list[str],
            straight: dict[str, float]) -> dict:
    """Means, differences (after − before, mean and standard error), better / worse counts,
    gross-miss shares and counts below the straight line (whose completeness @5 px per case is
    ``straight``) of cases ``ids``."""
    out = {"n": len(ids)}
    for radius in (3, 5):
        key = f"completeness_{radius}"
        old = np.array([before[case][key] for case in ids])
        new = np.array([after[case][key] for case in ids])
        difference = new - old
        error = difference.std(ddof=1) / np.sqrt(len(ids)) if len(ids) > 1 else float("nan")
        out[radius] = {"before": old.mean(), "after": new.mean(),
                       "difference": difference.mean(), "error": error}
        if radius == 3:
            out["better"] = int(np.sum(difference > CHANGE))
            out["worse"] = int(np.sum(difference < -CHANGE))
        else:
            out["gross"] = (np.mean(old < GROSS_MISS), np.mean(new < GROSS_MISS))
            line = np.array([straight[case] for case in ids]) - BELOW_STRAIGHT
            out["below"] = (int(np.sum(old < line)), int(np.sum(new < line)))
    return out


def straight_line_completeness(cases: dict[str, Case]) -> dict[str, float]:
    """Case id → completeness @5 px of the straight line a → b."""
    return {name: path_metrics(np.vstack([case.a, case.b]), case.gt).completeness_5
            for name, case in cases.items()}


def format_table(rows: list[tuple[str, dict]]) -> str:
    """Markdown table of :func:`compare` results."""
    lines = ["| cases | n | mean c@3 / c@5 before | after | difference c@3 | difference c@5 | "
             "better / worse (c@3) | gross misses | below the straight line |",
             "|---|---|---|---|---|---|---|---|---|"]
    def difference(cell: dict) -> str:
        error = "" if np.isnan(cell["error"]) else f" ± {cell['error']:.3f}"
        return f"{cell['difference']:+.3f}{error}"

    for name, row in rows:
        lines.append(
            f"| {name} | {row['n']} | {row[3]['before']:.3f} / {row[5]['before']:.3f} | "
            f"{row[3]['after']:.3f} / {row[5]['after']:.3f} | {difference(row[3])} | "
            f"{difference(row[5])} | {row['better']} / {row['worse']} | "
            f"{row['gross'][0]:.0%} → {row['gross'][1]:.0%} | "
            f"{row['below'][0]} → {row['below'][1]} |")
    return "\n".join(lines)


def mean_rows(reports: list[dict[str, dict]]) -> dict[str, dict]:
    """Case id → completeness @3 and @5 px, each the mean over ``reports`` (rows of one method
    each, on the same cases)."""
    keys = ("completeness_3", "completeness_5")
    return {case: {key: float(np.mean([rows[case][key] for rows in reports])) for key in keys}
            for case in reports[0]}


def format_reports(sides: list[tuple[str, list[str], list[dict]]], ids: list[str]) -> str:
    """Markdown table of each report's mean completeness @3 / @5 px over cases ``ids``, per
    side (name, report paths, rows)."""
    lines = ["| side | report | mean c@3 / c@5 |", "|---|---|---|"]
    for side, paths, reports in sides:
        for path, rows in zip(paths, reports, strict=True):
            means = [np.mean([rows[case][f"completeness_{radius}"] for case in ids])
                     for radius in (3, 5)]
            lines.append(f"| {side} | {path} | {means[0]:.3f} / {means[1]:.3f} |")
    return "\n".join(lines)


def split_sides(parser, reports: list[str], after: list[str] | None
                ) -> tuple[list[str], list[str]]:
    """The report paths before and after the change: ``BEFORE AFTER``, or ``BEFORE... --after
    AFTER...``."""
    if after is not None:
        return reports, after
    if len(reports) != 2:
        parser.error("give two reports (before, after), or several before and several after "
                     "--after")
    return reports[:1], reports[1:]


def main(argv: list[str] | None = None) -> int:
    fit_stream_encodings()  # the help and tables hold σ and →, which code pages may lack
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="REPORT",
                        help="reports (eval --json) of the program before the change, and, "
                             "without --after, the one after it, on the same cases")
    parser.add_argument("--after", nargs="+", metavar="REPORT",
                        help="reports of the program after the change (the positional reports "
                             "are then all before it), e.g. one per training seed")
    parser.add_argument("--cases", required=True, help="the cases file the reports measured")
    parser.add_argument("--method", help="method to compare (default: ours, or the only one)")
    args = parser.parse_args(argv)
    before_paths, after_paths = split_sides(parser, args.reports, args.after)
    try:
        paths = before_paths + after_paths
        rows = [pick_method(read_report(path), args.method, path) for path in paths]
        for path, other in zip(paths[1:], rows[1:], strict=True):
            if other.keys() != rows[0].keys():
                raise BadParameter(
                    f"the reports measured different cases ({len(rows[0].keys() - other.keys())}"
                    f" only in {paths[0]}, {len(other.keys() - rows[0].keys())} only in {path})")
        before_rows, after_rows = rows[:len(before_paths)], rows[len(before_paths):]
        before, after = mean_rows(before_rows), mean_rows(after_rows)
        cases = report_cases({"before": before}, args.cases)
        straight = straight_line_completeness(cases)
        chosen = groups(cases)
        print(format_table([(name, compare(before, after, ids, straight))
                            for name, ids in chosen]))
        if len(paths) > 2:
            print(f"\nEach report on the {chosen[0][0]} cases:\n")
            print(format_reports([("before", before_paths, before_rows),
                                  ("after", after_paths, after_rows)], chosen[0][1]))
    except BadParameter as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
