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
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    result = subprocess.run(
        [nvcc, "-cubin", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings",
         "-o", str(tmp_path / f"{source.stem}.cubin"), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"nvcc failed on {source.name}:\n{result.stderr}"
    assert (tmp_path / f"{source.stem}.cubin").stat().st_size > 0
