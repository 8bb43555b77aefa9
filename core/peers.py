"""The tools users pick today, run on the same clicks as our tracer (for ``main.py eval``).

* ``livewire``: OpenCV's ``segmentation.IntelligentScissorsMB`` with the tutorial's settings
  (Canny edge feature 32/100, gradient magnitude limit 200), map built from a, contour to b;
* ``route_flat``: scikit-image ``graph.route_through_array`` on cost |∇I| (flat-seeking);
* ``route_edge``: the same on cost 1/(1+|∇I|) (edge-seeking);
* ``straight``: the segment a→b.

|∇I| is our colour gradient (:func:`core.gradient.gaussian_gradient`, σ = 1.5 px) in 8-bit
grey-level units. Each peer sees the box around a and b grown by :func:`peer_margin` on every
side (more room than our corridor), so its latency is that of one click on a tile, not on the
whole image. OpenCV and scikit-image are optional (extra ``eval``) and imported on use;
:func:`check_libraries` says up front which one a run lacks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

import numpy as np

from core.errors import BadParameter
from core.gradient import gaussian_gradient
from core.raster import Raster

#: Gradient scale of the peers' cost images (px).
PEER_SIGMA = 1.5


def peer_margin(length: float) -> int:
    """Pixels added around the a–b box for a click distance ``length`` (px)."""
    return int(max(32.0, 0.5 * length))


def _window(raster: Raster, a: np.ndarray, b: np.ndarray):
    """Pixels around a and b, shape (rows, cols, bands), and the window origin (col0, row0)."""
    margin = peer_margin(float(np.hypot(*(b - a))))
    col0 = max(int(np.floor(min(a[0], b[0]))) - margin, 0)
    row0 = max(int(np.floor(min(a[1], b[1]))) - margin, 0)
    col1 = min(int(np.ceil(max(a[0], b[0]))) + margin + 1, raster.width)
    row1 = min(int(np.ceil(max(a[1], b[1]))) + margin + 1, raster.height)
    return raster.read_window(row0, row1, col0, col1), np.array([col0, row0])


def _local(point: np.ndarray, origin: np.ndarray) -> tuple[int, int]:
    """(col, row) of the pixel nearest to an image point, relative to a window origin."""
    col, row = np.rint(point - origin).astype(int)
    return int(col), int(row)


def _magnitude_8bit(pixels: np.ndarray) -> np.ndarray:
    """|∇I| in grey levels per px, shape (rows, cols)."""
    gx, gy = gaussian_gradient(pixels, PEER_SIGMA)
    return 255.0 * np.hypot(gx, gy)


def _route(cost: np.ndarray, a: np.ndarray, b: np.ndarray, origin: np.ndarray) -> np.ndarray:
    from skimage.graph import route_through_array

    (ca, ra), (cb, rb) = _local(a, origin), _local(b, origin)
    path, _ = route_through_array(cost, (ra, ca), (rb, cb), fully_connected=True, geometric=True)
    rows_cols = np.asarray(path, dtype=np.float64)
    return rows_cols[:, ::-1] + origin


def route_flat(raster: Raster, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Minimum-cost 8-connected path on cost |∇I| (+1e-6): shape (n, 2), (x, y)."""
    pixels, origin = _window(raster, a, b)
    return _route(_magnitude_8bit(pixels) + 1e-6, a, b, origin)


def route_edge(raster: Raster, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Minimum-cost 8-connected path on cost 1/(1+|∇I|): shape (n, 2), (x, y)."""
    pixels, origin = _window(raster, a, b)
    return _route(1.0 / (1.0 + _magnitude_8bit(pixels)), a, b, origin)


def livewire(raster: Raster, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """OpenCV Intelligent Scissors (tutorial settings) from a to b: shape (n, 2), (x, y)."""
    import cv2

    pixels, origin = _window(raster, a, b)
    image = np.clip(np.rint(255.0 * pixels), 0, 255).astype(np.uint8)
    if image.shape[2] == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    tool = cv2.segmentation.IntelligentScissorsMB()
    tool.setEdgeFeatureCannyParameters(32, 100)
    tool.setGradientMagnitudeMaxLimit(200)
    tool.applyImage(np.ascontiguousarray(image))
    tool.buildMap(_local(a, origin))
    contour = tool.getContour(_local(b, origin))
    return contour.reshape(-1, 2).astype(np.float64) + origin


def straight(raster: Raster, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The segment a→b: shape (2, 2)."""
    return np.vstack([a, b]).astype(np.float64)


#: Peer name → function(raster, a (2,), b (2,)) -> polyline (n, 2).
PEERS: dict[str, Callable[[Raster, np.ndarray, np.ndarray], np.ndarray]] = {
    "livewire": livewire,
    "route_flat": route_flat,
    "route_edge": route_edge,
    "straight": straight,
}

#: Peer name → (library, the module it is imported as); the ``eval`` extra installs them.
PEER_LIBRARIES = {
    "livewire": ("OpenCV", "cv2"),
    "route_flat": ("scikit-image", "skimage"),
    "route_edge": ("scikit-image", "skimage"),
}


def check_libraries(methods: Iterable[str]) -> None:
    """Import the library of every peer among ``methods`` (other names are let through).

    Raises
    ------
    BadParameter
        Naming the first peer whose library cannot be imported, the module and how to install
        it.
    """
    for method in methods:
        if method not in PEER_LIBRARIES:
            continue
        library, module = PEER_LIBRARIES[method]
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise BadParameter(f"method {method} needs {library} (module {module}), which cannot "
                               f"be imported ({exc}): install the eval extra, "
                               'pip install -e ".[eval]"') from None
