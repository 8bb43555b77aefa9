"""Every score kind is either computed on the device or declared host-only (no GPU needed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.scores import SCORE_KINDS, get_score_kind
from gpu.kinds import DEVICE_KINDS, HOST_ONLY_KINDS, device_kind


@pytest.mark.parametrize("name", sorted(SCORE_KINDS))
def test_every_score_kind_is_on_the_device_or_declared_host_only(name):
    kind = SCORE_KINDS[name]
    implementation, reason = device_kind(kind)
    if name in HOST_ONLY_KINDS:
        assert implementation is None
        assert reason == HOST_ONLY_KINDS[name]
    else:
        assert name in DEVICE_KINDS, f"score kind {name!r} is neither on the device nor " \
                                     "declared host-only in gpu/kinds.py"
        assert implementation is DEVICE_KINDS[name], reason


def test_the_lists_name_only_registered_kinds_once():
    assert set(DEVICE_KINDS).isdisjoint(HOST_ONLY_KINDS)
    assert set(DEVICE_KINDS) | set(HOST_ONLY_KINDS) <= set(SCORE_KINDS)
    assert {"surface", "centre", "cross", "sine"} <= set(DEVICE_KINDS)


def test_a_kind_whose_planes_changed_gets_host_planes():
    changed = dataclasses.replace(get_score_kind("surface"), produces="something else")
    implementation, reason = device_kind(changed)
    assert implementation is None
    assert "now produces 'something else'" in reason


def test_a_renamed_kind_gets_host_planes():
    renamed = dataclasses.replace(get_score_kind("centre"), name="centre2")
    implementation, reason = device_kind(renamed)
    assert implementation is None
    assert "'centre2' has no device implementation" in reason


def test_device_colour_models_equal_the_cpus_exactly():
    """The colour models the device's similarity kernel reads (gpu/evidence.py, whole patches
    of many windows reduced together, clipped ones alone) are core.scores' values exactly."""
    from core import scores
    from gpu.evidence import _colour_models

    rng = np.random.default_rng(0)
    windows = []
    for bands in (1, 3, 4, 3):
        for _ in range(50):  # reflectances, 8-bit and 16-bit values
            pixels = (rng.random((30, 40, bands)) * rng.choice([1.0, 255.0, 65535.0])
                      * rng.uniform(0.1, 1.2)).astype(np.float32)
            windows.append((pixels, rng.uniform((0, 0), (39, 29)), rng.uniform(3, 25, 2)))
    models = np.zeros((len(windows), 2 + 2 * 16))
    _colour_models(windows, models)
    for k, (pixels, a, b) in enumerate(windows):
        bands = pixels.shape[2]
        for e, point in enumerate((a, b)):
            patch = scores.patch_colours(pixels, point, scores.PATCH_RADIUS)
            assert models[k, e] == float(patch.std(axis=0).mean())
            np.testing.assert_array_equal(models[k, 2 + e * bands:2 + (e + 1) * bands],
                                          patch.mean(axis=0))
