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
