"""The surface model's trainer (scripts/train_surface_model.py): its torch re-implementations of
the inference inputs, the click-case crops and a short training run. Needs PyTorch (and
scikit-image for the centreline target); skipped where they are not installed."""

from __future__ import annotations

import json
import math

import imageio.v3 as iio
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("skimage")

from core.errors import BadParameter, ImageReadError  # noqa: E402
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



def test_cases_on_water_images_make_up_their_share_of_the_draws(trainer, road_set, tmp_path):
    # The road set again as water images (ids water0, water1): cases on them are drawn only
    # with a water share, and then make up that share of the draws.
    import shutil

    shutil.copytree(road_set, tmp_path / "water")
    for name in ("sources.json", "cases.json"):
        path = tmp_path / "water" / name
        text = path.read_text().replace('"id": "road', '"id": "water')
        path.write_text(text.replace('"source": "road', '"source": "water'))
    items = trainer.load_sets([(str(road_set), 0), (str(tmp_path / "water"), 1)])
    files = [str(road_set / "cases.json"), str(tmp_path / "water" / "cases.json")]
    images, _, _, weights = trainer.load_cases(files, items, 3.0)
    assert [items[i]["label"] for i in images.tolist()] == [0, 0]
    assert weights.tolist() == [1.0, 3.0]
    images, _, _, weights = trainer.load_cases(files, items, 3.0, water_share=0.25)
    water = torch.tensor([items[i]["label"] == 1 for i in images.tolist()])
    assert water.tolist() == [False, False, True, True]
    assert weights[:2].tolist() == [1.0, 3.0]
    assert float(weights[water].sum() / weights.sum()) == pytest.approx(0.25)
    assert float(weights[3] / weights[2]) == pytest.approx(3.0)  # nontrivial


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
    model = trainer.train(items, cases, 2, "cpu", 0, lambda line: None,
                          lambda: trainer.SurfaceNet((4, 8, 16, 32)), trainer.Looks(grey=0.0),
                          batch_size=4)
    path = tmp_path / "surface.onnx"
    trainer.export(model, path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = session.run(None, {"image": np.zeros((1, trainer.INPUTS, 32, 40), np.float32)})[0]
    assert out.shape == (1, len(trainer.EXPORTED), 32, 40)


def test_init_seed_fixes_the_initial_weights_and_seed_the_crops(trainer, road_set):
    """Models of one ``init_seed`` start from the same weights whatever their ``seed``; without
    it the seed sets both, so different seeds start apart."""
    items = trainer.load_sets([(str(road_set), 0)])
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    starts = []

    def network():
        model = trainer.SurfaceNet((4, 8, 16, 32))
        starts.append({name: value.clone() for name, value in model.state_dict().items()})
        return model

    for seed, init_seed in ((0, 5), (1, 5), (0, None), (1, None)):
        trainer.train(items, cases, 1, "cpu", seed, lambda line: None, network,
                      trainer.Looks(grey=0.0), batch_size=4, init_seed=init_seed)
    same = [all(torch.equal(first[name], second[name]) for name in first)
            for first, second in ((starts[0], starts[1]), (starts[2], starts[3]),
                                  (starts[0], starts[2]))]
    assert same == [True, False, False]


@pytest.fixture(scope="module")
def imagenet_weights(tmp_path_factory, trainer):
    """A made-up state dict file laid out as torchvision's ImageNet ``mobilenet_v2`` (its
    ``features.*`` tensors, three-band first convolution, a classifier) with random values."""
    torch.manual_seed(0)
    encoder = trainer.MobileNetUNet().encoder
    state = {f"features.{name}": torch.randn_like(value.float()) if value.is_floating_point()
             else value for name, value in encoder.state_dict().items()}
    state["features.0.0.weight"] = torch.randn(32, 3, 3, 3)
    state = {name: value.abs() + 0.5 if name.endswith("running_var") else value
             for name, value in state.items()}
    state["features.14.conv.0.0.weight"] = torch.randn(576, 96, 1, 1)  # past stride 16
    state["classifier.1.weight"] = torch.randn(1000, 1280)
    path = tmp_path_factory.mktemp("weights") / "mobilenet_v2.pth"
    torch.save(state, path)
    return path, state


def test_pretrained_encoder_reads_the_stretched_bands_as_imagenet_s_standardised_ones(
        trainer, imagenet_weights):
    """The first layer on stretched bands and zero click planes gives what torchvision's first
    layer gives on the same bands standardised with ImageNet's mean and spread (away from the
    zero-padded border); the other layers are the file's."""
    path, state = imagenet_weights
    model = trainer.MobileNetUNet(str(path)).eval()
    first = model.encoder[0]
    np.testing.assert_array_equal(first[0].weight[:, 3:].detach().numpy(), 0.0)
    torch.testing.assert_close(model.encoder[5].conv[1][0].weight,
                               state["features.5.conv.1.0.weight"])
    x = torch.rand(2, trainer.INPUTS, 24, 32)
    x[:, 3:] = 0
    mean = torch.tensor(trainer.IMAGENET_MEAN).view(1, 3, 1, 1)
    spread = torch.tensor(trainer.IMAGENET_STD).view(1, 3, 1, 1)
    reference = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, 2, 1, bias=False),
                                    torch.nn.BatchNorm2d(32), torch.nn.ReLU6()).eval()
    reference.load_state_dict({name[len("features.0."):]: value for name, value in state.items()
                               if name.startswith("features.0.")})
    with torch.no_grad():
        got, expected = first(x), reference((x[:, :3] - mean) / spread)
    torch.testing.assert_close(got[:, :, 1:, 1:], expected[:, :, 1:, 1:], rtol=1e-4, atol=1e-4)
    assert float((got - expected)[:, :, 0].abs().max()) > 1e-3  # the border differs


