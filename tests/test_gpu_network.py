"""The device's lowering of the surface model (gpu/network.py), checked without a GPU: a numpy
twin of network.cu's layers runs the lowered program and must give ONNX Runtime's logits, and
a numpy twin of its kernels runs the launches and Sample tables of several inputs laid out side
by side in one memory. On a GPU the kernels themselves are checked against ONNX Runtime
(``gpu`` tests)."""

from __future__ import annotations

import numpy as np
import pytest

from core import surface
from core.errors import ModelUnavailable
from core.surface import NO_MODEL_HINT
from gpu.network import (
    ACTIVATIONS,
    PROGRAM_BUCKET,
    ProgramLayout,
    UnsupportedModel,
    batch_bytes,
    batch_samples,
    fold_constants,
    load_model,
    network_program,
    pointwise_block,
    program_for_size,
)

pytest.importorskip("onnx")


def bundled_model():
    """The bundled surface model and its constants, those computed from weights included (as
    gpu.network.DeviceNetwork reads it)."""
    model, constants = load_model(str(surface.MODEL_PATH))
    return model, fold_constants(model, constants)


def _activate(x, act):
    """network.cu's activation codes: 0 none, 1 ReLU, 2 ReLU6."""
    return {0: x, 1: np.maximum(x, 0), 2: np.clip(x, 0, 6)}[int(act)]


