"""Hostile inputs and failing outputs on the command line: one clear error, exit code 2, no
traceback, and no file half-written, clobbered or overwritten (an input, the surface model)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import imageio.v3 as iio
import numpy as np
import pytest
from PIL import Image

from cli import main as cli_main
from core import surface
from core.batch import LOCK_FILE, SUMMARY_JSON
from core.errors import BadParameter
from core.evaluate import check_truth
from core.gradient import MAX_SIGMA
from core.output import TEMPORARY_PREFIX, write_text_atomic
from core.raster import image_size
from core.resources import BUDGET_OPTION_VARIABLE, BUDGET_VARIABLE
from core.surface import model_memory
from core.tracer import TraceParams
from tests.conftest import ROOT, SAMPLE_CASES, SAMPLE_IMAGE

A, B = "430,241", "486,172"
OLD = '{"old": "output"}\n'


def run(capsys, *argv) -> tuple[int, str]:
    """Exit code and stderr of a command run in this process (argparse's usage errors too)."""
    try:
        code = cli_main([*map(str, argv)])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def only_error(err: str) -> str:
    """The one ``error:`` line of ``err`` (its last), checked to be the only one and no
    traceback."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert err.rstrip().endswith(errors[0]), err
    return errors[0]


@pytest.fixture
def shm_folder():
    """A fresh folder under /dev/shm (skipped where there is none to write)."""
    if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
        pytest.skip("no writable /dev/shm")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="roadtracer-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def model_in_use(tmp_path, monkeypatch):
    """A copy of the bundled surface model that the ``surface`` kind runs (as though
    bundled or named by ``$ROADTRACER_SURFACE_MODEL``), restored afterwards."""
    model = tmp_path / "model.onnx"
    shutil.copy(surface.BUNDLED_MODEL, model)
    monkeypatch.setattr(surface, "MODEL_PATH", model)
    monkeypatch.setenv(surface.MODEL_VARIABLE, "")  # use_model sets it: undone after
    return model


# --- 1. A regular file under /dev/ is replaced atomically, never written in place ----------
def fail_fsync(monkeypatch):
    """Make the disk full when a written file is flushed to it (ENOSPC)."""
    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)


@pytest.mark.parametrize("command", [
    ["trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--score", "centre", "--backend", "cpu", "-o"],
    ["eval", SAMPLE_CASES, "--method", "straight", "-q", "--json"],
])
def test_a_full_disk_under_dev_shm_keeps_the_old_output(capsys, shm_folder, monkeypatch,
                                                         command):
    output = shm_folder / "out.json"
    output.write_text(OLD)
    fail_fsync(monkeypatch)
    code, err = run(capsys, *command, output)
    assert code == 2
    assert only_error(err) == f"error: cannot write {output}: No space left on device"
    assert output.read_text() == OLD
    assert [path.name for path in shm_folder.iterdir()] == ["out.json"]


def test_a_regular_file_under_dev_shm_is_replaced_not_rewritten(shm_folder):
    output = shm_folder / "out.json"
    output.write_text(OLD)
    before = output.stat().st_ino
    write_text_atomic(output, "new\n")
    assert output.read_text() == "new\n"
    assert output.stat().st_ino != before  # a new file renamed over the old one


def test_a_write_cut_short_under_dev_shm_leaves_the_old_file(shm_folder):
    """A real failing write (the process may write no file past 100 bytes: EFBIG), not a
    simulated one."""
    output = shm_folder / "out.json"
    output.write_text(OLD)

    def limit_file_size():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

    script = ("import sys\nfrom core.output import write_text_atomic\n"
              "write_text_atomic(sys.argv[1], 'x' * 10000)\n")
    process = subprocess.run([sys.executable, "-c", script, str(output)], cwd=ROOT,
                             capture_output=True, text=True, preexec_fn=limit_file_size,
                             env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, check=False)
    assert process.returncode != 0
    assert f"OutputWriteError: cannot write {output}: File too large" in process.stderr
    assert output.read_text() == OLD
    assert [path.name for path in shm_folder.iterdir()] == ["out.json"]


def test_devices_and_descriptors_are_still_written_in_place(capsys, tmp_path):
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--score", "centre",
                    "--backend", "cpu", "-o", "/dev/null", "--format", "json")
    assert (code, err) == (0, "")
    redirected = tmp_path / "stdout.txt"
    script = ("from core.output import write_text_atomic\nprint('before', flush=True)\n"
              "write_text_atomic('/dev/stdout', 'one\\n')\n"
              "write_text_atomic('/proc/self/fd/1', 'two\\n')\n")
    with open(redirected, "w") as stream:
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, stdout=stream, check=True)
    assert redirected.read_text() == "before\none\ntwo\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["stdout.txt"]


# --- 2. The surface model in use is an input: no output may replace it ---------------------
def test_trace_never_writes_over_the_surface_model_in_use(capsys, model_in_use):
    before = model_in_use.read_bytes()
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--format", "json",
                    "-o", model_in_use)
    assert code == 2
    assert only_error(err) == (f"error: -o {model_in_use} is the input {model_in_use}: "
                               "writing it would destroy the input; choose another file")
    assert model_in_use.read_bytes() == before


def test_trace_never_writes_over_the_model_of_the_environment(capsys, tmp_path, monkeypatch):
    model = tmp_path / "mine.onnx"
    shutil.copy(surface.BUNDLED_MODEL, model)
    link = tmp_path / "out.json"
    link.symlink_to(model)
    monkeypatch.setattr(surface, "MODEL_PATH", model)  # as read from the environment
    monkeypatch.setenv(surface.MODEL_VARIABLE, str(model))
    before = model.read_bytes()
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--score", "centre",
                    "-o", link)
    assert code == 2
    assert "writing it would destroy the input" in only_error(err)
    assert model.read_bytes() == before


def test_eval_never_writes_over_the_surface_model(capsys, model_in_use):
    before = model_in_use.read_bytes()
    code, err = run(capsys, "eval", SAMPLE_CASES, "--method", "straight", "-q", "--json",
                    model_in_use)
    assert code == 2
    assert only_error(err) == (f"error: --json {model_in_use} is the input {model_in_use}: "
                               "writing it would destroy the input; choose another file")
    assert model_in_use.read_bytes() == before


def pixel_seeds(path: Path) -> Path:
    """One seed line in the sample image's pixels."""
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [{
        "type": "Feature", "properties": {"image": "gsi_108.png"},
        "geometry": {"type": "LineString", "coordinates": [[430, 241], [486, 172]]}}]}))
    return path


