"""``--surface-model`` / ``$ROADTRACER_SURFACE_MODEL``: another surface model for every trace of a
command and of its worker processes, checked before any work."""

import json
import os
import re
import subprocess
import sys

import imageio.v3 as iio
import numpy as np
import pytest

import core.surface
from cli import main as cli_main
from tests.conftest import ROOT, SAMPLE_IMAGE
from tests.helpers import shifted_model

A, B = "505,158", "400,500"


@pytest.fixture
def restored_model(monkeypatch):
    """Whatever a test makes the surface model, the bundled one again afterwards."""
    monkeypatch.setattr(core.surface, "MODEL_PATH", core.surface.MODEL_PATH)
    # Set first, so that teardown restores the variable as it was, absent or not.
    monkeypatch.setenv(core.surface.MODEL_VARIABLE, "")
    monkeypatch.delenv(core.surface.MODEL_VARIABLE)


def identity_model(path, planes):
    """An ONNX model that returns its (1, planes, height, width) input."""
    import onnx
    from onnx import TensorProto, helper

    shape = [1, planes, "height", "width"]
    graph = helper.make_graph([helper.make_node("Identity", ["image"], ["logits"])], "identity",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def trace(capsys, *options):
    code = cli_main(["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--backend", "cpu",
                     "--quiet", *map(str, options)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_given_model_traces_and_the_bundled_one_is_the_default(capsys, tmp_path,
                                                                     restored_model):
    code, out, _ = trace(capsys)
    assert code == 0
    bundled = json.loads(out)
    code, out, _ = trace(capsys, "--surface-model", shifted_model(tmp_path / "m.onnx", -4.0))
    assert code == 0
    shifted = json.loads(out)
    assert cli_main(["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--backend", "cpu",
                     "--surface-model", str(tmp_path / "m.onnx")]) == 0  # not --quiet
    err = capsys.readouterr().err
    assert f"note: surface model {tmp_path / 'm.onnx'} (not the bundled one)" in err
    assert core.surface.MODEL_PATH == tmp_path / "m.onnx"
    assert os.environ[core.surface.MODEL_VARIABLE] == str(tmp_path / "m.onnx")
    assert shifted["score"] != pytest.approx(bundled["score"])
    assert not np.allclose(shifted["pixels"], bundled["pixels"], atol=0.5)
    core.surface.use_model(core.surface.BUNDLED_MODEL)
    code, out, _ = trace(capsys)
    assert json.loads(out)["pixels"] == bundled["pixels"]


def test_worker_processes_run_the_given_model(tmp_path, restored_model):
    model = core.surface.use_model(shifted_model(tmp_path / "m.onnx", -4.0))
    probe = "import core.surface; print(core.surface.MODEL_PATH)"
    found = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=os.environ.copy(),
                           capture_output=True, text=True, check=True).stdout.strip()
    assert found == str(model)


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: tmp / "missing.onnx", "surface model not found"),
    (lambda tmp: SAMPLE_IMAGE, "gsi_108.png is not an ONNX model"),
    (lambda tmp: identity_model(tmp / "six.onnx", 6),
     r"must have one input of shape \(1, 5, height, width\); it has \[\[1, 6,"),
    (lambda tmp: identity_model(tmp / "five.onnx", 5),
     r"must have one output of shape \(1, 2, height, width\); it has \[\[1, 5,"),
])
def test_a_model_this_program_cannot_run_is_one_error_before_any_work(capsys, tmp_path, make,
                                                                      message, restored_model):
    output = tmp_path / "line.json"
    code, out, err = trace(capsys, "--surface-model", make(tmp_path), "-o", output)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert re.search(message, err)
    assert not output.exists()
    assert core.surface.MODEL_PATH == core.surface.BUNDLED_MODEL


def test_eval_names_the_model_it_measured(capsys, tmp_path, restored_model):
    model = shifted_model(tmp_path / "m.onnx", -4.0)
    report = tmp_path / "report.json"
    cases = ROOT / "resources" / "sample" / "gsi_108_cases.json"
    assert cli_main(["eval", str(cases), "--method", "ours", "--limit", "1", "--quiet",
                     "--surface-model", str(model), "--json", str(report)]) == 0
    capsys.readouterr()
    assert json.loads(report.read_text())["surface_model"] == str(model)


def test_the_variable_is_checked_before_any_work_too(capsys, tmp_path, monkeypatch,
                                                     restored_model):
    monkeypatch.setenv(core.surface.MODEL_VARIABLE, str(tmp_path / "missing.onnx"))
    output = tmp_path / "line.json"
    code, out, err = trace(capsys, "-o", output)
    assert code == 2
    assert out == ""
    assert err == (f"error: surface model not found: {tmp_path / 'missing.onnx'} "
                   "(score kind 'centre' traces without it)\n")
    assert not output.exists()


def test_score_kinds_without_the_model_never_load_it(capsys, tmp_path, monkeypatch,
                                                     restored_model):
    monkeypatch.setenv(core.surface.MODEL_VARIABLE, str(tmp_path / "missing.onnx"))
    for options in (["--score", "centre"], ["--score", "colour", "--line-kind", "river"]):
        code, out, err = trace(capsys, *options)
        assert code == 0, err
        assert json.loads(out)["params"]["score"] == options[1]
    probability = np.zeros((572, 572), dtype=np.uint8)
    probability[150:170, :] = 255
    iio.imwrite(tmp_path / "p.png", probability)
    # On an evidence raster the default score kind follows the raster's centre, not the model.
    code, out, err = trace(capsys, "--evidence", tmp_path / "p.png")
    assert code == 0, err
    assert json.loads(out)["params"]["score"] == "centre"
    cases = ROOT / "resources" / "sample" / "gsi_108_cases.json"
    assert cli_main(["eval", str(cases), "--method", "straight", "--limit", "1", "--quiet"]) == 0
    capsys.readouterr()


def test_a_given_model_that_no_trace_runs_is_noted_not_loaded(capsys, tmp_path, restored_model):
    missing = tmp_path / "missing.onnx"
    assert cli_main(["trace", str(SAMPLE_IMAGE), "--a", A, "--b", B, "--backend", "cpu",
                     "--score", "centre", "--surface-model", str(missing)]) == 0
    err = capsys.readouterr().err
    assert ("note: --surface-model is not used: score kind 'centre' runs no surface model\n"
            in err)
    assert "error" not in err
    assert core.surface.MODEL_PATH == core.surface.BUNDLED_MODEL
