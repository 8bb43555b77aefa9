"""Batch integrity: one run per output folder, outputs that carry what made them, resumes and
interruptions that never leave results disagreeing with their parameters, hostile inputs."""

from __future__ import annotations

import csv
import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

import core.batch
from core.batch import LOCK_FILE, RECORD_MEMBER, lock_output_folder, summary_csv
from core.resources import BUDGET_VARIABLE
from tests.conftest import ROOT, SAMPLE_IMAGE
from tests.helpers import batch

IMAGES = ("a.png", "b.png", "c.png")


def road_png(path, row: int = 40) -> None:
    """A 96 × 96 grey image with a bright horizontal road along ``row``."""
    pixels = np.full((96, 96), 60, np.uint8)
    pixels[row - 3:row + 4] = 200
    iio.imwrite(path, pixels)


def make_folder(root, names=IMAGES) -> tuple:
    """IMAGES_DIR of tiny road images and a seeds file with one pixel seed on each."""
    images = root / "images"
    images.mkdir()
    features = []
    for name in names:
        road_png(images / name)
        features.append({"type": "Feature", "properties": {"image": name},
                         "geometry": {"type": "LineString",
                                      "coordinates": [[5, 40], [50, 42], [90, 40]]}})
    seeds = root / "seeds.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return images, seeds


def output_angles(out) -> dict[str, float]:
    """max_angle each output's lines were traced with, per output file."""
    found = {}
    for path in sorted(out.glob("*.geojson")):
        document = json.loads(path.read_text())
        angles = {feature["properties"]["params"]["max_angle"]
                  for feature in document["features"]}
        assert len(angles) == 1
        found[path.name] = angles.pop()
    return found


def test_a_held_output_folder_refuses_a_second_run(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    with lock_output_folder(out):  # as another run would hold it
        code, err = batch(capsys, images, seeds, out)
        assert sorted(path.name for path in out.iterdir()) == [LOCK_FILE]  # nothing written
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"error: output folder {out} is in use by another batch run "
                          f"(process {os.getpid()} on ")
    assert not out.exists()  # made for the lock, removed with it


def test_a_refused_run_leaves_none_of_the_folders_it_made(tmp_path, capsys):
    images, _ = make_folder(tmp_path, names=("a.png",))
    seeds = tmp_path / "seeds.json"
    seeds.write_text("[]")  # JSON, but not GeoJSON
    (tmp_path / "kept").mkdir()
    for out in (tmp_path / "out" / "p1" / "p2" / "p3", tmp_path / "kept" / "p1" / "p2"):
        code, err = batch(capsys, images, seeds, out)
        assert code == 2
        assert err.startswith(f"error: {seeds} is not a GeoJSON")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["images", "kept",
                                                               "seeds.geojson", "seeds.json"]
    assert list((tmp_path / "kept").iterdir()) == []


def test_a_stale_lock_file_is_taken_over(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text("process 999999 on elsewhere\n")  # its holder is gone
    (out / ".roadtracer-x1y2.part").write_text("half a file")  # left by a killed write
    code, err = batch(capsys, images, seeds, out)
    assert code == 0, err
    assert sorted(path.name for path in out.iterdir()) == [
        LOCK_FILE, "a.geojson", "b.geojson", "c.geojson", "summary.csv", "summary.json"]


def test_resume_without_a_summary_traces_outputs_of_other_parameters_again(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out, "--max-angle", "30")[0] == 0
    (out / "summary.json").unlink()  # as after kill -9: no summary of the first run
    code, err = batch(capsys, images, seeds, out, "--max-angle", "60")
    assert code == 0
    assert "tracing 3 image(s) again" in err
    assert output_angles(out) == {"a.geojson": 60.0, "b.geojson": 60.0, "c.geojson": 60.0}
    (out / "summary.json").unlink()
    code, err = batch(capsys, images, seeds, out, "--max-angle", "60")
    assert "skipping 3 image(s)" in err
    summary = json.loads((out / "summary.json").read_text())
    assert [record["lines"] for record in summary["images"]] == [1, 1, 1]  # from the records
    assert [record["matched_seeds"] for record in summary["images"]] == [["#0"], ["#1"], ["#2"]]


def test_an_interrupted_run_leaves_no_output_disagreeing_with_its_record(tmp_path, capsys,
                                                                         monkeypatch):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out, "--max-angle", "30")[0] == 0
    import core.batch

    made = []
    real = core.batch.process_image

    def interrupted_at_the_second_image(task, *args, **kwargs):
        made.append(task)
        if len(made) == 2:
            raise KeyboardInterrupt
        return real(task, *args, **kwargs)

    monkeypatch.setattr("core.batch.process_image", interrupted_at_the_second_image)
    code, err = batch(capsys, images, seeds, out, "--max-angle", "60")
    assert code == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["params"]["max_angle"] == 60.0
    assert [record["image"] for record in summary["images"]] == ["a.png"]
    assert summary["not_done"] == ["b.png", "c.png"]
    assert output_angles(out) == {"a.geojson": 60.0, "b.geojson": 30.0, "c.geojson": 30.0}
    monkeypatch.setattr("core.batch.process_image", real)
    code, err = batch(capsys, images, seeds, out, "--max-angle", "30")
    assert "tracing 1 image(s) again" in err
    assert "(a.png)" in err
    code, err = batch(capsys, images, seeds, out, "--max-angle", "60")
    assert "tracing 3 image(s) again" in err
    assert set(output_angles(out).values()) == {60.0}


