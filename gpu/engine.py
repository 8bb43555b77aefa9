"""Device buffers and kernel launches: link scores, the bidirectional DP, merge and backtracking.

A :class:`DeviceTracer` owns a memory pool, a stream and the kernels of one context. For a
problem shape it keeps a :class:`_Plan`: every device buffer of that shape, the step descriptor
table and the list of launches. Windows, corridor points, evidence and host link scores are
uploaded when they change (by object identity), so repeated traces of the same request keep
their data resident. Only the result (2m+4 doubles: total, per-link scores, node indices)
comes back to the host. Call every method inside ``context.active()``.
"""

from __future__ import annotations

import numpy as np

from core.errors import BadParameter
from core.scores import SCALAR
from gpu.kernels import LINK_STAGE_DTYPE, STEP_DTYPE, load_kernels
from gpu.schedule import Schedule, StepPlan

METHODS = ("auto", "rmq", "reduce")
#: Static shared memory a block may use without opting in.
_DEFAULT_SHARED = 48 * 1024
_SHORT_MAX = 32767


def rmq_shared_bytes(n_p: int) -> int:
    """Shared memory of ``dp_step_rmq`` for rows of ``n_p`` values: row + sparse index table."""
    levels = int(n_p).bit_length() - 1
    return 8 * n_p + 2 * n_p * levels


