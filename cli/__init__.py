"""Headless command line: ``python main.py SUBCOMMAND ...``.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their command runs, so a cold
``trace`` never pays for Qt or Dask.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from core.errors import TraceError

#: sub-command → (module, one-line help)
COMMANDS = {
    "trace": ("cli.trace_cmd", "trace the optimal polyline between two points of an image"),
    "bench": ("cli.bench_cmd", "time the DP and end-to-end tracing (the paper's Table 2 grid)"),
    "batch": ("cli.batch_cmd", "snap seed lines to the imagery of a whole folder"),
    "eval": ("cli.eval_cmd", "measure trace accuracy against ground-truth cases"),
}


def build_parser(command: str) -> argparse.ArgumentParser:
    module_name, summary = COMMANDS[command]
    parser = argparse.ArgumentParser(prog=f"main.py {command}", description=summary)
    importlib.import_module(module_name).add_arguments(parser)
    return parser


def main(argv: list[str]) -> int:
    """Run one sub-command; user errors become one line on stderr and exit code 2."""
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        lines = ["usage: python main.py [IMAGE | FOLDER | SESSION.json]  the desktop application",
                 "       python main.py COMMAND [options]                headless", "",
                 "commands:"]
        lines += [f"  {name:<7} {summary}" for name, (_, summary) in COMMANDS.items()]
        print("\n".join(lines), file=sys.stdout if argv and argv[0] in ("-h", "--help") else
              sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command = argv[0]
    parser = build_parser(command)
    args = parser.parse_args(argv[1:])
    try:
        return int(importlib.import_module(COMMANDS[command][0]).run(args) or 0)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