@pytest.mark.parametrize("content", [
    '{"type": "FeatureCollection", "features": []}',  # not made by a batch: no record
    '{"type": "FeatureCollection", "features": [], "roadtracer_batch": {"inputs": 5}}',
    "[" * 100000 + "]" * 100000,  # nested beyond any parser's depth
    "",  # truncated
])
def test_an_output_without_a_valid_record_is_traced_again(tmp_path, capsys, content):
    images, seeds = make_folder(tmp_path, names=("a.png",))
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.geojson").write_text(content)
    (out / "summary.json").write_text("[" * 100000 + "]" * 100000)  # never read
    code, err = batch(capsys, images, seeds, out)
    assert code == 0, err
    assert "tracing 1 image(s) again" in err
    document = json.loads((out / "a.geojson").read_text())
    assert document[RECORD_MEMBER]["lines"] == 1
    assert document[RECORD_MEMBER]["status"] == "ok"


@pytest.mark.parametrize("tamper", [
    lambda record, document: record.update(lines="HUGE"),  # 4301 digits: breaks json.dumps
    lambda record, document: record.update(lines=1000),  # not what the file holds
    lambda record, document: record.update(status="partial", failures=[
        {"reason": "x", "seed": None, "segment": -5}]),
    lambda record, document: record.update(status="partial", failures=[
        {"reason": "x", "seed": None, "segment": 0}] * 1_000_001),
])
def test_an_output_whose_record_is_not_what_it_holds_is_traced_again(tmp_path, capsys, tamper):
    images, seeds = make_folder(tmp_path, names=("a.png",))
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out)[0] == 0
    document = json.loads((out / "a.geojson").read_text())
    tamper(document[RECORD_MEMBER], document)
    text = json.dumps(document).replace('"HUGE"', "1" + "0" * 4300)
    (out / "a.geojson").write_text(text)
    code, err = batch(capsys, images, seeds, out)
    assert code == 0, err
    assert "tracing 1 image(s) again" in err
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["totals"]["lines"], summary["totals"]["failures"]) == (1, 0)


def test_a_file_name_that_is_not_utf8(tmp_path, capsys):
    images, seeds = make_folder(tmp_path, names=("a.png",))
    odd = os.fsdecode(b"caf\xe9.png")
    road_png(images / odd)
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out)
    assert code == 0, err
    assert "a.png, caf\\xe9.png" in err  # in the note on pixel coordinates
    summary = json.loads((out / "summary.json").read_text())
    assert [record["image"] for record in summary["images"]] == ["a.png", "caf\\xe9.png"]
    assert "caf\\xe9.png,ok,pixel,0,0,0" in (out / "summary.csv").read_text()
    assert not list(out.glob("*.part"))
    code, err = batch(capsys, images, seeds, out)
    assert code == 0
    assert "skipping 2 image(s)" in err


def test_seeds_naming_their_image_are_listed_as_matched(tmp_path, capsys):
    images, seeds = make_folder(tmp_path, names=("a.png", "b.png"))
    assert batch(capsys, images, seeds, tmp_path / "out")[0] == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {record["image"]: record["matched_seeds"] for record in summary["images"]} == {
        "a.png": ["#0"], "b.png": ["#1"]}


