"""Windows and macOS paths of the command line and the batch, emulated on this system: workers
started deaf to Ctrl-C, legacy code pages, AppleDouble files, decomposed (NFD) file names,
files held open, locks, descriptor paths; and seed files of more ground than the imagery."""

from __future__ import annotations

import ctypes
import errno
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import types
import unicodedata

import pytest

import cli
import core.output
from core.batch import (
    MAX_OUTSIDE_IDS,
    LocalPool,
    _worker_context,
    local_executor,
    lock_output_folder,
    output_names,
    passed_over,
)
from core.errors import OutputWriteError
from core.output import names_descriptor, write_text_atomic
from core.raster import image_named, list_images, same_name_key
from tests import test_batch_portability
from tests.conftest import ROOT
from tests.helpers import batch
from tests.test_batch_integrity import make_folder

#: The fixture of a process that Windows' ``msvcrt`` locks (:mod:`tests.test_batch_portability`).
windows = test_batch_portability.windows
needs_proc = test_batch_portability.needs_proc
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and flock")


# 1. Local workers never see Ctrl-C, from their start.

@posix_only
def test_spawned_workers_start_with_sigint_blocked(monkeypatch):
    all_methods = multiprocessing.get_all_start_methods
    monkeypatch.setattr(multiprocessing, "get_all_start_methods",
                        lambda: [method for method in all_methods() if method != "forkserver"])
    executor = local_executor(1)
    try:
        assert executor.pool._mp_context.get_start_method() == "spawn"
        blocked = executor.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result()
    finally:
        executor.shutdown()
    assert signal.SIGINT in blocked
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # not here


def test_windows_workers_start_with_ctrl_c_ignored(monkeypatch):
    log = []

    class Pool:
        def submit(self, fn, *args):
            log.append("worker started")

        def shutdown(self, wait=True, *, cancel_futures=False):
            pass

    kernel32 = types.SimpleNamespace(
        SetConsoleCtrlHandler=lambda handler, ignore: log.append((handler, ignore)))
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "windll", types.SimpleNamespace(kernel32=kernel32),
                        raising=False)
    monkeypatch.setattr(LocalPool, "_started", lambda self: Pool())
    pool = LocalPool(2, 0, ())
    pool.submit(print)
    pool.shutdown()
    assert log == [(None, True), "worker started", (None, False)]


def test_workers_fork_from_a_server_on_linux_only(monkeypatch):
    """On macOS a forked child that calls Accelerate (numpy's BLAS there) may crash."""
    monkeypatch.setattr(multiprocessing, "get_all_start_methods",
                        lambda: ["fork", "spawn", "forkserver"])
    methods = {}
    for platform in ("linux", "darwin", "win32"):
        monkeypatch.setattr(sys, "platform", platform)
        methods[platform] = _worker_context(("core.batch",)).get_start_method()
    assert methods == {"linux": "forkserver", "darwin": "spawn", "win32": "spawn"}


# 2-3. Help and tables written to a file in a legacy code page.

def test_help_is_written_when_stdout_is_a_cp932_file():
    process = subprocess.run([sys.executable, "main.py", "help", "trace"], cwd=ROOT,
                             capture_output=True, env={**os.environ, "PYTHONIOENCODING": "cp932"})
    assert process.returncode == 0, process.stderr.decode(errors="replace")
    assert "0.25·|ab|" in process.stdout.decode("utf-8")


def test_a_code_page_holding_some_help_characters_is_still_switched(monkeypatch, tmp_path):
    with open(tmp_path / "out.txt", "w", encoding="cp932") as stream:
        monkeypatch.setattr(sys, "stdout", stream)
        cli.fit_stream_encodings()
        assert (stream.encoding, stream.errors) == ("utf-8", "replace")


