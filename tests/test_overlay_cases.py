"""scripts/overlay_cases.py: pictures of traced cases from an eval report."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from core.evaluate import load_cases
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE, load_script


def _report(path, case, method_names=("ours", "route_flat")) -> str:
    line = case.gt.tolist()
    rows = [{"id": case.id, "completeness_3": 1.0, "completeness_5": 1.0, "polyline": line}]
    path.write_text(json.dumps({"params": {}, "methods": {name: {"cases": rows}
                                                          for name in method_names}}))
    return str(path)


def test_one_picture_per_case_enlarged_around_the_truth(tmp_path):
    script = load_script("overlay_cases")
    case = load_cases(SAMPLE_CASES)[0]
    report = _report(tmp_path / "report.json", case)
    assert script.main([report, str(SAMPLE_CASES), str(tmp_path / "out"), case.id]) == 0
    picture = Image.open(tmp_path / "out" / f"{case.id}.png")
    # The crop is the truth's box plus the margin, enlarged towards SIZE px on its longer side.
    assert max(picture.size) >= script.SIZE * 0.75
    # The truth is drawn in yellow (ours, drawn last over it here, in red).
    colours = {colour for _, colour in picture.getcolors(1 << 20)}
    assert script.COLOURS["ours"] in colours


def test_a_missing_peer_or_case_is_one_message(tmp_path, capsys):
    script = load_script("overlay_cases")
    case = load_cases(SAMPLE_CASES)[0]
    report = _report(tmp_path / "report.json", case, ("ours",))
    assert script.main([report, str(SAMPLE_CASES), str(tmp_path / "out"), case.id]) == 2
    assert "has no method 'route_flat'" in capsys.readouterr().err
    report = _report(tmp_path / "report.json", case)
    assert script.main([report, str(SAMPLE_CASES), str(tmp_path / "out"), "nope"]) == 2
    assert "no case 'nope'" in capsys.readouterr().err


def test_an_unreadable_image_is_one_message_and_no_picture(tmp_path, capsys):
    script = load_script("overlay_cases")
    case = load_cases(SAMPLE_CASES)[0]
    record = json.loads(SAMPLE_CASES.read_text())[0]
    (tmp_path / "broken.png").write_bytes(b"not a png")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([dict(record, image="broken.png")]))
    report = _report(tmp_path / "report.json", case)
    assert script.main([report, str(cases), str(tmp_path / "out"), case.id]) == 2
    assert f"cannot read the image of case {case.id!r}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_corrected_pictures_show_the_line_before_and_after_the_added_vertices(tmp_path, capsys):
    script = load_script("overlay_cases")
    case = load_cases(SAMPLE_CASES)[0]
    report = tmp_path / "report.json"
    _report(report, case, ("ours",))
    assert script.main([str(report), str(SAMPLE_CASES), str(tmp_path / "out"), case.id,
                        "--corrected"]) == 2
    assert "no corrected lines of ours" in capsys.readouterr().err
    document = json.loads(report.read_text())
    document["corrections"] = {"methods": {"ours": {"lines": ["not", "a", "mapping"]}}}
    report.write_text(json.dumps(document))
    assert script.main([str(report), str(SAMPLE_CASES), str(tmp_path / "out"), case.id,
                        "--corrected"]) == 2
    assert "no corrected lines of ours" in capsys.readouterr().err
    middle = case.gt[len(case.gt) // 2].tolist()
    document["corrections"] = {"most": 1, "methods": {"ours": {
        "cases": {case.id: 1},
        "lines": {case.id: {"vertices": [middle], "polyline": case.gt.tolist()}}}}}
    report.write_text(json.dumps(document))
    assert script.main([str(report), str(SAMPLE_CASES), str(tmp_path / "out"), case.id,
                        "--corrected"]) == 0
    picture = Image.open(tmp_path / "out" / f"{case.id}.png")
    single = tmp_path / "single"
    _report(tmp_path / "plain.json", case)
    assert script.main([str(tmp_path / "plain.json"), str(SAMPLE_CASES), str(single),
                        case.id]) == 0
    width = Image.open(single / f"{case.id}.png").width
    assert picture.width == 2 * width + script.GAP  # as traced | after the vertices
    right = picture.crop((width + script.GAP, 0, picture.width, picture.height))
    assert script.COLOURS["vertex"] in {colour for _, colour in right.getcolors(1 << 20)}


def _one_error(capsys) -> str:
    """Standard error of the run: one line ``error: …``."""
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    return err


def _copied_case(tmp_path, case_id: str, **changes) -> tuple:
    """A cases file in ``tmp_path`` of the sample's first case, named ``case_id``, on a copy of
    the sample image (``img.png`` beside it), with ``changes`` to its record; and the case."""
    record = json.loads(SAMPLE_CASES.read_text())[0]
    (tmp_path / "img.png").write_bytes(SAMPLE_IMAGE.read_bytes())
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([dict(record, id=case_id, image="img.png", **changes)]))
    return str(cases), load_cases(cases)[0]


@pytest.mark.parametrize(("case_id", "out", "message"), [
    ("../img", "pics", "case id '../img' is not a plain file name"),
    ("img", ".", "img.png: writing it would destroy the input")])
def test_a_picture_never_lands_outside_the_folder_or_on_an_input(tmp_path, capsys, case_id, out,
                                                                  message):
    script = load_script("overlay_cases")
    cases, case = _copied_case(tmp_path, case_id)
    report = _report(tmp_path / "report.json", case)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    assert script.main([report, cases, str(tmp_path / out), case_id]) == 2
    err = _one_error(capsys)
    assert message in err
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


@pytest.mark.parametrize(("out", "message"), [
    ("", "the output folder must be named"),
    ("report.json", "exists and is not a folder"),
    ("/dev/full", "exists and is not a folder")])
def test_an_output_folder_that_cannot_be_one_is_one_message(tmp_path, capsys, out, message):
    script = load_script("overlay_cases")
    case = load_cases(SAMPLE_CASES)[0]
    report = _report(tmp_path / "report.json", case)
    text = (tmp_path / "report.json").read_text()
    out = str(tmp_path / out) if out == "report.json" else out
    assert script.main([report, str(SAMPLE_CASES), out, case.id]) == 2
    err = _one_error(capsys)
    assert message in err
    assert (tmp_path / "report.json").read_text() == text


@pytest.mark.parametrize(("polyline", "methods", "message"), [
    ("x", ("ours", "route_flat"), "the polyline of 'ours' on case"),
    ([[1, 2, 3], [4, 5, 6]], ("ours", "route_flat"), "must be a list of [x, y] pairs"),
    ([[1, 2], [3, None]], ("ours", "route_flat"), "must be a list of [x, y] pairs"),
    (None, ("route_flat",), "method 'ours' has no case")])
def test_a_malformed_or_missing_line_of_the_report_is_one_message(tmp_path, capsys, polyline,
                                                                   methods, message):
    script = load_script("overlay_cases")
    case = load_cases(SAMPLE_CASES)[0]
    report = tmp_path / "report.json"
    _report(report, case)
    document = json.loads(report.read_text())
    document["methods"]["ours"]["cases"][0]["polyline"] = polyline
    for name in ("ours", "route_flat"):
        if name not in methods:
            document["methods"][name]["cases"] = []
    report.write_text(json.dumps(document))
    assert script.main([str(report), str(SAMPLE_CASES), str(tmp_path / "out"), case.id]) == 2
    err = _one_error(capsys)
    assert message in err
    assert not (tmp_path / "out").exists()


def test_a_truth_off_the_image_or_a_truncated_image_is_one_message(tmp_path, capsys):
    script = load_script("overlay_cases")
    far = [[5000.0, 5000.0], [5100.0, 5100.0]]
    cases, case = _copied_case(tmp_path, "far", a=far[0], b=far[1], gt=far)
    report = _report(tmp_path / "report.json", case)
    assert script.main([report, cases, str(tmp_path / "out"), "far"]) == 2
    err = _one_error(capsys)
    assert "case 'far': its ground truth lies outside its image" in err
    cases, case = _copied_case(tmp_path, "cut")
    report = _report(tmp_path / "report.json", case)
    (tmp_path / "img.png").write_bytes(SAMPLE_IMAGE.read_bytes()[:20000])  # truncated
    assert script.main([report, cases, str(tmp_path / "out"), "cut"]) == 2
    err = _one_error(capsys)
    assert "cannot read the image of case 'cut'" in err
    assert not (tmp_path / "out").exists()