@pytest.mark.parametrize(("options", "named"), [
    (("--points", "100000"), "lower points"),
    (("--guides", "1000000"), "lower guides"),
    (("--halfwidth", "1e9"), "lower halfwidth"),
    (("--sigma", "1e4", "--score", "flat"), "lower sigma"),  # σ sizes a gradient kind's window
    (("--halfwidth", "1e-9"), "halfwidth 1e-09 px is too narrow"),
])
def test_plans_over_the_memory_budget_are_usage_errors(tmp_path, capsys, options, named):
    images, seeds = make_folder(tmp_path, names=("a.png",))
    code, err = batch(capsys, images, seeds, tmp_path / "out", *options)
    assert code == 2
    assert err.count("\n") == 1
    assert named in err
    assert not (tmp_path / "out").exists()


def test_a_segment_over_the_budget_is_recorded(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(BUDGET_VARIABLE, "1G")  # --memory-budget replaces it: undone after
    images, _ = make_folder(tmp_path, names=("a.png",))
    seeds = tmp_path / "diagonal.geojson"
    seeds.write_text(json.dumps({"type": "Feature", "properties": {"image": "a.png"},
                                 "geometry": {"type": "LineString",
                                              "coordinates": [[2, 2], [93, 93]]}}))
    # The planner's 100 px segment fits in 2.6 MiB (2.5 MiB); this 129 px one needs 2.9 MiB.
    code, err = batch(capsys, images, seeds, tmp_path / "out", "--memory-budget", "2.6M",
                      "--halfwidth", "40", "--points", "41")
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    failures = summary["images"][0]["failures"]
    assert len(failures) == 1
    assert "over the memory budget of 2.6 MiB" in failures[0]["reason"]
    assert failures[0]["reason"].endswith("lower halfwidth")


def test_running_out_of_memory_is_recorded_per_image(tmp_path, capsys, monkeypatch):
    images, seeds = make_folder(tmp_path, names=("a.png",))

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("core.batch.trace_many", exhausted)
    code, _ = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["images"][0]["status"] == "failed"
    assert summary["images"][0]["failures"] == [
        {"reason": "out of memory while tracing this image", "seed": None, "segment": None}]


def test_hostile_seeds(tmp_path, capsys):
    images, _ = make_folder(tmp_path, names=("a.png",))
    seeds = tmp_path / "nested.geojson"
    seeds.write_text("[" * 100000 + "]" * 100000)
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 2
    assert err.count("\n") == 1
    assert "nests arrays or objects deeper than 64 levels" in err
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"image": "a.png"},
         "geometry": {"type": "LineString", "coordinates": [[5, 40], [90, 40]]}},
        {"type": "Feature", "properties": {},
         "geometry": {"type": "LineString", "coordinates": [[10**400, 40], [90, 40]]}}]}))
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 1  # one bad seed; the other traced
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["totals"]["segments"] == 1
    assert "are not [x, y] number pairs" in summary["seed_failures"][0]["reason"]


