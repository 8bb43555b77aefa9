"""Shared fixtures; ``gpu`` tests skip with a reason when no CUDA device can be used."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_IMAGE = ROOT / "resources" / "sample" / "gsi_108.png"
SAMPLE_CASES = ROOT / "resources" / "sample" / "gsi_108_cases.json"


def _gpu_skip_reason() -> str | None:
    from core.errors import BackendUnavailable
    from gpu.select import gpu_backend

    try:
        gpu_backend()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = _gpu_skip_reason()
    if reason:
        marker = pytest.mark.skip(reason=f"no usable GPU: {reason}")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(marker)