@pytest.mark.parametrize("script", ["compare_reports", "train_surface_model", "truth_ridges"])
def test_script_help_is_written_when_stdout_is_a_cp1252_file(script):
    if script == "train_surface_model":
        pytest.importorskip("torch", reason="the trainer's help needs PyTorch")
    process = subprocess.run([sys.executable, f"scripts/{script}.py", "--help"], cwd=ROOT,
                             capture_output=True, env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert process.returncode == 0, process.stderr.decode(errors="replace")
    assert {"σ", "→"} & set(process.stdout.decode("utf-8"))


# 4. macOS AppleDouble files.

def test_appledouble_files_are_no_images(tmp_path):
    (tmp_path / "a.png").write_bytes(b"png")
    (tmp_path / "._a.png").write_bytes(b"\x00\x05\x16\x07")
    (tmp_path / "._gone.png").symlink_to(tmp_path / "nothing")
    (tmp_path / "gone.png").symlink_to(tmp_path / "nothing")
    assert list_images(tmp_path) == [tmp_path / "a.png"]
    assert passed_over(tmp_path) == (0, 1)


# 5. File names that differ in Unicode normalisation only (macOS hands back NFD names).

CAFE_NFC = unicodedata.normalize("NFC", "café.png")
CAFE_NFD = unicodedata.normalize("NFD", "café.png")


@pytest.mark.parametrize("platform", ["darwin", "win32", "linux"])
def test_a_seed_names_an_image_in_another_normalisation(monkeypatch, platform):
    monkeypatch.setattr(sys, "platform", platform)
    assert image_named(CAFE_NFC, [CAFE_NFD, "b.png"]) == CAFE_NFD
    assert image_named(CAFE_NFC, [CAFE_NFD, CAFE_NFD.upper()]) == (
        CAFE_NFD if platform == "linux" else None)  # never two images for one seed


def test_outputs_of_names_differing_in_normalisation_only_are_distinct(tmp_path):
    outputs = output_names([tmp_path / CAFE_NFC, tmp_path / CAFE_NFD])
    assert len({same_name_key(name) for name in outputs.values()}) == 2


# 6. Windows: a target held open by another program refuses its replacement a while.

def refusing_replace(monkeypatch, refusals: int) -> list:
    """``os.replace`` refused as Windows refuses it the first ``refusals`` times; the log of
    its calls."""
    calls, replace = [], os.replace

    def replacing(source, target):
        calls.append(target)
        if len(calls) <= refusals:
            raise PermissionError(errno.EACCES, "Access is denied", target)
        replace(source, target)

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(os, "replace", replacing)
    monkeypatch.setattr(core.output, "REPLACE_RETRY_SECONDS", (0.0,) * 3)
    return calls


def test_windows_replacement_is_tried_again_while_refused(tmp_path, monkeypatch):
    target = tmp_path / "a.geojson"
    target.write_text("old")
    calls = refusing_replace(monkeypatch, 2)
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert len(calls) == 3


def test_windows_replacement_refused_for_good_says_the_file_may_be_open(tmp_path, monkeypatch):
    target = tmp_path / "a.geojson"
    target.write_text("old")
    calls = refusing_replace(monkeypatch, 99)
    with pytest.raises(OutputWriteError, match=r"a\.geojson: Access is denied \(it may be open "
                                               "in another program"):
        write_text_atomic(target, "new")
    assert len(calls) == 4
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.geojson"]
    assert target.read_text() == "old"


# 7. The output folder's lock.

@needs_proc
def test_windows_lock_is_unlocked_before_its_file_closes(tmp_path, windows):
    with lock_output_folder(tmp_path / "out"):
        assert windows.held
    assert not windows.held
    assert windows.closed_locked == 0


@posix_only
def test_a_file_system_without_locks_is_one_clear_error(tmp_path, capsys, monkeypatch):
    import fcntl

    def flock(handle, operation):
        raise OSError(errno.ENOTSUP, os.strerror(errno.ENOTSUP))

    monkeypatch.setattr(fcntl, "flock", flock)
    images, seeds = make_folder(tmp_path)
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 2
    assert err == (f"error: cannot lock {tmp_path / 'out' / '.roadtracer-batch.lock'}: "
                   f"{os.strerror(errno.ENOTSUP)} (the file system of the output folder may not "
                   "support locks, as some network shares do: choose a folder on a local disk)\n")
    assert not (tmp_path / "out").exists()


# 9. Descriptor paths on macOS: /dev/fd is a folder of its own, not a link into /proc.

def test_dev_fd_paths_are_written_in_place_on_macos(tmp_path, monkeypatch):
    monkeypatch.setattr(os.path, "realpath", os.path.normpath)  # no /proc: /dev/fd is real
    with open(tmp_path / "out.txt", "w") as stream:
        stream.write("before\n")
        stream.flush()
        path = f"/dev/fd/{stream.fileno()}"
        assert names_descriptor(path)
        write_text_atomic(path, "after\n")
    assert (tmp_path / "out.txt").read_text() == "before\nafter\n"


# 10. summary.csv for Excel on Windows.

def test_summary_csv_starts_with_a_byte_order_mark(tmp_path, capsys):
    images, seeds = make_folder(tmp_path, names=("café.png",))
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 0, err
    data = (tmp_path / "out" / "summary.csv").read_bytes()
    assert data.startswith(b"\xef\xbb\xbfimage,status,")
    assert "\ncafé.png,ok," in data.decode("utf-8-sig")


# 11. Seeds of more ground than the imagery (a region's extract for a few tiles).

def test_seeds_outside_the_imagery_are_counted_not_failed(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    document = json.loads(seeds.read_text())
    outside = MAX_OUTSIDE_IDS + 50
    document["features"] += [
        {"type": "Feature", "id": f"w{k}", "properties": {"highway": "residential"},
         "geometry": {"type": "LineString", "coordinates": [[135.5, 34.69], [135.51, 34.7]]}}
        for k in range(outside)]
    seeds.write_text(json.dumps(document))
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out, "-q")
    assert (code, err) == (0, "")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds_outside"] == {"count": outside,
                                        "ids": [f"w{k}" for k in range(MAX_OUTSIDE_IDS)]}
    assert summary["seed_failures"] == []
    assert summary["totals"]["failures"] == 0

    document["features"].append({"type": "Feature", "id": "broken", "properties": {},
                                 "geometry": {"type": "Point", "coordinates": [135.5, 34.69]}})
    seeds.write_text(json.dumps(document))
    code, err = batch(capsys, images, seeds, out, "-q")
    assert code == 1
    assert err.startswith("bad seed broken: ")
    assert err.count("\n") == 1