def test_seeds_of_text_coordinates_or_an_unknown_kind_are_bad_seeds(tmp_path, capsys):
    images, _ = make_folder(tmp_path, names=("a.png",))
    seeds = tmp_path / "odd.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "id": id_, "properties": {"image": "a.png", **properties},
         "geometry": {"type": "LineString", "coordinates": coordinates}}
        for id_, properties, coordinates in (
            ("good", {}, [[5, 40], [90, 40]]), ("text", {}, ["55", "92"]),
            ("texts", {}, [["55", "92"], ["60", "90"]]),
            ("lake", {"kind": "lake"}, [[5, 40], [90, 40]]))]}))
    code, err = batch(capsys, images, seeds, tmp_path / "out", "--quiet")
    assert code == 1
    assert err.splitlines() == [
        "bad seed text: coordinates ['55', '92'] are not [x, y] number pairs",
        "bad seed texts: coordinates [['55', '92'], ['60', '90']] are not [x, y] number "
        "pairs",
        "bad seed lake: properties.kind='lake' is not a line kind (road or river), "
        "nor does a highway or waterway tag say one"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["totals"]["segments"] == 1


def test_scheduler_that_is_no_address_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """Refused from the address alone: no connection is tried (none waits for its timeout)
    and the output folder is not made."""
    import distributed

    def connect(*args, **kwargs):
        raise AssertionError("a connection to the scheduler was tried")

    monkeypatch.setattr(distributed, "Client", connect)
    images, seeds = make_folder(tmp_path, names=("a.png",))
    code, err = batch(capsys, images, seeds, tmp_path / "out", "--scheduler", "notaurl")
    assert (code, err) == (2, "error: --scheduler 'notaurl' is not a Dask scheduler address "
                              "such as tcp://HOST:8786\n")
    assert not (tmp_path / "out").exists()


def test_names_a_spreadsheet_reads_as_formulas_are_text_in_the_csv_only(tmp_path, capsys):
    names = ("=cmd.png", "+x.png", "-x.png", "@x.png", "\tx.png", "a.png")
    images, seeds = make_folder(tmp_path, names=names)
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert [record["image"] for record in summary["images"]] == sorted(names)
    with open(out / "summary.csv", newline="") as stream:
        rows = list(csv.reader(stream))
    assert [row[0] for row in rows[1:]] == [
        "'\tx.png", "'+x.png", "'-x.png", "'=cmd.png", "'@x.png", "a.png"]
    assert all(row[1:4] == ["ok", "pixel", "1"] for row in rows[1:])
    summary["seed_failures"] = [{"reason": "=HYPERLINK(\"x\")", "seed": None, "segment": None}]
    assert summary_csv(summary).endswith('(seeds),failed,,0,0,1,0.000,"\'=HYPERLINK(""x"")"\n')


def test_an_image_over_the_memory_budget_fails_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(BUDGET_VARIABLE, "1G")  # --memory-budget replaces it: undone after
    images, seeds = make_folder(tmp_path, names=("a.png", "big.png"))
    iio.imwrite(images / "big.png", np.zeros((2000, 2000), np.uint8))  # 24.4 MiB to decode
    code, _ = batch(capsys, images, seeds, tmp_path / "out", "--memory-budget", "20M")
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [record["status"] for record in summary["images"]] == ["ok", "failed"]
    [failure] = summary["images"][1]["failures"]
    assert "big.png: decoding its 2000×2000 px needs about 24.4 MiB, over the 20.0 MiB it " \
           "may use" in failure["reason"]


def test_a_ctrl_c_dropped_in_a_callback_still_stops_the_batch(tmp_path, capsys, monkeypatch):
    """Ctrl-C while this process traces, its KeyboardInterrupt raised inside a callback from
    native code (numba's compiler makes such calls), where Python drops it with an "Exception
    ignored" traceback: the batch stops all the same, quietly, and records no image (the one
    being traced may have gone wrong)."""
    images, seeds = make_folder(tmp_path)
    process_image = core.batch.process_image

    def interrupted_in_a_callback(*args, **kwargs):
        ctypes.CFUNCTYPE(None)(lambda: signal.raise_signal(signal.SIGINT))()
        return process_image(*args, **kwargs)

    monkeypatch.setattr("core.batch.process_image", interrupted_in_a_callback)
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 130
    assert "Exception ignored" not in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["images"] == []


def test_a_ctrl_c_while_the_backend_is_made_keeps_the_summary(tmp_path, capsys, monkeypatch):
    """Ctrl-C before any image is traced (the GPU's kernels being built, workers starting):
    the summary says every image is still to do, and the same command resumes."""
    images, seeds = make_folder(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("gpu.select.choose_backend", interrupted)
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 130
    assert "stopped after 0 of 3 image(s)" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["interrupted"], summary["images"]) == (True, [])
    assert summary["not_done"] == ["a.png", "b.png", "c.png"]
    monkeypatch.undo()
    assert batch(capsys, images, seeds, tmp_path / "out")[0] == 0


def test_a_run_with_overwrite_stopped_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """The same command with --overwrite would trace everything again: resuming is without."""
    images, seeds = make_folder(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("gpu.select.choose_backend", interrupted)
    code, err = batch(capsys, images, seeds, tmp_path / "out", "--overwrite")
    assert code == 130
    assert ("stopped after 0 of 3 image(s); run it again without --overwrite to resume"
            in err.splitlines())


# ----------------------------------------------------------------- separate processes
def batch_process(images, seeds, out, *extra, **popen) -> subprocess.Popen:
    """``roadtracer batch`` in a process of its own, its temporary files in ``out``'s parent
    folder (a killed batch cannot remove them)."""
    environment = {name: value for name, value in os.environ.items() if name != BUDGET_VARIABLE}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "main.py"), "batch", str(images), "--seeds", str(seeds),
         "-o", str(out), "--backend", "cpu", "--score", "centre", *extra], cwd=ROOT,
        env={**environment, "TMPDIR": str(Path(out).parent)}, **popen)


