"""Imported by the process that local batch workers are forked from
(:data:`core.batch.WORKER_MODULES`): it loads the corridor geometry's compiled functions
(numba's on-disk cache, or compiles them once) so that every forked worker starts with them
instead of loading them for its first image (about a quarter of a second each). Only
single-threaded functions run here: a fork server must start no threads.
"""

from __future__ import annotations

import numpy as np

from core.guides import admissible_windows, build_corridor, check_max_angle


def load_geometry() -> None:
    """Run the corridor geometry once on a small corridor (its compiled functions load)."""
    corridor = build_corridor(np.array([0.0, 0.0]), np.array([40.0, 5.0]), 3, 11, 10.0)
    admissible_windows(corridor, check_max_angle(60.0))


load_geometry()