@pytest.mark.parametrize("entry", ["gsi_108.geojson", SUMMARY_JSON, LOCK_FILE])
def test_batch_never_writes_over_the_surface_model_through_a_link(capsys, tmp_path,
                                                                  model_in_use, entry):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(SAMPLE_IMAGE, images / "gsi_108.png")
    out = tmp_path / "out"
    out.mkdir()
    (out / entry).symlink_to(model_in_use)
    before = model_in_use.read_bytes()
    code, err = run(capsys, "batch", images, "--seeds", pixel_seeds(tmp_path / "seeds.json"),
                    "-o", out, "--backend", "cpu", "--workers", "1", "-q")
    assert code == 2
    assert only_error(err) == (f"error: output {out / entry} is the input {model_in_use}: "
                               "writing it would destroy the input; choose another file")
    assert model_in_use.read_bytes() == before
    assert {path.name for path in out.iterdir()} <= {entry, LOCK_FILE}


# --- 3. Sigma has an upper bound; beyond it, no overflow ------------------------------------
@pytest.mark.parametrize("sigma", ["1e155", "1e300"])
@pytest.mark.parametrize("command", [
    ["trace", SAMPLE_IMAGE, "--a", A, "--b", B],
    ["batch", "images", "--seeds", "seeds.json", "-o", "out"],
    ["eval", SAMPLE_CASES, "-q"],
])
def test_a_huge_sigma_is_a_usage_error(capsys, tmp_path, monkeypatch, command, sigma):
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, *command, "--sigma", sigma)
    assert code == 2
    assert (f"argument --sigma: sigma must be at most {MAX_SIGMA:.3g} px (coarser, its "
            "Gaussian reaches, at 4σ, beyond the 2147483647 px side of the largest image), "
            f"got {float(sigma):g}") in only_error(err)
    assert list(tmp_path.iterdir()) == []


