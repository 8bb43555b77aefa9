"""Command-line ergonomics: output options named alike, notes worth reading, help with
examples, and a misspelt or missing command answered with what to type."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from cli import build_parser, entry, usage
from cli import main as cli_main
from core.jit import COMPILING_NOTE
from tests.conftest import ROOT, SAMPLE_CASES, SAMPLE_IMAGE
from tests.test_georef import TRANSFORM, write_world_file

A, B = "430,241", "486,172"
TRACE = ["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B]
BENCH = ["bench", "--angles", "30", "--divisions", "5", "--points", "8", "--repeats", "1"]
EVAL = ["eval", str(SAMPLE_CASES), "--limit", "1", "--backend", "cpu"]


def run(capsys, argv):
    code = cli_main([str(part) for part in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv", [EVAL, BENCH], ids=["eval", "bench"])
def test_json_dash_is_stdout_and_the_only_thing_there(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, [*argv, "--json", "-"])
    assert code == 0
    assert list(tmp_path.iterdir()) == []  # no file named "-"
    document = json.loads(out)  # the whole of stdout is the report
    assert set(document) >= ({"rows"} if argv is BENCH else {"methods", "params"})
    assert ("| θ | n (m) |" if argv is BENCH else "c@3 med") in err  # the printed report


@pytest.mark.parametrize("argv", [EVAL, BENCH], ids=["eval", "bench"])
def test_o_is_short_for_json(capsys, tmp_path, argv):
    report = tmp_path / "report.json"
    code, out, _ = run(capsys, [*argv, "-o", report])
    assert code == 0
    document = json.loads(report.read_text())
    if argv is BENCH:  # one row: the one angle, divisions and points asked for
        assert set(document) == {"backend", "machine", "rows"}
        (row,) = document["rows"]
        assert (row["theta"], row["n"], row["d"]) == (30.0, 5, 8)
        assert row["end_to_end_ms"] > 0
    else:  # the one case of --limit 1, traced by ours
        assert set(document) == {"evidence_dir", "methods", "params", "surface_model"}
        assert list(document["methods"]) == ["ours"]
        (case,) = document["methods"]["ours"]["cases"]
        assert case["id"] == "gsi_108_00"
        assert case["error"] is None
        assert 0 <= case["completeness_3"] <= case["completeness_5"] <= 1
        assert document["methods"]["ours"]["summary"]["all"]["n"] == 1
    assert out.strip()  # the printed report stays on stdout


def test_no_gpu_note_where_the_gpu_extra_is_not_installed(capsys, monkeypatch):
    monkeypatch.setattr("gpu.context.gpu_extra_installed", lambda: False)
    code, out, err = run(capsys, [*TRACE, "--ground-resolution", "0.2"])
    assert code == 0
    assert json.loads(out)["backend"] == "cpu"
    assert err == ""
    code, _, err = run(capsys, [*EVAL, "--backend", "auto", "--ground-resolution", "0.2"])
    assert code == 0
    (line,) = err.splitlines()  # the threads numba has here, whatever their number
    assert re.fullmatch(r"note: ours: CPU \(numba, \d+ threads?\)", line), line


def test_the_gpu_note_keeps_its_reason_where_pycuda_is_installed(capsys, monkeypatch):
    from core.errors import BackendUnavailable
    from gpu.select import choose_backend

    monkeypatch.setattr("gpu.context.gpu_extra_installed", lambda: True)
    backend, reason = choose_backend("auto")
    if backend.name == "gpu":
        pytest.skip("a GPU is available here")
    code, _, err = run(capsys, [*TRACE, "--ground-resolution", "0.2"])
    assert code == 0
    assert err.splitlines() == [f"note: using {reason}"]
    assert "GPU unavailable: " in reason
    with pytest.raises(BackendUnavailable):
        choose_backend("gpu")


def test_gpu_backend_without_pycuda_says_how_to_install_it(capsys):
    from gpu.context import gpu_extra_installed

    if gpu_extra_installed():
        pytest.skip("pycuda is installed here")
    code, _, err = run(capsys, [*TRACE, "--backend", "gpu"])
    assert code == 2
    assert err.splitlines()[-1] == ('error: GPU unavailable: pycuda is not installed; install '
                                    'the gpu extra (pip install -e ".[gpu]")')


def trace_with_cache(cache, *extra):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "main.py", *TRACE[:2], "--a", A, "--b", B,
                           "--backend", "cpu", "--ground-resolution", "0.2", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_an_empty_numba_cache_is_seen_as_not_compiled(tmp_path):
    script = "from core.jit import tracer_compiled; print(tracer_compiled())"
    process = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                             text=True, timeout=120,
                             env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)})
    assert process.stdout == "False\n", process.stderr


@pytest.mark.slow
def test_the_first_trace_says_it_compiles_once(tmp_path):
    quiet = trace_with_cache(tmp_path / "quiet", "--quiet")
    assert quiet.returncode == 0
    assert quiet.stderr == ""
    first = trace_with_cache(tmp_path / "cache")
    assert first.returncode == 0
    assert first.stderr.splitlines() == [f"note: {COMPILING_NOTE}"]
    second = trace_with_cache(tmp_path / "cache")
    assert second.returncode == 0
    assert second.stderr == ""


def test_progress_bars_only_on_a_terminal(capsys):
    code, _, err = run(capsys, [*EVAL, "--ground-resolution", "0.2", "--corrections", "1"])
    assert code == 0
    assert "\r" not in err
    assert "case/s" not in err


def test_an_output_name_of_another_format_is_refused(capsys, tmp_path):
    target = tmp_path / "t.gpkg"
    code, out, err = run(capsys, [*TRACE, "--backend", "cpu", "-o", target])
    assert code == 2
    assert out == ""
    assert err.splitlines()[-1] == (f"error: {target}: trace writes a JSON record (.json) or "
                                    "GeoJSON (.geojson); name the file so, or give --format")
    assert not target.exists()
    code, _, _ = run(capsys, [*TRACE, "--backend", "cpu", "-o", target, "--format", "json"])
    assert code == 0
    assert json.loads(target.read_text())["pixels"][0] == [430.0, 241.0]
    upper = tmp_path / "T.GEOJSON"
    assert run(capsys, [*TRACE, "--backend", "cpu", "-o", upper])[0] == 0
    assert json.loads(upper.read_text())["type"] == "FeatureCollection"


CRS_NOTE = ("note: --crs applies to GeoJSON: the JSON record is in pixel coordinates; "
            "--format geojson writes map coordinates")


def test_crs_with_json_output_says_the_record_is_in_pixels(capsys):
    traced = [*TRACE, "--backend", "cpu", "--ground-resolution", "0.2"]
    code, _, err = run(capsys, [*traced, "--crs", "source"])
    assert code == 0
    assert err.splitlines() == [CRS_NOTE]
    assert run(capsys, traced)[2] == ""
    code, _, err = run(capsys, [*traced, "--crs", "wgs84", "--format", "geojson"])
    assert code == 0
    assert CRS_NOTE not in err.splitlines()
    help_text = " ".join(build_parser("trace").format_help().split())
    assert ("--crs {wgs84,source} output coordinates: wgs84 (longitude/latitude) or source "
            "(the image's own CRS)") in help_text


def test_a_world_file_without_crs_names_the_option(capsys, tmp_path):
    image = tmp_path / "w.png"
    image.write_bytes(SAMPLE_IMAGE.read_bytes())
    write_world_file(tmp_path / "w.pgw", TRANSFORM)
    code, _, err = run(capsys, ["trace", image, "--a", A, "--b", B, "--backend", "cpu",
                                "--ground-resolution", "0.2", "--format", "geojson"])
    assert code == 0
    assert err.splitlines()[-1].endswith(
        "names no CRS; add a .prj beside the image or give its CRS with --image-crs EPSG:…")


@pytest.mark.parametrize("command", ["trace", "eval", "bench"])
def test_help_ends_in_examples_that_parse(command):
    parser = build_parser(command)
    epilog = parser.format_help().split("\nexamples:\n", 1)[1]
    examples = epilog.splitlines()
    assert 2 <= len(examples) <= 3
    for example in examples:
        words = shlex.split(example)
        assert words[:2] == [parser.prog.split()[0], command]
        parser.parse_args(words[2:])  # a usage mistake would exit


def test_metavars_say_what_to_give():
    trace_usage = " ".join(build_parser("trace").format_usage().split())
    for option in ("--guides N", "--points N", "--halfwidth PX", "--max-angle DEG",
                   "--sigma PX", "--score KIND", "--backend NAME", "--a X,Y"):
        assert f"[{option}]" in trace_usage or f"{option} " in trace_usage, option
    assert "[--limit N]" in build_parser("eval").format_usage()
    bench_usage = " ".join(build_parser("bench").format_usage().split())
    for option in ("--repeats N", "--angles DEG,…", "--points N,…", "--divisions N,…",
                   "-o FILE"):
        assert f"[{option}]" in bench_usage, option


def test_half_width_is_halfwidth():
    parser = build_parser("trace")
    spelled = parser.parse_args([str(SAMPLE_IMAGE), "--a", A, "--b", B, "--half-width", "30"])
    assert spelled.halfwidth == 30.0


def test_help_prints_the_usage(capsys):
    assert entry(["help"]) == 0
    assert capsys.readouterr().out == usage() + "\n"
    with pytest.raises(SystemExit) as done:
        entry(["help", "eval"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


@pytest.mark.parametrize(("word", "suggestion"), [("trac", "; did you mean 'trace'?"),
                                                   ("evl", "; did you mean 'eval'?"),
                                                   ("road", "")])
def test_a_misspelt_command_is_answered_with_the_closest(capsys, word, suggestion):
    assert entry([word]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: '{word}' is neither a command (trace, bench, batch, eval) nor an existing "
        f"image, folder or session file{suggestion}"]


@pytest.mark.parametrize("name", ["trace.png", os.path.join("maps", "area")])
def test_a_missing_file_is_named_as_one(capsys, name):
    assert entry([name]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: no such image, folder or session file: {name!r}"]


def test_help_for_an_unknown_command_names_the_commands(capsys):
    assert cli_main(["help", "evl"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: no command 'evl' (trace, bench, batch, eval); did you mean 'eval'?"]
    assert cli_main(["help", "x" * 100_000]) == 2
    assert capsys.readouterr().err == (f"error: no command '{'x' * 80}…' (trace, bench, batch, "
                                       "eval)\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="DISPLAY and WAYLAND_DISPLAY are checked on Linux only")
def test_no_display_and_no_arguments_shows_the_commands(capsys, monkeypatch):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    assert entry([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(usage() + "\n")
    last = captured.err.splitlines()[-1]
    assert last.startswith("error: cannot start the application: no display")


def test_trace_refuses_to_write_over_what_georeferences_its_image(tmp_path, capsys):
    image = tmp_path / "g.png"
    image.write_bytes(SAMPLE_IMAGE.read_bytes())
    for sidecar in ("g.png.aux.xml", "g.pgw", "g.prj"):
        (tmp_path / sidecar).write_text("kept")
        code = cli_main(["trace", str(image), "--a", A, "--b", B, "--score", "centre",
                         "-o", str(tmp_path / sidecar), "--format", "geojson"])
        assert code == 2
        assert f"-o {tmp_path / sidecar} is the input" in capsys.readouterr().err
        assert (tmp_path / sidecar).read_text() == "kept"


def test_eval_json_to_dev_stdout_keeps_the_printed_report(tmp_path):
    out = tmp_path / "stdout.txt"
    with open(out, "w") as stdout:
        process = subprocess.run(
            [sys.executable, str(ROOT / "main.py"), "eval", str(SAMPLE_CASES), "--method",
             "straight", "--json", "/dev/stdout"], stdout=stdout, stderr=subprocess.PIPE,
            text=True, timeout=300, cwd=tmp_path)
    assert process.returncode == 0, process.stderr
    assert json.loads(out.read_text())["methods"]["straight"]["cases"]  # the report, whole
    assert "straight" in process.stderr  # the printed summary, on stderr as with -


@pytest.mark.parametrize("argv", [["help", "help"], ["help", "trace", "extra"]])
def test_help_takes_one_command_at_most(capsys, argv):
    assert cli_main(argv) == 2
    assert capsys.readouterr().err.startswith("error: help takes one command at most")


def test_a_long_unknown_command_is_echoed_shortened(capsys):
    assert cli_main(["x" * 100_000]) == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert f"'{'x' * 80}…' is neither a command" in error
    assert len(error) < 300