def descendants_of(pid: int) -> set[int]:
    """Process ids of the live children of ``pid``, their children and so on (Linux /proc):
    the workers of a batch are the children of the server they are forked from."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stream:
                    fields = stream.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL, "two Ctrl-C"])
def test_a_stopped_batch_leaves_no_workers(tmp_path, stop):
    images = tmp_path / "images"
    images.mkdir()
    features = []
    for k in range(8):  # the sample, many long segments: far more work than the test waits
        name = f"i{k}.png"
        os.symlink(SAMPLE_IMAGE, images / name)
        features.append({"type": "Feature", "properties": {"image": name},
                         "geometry": {"type": "LineString",
                                      "coordinates": [[20, 20], [550, 550]] * 40}})
    seeds = tmp_path / "seeds.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    out = tmp_path / "out"
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stream:
        # Its own process group, as a terminal's foreground job is: Ctrl-C signals all of it.
        process = batch_process(images, seeds, out, "--workers", "2", "--points", "301",
                                stderr=stream, start_new_session=True)
    try:
        # The workers, the server they are forked from and the resource tracker.
        assert wait_for(lambda: len(descendants_of(process.pid)) >= 4, 60), log.read_text()
        workers = descendants_of(process.pid)
        time.sleep(1.0)
        if stop == "two Ctrl-C":  # a quick double Ctrl-C: the batch and its workers, twice
            os.killpg(process.pid, signal.SIGINT)
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(stop)
        code = process.wait(90)  # a hang detector: a loaded 2-core machine can take 30 s
    finally:
        process.kill()
    assert wait_for(lambda: not any(alive(pid) for pid in workers), 30)
    if stop != signal.SIGKILL:
        assert code == 130
        summary = json.loads((out / "summary.json").read_text())
        assert summary["interrupted"] is True
        assert len(summary["images"]) + len(summary["not_done"]) == 8
        assert "leaked" not in log.read_text()  # no semaphore left behind by a worker
        assert "Traceback" not in log.read_text()  # a second Ctrl-C cut no stopping short
        assert not list(tmp_path.glob("roadtracer-*"))  # its temporary folder is removed
    assert not list(out.glob("*.part"))


#: Local workers started for four images (one call each) from a server whose modules include
#: ``slow_import``, stopped by Ctrl-C as the command line stops them; then it waits for a line
#: on stdin before it exits (as the command line writes the summary).
WORKERS_STARTING = """
import sys

from core.backend import CpuBackend
from core.batch import ImageTask, local_executor, run_tasks, start_worker_server
from core.batch import stop_local_executor
from core.tracer import TraceParams
from core.vectors import Seed

modules = ("core.batch", "slow_import")
start_worker_server(modules)
print("server started", flush=True)
pool = None
try:
    pool = local_executor(2, modules=modules)
    seed = Seed("s", [[10.0, 40.0], [80.0, 40.0]], "a.png")
    tasks = [ImageTask(sys.argv[1], (seed,), TraceParams()) for _ in range(4)]
    for outcome in run_tasks(tasks, CpuBackend, pool, 1, CpuBackend):
        print(outcome[0].status, flush=True)
except KeyboardInterrupt:
    if pool is not None:
        stop_local_executor(pool, True)
    print("stopped", flush=True)
    sys.stdin.readline()
    sys.exit(130)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_ctrl_c_while_local_workers_start_stops_cleanly(tmp_path):
    """Ctrl-C signals the whole process group while the server that workers are forked from
    still imports their modules and this process waits for its first workers: the server
    and the workers take no signal (no traceback of theirs), no worker starts unknown to this
    process once the server is ready (it would fail on the task queue this process removed,
    with a traceback), and this process stops as it does later."""
    imported = tmp_path / "imported"
    (tmp_path / "slow_import.py").write_text(
        f"import time\ntime.sleep(1.5)\nopen({str(imported)!r}, 'w').close()\n")
    road_png(tmp_path / "a.png")
    # The server reads PYTHONPATH (not this process's sys.path) to find slow_import.
    process = subprocess.Popen(
        [sys.executable, "-c", WORKERS_STARTING, str(tmp_path / "a.png")], cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert process.stdout.readline() == "server started\n"
        time.sleep(0.5)  # the server imports slow_import; this process waits in its start
        started = descendants_of(process.pid)  # the server and the resource tracker
        assert not imported.exists()
        os.killpg(process.pid, signal.SIGINT)
        assert process.stdout.readline() == "stopped\n"
        assert wait_for(imported.exists, 20)
        time.sleep(0.5)  # the server serves what it was asked for while it imported
        assert descendants_of(process.pid) <= started  # every worker is gone
        out, err = process.communicate("\n", timeout=90)
    finally:
        process.kill()
    assert "Traceback" not in err, err
    assert (process.returncode, out) == (130, "")
    assert wait_for(lambda: not any(alive(pid) for pid in started), 30)


def test_a_closed_stderr_does_not_stop_the_batch(tmp_path):
    images, seeds = make_folder(tmp_path, names=("a.png",))
    out = tmp_path / "out"
    process = batch_process(images, seeds, out, "--workers", "1", stderr=subprocess.PIPE)
    process.stderr.close()  # as `2>&1 | head -1` once head has its line
    assert process.wait(120) == 0
    assert json.loads((out / "summary.json").read_text())["totals"]["ok"] == 1


def png_header(width: int, height: int) -> bytes:
    """The start of an 8-bit grey PNG of ``width`` × ``height`` px: its signature and IHDR."""
    header = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + header
            + struct.pack(">I", zlib.crc32(header)))


