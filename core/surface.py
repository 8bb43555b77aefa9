"""Learned surface model: how likely each pixel belongs to the surface (road or water) that the
two clicked endpoints lie on.

A U-Net with a MobileNetV2 encoder (scripts/train_surface_model.py; its training data:
resources/models/LICENSE.md) runs with ONNX Runtime on the CPU (gpu/network.py runs it on the
GPU backend). Its input is five planes over the window: the first three bands stretched so that
their 1st..99th percentile maps to 0..1 (clipped to [-0.5, 1.5]; a one-band image is repeated),
the endpoint colour similarity of :func:`core.scores.endpoint_similarity`, and where the clicks
are (:func:`endpoint_plane`).
The clicks say *which* surface; the model adds what a colour match cannot see: the surface's
shape and context (a field of the same grey is not a road, a shaded stretch of road still is).
Its two outputs are the surface and the *path*: how likely each pixel lies on the centreline of
the clicked road between the two clicks (trained on click cases made from road masks).
"""

from __future__ import annotations

import math
import os
import textwrap
from functools import lru_cache
from pathlib import Path

import numpy as np

from core.errors import ModelUnavailable

#: The bundled model (weights' licence in the same folder).
BUNDLED_MODEL = Path(__file__).resolve().parent.parent / "resources" / "models" / "surface.onnx"
#: Environment variable naming another model file of the same input and output (e.g. one trained
#: on the user's own imagery); the commands' ``--surface-model`` sets it for their workers.
MODEL_VARIABLE = "ROADTRACER_SURFACE_MODEL"
#: The model the ``surface`` kind runs: ``$ROADTRACER_SURFACE_MODEL``, else the bundled one
#: (:func:`use_model` changes it; scripts/crossval_surface.py points it at per-fold models).
MODEL_PATH = Path(os.environ.get(MODEL_VARIABLE) or BUNDLED_MODEL)
#: The network halves the resolution four times: inputs are padded to multiples of this.
SIZE_MULTIPLE = 16
#: Windows larger than this (px) run at half resolution (interactive latency).
FULL_RESOLUTION_PIXELS = 160 * 160
#: Imagery this coarse (metres per pixel) or coarser: windows up to
#: ``COARSE_FULL_RESOLUTION_PIXELS`` run at full resolution (at half, a model pixel would be
#: 0.6 m or more and narrow roads a few pixels wide). Where the ground resolution is not known,
#: windows between the two limits run at both resolutions and the larger of the two maps counts
#: (fine imagery reads best at half resolution, coarse imagery at full).
COARSE_GROUND_RESOLUTION = 0.3
COARSE_FULL_RESOLUTION_PIXELS = 320 * 320
#: Imagery finer than this (metres per pixel; drone and fine aerial imagery) is read on block
#: means whose pixels cover at least this much ground: the model was trained on imagery of
#: 0.2 m per pixel and coarser, and finer imagery shows it roads wider than any it saw.
FINEST_MODEL_RESOLUTION = 0.16
#: What a trace does where the ground resolution is not known (the commands and the app say it).
UNKNOWN_GROUND_NOTE = ("the surface model reads larger windows at two resolutions, for fine "
                       "and for coarse imagery (twice its work)")
#: The model's band planes are stretched so that these percentiles of the window map to 0 and 1,
#: then clipped to ``STRETCH_CLIP``.
STRETCH_PERCENTILES = (1.0, 99.0)
STRETCH_CLIP = (-0.5, 1.5)
#: Smallest percentile span the bands are divided by, as a fraction of the larger magnitude of
#: the two percentiles (:func:`stretch_span`: imagery of any scale, 1e-7 reflectances or 16-bit
#: counts, stretches alike; a blank window's span is 0) ...
STRETCH_SPAN_FLOOR = 1e-6
#: ... and at least this (a window of zeros): core.scores.ABSOLUTE_FLOOR is this value, and
#: gpu/evidence.cu is compiled with it.
STRETCH_SPAN_ABSOLUTE = 1e-18
#: :func:`percentiles` reads its thresholds off every this many-th value.
PERCENTILE_SAMPLE_STRIDE = 64
#: Reach of the endpoint plane around each click, a fraction of the clicks' distance.
ENDPOINT_REACH = 0.25
#: Planes the model reads and writes (:func:`model_inputs`; surface, path).
INPUT_PLANES, OUTPUT_PLANES = 5, 2
#: Peak bytes per model pixel (of each step's block means) while ONNX Runtime runs the model on
#: the CPU, its activations and the maps it returns (measured on 0.8 to 6.7 M px windows at
#: steps 2 and 4: 725 at most).
MODEL_BYTES_PER_PX = 800
#: What a user can do without the model.
NO_MODEL_HINT = "score kind 'centre' traces without it"
#: Most characters of ONNX Runtime's own reason quoted in a message.
MAX_DETAIL_CHARS = 120


