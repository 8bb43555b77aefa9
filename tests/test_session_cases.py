"""scripts/session_cases.py: click cases from the road lines of the app's sessions, on image
parts without masks, ready for ``eval`` and for the trainer's path output."""

from __future__ import annotations

import json

import imageio.v3 as iio
import numpy as np
import pytest

from app.model import Line, Segment
from app.session import write_session
from core.raster import load_image
from core.teaching import road_pieces
from core.teaching import training_set as core_training_set
from core.tracer import TraceParams
from tests.conftest import SAMPLE_IMAGE, load_script


@pytest.fixture(scope="module")
def script():
    return load_script("session_cases")


def line(line_id: int, kind: str, anchors: list) -> Line:
    points = [tuple(map(float, point)) for point in anchors]
    return Line(line_id, f"line {line_id}", kind, tuple(points),
                tuple(Segment.straight(a, b) for a, b in zip(points[:-1], points[1:], strict=True)))


@pytest.fixture
def session(tmp_path):
    """A session of the sample image: a bent road of about 560 px, a road too short for a
    case, and a river line."""
    lines = (line(1, "road", [(100, 400), (300, 300), (420, 80)]),
             line(2, "road", [(50, 50), (80, 60)]),
             line(3, "river", [(500, 400), (700, 420)]))
    path = tmp_path / "one.session.json"
    write_session(path, str(SAMPLE_IMAGE), lines, TraceParams(), "cpu")
    return path


def test_pieces_are_consecutive_and_within_the_lengths():
    rng = np.random.default_rng(0)
    polyline = np.array([[0.0, 0.0], [500.0, 0.0], [500.0, 700.0]])
    found = road_pieces(polyline, (60.0, 200.0), rng)
    lengths = [np.hypot(*np.diff(piece, axis=0).T).sum() for piece in found]
    assert all(60.0 - 1e-9 <= length <= 200.0 + 1e-9 for length in lengths)
    for first, second in zip(found[:-1], found[1:], strict=True):
        np.testing.assert_allclose(first[-1], second[0])
    np.testing.assert_allclose(found[0][0], polyline[0])
    assert sum(lengths) > 1200 - 60  # at most a rest shorter than a piece is left over
    assert road_pieces(polyline[:2] * 0.1, (60.0, 200.0), rng) == []  # 50 px: none


def test_road_lines_become_cases_on_image_parts_without_masks(script, session, tmp_path):
    out = tmp_path / "lines"
    assert script.main([str(session), "--out", str(out)]) == 0
    sources = json.loads((out / "sources.json").read_text())
    cases = json.loads((out / "cases.json").read_text())
    assert [source["id"] for source in sources] == ["gsi_108"]
    assert "gt" not in sources[0]  # no mask: the trainer learns the path alone
    assert len(cases) >= 2  # ~560 px of road in pieces of at most 400 px; no river, no stub
    part = iio.imread(out / sources[0]["image"])
    assert part.dtype == np.uint8
    assert part.shape[2] == 3
    corner = np.array(sources[0]["offset_xy"])
    original = load_image(SAMPLE_IMAGE)
    for case in cases:
        assert case["meta"]["source"] == "gsi_108"
        assert case["image"] == sources[0]["image"]
        gt = np.array(case["gt"])
        np.testing.assert_allclose(gt[0], case["a"], atol=0.01)
        np.testing.assert_allclose(gt[-1], case["b"], atol=0.01)
        # On the part, where the road lies on the image: along the first road line.
        whole = gt + corner
        assert np.all(whole >= (100 - 1e-6, 80 - 1e-6))
        assert np.all(whole <= (420 + 1e-6, 400 + 1e-6))
        assert np.all(gt >= 0)
        assert np.all(gt < part.shape[1::-1])
    # The part is the image's own pixels, linearly stretched: same ordering of brightness.
    x, y = (int(value) for value in corner)
    rows, cols = part.shape[:2]
    grey = part.astype(float).mean(axis=2)
    source = original.read_window(y, y + rows, x, x + cols)[:, :, :3].mean(axis=2)
    assert np.corrcoef(grey.ravel(), source.ravel())[0, 1] > 0.99


def test_the_cases_trace_with_eval(script, session, tmp_path):
    from cli import main as cli_main

    out = tmp_path / "lines"
    assert script.main([str(session), "--out", str(out)]) == 0
    report = tmp_path / "report.json"
    assert cli_main(["eval", str(out / "cases.json"), "--json", str(report)]) == 0
    results = json.loads(report.read_text())["methods"]["ours"]["cases"]
    assert len(results) == len(json.loads((out / "cases.json").read_text()))
    assert all(result["error"] is None for result in results)


