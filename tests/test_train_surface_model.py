"""The surface model's trainer (scripts/train_surface_model.py): its torch re-implementations of
the inference inputs, the click-case crops and a short training run. Needs PyTorch (and
scikit-image for the centreline target); skipped where they are not installed."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("skimage")

from core.scores import endpoint_similarity  # noqa: E402
from core.surface import endpoint_plane  # noqa: E402
from tests.conftest import load_script  # noqa: E402


@pytest.fixture(scope="module")
def trainer():
    return load_script("train_surface_model")


@pytest.fixture(scope="module")
def road_set(tmp_path_factory, trainer):
    """Two 96 × 96 road images (a grey diagonal road, 7 px wide, on green) with their masks,
    and click cases along the road (one tagged nontrivial)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("roads")
    rows, cols = np.mgrid[:96, :96]
    mask = np.abs(rows - (0.5 * cols + 20)) < 3.5
    sources, cases = [], []
    for i in range(2):
        image = np.zeros((96, 96, 3), dtype=np.uint8)
        image[...] = (60, 120 + 10 * i, 50)
        image[mask] = (140, 140, 140)
        Image.fromarray(image).save(folder / f"road{i}.png")
        Image.fromarray((mask * 255).astype(np.uint8)).save(folder / f"road{i}_gt.png")
        sources.append({"id": f"road{i}", "image": f"road{i}.png", "gt": f"road{i}_gt.png",
                        "dataset": "synthetic"})
        line = [[10.0, 25.0], [50.0, 45.0], [85.0, 62.5]]
        cases.append({"id": f"road{i}_00", "a": line[0], "b": line[-1], "gt": line,
                      "tags": ["nontrivial"] if i else [], "meta": {"source": f"road{i}"}})
    (folder / "sources.json").write_text(json.dumps(sources))
    (folder / "cases.json").write_text(json.dumps(cases))
    return folder


def test_endpoint_plane_matches_the_inference_plane(trainer):
    a = torch.tensor([[10.0, 20.0], [3.5, 40.25]])
    b = torch.tensor([[50.0, 30.0], [60.0, 2.0]])
    planes = trainer.endpoint_plane(a, b, 48, 64)
    assert planes.shape == (2, 1, 48, 64)
    for k in range(2):
        np.testing.assert_allclose(planes[k, 0].numpy(),
                                   endpoint_plane(a[k].numpy(), b[k].numpy(), 48, 64), atol=1e-5)


def test_similarity_matches_the_inference_similarity(trainer):
    rng = np.random.default_rng(3)
    pixels = rng.uniform(0, 1, size=(40, 50, 3)).astype(np.float32)
    clicks = np.array([[7, 9], [41, 30]])
    got = trainer.similarity(torch.from_numpy(pixels.transpose(2, 0, 1))[None],
                             torch.from_numpy(clicks)[None])
    np.testing.assert_allclose(got[0, 0].numpy(),
                               endpoint_similarity(pixels, clicks[0], clicks[1]), atol=1e-5)


def test_cases_load_with_their_weights_and_skip_other_images(trainer, road_set):
    items = trainer.load_sets([(str(road_set), 0)], exclude=("road1",))
    images, clicks, lines, weights = trainer.load_cases([str(road_set / "cases.json")], items, 3.0)
    assert images.tolist() == [0]  # road1's case is skipped with its image
    assert clicks.shape == (1, 2, 2)
    assert lines.shape == (1, trainer.PATH_POINTS, 2)
    assert weights.tolist() == [1.0]
    items = trainer.load_sets([(str(road_set), 0)])
    weights = trainer.load_cases([str(road_set / "cases.json")], items, 3.0)[3]
    assert weights.tolist() == [1.0, 3.0]  # road1's case is tagged nontrivial


def test_path_crops_mark_the_case_line_and_show_the_clicks(trainer, road_set):
    items = trainer.load_sets([(str(road_set), 0)])
    data = trainer.stack(items, "cpu")
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    draws = trainer.generators(0, "cpu")
    inputs, targets, weights = trainer.path_batch(data, cases, 4, *draws)
    crop = trainer.CROP
    assert inputs.shape == (4, trainer.INPUTS, crop, crop)
    assert targets.shape == weights.shape == (4, trainer.OUTPUTS, crop, crop)
    path, surface = targets[:, 2], targets[:, 0]
    # The path target peaks on the road (the case's line runs down its middle) and the
    # endpoint plane is 1 at two places only: the clicks.
    assert float(path.amax()) > 0.99
    on_line = path > 0.9
    assert float(surface[on_line].mean()) > 0.95
    for k in range(4):
        assert int((inputs[k, 4] > 0.999).sum()) <= 2 * 9
        assert float(inputs[k, 4].amax()) > 0.9
    # Surface crops carry no path target.
    _, targets, weights = trainer.batch(data, 4, *draws)
    assert float(weights[:, 2].abs().sum()) == 0.0
    assert float(weights[:, 0].sum()) > 0


def test_a_short_run_trains_and_exports_surface_and_path(trainer, road_set, tmp_path):
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    items = trainer.load_sets([(str(road_set), 0)])
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    model = trainer.train(items, cases, 2, "cpu", 0, lambda line: None, (4, 8, 16, 32), 0.0,
                          batch_size=4)
    path = tmp_path / "surface.onnx"
    trainer.export(model, path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = session.run(None, {"image": np.zeros((1, trainer.INPUTS, 32, 40), np.float32)})[0]
    assert out.shape == (1, len(trainer.EXPORTED), 32, 40)