def _session(path: str):
    """The ONNX Runtime session of the model at ``path``: on as many threads as numba may use
    in this thread where that was lowered (a batch traces with one per process,
    ``ImageTask.threads``), else on ONNX Runtime's default."""
    from core.jit import numba

    threads = numba.get_num_threads()
    return _loaded_session(path, threads if threads < numba.config.NUMBA_NUM_THREADS else None)


@lru_cache(maxsize=4)
def _loaded_session(path: str, threads: int | None):
    try:
        import onnxruntime
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidProtobuf
    except ImportError as exc:
        raise ModelUnavailable(_import_problem(exc)) from None
    if not os.path.isfile(path):
        raise ModelUnavailable(f"surface model not found: {path} ({NO_MODEL_HINT})")
    options = onnxruntime.SessionOptions()
    # Idle ONNX Runtime threads would otherwise spin and slow the link scores that follow.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads is not None:
        options.intra_op_num_threads = threads
    try:
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except InvalidProtobuf:  # the file does not parse as an ONNX model
        raise ModelUnavailable(f"{path} is not an ONNX model: give the .onnx file of a surface "
                               f"model ({NO_MODEL_HINT})") from None
    except Exception as exc:  # ONNX Runtime raises its own exception types
        raise ModelUnavailable(f"surface model {path} cannot be loaded by ONNX Runtime: give "
                               f"another ({NO_MODEL_HINT}; {_runtime_detail(exc, path)})") from None


def _runtime_detail(exc: Exception, path: str) -> str:
    """ONNX Runtime's reason in ``exc``, shortened for a message: without its status prefix
    (``[ONNXRuntimeError] : 1 : FAIL : ``) and with the model's path left out."""
    reason = str(exc).split(" : ")[-1].replace(path, "the file")
    return textwrap.shorten(reason, MAX_DETAIL_CHARS, placeholder=" …")


