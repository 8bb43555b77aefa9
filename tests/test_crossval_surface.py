"""scripts/crossval_surface.py: each case traced by the model given for its image."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import core.surface
from core.evaluate import OURS, corrections, evaluate, load_cases
from core.tracer import TraceParams
from tests.conftest import ROOT, load_script

CASES = ROOT / "tests" / "data" / "dubai_t6_003_cases.json"
MODEL = ROOT / "resources" / "models" / "surface.onnx"


@pytest.fixture(scope="module")
def crossval():
    return load_script("crossval_surface")


@pytest.fixture(autouse=True)
def _restore_model_path():
    path = core.surface.MODEL_PATH
    yield
    core.surface.MODEL_PATH = path


def _polylines(report: Path) -> dict[str, np.ndarray]:
    cases = json.loads(report.read_text())["methods"][OURS]["cases"]
    return {case["id"]: np.array(case["polyline"]) for case in cases}


def test_prefix_models_trace_their_images_as_eval_does(crossval, tmp_path, capsys):
    # A copy of the bundled model under another name: the report must equal eval's lines.
    model = tmp_path / "no_other_source.onnx"
    shutil.copyfile(MODEL, model)
    report = tmp_path / "report.json"
    assert crossval.main([str(CASES), "--model", f"gsi_,dubai={model}", "--json",
                          str(report)]) == 0
    assert "model without the image" in capsys.readouterr().out
    expected = evaluate(load_cases(CASES), OURS, TraceParams(score="surface"))
    lines = _polylines(report)
    assert sorted(lines) == sorted(result.case.id for result in expected)
    for result in expected:
        np.testing.assert_allclose(lines[result.case.id], result.polyline, atol=0.01)


def test_corrections_are_counted_with_each_images_model(crossval, tmp_path, capsys):
    model = tmp_path / "no_other_source.onnx"
    shutil.copyfile(MODEL, model)
    report = tmp_path / "report.json"
    assert crossval.main([str(CASES), "--model", f"gsi_,dubai={model}", "--corrections", "1",
                          "--json", str(report)]) == 0
    assert "with 0 to 1 vertices added" in capsys.readouterr().out
    cases = load_cases(CASES)
    expected = corrections(cases, OURS, 1, TraceParams(score="surface"))
    counts = json.loads(report.read_text())["corrections"]["methods"][OURS]["cases"]
    assert counts == {case.id: each.added for case, each in zip(cases, expected, strict=True)}
    assert crossval.main([str(CASES), "--model", f"gsi_,dubai={model}", "--corrections",
                          "-1"]) == 2
    assert "--corrections must be 0 to 5, got -1" in capsys.readouterr().err


def test_images_without_a_model_are_skipped_and_counted(crossval, capsys):
    assert crossval.main([str(CASES), "--model", f"dubai={MODEL}", "--model",
                          f"gsi_={MODEL}"]) == 0
    assert "skipped" not in capsys.readouterr().out
    assert crossval.main([str(CASES), "--model", f"gsi_={MODEL}"]) == 2
    assert "no case lies on an image a model is given for" in capsys.readouterr().err


def test_folds_map_each_image_to_its_fold_model(crossval, tmp_path, capsys):
    shutil.copyfile(MODEL, tmp_path / "fold1.onnx")
    image = Path(load_cases(CASES)[0].image).stem
    (tmp_path / "folds.json").write_text(json.dumps({image: 1}))
    assert crossval.main([str(CASES), "--folds", str(tmp_path)]) == 0
    assert "model without the image" in capsys.readouterr().out
    (tmp_path / "folds.json").write_text(json.dumps({"another_image": 0}))
    assert crossval.main([str(CASES), "--folds", str(tmp_path)]) == 2
    assert f"image {image}" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "no-equals-sign"], "expected PREFIX[,PREFIX...]=MODEL.onnx"),
    (["--model", "=model.onnx"], "expected PREFIX"),
    (["--model", "dubai=missing.onnx"], "model missing.onnx not found"),
    (["--folds", "no/such/folder"], "cannot read the folds file"),
])
def test_bad_models_are_one_message(crossval, capsys, args, message):
    assert crossval.main([str(CASES), *args]) == 2
    assert message in capsys.readouterr().err


def test_cases_are_checked_before_tracing(crossval, tmp_path, capsys):
    cases = json.loads(CASES.read_text())
    for case in cases:
        case["image"] = str((CASES.parent / case["image"]).resolve())
    cases[-1]["gt"][0] = [99999.0, 5.0]
    broken = tmp_path / "cases.json"
    broken.write_text(json.dumps(cases))
    assert crossval.main([str(broken), "--model", f"dubai={MODEL}"]) == 2
    error = capsys.readouterr().err
    assert f"case {cases[-1]['id']!r}" in error
    assert "outside" in error