def test_sigma_up_to_its_bound_is_refused_by_the_plan_not_an_overflow(capsys):
    with pytest.raises(BadParameter, match="sigma must be at most"):
        TraceParams(sigma=1e300).check()
    assert model_memory(float("inf")) == float("inf")
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--sigma",
                    "5.3e8", "--score", "flat")
    assert code == 2
    assert only_error(err).endswith(": lower sigma")


def test_batch_with_a_huge_halfwidth_is_a_usage_error(capsys, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(SAMPLE_IMAGE, images / "gsi_108.png")
    code, err = run(capsys, "batch", images, "--seeds", pixel_seeds(tmp_path / "seeds.json"),
                    "-o", tmp_path / "out", "--halfwidth", "1e200", "--workers", "1")
    assert code == 2
    assert "over the memory budget" in only_error(err)
    assert not (tmp_path / "out").exists()


# --- 4. eval: a true line outside its image -------------------------------------------------
def cases_file(folder: Path, gt) -> Path:
    shutil.copy(SAMPLE_IMAGE, folder / "img.png")
    path = folder / "cases.json"
    path.write_text(json.dumps([{"id": "c", "image": "img.png", "a": [50, 250],
                                 "b": [250, 60], "gt": gt}]))
    return path


@pytest.mark.parametrize(("far", "shown"), [
    ([1e7, 60], "(1e+07, 60)"), ([1e12, 60], "(1e+12, 60)"), ([-1e308, 60], "(-1e+308, 60)"),
    ([572.6, 60], "(572.6, 60)"), ([50, -1.6], "(50, -1.6)"),
])
def test_eval_refuses_a_true_line_outside_its_image(capsys, tmp_path, far, shown):
    report = tmp_path / "report.json"
    report.write_text(OLD)
    cases = cases_file(tmp_path, [[50, 250], far])
    code, err = run(capsys, "eval", cases, "--method", "straight", "-q", "--json", report)
    assert code == 2
    assert only_error(err) == (f"error: case 'c': point gt[1]={shown} lies outside the "
                               "572×572 image (more than 1 px beyond its edge)")
    assert report.read_text() == OLD


def test_eval_takes_a_true_line_to_the_image_edge(capsys, tmp_path):
    """A true line to within a pixel beyond the image's edge is measured as given: the
    straight line a → b meets its first leg only at a, where the two part at 23.5°, so
    only the first 3 / sin 23.5° = 7.5 px of its 1133 px lie within 3 px (12.5 px within 5),
    and its point (572.4, 60), not moved onto the image, lies 322.4 px from b."""
    gt = np.array([[50, 250], [572.4, 60], [-1.4, -1.4]])
    cases = cases_file(tmp_path, gt.tolist())
    report = tmp_path / "report.json"
    code, _ = run(capsys, "eval", cases, "--method", "straight", "-q", "--json", report)
    assert code == 0
    (case,) = json.loads(report.read_text())["methods"]["straight"]["cases"]
    assert case["error"] is None
    legs = np.diff(gt, axis=0)
    line, first = np.subtract([250, 60], [50, 250]), legs[0]
    sine = abs(line[0] * first[1] - line[1] * first[0]) / (np.hypot(*line) * np.hypot(*first))
    length = np.hypot(*legs.T).sum()
    assert case["completeness_3"] == pytest.approx(3 / sine / length, abs=1e-3)  # 0.0066
    assert case["completeness_5"] == pytest.approx(5 / sine / length, abs=1e-3)  # 0.011
    assert case["hausdorff"] == pytest.approx(572.4 - 250, abs=1e-9)


@pytest.mark.parametrize("cases", [
    ROOT / "resources" / "eval" / "roads" / "cases.json",
    ROOT / "resources" / "eval" / "rivers" / "cases.json",
    SAMPLE_CASES,
])
def test_the_bundled_true_lines_lie_in_their_images(cases):
    if not cases.is_file():
        pytest.skip(f"{cases} is not here")
    sizes = {}
    for case in json.loads(cases.read_text()):
        image = cases.parent / case["image"]
        if image not in sizes:
            sizes[image] = image_size(image)
        width, height = sizes[image]
        check_truth(SimpleNamespace(width=width, height=height), np.array(case["gt"], float))


# --- 5. A JPEG whose compressed data libjpeg finds corrupt ----------------------------------
def sample_jpeg(path: Path, **options) -> Path:
    Image.fromarray(iio.imread(SAMPLE_IMAGE)[:300, :300, :3]).save(path, **options)
    return path


def test_a_jpeg_with_corrupt_data_is_damaged(capsys, tmp_path):
    pytest.importorskip("rasterio")  # libjpeg's word on the data comes through GDAL
    data = bytearray(sample_jpeg(tmp_path / "good.jpg").read_bytes())
    scan = data.index(b"\xff\xda")
    middle = (scan + len(data)) // 2
    data[middle:middle + 100] = bytes(100)  # zeros amid the scan: not truncated
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(data)
    output = tmp_path / "out.json"
    output.write_text(OLD)
    code, err = run(capsys, "trace", corrupt, "--a", "50,50", "--b", "100,100", "-o", output)
    assert code == 2
    assert only_error(err) == (f"error: {corrupt} is damaged or incomplete: save or download "
                               "it again (Corrupt JPEG data: premature end of data segment)")
    assert output.read_text() == OLD


@pytest.mark.parametrize(("name", "options", "mode"), [
    ("baseline.jpg", {}, "RGB"),
    ("progressive.jpg", {"progressive": True}, "RGB"),
    ("restarts.jpg", {"restart_marker_blocks": 4}, "RGB"),
    ("grey.jpg", {"progressive": True}, "L"),
    ("cmyk.jpg", {}, "CMYK"),
    ("jpeg-named.png", {"format": "JPEG"}, "RGB"),
])
def test_valid_jpegs_are_traced(capsys, tmp_path, name, options, mode):
    path = tmp_path / name
    Image.fromarray(iio.imread(SAMPLE_IMAGE)[:300, :300, :3]).convert(mode).save(path, **options)
    code, err = run(capsys, "trace", path, "--a", "50,50", "--b", "100,100", "--score",
                    "centre", "--backend", "cpu", "-q", "-o", tmp_path / "out.json")
    assert (code, err) == (0, "")


def test_a_jpeg_with_extraneous_bytes_before_a_marker_is_traced(capsys, tmp_path):
    """libjpeg warns of bytes between two markers (as many cameras' files have them), but the
    image decodes whole: it is traced, not refused as damaged."""
    rasterio = pytest.importorskip("rasterio")
    data = sample_jpeg(tmp_path / "good.jpg").read_bytes()
    scan = data.index(b"\xff\xda")
    path = tmp_path / "extraneous.jpg"
    path.write_bytes(data[:scan] + b"\x12\x34" + data[scan:])
    with rasterio.Env(GDAL_ERROR_ON_LIBJPEG_WARNING="YES"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no georeferencing
        with rasterio.open(path) as dataset, \
                pytest.raises(rasterio.errors.RasterioError) as warned:
            dataset.read()
    assert "2 extraneous bytes before marker" in str(warned.value.__cause__)
    code, err = run(capsys, "trace", path, "--a", "50,50", "--b", "100,100", "--score",
                    "centre", "--backend", "cpu", "-q", "-o", tmp_path / "out.json")
    assert (code, err) == (0, "")


# --- 6. An .aux.xml whose geotransform GDAL would ignore ------------------------------------
@pytest.mark.parametrize("terms", ["500000, 0.5, 0, 4000000, 0", "1,2",
                                   "500000 0.5 0 4000000 0 -0.5",
                                   "500000, 0.5, 0, 4000000, 0, -0.5, 7", ""])
def test_an_aux_xml_geotransform_of_other_than_six_numbers_is_refused(capsys, tmp_path, terms):
    image = tmp_path / "a.png"
    shutil.copy(SAMPLE_IMAGE, image)
    aux = tmp_path / "a.png.aux.xml"
    aux.write_text(f"<PAMDataset><SRS>EPSG:32654</SRS><GeoTransform>{terms}</GeoTransform>"
                   "</PAMDataset>")
    output = tmp_path / "out.geojson"
    output.write_text(OLD)
    code, err = run(capsys, "trace", image, "--a", A, "--b", B, "-o", output)
    assert code == 2
    assert only_error(err) == (f"error: {aux} is not a usable GDAL .aux.xml (its <GeoTransform> "
                               f"{terms!r} is not six numbers separated by commas, and GDAL "
                               "would ignore it): fix or remove it")
    assert output.read_text() == OLD


def test_an_aux_xml_with_a_degenerate_geotransform_is_refused(capsys, tmp_path):
    image = tmp_path / "a.png"
    shutil.copy(SAMPLE_IMAGE, image)
    (tmp_path / "a.png.aux.xml").write_text(
        "<PAMDataset><SRS>EPSG:32654</SRS><GeoTransform>500000, 0.5, 0.5, 4000000, 0.5, 0.5"
        "</GeoTransform></PAMDataset>")
    code, err = run(capsys, "trace", image, "--a", A, "--b", B, "--format", "geojson")
    assert code == 2
    assert "its geotransform (0.5, 0.5, 500000, 0.5, 0.5, 4e+06) is not usable" in \
        only_error(err)


# --- 7. Messages that name the real cause ---------------------------------------------------
def test_a_memory_budget_option_is_named_as_the_option(capsys, monkeypatch):
    for variable in (BUDGET_VARIABLE, BUDGET_OPTION_VARIABLE):
        monkeypatch.setenv(variable, "")  # the option sets them: undone after
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--memory-budget",
                    "1K")
    assert code == 2
    assert "over the 1.0 KiB it may use (--memory-budget=1K):" in only_error(err)
    monkeypatch.setenv(BUDGET_VARIABLE, "2K")  # set otherwise since: named as the variable
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B)
    assert code == 2
    assert f"over the 2.0 KiB it may use ({BUDGET_VARIABLE}=2K):" in only_error(err)


