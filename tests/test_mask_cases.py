"""scripts/mask_cases.py: click cases made from road masks, ready for ``eval`` and training."""

from __future__ import annotations

import json

import imageio.v3 as iio
import numpy as np
import pytest

from cli import main as cli_main
from core.metrics import path_metrics
from tests.conftest import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("mask_cases")


def road_mask(size: int = 320) -> np.ndarray:
    """A straight road across the image, a road bending by 80° along a quarter circle, and a
    crossing road meeting the straight one at a right angle: (size, size) uint8, road 255."""
    rows, cols = np.mgrid[0:size, 0:size]
    mask = np.abs(rows - 60) <= 5  # straight, y = 60
    radius = np.hypot(rows - 320, cols - 0)
    mask |= (np.abs(radius - 180) <= 5) & (rows > 140) & (cols < 190)  # the bend
    mask |= (np.abs(cols - 250) <= 5) & (rows <= 60)  # a side road ending at the straight one
    return np.where(mask, 255, 0).astype(np.uint8)


@pytest.fixture
def folder(tmp_path):
    mask = road_mask()
    image = np.repeat(np.where(mask[..., None] > 0, 90, 160).astype(np.uint8), 3, axis=2)
    iio.imwrite(tmp_path / "tile.png", image)
    iio.imwrite(tmp_path / "tile_mask.png", mask)
    (tmp_path / "sources.json").write_text(json.dumps(
        [{"id": "tile", "image": "tile.png", "gt": "tile_mask.png", "gsd_m": 0.5}]))
    return tmp_path


def test_cases_run_along_the_roads_between_their_clicks(script, folder):
    out = folder / "out" / "cases.json"
    out.parent.mkdir()
    assert script.main([str(folder), "--out", str(out), "--per-image", "12", "--seed", "3"]) == 0
    cases = json.loads(out.read_text())
    assert len(cases) >= 8
    mask = road_mask() > 0
    for case in cases:
        line = np.asarray(case["gt"])
        assert np.allclose(line[0], case["a"])
        assert np.allclose(line[-1], case["b"])
        cols, rows = np.rint(line).astype(int).T
        assert mask[rows, cols].mean() > 0.95  # on the road all the way
        length = np.hypot(*np.diff(line, axis=0).T).sum()
        assert 55 <= length <= 405
        straight = path_metrics(np.array([case["a"], case["b"]]), line).completeness_3
        assert ("nontrivial" in case["tags"]) == (straight < 0.8)
        assert case["image"] == "../tile.png"
        assert case["meta"] == {"source": "tile"}
        assert case["ground_resolution"] == 0.5
    assert any("nontrivial" in case["tags"] for case in cases)  # along the bend
    assert len({case["id"] for case in cases}) == len(cases)


def test_no_case_turns_a_corner_onto_another_road(script):
    side = np.stack([np.full(80, 250.0), np.arange(80.0)[::-1]], axis=1)  # down the side road
    along = np.stack([250.0 - np.arange(1, 120.0), np.full(119, 0.0)], axis=1)  # then along
    corner = np.vstack([side, along])
    assert not script.follows_one_road(script.smooth_chain(corner))
    bend = np.stack([180 * np.sin(t) for t in (np.linspace(0, 1.2, 300),)] * 2, axis=1)
    bend[:, 1] = 320 - 180 * np.cos(np.linspace(0, 1.2, 300))  # 69° along a wide arc
    assert script.follows_one_road(script.smooth_chain(bend))


def test_the_cases_trace_and_measure_with_eval(script, folder, capsys):
    out = folder / "cases.json"
    assert script.main([str(folder), "--out", str(out), "--per-image", "4"]) == 0
    capsys.readouterr()
    assert cli_main(["eval", str(out), "--method", "straight", "--quiet"]) == 0
    assert "straight" in capsys.readouterr().out


def with_ground(text: str):
    """A setup writing a sources.json whose image's ``gsd_m`` is the JSON ``text``."""
    record = '{"id": "tile", "image": "tile.png", "gt": "tile_mask.png", "gsd_m": ' + text + "}"
    return lambda f: (f / "sources.json").write_text(f"[{record}]")


@pytest.mark.parametrize(("setup", "options", "message"), [
    (lambda f: (f / "sources.json").unlink(), [], "sources.json"),
    (lambda f: (f / "sources.json").write_text('{"id": 1}'), [], "must be a list of"),
    (lambda f: (f / "sources.json").write_text('[{"id": "tile", "image": 7, "gt": "m.png"}]'),
     [], "(non-empty strings)"),
    (lambda f: (f / "sources.json").write_text(json.dumps(
        [{"id": "tile", "image": "tile.png", "gt": "tile_mask.png"}] * 2)), [],
     "names an image id twice"),
    (lambda f: (f / "tile_mask.png").write_bytes(b"not a png"), [], "tile_mask.png"),
    (lambda f: (f / "tile.png").unlink(), [], "image file not found"),
    (lambda f: iio.imwrite(f / "tile_mask.png", road_mask(300)), [],
     "mask of tile is 300×300 px, its image 320×320"),
    (lambda f: None, ["--per-image", "0"], "--per-image must be at least 1"),
    (lambda f: None, ["--nontrivial-share", "2"], "--nontrivial-share must be 0 to 1"),
    (lambda f: None, ["--min-length", "500"], "--min-length <= --max-length"),
    (lambda f: None, ["--max-length", "inf"], "--min-length and --max-length must be finite"),
    (lambda f: (f / "sources.json").write_text("[]"), [], "sources.json lists no images"),
    *[(with_ground(text), [], "gsd_m of 'tile' must be a positive number of metres per pixel")
      for text in ('"0.5"', "[1]", "NaN", "-1", "0", "true")],
    (lambda f: None, ["--seed=-1"], "--seed must be 0 or more"),
    (lambda f: None, ["--per-image", "100000"], "--per-image must be at most 500"),
])
def test_bad_input_is_one_error_and_writes_nothing(script, folder, capsys, setup, options,
                                                   message):
    setup(folder)
    out = folder / "cases.json"
    assert script.main([str(folder), "--out", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert message in err
    assert not out.exists()


@pytest.mark.parametrize("name", ["sources.json", "tile.png", "tile_mask.png"])
def test_an_out_that_is_an_input_is_refused_and_left_alone(script, folder, capsys, name):
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert script.main([str(folder), "--out", str(folder / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert f"--out {folder / name} is the input" in err
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
