"""Safe writes and checked reads (core.output), and the resource plan (core.resources)."""

from __future__ import annotations

import json
import os
import stat
import threading

import numpy as np
import pytest

from core.errors import BadParameter, OutputWriteError
from core.gradient import gradient_margin
from core.output import (
    MAX_JSON_DEPTH,
    json_depth_exceeds,
    json_number,
    new_folder,
    printable,
    read_json,
    refuse_overwriting_input,
    write_text_atomic,
)
from core.resources import (
    BUDGET_VARIABLE,
    BYTES_PER_WINDOW_PX,
    check_trace_plan,
    memory_budget,
    parse_size,
    window_pixels,
)
from core.tracer import TraceParams


def test_an_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "private.json"
    path.write_text("old")
    path.chmod(0o600)
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_symbolic_link_is_written_through(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    write_text_atomic(link, "new")
    assert link.is_symlink()
    assert target.read_text() == "new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to("made.json")
    write_text_atomic(dangling, "made")
    assert dangling.is_symlink()
    assert (tmp_path / "made.json").read_text() == "made"


def test_special_files_are_written_in_place(tmp_path):
    write_text_atomic("/dev/null", "nothing")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "through the pipe")
    reader.join(10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fifo"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    with pytest.raises(OutputWriteError, match="not valid Unicode"):
        write_text_atomic(tmp_path / "x.json", "\ud800")
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(OutputWriteError, match="folder.json"):
        write_text_atomic(tmp_path / "folder.json", "x")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder.json"]


def test_a_file_that_may_not_be_written_is_left_as_it_was(tmp_path, monkeypatch):
    """Replacing a file needs only the folder's write permission: the file's own is checked
    first (root may write anything, so the check is seen through os.access)."""
    path = tmp_path / "read-only.json"
    path.write_text("old")
    path.chmod(0o444)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda target, mode: False if str(target) == str(path)
                        else real_access(target, mode))
    with pytest.raises(OutputWriteError, match="Permission denied"):
        write_text_atomic(path, "new")
    assert path.read_text() == "old"
    assert sorted(item.name for item in tmp_path.iterdir()) == ["read-only.json"]


