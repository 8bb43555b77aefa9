"""The command line: ``roadtracer`` (installed) or ``python main.py`` (source checkout).

``roadtracer [IMAGE | FOLDER | SESSION.json]`` starts the desktop application;
``roadtracer COMMAND ...`` runs a headless command; ``roadtracer help [COMMAND]`` shows the
usage (or a command's options). Each command lives in its own module
exposing ``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only when
their command runs, so a cold ``trace`` never pays for Qt or Dask.

Messages on stderr: notes (``note: ...``, progress bars) come before the work they describe
(those on a trace's result, ``TraceResult.notes``, after it and before its output), a user
mistake ends the run with one ``error: ...`` line (always the last line) and exit code 2, and
``--quiet`` silences the notes of the commands that print them.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import sys
from pathlib import Path

from core import version
from core.errors import TraceError

#: Exit status when standard output is a pipe whose reader has gone (128 + SIGPIPE).
SIGPIPE_EXIT = 141

#: Most characters of an unknown command echoed back in its error.
MAX_ECHOED_CHARS = 80
#: sub-command → (module, one-line help)
COMMANDS = {
    "trace": ("cli.trace_cmd", "trace the optimal polyline between two points of an image"),
    "bench": ("cli.bench_cmd", "time the DP and end-to-end tracing (the paper's Table 2 grid)"),
    "batch": ("cli.batch_cmd", "snap seed lines to the imagery of a whole folder"),
    "eval": ("cli.eval_cmd", "measure trace accuracy against ground-truth cases"),
}

#: Commands that print notes, and so take ``--quiet``.
COMMANDS_WITH_NOTES = ("trace", "batch", "eval")


#: Line breaks and other control characters, escaped in messages (as \n, \x1b, ...).
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7f)} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped: a file name holding
    ``\\n`` cannot split a message or forge another ``error:`` line."""
    return text.translate(_CONTROL)


def program_name() -> str:
    """How the user started us: ``python main.py`` in a checkout, else ``roadtracer``."""
    return "python main.py" if Path(sys.argv[0]).name == "main.py" else "roadtracer"


