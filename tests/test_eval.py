"""The accuracy runner, the peers and ``main.py eval`` on the bundled test cases."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cli import main
from core.errors import BadParameter, NoAdmissiblePath
from core.evaluate import (
    METRICS,
    Case,
    RasterCache,
    corrections_needed,
    corrections_summary,
    evaluate,
    format_summary,
    load_cases,
    run_case,
    stability,
    summarise,
)

DATA = Path(__file__).resolve().parent / "data"
CASES = DATA / "dubai_t6_003_cases.json"


@pytest.fixture(scope="module")
def cases():
    return load_cases(CASES)


def test_load_cases_resolves_images_next_to_the_file(cases):
    assert [case.id for case in cases] == ["dubai_t6_003_00", "dubai_t6_003_01", "dubai_t6_003_02"]
    assert Path(cases[0].image) == DATA / "dubai_t6_003_crop.png"
    assert cases[0].gt.shape[1] == 2
    assert "river" in cases[0].tags
    assert len(load_cases(CASES, limit=1)) == 1


def test_load_cases_errors(tmp_path):
    with pytest.raises(BadParameter, match="cannot read"):
        load_cases(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(BadParameter, match="is not JSON"):
        load_cases(bad)
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")  # not text at all
    with pytest.raises(BadParameter, match="cases file .* is not JSON"):
        load_cases(bad)
    bad.write_text('[{"id": "x", "image": "i.png"}]')
    with pytest.raises(BadParameter, match="case 'x': a is missing"):
        load_cases(bad)


GOOD_CASE = {"id": "c", "image": "i.png", "a": [0, 0], "b": [9, 0], "gt": [[0, 0], [9, 0]]}


@pytest.mark.parametrize(("document", "message"), [
    ({"a": 1}, "must be a non-empty JSON list of cases"),
    (5, "must be a non-empty JSON list of cases"),
    ([], "got an empty list"),
    (None, "got null"),
    ([5], r"case #0: the case is not a JSON object"),
    ([{**GOOD_CASE, "gt": []}], "case 'c': gt needs at least 2 points"),
    ([{**GOOD_CASE, "gt": [[0, 0], [float("nan"), 1]]}], "case 'c': gt must hold finite "
                                                          "numbers only"),
    ([{**GOOD_CASE, "gt": [[0, 0, 1], [2, 3, 4]]}], r"case 'c': gt must be a list of \[x, y\] "
                                                     "pairs"),
    ([{**GOOD_CASE, "a": ["1", "2"]}], "case 'c': a must hold finite numbers only"),
    ([{**GOOD_CASE, "a": [True, False]}], "case 'c': a must hold finite numbers only"),
    ([{**GOOD_CASE, "a": [[1], [2]]}], "case 'c': a must hold finite numbers only"),
    ([{**GOOD_CASE, "b": [1, 0.5]}], "case 'c': a and b must be at least 2 px apart"),
    ([{**GOOD_CASE, "a": [1, 2, 3]}], r"case 'c': a must be an \[x, y\] pair"),
    ([{**GOOD_CASE, "b": [10**400, 0]}], "case 'c': b must hold finite numbers only"),
    ([{**GOOD_CASE, "image": ["x"]}], "case 'c': image must be a file name"),
    ([{**GOOD_CASE, "tags": "road"}], "case 'c': tags must be a list of strings"),
    ([{**GOOD_CASE, "id": None}], "case #0: id must be a string or an integer"),
    ([GOOD_CASE, {**GOOD_CASE, "a": [1, 1]}], "case id 'c' is given twice"),
    ([{**GOOD_CASE, "ground_resolution": 10**400}], "case 'c': ground_resolution must be a "
                                                    "number of metres per pixel from 0.001"),
    ([{**GOOD_CASE, "ground_resolution": -0.3}], "case 'c': ground_resolution must be a "
                                                 "number of metres per pixel"),
    ([{**GOOD_CASE, "ground_resolution": 1e-9}], "case 'c': ground_resolution must be a "
                                                 "number of metres per pixel"),
])
def test_malformed_cases_are_one_clear_error(tmp_path, document, message):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BadParameter, match=message):
        load_cases(path)


def test_ground_resolution_from_the_sources_file_beside_the_cases(tmp_path):
    cases = [{**GOOD_CASE, "id": name, "image": image} for name, image in
             (("plain", "images/p.png"), ("own", "images/o.png"), ("other", "o2.png"),
              ("bad", "images/b.png"))]
    cases[1]["ground_resolution"] = 0.5
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    assert [case.ground_resolution for case in load_cases(path)] == [None, 0.5, None, None]
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps([
        {"id": "p", "image": "images/./p.png", "gsd_m": 0.2},
        {"id": "o", "image": "images/o.png", "gsd_m": 0.3},
        {"id": "b", "image": "images/b.png", "gsd_m": 10**400},
        {"id": "x", "image": "images/x.png", "gsd_m": True}, "not an entry"]))
    # The case's own value wins; an entry without a usable gsd_m says nothing.
    assert [case.ground_resolution for case in load_cases(path)] == [0.2, 0.5, None, None]
    sources.write_text('{"not": "a list"}')
    assert [case.ground_resolution for case in load_cases(path)] == [None, 0.5, None, None]
    sources.write_text("[{")
    with pytest.raises(BadParameter, match="image sources file beside the cases .* is not JSON"):
        load_cases(path)


def test_deeply_nested_cases_file_is_refused(tmp_path, capsys):
    path = tmp_path / "cases.json"
    path.write_text("[" * 100000 + "]" * 100000)
    assert main(["eval", str(path)]) == 2
    assert capsys.readouterr().err.strip().endswith("nests arrays or objects deeper than 64 "
                                                    "levels")


def test_ours_on_the_test_cases(cases):
    results = evaluate(cases, "ours")
    assert len(results) == 3
    for result in results:
        assert result.error is None
        assert result.latency_ms > 0
        np.testing.assert_allclose(result.polyline[0], result.case.a)
        np.testing.assert_allclose(result.polyline[-1], result.case.b)
    # How close to the river they land: tests/test_quality.py.


def test_failures_are_counted_not_dropped(cases):
    rasters = RasterCache()

    def failing(raster, a, b):
        raise NoAdmissiblePath("no path")

    failed = run_case(failing, "broken", cases[0], rasters.get(cases[0].image))
    assert failed.polyline is None
    assert "NoAdmissiblePath" in failed.error
    fine = evaluate(cases[1:], "straight", rasters=rasters)
    summary = summarise([failed, *fine])
    assert summary["all"]["n"] == 3
    assert summary["all"]["failures"] == 1
    assert np.isinf(summary["all"]["hausdorff"]["mean"])
    assert set(METRICS) | {"latency_ms", "n", "failures"} == set(summary["all"])
    assert summary["river"]["n"] == 3
    assert "inf" in format_summary("broken", summary)


@pytest.mark.parametrize("polyline", [np.empty((0, 2)), [[1.0, np.nan], [3.0, 4.0]],
                                      [1.0, 2.0, 3.0]])
def test_a_method_without_a_finite_polyline_is_a_failed_case(cases, polyline):
    result = run_case(lambda raster, a, b: polyline, "broken", cases[0],
                      RasterCache().get(cases[0].image))
    assert result.polyline is None
    assert result.metrics.completeness_3 == 0.0
    assert "no finite polyline" in result.error


def test_summary_columns_line_up_for_long_group_names(cases):
    summary = summarise(evaluate(cases, "straight"))
    summary["a_group_name_longer_than_twenty"] = summary["all"]
    rows = format_summary("straight", summary).splitlines()
    assert len({len(row) for row in rows}) == 1


@pytest.mark.parametrize("method", ["livewire", "route_flat", "route_edge", "straight"])
def test_peers_run_from_a_to_b(cases, method):
    # In order: fixing a line (corrections) joins the legs a → vertex → b end to end.
    if method == "livewire":
        pytest.importorskip("cv2")
    elif method.startswith("route"):
        pytest.importorskip("skimage")
    case = cases[1]
    result = evaluate([case], method)[0]
    assert result.error is None
    assert tuple(np.round(result.polyline[0])) == tuple(np.round(case.a))
    assert tuple(np.round(result.polyline[-1])) == tuple(np.round(case.b))


#: The peers' figures on the 58 nontrivial road cases (resources/eval/roads/cases.json), as
#: docs/ACCURACY.md gives them: median c@3, c@5 (measured 0.347 / 0.568 and 0.122 / 0.207).
PEER_FIGURES = {"route_flat": (0.347, 0.568), "livewire": (0.122, 0.207)}


@pytest.mark.parametrize("method", sorted(PEER_FIGURES))
def test_peers_reach_their_published_figures(method):
    """The peers are held to what docs/ACCURACY.md reports of them (to 0.02): a peer made
    weaker (or stronger) by a change of its cost or of its wiring fails."""
    pytest.importorskip("cv2" if method == "livewire" else "skimage")
    roads = Path(__file__).resolve().parent.parent / "resources" / "eval" / "roads"
    nontrivial = [case for case in load_cases(roads / "cases.json") if "nontrivial" in case.tags]
    assert len(nontrivial) == 58
    summary = summarise(evaluate(nontrivial, method))["all"]
    assert summary["failures"] == 0
    median_3, median_5 = PEER_FIGURES[method]
    assert summary["completeness_3"]["median"] == pytest.approx(median_3, abs=0.02)
    assert summary["completeness_5"]["median"] == pytest.approx(median_5, abs=0.02)


def test_stability_is_one_finite_shift_per_case(cases):
    # The quality bound (median ≤ 1.2 px) is in tests/test_quality.py.
    shifts = stability(cases[:1], shift=3.0)
    assert shifts.shape == (1,)
    assert 0 <= shifts[0] < np.inf


def test_corrections_add_vertices_where_the_line_misses_worst():
    # An L-shaped road: a straight line misses its corner by 28 px; one vertex there, at the
    # true line's point farthest from the line, makes the straight legs right.
    corner = np.array([40.0, 0.0])
    case = Case("l", "none.png", np.array([0.0, 0.0]), np.array([40.0, 40.0]),
                np.array([[0.0, 0.0], corner, [40.0, 40.0]]), ("nontrivial",))
    calls = []

    def straight(raster, a, b):
        calls.append((tuple(a), tuple(b)))
        return np.array([a, b], dtype=float)

    fixed = corrections_needed(straight, case, None, most=2)
    assert fixed.added == 1
    assert calls[-2:] == [((0.0, 0.0), tuple(corner)), (tuple(corner), (40.0, 40.0))]
    np.testing.assert_allclose(fixed.vertices, [corner])
    np.testing.assert_allclose(fixed.polyline, [[0, 0], corner, [40, 40]])
    unfixed = corrections_needed(straight, case, None, most=0)
    assert unfixed.added is None
    assert unfixed.vertices.shape == (0, 2)
    np.testing.assert_allclose(unfixed.polyline, [[0, 0], [40, 40]])

    def failing(raster, a, b):
        raise NoAdmissiblePath("no path")

    # A road of two bends needs two vertices; the leg the second one does not split is not
    # traced again.
    zigzag = replace(case, gt=np.array([[0.0, 0.0], [40.0, 0.0], [0.0, 40.0], [40.0, 40.0]]))
    calls.clear()
    assert corrections_needed(straight, zigzag, None, most=3).added == 2
    assert len(calls) == len(set(calls)) == 5  # a→b, then two legs, then two more

    failed = corrections_needed(failing, case, None, most=3)
    assert failed.added is None
    assert failed.polyline is None
    summary = corrections_summary([case, replace(case, tags=())], [fixed, unfixed], most=2)
    assert summary["all"] == {"n": 2, "good_after": [0.0, 0.5, 0.5]}
    assert summary["nontrivial"] == {"n": 1, "good_after": [0.0, 1.0, 1.0]}


def test_eval_command_reports_corrections(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["eval", str(CASES), "--method", "straight", "--corrections", "2", "--json",
                 str(out)]) == 0
    assert "good lines (90% of the road within 5 px) with 0 to 2 vertices" in \
        capsys.readouterr().out
    report = json.loads(out.read_text())["corrections"]
    assert report["most"] == 2
    counts = report["methods"]["straight"]["cases"]
    assert set(counts) == {"dubai_t6_003_00", "dubai_t6_003_01", "dubai_t6_003_02"}
    for case_id, line in report["methods"]["straight"]["lines"].items():
        added = counts[case_id]
        assert len(line["vertices"]) == (2 if added is None else added)
        assert len(line["polyline"]) == len(line["vertices"]) + 2  # straight legs
    shares = report["methods"]["straight"]["summary"]["all"]["good_after"]
    assert shares == sorted(shares)  # never fewer good lines with more vertices
    assert shares[-1] == np.mean([c is not None and c <= 2 for c in counts.values()])
    assert main(["eval", str(CASES), "--corrections", "9"]) == 2
    assert "--corrections must be 0 to 5" in capsys.readouterr().err


def test_unknown_method():
    with pytest.raises(BadParameter, match="unknown method"):
        evaluate([], "magic")


def test_eval_command_writes_a_report(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["eval", str(CASES), "--method", "straight", "--limit", "2", "--json",
                 str(out)]) == 0
    assert "straight" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["methods"]["straight"]["summary"]["all"]["n"] == 2
    assert len(report["methods"]["straight"]["cases"]) == 2
    assert report["params"]["score"] == "surface"
    assert report["surface_model"] is None  # the straight line runs no surface model


def test_eval_command_all_methods_and_stability(capsys):
    pytest.importorskip("cv2")
    pytest.importorskip("skimage")
    assert main(["eval", str(CASES), "--method", "all", "--limit", "1", "--stability", "2",
                 "--tags"]) == 0
    text = capsys.readouterr().out
    for method in ("ours", "livewire", "route_flat", "route_edge", "straight"):
        assert method in text
    assert "stability" in text


def test_eval_notes_images_of_unknown_ground_resolution(tmp_path, capsys):
    # The test cases' PNG has no georeferencing and the cases give no ground resolution.
    assert main(["eval", str(CASES), "--limit", "1"]) == 0
    err = capsys.readouterr().err
    assert "1 image(s) have no ground resolution" in err
    assert "dubai_t6_003_crop.png" in err
    document = json.loads(CASES.read_text())
    for record in document:
        record["ground_resolution"] = 1.5
        record["image"] = str(DATA / record["image"])
    given = tmp_path / "cases.json"
    given.write_text(json.dumps(document))
    for record in document:
        del record["ground_resolution"]
    described = tmp_path / "described"
    described.mkdir()
    (described / "cases.json").write_text(json.dumps(document))
    (described / "sources.json").write_text(json.dumps([
        {"image": str(DATA / "dubai_t6_003_crop.png"), "gsd_m": 1.5}]))
    for run in (["eval", str(given), "--limit", "1"],
                ["eval", str(described / "cases.json"), "--limit", "1"],
                ["eval", str(CASES), "--limit", "1", "--ground-resolution", "1.5"],
                ["eval", str(CASES), "--limit", "1", "--line-kind", "river"],
                ["eval", str(CASES), "--method", "straight", "--limit", "1"]):
        assert main(run) == 0
        assert "ground resolution" not in capsys.readouterr().err, run


@pytest.mark.parametrize(("method", "module", "library"), [
    ("all", "cv2", "livewire needs OpenCV"),
    ("livewire", "cv2", "livewire needs OpenCV"),
    ("route_flat", "skimage", "route_flat needs scikit-image"),
    ("all", "skimage", "route_flat needs scikit-image"),
])
def test_a_peer_without_its_library_is_one_error_before_any_work(tmp_path, capsys, monkeypatch,
                                                                 method, module, library):
    monkeypatch.setitem(sys.modules, module, None)  # as if the eval extra were not installed
    report = tmp_path / "report.json"
    assert main(["eval", str(CASES), "--method", method, "--json", str(report)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: method {library} (module {module}), which cannot "
                                   "be imported (")
    assert captured.err.endswith('install the eval extra, pip install -e ".[eval]"\n')
    assert captured.err.count("\n") == 1
    assert not report.exists()


def test_methods_that_need_no_missing_library_still_run(capsys, monkeypatch):
    pytest.importorskip("skimage")
    monkeypatch.setitem(sys.modules, "cv2", None)
    assert main(["eval", str(CASES), "--method", "route_edge", "--limit", "1", "--quiet"]) == 0
    assert "route_edge" in capsys.readouterr().out


def test_eval_command_bad_input(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "none.json")]) == 2
    assert "cannot read cases file" in capsys.readouterr().err


def test_eval_refuses_cases_its_images_cannot_hold(tmp_path, capsys):
    document = json.loads(CASES.read_text())
    for record in document:
        record["image"] = str(DATA / record["image"])
    document[1]["b"] = [5000, 10]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(document))
    assert main(["eval", str(path), "--method", "straight"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "case 'dubai_t6_003_01': point b=(5000, 10) lies outside the 380×195 image")
    document[1]["image"] = str(tmp_path / "missing.png")
    path.write_text(json.dumps(document))
    assert main(["eval", str(path), "--method", "straight"]) == 2
    assert "case 'dubai_t6_003_01': " in capsys.readouterr().err


def test_eval_report_never_replaces_an_input(tmp_path, capsys):
    import shutil

    folder = tmp_path / "set"
    shutil.copytree(DATA, folder, )
    cases = folder / CASES.name
    image = folder / "dubai_t6_003_crop.png"
    sources = folder / "sources.json"
    sources.write_text("[]")
    for target in (cases, image, sources):
        before = target.read_bytes()
        assert main(["eval", str(cases), "--method", "straight", "--json", str(target)]) == 2
        assert f"--json {target} is the input" in capsys.readouterr().err
        assert target.read_bytes() == before
    with pytest.raises(SystemExit, match="2"):
        main(["eval", str(cases), "--method", "straight", "--json", ""])
    assert "argument -o/--json: expected a file to write, got an empty path" in \
        capsys.readouterr().err


def test_eval_on_an_evidence_folder(tmp_path, capsys, cases):
    # The cases' own ground truth drawn as a 6 px band: an oracle probability map, which the
    # optimiser must follow (ours reads it; the peers still trace the image).
    import imageio.v3 as iio

    from tests.synthetic import distance_to_polyline

    image = iio.imread(cases[0].image)
    rows, cols = image.shape[:2]
    y, x = np.mgrid[:rows, :cols]
    grid = np.column_stack([x.ravel(), y.ravel()]).astype(float)
    distance = np.min([distance_to_polyline(grid, case.gt) for case in cases], axis=0)
    maps = tmp_path / "maps"
    maps.mkdir()
    iio.imwrite(maps / "dubai_t6_003_crop.png",
                np.where(distance.reshape(rows, cols) <= 3, 255, 0).astype(np.uint8))
    out = tmp_path / "report.json"
    assert main(["eval", str(CASES), "--score", "centre", "--evidence-dir", str(maps),
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["evidence_dir"] == str(maps)
    summary = report["methods"]["ours"]["summary"]["all"]
    assert summary["failures"] == 0
    assert summary["completeness_3"]["median"] >= 0.95
    # A folder without the image's raster: refused before any work, naming the first case.
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert main(["eval", str(CASES), "--evidence-dir", str(empty)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"case 'dubai_t6_003_00': evidence raster {empty / 'dubai_t6_003_crop.png'} not found")
    assert main(["eval", str(CASES), "--evidence-dir", str(tmp_path / "none")]) == 2
    assert "evidence folder" in capsys.readouterr().err
