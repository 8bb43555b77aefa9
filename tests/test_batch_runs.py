"""Batch runs: the output folder's lock under a race, the memory budget shared by local workers,
resumes that retry failures a rerun may not repeat, outputs that belong to no image, the calls
folder of a killed run, and the command's notes and help."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor

import imageio.v3 as iio
import numpy as np
import pytest

import core.batch
from cli import main as cli_main
from core.backend import CpuBackend
from core.batch import (
    CALLS_PREFIX,
    LOCK_FILE,
    RECORD_MEMBER,
    lock_output_folder,
    plan_batch,
    run_tasks,
)
from core.errors import BadParameter
from core.resources import BUDGET_OPTION_VARIABLE, BUDGET_VARIABLE, OverMemoryBudget
from tests.helpers import batch
from tests.test_batch_integrity import make_folder


def pixel_seeds(path, lines: dict[str, list]) -> None:
    """A seeds file of one pixel seed per image name of ``lines`` (its vertices)."""
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"image": name},
         "geometry": {"type": "LineString", "coordinates": vertices}}
        for name, vertices in lines.items()]}))


@pytest.fixture
def budget(monkeypatch):
    """``--memory-budget`` sets the budget's variables for the process: undone after."""
    monkeypatch.setenv(BUDGET_VARIABLE, "1G")
    monkeypatch.setenv(BUDGET_OPTION_VARIABLE, "")


@pytest.mark.parametrize("between", ["_check_writable", "_try_lock"])
def test_a_run_refused_in_a_race_leaves_the_holders_lock_and_folder(tmp_path, capsys,
                                                                   monkeypatch, between):
    """Another run takes the new folder's lock as this one looks at the folder
    (``_check_writable``, as the audit's race harness: the other run made the folder) or
    just before this one locks (``_try_lock``: this run made it): this run is refused and
    leaves the lock file and the folder alone, so a third run is refused too."""
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "new" / "out"
    real = getattr(core.batch, between)
    with contextlib.ExitStack() as other:
        def another_run_first(*args):
            monkeypatch.setattr(core.batch, between, real)
            other.enter_context(lock_output_folder(out))
            return real(*args)

        monkeypatch.setattr(core.batch, between, another_run_first)
        code, err = batch(capsys, images, seeds, out)
        assert code == 2
        assert err == (f"error: output folder {out} is in use by another batch run (process "
                       f"{os.getpid()} on {socket.gethostname()}); wait for it to end or choose "
                       "another folder\n")
        assert (out / LOCK_FILE).read_text().startswith(f"process {os.getpid()} on ")
        with pytest.raises(BadParameter, match="in use by another batch run"), \
                lock_output_folder(out):
            pass
    if between == "_check_writable":  # the holder made the folders: it removed them
        assert not (tmp_path / "new").exists()
    assert batch(capsys, images, seeds, out)[0] == 0


def test_a_lock_file_removed_by_its_holder_before_it_is_locked_is_opened_again(tmp_path,
                                                                              monkeypatch):
    """The holder of a folder it made ends (removing its lock file, then the folder) between
    this run's opening the lock file and its locking it: this run locks a file that the
    folder holds, not the removed one, so that a third run is refused."""
    out = tmp_path / "out"
    real = core.batch._try_lock
    holder = lock_output_folder(out)
    holder.__enter__()

    def holder_ends_first(handle):
        if not real(handle):
            holder.__exit__(None, None, None)
        return real(handle)

    monkeypatch.setattr(core.batch, "_try_lock", holder_ends_first)
    with lock_output_folder(out):
        assert (out / LOCK_FILE).read_text().startswith(f"process {os.getpid()} on ")
        monkeypatch.setattr(core.batch, "_try_lock", real)
        with pytest.raises(BadParameter, match="in use by another batch run"), \
                lock_output_folder(out):
            pass
    assert not out.exists()  # made again by this run, which removed it