def usage() -> str:
    """The top-level usage text (``roadtracer --help``)."""
    name = program_name()
    lines = [f"usage: {name} [IMAGE | FOLDER | SESSION.json]   the desktop application",
             f"       {name} COMMAND [options]                 headless (no display needed)",
             f"       {name} help [COMMAND]                    this text, or a command's "
             "options", "",
             "commands:"]
    lines += [f"  {command:<7} {summary}" for command, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


class CommandParser(argparse.ArgumentParser):
    """A command's argument parser whose usage mistakes end, as every user mistake does, in
    one ``error: ...`` line (with where to find the options) and exit code 2."""

    def error(self, message: str):
        hint = ""
        if "expected one argument" in message:
            hint = "; a value that starts with '-' goes after '=', e.g. --a=-1,5"
        print(f"error: {one_line(message)}{hint} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


class CheckedStdout:
    """Standard output for a command: a write or flush that fails (a full disk, a closed
    descriptor) raises :class:`core.errors.OutputWriteError`, which ends the command with one
    ``error: ...`` line and exit code 2; a reader that went away still raises
    ``BrokenPipeError`` (a quiet exit, see :func:`entry`)."""

    def __init__(self, stream):
        self._stream = stream

    def _failed(self, exc: OSError | None):
        from core.errors import OutputWriteError

        reason = "standard output is closed" if exc is None else exc.strerror or str(exc)
        return OutputWriteError(f"cannot write the output: {reason}")

    def write(self, text: str) -> int:
        """Write ``text`` to the stream."""
        if self._stream is None:
            raise self._failed(None)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        """Flush the stream."""
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def build_parser(command: str) -> argparse.ArgumentParser:
    module_name, summary = COMMANDS[command]
    parser = CommandParser(prog=f"{program_name()} {command}", description=summary,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    importlib.import_module(module_name).add_arguments(parser)
    if command in COMMANDS_WITH_NOTES:
        parser.add_argument("-q", "--quiet", action="store_true",
                            help="print no notes or progress on stderr (errors and failures "
                                 "still)")
    return parser


def set_examples(parser: argparse.ArgumentParser, *arguments: str) -> None:
    """End ``parser``'s help with an "examples:" section: the command run with each of
    ``arguments``."""
    parser.epilog = "examples:\n" + "\n".join(f"  {parser.prog} {line}".rstrip()
                                                for line in arguments)


def note(args: argparse.Namespace, message: str) -> None:
    """Print ``note: message`` on stderr unless ``--quiet`` was given."""
    if not getattr(args, "quiet", False):
        print(f"note: {one_line(message)}", file=sys.stderr)


def explains_gpu_fallback(args: argparse.Namespace, backend) -> bool:
    """Whether a note should say why ``--backend auto`` runs ``backend`` instead of the GPU:
    only where the gpu extra is installed, so that the user expects a GPU (on a CPU-only
    install the CPU is no news)."""
    from gpu.context import gpu_extra_installed

    return args.backend == "auto" and backend.name != "gpu" and gpu_extra_installed()


def note_compiling(args: argparse.Namespace, backend) -> None:
    """Before the first CPU trace on this machine, note the wait while numba compiles the
    tracer (:func:`core.jit.tracer_compiled`)."""
    from core.jit import COMPILING_NOTE, tracer_compiled

    if backend.name == "cpu" and not tracer_compiled():
        note(args, COMPILING_NOTE)


def looks_like_a_file_name(word: str) -> bool:
    """Whether ``word`` names a file rather than a command: a dot or a slash in it."""
    return "." in word or os.sep in word


def closest_command(word: str) -> str | None:
    """The command (or ``help``) ``word`` is likely a misspelling of, or None; words that look
    like file names are none."""
    if looks_like_a_file_name(word):
        return None
    matches = difflib.get_close_matches(word, [*COMMANDS, "help"], n=1)
    return matches[0] if matches else None


def echoed(word: str) -> str:
    """``word`` as a message shows it: quoted (control characters escaped), at most
    ``MAX_ECHOED_CHARS``."""
    return repr(word if len(word) <= MAX_ECHOED_CHARS else word[:MAX_ECHOED_CHARS] + "…")


def did_you_mean(word: str) -> str:
    """"; did you mean 'eval'?" for a ``word`` that likely misspells a command, else ""."""
    closest = closest_command(word)
    return f"; did you mean {closest!r}?" if closest else ""


def not_a_command(word: str) -> str:
    """The problem with ``word``, neither a command nor an existing file, and a likely fix."""
    if looks_like_a_file_name(word):
        return f"no such image, folder or session file: {echoed(word)}"
    return (f"{echoed(word)} is neither a command ({', '.join(COMMANDS)}) nor an existing "
            f"image, folder or session file{did_you_mean(word)}")


def main(argv: list[str]) -> int:
    """Run one sub-command; user errors become one line on stderr and exit code 2.
    ``help`` and ``help COMMAND`` are ``--help`` and ``COMMAND --help``."""
    if argv and argv[0] == "help":
        if len(argv) > 2 or argv[1:] == ["help"]:
            print(f"error: help takes one command at most ({', '.join(COMMANDS)}), got "
                  f"{one_line(' '.join(argv[1:]))}", file=sys.stderr)
            return 2
        if argv[1:] and argv[1] not in COMMANDS:
            print(f"error: no command {echoed(argv[1])} ({', '.join(COMMANDS)})"
                  f"{did_you_mean(argv[1])}", file=sys.stderr)
            return 2
        argv = [*argv[1:2], "--help"]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(usage(), file=sys.stderr)
        print(f"error: {one_line(not_a_command(argv[0]))}", file=sys.stderr)
        return 2
    command = argv[0]
    parser = build_parser(command)
    args = parser.parse_args(argv[1:])
    try:
        with contextlib.redirect_stdout(CheckedStdout(sys.stdout)):
            code = int(importlib.import_module(COMMANDS[command][0]).run(args) or 0)
            sys.stdout.flush()
        return code
    except TraceError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def start_app_argument_problem(argv: list[str]) -> str | None:
    """Why ``argv`` cannot start the application (a typo, an option), or None."""
    if argv and closest_command(argv[0]) and not os.path.exists(argv[0]):
        return not_a_command(argv[0])  # a misspelt command, whatever follows it
    if len(argv) > 1:
        return (f"the application opens one image, folder or session file; got {len(argv)} "
                f"arguments (see {program_name()} --help)")
    if argv and argv[0].startswith("-"):
        return f"unknown option {argv[0]} (see {program_name()} --help)"
    if argv and not os.path.exists(argv[0]):
        return not_a_command(argv[0])
    return None


def flush_output(code: int) -> int:
    """Flush stdout and stderr; the exit code, 2 where stdout could not be written."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        raise  # handled by entry
    except OSError as exc:
        print(f"error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        code = 2
    sys.stderr.flush()
    return code


def entry(argv: list[str] | None = None) -> int:
    """The ``roadtracer`` command (and ``python main.py``): the application or a command.

    After a ``trace`` command the process ends here (``os._exit``), so call it in a
    subprocess; :func:`main` runs one command in-process. A reader of stdout that goes away
    (``roadtracer --help | head -1``) ends the run quietly with exit code 141, as a command
    ended by SIGPIPE.
    """
    if sys.stderr is None:  # closed (2>&-): notes and errors go nowhere, never onto stdout
        sys.stderr = open(os.devnull, "w")
    fit_stream_encodings()
    try:
        return dispatch(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        # Nothing can reach the reader; keep Python's final flush from failing once more.
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
        return SIGPIPE_EXIT
    except KeyboardInterrupt:  # Ctrl-C before a command's own handling (imports, parsing)
        print("interrupted", file=sys.stderr)
        return 130


#: A character that only encodings of all of Unicode (UTF-8, UTF-16, GB18030) can write: a
#: legacy code page may hold some of the help texts' characters and lack others (cp932 has
#: σ, θ and → but not ·).
_ANY_CHARACTER = "\U0010fffd"


def fit_stream_encodings() -> None:
    """Make stdout and stderr able to write any text (the help texts and tables, file names):
    where their encoding is no encoding of all of Unicode (Windows writes to a file or pipe
    in the ANSI code page, e.g. cp1252 or cp932), a redirected stream is switched to UTF-8,
    and a console's unencodable characters become ``?``."""
    for stream in (sys.stdout, sys.stderr):
        if not hasattr(stream, "reconfigure"):
            continue
        try:
            _ANY_CHARACTER.encode(stream.encoding)
            continue
        except (UnicodeEncodeError, LookupError):
            pass
        if stream.isatty():
            stream.reconfigure(errors="replace")
        else:
            stream.reconfigure(encoding="utf-8", errors="replace")


def dispatch(argv: list[str]) -> int:
    """:func:`entry`'s work: the version, a command, or the application."""
    if argv and argv[0] == "--version":
        print(f"roadtracer {version()}")
        return 0
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help", "help")):
        code = main(argv)
        if argv[0] == "trace":
            # A one-shot trace has written and closed everything by now: skip the
            # interpreter's teardown, where numba's and LLVM's finalisers alone take ~0.2 s.
            os._exit(flush_output(code))
        return code
    problem = start_app_argument_problem(argv)
    if problem:
        print(f"error: {one_line(problem)}", file=sys.stderr)
        return 2
    from app.start import display_problem, start_app

    if not argv and display_problem():
        # The application cannot open here (its error line follows): show what can run.
        print(usage(), file=sys.stderr)

    return start_app(argv, program_name())