def test_pretrained_encoder_learns_slower_and_exports_with_inputs_of_multiples_of_16(
        trainer, road_set, imagenet_weights, tmp_path):
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    items = trainer.load_sets([(str(road_set), 0)])
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    path, _ = imagenet_weights
    started = trainer.MobileNetUNet(str(path))
    model = trainer.train(items, cases, 3, "cpu", 0, lambda line: None,
                          lambda: trainer.MobileNetUNet(str(path)), trainer.Looks(grey=0.0),
                          batch_size=4, encoder_lr=0.0)
    # A zero learning rate leaves the encoder's weights as they were (its batch norms'
    # statistics still follow the crops); the decoder moves.
    torch.testing.assert_close(model.encoder[5].conv[1][0].weight.float(),
                               started.encoder[5].conv[1][0].weight)
    assert not torch.allclose(model.head.weight.float(), started.head.weight)
    onnx_path = tmp_path / "surface.onnx"
    trainer.export(model, onnx_path)
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out = session.run(None, {"image": np.zeros((1, trainer.INPUTS, 48, 64), np.float32)})[0]
    assert out.shape == (1, len(trainer.EXPORTED), 48, 64)


def test_matched_histograms_keep_each_crop_s_shapes_with_the_reference_s_values(trainer):
    generator = torch.Generator().manual_seed(0)
    crops = torch.rand((3, 3, 16, 16), generator=generator)
    reference = torch.rand((3, 3, 16, 16), generator=generator) ** 3
    matched = trainer.match_histograms(crops, reference)
    flat, matched_flat = crops.flatten(2), matched.flatten(2)
    # Each band holds exactly the reference band's values ...
    assert torch.equal(matched_flat.sort(dim=2).values, reference.flatten(2).sort(dim=2).values)
    # ... in the crop's own order: brighter stays brighter.
    assert torch.equal(matched_flat.argsort(dim=2), flat.argsort(dim=2))


def test_recolour_with_matching_gives_a_flat_crop_another_crop_s_spread(trainer):
    crops = torch.stack([torch.full((3, 8, 8), 0.2), torch.linspace(0, 1, 192).view(3, 8, 8)])

    def recoloured(match):
        generator = torch.Generator().manual_seed(3)
        uniform = trainer._uniform(2, generator, "cpu")
        return trainer.recolour(crops, uniform, generator, torch.Generator().manual_seed(3),
                                trainer.Looks(grey=0.0, match=match))

    # Without matching the flat crop stays flat but for the noise (σ 0.02); with it, it takes
    # the ramp's spread of values (σ ≈ 0.3).
    plain, matched = recoloured(0.0), recoloured(1.0)
    assert plain[0].std() < 0.05
    assert matched[0].std() > 0.2
    # Each crop its own reference: the flat crop stays flat.
    generator = torch.Generator().manual_seed(3)
    itself = trainer.recolour(crops, trainer._uniform(2, generator, "cpu"), generator,
                              torch.Generator().manual_seed(3),
                              trainer.Looks(grey=0.0, match=1.0), torch.tensor([0, 1]))
    assert itself[0].std() < 0.05


def test_previous_of_kind_finds_the_nearest_earlier_crop_of_the_same_kind(trainer):
    kinds = torch.tensor([0, 0, 0, 1, 0, 0, 0, 1, 2])
    assert trainer.previous_of_kind(kinds).tolist() == [6, 0, 1, 7, 2, 4, 5, 3, 8]
    # One kind only: every crop's reference is the one before it, as without kinds.
    assert trainer.previous_of_kind(torch.zeros(4)).tolist() == [3, 0, 1, 2]


def test_mixed_amplitudes_keep_the_crop_s_phases_and_move_toward_the_reference_s(trainer):
    generator = torch.Generator().manual_seed(1)
    crops = torch.rand((2, 3, 16, 16), generator=generator) * 0.5 + 0.25
    reference = torch.rand((2, 3, 16, 16), generator=generator) * 0.5 + 0.25
    # Weight 0: the crop itself; weight 1 with the crop as its own reference: unchanged.
    assert torch.allclose(trainer.mix_amplitudes(crops, reference, torch.zeros(2)), crops,
                          atol=1e-5)
    assert torch.allclose(trainer.mix_amplitudes(crops, crops, torch.ones(2)), crops, atol=1e-5)
    # Halfway: the amplitude spectrum is the mean of the two, the phases the crop's.
    half = trainer.mix_amplitudes(crops, reference, torch.full((2,), 0.5))
    spectrum, mixed = torch.fft.rfft2(crops), torch.fft.rfft2(half)
    expected = 0.5 * (spectrum.abs() + torch.fft.rfft2(reference).abs())
    assert torch.allclose(mixed.abs(), expected, atol=1e-3)
    strong = spectrum.abs() > 0.5
    assert torch.allclose(mixed.angle()[strong], spectrum.angle()[strong], atol=1e-3)