def test_bad_input_is_one_error_and_writes_nothing(script, session, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert script.main([str(session), "--out", str(taken)]) == 2
    assert "must be a new or empty folder" in capsys.readouterr().err
    assert sorted(path.name for path in taken.iterdir()) == ["keep.txt"]

    not_session = tmp_path / "not.json"
    not_session.write_text(json.dumps({"lines": []}))
    assert script.main([str(not_session), "--out", str(tmp_path / "a")]) == 2
    assert "not a roadtracer session" in capsys.readouterr().err

    short = tmp_path / "short.session.json"
    write_session(short, str(SAMPLE_IMAGE), (line(1, "road", [(10, 10), (40, 10)]),),
                  TraceParams(), "cpu")
    assert script.main([str(short), "--out", str(tmp_path / "b")]) == 2
    assert "no road line of 60 px or more on its image" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()

    assert script.main([str(session), "--out", str(tmp_path / "c"), "--min-length", "300"]) == 2
    assert "--min-length" in capsys.readouterr().err

    outside = tmp_path / "outside.session.json"  # a road drawn beyond the image's edge
    write_session(outside, str(SAMPLE_IMAGE),
                  (line(1, "road", [(5000, 5000), (5400, 5000)]),), TraceParams(), "cpu")
    assert script.main([str(outside), "--out", str(tmp_path / "d")]) == 2
    assert "no road line of 60 px or more on its image" in capsys.readouterr().err


def test_lines_spread_over_a_large_image_get_a_part_each_piece(monkeypatch):
    import core.teaching

    raster = load_image(SAMPLE_IMAGE)
    lines = [np.array([[50.0, 50.0], [150.0, 50.0]]), np.array([[420.0, 500.0], [520.0, 500.0]])]
    whole = core.teaching.training_set({str(SAMPLE_IMAGE): (raster, lines)})
    assert [source["id"] for source in whole[0]] == ["gsi_108"]
    monkeypatch.setattr(core.teaching, "MAX_PART_PIXELS", 300 * 300)
    sources, cases, parts = core.teaching.training_set({str(SAMPLE_IMAGE): (raster, lines)})
    assert [source["id"] for source in sources] == ["gsi_108_p000", "gsi_108_p001"]
    assert all(part.shape[0] * part.shape[1] <= 300 * 300 for part in parts.values())
    for case in cases:  # each case on its own part, where its line lies
        source = next(s for s in sources if s["id"] == case["meta"]["source"])
        whole_line = np.array(case["gt"]) + np.array(source["offset_xy"])
        assert any(np.allclose(whole_line[[0, -1]], line, atol=0.01) for line in lines)


def test_a_failed_write_leaves_the_folder_empty(tmp_path, monkeypatch):
    import core.teaching
    from core.errors import OutputWriteError

    raster = load_image(SAMPLE_IMAGE)
    made = core.teaching.training_set(
        {str(SAMPLE_IMAGE): (raster, [np.array([[50.0, 50.0], [150.0, 50.0]])])})

    def fail(path, text):
        raise OutputWriteError(f"cannot write {path}: disk full")

    monkeypatch.setattr(core.teaching, "write_text_atomic", fail)
    out = tmp_path / "teach"
    with pytest.raises(OutputWriteError, match="disk full"):
        core.teaching.write_training_set(out, *made)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(("options", "message"), [
    (["--out", "lines", "--seed=-1"], "--seed must be 0 or more"),
    (["--out", "lines", "--max-length", "inf"], "--min-length and --max-length must be finite"),
    (["--out", "lines", "--max-length", "nan"], "--min-length and --max-length must be finite"),
    (["--out", ""], "empty output folder path")])
def test_bad_options_are_one_error_and_write_nothing(script, session, tmp_path, monkeypatch,
                                                     capsys, options, message):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # an empty --out would have written here
    assert script.main([str(session), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert message in err
    assert list(work.iterdir()) == []


def test_a_georeferenced_image_gives_its_ground_resolution_to_the_sources_and_cases(script,
                                                                                  tmp_path):
    """A GeoTIFF's metres per pixel go to sources.json (``gsd_m``, as the trainer reads it) and
    to each case (``ground_resolution``, as ``roadtracer eval`` reads it); a PNG says none."""
    from affine import Affine

    from tests.test_georef import sample_pixels, write_geotiff

    image = tmp_path / "fine.tif"
    write_geotiff(image, sample_pixels(), transform=Affine(0.05, 0.0, 500000.0, 0.0, -0.05,
                                                           3900000.0))
    metres = load_image(image).ground_resolution
    assert metres == pytest.approx(0.05, rel=1e-3)
    session = tmp_path / "fine.session.json"
    write_session(session, str(image), (line(1, "road", [(100, 400), (300, 300), (420, 80)]),),
                  TraceParams(), "cpu")
    out = tmp_path / "lines"
    assert script.main([str(session), "--out", str(out)]) == 0
    sources = json.loads((out / "sources.json").read_text())
    cases = json.loads((out / "cases.json").read_text())
    assert [source["gsd_m"] for source in sources] == [metres]
    assert cases
    assert all(case["ground_resolution"] == metres for case in cases)
    raster = load_image(SAMPLE_IMAGE)
    plain = core_training_set({str(SAMPLE_IMAGE): (raster, [np.array([[50.0, 50.0],
                                                                      [150.0, 50.0]])])})
    assert "gsd_m" not in plain[0][0]
    assert all("ground_resolution" not in case for case in plain[1])
