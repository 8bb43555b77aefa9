"""Starting the desktop application: where no window can be opened, say so in one line.

Qt aborts the process (exit 134, several lines about platform plugins) when it cannot open a
display. :func:`start_app` checks first (on Linux: ``DISPLAY`` or ``WAYLAND_DISPLAY`` set,
unless ``QT_QPA_PLATFORM`` picks a platform) and, while the ``QApplication`` is created, turns
Qt's fatal platform-plugin error into one ``error:`` line on stderr and exit code 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

#: Exit code of a start that cannot open a window (as for every user mistake).
EXIT_NO_DISPLAY = 2

#: The way out, for the command the user started us with (``{program}``).
HEADLESS = "or use the headless commands ({program} trace, {program} batch), which need none"


def display_problem(environ: Mapping[str, str] = os.environ,
                    platform: str = sys.platform) -> str | None:
    """Why Qt will find no display here, or None where one may be there.

    Only Linux is checked (macOS and Windows always have their window system); a
    ``QT_QPA_PLATFORM`` the user set (e.g. ``offscreen``) is trusted.
    """
    if not platform.startswith("linux") or environ.get("QT_QPA_PLATFORM"):
        return None
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    return "no display to open a window on (neither DISPLAY nor WAYLAND_DISPLAY is set)"


def plugin_hint(platform: str = sys.platform) -> str:
    """What to do where Qt cannot load its platform plugin: on Linux, the system libraries and
    the display; elsewhere (Windows, macOS: the window system is always there) PySide6's own
    files."""
    if platform.startswith("linux"):
        return ("install the system libraries Qt names (the README lists them) and check that "
                "DISPLAY or WAYLAND_DISPLAY names a running display")
    return 'reinstall PySide6 (pip install --force-reinstall -e ".[app]" in the project folder)'


def fail(problem: str, what_to_do: str, program: str = "roadtracer") -> int:
    """Print the one error line (naming the headless commands as ``program`` runs them);
    return :data:`EXIT_NO_DISPLAY`."""
    print(f"error: cannot start the application: {problem}; {what_to_do}, "
          f"{HEADLESS.format(program=program)}", file=sys.stderr)
    return EXIT_NO_DISPLAY


def create_application():
    """The ``QApplication``; Qt's fatal error if it cannot open a display ends the process.

    Qt's messages while it starts are held back: they are printed only if the application
    starts; if Qt gives up, the first of them (e.g. "could not connect to display :1") is
    named in the one error line and the process exits with :data:`EXIT_NO_DISPLAY`.
    """
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler
    from PySide6.QtWidgets import QApplication

    held: list[str] = []

    def hold_or_fail(kind, _context, message: str) -> None:
        if kind != QtMsgType.QtFatalMsg:
            held.append(message)
            return
        reason = held[0] if held else message.splitlines()[0]
        fail(f"Qt cannot open its platform plugin ({' '.join(reason.split())})", plugin_hint())
        sys.stderr.flush()
        os._exit(EXIT_NO_DISPLAY)  # Qt would abort() when this handler returns

    previous = qInstallMessageHandler(hold_or_fail)
    try:
        application = QApplication.instance() or QApplication([sys.argv[0]])
    finally:
        qInstallMessageHandler(previous)
    for message in held:
        print(message, file=sys.stderr)
    return application


def start_app(argv: list[str], program: str = "roadtracer") -> int:
    """Start the application on ``argv`` (one image, folder or session path, or none);
    ``program``: how the user runs us (``python main.py`` or ``roadtracer``), for messages."""
    problem = display_problem()
    if problem:
        return fail(problem, "set DISPLAY (or WAYLAND_DISPLAY) to a running display", program)
    try:
        import PySide6.QtWidgets  # noqa: F401
    except ImportError as exc:
        if exc.name and exc.name.startswith("PySide6"):
            return fail("PySide6 is not installed",
                        'install it: pip install -e ".[app]" in the project folder', program)
        return fail(f"Qt cannot be loaded ({exc})",
                    "install the system libraries Qt needs (the README lists them)", program)
    create_application()
    from app.main_window import run_app

    return run_app(argv)