def _import_problem(exc: ImportError) -> str:
    """Why the surface model cannot run, ``exc`` being what importing ONNX Runtime raised: it
    is not installed, or it does not load (on Windows, mostly for want of the Microsoft Visual
    C++ runtime: "DLL load failed")."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "onnxruntime":
        return f"the surface model needs ONNX Runtime: pip install onnxruntime ({NO_MODEL_HINT})"
    reason = textwrap.shorten(str(exc), MAX_DETAIL_CHARS, placeholder=" …")
    hint = "; install the Microsoft Visual C++ Redistributable" if os.name == "nt" else ""
    return f"ONNX Runtime cannot be loaded: {reason}{hint} ({NO_MODEL_HINT})"


def use_model(path: str | os.PathLike) -> Path:
    """Make the ONNX model at ``path`` the one the ``surface`` kind runs, in this process and in
    the worker processes it starts (through ``MODEL_VARIABLE``), after checking that it loads
    and takes and returns this program's planes.

    Returns
    -------
    Path
        The model's absolute path.

    Raises
    ------
    ModelUnavailable
        If the file is missing, is not an ONNX model ONNX Runtime can load, has another
        number of input or output planes, or does not run on windows of this program's
        sizes and return finite maps of their size.
    """
    global MODEL_PATH
    model = Path(path).expanduser().resolve()
    session = _session(os.fspath(model))
    for kind, items, planes in (("input", session.get_inputs(), INPUT_PLANES),
                                ("output", session.get_outputs(), OUTPUT_PLANES)):
        shapes = [list(item.shape) for item in items]
        if len(shapes) != 1 or len(shapes[0]) != 4 or shapes[0][1] != planes:
            raise ModelUnavailable(f"surface model {model} must have one {kind} of shape "
                                   f"(1, {planes}, height, width); it has {shapes}")
    _try_model(session, os.fspath(model))
    MODEL_PATH = model
    os.environ[MODEL_VARIABLE] = os.fspath(model)
    return model


def model_files(chosen: str | os.PathLike | None = None) -> list[Path]:
    """The surface model files a command may read, which none of its outputs may replace: the
    one the ``surface`` kind runs (:data:`MODEL_PATH`: the bundled model,
    ``$ROADTRACER_SURFACE_MODEL`` or the one :func:`use_model` chose) and ``chosen`` (a
    ``--surface-model`` given, whether or not its score kind runs it)."""
    return [MODEL_PATH, *([Path(chosen)] if chosen else [])]


def _try_model(session, model_file: str) -> None:
    """Run the model on two small random windows of different sizes; raise
    :class:`ModelUnavailable` unless it takes them and returns finite maps of their size."""
    random = np.random.default_rng(0)
    for rows, cols in ((48, 64), (80, 96)):
        pixels = random.random((rows, cols, 3), dtype=np.float32)
        similarity = random.random((rows, cols), dtype=np.float32)
        a, b = np.array([8.0, 8.0]), np.array([cols - 9.0, rows - 9.0])
        planes = _model_maps(session, model_file, pixels, similarity, a, b, 1)
        if any(plane.shape != (rows, cols) for plane in planes):
            raise ModelUnavailable(f"surface model {model_file} returns maps of another size "
                                   f"than its input ({NO_MODEL_HINT})")
        if not all(np.isfinite(plane).all() for plane in planes):
            raise ModelUnavailable(f"surface model {model_file} returns values that are not "
                                   f"numbers ({NO_MODEL_HINT})")


def endpoint_reach(a: np.ndarray, b: np.ndarray) -> np.float32:
    """ENDPOINT_REACH · max(‖b − a‖, 1e-3) in float32, for clicks a, b (2,) float32 (x, y)."""
    return np.float32(ENDPOINT_REACH) * max(np.float32(np.hypot(*(b - a))), np.float32(1e-3))


def endpoint_plane(a: np.ndarray, b: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Where the clicks are: clip(1 − min(‖p − a‖, ‖p − b‖) / (ENDPOINT_REACH · ‖b − a‖), 0, 1).

    Parameters
    ----------
    a, b : ndarrays of shape (2,)
        The clicks (x, y) in the plane's pixel coordinates.
    rows, cols : int

    Returns
    -------
    ndarray of shape (rows, cols), float32
    """
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    reach = endpoint_reach(a, b)
    y = np.arange(rows, dtype=np.float32)[:, None]
    x = np.arange(cols, dtype=np.float32)[None, :]
    nearest = np.minimum(np.sqrt((x - a[0]) ** 2 + (y - a[1]) ** 2),
                         np.sqrt((x - b[0]) ** 2 + (y - b[1]) ** 2))
    return np.clip(np.float32(1) - nearest / reach, 0, 1).astype(np.float32)


def model_inputs(pixels: np.ndarray, similarity: np.ndarray, a: np.ndarray,
                 b: np.ndarray) -> np.ndarray:
    """The network's input for a window.

    Parameters
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    similarity : ndarray of shape (rows, cols), float32 in [0, 1]
    a, b : ndarrays of shape (2,)
        The clicks (x, y) in the window's pixel coordinates.

    Returns
    -------
    ndarray of shape (1, INPUT_PLANES, rows', cols'), float32; rows', cols' are rows, cols
    rounded up to multiples of ``SIZE_MULTIPLE`` (bands and similarity mirror-padded; the
    endpoint plane computed over the padded size).
    """
    bands = pixels[:, :, :3] if pixels.shape[2] >= 3 else np.repeat(pixels[:, :, :1], 3, axis=2)
    low, high = percentiles(bands, STRETCH_PERCENTILES)
    span = stretch_span(low, high)
    rows, cols = similarity.shape
    inputs = np.empty((1, INPUT_PLANES, rows + (-rows) % SIZE_MULTIPLE,
                       cols + (-cols) % SIZE_MULTIPLE), dtype=np.float32)
    planes = inputs[0]
    stretched = planes[:3, :rows, :cols]
    np.subtract(bands.transpose(2, 0, 1), np.float32(low), out=stretched)
    np.divide(stretched, np.float32(span), out=stretched)
    np.clip(stretched, *STRETCH_CLIP, out=stretched)
    planes[3, :rows, :cols] = similarity
    _reflect_pad(planes[:4], rows, cols)
    planes[4] = endpoint_plane(a, b, *planes.shape[1:])
    return inputs