def test_an_encoder_to_stride_32_has_mobilenet_s_deep_stages_and_keeps_the_input_size(trainer):
    """``--encoder-stride 32``: MobileNetV2's layers 14–17 (to 320 channels at stride 32, as
    torchvision's, whose weights then load), the decoder reading stride 16 too; the logits
    keep the input's size (a multiple of 32)."""
    model = trainer.MobileNetUNet(stride=32).eval()
    assert len(model.encoder) == 18 == len(trainer.MobileNetUNet().encoder) + 4
    assert model.encoder[-1].conv[-1].num_features == 320
    with torch.no_grad():
        x = torch.rand(1, trainer.INPUTS, 64, 96)
        logits = model(x)
        assert logits.shape == (1, trainer.OUTPUTS, 64, 96)
        # The deepest stage's output reaches the logits.
        model.encoder[-1].register_forward_hook(lambda module, inputs, output: output + 1.0)
        assert not torch.equal(model(x), logits)


def test_crop_scales_follow_each_image_s_ground_resolution_within_the_range(trainer):
    """``--ground-range 0.2,0.8``: a crop pixel of an image of known ground resolution covers
    0.2..0.8 m; images of unknown resolution keep the --scales range."""
    generator = torch.Generator().manual_seed(0)
    uniform = trainer._uniform(4000, generator, "cpu")
    grounds = torch.tensor([0.2, 0.76, math.nan, 0.38]).repeat(1000)
    scale = trainer.crop_scales(uniform, (0.6, 1.6), (0.2, 0.8), grounds)
    metres = grounds / scale
    known = ~torch.isnan(grounds)
    assert float(metres[known].min()) >= 0.2 - 1e-6
    assert float(metres[known].max()) <= 0.8 + 1e-6
    assert float(metres[known].min()) < 0.22
    assert float(metres[known].max()) > 0.75
    assert float(scale[~known].min()) >= 0.6 - 1e-6
    assert float(scale[~known].max()) <= 1.6 + 1e-6
    # Without a range every crop draws from --scales, as before.
    plain = trainer.crop_scales(trainer._uniform(4000, torch.Generator().manual_seed(0), "cpu"),
                                (0.6, 1.6), None, grounds)
    assert float(plain.min()) >= 0.6 - 1e-6
    assert float(plain.max()) <= 1.6 + 1e-6


def test_a_ground_share_scales_that_share_of_the_known_crops_by_the_range(trainer):
    generator = torch.Generator().manual_seed(1)
    grounds = torch.full((4000,), 0.1)
    scale = trainer.crop_scales(trainer._uniform(4000, generator, "cpu"), (0.6, 1.6),
                                (0.2, 0.8), grounds, ground_share=0.5)
    by_range = scale < 0.5 + 1e-6  # 0.1 m / 0.2..0.8 m: 0.125..0.5; --scales: 0.6..1.6
    assert 0.45 < float(by_range.float().mean()) < 0.55


def test_occluders_cover_the_surface_away_from_the_clicks_with_another_crop_s_pixels(trainer):
    """``--occlusion``: discs of the previous crop's pixels on the surface, never within
    OCCLUDER_CLEARANCE px of a click nor from outside the previous crop's image or its surface;
    crops without surface, and share 0, stay as they were."""
    size, side = 64, 48
    x = torch.arange(size, dtype=torch.float32).view(size, 1, 1, 1).expand(size, 3, side,
                                                                         side).clone()
    target = torch.zeros(size, 1, side, side)
    target[:, :, 20:28, :] = 1.0  # a horizontal road
    target[-1] = 0.0  # one crop without surface
    clicks = torch.tensor([[4.0, 24.0], [43.0, 24.0]]).expand(size, 2, 2)
    inside = torch.ones(size, 1, side, side)
    inside[:, :, :, 30:] = 0.0  # the right part of every crop lies outside its image
    inside[0] = 0.0  # the first crop shows no image: the second takes nothing from it
    generator = torch.Generator().manual_seed(0)
    out = trainer.occlude(x, target, inside, clicks, 1.0,
                          trainer._uniform(size, generator, "cpu"),
                          torch.Generator().manual_seed(0))
    changed = (out != x).any(dim=1)  # (N, C, C)
    previous = x.roll(1, dims=0)
    assert torch.equal(out[changed[:, None].expand_as(out)],
                       previous[changed[:, None].expand_as(out)])
    # Nearly every crop with a road takes some (the covers here can take only the previous
    # crop's rows beside its road), but not the second; the previous crop's road is never taken.
    assert int(changed[:-1].flatten(1).any(1).sum()) >= 0.8 * size
    assert not changed[1].any()
    assert not changed[-1].any()
    assert not changed[:, :, 30:].any()
    assert not changed[1:, 20:28].any()  # the first takes from the last, which has no road
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    near = ((torch.hypot(xs - 4.0, ys - 24.0) < trainer.OCCLUDER_CLEARANCE)
            | (torch.hypot(xs - 43.0, ys - 24.0) < trainer.OCCLUDER_CLEARANCE))
    assert not changed[:, near].any()
    # Covers reach at most the largest radius beyond the road.
    rows = torch.nonzero(changed.any(dim=(0, 2))).flatten()
    assert int(rows.min()) > 20 - trainer.OCCLUDER_RADIUS[1] - 1
    assert int(rows.max()) < 28 + trainer.OCCLUDER_RADIUS[1] + 1
    none = trainer.occlude(x, target, inside, clicks, 0.0,
                           trainer._uniform(size, generator, "cpu"),
                           torch.Generator().manual_seed(0))
    assert torch.equal(none, x)


