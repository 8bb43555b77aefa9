"""Every CUDA source of ``gpu/`` compiles with nvcc (runs wherever nvcc is on PATH, GPU or not)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parent.parent / "gpu"
SOURCES = sorted(GPU_DIR.glob("*.cu"))


def test_cuda_sources_exist():
    from gpu.kernels import CUDA_SOURCES

    assert sorted(CUDA_SOURCES) == [path.name for path in SOURCES]


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.name)
def test_cuda_source_compiles(source, tmp_path):
    from gpu.kernels import source_options

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    result = subprocess.run(
        [nvcc, "-cubin", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings",
         *source_options(source.name),
         "-o", str(tmp_path / f"{source.stem}.cubin"), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"nvcc failed on {source.name}:\n{result.stderr}"
    assert (tmp_path / f"{source.stem}.cubin").stat().st_size > 0


def test_evidence_source_takes_the_hosts_constants():
    """evidence.cu holds no copy of the host's constants: each is defined at compile time with
    core's value, and the source uses every one of them."""
    from core import scores, surface
    from gpu.kernels import evidence_constants, source, source_options

    constants = evidence_constants()
    assert constants == {"PATCH_RADIUS": scores.PATCH_RADIUS,
                         "SPREAD_FLOOR": scores.SPREAD_FLOOR,
                         "RELATIVE_FLOOR": scores.RELATIVE_FLOOR,
                         "ABSOLUTE_FLOOR": scores.ABSOLUTE_FLOOR,
                         "STRETCH_SPAN_FLOOR": surface.STRETCH_SPAN_FLOOR}
    options = source_options("evidence.cu")
    for name, value in constants.items():
        assert f"-D{name}={value!r}" in options
        assert float(repr(value)) == value
    text = source("evidence.cu")
    code = "\n".join(line.split("//")[0] for line in text.splitlines())
    for name in constants:
        assert name in code, f"evidence.cu does not use {name}"
        assert f"#define {name}" not in code
    for literal in ("0.04", "1e-6", "1e-18"):
        assert literal not in code, f"evidence.cu still holds the literal {literal}"
    assert source_options("dp.cu") == []


def test_kernel_cache_is_pycudas_own_where_it_can_be_written(tmp_path, monkeypatch):
    from gpu.kernels import kernel_cache_dir

    monkeypatch.setenv("PYCUDA_CACHE_DIR", str(tmp_path / "cache"))
    assert kernel_cache_dir() is None  # pycuda's own choice, the folder now made
    assert (tmp_path / "cache").is_dir()


def test_an_unwritable_kernel_cache_falls_back_to_the_temporary_folder(tmp_path, monkeypatch):
    """A cache folder that cannot be made (here: under a file) would fail every kernel build in
    pycuda, and the GPU would read as unavailable; the kernels are cached elsewhere instead."""
    from gpu.kernels import kernel_cache_dir

    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("PYCUDA_CACHE_DIR", str(tmp_path / "a_file" / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / "tmp").mkdir()
    fallback = kernel_cache_dir()
    assert isinstance(fallback, str)
    assert Path(fallback).parent == tmp_path / "tmp"
    assert Path(fallback).is_dir()


def test_no_kernel_cache_where_no_folder_can_be_written(tmp_path, monkeypatch):
    from gpu.kernels import kernel_cache_dir

    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("PYCUDA_CACHE_DIR", str(tmp_path / "a_file" / "cache"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "a_file"))
    assert kernel_cache_dir() is False


def test_a_disabled_kernel_cache_is_left_to_pycuda(tmp_path, monkeypatch):
    from gpu.kernels import kernel_cache_dir

    monkeypatch.setenv("PYCUDA_DISABLE_CACHE", "1")
    monkeypatch.setenv("PYCUDA_CACHE_DIR", str(tmp_path / "never_made"))
    assert kernel_cache_dir() is None
    assert not (tmp_path / "never_made").exists()
