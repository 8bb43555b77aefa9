"""The commands (mostly ``trace``): output contract, notes before the work and one-line errors with
exit code 2."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from cli import main as cli_main
from tests.conftest import ROOT, SAMPLE_IMAGE

A, B = "430,241", "486,172"


def run_cli(capsys, *argv):
    code = cli_main(["trace", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_output_contract(capsys):
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu")
    assert code == 0
    record = json.loads(out)
    assert record["pixels"][0] == [430.0, 241.0]
    assert record["pixels"][-1] == [486.0, 172.0]
    assert len(record["link_scores"]) == len(record["pixels"]) - 1
    assert sum(record["link_scores"]) == pytest.approx(record["score"])
    assert record["backend"] == "cpu"
    assert any("dp" in key for key in record["timings_ms"])
    assert record["timings_ms"]["total"] > 0
    assert record["params"]["max_angle"] == 60.0
    assert record["params"]["guides"] >= 1


def test_output_file_and_geojson(capsys, tmp_path):
    target = tmp_path / "line.geojson"
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu",
                           "--format", "geojson", "-o", target)
    assert code == 0
    assert out == ""
    document = json.loads(target.read_text())
    assert document["type"] == "FeatureCollection"
    assert document["features"][0]["geometry"]["type"] == "LineString"


def test_a_line_through_via_points_is_its_legs_joined(capsys):
    via = ("455,215", "470,190")
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--via", via[0], "--via", via[1],
                           "--b", B, "--backend", "cpu")
    assert code == 0
    record = json.loads(out)
    anchors = [[430.0, 241.0], [455.0, 215.0], [470.0, 190.0], [486.0, 172.0]]
    assert [record["a"], *record["via"], record["b"]] == anchors
    assert len(record["legs"]) == 3
    joined = [record["legs"][0]["pixels"][0]]
    for k, leg in enumerate(record["legs"]):
        assert [leg["a"], leg["b"]] == anchors[k:k + 2]
        # Each leg is the line traced between its two ends alone.
        code, alone, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", ",".join(map(str, leg["a"])),
                                 "--b", ",".join(map(str, leg["b"])), "--backend", "cpu")
        assert code == 0
        np.testing.assert_allclose(json.loads(alone)["pixels"], leg["pixels"], atol=1e-9)
        joined += leg["pixels"][1:]
    assert record["pixels"] == joined
    assert record["score"] == pytest.approx(sum(leg["score"] for leg in record["legs"]))
    assert record["timings_ms"]["total"] == pytest.approx(
        sum(leg["timings_ms"]["total"] for leg in record["legs"]), abs=0.01)

    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--via", via[0], "--b", B,
                           "--backend", "cpu", "--format", "geojson")
    assert code == 0
    properties = json.loads(out)["features"][0]["properties"]
    assert properties["anchors_px"] == [anchors[0], anchors[1], anchors[3]]
    assert len(properties["link_scores"]) == len(properties["segment_scores"]) == 2
    assert properties["score"] == pytest.approx(sum(properties["segment_scores"]), abs=1e-5)
    assert properties["params"]["max_angle"] == 60.0


@pytest.mark.parametrize(("args", "message"), [
    (["missing.png", "--a", A, "--b", B], "not found"),
    ([SAMPLE_IMAGE, "--a", A, "--via", "100,600", "--b", B], "via 1=(100, 600) lies outside"),
    ([SAMPLE_IMAGE, "--a", A, "--via", "455,215", "--via", "455,216", "--b", B],
     "via 1 → via 2: endpoints"),
    ([SAMPLE_IMAGE, "--a=-5,10", "--b", B], "outside"),
    ([SAMPLE_IMAGE, "--a", "100,600", "--b", B], "outside"),
    ([SAMPLE_IMAGE, "--a", A, "--b", A], "at least 2 px apart"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--points", "1"], "points per guide"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--guides", "0"], "guides"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--max-angle", "0"], "max angle"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--max-angle", "181"], "max angle"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--halfwidth", "-3"], "halfwidth"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--max-angle", "1", "--points", "2", "--guides", "3",
      "--halfwidth", "30"], "no polyline turns"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--points", "100000"], "lower points"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--halfwidth", "1e9"], "halfwidth 1e+09 px is more "
                                                               "than the image's diagonal"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--sigma", "1e4", "--score", "flat"], "lower sigma"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--halfwidth", "1e-9"], "halfwidth 1e-09 px is too "
                                                                 "narrow"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--memory-budget", "lots"], "--memory-budget must be"),
    ([SAMPLE_IMAGE, "--a", A, "--b", B, "--image-crs", "nonsense"], "unknown CRS 'nonsense'"),
])
def test_bad_input_gives_one_line_and_exit_code_2(capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: ")
    assert message in lines[-1]
    assert "Traceback" not in err


def test_unreadable_image(capsys, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    code, _, err = run_cli(capsys, bad, "--a", A, "--b", B)
    assert code == 2
    assert f"error: {bad} is not an image this program can read" in err


def test_an_image_name_that_is_not_utf_8(capsys, tmp_path):
    """Such a name is written as escapes (valid Unicode), or refused in one line where GDAL
    would read the image."""
    png = os.fsdecode(os.fsencode(tmp_path / "r") + b"\xf6ad.png")
    shutil.copy(SAMPLE_IMAGE, png)
    for output, field in (("json", lambda document: document["image"]),
                          ("geojson", lambda document: document["features"][0]["properties"][
                              "source_image"])):
        code, out, _ = run_cli(capsys, png, "--a", A, "--b", B, "--backend", "cpu",
                               "--format", output, "--quiet")  # notes: stderr escapes them
        assert code == 0
        out.encode("utf-8")  # no lone surrogate, which strict JSON parsers refuse
        assert field(json.loads(out)).endswith("r\\xf6ad.png")
    tif = png[:-4] + ".tif"
    iio.imwrite(tmp_path / "road.tif", np.zeros((8, 8, 3), np.uint8))
    os.rename(tmp_path / "road.tif", tif)
    code, out, err = run_cli(capsys, tif, "--a", "1,1", "--b", "6,6")
    assert (code, out) == (2, "")
    assert err == (f"error: cannot read {tmp_path}/r\\xf6ad.tif: its name is not UTF-8, which "
                   "GDAL needs to open it; rename the file\n")


def test_geojson_properties_are_the_same_with_or_without_via_points(capsys):
    """One schema for a GIS that merges outputs: the same properties, of the same types."""
    features = []
    for via in ((), ("--via", "455,215")):
        code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, *via, "--b", B, "--backend",
                               "cpu", "--format", "geojson")
        assert code == 0
        features.append(json.loads(out)["features"][0]["properties"])
    single, legs = features
    assert {key: type(value) for key, value in single.items()} == {
        key: type(value) for key, value in legs.items()}
    assert (len(single["link_scores"]), len(legs["link_scores"])) == (1, 2)  # per leg
    assert single["anchors_px"] == [[430.0, 241.0], [486.0, 172.0]]
    for properties in features:
        assert properties["kind"] == "road"
        assert properties["params"]["halfwidth"] is None  # as asked for: scales with the leg
        for leg in properties["segment_params"]:
            assert leg["halfwidth"] == round(leg["halfwidth"], 3)


def test_unwritable_output(capsys, tmp_path):
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu",
                           "-o", tmp_path / "no" / "such" / "dir.json")
    assert code == 2
    assert "cannot write" in err


def test_gpu_backend_unavailable_is_a_clear_error(capsys):
    from core.errors import BackendUnavailable
    from gpu.select import gpu_backend

    try:
        gpu_backend()
    except BackendUnavailable:
        code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "gpu")
        assert code == 2
        assert "GPU unavailable" in err
    else:
        pytest.skip("a GPU is available here")


def test_auto_backend_says_why_it_runs_on_the_cpu_only_where_a_gpu_is_expected(capsys):
    from gpu.context import gpu_extra_installed

    code, out, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B)
    assert code == 0
    record = json.loads(out)
    if record["backend"] == "cpu":
        assert ("note: using CPU" in err) == gpu_extra_installed()
        assert "GPU unavailable: " in record["backend_note"]


def test_unknown_ground_resolution_is_noted_where_the_trace_depends_on_it(capsys):
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu")
    assert code == 0
    assert "ground resolution unknown" in err
    assert "--ground-resolution M" in err
    for given in (("--ground-resolution", "0.2"), ("--line-kind", "river"),
                  ("--score", "centre"), ("--quiet",)):
        code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu",
                               *given)
        assert code == 0
        assert "ground resolution" not in err, given


def test_bad_point_syntax_is_a_usage_error():
    process = subprocess.run([sys.executable, "main.py", "trace", str(SAMPLE_IMAGE), "--a", "1;2",
                              "--b", B], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    assert "expected X,Y" in process.stderr
    assert "Traceback" not in process.stderr


def test_main_entry_runs_trace_in_a_fresh_process():
    process = subprocess.run([sys.executable, "main.py", "trace", str(SAMPLE_IMAGE), "--a", A,
                              "--b", B, "--backend", "cpu"], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout)["pixels"][0] == [430.0, 241.0]


def test_output_file_gets_the_usual_permissions(capsys, tmp_path):
    import os

    from core.output import UMASK

    target = tmp_path / "line.json"
    code, _, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu", "-o", target)
    assert code == 0
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~UMASK


def test_evidence_raster_option(capsys, tmp_path):
    import imageio.v3 as iio
    import numpy as np

    probability = np.zeros((572, 572), dtype=np.uint8)
    probability[200:212, :] = 255  # a horizontal "road" in the evidence map
    good, small = tmp_path / "road_probability.png", tmp_path / "small.png"
    iio.imwrite(good, probability)
    iio.imwrite(small, probability[:100, :100])
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", "100,206", "--b", "400,205",
                           "--score", "evidence", "--evidence", good, "--backend", "cpu")
    assert code == 0
    rows = [y for _, y in json.loads(out)["pixels"]]
    assert max(abs(y - 205.5) for y in rows) <= 6
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--evidence", small)
    assert code == 2
    assert "100×100" in err


def test_an_evidence_mask_of_0_and_1_in_8_bits_is_refused_not_traced_straight(capsys,
                                                                             tmp_path):
    """Read over its type's range, a 0/1 mask is at most 1/255: the line would be straight."""
    import imageio.v3 as iio
    import numpy as np

    mask = np.zeros((572, 572), dtype=np.uint8)
    mask[200:212, :] = 1
    path = tmp_path / "mask01.png"
    iio.imwrite(path, mask)
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", "100,206", "--b", "400,205",
                           "--score", "evidence", "--evidence", path, "--backend", "cpu")
    assert code == 2
    assert "holds values of at most 0.0039" in err
    assert "save it as 0/255 or as float 0/1" in err
    mask *= 255  # the same mask as 0/255 traces
    iio.imwrite(path, mask)
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", "100,206", "--b", "400,205",
                           "--score", "evidence", "--evidence", path, "--backend", "cpu")
    assert code == 0, err