def stretch_span(low: float, high: float) -> float:
    """What :func:`model_inputs` divides the bands by after subtracting ``low``: the span
    ``high − low`` of their stretch percentiles, at least :data:`STRETCH_SPAN_FLOOR` × the
    larger of |low| and |high| and at least :data:`STRETCH_SPAN_ABSOLUTE` (so a window's
    stretch does not depend on the scale of its values)."""
    magnitude = max(abs(float(low)), abs(float(high)))
    return max(float(high - low), STRETCH_SPAN_FLOOR * magnitude, STRETCH_SPAN_ABSOLUTE)


def _reflect_pad(planes: np.ndarray, rows: int, cols: int) -> None:
    """Fill ``planes`` (P, rows', cols') beyond its first rows and columns with their mirror
    image, in place, as ``np.pad(planes[:, :rows, :cols], ..., mode="reflect")`` would."""
    more_rows, more_cols = planes.shape[1] - rows, planes.shape[2] - cols
    if more_rows >= rows or more_cols >= cols:  # mirrored more than once: numpy's own
        planes[:] = np.pad(planes[:, :rows, :cols], ((0, 0), (0, more_rows), (0, more_cols)),
                           mode="reflect")
        return
    planes[:, rows:, :cols] = planes[:, rows - 1 - more_rows:rows - 1, :cols][:, ::-1]
    planes[:, :, cols:] = planes[:, :, cols - 1 - more_cols:cols - 1][:, :, ::-1]


def percentiles(values: np.ndarray, q: tuple[float, ...]) -> np.ndarray:
    """``np.percentile(values, q)``, exactly, faster for q near 0 or 100 (as a stretch's).

    numpy (its default linear method) interpolates between the two values of ranks
    ⌊(n − 1)·q/100⌋ and the next; here each pair is selected among the values beyond a
    threshold read off a sample (every ``PERCENTILE_SAMPLE_STRIDE``-th value), which keeps all
    values past it, so the selection is exact, and numpy interpolates. Where too few values
    lie past a threshold, or some value is NaN, numpy's own percentile answers.

    Parameters
    ----------
    values : ndarray
    q : tuple of float
        Percentiles in [0, 100].

    Returns
    -------
    ndarray of shape (len(q),), float64 for float32 values
    """
    flat = values.reshape(-1)
    virtual = (flat.size - 1) * (np.asarray(q, dtype=np.float64) / 100)
    ranks = np.floor(virtual)
    pairs = [_rank_pair(flat, int(rank)) for rank in ranks]
    if any(pair is None for pair in pairs):
        return np.percentile(values, q)
    # numpy interpolates: a pair's quantile γ lies at its virtual index (2 − 1)·γ = γ, between
    # its two values as in the whole array (column k's at γ_k: the diagonal).
    return np.quantile(np.array(pairs, dtype=flat.dtype).T, virtual - ranks, axis=0).diagonal()


def _rank_pair(flat: np.ndarray, rank: int) -> tuple | None:
    """The values of rank ``rank`` and ``rank + 1`` (at most the last) of ``flat`` sorted,
    selected among those beyond a sampled threshold on the nearer end; None where fewer than
    those ranks lie past it, or some value is NaN (NaN lies past every threshold)."""
    size = flat.size
    top = rank >= size // 2
    needed = size - rank if top else rank + 2  # values past the threshold that hold the pair
    sample = flat[::PERCENTILE_SAMPLE_STRIDE]
    at = 3 * needed // (2 * PERCENTILE_SAMPLE_STRIDE) + 8  # leaves ~1.5 × needed past it
    if at >= sample.size:
        return None
    if top:
        threshold = np.partition(sample, sample.size - 1 - at)[sample.size - 1 - at]
        kept = flat[~(flat < threshold)]
    else:
        threshold = np.partition(sample, at)[at]
        kept = flat[~(flat > threshold)]
    if kept.size < needed or np.isnan(kept).any():
        return None
    first = rank - (size - kept.size) if top else rank
    second = min(first + 1, kept.size - 1)
    pair = np.partition(kept, (first, second))
    return pair[first], pair[second]


