"""Windows and macOS behaviour, simulated on Linux: missing POSIX modules and functions, legacy
code pages, byte-order marks, Windows paths and platform markers."""

import builtins
import hashlib
import importlib
import io
import json
import ntpath
import os
import subprocess
import sys
import tomllib
import types

import numpy as np
import pytest
from packaging.requirements import Requirement

import cli
import core.jit
from app.files import autosave_path
from app.session import load_session, write_session
from core import surface
from core.errors import BadParameter, ModelUnavailable
from core.output import decode_json, read_json
from core.tracer import TraceParams
from tests.conftest import ROOT, SAMPLE_IMAGE

BOM = "\ufeff"


# 1. bench: no ``resource`` on Windows, ru_maxrss in bytes on macOS.

def test_bench_imports_and_shows_its_help_without_resource(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "resource", None)  # import resource: ImportError
    monkeypatch.setattr(cli, "bench_cmd", importlib.import_module("cli.bench_cmd"))
    monkeypatch.delitem(sys.modules, "cli.bench_cmd")
    bench = importlib.import_module("cli.bench_cmd")
    assert bench.peak_memory_mb() is None
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["help", "bench"])
    assert exit_info.value.code == 0
    assert "--repeats" in capsys.readouterr().out


@pytest.mark.parametrize(("platform", "maxrss"), [("linux", 512 * 2**10), ("darwin", 512 * 2**20)])
def test_bench_peak_memory_in_mb_on_linux_and_macos(monkeypatch, platform, maxrss):
    from cli.bench_cmd import peak_memory_mb

    usage = types.SimpleNamespace(ru_maxrss=maxrss)
    monkeypatch.setitem(sys.modules, "resource", types.SimpleNamespace(
        RUSAGE_SELF=0, getrusage=lambda who: usage))
    monkeypatch.setattr(sys, "platform", platform)
    assert peak_memory_mb() == 512


# 2. JSON files with a UTF-8 byte-order mark.

def test_json_files_with_a_byte_order_mark_are_read(tmp_path):
    path = tmp_path / "seeds.geojson"
    path.write_text(BOM + '{"type": "FeatureCollection", "features": []}', encoding="utf-8")
    assert read_json(path, "seeds file") == {"type": "FeatureCollection", "features": []}
    with pytest.raises(ValueError, match="BOM"):
        decode_json(BOM + "{}")  # as json.loads


