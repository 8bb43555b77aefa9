"""Which score kinds the device computes, keyed by kind name.

Every kind of :data:`core.scores.SCORE_KINDS` is either in :data:`DEVICE_KINDS`, with the
``ScoreKind.produces`` text it implements, or in :data:`HOST_ONLY_KINDS`, with the reason its
planes are made on the host (tests/test_gpu_kinds.py checks this without a GPU). A kind whose
``produces`` no longer matches its device implementation (its planes were changed in core) gets
host planes until the device catches up; so does a kind registered later and not listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.scores import CROSS, SINE, ScoreKind, pad_each

#: What core's ``centre`` kind says it produces (core/scores.py). The texts are copied, not
#: imported, on purpose: a change of core's text must fail this registry's check until the
#: device implements it.
_CENTRED = ("1 plane: -(1 - G_w * m + LENGTH_COST), G_w a Gaussian of σ = CENTRE_BLUR × the width "
            "of m > 0.5 across a and b (≥ 1 px, truncate 3), m = ")


@dataclass(frozen=True)
class DeviceKind:
    """A score kind's planes on the device.

    Attributes
    ----------
    produces : str
        The ``ScoreKind.produces`` this implementation computes.
    needs_model : bool
        Whether it runs the surface model on the device.
    centred : bool
        Whether it ends with the centring blur (needs :func:`gpu.evidence.centre_supported`).
    planes : callable
        ``planes(evidence, windows, sigma, network, deferred, pads, ground_resolution) ->
        [(planes (P, rows',
        cols') float32, tau), ...]``, one per (pixels (rows, cols, bands) float32, a (2,),
        b (2,)) of ``windows``, with ``evidence`` a :class:`gpu.evidence.DeviceEvidence` and
        ``network`` the :class:`gpu.network.DeviceNetwork` (None unless ``needs_model``),
        padded by ``pads`` (:meth:`core.backend.TracerBackend.score_planes_many`), the
        imagery's ``ground_resolution`` (metres per pixel or None) choosing the surface model's
        resolution; with ``deferred``, the planes may be filled at the tracer's next
        synchronisation.
    """

    produces: str
    planes: Callable
    needs_model: bool = False
    centred: bool = False


def _centre(evidence, windows, sigma, network, deferred, pads, ground_resolution):
    return [(planes, 0.0) for planes in evidence.centre_many(windows, deferred, pads)]


def _surface(evidence, windows, sigma, network, deferred, pads, ground_resolution):
    return [(planes, 0.0) for planes in evidence.surface_many(windows, network, deferred,
                                                               pads, ground_resolution)]


def _gradient(evidence, windows, sigma, network, deferred, pads, ground_resolution):
    return pad_each([(evidence.gradient(pixels, float(sigma)), 0.0) for pixels, _, _ in windows],
                    pads, CROSS)


def _gradient_median(evidence, windows, sigma, network, deferred, pads, ground_resolution):
    made = _gradient(evidence, windows, sigma, network, False, None, ground_resolution)
    return pad_each([(planes, float(np.median(np.hypot(planes[0], planes[1]))))
                     for planes, _ in made], pads, SINE)


DEVICE_KINDS: dict[str, DeviceKind] = {
    "surface": DeviceKind(
        "1 plane: -(1 - max(O, CENTRE_WEIGHT · G_w * m, P) + LENGTH_COST), O = offset_ridge "
        "of m (OPEN_WIDTH, OFFSET_TOLERANCE), G_w a Gaussian of σ = CENTRE_BLUR × the width of "
        "m > 0.5 across a and b (≥ 1 px, truncate 3), m = √(p'·s), s = endpoint_similarity, "
        "p' = t·p + (1 − t)·s, (p, P) = surface_model (surface, path), t = min(1, mean p in the "
        "endpoint patches / MODEL_TRUST)",
        _surface, needs_model=True, centred=True),
    "centre": DeviceKind(_CENTRED + "endpoint_similarity", _centre, centred=True),
    "cross": DeviceKind("2 planes: gx, gy; tau 0", _gradient),
    "sine": DeviceKind("2 planes: gx, gy; tau = median |∇I|", _gradient_median),
}

HOST_ONLY_KINDS: dict[str, str] = {
    "colour": "a median colour and one blur: cheap on the host, rarely used",
    "flat": "rarely used; its planes are one step from the gradient's",
    "evidence": "the planes are the user's raster itself, checked on the host",
}


def device_kind(kind: ScoreKind) -> tuple[DeviceKind | None, str]:
    """The device implementation of ``kind``, or None and why its planes come from the host."""
    implementation = DEVICE_KINDS.get(kind.name)
    if implementation is None:
        return None, HOST_ONLY_KINDS.get(kind.name, f"score kind {kind.name!r} has no device "
                                                     "implementation")
    if implementation.produces != kind.produces:
        return None, (f"score kind {kind.name!r} now produces {kind.produces!r}; the device "
                      f"implements {implementation.produces!r}")
    return implementation, ""