def full_resolution_pixels(ground_resolution: float | None) -> int:
    """The largest window (model px) the model runs on without halving it again, for imagery
    of ``ground_resolution`` metres per model pixel (None: not known)."""
    if ground_resolution is not None and ground_resolution >= COARSE_GROUND_RESOLUTION:
        return COARSE_FULL_RESOLUTION_PIXELS
    return FULL_RESOLUTION_PIXELS


def finest_step(ground_resolution: float | None) -> int:
    """The smallest step (1: full resolution, k: k×k block means) at which a model pixel of
    imagery of ``ground_resolution`` metres per pixel covers at least
    ``FINEST_MODEL_RESOLUTION`` m (1 where the resolution is not known)."""
    if ground_resolution is None or ground_resolution >= FINEST_MODEL_RESOLUTION:
        return 1
    return math.ceil(FINEST_MODEL_RESOLUTION / ground_resolution - 1e-9)


def model_steps(rows: int, cols: int, half_resolution: bool = False,
                ground_resolution: float | None = None) -> tuple[int, ...]:
    """The resolutions a (rows, cols) window runs the model at (:func:`surface_model`), as
    steps (k: k×k block means).

    With a known ground resolution (metres per pixel): the :func:`finest_step` s, or 2s where
    the window at step s is over :func:`full_resolution_pixels` of the model pixels' ground
    resolution. Where it is not known: 1, or 2 for windows over ``FULL_RESOLUTION_PIXELS``, and
    both (1, 2) for windows up to ``COARSE_FULL_RESOLUTION_PIXELS``. With ``half_resolution``
    (water): 2 whatever the window."""
    if half_resolution:
        return (2,)
    pixels = rows * cols
    if ground_resolution is None:
        if pixels <= FULL_RESOLUTION_PIXELS:
            return (1,)
        return (1, 2) if pixels <= COARSE_FULL_RESOLUTION_PIXELS else (2,)
    step = finest_step(ground_resolution)
    if pixels <= full_resolution_pixels(ground_resolution * step) * step * step:
        return (step,)
    return (2 * step,)


def model_memory(window_px: float, half_resolution: bool = False,
                 ground_resolution: float | None = None) -> float:
    """Estimated peak bytes of :func:`surface_model` on a window of ``window_px`` pixels:
    ``MODEL_BYTES_PER_PX`` per model pixel at each of its :func:`model_steps` (infinite for a
    window too large to count as a float, which a resource plan then refuses)."""
    if math.isinf(window_px):
        return math.inf
    steps = model_steps(int(window_px), 1, half_resolution, ground_resolution)
    return MODEL_BYTES_PER_PX * sum(window_px / (step * step) for step in steps)


def model_point(point: np.ndarray, step: int) -> np.ndarray:
    """A window point (x, y) in the coordinates of its ``step``×``step`` block means, shape
    (2,) float64."""
    centre = (step - 1) / 2
    return np.array([(float(point[0]) - centre) / step, (float(point[1]) - centre) / step])


