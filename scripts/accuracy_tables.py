"""Markdown tables of an ``eval --json`` report: per dataset, the median completeness@3/@5 px of
every method on the cases where a straight line misses the road (``nontrivial``), and on the
others.

Usage:

    python main.py eval resources/eval/roads/cases.json --method all --json report.json
    python scripts/accuracy_tables.py report.json resources/eval/roads/cases.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter  # noqa: E402
from core.evaluate import read_report, report_cases  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="the JSON written by eval --json")
    parser.add_argument("cases", help="the cases file it measured (for the tags)")
    args = parser.parse_args(argv)
    try:
        methods = read_report(args.report)
        cases = report_cases(methods, args.cases)
    except BadParameter as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    datasets = sorted({case.dataset for case in cases.values() if case.dataset is not None})
    for title, wanted in (("nontrivial", True), ("straight line right", False)):
        print(f"\n{title}: median c@3 / c@5 (cases)\n")
        header = ["method", *datasets, "all"]
        print("| " + " | ".join(header) + " |")
        print("|---" * len(header) + "|")
        for method, rows in methods.items():
            cells = []
            for dataset in [*datasets, None]:
                chosen = [row for row in rows.values()
                          if ("nontrivial" in cases[row["id"]].tags) == wanted
                          and dataset in (None, cases[row["id"]].dataset)]
                if not chosen:
                    cells.append("–")
                    continue
                c3 = np.median([row["completeness_3"] for row in chosen])
                c5 = np.median([row["completeness_5"] for row in chosen])
                cells.append(f"{c3:.2f} / {c5:.2f} ({len(chosen)})")
            print(f"| {method} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
