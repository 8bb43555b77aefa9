"""Evidence planes on the device: the score kinds ``surface``, ``centre``, ``cross`` and ``sine``.

:class:`DeviceEvidence` runs the kernels of ``evidence.cu`` on a :class:`~gpu.engine.DeviceTracer`'s
stream and buffers. The planes are written straight into the tracer's evidence buffer in the
layout the link-score kernels read, and also come back to the host (``Evidence.planes`` is a
numpy array); the tracer remembers which host array its evidence buffer holds, so the trace that
follows uploads nothing (:meth:`gpu.engine.DeviceTracer.bind_evidence`).

Pixels: when the window is a view into a whole image array (what ``Raster.read_window`` returns
for an in-memory image), that image is uploaded once and kept on the device while the same
array is alive, and windows are read from it in place; the image's pixels are treated as
read-only while it is resident. Other windows are uploaded on every call.

Host-side arithmetic (the colour models of a and b, the σ = 1 mask kernel, the gradient kernels,
the ``sine`` threshold) is core's own code, so constants and rounding are the CPU's. ``surface``
runs the learned model on the device too (:class:`gpu.network.DeviceNetwork`): its input planes,
the network, the surface and path probabilities, the model's trust, the centring and the
clicked-offset ridge of road lines (core/offset.py) never leave the device.

Call every method inside ``context.active()``.
"""

from __future__ import annotations

import weakref

import numpy as np

from core import offset, scores, surface
from core.gradient import TRUNCATE, gaussian_kernel

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