def surface_model(pixels: np.ndarray, similarity: np.ndarray, a: np.ndarray, b: np.ndarray,
                  model_path: str | os.PathLike | None = None,
                  half_resolution: bool = False,
                  ground_resolution: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Probability that each pixel lies on the clicked surface, and on the clicked road's
    centreline between the clicks (at each of :func:`model_steps`: step k runs on k×k block
    means, upsampled bilinearly; with two steps, the larger of the two maps per pixel).

    Parameters
    ----------
    pixels : ndarray of shape (rows, cols, bands), float32
    similarity : ndarray of shape (rows, cols), float32
        :func:`core.scores.endpoint_similarity` of the window.
    a, b : ndarrays of shape (2,)
        The clicks (x, y) in window coordinates.
    model_path : optional
        An ONNX model with the same input and output; default: the module's ``MODEL_PATH``.
    half_resolution : bool
        Run on 2×2 block means whatever the window's size.
    ground_resolution : float, optional
        The imagery's metres per pixel, where known (:func:`model_steps`).

    Returns
    -------
    surface, path : ndarrays of shape (rows, cols), float32 in [0, 1]

    Raises
    ------
    ModelUnavailable
        If ONNX Runtime or the model file is missing, unreadable or not a model of this input
        and output.
    """
    model_file = os.fspath(MODEL_PATH if model_path is None else model_path)
    session = _session(model_file)
    rows, cols = similarity.shape
    maps = [_model_maps(session, model_file, pixels, similarity, a, b, step)
            for step in model_steps(rows, cols, half_resolution, ground_resolution)]
    if len(maps) == 1:
        return maps[0]
    return tuple(np.maximum(*planes) for planes in zip(*maps, strict=True))


def _model_maps(session, model_file: str, pixels: np.ndarray, similarity: np.ndarray,
                a: np.ndarray, b: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`surface_model`'s two planes (rows, cols) float32 from the model run on the
    window's ``step``×``step`` block means (step 1: the window itself)."""
    rows, cols = similarity.shape
    if step > 1:  # k×k block means; the model saw scales 0.6..1.6 in training
        pixels = _block_mean(pixels, step)
        similarity = _block_mean(similarity[:, :, None], step)[:, :, 0]
    inputs = model_inputs(pixels, similarity, model_point(a, step), model_point(b, step))
    try:
        logits = session.run(None, {"image": inputs})[0][0]
    except Exception as exc:  # ONNX Runtime raises its own exception types
        raise ModelUnavailable(f"surface model {model_file} does not take this program's "
                               f"{INPUT_PLANES} input planes: {exc} ({NO_MODEL_HINT})") from None
    if logits.shape[0] != OUTPUT_PLANES:
        raise ModelUnavailable(f"surface model {model_file} returns {logits.shape[0]} planes, not "
                               f"{OUTPUT_PLANES} (surface, path) ({NO_MODEL_HINT})")
    model_rows, model_cols = similarity.shape
    planes = np.negative(logits[:, :model_rows, :model_cols])  # σ(x) = 1 / (1 + e^−x), in place
    np.exp(planes, out=planes)
    np.add(planes, 1.0, out=planes)
    np.divide(1.0, planes, out=planes)
    if step > 1:
        planes = [_upsample(plane, step, rows, cols) for plane in planes]
    return tuple(plane.astype(np.float32, copy=False) for plane in planes)


def _upsample(plane: np.ndarray, step: int, rows: int, cols: int) -> np.ndarray:
    """Bilinear (rows, cols) image of a plane of ``step``×``step`` block values."""
    for axis, size in ((0, rows), (1, cols)):
        position = np.clip((np.arange(size) + 0.5) / step - 0.5, 0, plane.shape[axis] - 1)
        low = np.floor(position).astype(int)
        high = np.minimum(low + 1, plane.shape[axis] - 1)
        weight = (position - low).astype(np.float32)
        shape = (-1, 1) if axis == 0 else (1, -1)
        plane = (np.take(plane, low, axis=axis) * (1 - weight.reshape(shape))
                 + np.take(plane, high, axis=axis) * weight.reshape(shape))
    return plane


def _block_mean(planes: np.ndarray, step: int) -> np.ndarray:
    """(rows, cols, bands) → (ceil(rows / step), ceil(cols / step), bands) block means."""
    rows, cols, bands = planes.shape
    padded = np.pad(planes, ((0, (-rows) % step), (0, (-cols) % step), (0, 0)), mode="edge")
    # A sum of strided views (from 0, in float32): several times faster than a mean over
    # reshaped axes.
    total = np.zeros((padded.shape[0] // step, padded.shape[1] // step, bands), np.float32)
    for i in range(step):
        for j in range(step):
            np.add(total, padded[i::step, j::step], out=total, dtype=np.float32)
    return np.divide(total, np.float32(step * step), out=total)