def test_random_convolution_keeps_each_band_s_level_and_changes_its_texture(trainer):
    generator = torch.Generator().manual_seed(2)
    crops = torch.rand((4, 3, 32, 32), generator=generator) * 0.6 + 0.2
    uniform = trainer._uniform(4, generator, "cpu")
    out = trainer.random_convolution(crops, uniform, torch.Generator().manual_seed(2))
    assert out.shape == crops.shape
    assert float(out.min()) >= 0.0
    assert float(out.max()) <= 1.0
    # Each output band is brought to the crop band's mean (clamping aside) ...
    assert torch.allclose(out.mean((2, 3)), crops.mean((2, 3)), atol=0.03)
    # ... but its pixels are not the crop's.
    assert float((out - crops).abs().mean()) > 0.02


def test_soft_skeleton_marks_the_middle_of_a_bar(trainer):
    bar = torch.zeros((1, 1, 32, 48))
    bar[..., 12:21, 4:44] = 1.0
    skeleton = trainer.soft_skeleton(bar)
    rows = skeleton[0, 0, :, 10:38].sum(1)
    assert int(rows.argmax()) == 16
    assert float(rows[16]) > 0.8 * 28
    assert float(rows.sum() - rows[16]) < 0.2 * 28


def test_skeleton_loss_grows_where_the_predicted_surface_breaks(trainer):
    target = torch.zeros((1, 1, 32, 48))
    target[..., 12:21, 4:44] = 1.0
    weight = torch.ones_like(target)

    def loss(prediction):
        return float(trainer.skeleton_loss((prediction * 2 - 1) * 20, target, weight))

    wider = torch.zeros_like(target)
    wider[..., 10:23, 4:44] = 1.0  # more area off the label, unbroken
    broken = target.clone()
    broken[..., 20:28] = 0.0  # 8 px gap across the road
    assert loss(target) < 0.01
    assert loss(broken) > loss(wider) + 0.05


