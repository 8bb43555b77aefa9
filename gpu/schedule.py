"""The bidirectional schedule of the GPU DP: which step runs when, on which data layout.

Node sets G_0 = {a}, G_1..G_m, G_{m+1} = {b} have sizes n_0..n_{m+1}; link stage t joins G_t to
G_{t+1}. The DP runs forward from a and backward from b at once and meets at the middle guide c:

* forward step t = 1..c-1:   F_t[j, k] = L_t[j, k] + max_{i ∈ window_t[j, k]} F_{t-1}[i, j]
* backward step t = m-1..c:  B_t[j, k] = L_t[j, k] + max_{l : j ∈ window_{t+1}[k, l]} B_{t+1}[k, l]
* merge at c:                total = max_{j, k} B_c[j, k] + max_{i ∈ window_c[j, k]} F_{c-1}[i, j]

with F_0 = L_0 and B_m = L_m; window_s is the turn window at node set s (``Windows.lo[s-1]``).
Every step is "out[o, r] = link[r, o] + max over a window of prev[r, :]" with r the shared node
(see ``dp.cu``): forward r = j, o = k, the result stored transposed (F_t^T, rows k); backward
r = k, o = j, which needs stage t's links transposed (L_t^T, rows k) and, per turn, the windows
inverted (for each (k, j) the interval of l). One round launches one forward and one backward
step together; max(c-1, m-c) rounds, then the merge.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class StepPlan:
    """One DP step.

    Attributes
    ----------
    kind : str
        ``"forward"``, ``"backward"`` or ``"merge"``.
    stage : int
        Forward/backward: the link stage t whose scores the step adds. Merge: c.
    turn : int
        Node set s whose turn windows apply (``Windows.lo[s - 1]``).
    n_r, n_o, n_p : int
        Sizes of the shared node set, the far node set of the new link and of the old link.
    """

    kind: str
    stage: int
    turn: int
    n_r: int
    n_o: int
    n_p: int


@dataclass(frozen=True)
class Schedule:
    """The bidirectional schedule for node-set sizes ``sizes`` = (n_0, ..., n_{m+1})."""

    sizes: tuple[int, ...]

    @property
    def guides(self) -> int:
        """m."""
        return len(self.sizes) - 2

    @cached_property
    def middle(self) -> int:
        """c, the guide where the halves meet: c-1 forward and m-c backward steps."""
        return (self.guides + 1) // 2

    def transposed(self, stage: int) -> bool:
        """Whether link stage ``stage`` is stored transposed, (n_{t+1}, n_t), on the device."""
        return stage >= self.middle

    def forward(self, t: int) -> StepPlan:
        """Forward step t: paths ending on node set t extended by link stage t to node set t + 1."""
        n = self.sizes
        return StepPlan("forward", t, t, n[t], n[t + 1], n[t - 1])

    def backward(self, t: int) -> StepPlan:
        """Backward step t: paths starting on node set t + 1 extended back by link stage t."""
        n = self.sizes
        return StepPlan("backward", t, t + 1, n[t + 1], n[t], n[t + 2])

    @cached_property
    def rounds(self) -> list[list[StepPlan]]:
        """Steps launched together: round r holds forward step 1+r and backward step m-1-r."""
        m, c = self.guides, self.middle
        rounds = []
        for r in range(max(c - 1, m - c)):
            steps = []
            if 1 + r <= c - 1:
                steps.append(self.forward(1 + r))
            if m - 1 - r >= c:
                steps.append(self.backward(m - 1 - r))
            rounds.append(steps)
        return rounds

    @cached_property
    def merge(self) -> StepPlan:
        """The step where the forward and backward halves meet, on node set c."""
        n, c = self.sizes, self.middle
        return StepPlan("merge", c, c, n[c], n[c + 1], n[c - 1])

    @cached_property
    def reversed_turns(self) -> list[int]:
        """Turns whose windows the backward steps need inverted: s = c+1..m."""
        return list(range(self.middle + 1, self.guides + 1))
