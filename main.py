"""Entry point: no sub-command starts the desktop application; otherwise see ``cli``."""

import sys


def main() -> int:
    argv = sys.argv[1:]
    from cli import COMMANDS

    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
        from cli import main as cli_main

        return cli_main(argv)
    from app.main_window import run_app

    return run_app(argv)


if __name__ == "__main__":
    sys.exit(main())
