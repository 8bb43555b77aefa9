"""The ``roadtracer`` entry point: help, dispatch, notes and ``--quiet``, and a start with no
display, which must end in one line and exit code 2 instead of Qt's abort."""

import json
import os
import shutil
import subprocess
import sys
import tomllib
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from app.start import display_problem
from cli import COMMANDS, entry
from cli import main as cli_main
from tests.conftest import ROOT, SAMPLE_CASES, SAMPLE_IMAGE, close_the_window_once_loaded

# pytest-qt creates its QApplication before any test runs: offscreen, as in test_app.py.
os.environ["QT_QPA_PLATFORM"] = "offscreen"

A, B = "430,241", "486,172"


def run_program(*argv, env_changes=None, timeout=300):
    """Run ``python main.py ARGV`` in a fresh process; ``env_changes`` maps names to values
    (None: unset)."""
    env = dict(os.environ)
    for name, value in (env_changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run([sys.executable, "main.py", *map(str, argv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def installed_script() -> Path | None:
    """The ``roadtracer`` script of this environment, if the project is installed here."""
    if not entry_points(group="console_scripts", name="roadtracer"):
        return None
    found = shutil.which("roadtracer", path=str(Path(sys.executable).parent))
    return Path(found) if found else None


def test_pyproject_script_is_the_entry_function():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, function = pyproject["project"]["scripts"]["roadtracer"].split(":")
    assert getattr(import_module(module), function) is entry
    assert pyproject["project"]["license"] == "MIT"
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_help_lists_every_command(capsys):
    assert entry(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"\n  {command} " in out


@pytest.mark.skipif(installed_script() is None,
                    reason="roadtracer is not installed in this environment (pip install -e .)")
def test_installed_command_helps_and_traces():
    script = str(installed_script())
    shown = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: roadtracer ")
    traced = subprocess.run([script, "trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--quiet"],
                            capture_output=True, text=True, timeout=300)
    assert traced.returncode == 0, traced.stderr
    assert traced.stderr == ""
    assert json.loads(traced.stdout)["pixels"][-1] == [486.0, 172.0]


def test_unknown_command_or_missing_file_is_one_line():
    process = run_program("trac", timeout=120)
    assert process.returncode == 2
    assert process.stderr.splitlines() == [
        "error: 'trac' is neither a command (trace, bench, batch, eval) nor an existing image, "
        "folder or session file; did you mean 'trace'?"]
    assert process.stdout == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="DISPLAY and WAYLAND_DISPLAY are checked on Linux only")
def test_no_display_shows_the_usage_then_one_error_line_and_exit_code_2():
    process = run_program(env_changes={"DISPLAY": None, "WAYLAND_DISPLAY": None,
                                       "QT_QPA_PLATFORM": None}, timeout=120)
    assert process.returncode == 2
    lines = process.stderr.splitlines()
    assert process.stderr.startswith("usage: python main.py "), process.stderr
    assert lines[-1].startswith("error: cannot start the application: no display")
    assert "set DISPLAY" in lines[-1]
    assert "(python main.py trace, python main.py batch)" in lines[-1]  # as run


def test_qt_platform_plugin_failure_ends_in_one_line_and_exit_code_2():
    process = run_program(SAMPLE_IMAGE, env_changes={"QT_QPA_PLATFORM": "no-such-platform"},
                          timeout=120)
    assert process.returncode == 2  # not Qt's abort (134)
    lines = process.stderr.splitlines()
    assert len(lines) == 1, process.stderr
    assert "Qt cannot open its platform plugin" in lines[0]
    assert "no-such-platform" in lines[0]


@pytest.mark.parametrize(("environ", "platform", "has_problem"), [
    ({}, "linux", True),
    ({"DISPLAY": ":0"}, "linux", False),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({"DISPLAY": ""}, "linux", True),
    ({}, "darwin", False),
    ({}, "win32", False),
])
def test_display_problem(environ, platform, has_problem):
    assert (display_problem(environ, platform) is not None) == has_problem


def trace_args(*extra):
    # --backend auto: on a machine without a GPU the CPU note is printed
    return ["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, *extra]


def test_trace_quiet_silences_notes(capsys):
    assert cli_main(trace_args("--format", "geojson")) == 0
    loud = capsys.readouterr()
    assert "note: " in loud.err  # GeoJSON in pixels (no georeferencing), at least
    assert cli_main(trace_args("--format", "geojson", "--quiet")) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    pixels = [json.loads(out)["features"][0]["properties"]["pixels"] for out in (loud.out,
                                                                                  quiet.out)]
    assert pixels[0] == pixels[1]


@pytest.mark.parametrize("mistake", [
    ["--b", "2000,20"],                       # outside the image, found while tracing
    ["--b", B, "--max-angle", "0"],           # a bad parameter
])
def test_a_mistake_is_the_last_line_and_the_only_one_when_quiet(capsys, mistake):
    argv = ["trace", str(SAMPLE_IMAGE), "--a", A, *mistake]
    assert cli_main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("error: ")
    assert all(line.startswith("note: ") for line in lines[:-1])
    assert cli_main([*argv, "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [lines[-1]]


def test_a_missing_image_is_one_line_even_without_quiet(capsys):
    assert cli_main(["trace", str(ROOT / "no-such.png"), "--a", A, "--b", B]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_batch_quiet_prints_nothing_on_success(capsys, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(SAMPLE_IMAGE, images / "sample.png")
    seeds = tmp_path / "seeds.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"image": "sample.png"},
         "geometry": {"type": "LineString", "coordinates": [[430, 241], [486, 172]]}}]}))
    argv = ["batch", str(images), "--seeds", str(seeds), "--workers", "1"]
    assert cli_main([*argv, "-o", str(tmp_path / "loud")]) == 0
    assert "note: " in capsys.readouterr().err  # pixel coordinates, at least
    assert cli_main([*argv, "-o", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert (tmp_path / "quiet" / "sample.geojson").is_file()


def test_eval_quiet_prints_only_the_report(capsys):
    argv = ["eval", str(SAMPLE_CASES), "--limit", "1", "--score", "centre", "--backend", "cpu"]
    assert cli_main(argv) == 0
    assert "note: ours: CPU" in capsys.readouterr().err
    assert cli_main([*argv, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "ours" in captured.out


def test_start_app_opens_the_image_where_a_display_exists(qtbot, monkeypatch):
    from app.start import start_app

    opened = []
    close_the_window_once_loaded(opened, monkeypatch)
    assert start_app([str(SAMPLE_IMAGE)]) == 0
    assert opened == [str(SAMPLE_IMAGE)]


def test_a_cold_trace_imports_only_what_it_uses():
    """Start-up time: a trace of a PNG needs none of these (docs/ENGINE.md, "Start-up time")."""
    unneeded = ["PySide6", "rasterio", "pyproj", "dask", "distributed", "skimage", "cv2", "tqdm",
                "scipy.linalg", "scipy.ndimage", "scipy.signal"]
    script = ("import json, sys\n"
              "from cli import main\n"
              f"code = main({trace_args('--quiet')!r})\n"
              f"print(json.dumps([code, sorted(m for m in {unneeded!r} if m in sys.modules)]),"
              " file=sys.stderr)\n")
    process = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
    assert json.loads(process.stderr.splitlines()[-1]) == [0, []], process.stderr


@pytest.mark.parametrize("argv", [["--help"], trace_args("--quiet")])
def test_a_reader_that_goes_away_ends_the_run_quietly(argv):
    process = subprocess.Popen([sys.executable, "main.py", *argv], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # like `| head -0`: the reader is gone before anything is written
    stderr = process.stderr.read()
    assert process.wait(timeout=300) == 141  # as a command ended by SIGPIPE
    assert stderr == ""


def test_ctrl_c_while_a_command_is_being_read_ends_quietly(capsys, monkeypatch):
    """A Ctrl-C before the command's own handling (its modules imported, its options read)
    ends as one later does: "interrupted" and exit code 130, no traceback."""
    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr("cli.importlib.import_module", interrupted)
    assert entry(["eval", "cases.json"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_source_distribution_carries_the_tests_docs_and_licences(tmp_path):
    """An sdist is a checkout's worth: the tests with their helpers and data, the docs, the
    scripts they name; the bundled model's and sample's licences travel in its metadata; no
    compiled caches."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to list the project's files")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    tree = tmp_path / "tree"
    for name in filter(None, tracked):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    (tree / "core" / "stale.nbi").write_bytes(b"cache")
    done = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom setuptools import build_meta\n"
         "print(build_meta.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=tree, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import tarfile

    with tarfile.open(tmp_path / "dist" / done.stdout.split()[-1]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        info = archive.extractfile(next(name for name in archive.getnames()
                                        if name.endswith("/PKG-INFO"))).read().decode()
    for needed in ("tests/conftest.py", "tests/helpers.py", "tests/data/LICENSE.md",
                   "docs/ACCURACY.md", "scripts/train_surface_model.py", "main.py",
                   "CHANGELOG.md", "resources/models/surface.onnx",
                   "resources/eval/roads/cases.json"):
        assert needed in names, needed
    assert not [name for name in names if name.endswith((".pyc", ".nbi", ".nbc"))]
    for licence in ("LICENSE", "resources/models/LICENSE.md", "resources/sample/LICENSE.md"):
        assert f"License-File: {licence}" in info
