"""Markdown tables of an ``eval --json`` report: per dataset, the median completeness@3/@5 px of
every method on the cases where a straight line misses the road (``nontrivial``), and on the
others.

Usage:

    python main.py eval resources/eval/roads/cases.json --method all --json report.json
    python scripts/accuracy_tables.py report.json resources/eval/roads/cases.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def read_report(report: str, cases: str) -> tuple[dict, dict]:
    """The ``methods`` of an ``eval --json`` report, and the cases it measured by id."""
    with open(report, encoding="utf-8") as handle:
        methods = json.load(handle)["methods"]
    with open(cases, encoding="utf-8") as handle:
        return methods, {case["id"]: case for case in json.load(handle)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report", help="the JSON written by eval --json")
    parser.add_argument("cases", help="the cases file it measured (for the tags)")
    args = parser.parse_args()
    methods, cases = read_report(args.report, args.cases)
    tags = {case_id: case.get("tags", []) for case_id, case in cases.items()}
    datasets = sorted({found[0] for found in tags.values() if found})
    for title, wanted in (("nontrivial", True), ("straight line right", False)):
        print(f"\n{title}: median c@3 / c@5 (cases)\n")
        print("| method | " + " | ".join(datasets) + " | all |")
        print("|---" * (len(datasets) + 2) + "|")
        for method, run in methods.items():
            cells = []
            for dataset in [*datasets, None]:
                chosen = [case for case in run["cases"]
                          if ("nontrivial" in tags[case["id"]]) == wanted
                          and (dataset is None or tags[case["id"]][0] == dataset)]
                c3 = np.median([case["completeness_3"] or 0.0 for case in chosen])
                c5 = np.median([case["completeness_5"] or 0.0 for case in chosen])
                cells.append(f"{c3:.2f} / {c5:.2f} ({len(chosen)})")
            print(f"| {method} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
