"""Evidence planes on the device: the score kinds ``surface``, ``centre``, ``cross`` and ``sine``.

:class:`DeviceEvidence` runs the kernels of ``evidence.cu`` on a :class:`~gpu.engine.DeviceTracer`'s
stream and buffers. The planes are written straight into the tracer's evidence buffer in the
layout the link-score kernels read, and also come back to the host (``Evidence.planes`` is a
numpy array); the tracer remembers which host arrays its evidence buffer holds, so the traces
that follow upload nothing (:meth:`gpu.engine.DeviceTracer.bind_evidence`).

``surface`` and ``centre`` take many windows at once (:meth:`DeviceEvidence.surface_many`,
:meth:`DeviceEvidence.centre_many`): every window gets a ``struct Window`` in a table on the
device (gpu/kernels.py ``WINDOW_DTYPE``) and each kernel is launched once for the whole table;
one window is a table of one.

Pixels: when the window is a view into a whole image array (what ``Raster.read_window`` returns
for an in-memory image), that image is uploaded once and kept on the device while the same
array is alive, and windows are read from it in place; the image's pixels are treated as
read-only while it is resident. Other windows are uploaded on every call.

Host-side arithmetic (the σ = 1 mask kernel, the gradient kernels, the ``sine`` threshold) is
core's own code, so constants and rounding are the CPU's; the colour models of a and b are made
on the device in numpy's float32 operations (the same values). ``surface``
runs the learned model on the device too (:class:`gpu.network.DeviceNetwork`): its input planes,
the network, the surface and path probabilities, the model's trust, the centring and the
clicked-offset ridge of road lines (core/offset.py) never leave the device.

Call every method inside ``context.active()``.
"""

from __future__ import annotations

import weakref
from itertools import accumulate, chain

import numpy as np

from core import offset, scores, surface
from core.gradient import TRUNCATE, gaussian_kernel
from gpu.kernels import WINDOW_DTYPE

#: Bands the device kernels handle (more fall back to the CPU).
MAX_BANDS = 16
#: Largest Gaussian kernel (taps) of evidence.cu.
MAX_TAPS = 255
#: Whole images up to this size are kept resident; larger ones are read window by window.
MAX_RESIDENT_BYTES = 256 * 1024 * 1024
_BLOCK = (32, 8, 1)
#: Most blocks of the window's value-range reduction (a block per row up to this many).
_RANGE_BLOCKS = 512
#: Most blocks of a radix-select pass of the model's band percentiles (evidence.cu).
_PERCENTILE_BLOCKS = 64
#: The radix select's counts (4 passes x 4 ranks x 256 digits, uint32) and its states (4
#: passes x ``struct SelectState``, 64 bytes).
_SELECT_COUNTS = 4 * 4 * 256 * 4
_SELECT_BYTES = _SELECT_COUNTS + 4 * 64


#: Window sizes are rounded up to a multiple of this (px) for the launches' grids (the blocks
#: beyond a window return), so windows of similar sizes launch the same list of kernels, which
#: is then replayed as one CUDA graph (gpu.graphs.LaunchGraphs).
GRID_ROUNDING = 64