def test_an_image_whose_footprint_cannot_be_read_fails_alone(tmp_path, capsys, monkeypatch):
    from tests.test_georef import write_geotiff

    images, seeds = make_folder(tmp_path, names=("a.png",))
    write_geotiff(images / "cint.tif", np.zeros((5, 6, 1), np.complex64), dtype="complex_int16")
    # A header of 20000 × 20000 px and nothing else: Pillow's DecompressionBombError in the
    # footprint, no image to the worker.
    (images / "bomb.png").write_bytes(png_header(20000, 20000))
    (images / "bomb.pgw").write_text("0.2\n0\n0\n-0.2\n388000\n3950000\n")
    (images / "bomb.prj").write_text("EPSG:32654")
    document = json.loads(seeds.read_text())
    document["features"].append({"type": "Feature", "properties": {}, "geometry": {
        "type": "LineString", "coordinates": [[141.0, 35.0], [141.001, 35.001]]}})
    seeds.write_text(json.dumps(document))
    code, _ = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    reasons = {record["image"]: [failure["reason"] for failure in record["failures"]]
               for record in summary["images"]}
    assert [record["status"] for record in summary["images"]] == ["ok", "failed", "failed"]
    assert reasons["bomb.png"][0] == (f"{images / 'bomb.png'} is not an image this program "
                                      "can read (PNG, JPEG, TIFF/GeoTIFF, …)")
    assert reasons["cint.tif"][0].endswith("cint.tif: unsupported pixel type complex_int16")


def test_an_unforeseen_error_reading_a_footprint_does_not_stop_the_plan(tmp_path, capsys,
                                                                         monkeypatch):
    images, seeds = make_folder(tmp_path, names=("a.png", "b.png"))
    document = json.loads(seeds.read_text())
    document["features"].append({"type": "Feature", "properties": {}, "geometry": {
        "type": "LineString", "coordinates": [[141.0, 35.0], [141.001, 35.001]]}})
    seeds.write_text(json.dumps(document))

    def footprint(path, image_crs):
        if path.name == "b.png":
            raise ValueError("a bug")

    monkeypatch.setattr(core.batch, "image_footprint", footprint)
    code, _ = batch(capsys, images, seeds, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [record["status"] for record in summary["images"]] == ["ok", "ok"]
    assert code == 0  # the lon/lat seed crosses no image: not traced, no failure
    assert summary["seeds_outside"]["count"] == 1


def test_a_calls_outputs_are_let_go_once_handed_on():
    """The parent keeps no finished call's future (each holds its images' output documents):
    a batch of many images held them all until it ended."""
    import weakref
    from concurrent.futures import Executor, Future

    from core import batch

    class Output:  # an output document, as large as a real one may be
        pass

    class Finished(Executor):
        def submit(self, fn, /, *args, **kwargs):
            future = Future()
            future.set_result([(args[0][0], Output())])
            return future

    calls = batch._run_calls([f"image{k}" for k in range(20)], None, Finished(), 1, None, None,
                             None)
    seen = []
    for _report, output in calls:
        seen.append(weakref.ref(output))
        del output
        if len(seen) == 10:
            break
    assert sum(ref() is not None for ref in seen) <= 1  # at most the one handed on last
    calls.close()
