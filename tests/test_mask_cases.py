"""scripts/mask_cases.py: click cases made from road masks, ready for ``eval`` and training."""

from __future__ import annotations

import json

import imageio.v3 as iio
import numpy as np
import pytest

from cli import main as cli_main
from core.metrics import path_metrics
from core.teaching import read_mask
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


@pytest.mark.parametrize(("dtype", "road"), [(np.uint8, 1), (np.uint16, 255),
                                             (np.uint16, 65535)])
def test_masks_of_any_road_value_give_the_cases_of_the_8_bit_mask(script, folder, tmp_path,
                                                                   dtype, road):
    expected = folder / "expected.json"
    assert script.main([str(folder), "--out", str(expected), "--per-image", "6"]) == 0
    iio.imwrite(folder / "tile_mask.png", ((road_mask() > 0) * road).astype(dtype))
    got = folder / "got.json"
    assert script.main([str(folder), "--out", str(got), "--per-image", "6"]) == 0
    assert json.loads(got.read_text()) == json.loads(expected.read_text())
    assert len(json.loads(got.read_text())) == 6


def test_a_mask_reads_as_road_from_half_its_road_value(tmp_path):
    """Two-valued masks mark road wherever they are not 0, whatever the road value; graded ones
    (JPEG noise) from half their range, so that an empty JPEG mask's noise is no road."""
    road = road_mask() > 0
    for name, pixels in (("one.png", road.astype(np.uint8)),
                         ("byte16.png", (road * 255).astype(np.uint16)),
                         ("full16.png", (road * 65535).astype(np.uint16)),
                         ("float.tif", road.astype(np.float32))):
        iio.imwrite(tmp_path / name, pixels)
        assert np.array_equal(read_mask(tmp_path / name), road), name
    iio.imwrite(tmp_path / "noisy.jpg", (road * 255).astype(np.uint8), quality=70)
    noisy = read_mask(tmp_path / "noisy.jpg")
    assert (noisy == road).mean() > 0.99
    speckled = np.random.default_rng(0).integers(0, 12, road.shape).astype(np.uint8)
    iio.imwrite(tmp_path / "empty.jpg", speckled, quality=70)
    assert not read_mask(tmp_path / "empty.jpg").any()
    iio.imwrite(tmp_path / "zero.png", np.zeros(road.shape, np.uint8))
    assert not read_mask(tmp_path / "zero.png").any()


def test_each_image_is_reported_and_one_without_a_case_is_named(script, folder, capsys):
    """A progress line per image on stderr; an image that gives no case is warned of, and where
    none gives one, nothing is written (exit 2)."""
    iio.imwrite(folder / "blank_mask.png", np.zeros((320, 320), np.uint8))
    (folder / "sources.json").write_text(json.dumps(
        [{"id": "tile", "image": "tile.png", "gt": "tile_mask.png"},
         {"id": "blank", "image": "tile.png", "gt": "blank_mask.png"}]))
    out = folder / "cases.json"
    assert script.main([str(folder), "--out", str(out), "--per-image", "3"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["image 1/2 tile: 3 cases (3 so far)", "image 2/2 blank: 0 cases (3 so far)",
                   "warning: blank gives no case: its mask marks no road (blank_mask.png)"]
    assert {case["meta"]["source"] for case in json.loads(out.read_text())} == {"tile"}
    out.unlink()
    (folder / "sources.json").write_text(json.dumps(
        [{"id": "blank", "image": "tile.png", "gt": "blank_mask.png"}]))
    assert script.main([str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: no image gives a case (blank): their masks mark no road")
    assert not out.exists()


def test_the_search_in_a_window_finds_the_cases_of_the_whole_image_search(script, monkeypatch):
    """Each case's shortest-way search runs in the window it can reach (max-length px around
    its start, not the whole image: minutes less on large masks): the cases are those that the
    search over the whole image found (recorded with it, same seed)."""
    import skimage.graph

    searched = []

    class Spy(skimage.graph.MCP_Geometric):
        def __init__(self, costs, **options):
            searched.append(costs.shape)
            super().__init__(costs, **options)

    monkeypatch.setattr(skimage.graph, "MCP_Geometric", Spy)
    skeleton = script.centrelines(np.tile(road_mask(), (3, 3)) > 0)  # 960 × 960 px
    found = script.image_cases(skeleton, 8, 4, (60.0, 200.0), np.random.default_rng(5))
    assert searched
    assert max(max(shape) for shape in searched) <= 2 * 201 + 1
    found = script.image_cases(skeleton, 8, 4, (60.0, 400.0), np.random.default_rng(5))
    assert [[*a.astype(int).tolist(), *b.astype(int).tolist()] for a, b, _, _ in found] == [
        [596, 380, 462, 380], [804, 567, 684, 465], [174, 917, 11, 783], [784, 212, 701, 150],
        [393, 475, 476, 550], [669, 60, 953, 60], [905, 60, 706, 60], [306, 700, 60, 700]]
    assert [hard for _, _, _, hard in found] == [False, True, True, True, True, False, False,
                                                 False]


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
     "sources.json names the image id 'tile' twice; ids must be unique"),
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
