"""Batch memory: the processes that trace at once share the budget, a container's limit counts
as the memory available, and an image is read ahead only if its decoding is small."""

from __future__ import annotations

import imageio.v3 as iio
import numpy as np
import pytest

import core.resources
from core.batch import READ_AHEAD_BYTES, ImageTask, _read_ahead, local_executor, stop_local_executor
from core.resources import (
    BUDGET_VARIABLE,
    available_memory,
    check_decode_memory,
    decode_memory,
    memory_budget,
    share_memory,
)
from core.tracer import TraceParams
from tests.conftest import SAMPLE_IMAGE

GIB = 2**30


def fake_system(tmp_path, monkeypatch, cgroups: str, files: dict[str, str],
                available: int = 20 * GIB) -> None:
    """``/proc/meminfo`` saying ``available``, ``/proc/self/cgroup`` holding ``cgroups`` and
    the cgroup files ``files`` (path under the cgroup root → content)."""
    (tmp_path / "meminfo").write_text(f"MemAvailable: {available // 1024} kB\n")
    (tmp_path / "cgroup").write_text(cgroups)
    for path, content in files.items():
        (tmp_path / "fs" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / path).write_text(content)
    monkeypatch.setattr(core.resources, "MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(core.resources, "PROC_CGROUP", str(tmp_path / "cgroup"))
    monkeypatch.setattr(core.resources, "CGROUP_ROOT", str(tmp_path / "fs"))


def test_a_cgroup_v2_limit_bounds_the_memory_available(tmp_path, monkeypatch):
    """A 3 GiB container (its limit one level up) using 2 GiB, half of it file cache the kernel
    can drop, on a machine with 20 GiB available: 2 GiB are."""
    fake_system(tmp_path, monkeypatch, "0::/box/job\n", {
        "box/memory.max": f"{3 * GIB}\n", "box/memory.current": f"{2 * GIB}\n",
        "box/memory.stat": f"anon {GIB}\ninactive_file {GIB}\n",
        "box/job/memory.max": "max\n", "box/job/memory.current": f"{2 * GIB}\n"})
    assert available_memory() == 2 * GIB
    fake_system(tmp_path, monkeypatch, "0::/box/job\n", {"box/memory.max": "max\n"})
    assert available_memory() == 20 * GIB  # no limit: the machine's


def test_a_cgroup_v1_limit_bounds_the_memory_available(tmp_path, monkeypatch):
    """A container that sees its own cgroup as the root (its path in /proc/self/cgroup is the
    host's), limited to 1 GiB of which 256 MiB are used."""
    unlimited = 2**63 - 4096
    fake_system(tmp_path, monkeypatch, "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n", {
        "memory/memory.limit_in_bytes": f"{GIB}\n",
        "memory/memory.usage_in_bytes": f"{GIB // 4}\n",
        "memory/memory.stat": "total_inactive_file 0\n"})
    assert available_memory() == GIB - GIB // 4
    fake_system(tmp_path, monkeypatch, "4:memory:/\n", {
        "memory/memory.limit_in_bytes": f"{unlimited}\n"})
    assert available_memory() == 20 * GIB


def test_processes_that_share_memory_plan_with_their_part(monkeypatch):
    monkeypatch.setenv(BUDGET_VARIABLE, "3G")
    alone = share_memory(3, None)
    try:
        assert memory_budget() == (GIB, f"{BUDGET_VARIABLE}=3G shared by 3 processes")
        monkeypatch.delenv(BUDGET_VARIABLE)
        monkeypatch.setattr(core.resources, "available_memory", lambda: 12 * GIB)
        share_memory(3, 9 * GIB)  # 9 GiB as they started: 3 each, and 12 are available now
        assert memory_budget(0.5) == (int(1.5 * GIB), "50% of the 3.0 GiB available to each "
                                      f"of 3 processes; set {BUDGET_VARIABLE} to change it")
        monkeypatch.setattr(core.resources, "available_memory", lambda: 2 * GIB)
        assert memory_budget(0.5)[0] == GIB  # less is left now than its part
    finally:
        share_memory(*alone)
    assert memory_budget(0.5)[0] == GIB


def test_a_local_pool_shares_the_budget_with_this_process():
    """Two workers and this process: each plans with a third of the memory available."""
    pool = local_executor(2)
    try:
        assert "to each of 3 processes" in memory_budget()[1]
        assert "to each of 3 processes" in pool.submit(memory_budget).result(timeout=60)[1]
    finally:
        stop_local_executor(pool, False)
    assert "processes" not in memory_budget()[1]


def test_only_images_small_to_decode_are_read_ahead(tmp_path):
    """A 4000 × 4000 RGB PNG of one colour is a small file (~50 KiB) but ~300 MiB to decode."""
    large = tmp_path / "large.png"
    iio.imwrite(large, np.zeros((4000, 4000, 3), np.uint8))
    assert decode_memory(4000, 4000, 3) > READ_AHEAD_BYTES > large.stat().st_size
    task = ImageTask(str(large), (), TraceParams())
    assert not _read_ahead(task)
    assert _read_ahead(ImageTask(str(SAMPLE_IMAGE), (), TraceParams()))
    assert not _read_ahead(ImageTask(str(tmp_path / "missing.png"), (), TraceParams()))


@pytest.mark.parametrize("name", ["scan.tif", "scan.jp2"])
def test_windowed_images_are_read_ahead_whatever_their_size(name):
    assert _read_ahead(ImageTask(name, (), TraceParams()))


def test_small_plans_of_processes_sharing_memory_pass_unasked(monkeypatch):
    """Plans that all the processes sharing the budget afford together without asking are
    not held to it (the memory available is not read for each of a batch's segments)."""
    asked = []
    monkeypatch.delenv(BUDGET_VARIABLE, raising=False)
    monkeypatch.setattr(core.resources, "available_memory", lambda: asked.append(1) or 64 * GIB)
    alone = share_memory(3, None)
    try:
        check_decode_memory("small.png", 1000, 1000, 4)  # three of it: under 256 MiB
        assert not asked
        check_decode_memory("large.png", 4000, 4000, 4)
        assert asked
    finally:
        share_memory(*alone)
