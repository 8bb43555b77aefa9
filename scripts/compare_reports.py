"""Did a change help? A case-by-case comparison of two ``eval --json`` reports on the same
cases: per group of cases, the mean completeness @3 / @5 px before and after, the mean of the
case-by-case differences with its standard error, how many cases got better or worse, the
share of gross misses (less than half of the true line within 5 px) and how many cases fall
more than 0.1 below the straight line a → b at 5 px.

A difference of less than about two standard errors is within the noise of the cases drawn.

Usage:

    python main.py eval CASES.json --json before.json
    python main.py eval CASES.json --json after.json      # after the change
    python scripts/compare_reports.py before.json after.json --cases CASES.json

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", help="report of the program before the change (eval --json)")
    parser.add_argument("after", help="report of the program after it, on the same cases")
    parser.add_argument("--cases", required=True, help="the cases file both reports measured")
    parser.add_argument("--method", help="method to compare (default: ours, or the only one)")
    args = parser.parse_args(argv)
    try:
        before = pick_method(read_report(args.before), args.method, args.before)
        after = pick_method(read_report(args.after), args.method, args.after)
        if before.keys() != after.keys():
            raise BadParameter(
                f"the reports measured different cases ({len(before.keys() - after.keys())} "
                f"only in {args.before}, {len(after.keys() - before.keys())} only in "
                f"{args.after})")
        cases = report_cases({"before": before}, args.cases)
        straight = straight_line_completeness(cases)
        print(format_table([(name, compare(before, after, ids, straight))
                            for name, ids in groups(cases)]))
    except BadParameter as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
