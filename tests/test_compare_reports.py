"""scripts/compare_reports.py and the report reader it shares with accuracy_tables.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import BadParameter
from core.evaluate import read_report, report_cases
from tests.conftest import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("compare_reports")


@pytest.fixture(scope="module")
def tables():
    return load_script("accuracy_tables")


def _cases(folder: Path) -> str:
    """Four nontrivial cases (two per dataset) and two straight-line-right ones."""
    cases = [{"id": f"c{k}", "image": "x.png", "a": [0, 0], "b": [9, 0], "gt": [[0, 0], [9, 0]],
              "tags": (["north" if k < 2 else "south", "nontrivial"] if k < 4 else ["north"])}
             for k in range(6)]
    path = folder / "cases.json"
    path.write_text(json.dumps(cases))
    return str(path)


def _report(folder: Path, name: str, c3: list, c5: list, method: str = "ours") -> str:
    rows = [{"id": f"c{k}", "completeness_3": a, "completeness_5": b}
            for k, (a, b) in enumerate(zip(c3, c5, strict=True))]
    path = folder / name
    path.write_text(json.dumps({"params": {}, "methods": {method: {"cases": rows}}}))
    return str(path)


BEFORE = ([0.2, 0.4, 0.6, 0.8, 1.0, 1.0], [0.3, 0.6, 0.9, 1.0, 1.0, 1.0])
AFTER = ([0.5, 0.4, 0.7, 0.9, 1.0, 0.8], [0.6, 0.6, 1.0, 1.0, 1.0, 0.85])


def test_groups_means_differences_and_their_standard_errors(script, tmp_path, capsys):
    cases = _cases(tmp_path)
    before = _report(tmp_path, "before.json", *BEFORE)
    after = _report(tmp_path, "after.json", *AFTER)
    assert script.main([before, after, "--cases", cases]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert list(rows) == ["nontrivial", "nontrivial, north", "nontrivial, south",
                          "straight line right"]
    # Nontrivial c@3: differences +0.3, 0, +0.1, +0.1 → mean +0.125, standard error
    # std(ddof=1) / √4; three better, none worse; gross misses (c@5 < 0.5) 1 of 4 → 0.
    difference = np.array([0.3, 0.0, 0.1, 0.1])
    error = difference.std(ddof=1) / 2
    assert f"| 4 | 0.500 / 0.700 | 0.625 / 0.800 | +0.125 ± {error:.3f} |" in rows["nontrivial"]
    # Every case's true line is the straight line (completeness 1): below it by more than 0.1
    # at 5 px are the cases under 0.9 there.
    assert "| 3 / 0 | 25% → 0% | 2 → 2 |" in rows["nontrivial"]
    assert "| 2 | 0.300 / 0.450 | 0.450 / 0.600 | +0.150 ± 0.150 |" in rows["nontrivial, north"]
    # Straight-line-right: one case worse by 0.2 at 3 px and 0.15 at 5 px, so now more than
    # 0.1 below the straight line.
    assert ("| 2 | 1.000 / 1.000 | 0.900 / 0.925 | -0.100 ± 0.100 | -0.075 ± 0.075 | 0 / 1 "
            "| 0% → 0% | 0 → 1 |") in rows["straight line right"]


def test_several_trainings_a_side_count_each_case_by_its_mean_and_list_each_report(
        script, tmp_path, capsys):
    cases = _cases(tmp_path)
    # Two "trainings" before whose mean is BEFORE, two after whose mean is AFTER.
    low = ([0.1, 0.3, 0.5, 0.7, 1.0, 1.0], [0.2, 0.5, 0.8, 1.0, 1.0, 1.0])
    high = ([0.3, 0.5, 0.7, 0.9, 1.0, 1.0], [0.4, 0.7, 1.0, 1.0, 1.0, 1.0])
    before = [_report(tmp_path, "b1.json", *low), _report(tmp_path, "b2.json", *high)]
    after = [_report(tmp_path, "a1.json", *AFTER), _report(tmp_path, "a2.json", *AFTER)]
    assert script.main([*before, "--after", *after, "--cases", cases]) == 0
    out = capsys.readouterr().out
    error = np.array([0.3, 0.0, 0.1, 0.1]).std(ddof=1) / 2
    # The same table as one report a side with BEFORE and AFTER...
    assert f"| nontrivial | 4 | 0.500 / 0.700 | 0.625 / 0.800 | +0.125 ± {error:.3f} |" in out
    # ...and each report's own means on the nontrivial cases: the spread between trainings.
    assert f"| before | {before[0]} | 0.400 / 0.625 |" in out
    assert f"| before | {before[1]} | 0.600 / 0.775 |" in out
    assert f"| after | {after[1]} | 0.625 / 0.800 |" in out


def test_three_reports_without_after_or_one_of_other_cases_are_refused(script, tmp_path, capsys):
    cases = _cases(tmp_path)
    report = _report(tmp_path, "r.json", *BEFORE)
    with pytest.raises(SystemExit) as stop:
        script.main([report, report, report, "--cases", cases])
    assert stop.value.code == 2
    assert "several before and several after --after" in capsys.readouterr().err
    shorter = _report(tmp_path, "shorter.json", BEFORE[0][:5], BEFORE[1][:5])
    assert script.main([report, shorter, "--after", report, "--cases", cases]) == 2
    assert f"different cases (1 only in {report}, 0 only in {shorter})" in capsys.readouterr().err


def test_a_method_is_chosen_by_name_and_a_missing_one_is_named(script, tmp_path, capsys):
    cases = _cases(tmp_path)
    before = _report(tmp_path, "before.json", *BEFORE, method="route_flat")
    after = _report(tmp_path, "after.json", *AFTER, method="route_flat")
    # One method in each report: that one.
    assert script.main([before, after, "--cases", cases]) == 0
    assert script.main([before, after, "--cases", cases, "--method", "ours"]) == 2
    assert "has no method 'ours' (it has route_flat)" in capsys.readouterr().err


@pytest.mark.parametrize(("document", "message"), [
    ([1, 2], "lists no methods"),
    ({"methods": {"ours": {"rows": []}}}, "has no list of cases"),
    ({"methods": {"ours": {"cases": [{"completeness_3": 1.0}]}}}, "a case without an id"),
    ({"methods": {"ours": {"cases": [{"id": "c0"}, {"id": "c0"}]}}}, "lists case 'c0' twice"),
    ({"methods": {"ours": {"cases": [{"id": "c0", "completeness_3": 1.5}]}}},
     "completeness_3 must be a number in [0, 1]"),
    ({"methods": {"ours": {"cases": [{"id": "c0", "completeness_5": "high"}]}}},
     "completeness_5 must be a number in [0, 1]"),
])
def test_a_file_that_is_not_a_report_is_named_with_what_is_wrong(tmp_path, document, message):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BadParameter, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_report(path)


def test_a_failed_case_reads_as_completeness_zero(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"methods": {"ours": {"cases": [
        {"id": "c0", "completeness_3": None, "completeness_5": None}]}}}))
    row = read_report(path)["ours"]["c0"]
    assert (row["completeness_3"], row["completeness_5"]) == (0.0, 0.0)


def test_reports_of_different_cases_or_cases_not_in_the_file_end_with_exit_2(
        script, tmp_path, capsys):
    cases = _cases(tmp_path)
    before = _report(tmp_path, "before.json", *BEFORE)
    shorter = _report(tmp_path, "shorter.json", BEFORE[0][:5], BEFORE[1][:5])
    assert script.main([before, shorter, "--cases", cases]) == 2
    assert "different cases (1 only in" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps(json.loads(Path(cases).read_text())[:3]))
    assert script.main([before, before, "--cases", str(other)]) == 2
    assert "3 cases of the report are not in" in capsys.readouterr().err
    assert script.main([str(tmp_path / "missing.json"), before, "--cases", cases]) == 2
    assert "cannot read report" in capsys.readouterr().err


def test_report_cases_keeps_the_report_s_cases_only(tmp_path):
    cases = _cases(tmp_path)
    runs = read_report(_report(tmp_path, "r.json", BEFORE[0][:2], BEFORE[1][:2]))
    found = report_cases(runs, cases)
    assert {name: case.tags for name, case in found.items()} == {
        "c0": ("north", "nontrivial"), "c1": ("north", "nontrivial")}


def test_accuracy_tables_give_medians_per_dataset_and_refuse_a_foreign_report(
        tables, tmp_path, capsys):
    cases = _cases(tmp_path)
    report = _report(tmp_path, "r.json", *BEFORE)
    assert tables.main([report, cases]) == 0
    out = capsys.readouterr().out
    assert "| ours | 0.30 / 0.45 (2) | 0.70 / 0.95 (2) | 0.50 / 0.75 (4) |" in out
    # No straight-line-right case in the south: a dash, not a number.
    assert "| ours | 1.00 / 1.00 (2) | – | 1.00 / 1.00 (2) |" in out
    assert tables.main([report, str(tmp_path / "none.json")]) == 2
    assert "cannot read cases file" in capsys.readouterr().err


def test_accuracy_tables_without_datasets_have_as_many_cells_in_each_row(tables, tmp_path,
                                                                         capsys):
    """Cases without a dataset tag: the tables have the method and "all" columns alone, the
    separator row as many cells as the header."""
    cases = [{"id": f"c{k}", "image": "x.png", "a": [0, 0], "b": [9, 0], "gt": [[0, 0], [9, 0]],
              **({"tags": ["nontrivial"]} if k < 2 else {})} for k in range(4)]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    report = _report(tmp_path, "r.json", BEFORE[0][:4], BEFORE[1][:4])
    assert tables.main([report, str(tmp_path / "cases.json")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert rows[:2] == ["| method | all |", "|---|---|"]
    assert all(row.count("|") == 3 for row in rows)