def with_own_norms(model):
    """``model`` with batch norms of statistics and scales of their own (a trained model's, so
    that folding them into the convolutions matters and no two convolutions export alike)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    return model


@pytest.mark.parametrize("separable_levels", [0, 2])
def test_an_exported_model_loads_back_and_fine_tunes(trainer, road_set, tmp_path,
                                                     separable_levels):
    """``load_exported`` gives a network the weights of an exported file (batch norms folded
    into the convolutions), with dense or depthwise-separable decoder blocks: it computes the
    file's logits; fine-tuning from the file keeps its folded batch norms and changes the
    weights."""
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    torch.manual_seed(1)

    def network():
        return trainer.MobileNetUNet(separable_levels=separable_levels)

    original = with_own_norms(network())
    path = tmp_path / "surface.onnx"
    trainer.export(original.eval(), path)
    loaded = network()
    trainer.load_exported(loaded, str(path))
    x = np.random.default_rng(0).random((1, trainer.INPUTS, 48, 64), dtype=np.float32)
    expected = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"image": x})[0]
    with torch.no_grad():
        got = loaded.eval()(torch.from_numpy(x))[:, trainer.EXPORTED].numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)

    items = trainer.load_sets([(str(road_set), 0)])
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    tuned = trainer.train(items, cases, 2, "cpu", 0, lambda line: None, network,
                          trainer.Looks(grey=0.0), batch_size=4, init_from=str(path),
                          learning_rate=1e-3)
    norms = [module for module in tuned.modules() if isinstance(module, torch.nn.BatchNorm2d)]
    folded = [module for module in loaded.modules() if isinstance(module, torch.nn.BatchNorm2d)]
    for norm, start in zip(norms, folded, strict=True):  # statistics frozen
        assert torch.equal(norm.running_mean.cpu(), start.running_mean)
        assert torch.equal(norm.running_var.cpu(), start.running_var)
    assert not torch.equal(tuned.head.weight.cpu(), loaded.head.weight)


def test_separable_levels_count_from_full_resolution(trainer):
    """``separable_levels`` K: the full-resolution block and the decoder's K finest levels are
    depthwise-separable (a 3 × 3 convolution per channel), the coarser ones dense."""
    block_levels = (1, 1, 2, 3, 4)  # of model.full, up[3], up[2], up[1], up[0]
    for levels in range(len(block_levels)):
        model = trainer.MobileNetUNet(separable_levels=levels)
        finest_first = [model.full, *reversed(model.up)]
        assert [isinstance(block, trainer.SeparableBlock) for block in finest_first] == [
            level <= levels for level in block_levels]
        depthwise = [module for module in model.full.modules()
                     if isinstance(module, torch.nn.Conv2d) and module.groups > 1]
        assert bool(depthwise) == bool(levels)


def test_the_decoder_of_an_exported_file_is_read_from_it(trainer, tmp_path):
    """``exported_separable_levels`` finds the ``separable_levels`` a file was exported with;
    a file of another architecture matches none."""
    pytest.importorskip("onnx")
    torch.manual_seed(2)
    for levels in (0, 2, 4):
        path = tmp_path / f"levels{levels}.onnx"
        trainer.export(with_own_norms(trainer.MobileNetUNet(separable_levels=levels)).eval(), path)
        assert trainer.exported_separable_levels(str(path)) == levels
    path = tmp_path / "unet.onnx"
    trainer.export(trainer.SurfaceNet((4, 8, 16, 32)).eval(), path)
    with pytest.raises(BadParameter, match="convolutions.*nor with any --separable-levels"):
        trainer.exported_separable_levels(str(path))


def test_fine_tuning_takes_the_decoder_of_the_model_it_starts_from(trainer, road_set, tmp_path,
                                                                   monkeypatch):
    """``--init-from`` a model with depthwise-separable levels, no ``--separable-levels``
    given: it fine-tunes (the same architecture) and writes a model of that architecture."""
    pytest.importorskip("onnx")
    torch.manual_seed(3)
    start = tmp_path / "start.onnx"
    trainer.export(with_own_norms(trainer.MobileNetUNet(separable_levels=2)).eval(), start)
    out = tmp_path / "tuned"
    assert run_trainer(trainer, monkeypatch, "--roads", road_set, "--cases",
                       road_set / "cases.json", "--init-from", start, "--encoder-lr", "0",
                       "--steps", "1", "--batch", "2", "--out", out) == 0
    assert trainer.exported_separable_levels(str(out / "surface.onnx")) == 2


def test_a_file_of_another_architecture_is_refused(trainer, tmp_path):
    pytest.importorskip("onnx")
    path = tmp_path / "unet.onnx"
    trainer.export(trainer.SurfaceNet((4, 8, 16, 32)).eval(), path)
    with pytest.raises(BadParameter, match="convolutions"):
        trainer.load_exported(trainer.MobileNetUNet(), str(path))
    text = tmp_path / "notes.onnx"
    text.write_text("not a model")
    with pytest.raises(BadParameter, match="not an ONNX model"):
        trainer.load_exported(trainer.MobileNetUNet(), str(text))


def test_a_zero_encoder_rate_keeps_the_encoder_as_it_started(trainer, road_set):
    items = trainer.load_sets([(str(road_set), 0)])
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    torch.manual_seed(3)
    start = trainer.MobileNetUNet()
    weights = {name: value.clone() for name, value in start.state_dict().items()}
    tuned = trainer.train(items, cases, 2, "cpu", 0, lambda line: None, lambda: start,
                          trainer.Looks(grey=0.0), batch_size=4, encoder_lr=0.0)
    state = tuned.state_dict()
    encoder = [name for name in state if name.startswith("encoder.") and "running" not in name
               and "num_batches" not in name]
    assert encoder
    assert all(torch.equal(state[name].cpu(), weights[name]) for name in encoder)
    assert not torch.equal(state["head.weight"].cpu(), weights["head.weight"])


def test_images_without_masks_teach_the_path_alone(trainer, road_set, tmp_path):
    """Sources without ``gt`` (scripts/session_cases.py's): no surface crops are drawn from them
    and their path crops carry loss on the path plane alone."""
    sources = json.loads((road_set / "sources.json").read_text())
    for source in sources:
        source["image"] = str(road_set / source.pop("image"))
        del source["gt"]
    (tmp_path / "sources.json").write_text(json.dumps(sources))
    items = trainer.load_sets([(str(tmp_path), 0)])
    assert all(float(item["mask"].sum()) == 0 for item in items)
    assert all(float(item["unsure"].min()) == 1 for item in items)
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    data = trainer.stack(items, "cpu")
    draws = trainer.generators(0, "cpu")
    _, _, weights = trainer.path_batch(data, cases, 4, *draws)
    assert float(weights[:, :2].sum()) == 0  # no surface, no centreline loss
    assert float(weights[:, 2].sum()) > 0
    model = trainer.train(items, cases, 2, "cpu", 0, lambda line: None,
                          lambda: trainer.SurfaceNet((4, 8, 16, 32)), trainer.Looks(grey=0.0),
                          batch_size=4)  # every crop a path crop: no surface to centre on
    assert all(torch.isfinite(value).all() for value in model.state_dict().values()
               if value.is_floating_point())


def test_the_cpu_path_distance_is_exact_near_the_line(trainer):
    torch.manual_seed(0)
    line = torch.cumsum(torch.randn(400, 2), 0) + 128.0
    pixels = torch.arange(trainer.CROP, dtype=torch.float32)
    grid_y, grid_x = torch.meshgrid(pixels, pixels, indexing="ij")
    grid = torch.stack([grid_x.flatten(), grid_y.flatten()], 1)
    exact = torch.cdist(grid, line).amin(1)
    got = trainer.line_distance(line, grid)
    near = exact <= trainer.PATH_REACH
    torch.testing.assert_close(got[near], exact[near], rtol=0, atol=1e-5)
    assert bool(torch.all(got[~near] > trainer.PATH_REACH))


@pytest.mark.parametrize(("args", "message"), [
    ([], "give the training images"),
    (["--roads", "{missing}"], "has no sources.json"),
    (["--roads", "{roads}", "--cases", "{missing}/cases.json"], "no such file"),
    (["--roads", "{roads}", "--init-from", "{missing}/surface.onnx"], "no such file"),
    (["--roads", "{roads}", "--widths", "a,b"], "--widths must be positive whole numbers"),
    (["--roads", "{roads}", "--scales", "x"], "--scales must be LOW,HIGH"),
    (["--roads", "{roads}", "--scales", "1.6,0.6"], "--scales must be LOW,HIGH"),
    (["--roads", "{roads}", "--ground-range", "1"], "--ground-range must be LOW,HIGH"),
    (["--roads", "{roads}", "--steps", "0"], "--steps must be at least 1"),
    (["--roads", "{roads}", "--separable-levels", "5"], "--separable-levels must be 0 to 4"),
    (["--roads", "{roads}", "--separable-levels", "-1"], "--separable-levels must be 0 to 4"),
    (["--roads", "{roads}", "--batch", "0"], "--batch must be at least 1"),
    (["--roads", "{roads}", "--path-share", "2"], "--path-share must be 0 to 1"),
    (["--roads", "{roads}", "--learning-rate", "nan"], "--learning-rate must be a finite"),
    (["--roads", "{not_json}"], "sources.json is not JSON"),
    (["--roads", "{a_dict}"], "sources.json must be a non-empty list"),
    (["--roads", "{roads}", "--cases", "{not_json}/sources.json"], "is not JSON"),
    (["--roads", "{roads}", "--cases", "{a_dict}/sources.json"],
     "must be a JSON list of cases, got dict"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--out", "{file}"],
     "exists and is not a folder"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--out", ""],
     "--out must name a folder"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--init-from", "{file}"],
     "is not an ONNX model"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--seed", "99999999999999999999"],
     "--seed must be a whole number from 0 to 4294967295"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--init-seed", "-1"],
     "--init-seed must be a whole number from 0"),
    (["--water", "{roads}", "--cases", "{roads}/cases.json"],
     "lie on --water images only, whose cases teach the path only with --water-path-share"),
    (["--roads", "{roads}"], "the path output needs click cases on the road images: give "
                             "--cases"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--folds", "2",
      "--fold-water-only"], "--folds 2 needs at least 2 water images (--fold-water-only)"),
    (["--roads", "{roads}", "--cases", "{roads}/cases.json", "--folds", "3"],
     "--folds 3 needs at least 3 training images to hold out, one per fold; there are 2"),
    (["--roads", "{roads}", "--roads", "{roads}", "--cases", "{roads}/cases.json"],
     "the image id 'road0' is named in both")])
def test_bad_training_options_are_one_usage_error(trainer, road_set, tmp_path, monkeypatch,
                                                  capsys, args, message):
    """Each is one ``error:`` line after argparse's usage, exit 2, before any training: no
    output folder made, no input changed."""
    for name, text in (("not_json", "{"), ("a_dict", '{"id": "road0"}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sources.json").write_text(text)
    (tmp_path / "file.png").write_text("not a picture nor a model")
    names = {"roads": str(road_set), "missing": str(tmp_path / "missing"),
             "not_json": str(tmp_path / "not_json"), "a_dict": str(tmp_path / "a_dict"),
             "file": str(tmp_path / "file.png")}
    inputs = {path: path.read_bytes() for path in [*road_set.iterdir(), *tmp_path.rglob("*.*")]}
    monkeypatch.setattr("sys.argv", ["train_surface_model.py", "--out", str(tmp_path / "out"),
                                     *(arg.format(**names) for arg in args)])
    with pytest.raises(SystemExit) as exit_info:
        trainer.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("train_surface_model.py: error: ")
    assert message in err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()
    assert {path: path.read_bytes() for path in inputs} == inputs


def test_training_images_are_read_as_the_tracer_reads_them(trainer, tmp_path):
    rgba = np.random.default_rng(0).integers(0, 256, (5, 6, 4), dtype=np.uint8)
    iio.imwrite(tmp_path / "rgba.png", rgba)
    rgb = trainer.read_rgb(str(tmp_path / "rgba.png"))
    assert rgb.dtype == np.float32
    np.testing.assert_array_equal(rgb, rgba[:, :, :3])
    iio.imwrite(tmp_path / "grey.png", rgba[:, :, 0])
    np.testing.assert_array_equal(trainer.read_rgb(str(tmp_path / "grey.png")),
                                  np.repeat(rgba[:, :, :1], 3, axis=2))
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ImageReadError) as error:
        trainer.read_rgb(str(tmp_path / "bad.png"))
    assert str(error.value) == (f"{tmp_path / 'bad.png'} is not an image this program can read "
                                "(PNG, JPEG, TIFF/GeoTIFF, …)")


def run_trainer(trainer, monkeypatch, *args):
    """``main`` of the trainer with ``args``: its exit code (0 where it returns)."""
    monkeypatch.setattr("sys.argv", ["train_surface_model.py", *map(str, args)])
    try:
        trainer.main()
    except SystemExit as exit_info:
        return exit_info.code
    return 0


#: A tiny network and a training of one step: the options of the runs of ``main`` below.
TINY = ["--backbone", "unet", "--widths", "4,8,16,32", "--steps", "1", "--batch", "2"]


def without_masks(road_set, folder):
    """``folder`` made a training folder of road_set's images without their masks (as
    scripts/session_cases.py writes them)."""
    folder.mkdir()
    sources = json.loads((road_set / "sources.json").read_text())
    for source in sources:
        source["image"] = str(road_set / source.pop("image"))
        del source["gt"]
    (folder / "sources.json").write_text(json.dumps(sources))
    return folder


def test_image_ids_named_twice_are_refused_within_and_across_folders(trainer, road_set, tmp_path,
                                                                     monkeypatch, capsys):
    """The cases of one image would land on the other's: refused with the id and both
    folders named, before any output is made."""
    other = without_masks(road_set, tmp_path / "lines")  # the same ids: road0, road1
    with pytest.raises(BadParameter, match=f"'road0' is named in both {road_set} and {other}"):
        trainer.load_sets([(str(road_set), 0), (str(other), 0)])
    assert len(trainer.load_sets([(str(road_set), 0), (str(other), 0)], exclude=("road",))) == 0
    twice = tmp_path / "twice"
    twice.mkdir()
    sources = json.loads((road_set / "sources.json").read_text())
    (twice / "sources.json").write_text(json.dumps(
        [{**source, "image": str(road_set / source["image"]), "gt": str(road_set / source["gt"]),
          "id": "road0"} for source in sources]))
    with pytest.raises(BadParameter, match="names the image id 'road0' twice"):
        trainer.read_sources(str(twice))
    assert run_trainer(trainer, monkeypatch, "--roads", road_set, "--water", other, "--cases",
                       road_set / "cases.json", "--out", tmp_path / "out", *TINY) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"the image id 'road0' is named in both {road_set} and {other}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("dtype", "road"), [(np.uint8, 1), (np.uint16, 255),
                                             (np.uint16, 65535)])
def test_masks_of_any_road_value_read_as_the_8_bit_ones(trainer, road_set, tmp_path, dtype, road):
    """0/1, 16-bit 0/255 and 0/65535 masks mark the same road as the 0/255 8-bit one; a mask
    that marks none is refused, naming its file."""
    folder = tmp_path / "masks"
    folder.mkdir()
    sources = json.loads((road_set / "sources.json").read_text())
    for source in sources:
        mask = iio.imread(road_set / source["gt"]) > 127
        iio.imwrite(folder / source["gt"], (mask * road).astype(dtype))
        source["image"] = str(road_set / source["image"])
    (folder / "sources.json").write_text(json.dumps(sources))
    expected = trainer.load_sets([(str(road_set), 0)])
    got = trainer.load_sets([(str(folder), 0)])
    for mine, theirs in zip(got, expected, strict=True):
        assert float(theirs["mask"].sum()) > 0
        assert torch.equal(mine["mask"], theirs["mask"])
    iio.imwrite(folder / sources[1]["gt"], np.zeros((96, 96), dtype))
    with pytest.raises(BadParameter, match=f"the mask {folder / sources[1]['gt']} of 'road1' "
                                           "marks no road"):
        trainer.load_sets([(str(folder), 0)])


def test_16_bit_and_float_images_keep_their_levels_on_the_8_bit_range(trainer, tmp_path):
    """12-bit values in a 16-bit file are not cut to a few levels, nor float values above 255
    sent beyond what the crops' half precision holds: both are stretched linearly to 0..255."""
    from tests.test_georef import write_geotiff

    ramp = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)  # 0..4095: 12 bits
    iio.imwrite(tmp_path / "twelve.png", ramp)
    twelve = trainer.read_rgb(str(tmp_path / "twelve.png"))
    assert len(np.unique(twelve)) > 4000
    assert float(twelve.min()) == 0.0
    assert float(twelve.max()) == 255.0
    assert np.all(np.diff(twelve[:, :, 0].ravel()) >= 0)  # the ramp's order kept
    reflectance = (ramp.astype(np.float32) * 10.0)[:, :, None].repeat(3, axis=2)  # to 40950
    write_geotiff(tmp_path / "float.tif", reflectance, transform=None)
    read = trainer.read_rgb(str(tmp_path / "float.tif"))
    assert np.isfinite(read.astype(np.float16)).all()
    assert float(read.min()) >= 0.0
    assert float(read.max()) <= 255.0
    assert len(np.unique(read)) > 4000