def test_an_output_folder_removed_during_the_run_is_one_error_line(tmp_path, capsys,
                                                                   monkeypatch):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    real = core.batch.process_image

    def folder_removed(*args, **kwargs):
        shutil.rmtree(out, ignore_errors=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(core.batch, "process_image", folder_removed)
    code, err = batch(capsys, images, seeds, out)
    assert code == 2
    assert err.splitlines()[-1] == (f"error: cannot write {out / 'summary.json'}: No such file "
                                    "or directory")
    assert "Traceback" not in err
    assert not out.exists()


def long_road_folder(root, names=("a.png", "b.png", "c.png")) -> tuple:
    """Images 136 × 96 px of a road along row 40 and seeds of one 120 px segment on each."""
    images = root / "images"
    images.mkdir()
    for name in names:
        pixels = np.full((96, 136), 60, np.uint8)
        pixels[37:44] = 200
        iio.imwrite(images / name, pixels)
    seeds = root / "seeds.geojson"
    pixel_seeds(seeds, {name: [[5, 40], [125, 40]] for name in names})
    return images, seeds


def test_parameters_over_the_share_of_each_local_worker_are_a_usage_error(tmp_path, capsys,
                                                                          budget):
    """1200K fits every trace of this batch (and the planner's 100 px segment: 859 KiB) in one
    process; shared by two workers and this process it fits none: refused up front."""
    images, seeds = long_road_folder(tmp_path)
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out, "--memory-budget", "1200K", "--workers", "2")
    assert code == 2
    last = err.splitlines()[-1]
    assert last.startswith("error: a corridor window of ")
    assert ("over the memory budget of 400.0 KiB (--memory-budget=1200K shared by 3 "
            "processes): trace it in shorter legs (seeds with more vertices, closer together) "
            "or lower halfwidth") in last
    assert not out.exists()
    code, err = batch(capsys, images, seeds, out, "--memory-budget", "1200K")
    assert code == 0, err


def test_a_resumed_run_retries_the_failures_a_rerun_may_not_repeat(tmp_path, capsys, budget):
    """a.png's 129 px diagonal is over a 1M budget (the planner's 100 px segment is not), b.png's
    seed leaves the image: a rerun with a larger budget traces a.png again, not b.png."""
    images, _ = make_folder(tmp_path, names=("a.png", "b.png"))
    seeds = tmp_path / "seeds.geojson"
    pixel_seeds(seeds, {"a.png": [[2, 2], [93, 93]], "b.png": [[5, 40], [150, 40]]})
    out = tmp_path / "out"
    code, _ = batch(capsys, images, seeds, out, "--memory-budget", "1M")
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    a, b = summary["images"]
    assert (a["status"], a["transient_failures"], b["status"], b["transient_failures"]) == (
        "partial", 1, "partial", 0)
    assert a["failures"][0]["reason"].endswith(
        "(--memory-budget=1M): trace it in shorter legs (seeds with more vertices, closer "
        "together) or lower halfwidth")
    record = json.loads((out / "a.geojson").read_text())[RECORD_MEMBER]
    assert record["transient_failures"] == 1

    code, err = batch(capsys, images, seeds, out, "--memory-budget", "1G")
    assert code == 1  # b.png's failure, kept
    assert ("note: tracing 1 image(s) again whose output records failures a rerun may not "
            "repeat (over the memory budget, pixels that could not be read, …): a.png\n") in err
    assert "skipping 1 image(s) whose output exists" in err
    summary = json.loads((out / "summary.json").read_text())
    assert [(record["status"], record["output_status"]) for record in summary["images"]] == [
        ("ok", None), ("skipped", "partial")]

    code, err = batch(capsys, images, seeds, out, "--memory-budget", "1G")
    assert "tracing" not in err
    assert "skipping 2 image(s) whose output exists" in err


def test_a_record_without_a_count_of_transient_failures_is_kept(tmp_path, capsys):
    """Outputs written before the count was recorded are skipped as before, not traced again."""
    images, seeds = make_folder(tmp_path, names=("a.png",))
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out)[0] == 0
    document = json.loads((out / "a.geojson").read_text())
    del document[RECORD_MEMBER]["transient_failures"]
    (out / "a.geojson").write_text(json.dumps(document))
    assert "skipping 1 image(s)" in batch(capsys, images, seeds, out)[1]
    document[RECORD_MEMBER]["transient_failures"] = 1  # more than its failures: no record
    (out / "a.geojson").write_text(json.dumps(document))
    assert "tracing 1 image(s) again: " in batch(capsys, images, seeds, out)[1]


