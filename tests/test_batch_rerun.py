"""Batch re-runs and what the command line tells: outputs kept from an earlier run keep their
failures and counts, seed failures are told once each, progress is in segments."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from cli.batch_cmd import SegmentProgress
from core.backend import CpuBackend
from core.batch import NO_SEED_REASON, ImageTask, process_image
from core.tracer import TraceParams
from core.vectors import Seed
from tests.helpers import batch, read_summary
from tests.test_batch import GEOREF, feature
from tests.test_batch_integrity import road_png
from tests.test_georef import TRANSFORM, write_world_file

OFF_IMAGE = "point b=(300, 40) lies outside the 96×96 image"
OUTSIDE_NOTE = ("note: 1 seed line(s) cross none of the images: not traced (counted, the first "
                "ids listed: seeds_outside in summary.json)")


def make_folder(root) -> tuple:
    """IMAGES_DIR of a georeferenced road image (``road.png``) and one no seed concerns
    (``empty.png``); seeds: two pixel lines on the road, one leaving the image, and a lon/lat
    line just beside the road image (its box meets the image's footprint box; the line
    misses the image)."""
    images = root / "images"
    images.mkdir()
    for name in ("road.png", "empty.png"):
        road_png(images / name)
    write_world_file(images / "road.pgw", TRANSFORM)
    (images / "road.prj").write_text("EPSG:32654")
    beside = GEOREF.pixel_to_lonlat([[-1.2, 20.0], [-1.2, 70.0]]).tolist()
    seeds = root / "seeds.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": [
        feature([[5, 40], [50, 42], [90, 40]], {"image": "road.png"}, id="main"),
        feature([[10, 40], [300, 40]], {"image": "road.png"}, id="off"),
        feature(beside, id="beside")]}))
    return images, seeds


def closing_line(out, counts: str, traced: int) -> str:
    return (f"2 image(s): {counts}; {traced} segment(s) traced in "
            f"{read_summary(out)[0]['seconds']:.1f} s; summary in {out / 'summary.json'} and "
            "summary.csv")


def test_a_rerun_keeps_the_failures_and_counts_of_the_outputs_it_skips(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out)
    assert code == 1
    assert err.splitlines()[-3:] == [
        f"partial: road.png: seed off segment 0: {OFF_IMAGE}",
        OUTSIDE_NOTE,
        closing_line(out, "1 ok, 1 partial, 0 failed, 0 skipped", 2)]
    first, first_rows = read_summary(out)

    code, err = batch(capsys, images, seeds, out)
    assert code == 1
    assert err.splitlines()[-4:] == [
        "note: skipping 2 image(s) whose output exists (--overwrite traces them again)",
        f"partial: road.png (earlier run): seed off segment 0: {OFF_IMAGE}",
        OUTSIDE_NOTE,
        closing_line(out, "0 ok, 0 partial, 0 failed, 2 skipped", 0)]
    summary, rows = read_summary(out)
    assert {key: summary["totals"][key] for key in ("images", "skipped", "lines", "segments",
                                                    "segments_traced", "failures")} == {
        "images": 2, "skipped": 2, "lines": 1, "segments": 2, "segments_traced": 0,
        "failures": 1}
    assert [first["totals"][key] for key in ("lines", "segments", "segments_traced")] == [1, 2, 2]
    road = next(record for record in summary["images"] if record["image"] == "road.png")
    assert (road["status"], road["output_status"]) == ("skipped", "partial")
    first_road = next(record for record in first["images"] if record["image"] == "road.png")
    assert first_road["output_status"] is None
    assert road["failures"] == first_road["failures"] == [
        {"reason": OFF_IMAGE, "seed": "off", "segment": 0}]
    assert summary["seed_failures"] == first["seed_failures"] == []
    assert summary["seeds_outside"] == first["seeds_outside"] == {"count": 1, "ids": ["beside"]}
    assert [(row["image"], row["status"], row["lines"], row["segments"], row["failures"],
             row["reasons"]) for row in rows] == [
        ("empty.png", "skipped", "0", "0", "0", NO_SEED_REASON),
        ("road.png", "skipped", "1", "2", "1", f"seed off segment 0: {OFF_IMAGE}")]
    assert [row["reasons"] for row in first_rows] == [row["reasons"] for row in rows]


def test_an_output_whose_record_has_no_valid_failures_is_traced_again(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    batch(capsys, images, seeds, out)
    document = json.loads((out / "road.geojson").read_text())
    document["roadtracer_batch"]["failures"] = []  # a partial image's record without them
    (out / "road.geojson").write_text(json.dumps(document))
    code, err = batch(capsys, images, seeds, out)
    assert code == 1
    assert "tracing 1 image(s) again: their seeds, parameters or files changed since the " \
           "earlier run, or their output has no record of them (road.png)" in err
    assert f"partial: road.png: seed off segment 0: {OFF_IMAGE}" in err


def test_no_progress_bar_off_a_terminal(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    for _ in range(2):  # traced, then skipped: no bar either time
        err = batch(capsys, images, seeds, out)[1]
        assert "%|" not in err  # no bar, empty or not


class TerminalText(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_counts_segments(tmp_path, capsys, monkeypatch):
    images, seeds = make_folder(tmp_path)
    terminal = TerminalText()
    monkeypatch.setattr("sys.stderr", terminal)
    batch(capsys, images, seeds, tmp_path / "out")
    states = terminal.getvalue().split("\r")
    # At most 4 segments: main's two, off's and beside's (which may cross road.png).
    assert states[1] == "  0%|          | 0/4 [00:00<?, ?segment/s]"
    assert states[-1].startswith("100%|##########| 4/4 [")
    assert "segment/s, 2/2 images, road.png: partial]\n" in states[-1]
    assert "images done" not in terminal.getvalue()  # the bar tells it


def test_progress_is_told_as_segments_are_traced(tmp_path, monkeypatch):
    monkeypatch.setattr("core.batch.PROGRESS_SEGMENTS", 2)
    monkeypatch.setattr("core.batch.PROGRESS_SECONDS", 0.0)  # every run as short as can be
    road_png(tmp_path / "road.png")
    seed = Seed("s", np.array([[5.0, 40], [22, 40], [39, 40], [56, 40], [73, 40], [90, 40]]),
                "road.png", {})
    told = []
    task = ImageTask(str(tmp_path / "road.png"), (seed,), TraceParams(score="centre"))
    report, _ = process_image(task, CpuBackend, progress=told.append)
    assert (report.status, report.segments) == ("ok", 5)
    assert told == [2, 2, 1]
    untold, _ = process_image(task, CpuBackend)
    assert untold.segments == 5


@pytest.fixture
def bar():
    class Bar:
        def __init__(self):
            self.n, self.postfix = 0, ""

        def update(self, segments):
            self.n += segments

        def set_postfix_str(self, text, refresh):
            self.postfix = text
    return Bar()


def test_segment_progress_of_images_traced_here_and_elsewhere(bar):
    progress = SegmentProgress(bar, {"here.png": 5, "worker.png": 7})
    assert bar.postfix == "0/2 images"
    progress.traced(2)
    progress.traced(1)  # 3 of here.png's 5 at most (the others clipped away)
    progress.finished("here.png", "ok")
    assert (bar.n, bar.postfix) == (5, "1/2 images, here.png: ok")
    progress.finished("worker.png", "partial")
    assert (bar.n, bar.postfix) == (12, "2/2 images, worker.png: partial")


def test_without_a_terminal_lines_tell_the_images_done(tmp_path, capsys, monkeypatch):
    """stderr is a log (captured here): no bar, but a line now and then and at the end; and a
    note says what of the folder is not read."""
    images, seeds = make_folder(tmp_path)
    (images / "more").mkdir()
    (images / "gone.png").symlink_to(images / "missing.png")
    (images / "notes.txt").symlink_to(images / "missing.txt")  # no image: not told
    monkeypatch.setattr("cli.batch_cmd.PROGRESS_LINE_SECONDS", 0.0)
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    lines = err.splitlines()
    assert code == 1
    assert f"note: skipping 1 subfolder(s) and 1 broken link(s) in {images} (batch reads the " \
           "images directly in IMAGES_DIR)" in lines
    assert [line for line in lines if line.endswith("images done")] == [
        "1/2 images done", "2/2 images done"]
    monkeypatch.setattr("cli.batch_cmd.PROGRESS_LINE_SECONDS", 3600.0)
    code, err = batch(capsys, images, seeds, tmp_path / "out2", "--quiet")
    assert "images done" not in err
    code, err = batch(capsys, images, seeds, tmp_path / "out3")
    assert [line for line in err.splitlines() if line.endswith("images done")] == [
        "2/2 images done"]


def test_a_folder_gone_while_planned_counts_nothing_passed_over(tmp_path):
    from core.batch import passed_over

    (tmp_path / "sub").mkdir()
    assert passed_over(tmp_path) == (1, 0)
    assert passed_over(tmp_path / "gone") == (0, 0)
