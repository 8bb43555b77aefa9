"""Device buffers and kernel launches: link scores, the bidirectional DP, merge and backtracking.

A :class:`DeviceTracer` owns a stream, the kernels of one context and a few named device
buffers ("slots") that grow when a request needs more and are otherwise reused, so a drag that
changes the corridor's size on every mouse move allocates nothing. For the problem shapes of a
bucket of sizes it keeps a :class:`_Plan`: its buffers in one allocation of its own, the step
descriptor table and the list of launches; the most recently used plans are kept, so clicks of
lengths met before find theirs. Windows, corridor points, evidence and host link
scores are uploaded when they change (by object identity), so repeated traces of the same
request keep their data resident. Only the result (2m+4 doubles: total, per-link scores, node
indices) comes back to the host. Call every method inside ``context.active()``.

Plain ``mem_alloc`` buffers, not pycuda's memory pool: a pool that gets a block back while no
context is current (garbage collection on another thread, interpreter exit) aborts the process.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from core.errors import BadParameter
from core.scores import SCALAR
from gpu.graphs import LaunchGraphs, launch_key
from gpu.kernels import LINK_LANES, LINK_STAGE_DTYPE, PRECISIONS, STEP_DTYPE, load_kernels
from gpu.schedule import Schedule, StepPlan

METHODS = ("auto", "rmq", "reduce")
#: Uploads up to this size are staged in page-locked memory, so queuing them does not wait for
#: the device (a copy from pageable memory may first wait for the stream's earlier work).
MAX_STAGED_BYTES = 16 * 1024 * 1024
#: Threads per block of the link-score kernels.
LINK_THREADS = 256
#: Problems of at most this many links compute each with four threads (each summing every
#: fourth sample; gpu/kernels.py LINK_LANES), larger ones with one thread per link. On an H200
#: the sample click's 144 Ki links took 59.5 us in float64 with one thread per link, 41.9 with
#: 2, 38.5 with 4, 41.4 with 8 and 55.4 with 16 (float32: 48.6, 31.7, 30.7, 32.1, 43.4 us); but
#: the paper's grid (8 division points x 1024 points, 7 Mi links) 1.11 ms with one and 1.27 with
#: 4 (float32: 0.49 and 0.78 ms): its links fill the device by themselves.
LANE_LINKS = 1 << 20
#: Static shared memory a block may use without opting in.
_DEFAULT_SHARED = 48 * 1024
#: A plan's node-set sizes are rounded up to multiples of this (:func:`plan_bucket`): a drag
#: whose corridor gains or loses a few points per guide keeps its plan and replays its DP.
PLAN_ROUNDING = 16
#: Plans kept (the least recently used freed first), and at most this many bytes of them.
CACHED_PLANS = 16
CACHED_PLAN_BYTES = 256 * 1024 * 1024
_SHORT_MAX = 32767
#: Headroom for the static shared memory of the step kernel (its block reduction).
_STATIC_SHARED = 1024


def rmq_shared_bytes(n_p: int, itemsize: int = 8) -> int:
    """Shared memory of ``dp_step_rmq`` for rows of ``n_p`` values of ``itemsize`` bytes: row +
    sparse index table."""
    levels = int(n_p).bit_length() - 1
    return itemsize * n_p + 2 * n_p * levels


def _align(nbytes: int) -> int:
    return -(-max(int(nbytes), 1) // 256) * 256


def plan_bucket(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Node-set sizes rounded up to multiples of ``PLAN_ROUNDING`` (a and b, 1 each, kept):
    the sizes a plan's buffers and grids are made for."""
    return tuple(n if n == 1 else -(-int(n) // PLAN_ROUNDING) * PLAN_ROUNDING for n in sizes)


def _groups(schedule: Schedule) -> list[list]:
    """The steps launched together: each round, then the merge."""
    return [*schedule.rounds, [schedule.merge]]


def _steps(schedule: Schedule) -> list:
    """Every step in launch order (the rows of the step table)."""
    return [step for group in _groups(schedule) for step in group]


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
    precision : {"float64", "float32"}
        Arithmetic of link scores and DP (gpu/kernels.py); results come back as float64.
    blocking_sync : bool
        Wait for the device asleep rather than spinning on a CPU core (processes sharing a
        GPU: each wait then leaves the core to the others' host work).
    """

    def __init__(self, context, method: str = "auto", precision: str = "float64",
                 blocking_sync: bool = False):
        if method not in METHODS:
            raise BadParameter(f"unknown GPU DP method {method!r}; choose from "
                               f"{', '.join(METHODS)}")
        import pycuda.driver as cuda

        self.cuda = cuda
        self.context = context
        self.method = method
        if precision not in PRECISIONS:
            raise BadParameter(f"unknown GPU precision {precision!r}; choose from "
                               f"{', '.join(PRECISIONS)}")
        self.precision = precision
        #: dtype of link scores and DP values on the device.
        self.real = np.dtype(precision)
        self.kernels = load_kernels(context, precision)
        self.stream = cuda.Stream()
        #: Streams beside ``stream`` (see :meth:`aside` and :meth:`download_later`): work that
        #: need not wait for the main stream's queued kernels runs while they do.
        self._main = self.stream
        self._side = cuda.Stream()
        self._downloads = cuda.Stream()
        #: Where the side stream's block ends (the main stream waits for it), and where the
        #: main stream is when a download is queued (the download stream waits for it).
        self._side_done = cuda.Event(cuda.event_flags.DISABLE_TIMING)
        self._main_ready = cuda.Event(cuda.event_flags.DISABLE_TIMING)
        #: With ``blocking_sync``, :meth:`synchronize` sleeps on this event instead of spinning.
        self._done = (cuda.Event(cuda.event_flags.BLOCKING_SYNC | cuda.event_flags.DISABLE_TIMING)
                      if blocking_sync else None)
        #: CUDA events for timing, made once (events, like buffers, belong to this context).
        self.events = [cuda.Event() for _ in range(5)]
        self.max_shared = context.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        self._rmq_shared_limit = _DEFAULT_SHARED
        self._slots: dict = {}
        self._result_host = cuda.pagelocked_empty(64, np.float64)
        #: Page-locked staging for uploads, filled from the start after each synchronisation.
        self._upload_host = cuda.pagelocked_empty(1 << 20, np.uint8)
        self._staged_bytes = 0
        #: Page-locked staging for downloads (evidence planes, gpu/evidence.py), and the
        #: (host array, staging) a queued download fills on the next synchronisation.
        self._download_host = cuda.pagelocked_empty(4096, np.uint8)
        self._pending_downloads = []
        self._plans: OrderedDict = OrderedDict()  # bucket sizes -> _Plan
        #: Launch lists that come back (a click traced again, a batch's equal shapes) replayed
        #: as CUDA graphs: the DP's here, the evidence kernels' in gpu/evidence.py.
        self.graphs = LaunchGraphs()
        self._evidence = None
        self._evidence_at = 0
        #: (host planes array, device address) of the values the "evidence" slot holds
        #: (written there by the evidence kernels, gpu/evidence.py), so binding evidence with
        #: one of them uploads nothing.
        self._resident_planes = []

    # -- memory -----------------------------------------------------------------------------

    def slot(self, name: str, nbytes: int) -> int:
        """Device pointer of the named buffer, grown (contents lost) to at least ``nbytes``;
        a buffer that grows at least doubles, so a drag whose windows grow step by step
        reallocates (and waits for the device) only a few times."""
        held = self._slots.get(name)
        if held is None or held[1] < nbytes:
            capacity = max(_align(nbytes * 5 // 4), 4096)
            if held is not None:
                self.synchronize()
                del self._slots[name]  # freed: never handed out again, even if growing fails
                held[0].free()
                capacity = max(capacity, 2 * held[1])
            try:
                block = self.cuda.mem_alloc(capacity)
            except self.cuda.MemoryError:  # no room to grow ahead: just what is asked for
                capacity = max(_align(nbytes), 4096)
                block = self.cuda.mem_alloc(capacity)
            self._slots[name] = (block, capacity)
        return int(self._slots[name][0])

    def upload(self, array: np.ndarray, pointer: int) -> None:
        """Queue the copy of ``array`` to device address ``pointer`` on the stream.

        Arrays up to ``MAX_STAGED_BYTES`` are first copied to page-locked staging, so the host
        goes on queuing work while the device runs; staging is reused only after the stream
        has been synchronised (:meth:`synchronize`, or here when it is full).
        """
        data = np.ascontiguousarray(array)
        nbytes = data.nbytes
        if nbytes > MAX_STAGED_BYTES:
            self.cuda.memcpy_htod_async(pointer, data, self.stream)
            return
        start = _align(self._staged_bytes)
        if start + nbytes > self._upload_host.size:
            self.synchronize()
            start = 0
            if nbytes > self._upload_host.size:
                self._upload_host = self.cuda.pagelocked_empty(2 * nbytes, np.uint8)
        staged = self._upload_host[start:start + nbytes]
        staged[:] = data.reshape(-1).view(np.uint8)
        self.cuda.memcpy_htod_async(pointer, staged, self.stream)
        self._staged_bytes = start + nbytes

    @contextmanager
    def aside(self):
        """Within the block, ``stream`` is a side stream, which does not wait for the work
        queued on the main stream so far: for uploads and kernels that none of that work
        produces or still reads (a trace's plan while the evidence kernels and the network
        run). The main stream's later work waits for the block's."""
        self.stream = self._side
        try:
            yield
        finally:
            self.stream = self._main
            self._side_done.record(self._side)
            self._main.wait_for_event(self._side_done)

    def synchronize(self) -> None:
        """Wait for the queued work of every stream; upload staging is free again, and the
        arrays of :meth:`download_later` hold their values."""
        # The main stream waits for each finished aside() block: the side stream needs a wait
        # of its own only within one.
        streams = [self._main, *([self.stream] if self.stream is not self._main else []),
                   *([self._downloads] if self._pending_downloads else [])]
        for stream in streams:
            if self._done is None:
                stream.synchronize()
            else:
                self._done.record(stream)
                self._done.synchronize()
        self._staged_bytes = 0
        for out, staged in self._pending_downloads:
            out.reshape(-1).view(np.uint8)[:] = staged
        self._pending_downloads = []

    def download(self, pointer: int, shape: tuple, dtype) -> np.ndarray:
        """A new host array of ``shape`` and ``dtype`` copied from device address ``pointer``
        after the work queued so far (synchronises the stream)."""
        out = self.download_later(pointer, shape, dtype)
        self.synchronize()
        return out

    def download_later(self, pointer: int, shape: tuple, dtype) -> np.ndarray:
        """A new host array of ``shape`` and ``dtype`` that the next :meth:`synchronize` fills
        with the values at device address ``pointer`` after the work queued so far (the copy
        is queued on a stream of its own, so the main stream's later work does not wait for
        it; nothing may overwrite those values before that synchronisation)."""
        if self._pending_downloads:  # their values sit in the staging this copy reuses
            self.synchronize()
        out = np.empty(shape, dtype=dtype)
        if out.nbytes > self._download_host.size:
            self._download_host = self.cuda.pagelocked_empty(2 * out.nbytes, np.uint8)
        staged = self._download_host[:out.nbytes]
        self._main_ready.record(self.stream)
        self._downloads.wait_for_event(self._main_ready)
        self.cuda.memcpy_dtoh_async(staged, pointer, self._downloads)
        self._pending_downloads = [(out, staged)]
        return out

    def result_host(self, size: int) -> np.ndarray:
        """The page-locked host buffer results come back to: float64, shape (≥ ``size``,)."""
        if self._result_host.size < size:
            self._result_host = self.cuda.pagelocked_empty(2 * size, np.float64)
        return self._result_host

    def release(self) -> None:
        """Free every device buffer (they are made again on the next request)."""
        self.synchronize()
        for plan in self._plans.values():
            plan.free()
        self._plans.clear()
        self.graphs.clear()
        self._evidence = None
        self._resident_planes = []
        for allocation, _ in self._slots.values():
            allocation.free()
        self._slots = {}

    # -- problem data ----------------------------------------------------------------------

    def plan(self, sizes: tuple[int, ...]) -> _Plan:
        """The plan of node-set sizes ``sizes`` (n_0..n_{m+1}), bound to them: the plan of their
        bucket (:func:`plan_bucket`) is reused while the bucket stays."""
        sizes = tuple(int(n) for n in sizes)
        bucket = plan_bucket(sizes)
        plan = self._plans.get(bucket)
        if plan is not None:
            if next(reversed(self._plans)) != bucket:
                plan.windows = None  # the windows' slot holds another plan's windows now
            self._plans.move_to_end(bucket)
        else:
            plan = self._plans[bucket] = _Plan(self, Schedule(bucket))
            held = sum(kept.nbytes for kept in self._plans.values())
            while len(self._plans) > 1 and (len(self._plans) > CACHED_PLANS
                                            or held > CACHED_PLAN_BYTES):
                self.synchronize()  # queued work may still use it
                dropped = self._plans.popitem(last=False)[1]
                held -= dropped.nbytes
                dropped.free()
        plan.resize(self, Schedule(sizes))
        return plan

    def use_rmq(self, schedule: Schedule) -> bool:
        """Whether the sparse-table step kernel serves every step of ``schedule``."""
        if self.method == "reduce":
            return False
        n_p = max(step.n_p for step in [*sum(schedule.rounds, []), schedule.merge])
        needed = rmq_shared_bytes(n_p, self.real.itemsize)
        fits = n_p <= _SHORT_MAX and needed <= self.max_shared - _STATIC_SHARED
        if not fits:
            if self.method == "rmq":
                raise BadParameter(f"the sparse-table DP needs {needed} bytes of shared memory "
                                   f"for {n_p} points; this device has {self.max_shared}")
            return False
        if needed > self._rmq_shared_limit:
            self.kernels.step_rmq.set_attribute(
                self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                self.max_shared - _STATIC_SHARED)
            self._rmq_shared_limit = self.max_shared - _STATIC_SHARED
        return True

    def planes_slot(self, nbytes: int) -> int:
        """The "evidence" slot, about to be overwritten on the device (by gpu/evidence.py):
        forget what it held. Mark the host copies with :meth:`planes_resident` afterwards."""
        if self._pending_downloads:  # a copy of the slot's values may still be queued
            self.synchronize()
        self._evidence = None
        self._resident_planes = []
        return self.slot("evidence", nbytes)

    def planes_resident(self, planes: list) -> None:
        """Record that the "evidence" slot holds the values of each host array of ``planes``,
        a list of (array (P, rows, cols), device address of its values interleaved per
        pixel)."""
        self._resident_planes = list(planes)

    def bind_evidence(self, evidence) -> tuple:
        """Upload the evidence planes interleaved per pixel (unless the slot already holds
        them); returns the ``Image`` arguments."""
        planes = evidence.planes
        if self._evidence is not evidence:
            planes = np.asarray(planes, dtype=np.float32)
            if planes.ndim != 3 or planes.shape[0] != (1 if evidence.sampler == SCALAR else 2):
                raise BadParameter(f"evidence planes of shape {planes.shape} do not suit "
                                   f"sampler {evidence.sampler}")
            if planes.shape[1] < 2 or planes.shape[2] < 2:
                raise BadParameter(f"evidence window {planes.shape[1:]} is smaller than 2×2")
            if planes.size >= 2**31:  # the link kernels index the window with 32-bit integers
                raise BadParameter(f"evidence window of {planes.shape[1]}×{planes.shape[2]} px "
                                   "is too large for the GPU (2^31 values at most): lower the "
                                   "halfwidth or use --backend cpu")
            self._evidence = None
            at = next((at for held, at in self._resident_planes if held is planes), None)
            if at is None:  # the upload overwrites whatever the slot held
                if self._pending_downloads:  # a copy of its values may still be queued
                    self.synchronize()
                self._resident_planes = []
                at = self.slot("evidence", planes.nbytes)
                self.upload(np.moveaxis(planes, 0, -1), at)
            self._evidence = evidence
            self._evidence_at = at
        rows, cols = planes.shape[1:]
        return (self._evidence_at, int(rows), int(cols), int(evidence.origin[0]),
                int(evidence.origin[1]), int(evidence.image_size[0]),
                int(evidence.image_size[1]), float(evidence.tau))

    # -- launches ---------------------------------------------------------------------------

    def launch_links(self, plan: _Plan, evidence, image: tuple) -> None:
        """All link scores of every stage into the plan's link buffers."""
        self.kernels.links[evidence.sampler, plan.link_lanes].prepared_async_call(
            (plan.link_blocks, 1), (LINK_THREADS, 1, 1), self.stream, plan.link_stages,
            plan.schedule.guides + 1, *image)

    def fetch(self, plan: _Plan) -> np.ndarray:
        """Queue the copy of the plan's result to the page-locked host buffer (see
        :meth:`result_host`); returns the buffer (float64, shape (≥ the result size,))."""
        host = self.result_host(plan.result_size)
        self.cuda.memcpy_dtoh_async(host[:plan.result_size], plan.result, self.stream)
        return host


class _Plan:
    """Buffer layout, descriptors and launches for the problem shapes of one bucket.

    The buffers and the launches' grids are those of ``bucket`` (a Schedule of node-set sizes
    rounded up by :func:`plan_bucket`); :meth:`resize` binds the actual sizes (their
    descriptors, link stages and sizes table; the kernels stop at them), so corridors that
    differ by a few points per guide share one plan, and the DP's launches stay the same list
    (replayed as one CUDA graph, ``DeviceTracer.graphs``). Holds its buffers in one allocation
    (``nbytes``; :meth:`free`), not the tracer itself.
    """

    def __init__(self, tracer: DeviceTracer, bucket: Schedule):
        self.bucket = bucket
        sizes, m = bucket.sizes, bucket.guides
        self.rmq = tracer.use_rmq(bucket)
        self.real = tracer.real
        real = self.real.itemsize
        self.result_size = 2 * m + 4

        layout: dict = {}
        total = 0

        def place(key, nbytes):
            nonlocal total
            layout[key] = total
            total += _align(nbytes)

        for t in range(m + 1):
            place(("link", t), real * sizes[t] * sizes[t + 1])
        steps = _steps(bucket)
        for step in steps:
            if step.kind != "merge" or not self.rmq:
                place(("out", step.kind, step.stage), real * step.n_r * step.n_o)
            place(("arg", step.kind, step.stage), 4 * step.n_r * step.n_o)
        place("points", 16 * sum(sizes))  # the step table right after: one upload (bind)
        place("step_table", STEP_DTYPE.itemsize * len(steps))
        place("link_stages", LINK_STAGE_DTYPE.itemsize * (m + 1))
        place("best", real * bucket.merge.n_r)
        place("best_arg", 4 * bucket.merge.n_r)
        place("arg_table", 8 * (m + 1))
        place("link_table", 8 * (m + 1))
        place("sizes", 4 * (m + 2))
        place("result", 8 * self.result_size)
        self.nbytes = total
        self.allocation = tracer.cuda.mem_alloc(total)
        base = int(self.allocation)
        self.address = {key: base + offset for key, offset in layout.items()}
        address = self.address
        self.links = [address["link", t] for t in range(m + 1)]
        self.points = address["points"]
        self.link_stages = address["link_stages"]
        self.step_table = address["step_table"]
        self.result = address["result"]
        arg_table = np.zeros(m + 1, dtype=np.uint64)
        for step in steps:
            if step.kind != "merge":
                arg_table[step.stage] = address["arg", step.kind, step.stage]
        tracer.upload(arg_table, address["arg_table"])
        tracer.upload(np.array(self.links, dtype=np.uint64), address["link_table"])
        self.schedule = None

    def free(self) -> None:
        """Free the plan's buffers (after the work that uses them)."""
        self.allocation.free()

    def resize(self, tracer: DeviceTracer, schedule: Schedule) -> None:
        """Run the next problems on node-set sizes ``schedule.sizes`` (each at most the
        bucket's): their link stages, sizes table, step descriptors and launches."""
        if self.schedule is not None and self.schedule.sizes == schedule.sizes:
            return
        self.schedule = schedule
        self.windows = self.corridor = self.host_links = None  # the step table is rewritten
        sizes, m = schedule.sizes, schedule.guides
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        stages = np.zeros(m + 1, dtype=LINK_STAGE_DTYPE)
        stages["from"] = self.points + 16 * offsets[:-2]
        stages["to"] = self.points + 16 * offsets[1:-1]
        stages["out"] = self.links
        stages["n_from"], stages["n_to"] = sizes[:-1], sizes[1:]
        stages["transposed"] = [schedule.transposed(t) for t in range(m + 1)]
        # One grid over every stage's links: stage t's blocks start at first_block[t].
        links = stages["n_from"].astype(np.int64) * stages["n_to"]
        self.link_lanes = max(LINK_LANES) if int(links.sum()) <= LANE_LINKS else 1
        blocks = -(-links // (LINK_THREADS // self.link_lanes))
        stages["first_block"] = np.concatenate([[0], np.cumsum(blocks)[:-1]])
        self.link_blocks = int(blocks.sum())
        tracer.upload(stages, self.link_stages)
        tracer.upload(np.array(sizes, dtype=np.int32), self.address["sizes"])
        self.steps = _steps(schedule)
        self.step_template = np.array([self._descriptor(step) for step in self.steps],
                                      dtype=STEP_DTYPE)
        self.launches = self._launches(tracer.kernels)
        self.launch_key = launch_key(self.launches)

    # -- inputs -----------------------------------------------------------------------------

    def bind(self, tracer: DeviceTracer, corridor, windows) -> None:
        """:meth:`bind_windows` and :meth:`bind_corridor`, the corridor's points and the step
        table in one upload where both change."""
        if self.corridor is corridor or self.windows is windows:
            self.bind_windows(tracer, windows)
            self.bind_corridor(tracer, corridor)
            return
        self.corridor = self.windows = None  # until both are uploaded
        table = self._windows_table(tracer, windows)
        points = np.vstack(corridor.node_sets()).astype(np.float64)
        staged = np.zeros(self.step_table - self.points + table.nbytes, dtype=np.uint8)
        staged[:points.nbytes] = points.reshape(-1).view(np.uint8)
        staged[self.step_table - self.points:] = table.view(np.uint8)
        tracer.upload(staged, self.points)
        self.corridor, self.windows = corridor, windows

    def bind_corridor(self, tracer: DeviceTracer, corridor) -> None:
        """Upload the node-set points of ``corridor`` (a → guides → b)."""
        if self.corridor is not corridor:
            tracer.upload(np.vstack(corridor.node_sets()).astype(np.float64), self.points)
            self.corridor = corridor

    def bind_links(self, tracer: DeviceTracer, links: list) -> None:
        """Upload host link scores (links[t] of shape (n_t, n_{t+1})) in the device layout."""
        if self.host_links is not links:
            for t, link in enumerate(links):
                link = np.asarray(link, dtype=self.real)
                if link.shape != (self.schedule.sizes[t], self.schedule.sizes[t + 1]):
                    raise BadParameter(f"link scores of stage {t} have shape {link.shape}, "
                                       f"expected {self.schedule.sizes[t:t + 2]}")
                tracer.upload(link.T if self.schedule.transposed(t) else link, self.links[t])
            self.host_links = links

    def bind_windows(self, tracer: DeviceTracer, windows) -> None:
        """Upload the turn windows, invert those the backward steps need, fill the step table."""
        if self.windows is windows:
            return
        self.windows = None
        tracer.upload(self._windows_table(tracer, windows), self.step_table)
        self.windows = windows

    def _windows_table(self, tracer: DeviceTracer, windows) -> np.ndarray:
        """Upload the turn windows, queue the inversion of those the backward steps need;
        returns the step table (STEP_DTYPE, one row per step) that points at them."""
        schedule, sizes = self.schedule, self.schedule.sizes
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
        at = tracer.slot("windows", sum(8 * lo.size for lo, _ in unique.values()))
        tracer.upload(np.concatenate([array.ravel() for pair in unique.values()
                                      for array in pair]).astype(np.int32, copy=False), at)
        pointers = {}
        for key, (lo, _) in unique.items():
            pointers[key] = (at, at + 4 * lo.size)
            at += 8 * lo.size
        forward = {s: pointers[id(windows.lo[s - 1]), id(windows.hi[s - 1])]
                   for s in range(1, m + 1)}
        # Inverted windows of the turns the backward steps cross, (n_s, n_{s-1}) each.
        to_invert = {}
        for s in schedule.reversed_turns:
            to_invert.setdefault(forward[s], s)
        at = tracer.slot("inverted", sum(8 * sizes[s] * sizes[s - 1]
                                         for s in to_invert.values()))
        inverted = {}
        for key, s in to_invert.items():
            n_r, n_q, n_o = sizes[s], sizes[s + 1], sizes[s - 1]
            inverted[key] = (at, at + 4 * n_r * n_o)
            threads = 256
            tracer.kernels.reverse_windows.prepared_async_call(
                (-(-n_r * n_o // threads), 1), (threads, 1, 1), tracer.stream,
                key[0], key[1], n_r, n_q, n_o, *inverted[key])
            at += 8 * n_r * n_o
        table = self.step_template.copy()
        bounds = np.array([inverted[forward[step.turn]] if step.kind == "backward"
                           else forward[step.turn] for step in self.steps], dtype=np.uint64)
        table["lo"], table["hi"] = bounds[:, 0], bounds[:, 1]
        return table

    # -- launches ---------------------------------------------------------------------------

    def _descriptor(self, step: StepPlan) -> tuple:
        """The ``Step`` of dp.cu for ``step``, its windows (lo, hi) left 0 until bound."""
        m, c = self.schedule.guides, self.schedule.middle
        t = step.stage
        if step.kind == "forward":
            prev = self.links[0] if t == 1 else self.address["out", "forward", t - 1]
            link = self.links[t]
        elif step.kind == "backward":
            prev = self.links[m] if t == m - 1 else self.address["out", "backward", t + 1]
            link = self.links[t]
        else:
            prev = self.links[0] if c == 1 else self.address["out", "forward", c - 1]
            link = self.links[m] if c == m else self.address["out", "backward", c]
        address = self.address
        best = step.kind == "merge" and self.rmq
        strides = (1, step.n_o) if step.kind == "merge" else (step.n_r, 1)
        return (prev, link, 0, 0, address.get(("out", step.kind, step.stage), 0),
                address["arg", step.kind, step.stage], address["best"] if best else 0,
                address["best_arg"] if best else 0, step.n_r, step.n_o, step.n_p, *strides, 0)

    def _launches(self, kernels) -> list[tuple]:
        """(function, grid, block, arguments, shared bytes) of every DP launch, in order: grids,
        blocks and shared memory those of the bucket's sizes."""
        schedule, address = self.schedule, self.address
        launches = []
        first = 0
        for group in _groups(self.bucket):
            pointer = self.step_table + first * STEP_DTYPE.itemsize
            first += len(group)
            n_r = max(step.n_r for step in group)
            n_o = max(step.n_o for step in group)
            n_p = max(step.n_p for step in group)
            if self.rmq:
                launches.append((kernels.step_rmq, (n_r, len(group)),
                                 (_threads(max(n_p, n_o), 256), 1, 1), (pointer,),
                                 rmq_shared_bytes(n_p, self.real.itemsize)))
            else:
                launches.append((kernels.step_reduce, (n_o, n_r, len(group)),
                                 (_threads(n_p, 128), 1, 1), (pointer,), 0))
        merge, m, c = schedule.merge, schedule.guides, schedule.middle
        widest = self.bucket.merge
        if not self.rmq:
            launches.append((kernels.row_argmax, (widest.n_r, 1),
                             (_threads(widest.n_o, 256), 1, 1),
                             (address["out", "merge", c], merge.n_r, merge.n_o,
                              address["best"], address["best_arg"]), 0))
        launches.append((kernels.finish, (1, 1), (_threads(widest.n_r, 256), 1, 1),
                         (address["best"], address["best_arg"], address["arg", "merge", c],
                          address["arg_table"], address["link_table"], address["sizes"], m, c,
                          self.result), 0))
        return launches

    def launch_dp(self, tracer: DeviceTracer, result: int | None = None) -> None:
        """Queue the DP rounds, the merge and the backtracking on the tracer's stream (through
        its launch graphs); the result (``result_size`` float64) goes to device address
        ``result``, by default the plan's own ``self.result``."""
        if result is None:
            tracer.graphs.launch(tracer.stream, self.launches, self.launch_key)
            return
        # The backtracking (finish) writes the result: its last argument.
        *rounds, (function, grid, block, args, shared) = self.launches
        tracer.graphs.launch(tracer.stream,
                             [*rounds, (function, grid, block, (*args[:-1], result), shared)])

    def solution(self, result: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(total, link scores (m+1,), indices (m,) int64) from the fetched ``result``."""
        m = self.schedule.guides
        total = float(result[0])
        if not np.isfinite(total):  # no admissible path: the kernel wrote the total alone
            return total, np.empty(0), np.empty(0, dtype=np.int64)
        return total, result[1:m + 2].copy(), result[m + 3:2 * m + 3].astype(np.int64)
