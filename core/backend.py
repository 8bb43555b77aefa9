"""What a tracer backend is, and the two CPU backends.

A backend turns evidence on a corridor into the optimal guide indices. ``core`` defines the
interface and the CPU implementations; ``gpu`` adds the CUDA one; callers pick one through
``gpu.select.choose_backend`` (core itself never imports ``gpu``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from core.dp import DPProblem, DPSolution, solve_fast, solve_reference
from core.errors import BadParameter, TraceError
from core.gradient import gaussian_gradient
from core.guides import Corridor, Windows
from core.links import (
    bilinear_coefficients,
    integrate_links,
    integrate_links_reference,
    useful_links,
)
from core.scores import Evidence, ScoreInputs, ScoreKind, pad_each


@dataclass(frozen=True)
class BackendSolution:
    """indices (m,), total score, link_scores (m+1,) along the path, timings_ms per stage."""

    indices: np.ndarray
    score: float
    link_scores: np.ndarray
    timings_ms: dict = field(default_factory=dict)


class TracerBackend:
    """Base class: link scores for every stage, then the DP. Subclasses may fuse both."""

    name = "abstract"
    description = "abstract backend"

    def score_planes(self, kind: ScoreKind, pixels: np.ndarray, a: np.ndarray, b: np.ndarray,
                     sigma: float, ground_resolution: float | None = None
                     ) -> tuple[np.ndarray, float]:
        """Evidence planes of ``kind`` over a window: ``(planes (P, rows, cols), tau)``.

        ``pixels`` is the window (rows, cols, bands), float32; a, b are the endpoints (x, y) in
        window coordinates; σ the gradient scale; ``ground_resolution`` the imagery's metres per
        pixel where known. Computed on the CPU here; a backend may compute the kinds it knows
        on its device (same values within float32 rounding).
        """
        gx, gy = gaussian_gradient(pixels, sigma) if kind.uses_gradient else (None, None)
        return kind.planes(ScoreInputs(pixels, gx, gy, a, b, ground_resolution))

    def score_planes_many(self, kind: ScoreKind, windows: list, sigma: float,
                          deferred: bool = False, pads: list | None = None,
                          ground_resolution: float | None = None
                          ) -> list[tuple[np.ndarray, float]]:
        """:meth:`score_planes` of every (pixels, a, b) of ``windows``: a list of
        ``(planes (P, rows', cols'), tau)``. A backend may compute them together.

        ``pads``, one per window: ((top, bottom), (left, right)) rows and columns added around
        its planes (:func:`core.scores.pad_planes`; rows' = rows + top + bottom, likewise
        cols'). With ``deferred``, a backend whose device keeps the planes may return arrays
        whose values it writes only by the end of its next :meth:`trace_many` (the host then
        goes on while the device computes them): read them after that call, not before.
        """
        return pad_each([self.score_planes(kind, pixels, a, b, sigma, ground_resolution)
                         for pixels, a, b in windows], pads, kind.sampler)

    def link_scores(self, evidence: Evidence, corridor: Corridor) -> list[np.ndarray]:
        """links[t] of shape (n_t, n_{t+1}) for t = 0..m."""
        raise NotImplementedError

    def trace_link_scores(self, evidence: Evidence, corridor: Corridor,
                          windows: Windows) -> list[np.ndarray]:
        """The link scores :meth:`trace` solves: :meth:`link_scores` here; a backend may set
        to −inf those the DP's result does not read (:func:`core.links.useful_links`)."""
        return self.link_scores(evidence, corridor)

    def solve(self, problem: DPProblem) -> DPSolution:
        """The optimal path of a DP problem whose link scores are in place.

        Parameters
        ----------
        problem : DPProblem
            Corridor, admissible windows and link scores (m + 1 arrays (n_t, n_{t+1})).

        Returns
        -------
        DPSolution
            Indices (m,) of the chosen point on each guide and the total score.
        """
        raise NotImplementedError

    def trace_many(self, problems: list) -> list:
        """:meth:`trace` of every (evidence, corridor, windows) of ``problems``: per problem
        its BackendSolution, or the TraceError it ended in (a NoAdmissiblePath, as a rule). A
        backend may queue them together."""
        solutions = []
        for evidence, corridor, windows in problems:
            try:
                solutions.append(self.trace(evidence, corridor, windows))
            except TraceError as exc:
                solutions.append(exc)
        return solutions

    def time_dp(self, problem: DPProblem, repeats: int) -> list[float]:
        """Milliseconds of ``repeats`` runs of the DP alone (link scores already in place)."""
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            self.solve(problem)
            times.append(1e3 * (time.perf_counter() - start))
        return times

    def time_trace(self, evidence: Evidence, corridor: Corridor, windows: Windows,
                   repeats: int) -> list[float]:
        """Milliseconds of ``repeats`` runs of link scores + DP + backtracking."""
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            self.trace(evidence, corridor, windows)
            times.append(1e3 * (time.perf_counter() - start))
        return times

    def trace(self, evidence: Evidence, corridor: Corridor, windows: Windows) -> BackendSolution:
        """Link scores, DP and backtracking: the optimal path through a corridor.

        Parameters
        ----------
        evidence : Evidence
            Planes (P, rows, cols) over the corridor's window.
        corridor : Corridor
            Endpoints and m guides of n points each.
        windows : Windows
            Admissible links between consecutive guides.

        Returns
        -------
        BackendSolution
            Indices (m,), total score, link scores (m + 1,) along the path and timings (ms).
        """
        start = time.perf_counter()
        links = self.trace_link_scores(evidence, corridor, windows)
        middle = time.perf_counter()
        solution = self.solve(DPProblem(corridor, windows, links))
        end = time.perf_counter()
        nodes = [0, *solution.indices.tolist(), 0]
        along = np.array([links[t][nodes[t], nodes[t + 1]] for t in range(len(links))])
        return BackendSolution(solution.indices, solution.score, along,
                               {"link_scores": 1e3 * (middle - start), "dp": 1e3 * (end - middle)})


class CpuBackend(TracerBackend):
    """Compiled (numba) link integration and sliding-window DP."""

    name = "cpu"

    @property
    def description(self) -> str:
        """One line naming the backend and its thread count."""
        import numba

        threads = numba.get_num_threads()
        return f"CPU (numba, {threads} thread{'s' if threads != 1 else ''})"

    def link_scores(self, evidence, corridor):
        """links[t] (n_t, n_{t+1}) from :func:`core.links.integrate_links`, all stages at once."""
        return self._link_scores(evidence, corridor, (None, None, None))

    def trace_link_scores(self, evidence, corridor, windows):
        """:meth:`link_scores` of the :func:`core.links.useful_links` alone, the others −inf
        (about a quarter of the links of a click are of no use)."""
        return self._link_scores(evidence, corridor, useful_links(windows))

    @staticmethod
    def _link_scores(evidence, corridor, useful):
        """links[t] of the links ``useful`` (first, between, last) marks (None: all)."""
        coefficients = bilinear_coefficients(evidence)
        guides = corridor.guide_points
        first, between, last = useful
        return [integrate_links(evidence, corridor.a[None], guides[0], coefficients, first),
                *integrate_links(evidence, guides[:-1], guides[1:], coefficients, between),
                integrate_links(evidence, guides[-1], corridor.b[None], coefficients, last)]

    def solve(self, problem):
        """The sliding-window DP (:func:`core.dp.solve_fast`)."""
        return solve_fast(problem)


#: Most DP states, (m + 1)·d², the reference backend takes on (some 20 s; its link scores
#: cost ~40 µs a state, its DP O(d³) per stage).
REFERENCE_MAX_STATES = 500_000


class ReferenceBackend(TracerBackend):
    """Plain numpy, O(d³) per stage: the readable twin the tests hold the others to."""

    name = "reference"
    description = "CPU reference (numpy)"

    def trace(self, evidence, corridor, windows):
        """:meth:`TracerBackend.trace`, refused (BadParameter) above
        :data:`REFERENCE_MAX_STATES`."""
        states = (corridor.guides + 1) * corridor.points ** 2
        if states > REFERENCE_MAX_STATES:
            raise BadParameter(
                f"the reference backend would search {states:,} states ({corridor.guides} "
                f"guides × {corridor.points} points per guide), over its {REFERENCE_MAX_STATES:,}"
                ": it is the slow numpy twin the others are checked against (minutes at this "
                "size); use the default backend (--backend auto or cpu)")
        return super().trace(evidence, corridor, windows)

    def link_scores(self, evidence, corridor):
        """links[t] (n_t, n_{t+1}) from :func:`core.links.integrate_links_reference`."""
        nodes = corridor.node_sets()
        return [integrate_links_reference(evidence, nodes[t], nodes[t + 1])
                for t in range(len(nodes) - 1)]

    def solve(self, problem):
        """The O(d³)-per-stage DP (:func:`core.dp.solve_reference`)."""
        return solve_reference(problem)