def test_an_evidence_geotiff_of_several_differing_bands_is_refused(capsys, tmp_path):
    """A segmentation model's (background, road) bands: the first would be traced silently."""
    from tests.test_raster import write_bands

    road = np.zeros((572, 572), dtype=np.uint8)
    road[200:212, :] = 255
    classes, grey = tmp_path / "classes.tif", tmp_path / "grey_as_rgb.tif"
    write_bands(classes, np.stack([255 - road, road]))
    write_bands(grey, np.stack([road, road, road]))
    arguments = ("--a", "100,206", "--b", "400,205", "--score", "evidence", "--backend", "cpu")
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, *arguments, "--evidence", classes)
    assert code == 2
    assert "has 2 bands that differ" in err
    assert "gdal_translate -b 2 classes.tif road.tif" in err
    code, out, err = run_cli(capsys, SAMPLE_IMAGE, *arguments, "--evidence", grey)
    assert code == 0, err
    assert max(abs(y - 205.5) for _, y in json.loads(out)["pixels"]) <= 6


def test_score_evidence_on_the_image_itself_says_so(capsys):
    code, _, err = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--score", "evidence",
                           "--backend", "cpu")
    assert code == 0
    assert "note: score 'evidence' reads the image's own band 0 as a road probability: give " \
        "--evidence RASTER" in err


