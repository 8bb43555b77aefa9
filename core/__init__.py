"""Tracing engine: pure numpy/numba, no Qt and no CUDA.

Vocabulary used everywhere in the project:

* A point is ``(x, y) = (column, row)`` in pixel coordinates; integer values are pixel
  centres. Arrays are indexed ``[row, col]``.
* A polyline is an ``(N, 2)`` float64 array of such points.
* A corridor holds ``m`` guides of ``d`` points each, perpendicular to the segment [a, b]
  (see :mod:`core.guides`); a candidate trace picks one point per guide.
"""

import os as _os

# numba's OpenMP layer busy-waits between parallel regions by default, which on small shared
# machines costs milliseconds per DP stage; passive waiting measured 10-20× faster there.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def version() -> str:
    """The installed distribution's version (``unknown`` in an uninstalled checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("roadtracer")
    except PackageNotFoundError:
        return "unknown"