def _conv(x, weight, bias, act, stride=1, depthwise=False):
    k = weight.shape[2]
    padded = np.pad(x, ((0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))
    windows = windows[:, ::stride, ::stride]
    if depthwise:
        out = np.einsum("cyxij,cij->cyx", windows, weight[:, 0], optimize=True)
    else:
        out = np.einsum("cyxij,ocij->oyx", windows, weight, optimize=True)
    if bias is not None:
        out = out + bias[:, None, None]
    return _activate(out, act)


def _resize(x, shape, scale):
    """network.cu's resize_linear: half-pixel source coordinates clamped to the image."""
    _, rows, cols = x.shape
    sy = np.clip((np.arange(shape[1]) + 0.5) / scale[0] - 0.5, 0, rows - 1)
    sx = np.clip((np.arange(shape[2]) + 0.5) / scale[1] - 0.5, 0, cols - 1)
    y0, x0 = sy.astype(int), sx.astype(int)
    y1, x1 = np.minimum(y0 + 1, rows - 1), np.minimum(x0 + 1, cols - 1)
    fy, fx = (sy - y0)[:, None], (sx - x0)[None, :]
    top = x[:, y0][:, :, x0] * (1 - fx) + x[:, y0][:, :, x1] * fx
    bottom = x[:, y1][:, :, x0] * (1 - fx) + x[:, y1][:, :, x1] * fx
    return top * (1 - fy) + bottom * fy


def run_program(program, constants, image):
    """Logits (channels, rows, cols) of ``program`` on ``image`` (channels, rows, cols)."""
    values = {program.input: image.astype(np.float64)}
    for layer in program.layers:
        x = values[layer.inputs[0]]
        if layer.op == "pointwise":
            bias = layer.params["bias"]
            out = _conv(x, constants[layer.params["weight"]],
                        None if bias is None else constants[bias], 0)
            if len(layer.inputs) > 1:  # an Add folded in, before the activation
                out = out + values[layer.inputs[1]]
            out = _activate(out, ACTIVATIONS[layer.params["act"]])
        elif layer.op in ("conv", "conv_strided", "depthwise"):
            bias = layer.params["bias"]
            out = _conv(x, constants[layer.params["weight"]],
                        None if bias is None else constants[bias],
                        ACTIVATIONS[layer.params["act"]], layer.params["stride"],
                        layer.op == "depthwise")
        elif layer.op == "max_pool":
            k = layer.params["k"]
            c, rows, cols = layer.shape
            out = x[:, :rows * k, :cols * k].reshape(c, rows, k, cols, k).max(axis=(2, 4))
        elif layer.op == "resize":
            out = _resize(x, layer.shape, layer.params["scale"])
        elif layer.op == "copy":
            out = values.get(layer.output, np.zeros(program.shapes[layer.output]))
            offset = layer.params["offset"]
            out[offset:offset + x.shape[0]] = x
        elif layer.op == "relu":
            out = np.maximum(x, 0)
        else:
            out = 1 / (1 + np.exp(-x))
        values[layer.output] = out
    return values[program.output]


@pytest.mark.parametrize(("rows", "cols"), [(96, 224), (64, 48), (16, 16)])
def test_lowered_surface_model_matches_onnx_runtime(rows, cols):
    import onnxruntime

    model, constants = bundled_model()
    program = network_program(model, constants, rows, cols)
    ops = {layer.op for layer in program.layers}
    assert ops <= {"conv", "pointwise", "conv_strided", "depthwise", "max_pool", "resize", "copy"}
    assert any(layer.op == "pointwise" and len(layer.inputs) == 2 for layer in program.layers)
    assert program.shapes[program.input] == (surface.INPUT_PLANES, rows, cols)
    assert program.shapes[program.output] == (surface.OUTPUT_PLANES, rows, cols)
    image = np.random.default_rng(rows).uniform(
        -0.5, 1.5, (1, surface.INPUT_PLANES, rows, cols)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(surface.MODEL_PATH),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, {"image": image})[0][0]
    got = run_program(program, constants, image[0])
    assert got.shape == expected.shape
    # Measured (float64 twin vs ONNX Runtime's float32): at most 1.5e-6 of the largest logit.
    assert np.abs(got - expected).max() <= 2e-5 * max(1.0, np.abs(expected).max())


def test_a_model_with_an_unknown_operator_is_refused_with_its_name():
    import onnx

    model, constants = bundled_model()
    node = next(node for node in model.graph.node if node.op_type == "Relu")
    node.op_type = "Elu"
    with pytest.raises(UnsupportedModel, match="Elu"):
        network_program(model, constants, 16, 16)
    assert isinstance(model, onnx.ModelProto)


def fake_addresses(constants) -> dict:
    """A made-up device address for every constant tensor (the weights)."""
    return {name: 8 * (k + 1) for k, name in enumerate(sorted(constants))}


def run_launches(layouts, constants, images):
    """Outputs of one batched forward pass (gpu.network's layouts, Sample table and launches)
    over ``images`` (channels, rows, cols) each, every kernel of network.cu done in numpy on
    one flat memory (addresses in bytes), the weights at :func:`fake_addresses`."""
    by_address = {address: constants[name] for name, address in fake_addresses(constants).items()}
    base = 4096
    table, starts = batch_samples(layouts, base)
    memory = np.full((base + batch_bytes(layouts)) // 4, np.nan)

    def tensor(address, *shape):
        start = int(address) // 4
        return memory[start:start + int(np.prod(shape))].reshape(shape)

    for start, layout, image in zip(starts, layouts, images, strict=True):
        tensor(start + layout.input, *image.shape)[:] = image
    for j, (name, _, _, constants_j) in enumerate(layouts[0].launches):
        for sample in table[j]:
            rows, cols = int(sample["rows"]), int(sample["cols"])
            in_rows, in_cols = int(sample["in_rows"]), int(sample["in_cols"])
            if name == "conv2d_strided":
                w_at, bias_at, c_in, c_out, _, stride, act = constants_j
                x = tensor(sample["in"], c_in, in_rows, in_cols)
                tensor(sample["out"], c_out, rows, cols)[:] = _conv(
                    x, by_address[w_at], by_address.get(bias_at), act, stride)
            elif name.startswith("depthwise3"):
                w_at, bias_at, channels, stride, act = constants_j
                x = tensor(sample["in"], channels, in_rows, in_cols)
                tensor(sample["out"], channels, rows, cols)[:] = _conv(
                    x, by_address[w_at], by_address.get(bias_at), act, stride, depthwise=True)
            elif name in ("pointwise", "pointwise_staged"):
                w_at, bias_at, c_in, c_out, act, residual = constants_j
                out = _conv(tensor(sample["in"], c_in, rows, cols), by_address[w_at],
                            by_address.get(bias_at), 0)
                if residual:
                    out = out + tensor(sample["extra"], c_out, rows, cols)
                tensor(sample["out"], c_out, rows, cols)[:] = _activate(out, act)
            elif name.startswith("conv2d"):
                w_at, bias_at, c_in, c_out, act, split = constants_j
                x = tensor(sample["in"], c_in, rows, cols)
                w = by_address[w_at]
                for s, first in enumerate(range(0, c_in, split)):
                    part = _conv(x[first:first + split], w[:, first:first + split],
                                 by_address.get(bias_at), act)
                    tensor(sample["out"] + 4 * s * c_out * rows * cols, c_out, rows, cols)[:] = part
            elif name == "conv_sum":
                bias_at, splits, channels, act = constants_j
                total = tensor(sample["in"], splits, channels, rows, cols).sum(axis=0)
                total = total + by_address[bias_at][:, None, None] if bias_at else total
                tensor(sample["out"], channels, rows, cols)[:] = _activate(total, act)
            elif name == "max_pool":
                channels, k = constants_j
                x = tensor(sample["in"], channels, in_rows, in_cols)
                tensor(sample["out"], channels, rows, cols)[:] = x[:, :rows * k, :cols * k].reshape(
                    channels, rows, k, cols, k).max(axis=(2, 4))
            elif name == "resize_linear":
                (channels,) = constants_j
                x = tensor(sample["in"], channels, in_rows, in_cols)
                tensor(sample["out"], channels, rows, cols)[:] = _resize(
                    x, (channels, rows, cols), (float(sample["scale_y"]), float(sample["scale_x"])))
            else:
                x = tensor(sample["in"], rows * cols)
                out = tensor(sample["out"], rows * cols)
                outputs = {"copy_floats": x, "relu": np.maximum(x, 0),
                           "sigmoid": 1 / (1 + np.exp(-x))}
                out[:] = outputs[name]
    return [tensor(start + layout.output, *layout.output_shape).copy()
            for start, layout in zip(starts, layouts, strict=True)]


@pytest.mark.parametrize(("wide", "kernels_used"), [
    (False, {"conv2d_k3", "conv_sum", "pointwise", "depthwise3", "conv2d_strided"}),
    (True, {"conv2d_wide_k3", "conv_sum", "pointwise", "pointwise_staged", "depthwise3_wide",
            "conv2d_strided"})])
def test_a_batched_forward_pass_over_inputs_of_any_sizes_gives_each_ones_own_output(
        wide, kernels_used):
    model, constants = bundled_model()
    sizes = [(48, 64), (16, 32), (48, 64), (80, 32)]  # two of one size: each its own memory
    address = fake_addresses(constants)
    layouts = [ProgramLayout(network_program(model, constants, rows, cols),
                             lambda name: address.get(name, 0), wide) for rows, cols in sizes]
    kernels = {launch[0] for launch in layouts[0].launches}
    assert kernels_used <= kernels
    assert not ({"conv2d_k3"} if wide else {"conv2d_wide_k3", "pointwise_staged"}) & kernels
    # One list for all: each launch's kernel, block and constants the same for every size.
    assert len({tuple((name, block, constants) for name, block, _, constants in layout.launches)
                for layout in layouts}) == 1
    rng = np.random.default_rng(5)
    images = [rng.uniform(-0.5, 1.5, (surface.INPUT_PLANES, rows, cols)) for rows, cols in sizes]
    outputs = run_launches(layouts, constants, images)
    for layout, image, got in zip(layouts, images, outputs, strict=True):
        expected = run_program(layout.program, constants, image)
        assert got.shape == expected.shape == (surface.OUTPUT_PLANES, *image.shape[1:])
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("wide", [False, True])
def test_sizes_of_one_bucket_share_its_largest_size_s_launches(wide):
    """One input's program runs on the launches (kernels, blocks, constants) of its size
    bucket's largest size with its own Sample table: the launches must be the same, the grids
    and the activations no smaller."""
    model, constants = bundled_model()
    largest = ProgramLayout(network_program(model, constants, 2 * PROGRAM_BUCKET,
                                            3 * PROGRAM_BUCKET), lambda name: 7, wide)
    for rows, cols in [(48, 80), (64, 96), (48, 96), (32, 96)]:
        layout = ProgramLayout(network_program(model, constants, rows, cols), lambda name: 7,
                               wide)
        assert layout.nbytes <= largest.nbytes
        assert len(layout.launches) == len(largest.launches)
        for own, shared in zip(layout.launches, largest.launches, strict=True):
            assert (own[0], own[1], own[3]) == (shared[0], shared[1], shared[3])
            assert own[2][0] <= shared[2][0]
            assert own[2][1] <= shared[2][1]


def _residual_model(kernel: int, relu_before_add: bool):
    """A two-node ONNX model: Conv (4 → 4 channels, ``kernel``, a ReLU after it if
    ``relu_before_add``), Add of the input, ReLU: (1, 4, 16, 16) → (1, 4, 16, 16)."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(kernel)
    weight = rng.normal(0, 0.5, (4, 4, kernel, kernel)).astype(np.float32)
    bias = rng.normal(0, 0.5, 4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[kernel // 2] * 4)]
    if relu_before_add:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes += [helper.make_node("Add", [nodes[-1].output[0], "x"], ["s"]),
              helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                          [1, 4, 16, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 16, 16])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"w": weight, "b": bias}


def test_an_add_onto_a_1x1_convolution_is_folded_into_it_before_the_activation():
    model, constants = _residual_model(1, relu_before_add=False)
    program = network_program(model, constants, 16, 16)
    (layer,) = program.layers
    assert (layer.op, len(layer.inputs), layer.params["act"]) == ("pointwise", 2, "relu")
    image = np.random.default_rng(1).normal(0, 1, (4, 16, 16))
    expected = np.maximum(_conv(image, constants["w"], constants["b"], 0) + image, 0)
    np.testing.assert_allclose(run_program(program, constants, image), expected, atol=1e-12)
    address = fake_addresses(constants)
    layout = ProgramLayout(program, lambda name: address.get(name, 0))
    np.testing.assert_allclose(run_launches([layout], constants, [image])[0], expected,
                               atol=1e-12)


@pytest.mark.parametrize(("kernel", "relu_before_add"), [(3, False), (1, True)])
def test_an_add_the_device_cannot_fold_is_refused_with_its_reason(kernel, relu_before_add):
    model, constants = _residual_model(kernel, relu_before_add)
    with pytest.raises(UnsupportedModel, match="Add node .* 1 × 1 convolution"):
        network_program(model, constants, 16, 16)


@pytest.mark.parametrize(("c_in", "block"), [(3, (256, 1, 1)), (16, (64, 4, 1)),
                                             (96, (16, 16, 1)), (576, (8, 32, 1))])
def test_pointwise_blocks_split_many_input_channels_over_more_threads(c_in, block):
    assert pointwise_block(c_in) == block


@pytest.mark.parametrize(("rows", "cols"), [(32, 32), (48, 80), (144, 176), (16, 256)])
def test_a_program_for_another_size_is_the_one_lowered_for_that_size(rows, cols):
    """DeviceNetwork derives each input size's program from one lowering (a drag meets a new
    size at almost every step): layers, shapes and their order must be those of lowering the
    graph again."""
    model, constants = bundled_model()
    assert all(node.op_type != "Shape" for node in model.graph.node)
    derived = program_for_size(network_program(model, constants, 64, 96), rows, cols)
    lowered = network_program(model, constants, rows, cols)
    assert derived.layers == lowered.layers
    assert list(derived.shapes.items()) == list(lowered.shapes.items())
    assert (derived.input, derived.output) == (lowered.input, lowered.output)


def test_a_derived_program_refuses_sizes_whose_concatenations_do_not_fit():
    model, constants = bundled_model()
    with pytest.raises(UnsupportedModel, match="different sizes"):
        program_for_size(network_program(model, constants, 64, 96), 40, 96)


def test_the_device_names_a_file_that_is_not_an_onnx_model(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(ModelUnavailable) as error:
        load_model(str(bad))
    assert str(error.value) == (f"{bad} is not an ONNX model: give the .onnx file of a surface "
                                f"model ({NO_MODEL_HINT})")
    with pytest.raises(ModelUnavailable) as error:
        load_model(str(tmp_path / "missing.onnx"))
    assert str(error.value) == (f"surface model not found: {tmp_path / 'missing.onnx'} "
                                f"({NO_MODEL_HINT})")