def test_outputs_that_belong_to_no_image_are_named_and_kept(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out)[0] == 0
    (images / "c.png").unlink()  # its output stays
    iio.imwrite(images / "a.tif", iio.imread(images / "a.png"))  # a.png's is a.png.geojson now
    (out / "mine.geojson").write_text('{"type": "FeatureCollection", "features": []}')
    code, err = batch(capsys, images, seeds, out)
    assert code == 1  # the seed of c.png names no image now
    assert (f"note: 2 output(s) in {out} belong to no image of IMAGES_DIR (an earlier batch "
            "wrote them for an image since removed or renamed, or now written under another "
            "name); they are kept, delete them if they are stale: a.geojson, c.geojson\n") in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["orphan_outputs"] == ["a.geojson", "c.geojson"]
    assert {"a.geojson", "c.geojson", "mine.geojson", "a.png.geojson",
            "a.tif.geojson"} <= {path.name for path in out.iterdir()}


def test_the_calls_folder_is_made_in_the_output_folder_and_a_stale_one_removed(tmp_path,
                                                                              monkeypatch):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    plan = plan_batch(images, seeds, out)
    seen = []
    real = core.batch.process_image

    def looking(*args, **kwargs):
        seen.append(sorted(path.name for path in out.glob(f"{CALLS_PREFIX}*")))
        return real(*args, **kwargs)

    monkeypatch.setattr(core.batch, "process_image", looking)
    with ThreadPoolExecutor(2) as executor:
        outcomes = list(run_tasks(plan.tasks, CpuBackend, executor, 1, CpuBackend,
                                  work_dir=out))
    assert len(outcomes) == 3
    assert all(len(names) == 1 for names in seen)  # the run's own, while it runs
    assert not list(out.glob(f"{CALLS_PREFIX}*"))  # removed at the end

    stale = out / f"{CALLS_PREFIX}k1ll3d" / "0"  # left by a run killed with SIGKILL
    stale.mkdir(parents=True)
    (stale / "0").write_text("4242\n1\n")
    with lock_output_folder(out):
        assert not (out / f"{CALLS_PREFIX}k1ll3d").exists()


def test_the_command_puts_its_calls_folder_in_the_output_folder(tmp_path, capsys,
                                                                monkeypatch):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    made = []

    class Recorded(tempfile.TemporaryDirectory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.name)

    monkeypatch.setattr(core.batch.tempfile, "TemporaryDirectory", Recorded)
    code, err = batch(capsys, images, seeds, out, "--workers", "2")
    assert code == 0, err
    assert [os.path.dirname(name) for name in made] == [str(out)]
    assert os.path.basename(made[0]).startswith(CALLS_PREFIX)
    assert not os.path.exists(made[0])


def test_a_note_lists_five_names_and_counts_the_others(tmp_path, capsys):
    names = [f"{letter}.png" for letter in "abcdefg"]
    images, seeds = make_folder(tmp_path, names=names)
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out)[0] == 0
    code, err = batch(capsys, images, seeds, out, "--max-angle", "30")
    assert code == 0
    assert ("tracing 7 image(s) again: their seeds, parameters or files changed since the "
            "earlier run, or their output has no record of them (a.png, b.png, c.png, d.png, "
            "e.png and 2 more)\n") in err


def test_help_tells_of_resuming_the_lock_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as ended:
        cli_main(["help", "batch"])
    assert ended.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Resuming: the same command continues an interrupted batch, skipping the images "
            "whose output records the same seeds, parameters and files") in text
    assert "OUT_DIR/.roadtracer-batch.lock" in text
    assert ("Exit code: 0 all traced (seeds that cross none of the images are counted in "
            "summary.json, not failures), 1 something failed (see OUT_DIR/summary.csv), 2 usage "
            "error, 130 interrupted") in text


def test_a_plan_over_the_budget_is_advised_as_its_caller_can_follow():
    error = OverMemoryBudget("x needs 2 MiB, over the memory budget of 1 MiB (B=1M)",
                             "lower halfwidth", True)
    assert str(error) == ("x needs 2 MiB, over the memory budget of 1 MiB (B=1M): trace it in "
                          "shorter legs (click a point in between; --via X,Y on the command "
                          "line) or lower halfwidth")
    assert error.advising("seeds with more vertices").endswith(
        "(B=1M): trace it in shorter legs (seeds with more vertices) or lower halfwidth")
    assert str(type(error)(f"case 'x': {error}")) == f"case 'x': {error}"  # as eval rewords it
    assert isinstance(error, BadParameter)
