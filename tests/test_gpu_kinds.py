"""Every score kind is either computed on the device or declared host-only (no GPU needed)."""

from __future__ import annotations

import dataclasses

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
