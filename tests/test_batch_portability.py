"""Batch mode on Windows and macOS, simulated on this system: the output folder's lock, the
calls folder removed while held, the local worker limit, image names that differ in case."""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

import cli.batch_cmd
from cli import main as cli_main
from core.backend import CpuBackend
from core.batch import (
    LOCK_FILE,
    WINDOWS_LOCK_BYTE,
    lock_output_folder,
    plan_batch,
    run_tasks,
)
from core.errors import BadParameter
from core.raster import image_named
from tests.helpers import batch
from tests.test_batch_integrity import make_folder


class FakeMsvcrt(types.ModuleType):
    """``msvcrt.locking`` as Windows does it: byte ranges locked per open file, from its
    position, refused (EACCES) while another handle holds them, unlocked by the handle that
    holds them, released when it closes (counted in ``closed_locked``)."""

    LK_UNLCK, LK_NBLCK = 0, 2

    def __init__(self):
        super().__init__("msvcrt")
        self.held = {}  # (device, inode, offset) -> handle
        self.closed_locked = 0

    def locking(self, handle: int, mode: int, size: int) -> None:
        assert mode in (self.LK_NBLCK, self.LK_UNLCK)
        assert size == 1
        status = os.fstat(handle)
        key = (status.st_dev, status.st_ino, os.lseek(handle, 0, os.SEEK_CUR))
        if mode == self.LK_UNLCK and self.held.get(key) == handle:
            del self.held[key]
        elif mode == self.LK_UNLCK or key in self.held:
            raise PermissionError(errno.EACCES, "Permission denied")
        else:
            self.held[key] = handle

    def closed(self, handle: int) -> None:
        self.closed_locked += sum(held == handle for held in self.held.values())
        self.held = {key: held for key, held in self.held.items() if held != handle}


@pytest.fixture
def windows(monkeypatch) -> FakeMsvcrt:
    """This process as Windows sees it, for the batch: no ``fcntl``, ``os.pread`` or
    ``os.pwrite``, ``msvcrt`` locks, and no deleting a file that is open."""
    msvcrt = FakeMsvcrt()
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "fcntl", None)
    monkeypatch.setitem(sys.modules, "msvcrt", msvcrt)
    monkeypatch.delattr(os, "pread")
    monkeypatch.delattr(os, "pwrite")
    close, unlink = os.close, os.unlink

    def closing(handle):
        msvcrt.closed(handle)
        close(handle)

    def refusing_open(path, *, dir_fd=None):
        opened = {os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
        if dir_fd is None and os.path.realpath(path) in opened:
            raise PermissionError(errno.EACCES, "in use by another process (simulated)", path)
        unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "close", closing)
    monkeypatch.setattr(os, "unlink", refusing_open)
    return msvcrt


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")


@needs_proc
def test_windows_lock_refuses_a_second_run_and_names_the_owner(tmp_path, windows):
    out = tmp_path / "new" / "out"
    with lock_output_folder(out):
        owner = (out / LOCK_FILE).read_text()
        assert owner.startswith(f"process {os.getpid()} on ")
        assert len(owner.encode()) < WINDOWS_LOCK_BYTE  # the locked byte is past the owner
        assert [offset for _, _, offset in windows.held] == [WINDOWS_LOCK_BYTE]
        with pytest.raises(BadParameter, match=r"is in use by another batch run "
                                               rf"\({owner.strip()}\)"):
            with lock_output_folder(out):
                pass
    assert not windows.held
    assert not (tmp_path / "new").exists()  # made for the lock, removed with it (once closed)
    with lock_output_folder(out):  # free again
        pass


@needs_proc
def test_windows_batch_stopped_by_a_usage_error_prints_one_line(tmp_path, capsys, windows):
    (tmp_path / "empty").mkdir()
    _, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    code, err = batch(capsys, tmp_path / "empty", seeds, out)
    assert code == 2
    assert err.startswith(f"error: no images in {tmp_path / 'empty'}")
    assert err.count("\n") == 1
    assert not out.exists()


