"""scripts/shifted_cases.py: copies of a cases file on resampled, grey or hazed imagery."""

from __future__ import annotations

import json
import os

import imageio.v3 as iio
import numpy as np
import pytest

from core.evaluate import load_cases
from tests.conftest import ROOT, load_script

CASES = ROOT / "tests" / "data" / "dubai_t6_003_cases.json"


@pytest.fixture(scope="module")
def shifter():
    return load_script("shifted_cases")


def test_resampling_moves_clicks_and_lines_with_the_image(shifter, tmp_path):
    pytest.importorskip("skimage")
    out = tmp_path / "half"
    assert shifter.main([str(CASES), str(out), "--scale", "0.5"]) == 0
    before, after = load_cases(CASES), load_cases(out / "cases.json")
    assert [c.id for c in after] == [c.id for c in before]
    assert [c.tags for c in after] == [c.tags for c in before]
    original = iio.imread(before[0].image)
    shifted = iio.imread(after[0].image)
    assert shifted.shape == (round(original.shape[0] / 2), round(original.shape[1] / 2), 3)
    for old, new in zip(before, after, strict=True):
        # Pixel centres: x' = (x + 0.5) · s − 0.5.
        np.testing.assert_allclose(new.a, (old.a + 0.5) / 2 - 0.5, atol=1e-3)
        np.testing.assert_allclose(new.gt, (old.gt + 0.5) / 2 - 0.5, atol=1e-3)
    # The resampled image is the original's content: the same mean brightness, within rounding.
    assert abs(float(shifted.mean()) - float(original.mean())) < 2.0


def test_grey_writes_one_band_and_keeps_the_geometry(shifter, tmp_path):
    out = tmp_path / "grey"
    assert shifter.main([str(CASES), str(out), "--colour", "grey"]) == 0
    case = load_cases(out / "cases.json")[0]
    original = iio.imread(load_cases(CASES)[0].image)
    grey = iio.imread(case.image)
    assert grey.shape == original.shape[:2]
    np.testing.assert_allclose(grey, original[:, :, :3].mean(axis=2), atol=0.51)
    np.testing.assert_allclose(case.a, load_cases(CASES)[0].a)


def test_haze_lowers_contrast(shifter, tmp_path):
    out = tmp_path / "haze"
    assert shifter.main([str(CASES), str(out), "--colour", "haze"]) == 0
    original = iio.imread(load_cases(CASES)[0].image).astype(float)
    hazed = iio.imread(load_cases(out / "cases.json")[0].image).astype(float)
    assert hazed.std() < 0.6 * original[:, :, :3].std()
    assert hazed.min() >= 0.45 * 255 - 1


@pytest.mark.parametrize(("args", "message"), [
    (["--scale", "9"], "--scale must lie in"),
    ([], "nothing to change"),
])
def test_bad_changes_are_one_message(shifter, tmp_path, capsys, args, message):
    assert shifter.main([str(CASES), str(tmp_path / "out"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_folder_with_files_is_not_clobbered(shifter, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert shifter.main([str(CASES), str(out), "--colour", "grey"]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert os.listdir(out) == ["keep.txt"]
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    assert shifter.main([str(CASES), str(a_file), "--colour", "grey"]) == 2
    assert a_file.read_text() == "mine"


@pytest.mark.parametrize(("content", "message"), [
    (b"not a png", "bad.png is not an image this program can read (PNG, JPEG, TIFF/GeoTIFF, "),
    ("truncated", "bad.png is damaged or incomplete: save or download it again ("),
    (np.full((8, 8), 40000, np.uint16), "is not an 8-bit image"),
])
def test_a_bad_image_leaves_nothing_behind(shifter, tmp_path, capsys, content, message):
    image = tmp_path / "bad.png"
    if isinstance(content, bytes):
        image.write_bytes(content)
    elif isinstance(content, str):  # a PNG cut off in its pixel data
        iio.imwrite(image, np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8))
        image.write_bytes(image.read_bytes()[:-200])
    else:
        iio.imwrite(image, content)
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"id": "x", "image": "bad.png", "a": [1, 1], "b": [5, 5],
                                  "gt": [[1, 1], [5, 5]]}]))
    assert shifter.main([str(cases), str(tmp_path / "out"), "--colour", "grey"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ")
    assert message in error
    assert error.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["bad.png", "cases.json"]


def test_an_image_is_read_as_the_tracer_reads_it(shifter, tmp_path):
    """Alpha is dropped and 16-bit values that are 8-bit ones (multiples of 257) are kept."""
    rgba = np.random.default_rng(0).integers(0, 256, (6, 7, 4), dtype=np.uint8)
    iio.imwrite(tmp_path / "rgba.png", rgba)
    np.testing.assert_array_equal(shifter._read_8bit(str(tmp_path / "rgba.png")), rgba[:, :, :3])
    grey = rgba[:, :, 0].astype(np.uint16) * 257
    iio.imwrite(tmp_path / "grey16.png", grey)
    np.testing.assert_array_equal(shifter._read_8bit(str(tmp_path / "grey16.png")),
                                  rgba[:, :, :1])


def test_a_stated_ground_resolution_follows_the_scale(shifter, tmp_path):
    pytest.importorskip("skimage")
    records = json.loads(CASES.read_text())
    records[0]["ground_resolution"] = 0.3
    stated = tmp_path / "dubai_t6_003_cases.json"
    stated.write_text(json.dumps(records))
    for image in {record["image"] for record in records}:
        os.makedirs(tmp_path / os.path.dirname(image), exist_ok=True)
        os.symlink(CASES.parent / image, tmp_path / image)
    out = tmp_path / "half"
    assert shifter.main([str(stated), str(out), "--scale", "0.5"]) == 0
    after = load_cases(out / "cases.json")
    # Half as many pixels over the same ground: each is twice as large.
    assert after[0].ground_resolution == pytest.approx(0.6)
    assert all(case.ground_resolution is None for case in after[1:])