def test_a_session_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "work.roadtracer.json"
    write_session(path, str(SAMPLE_IMAGE), (), TraceParams(), "auto")
    path.write_text(BOM + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert load_session(path).image == str(SAMPLE_IMAGE)


def test_a_byte_order_mark_alone_is_no_json(tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(BOM, encoding="utf-8")
    with pytest.raises(BadParameter, match="is not JSON"):
        read_json(path, "cases file")


# 3. Output in a legacy code page (Windows, redirected: cp1252).

@pytest.mark.parametrize(("command", "character"), [("trace", "σ"), ("bench", "θ")])
def test_help_is_written_when_stdout_is_a_cp1252_file(command, character):
    process = subprocess.run([sys.executable, "main.py", command, "--help"], cwd=ROOT,
                             capture_output=True, env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert process.returncode == 0, process.stderr.decode(errors="replace")
    assert character in process.stdout.decode("utf-8")


def test_streams_that_encode_everything_are_left_alone(monkeypatch):
    legacy = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", legacy)
    monkeypatch.setattr(sys, "stderr", utf8)
    cli.fit_stream_encodings()
    assert (legacy.encoding, legacy.errors) == ("utf-8", "replace")
    assert (utf8.encoding, utf8.errors) == ("utf-8", "strict")


# 4. numba's private cache folder without os.getuid (Windows).

def test_private_cache_folder_without_user_ids(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert core.jit._private_cache_folder() == str(tmp_path / f"roadtracer-numba-{os.getuid()}")
    monkeypatch.delattr(os, "getuid")
    folder = core.jit._private_cache_folder()
    assert folder == str(tmp_path / "roadtracer-numba")
    assert core.jit._private_cache_folder() == folder  # reused, not a new folder each run


# 5. ONNX Runtime installed but not loading (Windows without the Visual C++ runtime).

@pytest.fixture
def fresh_sessions():
    surface._loaded_session.cache_clear()
    yield
    surface._loaded_session.cache_clear()


def test_onnxruntime_not_installed_says_how_to_install(monkeypatch, fresh_sessions):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ModelUnavailable, match="pip install onnxruntime"):
        surface._loaded_session("model.onnx", None)


def test_onnxruntime_not_loading_says_why(monkeypatch, fresh_sessions):
    reason = "DLL load failed while importing onnxruntime_pybind11_state: module not found"
    real_import = builtins.__import__

    def failing_import(name, *args, **kwargs):
        if name.startswith("onnxruntime"):
            raise ImportError(reason)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", failing_import)
    with pytest.raises(ModelUnavailable) as error:
        surface._loaded_session("model.onnx", None)
    assert reason in str(error.value)
    assert "pip install" not in str(error.value)
    assert "Visual C++" not in str(error.value)
    monkeypatch.setattr(os, "name", "nt")
    assert "Microsoft Visual C++ Redistributable" in surface._import_problem(ImportError(reason))


# 6. Sessions' relative image path: '/' written, '\' (older Windows sessions) read.

def session_of_an_image_below(tmp_path):
    """(the image imgs/a.png, a session of it saved beside imgs/)."""
    image = tmp_path / "imgs" / "a.png"
    image.parent.mkdir()
    image.write_bytes(SAMPLE_IMAGE.read_bytes())
    session = tmp_path / "work.roadtracer.json"
    write_session(session, str(image), (), TraceParams(), "auto")
    return image, session


def test_session_relative_image_path_is_written_with_slashes(tmp_path):
    _, session = session_of_an_image_below(tmp_path)
    assert json.loads(session.read_text(encoding="utf-8"))["image_relative"] == "imgs/a.png"


def test_session_written_on_windows_finds_its_image(tmp_path):
    image, session = session_of_an_image_below(tmp_path)
    document = json.loads(session.read_text(encoding="utf-8"))
    document.update(image="C:\\Users\\gis\\proj\\imgs\\a.png", image_relative="imgs\\a.png")
    session.write_text(json.dumps(document), encoding="utf-8")
    assert load_session(session).image == str(image)


# 7. Autosave names on case-insensitive file systems.

def test_autosave_name_is_unchanged_on_linux(tmp_path):
    image = "data/A.png"
    digest = hashlib.sha1(os.path.abspath(image).encode("utf-8")).hexdigest()[:16]
    assert autosave_path(str(tmp_path), image) == str(tmp_path / f"A-{digest}.roadtracer.json")


def test_autosave_name_ignores_case_and_separators_on_windows(monkeypatch):
    monkeypatch.setattr("app.files.os", types.SimpleNamespace(path=ntpath))
    first = autosave_path("C:\\autosave", "c:/data/a.png")
    second = autosave_path("C:\\autosave", "C:\\Data\\A.PNG")
    assert first.rsplit("-", 1)[1] == second.rsplit("-", 1)[1]


# 8. Intel Macs get a numba with wheels.

@pytest.mark.parametrize(("system", "machine", "newest_allowed"), [
    ("Darwin", "x86_64", False), ("Darwin", "arm64", True), ("Linux", "x86_64", True),
    ("Windows", "AMD64", True)])
def test_numba_requirement_per_platform(system, machine, newest_allowed):
    with open(ROOT / "pyproject.toml", "rb") as stream:
        dependencies = tomllib.load(stream)["project"]["dependencies"]
    environment = {"platform_system": system, "platform_machine": machine}
    numba = [requirement for requirement in map(Requirement, dependencies)
             if requirement.name == "numba" and requirement.marker.evaluate(environment)]
    assert len(numba) == 1
    assert numba[0].specifier.contains("0.62.1")
    assert not numba[0].specifier.contains("0.58")
    assert numba[0].specifier.contains("0.68.1") == newest_allowed


# Teaching set: part names that differ in case only name one file on Windows and macOS.

def test_image_parts_differing_in_case_only_get_other_names(tmp_path):
    from core.raster import load_image
    from core.teaching import training_set

    raster = load_image(SAMPLE_IMAGE)
    lines = [np.array([[50.0, 50.0], [150.0, 50.0]])]
    sources, _, parts = training_set({str(tmp_path / "Road.png"): (raster, lines),
                                      str(tmp_path / "road.png"): (raster, lines)})
    assert [source["id"] for source in sources] == ["Road", "road_"]
    assert len({name.casefold() for name in parts}) == 2


# The memory budget where /proc/meminfo is missing (Windows, macOS).

def test_available_memory_comes_from_psutil_without_proc_meminfo(monkeypatch, tmp_path):
    import types

    from core import resources

    monkeypatch.setattr(resources, "MEMINFO", str(tmp_path / "no-meminfo"))
    monkeypatch.setattr(resources, "cgroup_room", lambda: None)
    fake = types.SimpleNamespace(virtual_memory=lambda: types.SimpleNamespace(available=123e6))
    monkeypatch.setitem(sys.modules, "psutil", fake)
    assert resources.available_memory() == 123_000_000


def test_a_qt_plugin_failure_names_the_display_on_linux_only():
    from app.start import plugin_hint

    assert "DISPLAY" in plugin_hint("linux")
    for platform in ("win32", "darwin"):
        assert "DISPLAY" not in plugin_hint(platform)
        assert "PySide6" in plugin_hint(platform)