def test_a_loss_that_is_not_finite_stops_the_training_naming_its_step(trainer, road_set,
                                                                      monkeypatch):
    items = trainer.load_sets([(str(road_set), 0)])
    cases = trainer.load_cases([str(road_set / "cases.json")], items)
    real = trainer.loss_terms
    calls = []

    def diverging(logits, targets, weight):
        calls.append(1)
        loss, dice = real(logits, targets, weight)
        return (loss * math.nan, dice) if len(calls) == 2 else (loss, dice)

    monkeypatch.setattr(trainer, "loss_terms", diverging)
    with pytest.raises(BadParameter, match="training stopped at step 1: its loss is not finite"):
        trainer.train(items, cases, 3, "cpu", 0, lambda line: None,
                      lambda: trainer.SurfaceNet((4, 8, 16, 32)), trainer.Looks(grey=0.0),
                      batch_size=2)
    assert len(calls) == 2


def test_folds_train_on_images_without_masks(trainer, road_set, tmp_path, monkeypatch):
    """Images without masks (scripts/session_cases.py's) are held out and trained on by fold;
    no surface IoU is measured on them."""
    lines = without_masks(road_set, tmp_path / "lines")
    out = tmp_path / "folds"
    assert run_trainer(trainer, monkeypatch, "--roads", lines, "--cases", road_set / "cases.json",
                       "--folds", "2", "--folds-only", "--out", out, *TINY) == 0
    assert sorted(path.name for path in out.iterdir()) == ["fold0.onnx", "fold1.onnx",
                                                           "folds.json"]
    assert json.loads((out / "folds.json").read_text()) == {"road0": 0, "road1": 1}


