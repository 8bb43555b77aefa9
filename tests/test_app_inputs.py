"""The app keeps what the user handed it: no export or session over the files it reads, no lost
lines when an open fails, no surface model it cannot run, no zero-length segment, and file names
shown as written."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

import core.surface
from app.files import autosave_path
from tests.conftest import SAMPLE_IMAGE
from tests.test_app import A, B, click, click_and_wait, make_window, wait_idle  # noqa: F401

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def open_and_wait(qtbot, window, path) -> tuple[str, str]:
    """Open ``path``; ("loaded", path) or ("error", message)."""
    outcome = []
    window.image_loaded.connect(lambda opened: outcome.append(("loaded", opened)))
    window.error_shown.connect(lambda text: outcome.append(("error", text)))
    window.open_image(str(path))
    qtbot.waitUntil(lambda: bool(outcome), timeout=60_000)
    wait_idle(qtbot, window)
    return outcome[0]


@pytest.fixture
def traced_copy(make_window, qtbot, tmp_path):  # noqa: F811 (the imported fixture)
    """A window on a copy of the sample with one traced line; (window, image path)."""
    image = tmp_path / "image.png"
    shutil.copy(SAMPLE_IMAGE, image)
    window = make_window(open_sample=False)
    assert open_and_wait(qtbot, window, image)[0] == "loaded"
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B)
    window.controller.finish()
    return window, image


def test_no_export_or_session_replaces_a_file_the_window_reads(traced_copy, qtbot, tmp_path):
    window, image = traced_copy
    evidence = tmp_path / "evidence.png"
    shutil.copy(image, evidence)
    assert window.set_evidence_raster(str(evidence))
    wait_idle(qtbot, window)
    session = tmp_path / "lines.roadtracer.json"
    assert window.write_session(str(session))
    for target in (image, evidence, session):
        before = target.read_bytes()
        if target != session:  # saving a session over itself is what Save does
            assert not window.write_session(str(target))
            assert f"is the input {target}" in window.last_error
        assert not window.export_geojson(str(target))
        assert f"is the input {target}" in window.last_error
        assert target.read_bytes() == before
    elsewhere = tmp_path / "lines.geojson"
    assert window.export_geojson(str(elsewhere))
    wait_idle(qtbot, window)  # written before the window closes (closing would wait for it)
    assert json.loads(elsewhere.read_text())["features"]


def test_a_failed_open_after_discard_keeps_the_lines(traced_copy, qtbot, tmp_path):
    window, image = traced_copy
    window.autosave()
    autosave = autosave_path(window.autosave_dir, str(image))
    assert os.path.exists(autosave)
    not_an_image = tmp_path / "lines.geojson"
    not_an_image.write_text('{"type": "FeatureCollection", "features": []}')
    # The fixture answers "Discard" to "Save them first?".
    assert open_and_wait(qtbot, window, not_an_image)[0] == "error"
    assert window.image_path == str(image)
    assert len(window.model.lines) == 1
    assert os.path.exists(autosave)
    # An image that opens drops them, as the user said.
    assert open_and_wait(qtbot, window, SAMPLE_IMAGE)[0] == "loaded"
    assert not os.path.exists(autosave)


def slice_model(tmp_path, name: str, input_shape, output_shape, after=(), input_type=None,
                input_name: str = "image", extra=()) -> str:
    """An ONNX model that returns the first two of its five input planes, then ``after``
    (nodes from "t" to "y"; none: the slice is "y")."""
    constants = [helper.make_tensor(key, TensorProto.INT64, [1], [value])
                 for key, value in (("start", 0), ("end", 2), ("axis", 1))]
    source = "cast" if input_type is not None else input_name
    nodes = ([helper.make_node("Cast", [input_name], ["cast"], to=TensorProto.FLOAT)]
             if input_type is not None else [])
    nodes.append(helper.make_node("Slice", [source, "start", "end", "axis"],
                                  ["t" if after else "y"]))
    graph = helper.make_graph(
        [*nodes, *after], name,
        [helper.make_tensor_value_info(input_name, input_type or TensorProto.FLOAT,
                                       input_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        initializer=[*constants, *extra])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


MODELS = {
    "runs": lambda tmp: slice_model(tmp, "runs", [1, 5, "h", "w"], [1, 2, "h", "w"]),
    "half size out": lambda tmp: slice_model(
        tmp, "half", [1, 5, "h", "w"], [1, 2, "h2", "w2"],
        [helper.make_node("AveragePool", ["t"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]),
    "fixed size": lambda tmp: slice_model(tmp, "fixed", [1, 5, 64, 64], [1, 2, 64, 64]),
    "float64 in": lambda tmp: slice_model(tmp, "double", [1, 5, "h", "w"], [1, 2, "h", "w"],
                                          input_type=TensorProto.DOUBLE),
    "NaN out": lambda tmp: slice_model(
        tmp, "nan", [1, 5, "h", "w"], [1, 2, "h", "w"],
        [helper.make_node("Mul", ["t", "n"], ["y"])],
        extra=[helper.make_tensor("n", TensorProto.FLOAT, [1], [float("nan")])]),
    "input not named image": lambda tmp: slice_model(tmp, "named_x", [1, 5, "h", "w"],
                                                     [1, 2, "h", "w"], input_name="x"),
}


@pytest.mark.parametrize("kind", list(MODELS))
def test_a_surface_model_is_tried_before_it_replaces_the_working_one(
        make_window, tmp_path, monkeypatch, kind):  # noqa: F811 (the imported fixture)
    monkeypatch.setattr(core.surface, "MODEL_PATH", core.surface.MODEL_PATH)
    monkeypatch.setenv(core.surface.MODEL_VARIABLE, "")
    window = make_window()
    before = core.surface.MODEL_PATH
    path = MODELS[kind](tmp_path)
    accepted = window.set_surface_model(path)
    assert accepted == (kind == "runs"), window.last_error
    if not accepted:
        assert path in window.last_error
        assert core.surface.MODEL_PATH == before


def test_a_vertex_is_not_moved_onto_its_neighbour(make_window, qtbot):  # noqa: F811
    window = make_window()
    click(qtbot, window, A)
    click_and_wait(qtbot, window, B, Qt.KeyboardModifier.ShiftModifier)  # straight
    window.controller.finish()
    line = window.model.lines[0]
    window.controller.move_anchor(line.id, 1, line.anchors[0])
    wait_idle(qtbot, window)
    assert window.model.lines[0].anchors == line.anchors
    assert "at least 2 px from the next one" in window.statusBar().currentMessage()


def test_a_file_name_is_shown_as_written(make_window, qtbot, tmp_path):  # noqa: F811
    window = make_window()
    named = tmp_path / "<b>roads<br>2024.png"
    named.write_bytes(b"not a png")
    assert open_and_wait(qtbot, window, named)[0] == "error"
    box = window.findChildren(QMessageBox)[-1]
    assert box.textFormat() == Qt.TextFormat.PlainText
    assert str(named) in box.text()
