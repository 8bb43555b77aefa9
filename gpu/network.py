"""An ONNX convolutional network run on the device with the kernels of ``network.cu``.

The surface model (core/surface.py) is a U-Net exported from PyTorch; rather than
hard-code its architecture, :func:`network_program` reads the ONNX graph and lowers it, for one
input size, to a list of :class:`Layer` s of the operators below (anything else makes the model
unsupported on the device, with a one-line reason, and the host runs it):

* ``Conv`` (square odd kernel ≤ 7, dilation 1, symmetric padding K // 2; stride 1, or any
  stride with one group, or 3 × 3 depthwise (one group per channel) with stride 1 or 2; a
  ``Relu`` or a ``Clip`` to [0, 6] that alone reads its output is fused into it), ``Relu``,
  ``Sigmoid``, ``Add`` of a computed tensor onto the output of the 1 × 1 convolution just
  before it (read by nothing else, no activation of its own: the convolution adds it as it
  writes, and an activation after the Add is fused after the sum);
* ``MaxPool`` (kernel = stride, no padding), ``Resize`` (linear, half-pixel coordinates,
  constant scales or sizes), ``Concat`` along channels;
* every node whose inputs are all constant once the input size is known (``Constant``,
  ``Shape`` and the arithmetic an export adds around it) is evaluated on the host when the
  program is made (ONNX's reference evaluator).

:class:`DeviceNetwork` owns the weights on the device and, per input size rounded up to
``PROGRAM_BUCKET``, the activations and the launches of one program, captured in a CUDA graph
(:mod:`gpu.graphs`) so that a whole forward pass is one launch for every size in that bucket
(the launches' grids cover its largest size; a size's own shapes and addresses are in the
Sample table the launches read). Several inputs of any sizes (the windows of a batch) run together:
their activations side by side, each layer one launch for all of them (every kernel reads its
inputs' addresses and sizes from a table, :data:`SAMPLE_DTYPE`). Call its methods inside
``context.active()``.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from core.errors import ModelUnavailable
from core.surface import NO_MODEL_HINT
from gpu.graphs import launch_key

#: Convolution kernel sizes network.cu is built for (1: the ``pointwise`` kernel).
CONV_SIZES = (1, 3, 5, 7)
#: A convolution block's threads (CONV_TILE x CONV_TILE, network.cu's TILE).
CONV_TILE = 16
#: Per geometry of the convolution kernels, narrow (False: many short blocks, for small planes)
#: and wide (True: more work per block, for large planes and batches): the kernel's name before
#: its size K, the output tile's rows and its output channels, and the input channels per block
#: of a split convolution (layers with more are split into groups of this many, summed by
#: ``conv_sum``; wide: not at the input's resolution, where the planes give the device blocks
#: enough).
CONV_GEOMETRY = {False: ("conv2d_k", 16, 8, 8), True: ("conv2d_wide_k", 32, 16, 16)}
#: A forward pass over inputs of at least this many pixels in all (one input: its size bucket's)
#: uses the wide geometry, ``depthwise3_wide`` and, for the large planes, ``pointwise_staged``.
#: On the H100, the bundled model's pass replayed as a CUDA graph: 272 x 336 0.66-0.68 ms wide
#: against 0.80 ms narrow (with one output per thread of the strided layer too), the sample's two
#: inputs (272 x 336 and 144 x 176) batched 0.73-0.77 against 1.02-1.04 ms, 64 inputs of 64 x 48
#: batched 1.31-1.33 against 1.71-1.75 ms; but 144 x 176, 96 x 128 and 64 x 48 0.43, 0.37 and
#: 0.36 ms wide against 0.38-0.40, 0.25-0.26 and 0.22-0.24 ms narrow.
WIDE_PIXELS = 48 * 1024
#: Per geometry (narrow, wide), the depthwise convolution's kernel and the outputs along a row
#: each of its threads computes.
DEPTHWISE_GEOMETRY = {False: ("depthwise3", 1), True: ("depthwise3_wide", 4)}
#: Output channels per block of the pointwise kernel (CO_TILE) and per thread of the strided
#: convolution (STRIDED_CO).
POINTWISE_CHANNELS, STRIDED_CHANNELS = 8, 16
#: Threads of a pointwise block (pixels × slices of the input channels), and the fewest input
#: channels a slice sums: the slices are the power of 2, 1 to 32, that gives each about this
#: many (4 was the fastest of 1, 2, 4, 8, 16, 32 and 64 on the H100 at 144 x 176; at 64 x 48
#: 1 and 2 were 3 % faster, 8 and more slower).
POINTWISE_THREADS, POINTWISE_SLICE_CHANNELS = 256, 4
#: In a wide pass, pointwise layers of at least an eighth of the input's rows (large planes:
#: blocks of much work) use ``pointwise_staged``, whose block copies its weights to shared memory
#: first (at most ``STAGED_CHANNELS`` input channels), with slices of at least this many input
#: channels.
STAGED_SLICE_CHANNELS, STAGED_CHANNELS = 16, 512
#: Input size buckets whose programs of their own (activations, CUDA graph) are kept on the
#: device: at most this many, and their activations at most ``CACHED_BYTES`` (and an eighth of
#: the device's memory) together; the program in use is always kept. A user's clicks of many
#: lengths then mostly find theirs.
CACHED_SIZES = 32
CACHED_BYTES = 512 * 1024 * 1024
#: One input's rows and columns are rounded up to multiples of this for its program: a drag's
#: windows of many sizes replay a few CUDA graphs.
PROGRAM_BUCKET = 32


#: network.cu's activation codes of a convolution's output.
ACTIVATIONS = {"none": 0, "relu": 1, "relu6": 2}
#: Convolution-like layers an activation can be fused into.
_CONVOLUTIONS = ("conv", "pointwise", "conv_strided", "depthwise")


class UnsupportedModel(ModelUnavailable):
    """The model uses something ``network.cu`` does not implement (the host runs it)."""


@dataclass(frozen=True)
class Layer:
    """One launch: ``op`` on tensors named ``inputs`` into ``output``.

    ``shape`` is the output's (channels, rows, cols); ``params`` the op's constants
    (``weight``/``bias`` names, ``k``, ``stride`` and ``act`` (ACTIVATIONS) for conv,
    pointwise (1 × 1), conv_strided and depthwise, ``k`` for max_pool, ``scale`` (y, x) for
    resize, ``offset`` (channel) for the copies that make a concat). A pointwise layer with two
    inputs adds the second to its sum before the activation (an ``Add`` folded in).
    """

    op: str
    inputs: tuple[str, ...]
    output: str
    shape: tuple[int, int, int]
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    """A network lowered for one input size.

    Attributes
    ----------
    layers : list of Layer, in execution order
    shapes : dict name -> (channels, rows, cols) of every runtime tensor (input included)
    input, output : names of the network's input and output tensors
    """

    layers: list
    shapes: dict
    input: str
    output: str


def _attributes(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _evaluate(node, constants: dict) -> list[np.ndarray]:
    """Outputs of a node whose inputs are all constant (ONNX's reference evaluator; a
    ``Constant`` holding a tensor is read directly)."""
    import onnx

    value = _attributes(node).get("value")
    if node.op_type == "Constant" and isinstance(value, onnx.TensorProto):
        return [onnx.numpy_helper.to_array(value)]
    from onnx.reference import ReferenceEvaluator

    names = [name for name in node.input if name]
    graph = onnx.helper.make_graph(
        [node], "fold",
        [onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(
            constants[name].dtype), constants[name].shape) for name in names],
        [onnx.helper.make_empty_tensor_value_info(name) for name in node.output])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, {name: constants[name] for name in names})


def load_model(path: str):
    """The ONNX model at ``path`` and its constant tensors (initializers).

    Raises
    ------
    UnsupportedModel
        If the onnx package is not installed.
    ModelUnavailable
        If the file is missing, cannot be opened, or is not an ONNX model (the wording of
        :mod:`core.surface`).
    """
    try:
        import onnx
        from google.protobuf.message import DecodeError
        from onnx import numpy_helper
    except ImportError:
        raise UnsupportedModel("the device runs the surface model with the onnx package: "
                               "pip install -e \".[gpu]\"") from None
    if not os.path.isfile(path):
        raise ModelUnavailable(f"surface model not found: {path} ({NO_MODEL_HINT})")
    try:
        model = onnx.load(path)
    except DecodeError:  # the file does not parse as an ONNX model
        raise ModelUnavailable(f"{path} is not an ONNX model: give the .onnx file of a surface "
                               f"model ({NO_MODEL_HINT})") from None
    except OSError as exc:
        raise ModelUnavailable(f"surface model {path} cannot be opened: "
                               f"{exc.strerror or exc}") from None
    constants = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    return model, constants


def _fold(node, names: list[str], constants: dict) -> bool:
    """Evaluate ``node`` into ``constants`` (in place) if every one of its input ``names`` is
    empty or constant and it has inputs or is a ``Constant``; whether it did."""
    if not (all(not name or name in constants for name in names)
            and (names or node.op_type == "Constant")):
        return False
    for name, value in zip(node.output, _evaluate(node, constants), strict=True):
        constants[name] = np.asarray(value)
    return True


def fold_constants(model, constants: dict) -> dict:
    """``constants`` and the outputs of every node computable from constants alone, whatever
    the input size (``Constant`` nodes, arithmetic on weights), evaluated once."""
    constants = dict(constants)
    for node in model.graph.node:
        if node.op_type != "Shape":
            _fold(node, [name for name in node.input if name], constants)
    return constants


@dataclass(frozen=True)
class _Node:
    """One ONNX node in plain Python: its operator, name, input and output names,
    attributes, and the node itself (for the constants folded from it)."""

    op_type: str
    name: str
    input: tuple
    output: tuple
    attributes: dict
    proto: object


@dataclass(frozen=True)
class OnnxGraph:
    """An ONNX model's graph read once (protobuf access is slow; a program is lowered for
    every new input size): its nodes, inputs (name, dims) and output names, and how many
    nodes read each tensor."""

    nodes: tuple
    inputs: tuple
    outputs: tuple
    readers: dict


def parse_graph(model) -> OnnxGraph:
    """The :class:`OnnxGraph` of ``model`` (an ``onnx.ModelProto``)."""
    graph = model.graph
    nodes = tuple(_Node(node.op_type, node.name, tuple(node.input), tuple(node.output),
                        _attributes(node), node) for node in graph.node)
    readers: dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    inputs = tuple((value.name, tuple(dim.dim_value for dim in
                                      value.type.tensor_type.shape.dim))
                   for value in graph.input)
    return OnnxGraph(nodes, inputs, tuple(value.name for value in graph.output), readers)


def network_program(model, constants: dict, rows: int, cols: int) -> Program:
    """Lower ``model`` (an ``onnx.ModelProto`` or its :func:`parse_graph`, one input (1, C,
    rows, cols)) to layers.

    Raises
    ------
    UnsupportedModel
        Naming the first node the device cannot run.
    """
    graph = model if isinstance(model, OnnxGraph) else parse_graph(model)
    inputs = [(name, dims) for name, dims in graph.inputs if name not in constants]
    if len(inputs) != 1 or len(graph.outputs) != 1:
        raise UnsupportedModel("the device runs networks of one input and one output")
    dims = inputs[0][1]
    channels = dims[1] if len(dims) == 4 else 0
    if channels <= 0:
        raise UnsupportedModel("the network's input is not (1, C, H, W) with a fixed C")
    constants = dict(constants)
    shapes = {inputs[0][0]: (channels, rows, cols)}
    readers = graph.readers
    layers: list[Layer] = []
    fused: dict[str, str] = {}  # Relu output -> the conv output it was fused into

    def unsupported(node, why):
        return UnsupportedModel(f"the device cannot run {node.op_type} node {node.name!r} of the "
                                f"surface model ({why})")

    for node in graph.nodes:
        if all(name in constants for name in node.output):  # folded already (fold_constants)
            continue
        names = [fused.get(name, name) for name in node.input]
        if _fold(node.proto, names, constants):
            continue
        op, attrs = node.op_type, node.attributes
        if op == "Shape":
            constants[node.output[0]] = np.array([1, *shapes[names[0]]], dtype=np.int64)
            continue
        if any(name and name not in shapes and name not in constants for name in names):
            raise unsupported(node, "an input is neither computed nor constant")
        source = shapes.get(names[0])
        if source is None:
            raise unsupported(node, "its first input is constant")
        out = node.output[0]
        if op == "Conv":
            layers.append(_conv_layer(node, names, constants, source, unsupported))
        elif op in ("Relu", "Sigmoid", "Clip"):
            activation = "relu" if op == "Relu" else _clip_activation(node, names, constants)
            producer = layers[-1] if layers else None
            if (activation is not None and producer is not None and producer.op in _CONVOLUTIONS
                    and producer.params["act"] == "none" and producer.output == names[0]
                    and readers.get(node.input[0], 0) == 1):
                layers[-1] = Layer(producer.op, producer.inputs, out, producer.shape,
                                   {**producer.params, "act": activation})
                fused[producer.output] = out
                del shapes[producer.output]
            elif op == "Clip":
                raise unsupported(node, "only a Clip to [0, 6] right after a convolution")
            else:
                layers.append(Layer(op.lower(), (names[0],), out, source))
        elif op == "Add":
            if len(names) != 2 or any(shapes.get(name) != source for name in names):
                raise unsupported(node, "only two computed tensors of one shape")
            producer = layers[-1] if layers else None
            alone = [k for k, name in enumerate(names)
                     if producer is not None and producer.op == "pointwise"
                     and len(producer.inputs) == 1 and producer.params["act"] == "none"
                     and producer.output == name and readers.get(node.input[k], 0) == 1]
            if not alone:
                raise unsupported(node, "only onto the output of the 1 × 1 convolution just "
                                        "before it, read by nothing else, with no activation")
            layers[-1] = Layer(producer.op, (*producer.inputs, names[1 - alone[0]]), out,
                               producer.shape, producer.params)
            fused[producer.output] = out
            del shapes[producer.output]
        elif op == "MaxPool":
            k = list(attrs.get("kernel_shape", []))
            if (len(k) != 2 or k[0] != k[1] or list(attrs.get("strides", [1, 1])) != k
                    or any(attrs.get("pads", [0, 0, 0, 0])) or attrs.get("ceil_mode", 0)
                    or any(d != 1 for d in attrs.get("dilations", [1, 1]))):
                raise unsupported(node, f"attributes {attrs}")
            layers.append(Layer("max_pool", (names[0],), out,
                                (source[0], source[1] // k[0], source[2] // k[0]), {"k": k[0]}))
        elif op == "Resize":
            mode = attrs.get("mode", b"nearest")
            transform = attrs.get("coordinate_transformation_mode", b"half_pixel")
            if mode != b"linear" or transform not in (b"half_pixel", b"pytorch_half_pixel"):
                raise unsupported(node, f"mode {mode!r}, coordinates {transform!r}")
            scales = constants.get(names[2]) if len(names) > 2 and names[2] else None
            sizes = constants.get(names[3]) if len(names) > 3 and names[3] else None
            if scales is not None and np.size(scales) == 4:
                scale = (float(scales[2]), float(scales[3]))
                size = (int(np.floor(source[1] * scale[0])), int(np.floor(source[2] * scale[1])))
            elif sizes is not None and np.size(sizes) == 4:
                size = (int(sizes[2]), int(sizes[3]))
                scale = (size[0] / source[1], size[1] / source[2])
            else:
                raise unsupported(node, "scales or sizes are not constant")
            kept = ((scales[0], scales[1]) == (1, 1) if scales is not None and np.size(scales) == 4
                    else (sizes[0], sizes[1]) == (1, source[0]))
            if not kept:
                raise unsupported(node, "it resizes batch or channels")
            pytorch = transform == b"pytorch_half_pixel"
            if pytorch and min(size) <= 1:
                raise unsupported(node, "pytorch_half_pixel to a size of 1")
            fixed = size if scales is None or np.size(scales) != 4 else None
            layers.append(Layer("resize", (names[0],), out, (source[0], *size),
                                {"scale": scale, "size": fixed, "pytorch": pytorch}))
        elif op == "Concat":
            if attrs.get("axis") != 1 or any(shapes.get(name) is None for name in names):
                raise unsupported(node, "only runtime tensors along channels")
            parts = [shapes[name] for name in names]
            if any(part[1:] != source[1:] for part in parts):
                raise unsupported(node, f"sizes differ: {parts}")
            offset = 0
            for name, part in zip(names, parts, strict=True):
                layers.append(Layer("copy", (name,), out, part, {"offset": offset}))
                offset += part[0]
            shapes[out] = (offset, *source[1:])
            continue
        else:
            raise unsupported(node, "operator not implemented on the device")
        shapes[out] = layers[-1].shape
    output = fused.get(graph.outputs[0], graph.outputs[0])
    if output not in shapes:
        raise UnsupportedModel("the network's output is constant")
    return Program(layers, shapes, inputs[0][0], output)


def program_for_size(program: Program, rows: int, cols: int) -> Program:
    """``program`` (lowered for another input size from a graph without ``Shape`` nodes, whose
    layers then do not depend on the size) for input (1, C, rows, cols): every tensor's shape
    derived again layer by layer, as :func:`network_program` derives them, without reading
    the graph again (a drag meets a new input size at almost every step).

    Raises
    ------
    UnsupportedModel
        If a ``pytorch_half_pixel`` resize would make a size of 1 (as network_program).
    """
    shapes = {program.input: (program.shapes[program.input][0], rows, cols)}
    layers = []
    for layer in program.layers:
        source = shapes[layer.inputs[0]]
        channels, params = layer.shape[0], layer.params
        if layer.op in ("conv_strided", "depthwise"):
            stride = params["stride"]
            size = ((source[1] - 1) // stride + 1, (source[2] - 1) // stride + 1)
        elif layer.op == "max_pool":
            size = (source[1] // params["k"], source[2] // params["k"])
        elif layer.op == "resize" and params["size"] is not None:
            size = tuple(params["size"])
            params = {**params, "scale": (size[0] / source[1], size[1] / source[2])}
        elif layer.op == "resize":
            size = (int(np.floor(source[1] * params["scale"][0])),
                    int(np.floor(source[2] * params["scale"][1])))
        else:
            size = tuple(source[1:])
        if layer.op == "resize" and params["pytorch"] and min(size) <= 1:
            raise UnsupportedModel("the surface model's pytorch_half_pixel resize would make a "
                                   f"size of 1 from an input of {rows} × {cols}")
        if layer.op == "copy" and shapes.get(layer.output, (0, *size))[1:] != tuple(size):
            raise UnsupportedModel(f"the surface model concatenates tensors of different sizes "
                                   f"for an input of {rows} × {cols}")
        layers.append(Layer(layer.op, layer.inputs, layer.output, (channels, *size), params))
        shapes[layer.output] = (program.shapes[layer.output][0], *size)
    return Program(layers, shapes, program.input, program.output)


def _conv_layer(node, names: list, constants: dict, source: tuple, unsupported) -> Layer:
    """The Layer of an ONNX ``Conv`` node on an input of shape ``source`` (its activation
    "none" until a following Relu or Clip is fused into it)."""
    attrs = node.attributes
    weight = constants.get(names[1])
    if weight is None or weight.ndim != 4:
        raise unsupported(node, "weights are not a constant 4-D tensor")
    k = weight.shape[2]
    group = attrs.get("group", 1)
    strides = list(attrs.get("strides", [1, 1]))
    channels = weight.shape[0]
    depthwise = group == source[0] == channels > 1 and weight.shape[1] == 1 and k == 3
    if (weight.shape[3] != k or k not in CONV_SIZES or len(set(strides)) != 1
            or any(d != 1 for d in attrs.get("dilations", [1, 1]))
            or list(attrs.get("pads", [0, 0, 0, 0])) != [k // 2] * 4
            or attrs.get("auto_pad", b"NOTSET") != b"NOTSET"
            or not (depthwise and strides[0] in (1, 2)
                    or group == 1 and weight.shape[1] == source[0])):
        raise unsupported(node, f"kernel {weight.shape}, attributes {attrs}")
    stride = strides[0]
    op = ("depthwise" if depthwise else "conv_strided" if stride != 1
          else "pointwise" if k == 1 else "conv")
    shape = (channels, (source[1] - 1) // stride + 1, (source[2] - 1) // stride + 1)
    bias = names[2] if len(names) > 2 and names[2] else None
    return Layer(op, (names[0],), node.output[0], shape,
                 {"weight": names[1], "bias": bias, "k": k, "stride": stride, "act": "none"})


def _clip_activation(node, names: list, constants: dict) -> str | None:
    """"relu6" for a ``Clip`` node to [0, 6] (bounds as constant inputs or, before opset 11,
    attributes), else None."""
    bounds = [constants.get(name) if name else None for name in names[1:3]] + [None, None]
    low = node.attributes.get("min") if bounds[0] is None else bounds[0]
    high = node.attributes.get("max") if bounds[1] is None else bounds[1]
    if low is None or high is None or np.size(low) != 1 or np.size(high) != 1:
        return None
    return "relu6" if (float(low), float(high)) == (0.0, 6.0) else None


class DeviceNetwork:
    """The model at ``path`` on the device, run on ``stream`` with ``kernels`` (network.cu).

    Parameters
    ----------
    path : str
        ONNX file.
    stream : pycuda.driver.Stream
    kernels : dict
        network.cu kernel name -> prepared function (gpu/kernels.py).
    channels : (int, int), optional
        The input and output channels the caller writes and reads.

    Attributes
    ----------
    channels : (int, int)
        The model's input channels C (input (1, C, rows, cols)) and output channels (output
        (channels, rows', cols')).

    Raises
    ------
    UnsupportedModel
        If the device cannot run the model, or its channels are not ``channels``.
    """

    def __init__(self, path: str, stream, kernels: dict,
                 channels: tuple[int, int] | None = None):
        import pycuda.driver as cuda

        self.cuda = cuda
        self.path = path
        self.stream = stream
        self.kernels = kernels
        self._device_bytes = cuda.mem_get_info()[1]
        model, constants = load_model(path)
        self.graph, self.constants = parse_graph(model), fold_constants(model, constants)
        self._weights: dict[str, object] = {}
        self._layouts: OrderedDict = OrderedDict()
        self._programs: OrderedDict = OrderedDict()
        #: Batched passes' plans (:meth:`batch_plan`) by input shapes and buffers.
        self._batch_plans: OrderedDict = OrderedDict()
        program = network_program(self.graph, self.constants, PROGRAM_BUCKET,
                                  PROGRAM_BUCKET)  # UnsupportedModel now
        #: Without Shape nodes the layers do not depend on the input size: each size's
        #: program is this one's shapes derived again (program_for_size), not a new lowering.
        self._any_size = (program if all(node.op_type != "Shape" for node in self.graph.nodes)
                          else None)
        self.channels = (program.shapes[program.input][0], program.shapes[program.output][0])
        if channels is not None and self.channels != tuple(channels):
            raise UnsupportedModel(f"surface model {path} reads {self.channels[0]} planes and "
                                   f"returns {self.channels[1]}, not {channels[0]} and "
                                   f"{channels[1]}")

    def _weight(self, name: str | None) -> int:
        if name is None:
            return 0
        if name not in self._weights:
            values = np.ascontiguousarray(self.constants[name], dtype=np.float32)
            allocation = self.cuda.mem_alloc(max(values.nbytes, 4))
            self.cuda.memcpy_htod(allocation, values)
            self._weights[name] = allocation
        return int(self._weights[name])

    def layout(self, rows: int, cols: int, wide: bool = False) -> ProgramLayout:
        """The program for input (1, C, rows, cols) laid out from byte 0, for a narrow or
        ``wide`` pass (CONV_GEOMETRY; cached)."""
        key = (int(rows), int(cols), bool(wide))
        layout = self._layouts.get(key)
        if layout is None:
            program = (program_for_size(self._any_size, *key[:2]) if self._any_size is not None
                       else network_program(self.graph, self.constants, *key[:2]))
            layout = self._layouts[key] = ProgramLayout(program, self._weight, key[2])
            if len(self._layouts) > CACHED_LAYOUTS:
                self._layouts.popitem(last=False)
        else:
            self._layouts.move_to_end(key)
        return layout

    def prepared(self, rows: int, cols: int, upload=None) -> _Prepared:
        """The program of the input size bucket (``PROGRAM_BUCKET``) of (1, C, rows, cols) on
        its own buffers, bound to this size: its ``input`` and ``output`` are this size's until
        the next call (cached; the least recently used beyond ``CACHED_SIZES`` or the bytes
        budget, ``CACHED_BYTES``, are freed, after the work queued on the stream). A changed Sample
        table is queued by ``upload(array, pointer)`` (a :class:`gpu.engine.DeviceTracer`'s),
        else copied before this returns."""
        key = bucket(rows, cols)
        wide = key[0] * key[1] >= WIDE_PIXELS
        prepared = self._programs.get(key)
        if prepared is not None:
            self._programs.move_to_end(key)
        else:
            prepared = self._programs[key] = _Prepared(self, self.layout(*key, wide))
            held, budget = self.cached_bytes(), min(CACHED_BYTES, self._device_bytes // 8)
            while len(self._programs) > 1 and (len(self._programs) > CACHED_SIZES
                                               or held > budget):
                self.stream.synchronize()  # queued forward passes may still use it
                dropped = self._programs.popitem(last=False)[1]
                held -= dropped.capacity
                dropped.free()
        prepared.bind(self.layout(rows, cols, wide), upload)
        return prepared

    def batch_plan(self, layouts: list, base: int, at: int) -> tuple:
        """:func:`batch_plan` of ``layouts`` (ProgramLayout each) with their activations from
        device address ``base`` and the Sample table at ``at`` (cached per input shapes and
        addresses, the least recently used beyond ``CACHED_LAYOUTS`` dropped)."""
        key = (tuple(layout.input_shape for layout in layouts), base, at)
        plan = self._batch_plans.get(key)
        if plan is None:
            plan = self._batch_plans[key] = batch_plan(self, layouts, base, at)
            if len(self._batch_plans) > CACHED_LAYOUTS:
                self._batch_plans.popitem(last=False)
        else:
            self._batch_plans.move_to_end(key)
        return plan

    def cached_bytes(self) -> int:
        """Bytes of activations of the programs kept (:meth:`prepared`)."""
        return sum(program.capacity for program in self._programs.values())

    def forward(self, sizes: list, slot, upload) -> _Prepared | _Batched:
        """A forward pass over inputs of ``sizes`` ((rows, cols) each) to launch: for one, its
        cached :meth:`prepared` program; for several, every layer launched once for all of
        them, on buffers from ``slot(name, nbytes)`` with the Sample table queued by
        ``upload(array, pointer)`` (a :class:`gpu.engine.DeviceTracer`'s)."""
        if len(sizes) == 1:
            return self.prepared(*sizes[0], upload)
        wide = sum(rows * cols for rows, cols in sizes) >= WIDE_PIXELS
        return _Batched(self, [self.layout(*size, wide) for size in sizes], slot, upload)

    def run(self, image: np.ndarray) -> np.ndarray:
        """The network's output (channels, rows, cols) float32 for ``image`` (1, C, rows, cols),
        host to host (checks and tests; the tracer keeps both on the device)."""
        prepared = self.prepared(*image.shape[2:])
        self.cuda.memcpy_htod_async(prepared.input, np.ascontiguousarray(image, np.float32),
                                    self.stream)
        prepared.launch(self.stream)
        out = np.empty(prepared.output_shape, dtype=np.float32)
        self.cuda.memcpy_dtoh_async(out, prepared.output, self.stream)
        self.stream.synchronize()
        return out

    def release(self) -> None:
        """Free the weights and every cached program."""
        for prepared in self._programs.values():
            prepared.free()
        self._programs.clear()
        self._layouts.clear()
        self._batch_plans.clear()
        for allocation in self._weights.values():
            allocation.free()
        self._weights.clear()


#: network.cu's Sample: one input's part of a launch (its tensors' addresses, the output's and
#: the input's sizes, a resize's scales).
SAMPLE_DTYPE = np.dtype([("in", np.uint64), ("out", np.uint64), ("rows", np.int32),
                         ("cols", np.int32), ("in_rows", np.int32), ("in_cols", np.int32),
                         ("scale_y", np.float32), ("scale_x", np.float32),
                         ("extra", np.uint64)])
#: The Sample fields that hold addresses (offsets into an input's activations until rebased).
_ADDRESSES = ("in", "out", "extra")
#: Most samples of one launch (CUDA's grid z).
MAX_SAMPLES = 65535
#: Input sizes whose layouts (host only) are kept.
CACHED_LAYOUTS = 64
#: Name of the split convolutions' partial-sum buffer in a program's layout.
_PARTIAL = "\0partial sums"
_ALIGN = 256


def _conv_splits(c_in: int, at_input_resolution: bool, wide: bool) -> int:
    """Groups of input channels a convolution with ``c_in`` of them is split into in a narrow or
    ``wide`` pass (CONV_GEOMETRY)."""
    if wide and at_input_resolution:
        return 1
    return -(-c_in // CONV_GEOMETRY[wide][3])


def pointwise_block(c_in: int, slice_channels: int = POINTWISE_SLICE_CHANNELS
                    ) -> tuple[int, int, int]:
    """The thread block (pixels, slices, 1) of a pointwise convolution of ``c_in`` input
    channels, each slice summing at least ``slice_channels`` of them (where there are as many)."""
    slices = 1
    while slices < 32 and 2 * slices * slice_channels <= c_in:
        slices *= 2
    return POINTWISE_THREADS // slices, slices, 1


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class ProgramLayout:
    """One input size's ``program`` laid out in an activation buffer from byte 0, its weights
    at the device addresses ``weight(name)`` gives (0 for None), launched in a narrow or
    ``wide`` pass (CONV_GEOMETRY, WIDE_PIXELS).

    Attributes
    ----------
    nbytes : int
        The buffer's size.
    input, output : int
        Byte offsets of the network's input (C, rows, cols) and output.
    input_shape, output_shape : tuple of int
        (channels, rows, cols) of each.
    launches : list of (kernel name, block, blocks (x, y), constant arguments)
        One per kernel launch of a forward pass.
    samples : ndarray of shape (launches,), SAMPLE_DTYPE
        Each launch's Sample, addresses as offsets into the buffer.
    """

    def __init__(self, program: Program, weight, wide: bool = False):
        self.program = program
        self.wide = wide
        sizes = dict(program.shapes)
        # Partial sums of split convolutions: (splits, c_out, rows, cols), one buffer for all.
        splits = [(self._splits(layer), layer.shape) for layer in program.layers
                  if layer.op == "conv"]
        sizes[_PARTIAL] = (max([count * math.prod(shape) for count, shape in splits
                                if count > 1], default=1), 1, 1)
        # A tensor that a concat copies is written in place, in the concat's channels, instead
        # (each tensor is written once, so no layer overwrites it there): no copy launch.
        in_place = {}  # tensor -> (concat, its first channel there)
        for layer in program.layers:
            if (layer.op == "copy" and layer.inputs[0] not in in_place
                    and layer.inputs[0] != program.input):
                in_place[layer.inputs[0]] = (layer.output, layer.params["offset"])
        layout, total = {}, 0
        for name, shape in sizes.items():
            if name not in in_place:
                layout[name] = total
                total += _aligned(4 * math.prod(shape))
        self.nbytes = max(total, _ALIGN)

        def offset(name):
            if name not in in_place:
                return layout[name]
            concat, channel = in_place[name]
            return offset(concat) + 4 * channel * math.prod(sizes[name][1:])

        self.offset = {name: offset(name) for name in sizes}
        self.input = self.offset[program.input]
        self.output = self.offset[program.output]
        self.input_shape = program.shapes[program.input]
        self.output_shape = program.shapes[program.output]
        launches = [launch for layer in program.layers
                    if not (layer.op == "copy" and in_place.get(layer.inputs[0])
                            == (layer.output, layer.params["offset"]))
                    for launch in self._launch(weight, layer)]
        self.launches = [launch[:4] for launch in launches]
        self.samples = np.array([launch[4] for launch in launches], dtype=SAMPLE_DTYPE)

    def _splits(self, layer: Layer) -> int:
        """Groups of input channels the convolution ``layer`` is split into."""
        at_input = layer.shape[1:] == self.program.shapes[self.program.input][1:]
        return _conv_splits(self.program.shapes[layer.inputs[0]][0], at_input, self.wide)

    def _launch(self, weight, layer: Layer) -> list[tuple]:
        """(kernel name, block, blocks (x, y), constant arguments, Sample) of each launch of
        ``layer``."""
        source = self.program.shapes[layer.inputs[0]]
        at_in, at_out = self.offset[layer.inputs[0]], self.offset[layer.output]
        channels, rows, cols = layer.shape
        n = channels * rows * cols
        line = (-(-n // 256), 1)
        if layer.op in _CONVOLUTIONS:
            weights = weight(layer.params["weight"])
            bias, act = weight(layer.params["bias"]), ACTIVATIONS[layer.params["act"]]
            sizes = (at_in, at_out, rows, cols, source[1], source[2], 0, 0, 0)
        if layer.op == "conv_strided":
            return [("conv2d_strided", (256, 1, 1),
                     (-(-rows * cols // 256), -(-channels // STRIDED_CHANNELS)),
                     (weights, bias, source[0], channels, layer.params["k"],
                      layer.params["stride"], act), sizes)]
        if layer.op == "depthwise":
            name, per_thread = DEPTHWISE_GEOMETRY[self.wide]
            return [(name, (256, 1, 1), (-(-channels * rows * -(-cols // per_thread) // 256), 1),
                     (weights, bias, channels, layer.params["stride"], act), sizes)]
        if layer.op == "pointwise":
            # By the layer's depth (its rows against the input's, the same answer for every
            # input of 9 rows or more), not its size: inputs of any sizes batched together
            # launch the same list.
            staged = (self.wide and 8 * rows >= self.input_shape[1]
                      and source[0] <= STAGED_CHANNELS)
            block = pointwise_block(source[0], STAGED_SLICE_CHANNELS if staged
                                    else POINTWISE_SLICE_CHANNELS)
            residual = len(layer.inputs) > 1
            return [("pointwise_staged" if staged else "pointwise", block,
                     (-(-rows * cols // block[0]),
                                          -(-channels // POINTWISE_CHANNELS)),
                     (weights, bias, source[0], channels, act, int(residual)),
                     (*sizes[:-1], self.offset[layer.inputs[1]] if residual else 0))]
        if layer.op == "conv":
            splits = self._splits(layer)
            prefix, tile_rows, tile_channels, split_channels = CONV_GEOMETRY[self.wide]
            blocks = (-(-cols // CONV_TILE) * -(-rows // tile_rows),
                      -(-channels // tile_channels) * splits)
            conv, tile = f"{prefix}{layer.params['k']}", (CONV_TILE, CONV_TILE, 1)
            if splits == 1:
                return [(conv, tile, blocks, (weights, bias, source[0], channels, act,
                                              source[0]),
                         (at_in, at_out, rows, cols, rows, cols, 0, 0, 0))]
            partial = self.offset[_PARTIAL]
            return [(conv, tile, blocks, (weights, 0, source[0], channels, 0,
                                          split_channels),
                     (at_in, partial, rows, cols, rows, cols, 0, 0, 0)),
                    ("conv_sum", (256, 1, 1), line, (bias, splits, channels, act),
                     (partial, at_out, rows, cols, rows, cols, 0, 0, 0))]
        if layer.op == "max_pool":
            return [("max_pool", (256, 1, 1), line, (channels, layer.params["k"]),
                     (at_in, at_out, rows, cols, source[1], source[2], 0, 0, 0))]
        if layer.op == "resize":
            return [("resize_linear", (256, 1, 1), line, (channels,),
                     (at_in, at_out, rows, cols, source[1], source[2],
                      *layer.params["scale"], 0))]
        if layer.op == "copy":
            at_out += 4 * layer.params["offset"] * rows * cols
            return [("copy_floats", (256, 1, 1), line, (), (at_in, at_out, 1, n, 1, n, 0, 0, 0))]
        return [(layer.op, (256, 1, 1), line, (), (at_in, at_out, 1, n, 1, n, 0, 0, 0))]


class _Prepared:
    """The program of one input size bucket on its own activations and Sample table (one
    allocation), the launches' grids those of the bucket's largest size (``largest``, a
    ProgramLayout), run by :meth:`launch` for the size last bound (:meth:`bind`)."""

    def __init__(self, network: DeviceNetwork, largest: ProgramLayout):
        self.cuda, self.stream = network.cuda, network.stream
        self.capacity = largest.nbytes
        self.allocation = self.cuda.mem_alloc(self.capacity + largest.samples.nbytes)
        self.table_at = int(self.allocation) + self.capacity
        self.launches = [(network.kernels[name], (*blocks, 1), block,
                          (self.table_at + j * SAMPLE_DTYPE.itemsize, *constants))
                         for j, (name, block, blocks, constants) in enumerate(largest.launches)]
        self.bound = None
        self.graph = None
        self.runs = 0

    def bind(self, layout: ProgramLayout, upload=None) -> None:
        """Run the next forward passes on an input of ``layout``'s size (no larger than the
        bucket's): its Sample table queued by ``upload(array, pointer)`` unless already bound,
        else copied once the stream's work is done; ``input``/``output``: device addresses,
        ``output_shape``; ``inputs``/``outputs``/``output_shapes``: the same as lists of one."""
        if layout is self.bound:
            return
        if layout.nbytes > self.capacity or len(layout.launches) != len(self.launches):
            raise ValueError(f"input {layout.input_shape} does not fit this program")
        base = int(self.allocation)
        table = layout.samples.copy()
        for name in _ADDRESSES:
            table[name] += np.uint64(base)
        if upload is None:
            self.stream.synchronize()  # queued forward passes read the table bound before
            self.cuda.memcpy_htod(self.table_at, table)
        else:
            upload(table, self.table_at)
        self.bound = layout
        self.input, self.output = base + layout.input, base + layout.output
        self.output_shape = layout.output_shape
        self.inputs, self.outputs = [self.input], [self.output]
        self.output_shapes = [self.output_shape]

    def _launch_all(self, stream) -> None:
        for function, grid, block, args in self.launches:
            function.prepared_async_call(grid, block, stream, *args)

    def launch(self, stream, graphs=None) -> None:
        """Queue the forward pass (input at ``self.input``, output at ``self.output``): layer by
        layer the first time, as one CUDA graph from the second time on, whatever size of the
        bucket is bound (a drag's windows replay it; so does a click traced again). ``graphs``
        is not used: the program keeps its own graph."""
        from gpu.graphs import capture

        self.runs += 1
        if self.runs == 2:
            self.graph = capture(stream, self._launch_all)
        if self.graph is not None:
            self.graph.launch(stream)
        else:
            self._launch_all(stream)

    def free(self) -> None:
        self.graph = None
        self.allocation.free()


def batch_bytes(layouts: list) -> int:
    """Bytes of the activations of ``layouts`` (ProgramLayout each) side by side."""
    return sum(layout.nbytes for layout in layouts)


def batch_samples(layouts: list, base: int) -> tuple[np.ndarray, list[int]]:
    """The Sample table of one forward pass over inputs laid out by ``layouts`` (ProgramLayout
    each, of one network), their activations side by side from device address ``base``.

    Returns
    -------
    table : ndarray of shape (launches, inputs), SAMPLE_DTYPE
        Row j: launch j's Samples (``layouts[0].launches[j]``, the same for every input).
    starts : list of int
        Each input's activations' address.
    """
    starts = np.cumsum([base] + [layout.nbytes for layout in layouts[:-1]]).astype(np.uint64)
    table = np.stack([layout.samples for layout in layouts], axis=1)
    for name in _ADDRESSES:
        table[name] += starts
    return table, [int(start) for start in starts]


def bucket(rows: int, cols: int) -> tuple[int, int]:
    """The input size bucket of (rows, cols): both rounded up to ``PROGRAM_BUCKET``."""
    return (-(-int(rows) // PROGRAM_BUCKET) * PROGRAM_BUCKET,
            -(-int(cols) // PROGRAM_BUCKET) * PROGRAM_BUCKET)


def batch_plan(network: DeviceNetwork, layouts: list, base: int, at: int) -> tuple:
    """What a forward pass over inputs laid out by ``layouts`` needs, with their activations
    from device address ``base`` and the Sample table at ``at``: the table (batch_samples),
    each input's and output's address, the output shapes, the launches (function, grid,
    block, arguments, shared bytes 0), whose grids cover each input's size bucket, and their
    :func:`gpu.graphs.launch_key`."""
    count = len(layouts)
    table, starts = batch_samples(layouts, base)
    inputs = [start + layout.input for start, layout in zip(starts, layouts, strict=True)]
    outputs = [start + layout.output for start, layout in zip(starts, layouts, strict=True)]
    blocks = np.array([[launch[2] for launch in network.layout(
        *bucket(*layout.input_shape[1:]), layout.wide).launches] for layout in layouts])
    most = blocks.max(axis=0)  # (launches, 2): every input's blocks fit
    launches = []
    row = count * SAMPLE_DTYPE.itemsize
    for j, (name, block, _, constants) in enumerate(layouts[0].launches):
        for first in range(0, count, MAX_SAMPLES):
            launches.append((network.kernels[name],
                             (int(most[j, 0]), int(most[j, 1]), min(MAX_SAMPLES, count - first)),
                             block, (at + j * row + first * SAMPLE_DTYPE.itemsize, *constants),
                             0))
    return (table, inputs, outputs, [layout.output_shape for layout in layouts], launches,
            launch_key(launches))


class _Batched:
    """One forward pass over several inputs of any sizes, each layer one launch for all of
    them: each input's activations side by side in the ``network_activations`` slot, the
    launches' Sample tables (launch by launch, input by input) in ``network_samples``. The
    launches' grids cover each input's size bucket, so that inputs of the same buckets launch
    the same list (replayed as a CUDA graph by :meth:`launch` with ``graphs``).

    Attributes
    ----------
    inputs, outputs : list of int
        Device address of each input's (C, rows, cols) and output.
    output_shapes : list of (channels, rows, cols)
    """

    def __init__(self, network: DeviceNetwork, layouts: list, slot, upload):
        count = len(layouts)
        base = slot("network_activations", batch_bytes(layouts))
        at = slot("network_samples", len(layouts[0].launches) * count * SAMPLE_DTYPE.itemsize)
        table, self.inputs, self.outputs, self.output_shapes, self.launches, self.key = \
            network.batch_plan(layouts, base, at)
        upload(table, at)

    def launch(self, stream, graphs=None) -> None:
        """Queue the forward pass of every input; with ``graphs`` (a
        :class:`gpu.graphs.LaunchGraphs`), as one CUDA graph once the same list comes back."""
        if graphs is not None:
            graphs.launch(stream, self.launches, self.key)
            return
        for function, grid, block, args, _ in self.launches:
            function.prepared_async_call(grid, block, stream, *args)
