"""``python main.py``: the ``roadtracer`` command from a source checkout (see ``cli.entry``)."""

import sys

from cli import entry

if __name__ == "__main__":
    sys.exit(entry())
