"""scripts/left_out_cases.py: per-source case sets for measuring sources left out of training."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("left_out_cases")


def _cases(images: dict[str, int]) -> list[dict]:
    """For each image id, that many nontrivial and as many straight-line-right cases."""
    cases = []
    for image, count in images.items():
        for k in range(2 * count):
            cases.append({"id": f"{image}_{k:02d}", "image": f"images/{image}.jpg",
                          "a": [k, 0], "b": [k, 50], "gt": [[k, 0], [k, 50]],
                          "tags": ["nontrivial"] if k % 2 else ["straight"],
                          "meta": {"source": image}})
    return cases


def _write(folder: Path, name: str, cases: list[dict]) -> str:
    path = folder / name
    path.write_text(json.dumps(cases))
    return str(path)


def test_sets_per_source_respect_counts_and_per_image_caps(script, tmp_path):
    draw = _write(tmp_path, "draw.json", _cases({"gsi_1": 6, "gsi_2": 6, "sn3vegas_a": 6,
                                                 "sn3vegas_b": 6}))
    out = tmp_path / "sets"
    assert script.main([draw, "--out", str(out), "--source", "gsi=gsi_:4",
                        "--source", "vegas=sn3vegas:2", "--nontrivial", "5",
                        "--straight", "3"]) == 0
    gsi = json.loads((out / "gsi.json").read_text())
    vegas = json.loads((out / "vegas.json").read_text())
    assert {c["meta"]["source"] for c in gsi} <= {"gsi_1", "gsi_2"}
    assert {c["meta"]["source"] for c in vegas} <= {"sn3vegas_a", "sn3vegas_b"}
    for cases, cap, hard, plain in ((gsi, 4, 5, 3), (vegas, 2, 4, 3)):
        kinds = Counter("nontrivial" in c["tags"] for c in cases)
        assert kinds[True] == hard  # Las Vegas: 2 images × cap 2
        assert kinds[False] == plain
        per_image = Counter((c["meta"]["source"], "nontrivial" in c["tags"]) for c in cases)
        assert max(per_image.values()) <= cap
    # Image paths are made absolute from the cases file's folder.
    assert all(c["image"] == str(tmp_path / "images" / f"{c['meta']['source']}.jpg")
               for c in gsi + vegas)


def test_the_same_seed_draws_the_same_cases_and_repeats_are_taken_once(script, tmp_path):
    cases = _cases({"gsi_1": 10})
    first = _write(tmp_path, "one.json", cases)
    again = _write(tmp_path, "two.json", cases)  # a second draw that repeats the first
    runs = []
    for name in ("a", "b"):
        assert script.main([first, again, "--out", str(tmp_path / name), "--source",
                            "gsi=gsi_", "--nontrivial", "20", "--straight", "0",
                            "--per-image", "50", "--seed", "3"]) == 0
        runs.append(json.loads((tmp_path / name / "gsi.json").read_text()))
    assert runs[0] == runs[1]
    assert len(runs[0]) == 10  # ten distinct nontrivial cases, not twenty
    other = tmp_path / "c"
    script.main([first, "--out", str(other), "--source", "gsi=gsi_", "--nontrivial", "5",
                 "--straight", "0", "--seed", "4"])
    assert [c["id"] for c in json.loads((other / "gsi.json").read_text())] != \
        [c["id"] for c in runs[0][:5]]


@pytest.mark.parametrize(("argv", "message"), [
    (["--source", "gsi"], "expected NAME=PREFIX"),
    (["--source", "gsi=gsi_:x"], "CAP must be a whole number"),
    (["--source", "gsi=gsi_:0"], "CAP must be at least 1"),
    (["--source", "gsi=gsi_", "--source", "gsi=sn3"], "a name of its own"),
    (["--source", "other=zzz"], "no case lies on an image of source other"),
    (["--source", "gsi=gsi_", "--nontrivial", "-1"], "must not be negative"),
    (["--source", "gsi=gsi_", "--per-image", "0"], "error: --per-image must be at least 1, got 0"),
])
def test_bad_options_end_in_one_message(script, tmp_path, capsys, argv, message):
    draw = _write(tmp_path, "draw.json", _cases({"gsi_1": 2}))
    assert script.main([draw, "--out", str(tmp_path / "out"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "gsi.json").exists()


@pytest.mark.parametrize(("content", "message"), [
    ("{", "is not JSON"),
    ("[" * 200 + "]" * 200, "nests arrays or objects deeper"),
    ('{"a": 1}', "expected a JSON list"),
    ('[{"image": "x.jpg", "a": [0, 0], "b": [1, 1]}]', "lacks image, a, b or meta.source"),
    ('[{"image": 3, "a": [0, 0], "b": [1, 1], "meta": {"source": "gsi_1"}}]', "must be text"),
])
def test_hostile_cases_files_end_in_one_message(script, tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert script.main([str(path), "--out", str(tmp_path / "out"), "--source", "gsi=gsi_"]) == 2
    assert message in capsys.readouterr().err


def test_image_paths_are_made_absolute_from_the_folder_given(script, tmp_path):
    # The generator writes image paths relative to the training folder it read, not to the
    # folder of its output.
    training = tmp_path / "roads-train"
    training.mkdir()
    draw = _write(tmp_path, "draw.json", _cases({"gsi_1": 2}))
    out = tmp_path / "sets"
    assert script.main([draw, "--images-from", str(training), "--out", str(out),
                        "--source", "gsi=gsi_"]) == 0
    chosen = json.loads((out / "gsi.json").read_text())
    assert {c["image"] for c in chosen} == {str(training / "images" / "gsi_1.jpg")}
    assert script.main([draw, "--images-from", str(tmp_path / "missing"), "--out", str(out),
                        "--source", "gsi=gsi_"]) == 2


def test_ids_repeated_across_draws_are_made_unique(script, tmp_path):
    first = _cases({"gsi_1": 3})
    second = [{**case, "a": [case["a"][0] + 100, 0]} for case in first]  # same ids, other spans
    out = tmp_path / "sets"
    assert script.main([_write(tmp_path, "one.json", first), _write(tmp_path, "two.json", second),
                        "--out", str(out), "--source", "gsi=gsi_", "--per-image", "50"]) == 0
    ids = [case["id"] for case in json.loads((out / "gsi.json").read_text())]
    assert len(ids) == 12
    assert len(set(ids)) == 12
    assert "gsi_1_00" in ids
    assert "gsi_1_00-2" in ids


def test_a_missing_cases_file_ends_in_one_message(script, tmp_path, capsys):
    assert script.main([str(tmp_path / "none.json"), "--out", str(tmp_path / "out"),
                        "--source", "gsi=gsi_"]) == 2
    assert "cannot read cases file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_named_and_left_alone(script, tmp_path, capsys):
    draw = _write(tmp_path, "draw.json", _cases({"gsi_1": 2}))
    taken = tmp_path / "taken.json"
    taken.write_text("mine")
    assert script.main([draw, "--out", str(taken), "--source", "gsi=gsi_"]) == 2
    assert capsys.readouterr().err == f"error: --out {taken} exists and is not a folder\n"
    assert taken.read_text() == "mine"