def test_an_output_on_a_read_only_file_system_says_so(capsys, tmp_path, monkeypatch):
    """As a read-only mount answers (simulated: root may open any file otherwise)."""
    output = tmp_path / "out.json"
    output.write_text(OLD)
    real_access, real_open = os.access, os.open
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(output)
                        else real_access(path, mode))

    def read_only(path, flags, *args, **kwargs):
        if str(path) == str(output) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    code, err = run(capsys, "trace", SAMPLE_IMAGE, "--a", A, "--b", B, "--score", "centre",
                    "--backend", "cpu", "-o", output)
    assert code == 2
    assert only_error(err) == f"error: cannot write {output}: Read-only file system"
    assert output.read_text() == OLD
    assert [path.name for path in tmp_path.iterdir()] == ["out.json"]
    assert not list(tmp_path.glob(f"{TEMPORARY_PREFIX}*"))


# --- 8. eval refuses parameters every case would refuse, before tracing ---------------------
@pytest.mark.parametrize(("option", "value", "culprit"), [
    ("--points", "100000000", "lower points"),
    ("--sigma", "1e6", "lower sigma"),
])
def test_eval_refuses_parameters_no_case_can_trace_with(capsys, tmp_path, option, value,
                                                        culprit):
    report = tmp_path / "report.json"
    report.write_text(OLD)
    code, err = run(capsys, "eval", SAMPLE_CASES, option, value, "--score", "flat",
                    "--json", report)
    assert code == 2
    line = only_error(err)
    assert "over the memory budget" in line
    assert line.endswith(f": {culprit}")
    assert "failed" not in err
    assert report.read_text() == OLD


def test_eval_of_peers_only_takes_our_parameters_unchecked(capsys):
    code, _ = run(capsys, "eval", SAMPLE_CASES, "--method", "straight", "--points",
                  "100000000", "-q")
    assert code == 0


def test_a_damaged_geotiff_s_reason_names_the_file_once(tmp_path):
    """GDAL starts its reason with the file's name, which the message already gives."""
    rasterio = pytest.importorskip("rasterio")
    from rasterio.transform import from_origin

    from core.errors import ImageReadError
    from core.raster import load_image
    from core.tracer import trace

    path = tmp_path / "u_1_1.tif"
    pixels = np.random.default_rng(0).integers(0, 255, (3, 200, 200), dtype=np.uint8)
    with rasterio.open(path, "w", driver="GTiff", width=200, height=200, count=3,
                       dtype="uint8", crs="EPSG:32654",
                       transform=from_origin(0, 0, 1, 1)) as dataset:
        dataset.write(pixels)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 3])  # the header whole, most strips gone
    raster = load_image(path)
    with pytest.raises(ImageReadError) as error:
        trace(raster, (20, 20), (180, 180), TraceParams(score="centre"))
    assert str(error.value).startswith(f"cannot read pixels of {path}: band 1: ")
