"""The CUDA sources of this package, compiled once per context, and their argument layouts.

``dp.cu``, ``links.cu``, ``evidence.cu`` and ``network.cu`` sit beside this file;
:func:`load_kernels` compiles them with pycuda's ``SourceModule`` (nvcc, cached on disk by
pycuda) for the current context's device, memoised per context (one retained primary context
per device) and precision (``dp.cu`` and ``links.cu`` are built with ``REAL`` = double or
float), and returns the kernels as prepared functions.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.scores import CROSS, SCALAR, SINE
from gpu.network import CONV_GEOMETRY, CONV_SIZES, DEPTHWISE_GEOMETRY

SOURCE_DIR = Path(__file__).resolve().parent
#: Every CUDA source of the package (tests compile each with nvcc).
CUDA_SOURCES = ("dp.cu", "evidence.cu", "links.cu", "network.cu")

#: Precisions of the link-score and DP kernels: numpy dtype of their scores, and ``REAL``.
PRECISIONS = {"float64": "double", "float32": "float"}

#: ``struct Step`` of dp.cu.
STEP_DTYPE = np.dtype([
    ("prev", np.uint64), ("link", np.uint64), ("lo", np.uint64), ("hi", np.uint64),
    ("out", np.uint64), ("arg", np.uint64), ("best", np.uint64), ("best_arg", np.uint64),
    ("n_r", np.int32), ("n_o", np.int32), ("n_p", np.int32),
    ("out_o_stride", np.int32), ("out_r_stride", np.int32), ("pad", np.int32)])

#: ``struct LinkStage`` of links.cu.
LINK_STAGE_DTYPE = np.dtype([
    ("from", np.uint64), ("to", np.uint64), ("out", np.uint64),
    ("n_from", np.int32), ("n_to", np.int32), ("transposed", np.int32),
    ("first_block", np.int32)])

#: Kernel name of each sampler in links.cu, before ``_<lanes>``: each is built for one and for
#: four threads per link (LINK_LANES).
LINK_KERNELS = {SCALAR: "link_scores_scalar", CROSS: "link_scores_cross",
                SINE: "link_scores_sine"}
LINK_LANES = (1, 4)


#: ``struct Window`` of evidence.cu: one window of the ``surface`` and ``centre`` kernels, its
#: buffers (device addresses) and constants.
WINDOW_DTYPE = np.dtype([
    *[(name, np.uint64) for name in (
        "pix", "sim", "tmp", "out", "mask", "ahead", "behind", "probability", "path", "partial",
        "range", "kernel", "means", "hist", "state", "stretch", "input", "logits", "patches",
        "trust")],
    ("models", np.float64, 2 + 2 * 16), ("centre", np.float64, 8 + 9), ("ridge", np.float64, 9),
    ("quantiles", np.float64, 2), ("model_trust", np.float64), ("length_cost", np.float64),
    ("open_width", np.float64), ("clicks", np.float32, 4), ("reach", np.float32),
    ("clip_low", np.float32), ("clip_high", np.float32), ("pad", np.float32),
    *[(name, np.int32) for name in (
        "rows", "cols", "bands", "pitch", "step", "model_rows", "model_cols", "used",
        "input_rows", "input_cols", "logit_rows", "logit_cols", "n_patches", "click_a",
        "click_b", "twin")],
    ("padded", np.uint64),
    *[(name, np.int32) for name in ("pad_top", "pad_left", "padded_rows", "padded_cols")]])
assert WINDOW_DTYPE.itemsize == 800  # evidence.cu's static_assert

#: Kernels of evidence.cu and their argument formats: the table of windows (``WINDOW_DTYPE``)
#: and, for some, one integer.
EVIDENCE_KERNELS = {
    **{name: "P" for name in (
        "value_range", "colour_models", "similarity", "centre_kernel", "centre_blur_columns",
        "centre_blur_rows", "surface_mask", "offset_runs", "offset_blur_rows", "model_planes",
        "surface_probability", "percentile_finish", "model_input", "surface_trust",
        "surface_membership", "pad_planes")},
    "range_finish": "Pi",                 # windows, value_range's blocks
    "percentile_pass": "Pi",              # windows, pass
    "gradient_columns": "PiiiiPiP",       # pixels, rows, cols, bands, pitch, weights, radius, tmp
    "gradient_rows": "PiiiPiPP",          # tmp, rows, cols, bands, weights, radius, planar, pairs
}

#: Kernels of network.cu and their argument formats (the first: the launch's Sample table).
NETWORK_KERNELS = {
    **{f"{prefix}{k}": "PPPiiii" for k in CONV_SIZES if k > 1  # samples, w, bias, c_in,
       for prefix, *_ in CONV_GEOMETRY.values()},             # c_out, act, ci_split
    "pointwise": "PPPiiii",               # samples, w, bias, c_in, c_out, act, residual
    "pointwise_staged": "PPPiiii",        # the same
    "conv_sum": "PPiii",                  # samples, bias, splits, channels, act
    "conv2d_strided": "PPPiiiii",         # samples, w, bias, c_in, c_out, k, stride, act
    **{name: "PPPiii" for name, _ in DEPTHWISE_GEOMETRY.values()},  # samples, w, bias,
    # channels, stride, act
    "max_pool": "Pii",                    # samples, channels, k
    "resize_linear": "Pi",                # samples, channels
    "copy_floats": "P",
    "relu": "P",
    "sigmoid": "P",
}


def source(name: str) -> str:
    """Text of the CUDA source ``name`` of this package."""
    return (SOURCE_DIR / name).read_text()


@dataclass(frozen=True)
class Kernels:
    """Prepared kernels of one context (argument formats as in ``prepare``)."""

    step_rmq: object         # (const Step*)
    step_reduce: object      # (const Step*)
    row_argmax: object       # (values, n_rows, n_cols, best, best_arg)
    reverse_windows: object  # (lo, hi, n_r, n_q, n_o, rlo, rhi)
    finish: object           # (best, best_arg, merge_arg, args, links, sizes, m, c, result)
    links: dict              # (sampler, lanes) -> (const LinkStage*, n_stages, Image)
    evidence: dict           # evidence.cu kernel name -> function (formats in _load)
    network: dict            # network.cu kernel name -> function


def evidence_constants() -> dict[str, float | int]:
    """The host's constants that ``evidence.cu`` is compiled with (``-DNAME=value``), so that the
    device computes with the very values of :mod:`core.scores` and :mod:`core.surface`."""
    from core import scores, surface

    return {"PATCH_RADIUS": scores.PATCH_RADIUS, "SPREAD_FLOOR": scores.SPREAD_FLOOR,
            "RELATIVE_FLOOR": scores.RELATIVE_FLOOR, "ABSOLUTE_FLOOR": scores.ABSOLUTE_FLOOR,
            "STRETCH_SPAN_FLOOR": surface.STRETCH_SPAN_FLOOR}


def link_constants() -> dict[str, float]:
    """The host's constants that ``links.cu`` is compiled with: :mod:`core.links`' slack of the
    sample count (a link a rounding longer than a whole number of px samples as on the CPU)."""
    from core import links

    return {"LINK_SAMPLE_SLACK": links.SAMPLE_COUNT_SLACK}


def source_options(name: str) -> list[str]:
    """The nvcc options the CUDA source ``name`` needs besides its precision: ``evidence.cu``'s
    :func:`evidence_constants` and ``links.cu``'s :func:`link_constants` as ``-DNAME=value``
    (floats written with ``repr``, the shortest text that reads back as the same double)."""
    constants = {"evidence.cu": evidence_constants,
                 "links.cu": link_constants}.get(name, dict)()
    return [f"-D{key}={value!r}" for key, value in constants.items()]


def kernel_cache_dir() -> str | bool | None:
    """Where pycuda keeps the compiled kernels, as ``SourceModule``'s ``cache_dir``: None (its
    own choice: ``PYCUDA_CACHE_DIR``, else the user's cache folder) where that folder can be
    made and written, else a folder of this user's in the temporary folder, else False (no
    cache: every run builds the kernels again). pycuda itself fails to build any kernel where
    its folder cannot be made."""
    if "PYCUDA_DISABLE_CACHE" in os.environ:
        return None
    if "PYCUDA_CACHE_DIR" in os.environ:
        folder = os.environ["PYCUDA_CACHE_DIR"]
    else:
        import platformdirs  # a dependency of pycuda

        folder = os.path.join(platformdirs.user_cache_dir("pycuda", "pycuda"),
                              "compiler-cache-v1")
    fallback = os.path.join(tempfile.gettempdir(), f"roadtracer-pycuda-cache-{_user()}")
    for choice, answer in ((folder, None), (fallback, fallback)):
        try:
            os.makedirs(choice, exist_ok=True)
        except OSError:
            continue
        if os.access(choice, os.W_OK | os.X_OK):
            return answer
    return False


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        return "user"


def _compile(name: str, *options: str):
    from pycuda.compiler import SourceModule

    return SourceModule(source(name), no_extern_c=True, cache_dir=kernel_cache_dir(),
                        options=["-std=c++17", *source_options(name), *options])


def _load(precision: str, shared: tuple):
    real = f"-DREAL={PRECISIONS[precision]}"
    dp = _compile("dp.cu", real)
    links = _compile("links.cu", real)
    evidence, network = shared

    def prepared(module, name, arg_format):
        function = module.get_function(name)
        function.prepare(arg_format)
        return function

    return Kernels(
        step_rmq=prepared(dp, "dp_step_rmq", "P"),
        step_reduce=prepared(dp, "dp_step_reduce", "P"),
        row_argmax=prepared(dp, "row_argmax", "PiiPP"),
        reverse_windows=prepared(dp, "reverse_windows", "PPiiiPP"),
        finish=prepared(dp, "finish", "PPPPPPiiP"),
        # (stages, n_stages, struct Image {const float* planes; int rows, cols, col0, row0,
        # width, height; double tau})
        links={(sampler, lanes): prepared(links, f"{name}_{lanes}", "PiPiiiiiid")
               for sampler, name in LINK_KERNELS.items() for lanes in LINK_LANES},
        evidence={name: prepared(evidence, name, arg_format)
                  for name, arg_format in EVIDENCE_KERNELS.items()},
        network={name: prepared(network, name, arg_format)
                 for name, arg_format in NETWORK_KERNELS.items()},
    )


def load_kernels(context, precision: str = "float64") -> Kernels:
    """The compiled kernels of ``context`` (a :class:`gpu.context.GpuContext`) with link scores
    and DP in ``precision`` (a key of :data:`PRECISIONS`), memoised.

    Call inside ``context.active()``: the modules are built for, and belong to, that context.
    """
    if context not in _SHARED:
        _SHARED[context] = (_compile("evidence.cu"), _compile("network.cu"))
    if (context, precision) not in _KERNELS:
        _KERNELS[context, precision] = _load(precision, _SHARED[context])
    return _KERNELS[context, precision]


_KERNELS: dict = {}
_SHARED: dict = {}