def test_an_output_folder_that_cannot_be_written_is_refused_before_training(
        trainer, road_set, tmp_path, monkeypatch, capsys):
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    def never(*args, **kwargs):
        raise AssertionError("trained although --out cannot be written")

    monkeypatch.setattr(trainer.tempfile, "mkstemp", refused)
    monkeypatch.setattr(trainer, "train", never)
    out = tmp_path / "out"
    assert run_trainer(trainer, monkeypatch, "--roads", road_set, "--cases",
                       road_set / "cases.json", "--out", out, *TINY) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"error: cannot write in --out {out}: Permission denied")
    assert not out.exists()  # the folder it made is removed again


def test_onnx_missing_is_said_before_any_work(trainer, road_set, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx fails
    assert run_trainer(trainer, monkeypatch, "--roads", road_set, "--cases",
                       road_set / "cases.json", "--out", tmp_path / "out", *TINY) == 2
    assert "needs the onnx package" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_torch_missing_is_one_line_even_for_help(trainer):
    import subprocess
    import sys

    code = ("import runpy, sys; sys.modules['torch'] = None; "
            "sys.argv = ['train_surface_model.py', '--help']; "
            f"runpy.run_path({trainer.__file__!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == ("train_surface_model.py: error: the trainer needs PyTorch, "
                                   "which is not installed: install it, e.g. .venv/bin/pip "
                                   "install torch onnx")


def test_a_failed_export_keeps_the_weights_and_the_model_there_was(trainer, road_set, tmp_path,
                                                                   monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "surface.onnx").write_bytes(b"the model of an earlier run")

    def broken(*args, **kwargs):
        raise RuntimeError("exporter broke")

    monkeypatch.setattr(trainer.torch.onnx, "export", broken)
    assert run_trainer(trainer, monkeypatch, "--roads", road_set, "--cases",
                       road_set / "cases.json", "--out", out, *TINY) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"error: cannot write {out / 'surface.onnx'}: exporter broke")
    assert (out / "surface.onnx").read_bytes() == b"the model of an earlier run"
    weights = torch.load(out / "surface.pt", weights_only=True)
    assert "head.weight" in weights
    assert sorted(path.name for path in out.iterdir()) == ["surface.onnx", "surface.pt"]


def test_an_output_folder_holding_the_model_to_fine_tune_is_refused(trainer, road_set, tmp_path,
                                                                    monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "surface.onnx").write_bytes(b"the model to fine-tune")
    assert run_trainer(trainer, monkeypatch, "--roads", road_set, "--cases",
                       road_set / "cases.json", "--init-from", out / "surface.onnx",
                       "--out", out, *TINY) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--out {out / 'surface.onnx'} is the input" in err
    assert [path.name for path in out.iterdir()] == ["surface.onnx"]
    assert (out / "surface.onnx").read_bytes() == b"the model to fine-tune"


def test_the_fold_option_says_folds_train_one_after_another(trainer, monkeypatch, capsys):
    assert run_trainer(trainer, monkeypatch, "--help") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "parallel processes" not in text
    assert "the folds given train one after another" in text