def test_multispectral_geotiff_traces_its_colour_bands(capsys, tmp_path):
    """Five bands, red, green and blue tagged as bands 4, 3, 2 (as a satellite stack): the
    trace is the PNG's, and stderr says which bands; --bands picks others or refuses."""
    from rasterio.enums import ColorInterp as Tag

    from tests.test_raster import write_bands

    rgb = np.moveaxis(iio.imread(SAMPLE_IMAGE)[:, :, :3], -1, 0)
    stack = np.stack([rgb.mean(axis=0).astype(np.uint8), rgb[2], rgb[1], rgb[0],
                      np.zeros_like(rgb[0])])
    image = tmp_path / "stack.tif"
    write_bands(image, stack, [Tag.gray, Tag.blue, Tag.green, Tag.red, Tag.undefined])
    arguments = ("--a", A, "--b", B, "--backend", "cpu", "--score", "centre")
    code, out, err = run_cli(capsys, image, *arguments)
    assert code == 0
    assert "tracing bands 4, 3, 2 of 5 (red, green, blue)" in err
    assert json.loads(out)["pixels"] == json.loads(run_cli(capsys, SAMPLE_IMAGE,
                                                            *arguments)[1])["pixels"]
    code, out, err = run_cli(capsys, image, *arguments, "--bands", "1")
    assert code == 0
    assert "tracing band 1 of 5" in err
    code, out, err = run_cli(capsys, image, *arguments, "--bands", "6,4,3")
    assert code == 2
    assert err.strip().splitlines()[-1] == ("error: bands 6,4,3: give 1 or 3 band numbers "
                                            "between 1 and 5 (the image has 5 bands)")
    with pytest.raises(SystemExit):
        run_cli(capsys, image, *arguments, "--bands", "4,3")
    assert "expected one band number or three" in capsys.readouterr().err


