"""numba for the engine: every module that compiles kernels imports it from here.

Before numba runs its first compiled function it loads its array library
(``numba.np.arraymath``), which imports ``scipy.linalg`` only to learn whether BLAS is there
for ``np.dot`` and its kin inside compiled code. That import costs about 0.3 s of a cold
``roadtracer trace`` and no kernel of ours calls BLAS, so the library is loaded here with
``scipy.linalg`` hidden: numba then falls back to its own loops for those functions, and
``scipy.linalg`` imports as usual afterwards for whoever needs it.
"""

import sys

import numba


def _load_array_library_without_blas() -> None:
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return  # too late to matter, or already paid for
    sys.modules["scipy.linalg"] = None  # makes ``import scipy.linalg`` fail at once
    try:
        import numba.np.arraymath  # noqa: F401
    except ImportError:
        pass  # numba imports it again, as usual, before its first compiled call
    finally:
        del sys.modules["scipy.linalg"]


_load_array_library_without_blas()

__all__ = ["numba"]