@needs_proc
def test_windows_batch_traces(tmp_path, capsys, windows):
    images, seeds = make_folder(tmp_path)
    code, err = batch(capsys, images, seeds, tmp_path / "out")
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {record["status"] for record in summary["images"]} == {"ok"}


def test_an_interrupt_survives_a_calls_folder_that_cannot_be_removed(tmp_path, monkeypatch):
    """On Windows a worker may hold its mark file open as Ctrl-C removes the calls folder:
    the KeyboardInterrupt, not the cleanup's error, leaves :func:`run_tasks`."""

    def refusing(cls, name, ignore_errors=False):
        if not ignore_errors:
            raise PermissionError(errno.EACCES, "held open by a worker (simulated)", name)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tempfile.TemporaryDirectory, "_rmtree", classmethod(refusing))
    images, seeds = make_folder(tmp_path)
    plan = plan_batch(images, seeds, tmp_path / "out")
    with ThreadPoolExecutor(2) as executor:
        outcomes = run_tasks(plan.tasks, CpuBackend, executor, 1, CpuBackend)
        next(outcomes)
        with pytest.raises(KeyboardInterrupt):
            outcomes.throw(KeyboardInterrupt)


@pytest.mark.parametrize(("platform", "cores", "cpu", "gpu"),
                         [("win32", 256, 61, 61), ("win32", 8, 8, 4), ("linux", 256, 256, 128)])
def test_default_workers_stay_within_the_windows_limit(monkeypatch, platform, cores, cpu, gpu):
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(cli.batch_cmd, "CORES", cores)
    assert cli.batch_cmd.local_workers(None, 1000, 0) == cpu
    assert cli.batch_cmd.local_workers(None, 1000, 16) == gpu  # 8 per GPU, one per 2 cores
    assert cli.batch_cmd.local_workers(None, 3, 0) == 3  # never more than the images


def test_more_workers_than_windows_allows_is_a_usage_error(tmp_path, capsys, monkeypatch):
    images, seeds = make_folder(tmp_path)
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(SystemExit) as stopped:
        cli_main(["batch", str(images), "--seeds", str(seeds), "-o", str(tmp_path / "out"),
                  "--workers", "62"])
    assert stopped.value.code == 2
    assert "at most 61 local worker processes on Windows, got 62" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert cli.batch_cmd.worker_count("61") == 61
    monkeypatch.setattr(sys, "platform", "linux")
    assert cli.batch_cmd.worker_count("62") == 62


@pytest.mark.parametrize(("platform", "name", "expected"), [
    ("linux", "a.png", "a.png"),
    ("linux", "A.PNG", None),
    ("win32", "A.PNG", "a.png"),
    ("darwin", "A.png", "a.png"),
    ("darwin", "B.PNG", None),  # b.png and B.png: never two images for one seed
    ("darwin", "B.png", "B.png"),  # an exact match first
    ("win32", "c.png", None),
])
def test_a_seed_names_its_image_but_for_case_where_folders_ignore_case(monkeypatch, platform,
                                                                       name, expected):
    monkeypatch.setattr(sys, "platform", platform)
    assert image_named(name, ["a.png", "b.png", "B.png"]) == expected


def test_plan_matches_a_seed_image_name_in_another_case_on_macos(tmp_path, monkeypatch):
    images, seeds = make_folder(tmp_path, names=("a.png",))
    seeds.write_text(seeds.read_text().replace('"a.png"', '"A.PNG"'))
    monkeypatch.setattr(sys, "platform", "darwin")
    plan = plan_batch(images, seeds, tmp_path / "out")
    assert [(task.image, [seed.image for seed in task.seeds]) for task in plan.tasks] == [
        (str(images / "a.png"), ["a.png"])]
    assert not plan.seed_failures
