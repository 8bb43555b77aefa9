"""scripts/crossval_surface.py: each case traced by the model given for its image."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import core.surface
from core.evaluate import OURS, corrections, evaluate, load_cases, report_document
from core.tracer import TraceParams
from tests.conftest import ROOT, SAMPLE_CASES, load_script
from tests.helpers import shifted_model

CASES = ROOT / "tests" / "data" / "dubai_t6_003_cases.json"
MODEL = ROOT / "resources" / "models" / "surface.onnx"
PARAMS = TraceParams(score="surface")  # the script's, at its default line kind (road)


@pytest.fixture(scope="module")
def crossval():
    return load_script("crossval_surface")


@pytest.fixture(autouse=True)
def _restore_model_path():
    path = core.surface.MODEL_PATH
    yield
    core.surface.MODEL_PATH = path


def _rows(report: Path) -> dict[str, dict]:
    """A report's per-case rows by case id, without the time each took."""
    cases = json.loads(report.read_text())["methods"][OURS]["cases"]
    return {case["id"]: {key: value for key, value in case.items() if key != "latency_ms"}
            for case in cases}


def _expected_rows(cases, model: Path) -> dict[str, dict]:
    """The rows eval's report gives ``cases`` traced (by ``surface``) with ``model``."""
    previous, core.surface.MODEL_PATH = core.surface.MODEL_PATH, model
    try:
        results = evaluate(cases, OURS, PARAMS)
    finally:
        core.surface.MODEL_PATH = previous
    document = json.loads(json.dumps(report_document({OURS: results}, PARAMS)))
    return {case["id"]: {key: value for key, value in case.items() if key != "latency_ms"}
            for case in document["methods"][OURS]["cases"]}


@pytest.fixture(scope="module")
def two_images(tmp_path_factory):
    """A cases file of two images (the sample's gsi_108 cases and the river crop's dubai ones,
    images by absolute path), the bundled model's copy (gsi.onnx) and a model whose surface
    logit is shifted by -4 (dubai.onnx, which moves dubai_t6_003_01's line and two of the
    sample's), and what eval reports for each image's cases under each model."""
    folder = tmp_path_factory.mktemp("two_images")
    cases = []
    for path in (SAMPLE_CASES, CASES):
        for case in json.loads(path.read_text()):
            case["image"] = str((path.parent / case["image"]).resolve())
            cases.append(case)
    (folder / "cases.json").write_text(json.dumps(cases))
    gsi = folder / "gsi.onnx"
    shutil.copyfile(MODEL, gsi)
    dubai = shifted_model(folder / "dubai.onnx", -4.0)
    loaded = load_cases(folder / "cases.json")
    on = {prefix: [case for case in loaded if Path(case.image).name.startswith(prefix)]
          for prefix in ("gsi_", "dubai")}
    assert [len(on["gsi_"]), len(on["dubai"])] == [6, 3]
    expected = {(prefix, name): _expected_rows(on[prefix], model)
                for prefix in on for name, model in (("bundled", MODEL), ("shifted", dubai))}
    # The shifted model traces differently on both images: a script that ignored --model, or
    # gave one image's model to the other, reports other lines.
    for prefix in on:
        assert expected[prefix, "bundled"] != expected[prefix, "shifted"]
    return folder / "cases.json", gsi, dubai, expected


def test_prefix_models_trace_their_images_as_eval_does(crossval, two_images, tmp_path, capsys):
    """Each image's cases are traced by the model given for its prefix: the report's rows are
    eval's under that model, and not eval's under the other."""
    cases, gsi, dubai, expected = two_images
    report = tmp_path / "report.json"
    assert crossval.main([str(cases), "--model", f"gsi_={gsi}", "--model", f"dubai={dubai}",
                          "--json", str(report)]) == 0
    assert "model without the image" in capsys.readouterr().out
    rows = _rows(report)
    assert sorted(rows) == sorted([*expected["gsi_", "bundled"], *expected["dubai", "bundled"]])
    assert {i: rows[i] for i in expected["gsi_", "bundled"]} == expected["gsi_", "bundled"]
    assert {i: rows[i] for i in expected["dubai", "shifted"]} == expected["dubai", "shifted"]
    # The other way round: each image now traced by the other model.
    assert crossval.main([str(cases), "--model", f"gsi_={dubai}", "--model", f"dubai={gsi}",
                          "--json", str(report)]) == 0
    rows = _rows(report)
    assert {i: rows[i] for i in expected["gsi_", "shifted"]} == expected["gsi_", "shifted"]
    assert {i: rows[i] for i in expected["dubai", "bundled"]} == expected["dubai", "bundled"]


def test_corrections_are_counted_with_each_images_model(crossval, tmp_path, capsys):
    """On the sample's cases the shifted model's lines need a vertex where the bundled
    model's need none (case 05): the counts are those of the model given."""
    model = shifted_model(tmp_path / "shifted.onnx", -4.0)
    report = tmp_path / "report.json"
    assert crossval.main([str(SAMPLE_CASES), "--model", f"gsi_={model}", "--corrections", "1",
                          "--json", str(report)]) == 0
    assert "with 0 to 1 vertices added" in capsys.readouterr().out
    cases = load_cases(SAMPLE_CASES)
    core.surface.MODEL_PATH = MODEL  # as the script left it: put back by _restore_model_path
    bundled = {case.id: each.added
               for case, each in zip(cases, corrections(cases, OURS, 1, PARAMS), strict=True)}
    core.surface.MODEL_PATH = model
    expected = {case.id: each.added
                for case, each in zip(cases, corrections(cases, OURS, 1, PARAMS), strict=True)}
    assert expected != bundled
    counts = json.loads(report.read_text())["corrections"]["methods"][OURS]["cases"]
    assert counts == expected
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
    fold = shifted_model(tmp_path / "fold1.onnx", -4.0)
    image = Path(load_cases(CASES)[0].image).stem
    (tmp_path / "folds.json").write_text(json.dumps({image: 1}))
    report = tmp_path / "report.json"
    assert crossval.main([str(CASES), "--folds", str(tmp_path), "--json", str(report)]) == 0
    assert "model without the image" in capsys.readouterr().out
    expected = _expected_rows(load_cases(CASES), fold)
    assert _rows(report) == expected
    assert expected != _expected_rows(load_cases(CASES), MODEL)
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