def _threads(n: int, cap: int) -> int:
    """A block size: ``n`` rounded up to whole warps, between 32 and ``cap``."""
    return int(min(cap, max(32, -(-n // 32) * 32)))


class DeviceTracer:
    """Runs traces on one context.

    Parameters
    ----------
    context : gpu.context.GpuContext
    method : {"auto", "rmq", "reduce"}
        DP step kernel: the sparse-table kernel, the paper's reduction kernel, or ``auto``: the
        sparse-table kernel whenever its shared memory fits the device, else the reduction.
    """

    def __init__(self, context, method: str = "auto"):
        if method not in METHODS:
            raise BadParameter(f"unknown GPU DP method {method!r}; choose from "
                               f"{', '.join(METHODS)}")
        import pycuda.driver as cuda
        from pycuda.tools import DeviceMemoryPool

        self.cuda = cuda
        self.context = context
        self.method = method
        self.kernels = load_kernels(context)
        self.pool = DeviceMemoryPool()
        self.stream = cuda.Stream()
        #: CUDA events for timing, made once (events, like buffers, belong to this context).
        self.events = [cuda.Event() for _ in range(5)]
        self.max_shared = context.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        self._rmq_shared_limit = _DEFAULT_SHARED
        self._plan: _Plan | None = None
        self._evidence = None
        self._evidence_buffer = None

    # -- memory -----------------------------------------------------------------------------

    def allocate(self, nbytes: int):
        """A pooled device allocation of at least ``nbytes`` bytes."""
        return self.pool.allocate(max(int(nbytes), 8))

    def upload(self, array: np.ndarray, buffer=None):
        """Copy ``array`` to ``buffer`` (allocated when None) on the stream; returns the buffer."""
        array = np.ascontiguousarray(array)
        if buffer is None:
            buffer = self.allocate(array.nbytes)
        self.cuda.memcpy_htod_async(buffer, array, self.stream)
        return buffer

    def release(self) -> None:
        """Drop every buffer and return the pool's memory to the device."""
        self._plan = None
        self._evidence = self._evidence_buffer = None
        self.stream.synchronize()
        self.pool.free_held()

    # -- problem data ----------------------------------------------------------------------

    def plan(self, sizes: tuple[int, ...]) -> _Plan:
        """The plan of node-set sizes ``sizes`` (n_0..n_{m+1}), reused while they stay."""
        if self._plan is None or self._plan.schedule.sizes != tuple(sizes):
            self._plan = None
            self._plan = _Plan(self, Schedule(tuple(int(n) for n in sizes)))
        return self._plan

    def use_rmq(self, schedule: Schedule) -> bool:
        """Whether the sparse-table step kernel serves every step of ``schedule``."""
        if self.method == "reduce":
            return False
        n_p = max(step.n_p for step in [*sum(schedule.rounds, []), schedule.merge])
        needed = rmq_shared_bytes(n_p)
        fits = n_p <= _SHORT_MAX and needed <= self.max_shared
        if not fits:
            if self.method == "rmq":
                raise BadParameter(f"the sparse-table DP needs {needed} bytes of shared memory "
                                   f"for {n_p} points; this device has {self.max_shared}")
            return False
        if needed > self._rmq_shared_limit:
            self.kernels.step_rmq.set_attribute(
                self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, self.max_shared)
            self._rmq_shared_limit = self.max_shared
        return True

    def bind_evidence(self, evidence) -> tuple:
        """Upload the evidence planes interleaved per pixel; returns the ``Image`` arguments."""
        if self._evidence is not evidence:
            planes = np.asarray(evidence.planes, dtype=np.float32)
            if planes.ndim != 3 or planes.shape[0] != (1 if evidence.sampler == SCALAR else 2):
                raise BadParameter(f"evidence planes of shape {planes.shape} do not suit "
                                   f"sampler {evidence.sampler}")
            if planes.shape[1] < 2 or planes.shape[2] < 2:
                raise BadParameter(f"evidence window {planes.shape[1:]} is smaller than 2×2")
            self._evidence_buffer = self.upload(np.moveaxis(planes, 0, -1))
            self._evidence = evidence
        rows, cols = evidence.planes.shape[1:]
        return (int(self._evidence_buffer), int(rows), int(cols), int(evidence.origin[0]),
                int(evidence.origin[1]), int(evidence.image_size[0]),
                int(evidence.image_size[1]), float(evidence.tau))

    # -- launches ---------------------------------------------------------------------------

    def launch_links(self, plan: _Plan, evidence, image: tuple) -> None:
        """All link scores of every stage into the plan's link buffers."""
        threads = 256
        sizes = plan.schedule.sizes
        most = max(sizes[t] * sizes[t + 1] for t in range(len(sizes) - 1))
        grid = (-(-most // threads), plan.schedule.guides + 1)
        self.kernels.links[evidence.sampler].prepared_async_call(
            grid, (threads, 1, 1), self.stream, int(plan.link_stages), *image)

    def fetch(self, plan: _Plan) -> None:
        """Queue the copy of the result to the plan's page-locked host buffer."""
        self.cuda.memcpy_dtoh_async(plan.result_host, plan.result, self.stream)


class _Plan:
    """Device buffers, descriptors and launches for one schedule (one problem shape)."""

    def __init__(self, tracer: DeviceTracer, schedule: Schedule):
        self.tracer = tracer
        self.schedule = schedule
        sizes, m = schedule.sizes, schedule.guides
        self.rmq = tracer.use_rmq(schedule)
        allocate = tracer.allocate
        self.links = [allocate(8 * sizes[t] * sizes[t + 1]) for t in range(m + 1)]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.points = allocate(16 * int(offsets[-1]))
        stages = np.zeros(m + 1, dtype=LINK_STAGE_DTYPE)
        stages["from"] = int(self.points) + 16 * offsets[:-2]
        stages["to"] = int(self.points) + 16 * offsets[1:-1]
        stages["out"] = [int(buffer) for buffer in self.links]
        stages["n_from"], stages["n_to"] = sizes[:-1], sizes[1:]
        stages["transposed"] = [schedule.transposed(t) for t in range(m + 1)]
        self.link_stages = tracer.upload(stages)

        steps = [*sum(schedule.rounds, []), schedule.merge]
        self.outputs = {}
        self.args = {}
        for step in steps:
            if step.kind != "merge" or not self.rmq:
                self.outputs[step.kind, step.stage] = allocate(8 * step.n_r * step.n_o)
            self.args[step.kind, step.stage] = allocate(4 * step.n_r * step.n_o)
        merge = schedule.merge
        self.best = allocate(8 * merge.n_r)
        self.best_arg = allocate(4 * merge.n_r)
        arg_table = np.zeros(m + 1, dtype=np.uint64)
        for (kind, stage), buffer in self.args.items():
            if kind != "merge":
                arg_table[stage] = int(buffer)
        self.arg_table = tracer.upload(arg_table)
        self.link_table = tracer.upload(np.array([int(b) for b in self.links], dtype=np.uint64))
        self.sizes = tracer.upload(np.array(sizes, dtype=np.int32))
        self.result = allocate(8 * (2 * m + 4))
        self.result_host = tracer.cuda.pagelocked_empty(2 * m + 4, np.float64)

        self.groups = [*schedule.rounds, [schedule.merge]]
        self.steps = [step for group in self.groups for step in group]
        self.step_template = np.array([self._descriptor(step) for step in self.steps],
                                      dtype=STEP_DTYPE)
        self.step_table = allocate(self.step_template.nbytes)
        self.launches = self._launches()

        self.windows = None
        self.window_buffers: list = []
        self.corridor = None
        self.host_links = None

    # -- inputs -----------------------------------------------------------------------------

    def bind_corridor(self, corridor) -> None:
        """Upload the node-set points of ``corridor`` (a → guides → b)."""
        if self.corridor is not corridor:
            self.tracer.upload(np.vstack(corridor.node_sets()).astype(np.float64), self.points)
            self.corridor = corridor

    def bind_links(self, links: list) -> None:
        """Upload host link scores (links[t] of shape (n_t, n_{t+1})) in the device layout."""
        if self.host_links is not links:
            for t, link in enumerate(links):
                link = np.asarray(link, dtype=np.float64)
                if link.shape != (self.schedule.sizes[t], self.schedule.sizes[t + 1]):
                    raise BadParameter(f"link scores of stage {t} have shape {link.shape}, "
                                       f"expected {self.schedule.sizes[t:t + 2]}")
                self.tracer.upload(link.T if self.schedule.transposed(t) else link,
                                   self.links[t])
            self.host_links = links

    def bind_windows(self, windows) -> None:
        """Upload the turn windows, invert those the backward steps need, fill the step table."""
        if self.windows is windows:
            return
        tracer, schedule, sizes = self.tracer, self.schedule, self.schedule.sizes
        m = schedule.guides
        if len(windows.lo) != m:
            raise BadParameter(f"windows for {len(windows.lo)} guides, expected {m}")
        unique: dict = {}  # interior turns share their arrays: upload each array once
        for s in range(1, m + 1):
            lo, hi = windows.lo[s - 1], windows.hi[s - 1]
            if lo.shape != (sizes[s], sizes[s + 1]) or hi.shape != lo.shape:
                raise BadParameter(f"windows of turn {s} have shape {lo.shape}, "
                                   f"expected {sizes[s:s + 2]}")
            unique.setdefault((id(lo), id(hi)), (lo, hi))
        packed = np.concatenate([np.ravel(array) for pair in unique.values() for array in pair])
        self.window_buffers = [tracer.upload(packed.astype(np.int32, copy=False))]
        pointers, at = {}, int(self.window_buffers[0])
        for key, (lo, _) in unique.items():
            pointers[key] = (at, at + 4 * lo.size)
            at += 8 * lo.size
        forward = {s: pointers[id(windows.lo[s - 1]), id(windows.hi[s - 1])]
                   for s in range(1, m + 1)}
        inverted: dict = {}
        backward = {}
        for s in schedule.reversed_turns:
            key = (id(windows.lo[s - 1]), id(windows.hi[s - 1]))
            if key not in inverted:
                n_r, n_q, n_o = sizes[s], sizes[s + 1], sizes[s - 1]
                rlo, rhi = tracer.allocate(4 * n_r * n_o), tracer.allocate(4 * n_r * n_o)
                threads = 256
                tracer.kernels.reverse_windows.prepared_async_call(
                    (-(-n_r * n_o // threads), 1), (threads, 1, 1), tracer.stream,
                    forward[s][0], forward[s][1], n_r, n_q, n_o, int(rlo), int(rhi))
                inverted[key] = (rlo, rhi)
                self.window_buffers.append(inverted[key])
            backward[s] = tuple(int(buffer) for buffer in inverted[key])
        table = self.step_template.copy()
        for row, step in enumerate(self.steps):
            table["lo"][row], table["hi"][row] = (
                backward if step.kind == "backward" else forward)[step.turn]
        tracer.upload(table, self.step_table)
        self.windows = windows

    # -- launches ---------------------------------------------------------------------------

    def _descriptor(self, step: StepPlan) -> tuple:
        """The ``Step`` of dp.cu for ``step``, its windows (lo, hi) left 0 until bound."""
        m, c = self.schedule.guides, self.schedule.middle
        t = step.stage
        if step.kind == "forward":
            prev = self.links[0] if t == 1 else self.outputs["forward", t - 1]
            link = self.links[t]
        elif step.kind == "backward":
            prev = self.links[m] if t == m - 1 else self.outputs["backward", t + 1]
            link = self.links[t]
        else:
            prev = self.links[0] if c == 1 else self.outputs["forward", c - 1]
            link = self.links[m] if c == m else self.outputs["backward", c]
        out = self.outputs.get((step.kind, step.stage))
        best = step.kind == "merge" and self.rmq
        strides = (1, step.n_o) if step.kind == "merge" else (step.n_r, 1)
        return (int(prev), int(link), 0, 0, int(out) if out is not None else 0,
                int(self.args[step.kind, step.stage]), int(self.best) if best else 0,
                int(self.best_arg) if best else 0, step.n_r, step.n_o, step.n_p, *strides, 0)

    def _launches(self) -> list[tuple]:
        """(function, grid, block, shared bytes, arguments) of every DP launch, in order."""
        kernels, schedule = self.tracer.kernels, self.schedule
        launches = []
        first = 0
        for group in self.groups:
            pointer = int(self.step_table) + first * STEP_DTYPE.itemsize
            first += len(group)
            n_r = max(step.n_r for step in group)
            n_o = max(step.n_o for step in group)
            n_p = max(step.n_p for step in group)
            if self.rmq:
                launches.append((kernels.step_rmq, (n_r, len(group)),
                                 (_threads(max(n_p, n_o), 256), 1, 1),
                                 rmq_shared_bytes(n_p), (pointer,)))
            else:
                launches.append((kernels.step_reduce, (n_o, n_r, len(group)),
                                 (_threads(n_p, 128), 1, 1), 0, (pointer,)))
        merge, m, c = schedule.merge, schedule.guides, schedule.middle
        if not self.rmq:
            launches.append((kernels.row_argmax, (merge.n_r, 1), (_threads(merge.n_o, 256), 1, 1),
                             0, (int(self.outputs["merge", c]), merge.n_r, merge.n_o,
                                 int(self.best), int(self.best_arg))))
        launches.append((kernels.finish, (1, 1), (_threads(merge.n_r, 256), 1, 1), 0,
                         (int(self.best), int(self.best_arg), merge.n_r,
                          int(self.args["merge", c]), int(self.arg_table), int(self.link_table),
                          int(self.sizes), m, c, int(self.result))))
        return launches

    def launch_dp(self) -> None:
        """Queue the DP rounds, the merge and the backtracking on the tracer's stream."""
        stream = self.tracer.stream
        for function, grid, block, shared, args in self.launches:
            function.prepared_async_call(grid, block, stream, *args, shared_size=shared)

    def solution(self) -> tuple[float, np.ndarray, np.ndarray]:
        """(total, link scores (m+1,), indices (m,) int64) from the fetched result."""
        m = self.schedule.guides
        result = self.result_host
        return (float(result[0]), result[1:m + 2].copy(),
                result[m + 3:2 * m + 3].astype(np.int64))
