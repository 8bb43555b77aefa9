"""The tree stays clean under the project's ruff configuration (pyproject.toml)."""

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(ROOT / ".venv" / "bin" / "ruff")
    if not shutil.which(ruff):
        pytest.skip("ruff is not installed")
    result = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