def test_output_paths_are_never_clobbered(capsys, tmp_path):
    import os
    import stat

    private = tmp_path / "private.json"
    private.write_text("")
    private.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to("private.json")
    code, _, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu",
                         "-o", link)
    assert code == 0
    assert link.is_symlink()
    assert json.loads(private.read_text())["pixels"][0] == [430.0, 241.0]
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu",
                           "-o", "/dev/null")
    assert (code, out) == (0, "")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    code, out, _ = run_cli(capsys, SAMPLE_IMAGE, "--a", A, "--b", B, "--backend", "cpu",
                           "-o", "-")
    assert code == 0
    assert json.loads(out)["pixels"][-1] == [486.0, 172.0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.json", "private.json"]


def test_a_closed_output_pipe_ends_quietly():
    process = subprocess.Popen([sys.executable, "main.py", "trace", str(SAMPLE_IMAGE), "--a", A,
                                "--b", B, "--backend", "cpu", "--score", "centre"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # as `trace ... | true`
    err = process.stderr.read().decode()
    assert process.wait(120) == 141  # as a command ended by SIGPIPE
    assert err == ""


def test_a_fifo_as_the_image_is_refused_at_once(capsys, tmp_path):
    import os

    fifo = tmp_path / "image.png"
    os.mkfifo(fifo)
    code, _, err = run_cli(capsys, fifo, "--a", A, "--b", B, "--backend", "cpu")
    assert code == 2
    assert err == f"error: expected an image file, got a special file: {fifo}\n"


def test_float_image_beyond_range_is_one_error(capsys, tmp_path):
    import numpy as np
    import rasterio
    from affine import Affine

    pixels = np.full((3, 64, 64), 1e36, np.float32)
    pixels[:, :, 30:34] = 0
    path = tmp_path / "huge.tif"
    with rasterio.open(path, "w", driver="GTiff", width=64, height=64, count=3,
                       dtype="float32", transform=Affine(1, 0, 0, 0, -1, 64)) as dataset:
        dataset.write(pixels)
    code, _, err = run_cli(capsys, path, "--a", "32,5", "--b", "32,60", "--backend", "cpu",
                           "--score", "centre")
    assert code == 2
    assert err == (f"error: {path}: pixel values reach 1e+36; float images must stay within "
                   "±1e+15 (rescale it)\n")


def test_world_file_with_huge_values_is_one_line(capsys, tmp_path):
    import shutil

    image = tmp_path / "w.png"
    shutil.copy(SAMPLE_IMAGE, image)
    (tmp_path / "w.pgw").write_text("1e300\n0\n0\n-1e300\n1e300\n1e300\n")
    code, _, err = run_cli(capsys, image, "--a", A, "--b", B, "--image-crs", "EPSG:32654",
                           "--backend", "cpu")
    assert code == 2
    assert err == (f"error: world file {tmp_path / 'w.pgw'}: not a usable transform (1e+300, 0, "
                   "0, -1e+300, 1e+300, 1e+300): it needs finite values below 1e+12 in "
                   "magnitude and a pixel size that is not zero\n")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0
                    or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run as a user without a writable HOME")
def test_tracing_without_a_writable_home_or_source_folder():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # one that other users can enter
        os.chmod(folder, 0o755)
        copy = Path(folder) / "project"
        shutil.copytree(ROOT / "core", copy / "core",
                        ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["chmod", "-R", "a+rX,a-w", str(copy)], check=True)
        process = run_as_nobody(copy)
        subprocess.run(["chmod", "-R", "u+w", str(copy)], check=True)
    assert (process.returncode, process.stdout, process.stderr) == (0, "ok\n", "")


def run_as_nobody(folder: Path) -> subprocess.CompletedProcess:
    """Compile a numba function of the project in ``folder`` as user nobody, HOME missing."""
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
         "from core.guides import build_corridor, admissible_windows\n"
         "admissible_windows(build_corridor((0, 0), (40, 0), 2, 5, 8.0), 0.5)\nprint('ok')"],
        cwd=folder, capture_output=True, text=True, timeout=300,
        env={"HOME": "/nonexistent", "PATH": os.environ.get("PATH", "")})


def run_shell(command: str) -> subprocess.CompletedProcess:
    """``command`` in bash from the project's root, ``$PY`` the interpreter."""
    return subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PY": sys.executable})


@pytest.mark.parametrize("command", [
    f"$PY main.py trace {SAMPLE_IMAGE} --a {A} --b {B} --backend cpu -q > /dev/full",
    f"$PY main.py trace {SAMPLE_IMAGE} --a {A} --b {B} --backend cpu -q --format geojson "
    "-o - > /dev/full",
    f"$PY main.py trace {SAMPLE_IMAGE} --a {A} --b {B} --backend cpu -q >&-",
    "$PY main.py eval resources/sample/gsi_108_cases.json --limit 1 --backend cpu -q "
    "> /dev/full",
    "$PY main.py bench --angles 30 --divisions 5 --points 8 --repeats 1 > /dev/full",
])
def test_standard_output_that_cannot_be_written_is_one_error(command):
    process = run_shell(command)
    assert process.returncode == 2, process.stderr
    assert process.stderr.strip().splitlines()[-1].startswith("error: cannot write the output")
    assert "Traceback" not in process.stderr


def test_closed_standard_error_keeps_notes_off_the_output():
    process = run_shell(f"$PY main.py trace {SAMPLE_IMAGE} --a {A} --b {B} --backend cpu 2>&-")
    assert process.returncode == 0
    assert json.loads(process.stdout)["pixels"][0] == [430.0, 241.0]
    process = run_shell(f"$PY main.py trace {SAMPLE_IMAGE} --a {A} --b {B} --guides 0 2>&-")
    assert process.returncode == 2
    assert process.stdout == ""


@pytest.mark.parametrize(("argv", "message"), [
    (["trace", str(SAMPLE_IMAGE), "--a", "5", "--b", B], "expected X,Y"),
    (["trace", str(SAMPLE_IMAGE), "--a", "-1,-1", "--b", B], "goes after '='"),
    (["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--bogus"], "unrecognized arguments"),
    (["trace", str(SAMPLE_IMAGE), "--a", A], "--b"),
    (["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--ground-resolution", "nan"],
     "metres per pixel"),
    (["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--sigma", "0"], "sigma must be at least"),
    (["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--sigma", "0.1"], "at least 0.5 px"),
    (["batch", "images", "--seeds", "seeds.json", "-o", "out", "--sigma", "0.3"],
     "sigma must be at least"),
    (["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--sigma", "x"], "sigma in px"),
    (["eval", "resources/sample/gsi_108_cases.json", "--stability", "nan"], "distance in px"),
    (["eval", "resources/sample/gsi_108_cases.json", "--stability", "-5"], "distance in px"),
    (["bench", "--angles", "abc"], "angles in degrees"),
    (["bench", "--points", "100000000"], "points per guide"),
    (["bench", "--divisions", "2"], "division points"),
    (["bench", "--repeats", "0"], "number of runs"),
])
def test_usage_mistakes_are_one_error_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    assert "--help" in lines[0]


def test_an_output_that_names_an_input_is_refused(capsys, tmp_path):
    image = tmp_path / "image.png"
    shutil.copy(SAMPLE_IMAGE, image)
    before = image.read_bytes()
    code, _, err = run_cli(capsys, image, "--a", A, "--b", B, "-o", image)
    assert code == 2
    assert "would destroy the input" in err
    assert image.read_bytes() == before
    with pytest.raises(SystemExit, match="2"):
        run_cli(capsys, image, "--a", A, "--b", B, "-o", "")
    assert "argument -o/--output: expected a file to write, got an empty path" in \
        capsys.readouterr().err
    cases = tmp_path / "cases.json"
    shutil.copy(ROOT / "resources" / "sample" / "gsi_108_cases.json", cases)
    shutil.copy(SAMPLE_IMAGE, tmp_path / "gsi_108.png")
    code = cli_main(["eval", str(cases), "--json", str(cases), "-q"])
    assert code == 2
    assert "would destroy the input" in capsys.readouterr().err


def test_stability_of_no_traceable_case_is_null_in_the_report(capsys, tmp_path):
    report = tmp_path / "report.json"
    code = cli_main(["eval", "resources/sample/gsi_108_cases.json", "--limit", "1", "-q",
                     "--backend", "cpu", "--stability", "1e6", "--json", str(report)])
    assert code == 0
    assert "no case could be traced" in capsys.readouterr().out
    stability = json.loads(report.read_text())["stability"]  # strict JSON: no NaN
    assert stability == {"shift_px": 1e6, "median_px": None, "cases": []}


def test_a_line_break_in_a_file_name_cannot_forge_a_message(capsys, tmp_path):
    code, out, err = run_cli(capsys, tmp_path / "x\nerror: forged.png", "--a", A, "--b", B)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: image file not found")
    assert "x\\nerror: forged.png" in lines[0]


def test_notes_come_before_the_trace(capsys, tmp_path, monkeypatch):
    import core.tracer

    image = tmp_path / "s.png"
    shutil.copy(SAMPLE_IMAGE, image)
    (tmp_path / "s.pgw").write_text("0.2\n0\n0\n-0.2\n500000.1\n3899999.9\n")  # no .prj
    before_tracing = []

    def trace_through(*args, **kwargs):
        before_tracing.append(capsys.readouterr().err)
        return original(*args, **kwargs)

    original = core.tracer.trace_through
    monkeypatch.setattr(core.tracer, "trace_through", trace_through)
    code, out, err = run_cli(capsys, image, "--a", A, "--b", B, "--backend", "cpu",
                             "--format", "geojson")
    assert code == 0
    assert json.loads(out)["coordinate_space"] == "pixel"
    assert err == ""  # every note was printed before tracing
    (notes,) = before_tracing
    assert (f"note: {image}: ground resolution unknown (world file s.pgw without a CRS: its "
            "units are unknown)") in notes
    assert f"note: {image}: GeoJSON coordinates are image pixels" in notes
    assert "names no CRS" in notes


def test_a_scheduler_without_dask_distributed_is_one_error_before_any_work(capsys, tmp_path,
                                                                          monkeypatch):
    for name in [name for name in sys.modules if name.startswith("distributed.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "distributed", None)  # as without the batch extra
    out = tmp_path / "out"
    code = cli_main(["batch", str(tmp_path), "--seeds", str(tmp_path / "seeds.geojson"),
                     "-o", str(out), "--scheduler", "tcp://127.0.0.1:8786"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: --scheduler needs Dask's distributed package, which cannot be "
                          "imported (")
    assert err.endswith('install the batch extra, pip install -e ".[batch]"\n')
    assert err.count("\n") == 1
    assert not out.exists()


def test_bench_help_shows_the_default_backend(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["bench", "--help"])
    assert exit_.value.code == 0
    assert "(default: cpu;" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("script", ["scripts/screenshot.py", "benchmarks/batch_workload.py"])
def test_scripts_take_help(script, tmp_path):
    process = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    assert process.stdout.startswith("usage: ")
    assert list(tmp_path.iterdir()) == []  # nothing written