def test_the_new_file_is_on_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """A crash after the rename must not leave an empty file where the old one was."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.fstat(fd).st_size))
                        or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda *paths: calls.append(("replace",))
                        or real_replace(*paths))
    (tmp_path / "x.json").write_text("old")
    write_text_atomic(tmp_path / "x.json", "new text")
    assert calls == [("fsync", len("new text")), ("replace",)]
    assert (tmp_path / "x.json").read_text() == "new text"


def test_a_path_ending_in_a_separator_never_replaces_a_file(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    with pytest.raises(OutputWriteError, match="Not a directory"):
        write_text_atomic(f"{path}{os.sep}", "new")
    assert path.read_text() == "old"


def test_a_loop_of_links_is_one_error_and_stays(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OutputWriteError, match="symbolic links"):
        write_text_atomic(tmp_path / "a", "x")
    assert (tmp_path / "a").is_symlink()
    assert os.readlink(tmp_path / "a") == "b"


def test_an_output_that_is_an_input_is_refused(tmp_path):
    image = tmp_path / "image.png"
    image.write_bytes(b"pixels")
    link = tmp_path / "link.png"
    link.symlink_to("image.png")
    for output in (image, link):
        with pytest.raises(BadParameter, match="would destroy the input"):
            refuse_overwriting_input(output, (None, image), "-o")
    refuse_overwriting_input(tmp_path / "new.json", (image,), "-o")  # not there yet
    refuse_overwriting_input(None, (image,), "-o")
    refuse_overwriting_input("-", (image,), "-o")
    other = tmp_path / "other.json"
    other.write_text("{}")
    refuse_overwriting_input(other, (image, None), "-o")
    assert image.read_bytes() == b"pixels"


def test_deep_json_is_one_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)  # beyond the parser's recursion limit
    with pytest.raises(BadParameter, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        read_json(path, "seeds file")
    path.write_text(json.dumps({"a": [[[[{}]]]]}))
    assert read_json(path, "seeds file") == {"a": [[[[{}]]]]}
    nested: list = []
    for _ in range(MAX_JSON_DEPTH):
        nested = [nested]
    assert json_depth_exceeds(nested)
    assert not json_depth_exceeds(nested[0])


def test_printable_names():
    assert printable(os.fsdecode(b"caf\xe9.png")) == "caf\\xe9.png"
    assert printable("plain.png") == "plain.png"
    assert printable("\ud800x") == "\\ud800x"


def test_sizes():
    assert parse_size("512") == 512
    assert parse_size("4G") == 4 * 2**30
    assert parse_size("1.5 MiB") == int(1.5 * 2**20)
    for bad in ("", "-1", "lots", "0", "1e9999"):
        with pytest.raises(BadParameter, match="must be a size in bytes"):
            parse_size(bad)


def test_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv(BUDGET_VARIABLE, "3M")
    assert memory_budget() == (3 * 2**20, f"{BUDGET_VARIABLE}=3M")
    monkeypatch.delenv(BUDGET_VARIABLE)
    budget, source = memory_budget()
    assert budget is None or budget > 0
    assert source == "no limit" or "of the" in source


def default_plan(requested, resolved, chord, margin) -> tuple:
    """:func:`check_trace_plan`'s arguments for a trace of ``chord`` (b − a) whose window
    needs the default bytes per pixel (``BYTES_PER_WINDOW_PX``)."""
    window_px = window_pixels(chord, resolved.halfwidth, margin)
    return requested, resolved, margin, (window_px, BYTES_PER_WINDOW_PX * window_px)


@pytest.mark.parametrize(("given", "named"), [
    ({"points": 100000}, "lower points"),
    ({"guides": 10**6}, "lower guides"),
    ({"halfwidth": 1e9}, r"lower halfwidth \(it sets the points per guide\)"),
    ({"halfwidth": 1e9, "points": 11}, "lower halfwidth"),  # the window, not the search
    ({"sigma": 1e4}, "lower sigma"),
])
def test_plans_over_budget_name_their_parameter(monkeypatch, given, named):
    monkeypatch.setenv(BUDGET_VARIABLE, "1G")
    requested = TraceParams(**given)
    with pytest.raises(BadParameter, match=f"over the memory budget of 1.0 GiB .*{named}$"):
        check_trace_plan(*default_plan(requested, requested.resolve(300.0), (300.0, 0.0),
                                       gradient_margin(requested.sigma)))


def test_the_window_estimate_follows_the_direction(monkeypatch):
    requested = TraceParams(score="centre")
    resolved = requested.resolve(3000.0)
    monkeypatch.setenv(BUDGET_VARIABLE, "256M")  # a 3000 px click along a row: ~100 MiB
    check_trace_plan(*default_plan(requested, resolved, (3000.0, 0.0), 7))
    diagonal = 3000.0 / np.sqrt(2)  # its window is 6× larger: ~750 MiB (measured: 368 MB)
    with pytest.raises(BadParameter, match="lower halfwidth$"):
        check_trace_plan(*default_plan(requested, resolved, (diagonal, diagonal), 7))
    monkeypatch.setenv(BUDGET_VARIABLE, "1G")
    check_trace_plan(*default_plan(requested, resolved, (diagonal, diagonal), 7))


def test_a_document_that_is_no_regular_file_is_one_error(tmp_path):
    """A FIFO would block the reader for good; a folder is a typo."""
    fifo = tmp_path / "seeds.geojson"
    os.mkfifo(fifo)
    with pytest.raises(BadParameter, match=r"cannot read seeds file .*seeds.geojson: it is not "
                                           "a regular file"):
        read_json(fifo, "seeds file")
    with pytest.raises(BadParameter, match="cannot read cases file .*: it is a folder"):
        read_json(tmp_path, "cases file")


def test_decoding_over_budget_is_refused(monkeypatch):
    from core.resources import check_decode_memory

    monkeypatch.setenv(BUDGET_VARIABLE, "1G")
    check_decode_memory("ok.png", 5000, 5000, 3)  # 447 MiB of float32 planes × 1.6
    with pytest.raises(BadParameter, match=r"^big.png: decoding its 10000×10000 px needs about "
                                           r"1.8 GiB, over the 1.0 GiB it may use"):
        check_decode_memory("big.png", 10000, 10000, 3)


def test_new_folder_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    with new_folder(out) as partial:
        (tmp_path / partial / "a.txt").write_text("a")
        assert not out.exists()  # nothing at the target while it is being filled
    assert (out / "a.txt").read_text() == "a"
    failed = tmp_path / "failed"
    with pytest.raises(RuntimeError), new_folder(failed):
        raise RuntimeError("half-way")
    assert not failed.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no partial folder left
    with pytest.raises(BadParameter, match="not an empty folder"), new_folder(out):
        pass
    assert (out / "a.txt").read_text() == "a"
    empty = tmp_path / "empty"
    empty.mkdir()
    with new_folder(empty) as partial:
        (tmp_path / partial / "b.txt").write_text("b")
    assert (empty / "b.txt").read_text() == "b"
    with pytest.raises(BadParameter, match="cannot make output folder"), \
            new_folder(tmp_path / "missing" / "out"):
        pass


@pytest.mark.parametrize(("value", "number"), [
    (3, 3.0), (-0.25, -0.25), (True, None), (False, None), ("1", None), (None, None),
    ([1], None), (float("nan"), None), (float("inf"), None), (10**400, None),
])
def test_json_number_takes_finite_numbers_only(value, number):
    assert json_number(value) == number