def _grid(rows: int, cols: int) -> tuple[int, int]:
    return (-(-cols // _BLOCK[0]), -(-rows // _BLOCK[1]))


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

    def _bind_pixels(self, pixels: np.ndarray) -> tuple[int, int]:
        """Device address of the window's first pixel and its row pitch (floats)."""
        tracer = self.tracer
        rows, cols, bands = pixels.shape
        base = pixels.base
        if (isinstance(base, np.ndarray) and base.dtype == np.float32 and base.ndim == 3
                and base.shape[2] == bands and base.flags.c_contiguous
                and base.nbytes <= MAX_RESIDENT_BYTES
                and pixels.strides == base.strides):
            start = pixels.__array_interface__["data"][0] - base.__array_interface__["data"][0]
            pitch = base.shape[1] * bands
            key = (base.__array_interface__["data"][0], base.shape)
            if (self._image is None or self._image() is not base or self._image_key != key):
                self._image = None
                tracer.upload(base, tracer.slot("image", base.nbytes))
                self._image = weakref.ref(base)
                self._image_key = key
            return tracer.slot("image", 0) + start, pitch
        window = np.ascontiguousarray(pixels)
        at = tracer.slot("window", window.nbytes)
        tracer.upload(window, at)
        return at, cols * bands

    # -- kinds --------------------------------------------------------------------------------

    def centre(self, pixels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``centre`` planes (1, rows, cols), float32, as core's ``centre`` kind makes them."""
        similarity = self._similarity(pixels, *self._bind_pixels(pixels), a, b)
        return self._centred(similarity, pixels.shape[:2], a, b)

    def surface(self, pixels: np.ndarray, a: np.ndarray, b: np.ndarray, network) -> np.ndarray:
        """``surface`` planes (1, rows, cols), float32, as core's ``surface`` kind makes them
        for road lines, the model run by ``network`` (a :class:`gpu.network.DeviceNetwork`
        taking core.surface.INPUT_PLANES planes and returning OUTPUT_PLANES).

        Everything stays on the device: block means, the percentile stretch and the endpoint
        plane of core.surface.model_inputs, the network, the surface probability (the
        "surface_probability" slot) and the path (the "surface_path" slot), both (rows, cols)
        float32, and the centring; only the planes come back.
        """
        tracer, k = self.tracer, self.kernels
        rows, cols, bands = pixels.shape
        pointer, pitch = self._bind_pixels(pixels)
        similarity = self._similarity(pixels, pointer, pitch, a, b)
        step = surface.model_step(rows, cols)
        model_rows, model_cols = -(-rows // step), -(-cols // step)
        used = 3 if bands >= 3 else 1
        means = tracer.slot("surface_means", 4 * (used + 1) * model_rows * model_cols)
        stream = tracer.stream
        k["model_planes"].prepared_async_call(
            _grid(model_rows, model_cols), _BLOCK, stream, pointer, rows, cols, bands, pitch,
            similarity, step, model_rows, model_cols, means)
        at_range = tracer.slot("surface_range", 32 + _SELECT_BYTES)
        at_hist = at_range + 32
        at_state = at_hist + _SELECT_COUNTS
        quantiles = np.array(surface.STRETCH_PERCENTILES, dtype=np.float64) / 100
        tracer.upload(quantiles, at_range + 16)
        tracer.cuda.memset_d32_async(at_hist, 0, _SELECT_COUNTS // 4, stream)
        n = used * model_rows * model_cols
        blocks = (min(-(-n // 1024), _PERCENTILE_BLOCKS), 1)
        for select_pass in range(4):
            k["percentile_pass"].prepared_async_call(blocks, (1024, 1, 1), stream, means, n,
                                                     4 - used, at_range + 16, select_pass,
                                                     at_hist, at_state)
        k["percentile_finish"].prepared_async_call((1, 1), (1024, 1, 1), stream, n, 4 - used,
                                                   at_range + 16, at_hist, at_state, at_range)
        multiple = surface.SIZE_MULTIPLE
        input_rows, input_cols = (-(-size // multiple) * multiple
                                  for size in (model_rows, model_cols))
        prepared = network.prepared(input_rows, input_cols)
        # core.surface.endpoint_plane's clicks and reach, in its float32 arithmetic.
        clicks = [surface.model_point(point, step).astype(np.float32) for point in (a, b)]
        reach = surface.endpoint_reach(*clicks)
        k["model_input"].prepared_async_call(
            _grid(input_rows, input_cols), _BLOCK, stream, means, used, model_rows, model_cols,
            at_range, *(np.float32(v) for v in surface.STRETCH_CLIP), input_rows, input_cols,
            *clicks[0], *clicks[1], reach, prepared.input)
        prepared.launch(stream)
        _, logit_rows, logit_cols = prepared.output_shape
        probability = tracer.slot("surface_probability", 4 * rows * cols)
        path = tracer.slot("surface_path", 4 * rows * cols)
        k["surface_probability"].prepared_async_call(
            _grid(rows, cols), _BLOCK, stream, prepared.output, logit_rows, logit_cols,
            model_rows, model_cols, step, rows, cols, probability, path)
        pixel_index = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols, 1)
        patches = np.concatenate([scores.patch_colours(pixel_index, point, scores.PATCH_RADIUS)
                                  for point in (a, b)]).ravel()
        at_trust = tracer.slot("surface_patches", 8 + patches.nbytes)
        tracer.upload(patches, at_trust + 8)
        k["surface_trust"].prepared_async_call((1, 1), (256, 1, 1), stream, probability,
                                               at_trust + 8, patches.size,
                                               float(scores.MODEL_TRUST), at_trust)
        n = rows * cols
        k["surface_membership"].prepared_async_call((-(-n // 256), 1), (256, 1, 1), stream,
                                                    probability, n, at_trust, similarity)
        return self._centred(similarity, (rows, cols), a, b, clicked_offset=True, path=path)

    def road_term(self, membership: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Planes (1, rows, cols), float32, of core.scores' road-line term of ``surface``
        without the model's path (the larger of the clicked-offset ridge and CENTRE_WEIGHT x
        the centre ridge) of a (rows, cols) membership in [0, 1] given on the host."""
        membership = np.ascontiguousarray(membership, dtype=np.float32)
        at = self.tracer.slot("evidence_sim", membership.nbytes)
        self.tracer.upload(membership, at)
        return self._centred(at, membership.shape, np.asarray(a, np.float64),
                             np.asarray(b, np.float64), clicked_offset=True)

    def _similarity(self, pixels: np.ndarray, pointer: int, pitch: int, a: np.ndarray,
                    b: np.ndarray) -> int:
        """Device address of core.scores.endpoint_similarity (rows, cols) float32 of the window
        (the "evidence_sim" slot); ``pointer``, ``pitch``: the window on the device."""
        tracer, k = self.tracer, self.kernels
        rows, cols, bands = pixels.shape
        models = np.empty(2 + 2 * bands)
        for e, point in enumerate((a, b)):
            patch = scores.patch_colours(pixels, point, scores.PATCH_RADIUS)
            models[e] = float(patch.std(axis=0).mean())
            models[2 + e * bands:2 + (e + 1) * bands] = patch.mean(axis=0)
        at_models = tracer.slot("evidence_models", 8 * len(models) + 8 * _RANGE_BLOCKS + 8)
        at_range = at_models + 8 * len(models)
        at_partial = at_range + 8
        tracer.upload(models, at_models)
        sim = tracer.slot("evidence_sim", 4 * rows * cols)
        stream = tracer.stream
        blocks = min(rows, _RANGE_BLOCKS)
        k["value_range"].prepared_async_call((blocks, 1), (256, 1, 1), stream, pointer,
                                             rows, cols, bands, pitch, at_partial)
        k["range_finish"].prepared_async_call((1, 1), (32, 1, 1), stream, at_partial, blocks,
                                              at_range)
        k["similarity"].prepared_async_call(_grid(rows, cols), _BLOCK, stream, pointer, rows,
                                            cols, bands, pitch, at_models, at_range, sim)
        return sim

    def _centred(self, membership: int, shape: tuple[int, int], a: np.ndarray, b: np.ndarray,
                 clicked_offset: bool = False, path: int = 0) -> np.ndarray:
        """Planes (1, rows, cols) of core.scores' centred term of the (rows, cols) float32
        membership at device address ``membership``, written to the evidence slot too; with
        ``clicked_offset``, of the road-line term (the ridge is the largest of core.offset's
        clicked-offset ridge, CENTRE_WEIGHT x the centre ridge and, unless ``path`` is 0, the
        model's path (rows, cols) float32 at device address ``path``)."""
        tracer, k = self.tracer, self.kernels
        rows, cols = shape
        unit = (b - a) / np.hypot(*(b - a))
        normal = np.array([-unit[1], unit[0]])
        params = np.concatenate([np.asarray(a, np.float64), np.asarray(b, np.float64), normal,
                                 [scores.WIDTH_REACH, scores.CENTRE_BLUR], self._mask_weights])
        at_params = tracer.slot("evidence_params", 8 * len(params) + 8 * (3 + MAX_TAPS))
        at_kernel = at_params + 8 * len(params)
        tracer.upload(params, at_params)
        n = rows * cols
        tmp = tracer.slot("evidence_tmp", 8 * n)
        out = tracer.planes_slot(4 * n)
        stream, grid = tracer.stream, _grid(rows, cols)
        k["centre_kernel"].prepared_async_call((1, 1), (256, 1, 1), stream, membership, rows,
                                               cols, at_params, at_kernel)
        k["centre_blur_columns"].prepared_async_call(grid, _BLOCK, stream, membership, rows,
                                                     cols, at_kernel, tmp)
        if not clicked_offset:
            k["centre_blur_rows"].prepared_async_call(grid, _BLOCK, stream, tmp, rows, cols,
                                                      at_kernel, float(scores.LENGTH_COST), out)
            return tracer.download(out, (1, rows, cols), np.float32)
        at_mask = tracer.slot("offset_mask", n)
        at_ahead = tracer.slot("offset_ahead", 4 * n)
        at_behind = tracer.slot("offset_behind", 4 * n)
        at_mask_weights = at_params + 8 * 8  # params' mask weights (the walks' mask)
        k["surface_mask"].prepared_async_call(grid, _BLOCK, stream, membership, rows, cols,
                                              at_mask_weights, at_mask)
        k["offset_runs"].prepared_async_call(grid, _BLOCK, stream, at_mask, rows, cols,
                                             at_kernel, float(offset.OPEN_WIDTH),
                                             float(normal[0]), float(normal[1]), at_ahead,
                                             at_behind)
        chord = np.asarray(b, np.float64) - a
        ridge_params = np.array([a[0], a[1], chord[0], chord[1], chord @ chord,
                                 offset.OPEN_WIDTH, offset.OFFSET_TOLERANCE,
                                 scores.CENTRE_WEIGHT, scores.LENGTH_COST], dtype=np.float64)
        at_ridge = tracer.slot("offset_params", ridge_params.nbytes)
        tracer.upload(ridge_params, at_ridge)
        clicks = [min(max(int(round(point[1])), 0), rows - 1) * cols
                  + min(max(int(round(point[0])), 0), cols - 1) for point in (a, b)]
        k["offset_blur_rows"].prepared_async_call(grid, _BLOCK, stream, tmp, rows, cols,
                                                  at_kernel, membership, at_mask, at_ahead,
                                                  at_behind, path, at_ridge, *clicks, out)
        return tracer.download(out, (1, rows, cols), np.float32)

    def gradient(self, pixels: np.ndarray, sigma: float) -> np.ndarray:
        """Gradient planes (2, rows, cols) (gx, gy), float32, as core.gradient.gaussian_gradient."""
        tracer, k = self.tracer, self.kernels
        rows, cols, bands = pixels.shape
        smooth, derivative = gaussian_kernel(sigma, 0), gaussian_kernel(sigma, 1)
        radius = int(TRUNCATE * sigma + 0.5)
        weights = np.concatenate([smooth[::-1], derivative[::-1]])
        pointer, pitch = self._bind_pixels(pixels)
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
        return tracer.download(planar, (2, rows, cols), np.float32)
