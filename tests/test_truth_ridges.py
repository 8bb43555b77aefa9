"""scripts/truth_ridges.py: the cases' true centrelines as oracle evidence rasters."""

from __future__ import annotations

import json

import imageio.v3 as iio
import numpy as np
import pytest

from cli import main
from core.evaluate import load_cases
from tests.conftest import ROOT, load_script
from tests.synthetic import distance_to_polyline

CASES = ROOT / "tests" / "data" / "dubai_t6_003_cases.json"


@pytest.fixture(scope="module")
def ridges():
    return load_script("truth_ridges")


def test_the_ridge_peaks_on_every_line_and_fades_with_distance(ridges):
    lines = [np.array([[5.0, 5.0], [50.0, 20.0]]), np.array([[10.0, 35.0], [70.0, 35.0]])]
    raster = ridges.ridge_raster((40, 60), lines, 1.5)
    assert raster.shape == (40, 60)
    assert raster.dtype == np.uint8
    y, x = np.mgrid[:40, :60]
    grid = np.column_stack([x.ravel(), y.ravel()]).astype(float)
    distance = np.min([distance_to_polyline(grid, line) for line in lines], axis=0).reshape(40, 60)
    assert raster[distance < 0.3].min() >= 245  # on a line (its pixel within rounding)
    assert raster[distance > 6].max() == 0
    expected = 255 * np.exp(-distance ** 2 / (2 * 1.5 ** 2))
    assert np.abs(raster.astype(float) - expected)[distance < 4].max() < 60  # rasterised to px


def test_tracing_the_ridges_follows_every_true_line(ridges, tmp_path):
    out = tmp_path / "ridges"
    assert ridges.main([str(CASES), str(out)]) == 0
    cases = load_cases(CASES)
    written = iio.imread(out / "dubai_t6_003_crop.png")
    assert written.shape == iio.imread(cases[0].image).shape[:2]
    report = tmp_path / "report.json"
    assert main(["eval", str(CASES), "--score", "evidence", "--evidence-dir", str(out),
                 "--json", str(report)]) == 0
    results = json.loads(report.read_text())["methods"]["ours"]["cases"]
    assert len(results) == len(cases)
    assert all(result["completeness_3"] >= 0.95 for result in results)


def test_bad_input_writes_nothing(ridges, tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    assert ridges.main([str(CASES), str(full)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in full.iterdir()) == ["keep.txt"]
    assert ridges.main([str(CASES), str(tmp_path / "wide"), "--sigma", "40"]) == 2
    assert "--sigma" in capsys.readouterr().err
    assert ridges.main([str(tmp_path / "none.json"), str(tmp_path / "missing")]) == 2
    # Two images of one name in different folders would overwrite each other's ridges.
    record = json.loads(CASES.read_text())[0]
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "same.png").write_bytes(
            (CASES.parent / record["image"]).read_bytes())
    both = tmp_path / "both.json"
    both.write_text(json.dumps([{**record, "id": "one", "image": "a/same.png"},
                                {**record, "id": "two", "image": "b/same.png"}]))
    assert ridges.main([str(both), str(tmp_path / "clash")]) == 2
    assert "share the name" in capsys.readouterr().err
    assert not (tmp_path / "wide").exists()
    assert not (tmp_path / "clash").exists()
    assert not list(tmp_path.glob(".ridges-*"))


def test_an_unreadable_image_is_one_plain_message(ridges, tmp_path, capsys):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"id": "x", "image": "bad.png", "a": [1, 1], "b": [5, 5],
                                  "gt": [[1, 1], [5, 5]]}]))
    assert ridges.main([str(cases), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error == (f"error: {tmp_path / 'bad.png'} is not an image this program can read "
                     "(PNG, JPEG, TIFF/GeoTIFF, …)\n")
    assert not (tmp_path / "out").exists()
