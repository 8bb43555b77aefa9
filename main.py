"""Entry point: no sub-command starts the desktop application; otherwise see ``cli``."""

import os
import sys


def main() -> int:
    argv = sys.argv[1:]
    from cli import COMMANDS

    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
        from cli import main as cli_main

        code = cli_main(argv)
        if argv[0] == "trace":
            # A one-shot trace has written and closed everything by now: skip the interpreter's
            # teardown, where numba's and LLVM's finalisers alone take ~0.2 s of a cold trace.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    from app.main_window import run_app

    return run_app(argv)


if __name__ == "__main__":
    sys.exit(main())