def _rounded(size: int) -> int:
    return -(-int(size) // GRID_ROUNDING) * GRID_ROUNDING


def _grid(rows: int, cols: int) -> tuple[int, int]:
    """Blocks of ``_BLOCK`` over a (rows, cols) window, its sizes rounded up (GRID_ROUNDING)."""
    return (-(-_rounded(cols) // _BLOCK[0]), -(-_rounded(rows) // _BLOCK[1]))


def centre_supported() -> bool:
    """Whether core's ``centre`` constants fit the device kernels (the widest centring blur)."""
    widest = max(scores.CENTRE_BLUR * 2 * scores.WIDTH_REACH, 1.0)
    return 2 * int(3.0 * widest + 0.5) + 1 <= MAX_TAPS


class DeviceEvidence:
    """Evidence kernels on ``tracer`` (a :class:`gpu.engine.DeviceTracer`)."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.kernels = tracer.kernels.evidence
        self._image = None  # weak reference to the resident whole-image array
        self._image_key = None
        mask = gaussian_kernel(1.0, 0)
        self._mask_weights = np.ascontiguousarray(mask[::-1])

    def release(self) -> None:
        """Forget the resident image (the tracer frees the buffers)."""
        self._image = None
        self._image_key = None

    @staticmethod
    def supports(pixels: np.ndarray) -> bool:
        """Whether ``pixels`` is a (rows, cols, bands) float32 window the device takes."""
        return (isinstance(pixels, np.ndarray) and pixels.dtype == np.float32
                and pixels.ndim == 3 and 1 <= pixels.shape[2] <= MAX_BANDS
                and pixels.shape[0] >= 1 and pixels.shape[1] >= 1)

    # -- pixels -------------------------------------------------------------------------------

    def _bind_windows(self, windows: list) -> list[tuple[int, int]]:
        """Device address of each window's first pixel and its row pitch (floats).

        A window that is a view into a whole image array (of at most ``MAX_RESIDENT_BYTES``) is
        read in place from that image, uploaded once and kept while the same array is alive;
        the windows of one call share at most one such image, the others are uploaded.
        """
        tracer = self.tracer
        bound: list = [None] * len(windows)
        uploads = []
        resident = None
        for k, (pixels, _, _) in enumerate(windows):
            base = pixels.base
            if (isinstance(base, np.ndarray) and base.dtype == np.float32 and base.ndim == 3
                    and base.shape[2] == pixels.shape[2] and base.flags.c_contiguous
                    and base.nbytes <= MAX_RESIDENT_BYTES and pixels.strides == base.strides
                    and (resident is None or base is resident)):
                if resident is None:
                    resident = base
                    key = (base.__array_interface__["data"][0], base.shape)
                    if (self._image is None or self._image() is not base
                            or self._image_key != key):
                        self._image = None
                        tracer.upload(base, tracer.slot("image", base.nbytes))
                        self._image = weakref.ref(base)
                        self._image_key = key
                start = (pixels.__array_interface__["data"][0]
                         - base.__array_interface__["data"][0])
                bound[k] = (start, base.shape[1] * base.shape[2])
            else:
                uploads.append(k)
        if resident is not None:
            image = tracer.slot("image", 0)
            for k, entry in enumerate(bound):
                if entry is not None:
                    bound[k] = (image + entry[0], entry[1])
        if uploads:
            offsets, end = _packed([windows[k][0].nbytes for k in uploads])
            at = tracer.slot("window", end)
            for k, offset in zip(uploads, offsets, strict=True):
                window = np.ascontiguousarray(windows[k][0])
                tracer.upload(window, at + offset)
                bound[k] = (at + offset, window.shape[1] * window.shape[2])
        return bound

    # -- kinds --------------------------------------------------------------------------------

    def centre(self, pixels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``centre`` planes (1, rows, cols), float32, as core's ``centre`` kind makes them."""
        return self.centre_many([(pixels, a, b)])[0]

    def centre_many(self, windows: list, deferred: bool = False,
                    pads: list | None = None) -> list[np.ndarray]:
        """:meth:`centre` of each (pixels (rows, cols, bands) float32, a (2,), b (2,)) of
        ``windows``, every kernel launched once for all of them, each plane padded by its
        ((top, bottom), (left, right)) of ``pads`` (core.scores.pad_planes); with
        ``deferred``, the planes are filled at the tracer's next synchronisation (nothing
        waits here)."""
        batch = _Batch(self, windows, pads=pads)
        batch.similarity()
        return batch.centred(clicked_offset=False, deferred=deferred)

    def surface(self, pixels: np.ndarray, a: np.ndarray, b: np.ndarray, network) -> np.ndarray:
        """``surface`` planes (1, rows, cols), float32, as core's ``surface`` kind makes them
        for road lines, the model run by ``network`` (a :class:`gpu.network.DeviceNetwork`
        taking core.surface.INPUT_PLANES planes and returning OUTPUT_PLANES).

        Everything stays on the device: block means, the percentile stretch and the endpoint
        plane of core.surface.model_inputs, the network, the surface probability (the
        "surface_probability" slot) and the path (the "surface_path" slot), both (rows, cols)
        float32, and the centring; only the planes come back.
        """
        return self.surface_many([(pixels, a, b)], network)[0]

    def surface_many(self, windows: list, network, deferred: bool = False,
                     pads: list | None = None,
                     ground_resolution: float | None = None) -> list[np.ndarray]:
        """:meth:`surface` of each (pixels (rows, cols, bands) float32, a (2,), b (2,)) of
        ``windows``: every kernel is launched once for all of them, the network once per
        window, each plane padded by its ((top, bottom), (left, right)) of ``pads``
        (core.scores.pad_planes), the network's resolution chosen for imagery of
        ``ground_resolution`` metres per pixel (core.surface.model_steps); with ``deferred``,
        the planes are filled at the tracer's next synchronisation (nothing waits here)."""
        batch = _Batch(self, windows, network, pads=pads, ground_resolution=ground_resolution)
        batch.similarity()
        batch.surface_model()
        return batch.centred(clicked_offset=True, deferred=deferred)

    def road_term(self, membership: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Planes (1, rows, cols), float32, of core.scores' road-line term of ``surface``
        without the model's path (the larger of the clicked-offset ridge and CENTRE_WEIGHT x
        the centre ridge) of a (rows, cols) membership in [0, 1] given on the host."""
        membership = np.ascontiguousarray(membership, dtype=np.float32)
        shape = (*membership.shape, 1)
        batch = _Batch(self, [(np.broadcast_to(np.float32(0), shape), np.asarray(a, np.float64),
                               np.asarray(b, np.float64))], pixels=False)
        self.tracer.upload(membership, int(batch.table["sim"][0]))
        return batch.centred(clicked_offset=True)[0]

    def gradient(self, pixels: np.ndarray, sigma: float) -> np.ndarray:
        """Gradient planes (2, rows, cols) (gx, gy), float32, as core.gradient.gaussian_gradient."""
        tracer, k = self.tracer, self.kernels
        rows, cols, bands = pixels.shape
        smooth, derivative = gaussian_kernel(sigma, 0), gaussian_kernel(sigma, 1)
        radius = int(TRUNCATE * sigma + 0.5)
        weights = np.concatenate([smooth[::-1], derivative[::-1]])
        ((pointer, pitch),) = self._bind_windows([(pixels, None, None)])
        n = rows * cols
        at_weights = tracer.slot("evidence_weights", weights.nbytes)
        tracer.upload(weights, at_weights)
        tmp = tracer.slot("evidence_tmp", 8 * 2 * bands * n)
        planar = tracer.slot("evidence_sim", 4 * 2 * n)
        out = tracer.planes_slot(4 * 2 * n)
        stream, grid = tracer.stream, _grid(rows, cols)
        k["gradient_columns"].prepared_async_call(grid, _BLOCK, stream, pointer, rows, cols,
                                                  bands, pitch, at_weights, radius, tmp)
        k["gradient_rows"].prepared_async_call(grid, _BLOCK, stream, tmp, rows, cols, bands,
                                               at_weights, radius, planar, out)
        planes = tracer.download(planar, (2, rows, cols), np.float32)
        tracer.planes_resident([(planes, out)])
        return planes


def _packed(sizes, start: int = 0) -> tuple[list[int], int]:
    """Byte offsets of buffers of ``sizes`` bytes laid end to end from ``start`` (each 256-byte
    aligned), and where the last ends."""
    offsets = []
    for size in sizes:
        offsets.append(start)
        start += -(-max(int(size), 1) // 256) * 256
    return offsets, start


class _Batch:
    """The windows of one call: their table of ``struct Window`` (gpu/kernels.py WINDOW_DTYPE),
    filled and uploaded here, and the launches over all of them.

    Buffers: the planes in the tracer's evidence slot, the model's surface and path
    probabilities in the "surface_probability" and "surface_path" slots, the rest in the
    "evidence_arena" slot; each laid out window after window.

    Parameters
    ----------
    evidence : DeviceEvidence
    windows : list of (pixels (rows, cols, bands) float32, a (2,), b (2,))
        a, b in window coordinates (x, y).
    network : gpu.network.DeviceNetwork, optional
        The surface model, for :meth:`surface_model` (its forward pass is prepared here).
    pixels : bool
        Whether the windows' pixels are read (False: only their shapes, :meth:`road_term`).
    pads : list, optional
        Per window ((top, bottom), (left, right)): rows and columns its plane is padded by
        (core.scores.pad_planes, on the device); default none.
    ground_resolution : float, optional
        The imagery's metres per pixel, where known (core.surface.model_steps).
    """

    def __init__(self, evidence: DeviceEvidence, windows: list, network=None,
                 pixels: bool = True, pads: list | None = None,
                 ground_resolution: float | None = None):
        tracer = self.tracer = evidence.tracer
        self.ground_resolution = ground_resolution
        self.kernels = evidence.kernels
        self.windows = windows
        count = len(windows)
        shapes = [tuple(int(size) for size in window.shape) for window, _, _ in windows]
        self.shapes = [shape[:2] for shape in shapes]
        self.sizes = sizes = [rows * cols for rows, cols, _ in shapes]
        pads = pads or [((0, 0), (0, 0))] * count
        self.padded = [any(pad[0]) or any(pad[1]) for pad in pads]
        #: Each window's plane as it comes back: (rows, cols) with its padding.
        self.plane_shapes = [(rows + top + bottom, cols + left + right) for (rows, cols, _),
                             ((top, bottom), (left, right)) in zip(shapes, pads, strict=True)]
        self.grid = (*_grid(max(rows for rows, _, _ in shapes),
                            max(cols for _, cols, _ in shapes)), count)
        models = np.zeros(2 + 2 * MAX_BANDS)  # the colour models: made on the device
        bound = [(0, 0)] * count
        if pixels:
            bound = evidence._bind_windows(windows)
        self.planes, self.planes_bytes = _packed([4 * rows * cols
                                                  for rows, cols in self.plane_shapes])
        self.at_planes = at_planes = tracer.planes_slot(self.planes_bytes)
        arena, end = {}, 0
        for name, each in (("sim", [4 * n for n in sizes]), ("tmp", [8 * n for n in sizes]),
                           ("unpadded", [4 * n if padded else 0
                                         for n, padded in zip(sizes, self.padded, strict=True)]),
                           ("mask", sizes), ("ahead", [4 * n for n in sizes]),
                           ("behind", [4 * n for n in sizes]),
                           ("kernel", [8 * (3 + MAX_TAPS)] * count),
                           ("partial", [8 * _RANGE_BLOCKS + 8] * count)):
            arena[name], end = _packed(each, end)
        model = _ModelLayout(self, network, arena, end) if network is not None else None
        base = tracer.slot("evidence_arena", model.end if model else end)
        rows_out = []
        # The table's rows: each window's, then the model's second runs (copies of their
        # window's row with that run's model fields).
        runs = model.runs if model else [(k, None) for k in range(count)]
        for run, (k, _) in enumerate(runs):
            rows, cols, bands = shapes[k]
            _, a, b = windows[k]
            ax, ay, bx, by = float(a[0]), float(a[1]), float(b[0]), float(b[1])
            cx, cy = bx - ax, by - ay
            length = float(np.hypot(cx, cy))
            nx, ny = -(cy / length), cx / length
            at = {name: base + offsets[k] for name, offsets in arena.items()}
            clicks = [min(max(int(round(y)), 0), rows - 1) * cols
                      + min(max(int(round(x)), 0), cols - 1) for x, y in ((ax, ay), (bx, by))]
            surface_fields = model.fields(run, base) if model else _NO_MODEL
            twin = model.twins[k] if model and run < count else -1
            plane = at_planes + self.planes[k]
            (top, _), (left, _) = pads[k]
            padding = ((plane, top, left, *self.plane_shapes[k]) if self.padded[k]
                       else (0, 0, 0, 0, 0))
            rows_out.append((
                bound[k][0], at["sim"], at["tmp"], at["unpadded"] if self.padded[k] else plane,
                at["mask"],
                at["ahead"], at["behind"], *surface_fields[0], at["partial"],
                at["partial"] + 8 * _RANGE_BLOCKS, at["kernel"], *surface_fields[1],
                models, (ax, ay, bx, by, nx, ny, scores.WIDTH_REACH, scores.CENTRE_BLUR,
                            *evidence._mask_weights),
                (ax, ay, cx, cy, cx * cx + cy * cy, offset.OPEN_WIDTH, offset.OFFSET_TOLERANCE,
                 scores.CENTRE_WEIGHT, scores.LENGTH_COST),
                *surface_fields[2], scores.LENGTH_COST, offset.OPEN_WIDTH, *surface_fields[3],
                rows, cols, bands, bound[k][1], *surface_fields[4], *clicks, twin, *padding))
        self.table = np.array(rows_out, dtype=WINDOW_DTYPE)
        self.at = tracer.slot("evidence_windows", self.table.nbytes)
        tracer.upload(self.table, self.at)
        self.model_layout = model
        self.forward = model.forward if model else None
        self.queued: list = []

    def _launch(self, name: str, grid: tuple, block: tuple, *args) -> None:
        """Queue kernel ``name`` over the window table (launched by :meth:`_flush`)."""
        self.queued.append((self.kernels[name], grid, block, (self.at, *args), 0))

    def _flush(self) -> None:
        """Launch the kernels queued so far, a list that comes back as one CUDA graph."""
        self.tracer.graphs.launch(self.tracer.stream, self.queued)
        self.queued = []

    def similarity(self) -> None:
        """core.scores.endpoint_similarity of every window into its "sim" buffer."""
        blocks = min(_rounded(self.table["rows"].max()), _RANGE_BLOCKS)
        count = len(self.windows)
        self._launch("value_range", (blocks, 1, count), (256, 1, 1))
        self._launch("range_finish", (1, 1, count), (32, 1, 1), blocks)
        self._launch("colour_models", (1, 1, count), (32, 1, 1))
        self._launch("similarity", self.grid, _BLOCK)

    def surface_model(self) -> None:
        """The model's input of every run (a window's, and its second resolution's where it has
        one), the network, every window's surface probability and path (the larger of its two
        runs' where it has two; the "surface_probability" and "surface_path" slots), its trust
        at the clicks and the membership sqrt(p' s) in place of the similarity (needs
        ``network``)."""
        tracer, model, count = self.tracer, self.model_layout, len(self.windows)
        runs = len(model.runs)
        stream = tracer.stream
        model_grid = (*_grid(max(rows for rows, _ in model.model),
                             max(cols for _, cols in model.model)), runs)
        self._launch("model_planes", model_grid, _BLOCK)  # also zeroes the select's counts
        n = max(used * rows * cols for used, (rows, cols) in zip(model.used, model.model,
                                                                  strict=True))
        blocks = (min(-(-n // (8 * 1024)) * 8, _PERCENTILE_BLOCKS), 1, runs)
        for select_pass in range(4):
            self._launch("percentile_pass", blocks, (1024, 1, 1), select_pass)
        self._launch("percentile_finish", (1, 1, runs), (1024, 1, 1))
        self._launch("model_input", (*_grid(max(rows for rows, _ in model.input),
                                            max(cols for _, cols in model.input)), runs), _BLOCK)
        self._flush()
        self.forward.launch(stream, tracer.graphs)
        model.upload_patches(tracer)
        self._launch("surface_probability", self.grid, _BLOCK)
        self._launch("surface_trust", (1, 1, count), (256, 1, 1))
        pixels = max(_rounded(rows) * _rounded(cols) for rows, cols in self.shapes)
        self._launch("surface_membership", (-(-pixels // 256), 1, count), (256, 1, 1))

    def centred(self, clicked_offset: bool, deferred: bool = False) -> list[np.ndarray]:
        """Planes (1, rows', cols') of core.scores' centred term of every window's membership
        (its "sim" buffer), padded, float32, also left in the tracer's evidence slot; with
        ``clicked_offset``, of the road-line term (the ridge is the largest of core.offset's
        clicked-offset ridge, CENTRE_WEIGHT x the centre ridge and, after
        :meth:`surface_model`, the model's path). With ``deferred``, the host planes are
        filled at the tracer's next synchronisation."""
        tracer, count = self.tracer, len(self.windows)
        self._launch("centre_kernel", (1, 1, count), (256, 1, 1))
        self._launch("centre_blur_columns", self.grid, _BLOCK)
        if clicked_offset:
            self._launch("surface_mask", self.grid, _BLOCK)
            self._launch("offset_runs", self.grid, _BLOCK)
            self._launch("offset_blur_rows", self.grid, _BLOCK)
        else:
            self._launch("centre_blur_rows", self.grid, _BLOCK)
        if any(self.padded):
            self._launch("pad_planes", (1, 1, count), (1024, 1, 1))
        self._flush()
        download = tracer.download_later if deferred else tracer.download
        flat = download(self.at_planes, (self.planes_bytes // 4,), np.float32)
        planes = [flat[start // 4:start // 4 + rows * cols].reshape(1, rows, cols)
                  for start, (rows, cols) in zip(self.planes, self.plane_shapes, strict=True)]
        tracer.planes_resident([(plane, self.at_planes + start)
                                for plane, start in zip(planes, self.planes, strict=True)])
        return planes


#: The surface model's fields of a window without the model (zeros; path NULL), in the five
#: runs of :meth:`_ModelLayout.fields`.
_NO_MODEL = ((0, 0), (0,) * 8, ((0.0, 0.0), 0.0), ((0.0,) * 4, 0.0, 0.0, 0.0, 0.0), (0,) * 9)


class _ModelLayout:
    """The surface model's part of a :class:`_Batch`: its *runs* of the network (window k's
    run at its first resolution is ``self.runs[k]``; then, for windows read at two resolutions
    (core.surface.model_steps), a second run each, whose index is ``self.twins[k]``, else -1),
    each run's model sizes and buffers in the batch's arena (laid out from byte ``end``;
    ``self.end``: where they end), each window's surface and path slots, the network's program
    of each run, and the endpoint patches' pixel indices (uploaded here)."""

    def __init__(self, batch: _Batch, network, arena: dict, end: int):
        tracer, count = batch.tracer, len(batch.windows)
        steps = [surface.model_steps(rows, cols, ground_resolution=batch.ground_resolution)
                 for rows, cols in batch.shapes]
        #: Per run: its window and step; the windows' first runs come first, in window order.
        self.runs = [(k, each[0]) for k, each in enumerate(steps)]
        self.twins = [-1] * count
        for k, each in enumerate(steps):
            for step in each[1:]:
                self.twins[k] = len(self.runs)
                self.runs.append((k, step))
        self.steps = [step for _, step in self.runs]
        self.model = [(-(-batch.shapes[k][0] // step), -(-batch.shapes[k][1] // step))
                      for k, step in self.runs]
        bands = [int(window.shape[2]) for window, _, _ in batch.windows]
        self.used = [3 if bands[k] >= 3 else 1 for k, _ in self.runs]
        multiple = surface.SIZE_MULTIPLE
        self.input = [(-(-rows // multiple) * multiple, -(-cols // multiple) * multiple)
                      for rows, cols in self.model]
        #: The network's forward pass over every run (its input and output buffers).
        self.forward = network.forward(self.input, tracer.slot, tracer.upload)
        runs = len(self.runs)
        layout = [("means", [4 * (used + 1) * rows * cols for used, (rows, cols)
                             in zip(self.used, self.model, strict=True)]),
                  ("hist", [_SELECT_BYTES + 16] * runs), ("trust", [8] * runs)]
        self.arena = {}
        for name, each in layout:
            self.arena[name], end = _packed(each, end)
        self.end = end
        self.slots = []
        for name in ("probability", "path"):
            offsets, total = _packed([4 * n for n in batch.sizes])
            at = tracer.slot(f"surface_{name}", total)
            self.slots.append([at + offset for offset in offsets])
        self.clicks, self.reach = [], []
        for k, step in self.runs:
            _, a, b = batch.windows[k]
            # core.surface.endpoint_plane's clicks and reach, in its float32 arithmetic.
            clicks = [surface.model_point(point, step).astype(np.float32) for point in (a, b)]
            self.clicks.append((*clicks[0], *clicks[1]))
            self.reach.append(surface.endpoint_reach(*clicks))
        # The patches' pixels are listed after the network's launch (upload_patches): only
        # the kernels after it read them.
        self._patch_windows = [(a, b, batch.shapes[k])
                               for k, (_, a, b) in enumerate(batch.windows)]
        self.counts = [_patch_size(a, *shape) + _patch_size(b, *shape)
                       for a, b, shape in self._patch_windows]
        at = tracer.slot("surface_patches", 4 * max(sum(self.counts), 1))
        self.patches = [at + 4 * first for first in accumulate([0, *self.counts[:-1]])]
        self.quantiles = tuple(value / 100 for value in surface.STRETCH_PERCENTILES)

    def upload_patches(self, tracer) -> None:
        """Queue the upload of every window's endpoint patches' pixel indices (the
        "surface_patches" slot, window after window)."""
        tracer.upload(np.fromiter(chain.from_iterable(
            _patch_indices(a, *shape) + _patch_indices(b, *shape)
            for a, b, shape in self._patch_windows), dtype=np.int32), self.patches[0])

    def fields(self, run: int, base: int) -> tuple:
        """Run ``run``'s model fields in WINDOW_DTYPE's order, in five runs: (probability,
        path); (means, hist, state, stretch, input, logits, patches, trust); (quantiles,
        model_trust); (clicks, reach, clip_low, clip_high, pad); (step, model_rows,
        model_cols, used, input_rows, input_cols, logit_rows, logit_cols, n_patches). Arena
        offsets are relative to ``base``, the arena's device address; a second run shares its
        window's slots and patches."""
        k = self.runs[run][0]
        at = {name: base + offsets[run] for name, offsets in self.arena.items()}
        inputs, logits = self.forward.inputs[run], self.forward.outputs[run]
        stretch = at["hist"] + _SELECT_COUNTS + 4 * 64
        return ((self.slots[0][k], self.slots[1][k]),
                (at["means"], at["hist"], at["hist"] + _SELECT_COUNTS, stretch, inputs, logits,
                 self.patches[k], at["trust"]),
                (self.quantiles, scores.MODEL_TRUST),
                (self.clicks[run], self.reach[run], *surface.STRETCH_CLIP, 0.0),
                (self.steps[run], *self.model[run], self.used[run], *self.input[run],
                 *self.forward.output_shapes[run][1:], self.counts[k]))


def _patch_box(point, rows: int, cols: int) -> tuple[int, int, int, int]:
    """First and end row, first and end column of core.scores.patch_colours' patch around
    ``point`` (x, y) in a (rows, cols) window."""
    radius = scores.PATCH_RADIUS
    col, row = round(float(point[0])), round(float(point[1]))
    return (max(row - radius, 0), min(row + radius + 1, rows), max(col - radius, 0),
            min(col + radius + 1, cols))


def _patch_size(point, rows: int, cols: int) -> int:
    """Pixels of the patch around ``point`` in a (rows, cols) window (:func:`_patch_box`)."""
    first_row, end_row, first, end = _patch_box(point, rows, cols)
    return max(end_row - first_row, 0) * max(end - first, 0)


def _patch_indices(point, rows: int, cols: int) -> list[int]:
    """Flat pixel indices (row * cols + col) of core.scores.patch_colours' patch around
    ``point`` (x, y) in a (rows, cols) window, in its order."""
    first_row, end_row, first, end = _patch_box(point, rows, cols)
    return [index for r in range(first_row, end_row)
            for index in range(r * cols + first, r * cols + end)]
