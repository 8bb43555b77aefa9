"""Batch mode over a folder: seeds, matching, outputs, failures, resume, Dask."""

from __future__ import annotations

import json
import os
import shutil
import threading

import imageio.v3 as iio
import numpy as np
import pyproj
import pytest
from affine import Affine
from distributed import Client, LocalCluster
from geojson_pydantic import FeatureCollection

import core.batch
from cli import main as cli_main
from cli.batch_cmd import worker_backend
from core.backend import CpuBackend
from core.batch import (
    SUMMARY_JSON,
    WORKER_IMAGES,
    ImageTask,
    images_per_call,
    local_executor,
    output_names,
    plan_batch,
    process_image,
    run_tasks,
)
from core.errors import BadParameter
from core.georef import Georef
from core.tracer import TraceParams
from core.vectors import (
    Failure,
    Seed,
    clip_segments,
    pieces_in_image,
    read_seeds,
    without_close_vertices,
)
from tests.conftest import SAMPLE_CASES, SAMPLE_IMAGE
from tests.helpers import read_summary
from tests.synthetic import distance_to_polyline, road_image
from tests.test_georef import TRANSFORM, sample_pixels, write_geotiff, write_world_file

CASES = json.loads(SAMPLE_CASES.read_text())[:3]


def seed_vertices(case) -> np.ndarray:
    """Three vertices on the case's ground truth: two segments to trace."""
    gt = np.array(case["gt"])
    return np.array([gt[0], gt[len(gt) // 2], gt[-1]])


GEOREF = Georef(TRANSFORM, pyproj.CRS.from_epsg(32654), "test")


def lonlat_of(pixels: np.ndarray) -> list:
    """WGS84 lon/lat of sample pixels placed as in the test GeoTIFF."""
    return GEOREF.pixel_to_lonlat(pixels).tolist()


def feature(coordinates, properties=None, **members) -> dict:
    return {"type": "Feature", "properties": properties or {}, **members,
            "geometry": {"type": "LineString", "coordinates": coordinates}}


def make_folder(root, corrupt=False, bad_seeds=False):
    """IMAGES_DIR with a GeoTIFF, a world-file PNG, a pixel-space PNG (+ a corrupt PNG)."""
    images = root / "images"
    images.mkdir()
    write_geotiff(images / "geo.tif", sample_pixels())
    shutil.copy(SAMPLE_IMAGE, images / "world.png")
    write_world_file(images / "world.pgw", TRANSFORM)
    (images / "world.prj").write_text("EPSG:32654")
    shutil.copy(SAMPLE_IMAGE, images / "plain.png")
    (images / "notes.txt").write_text("not an image")
    features = []
    for case in CASES:
        vertices = seed_vertices(case)
        features.append(feature(lonlat_of(vertices), {"name": case["id"]}, id=case["id"]))
        features.append(feature(vertices.tolist(), {"image": "plain.png"}))
    if corrupt:
        (images / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 30)
    if bad_seeds:
        features += [
            {"type": "Feature", "properties": {}, "geometry": {"type": "Point",
                                                                "coordinates": [141, 35]}},
            feature([[1, 1], [50, 50]], {"image": "missing.png"}, id="ghost"),
            feature([[141.0, 35.0]], id="short"),
            feature([[500, 100], [700, 100], [560, 200]], {"image": "plain.png"}, id="off"),
        ]
    seeds = root / "seeds.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return images, seeds


def touch_later(path) -> None:
    """Move a file's modification time one second on, as a rewrite of it would."""
    stamp = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(stamp, stamp))


def batch(capsys, images, seeds, out, *extra) -> tuple[int, str]:
    code = cli_main(["batch", str(images), "--seeds", str(seeds), "-o", str(out),
                     "--backend", "cpu", *map(str, extra)])
    return code, capsys.readouterr().err


def test_batch_with_corrupt_image_and_bad_seeds(tmp_path, capsys):
    images, seeds = make_folder(tmp_path, corrupt=True, bad_seeds=True)
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out, "--workers", "1")
    assert code == 1
    summary, rows = read_summary(out)
    status = {record["image"]: record["status"] for record in summary["images"]}
    assert status == {"corrupt.png": "failed", "geo.tif": "ok", "plain.png": "partial",
                      "world.png": "ok"}
    assert sorted(path.name for path in out.iterdir()) == [
        ".roadtracer-batch.lock", "geo.geojson", "plain.geojson", "summary.csv", "summary.json",
        "world.geojson"]
    bad = {failure["seed"]: failure["reason"] for failure in summary["seed_failures"]}
    assert "Point" in bad["#6"]
    assert "missing.png" in bad["ghost"]
    assert "at least 2" in bad["short"]
    plain = next(r for r in summary["images"] if r["image"] == "plain.png")
    assert [(f["seed"], f["segment"]) for f in plain["failures"]] == [("off", 0), ("off", 1)]
    assert "outside" in plain["failures"][0]["reason"]
    corrupt = next(r for r in summary["images"] if r["image"] == "corrupt.png")
    assert "corrupt.png" in corrupt["failures"][0]["reason"]
    assert summary["totals"]["segments"] == 3 * 2 * 3  # 3 seeds × 2 segments × 3 images
    assert [row["image"] for row in rows] == ["corrupt.png", "geo.tif", "plain.png",
                                              "world.png", "(seeds)"]
    assert rows[2]["coordinate_space"] == "pixel"
    assert rows[1]["lines"] == "3"
    assert "seed off segment 0:" in rows[2]["reasons"]
    assert "\nbad seed ghost: it names image 'missing.png', which is not in " in err
    assert ("\npartial: plain.png: seed off segment 0: point b=(700, 100) lies outside the "
            "572×572 image\n") in err
    assert "coordinates are pixels" in err
    assert "ground resolution is unknown too" in err
    assert "--ground-resolution M" in err
    assert "failed: corrupt.png" in err

    geo = json.loads((out / "geo.geojson").read_text())
    world = json.loads((out / "world.geojson").read_text())
    plain_doc = json.loads((out / "plain.geojson").read_text())
    for document in (geo, world, plain_doc):
        FeatureCollection.model_validate(document)
    assert geo["coordinate_space"] == "lonlat"
    assert plain_doc["coordinate_space"] == "pixel"
    # The same image traced from lon/lat seeds and from pixel seeds gives the same lines.
    by_seed = {f["properties"]["seed"]: f for f in geo["features"]}
    first = by_seed[CASES[0]["id"]]["properties"]
    assert first["seed_properties"] == {"name": CASES[0]["id"]}
    assert first["segments"] == [0, 1]
    assert len(first["segment_scores"]) == len(first["link_scores"]) == 2
    assert first["score"] == pytest.approx(sum(first["segment_scores"]), abs=1e-5)
    np.testing.assert_allclose(first["anchors_px"], seed_vertices(CASES[0]), atol=0.01)
    pixel_lines = [f["properties"]["pixels"] for f in plain_doc["features"]
                   if f["properties"]["seed"] != "off"]
    np.testing.assert_allclose(first["pixels"], pixel_lines[0], atol=0.01)
    assert geo["features"][0]["geometry"] == world["features"][0]["geometry"]


def test_resume_and_overwrite(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    code, _ = batch(capsys, images, seeds, out, "--workers", "1")
    assert code == 0
    summary, _ = read_summary(out)
    assert summary["totals"]["ok"] == 3
    assert summary["seed_failures"] == []
    stamps = {path.name: path.stat().st_mtime_ns for path in out.glob("*.geojson")}

    code, err = batch(capsys, images, seeds, out, "--workers", "1")
    assert code == 0
    assert "skipping 3 image(s)" in err
    summary, rows = read_summary(out)
    assert {record["status"] for record in summary["images"]} == {"skipped"}
    assert rows[0]["lines"] == "3"  # kept from the earlier run's summary
    assert stamps == {path.name: path.stat().st_mtime_ns for path in out.glob("*.geojson")}

    (out / "geo.geojson").unlink()
    code, _ = batch(capsys, images, seeds, out, "--workers", "1")
    assert code == 0
    summary, _ = read_summary(out)
    assert {r["image"]: r["status"] for r in summary["images"]}["geo.tif"] == "ok"

    code, _ = batch(capsys, images, seeds, out, "--workers", "1", "--overwrite")
    assert code == 0
    summary, _ = read_summary(out)
    assert summary["totals"]["ok"] == 3
    assert not list(out.glob(".*.part"))


def test_resume_traces_again_when_seeds_or_parameters_change(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    assert batch(capsys, images, seeds, out, "--workers", "1")[0] == 0
    stamps = {path.name: path.stat().st_mtime_ns for path in out.glob("*.geojson")}
    # Drop the pixel-space seeds of plain.png: only that image's inputs change.
    document = json.loads(seeds.read_text())
    document["features"] = [f for f in document["features"]
                            if f["properties"].get("image") != "plain.png"]
    seeds.write_text(json.dumps(document))
    code, err = batch(capsys, images, seeds, out, "--workers", "1")
    assert code == 0
    assert "tracing 1 image(s) again" in err
    assert "plain.png" in err
    summary, _ = read_summary(out)
    statuses = {record["image"]: record["status"] for record in summary["images"]}
    assert statuses == {"geo.tif": "skipped", "world.png": "skipped", "plain.png": "ok"}
    after = {path.name: path.stat().st_mtime_ns for path in out.glob("*.geojson")}
    assert after["plain.geojson"] != stamps["plain.geojson"]
    assert {k: v for k, v in after.items() if k != "plain.geojson"} == {
        k: v for k, v in stamps.items() if k != "plain.geojson"}
    plain = json.loads((out / "plain.geojson").read_text())
    assert plain["features"] == []
    # A file read for an image, replaced since (the image, its world file), is another input.
    touch_later(images / "world.pgw")
    touch_later(images / "geo.tif")
    code, err = batch(capsys, images, seeds, out, "--workers", "1")
    assert "tracing 2 image(s) again" in err
    assert "plain.png" not in err
    assert {r["image"]: r["status"] for r in read_summary(out)[0]["images"]} == {
        "geo.tif": "ok", "world.png": "ok", "plain.png": "skipped"}
    # Other tracing parameters change every image's inputs.
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--max-angle", "40")
    assert code == 0
    assert "tracing 3 image(s) again" in err
    assert read_summary(out)[0]["totals"]["ok"] == 3


@pytest.fixture(scope="module")
def dask_cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        yield cluster


def test_dask_in_process_cluster_matches_serial(tmp_path, dask_cluster):
    images, seeds = make_folder(tmp_path, corrupt=True)
    plan = plan_batch(images, seeds, tmp_path / "out")
    factory = CpuBackend
    serial = {report.image: (report, document) for report, document in
              run_tasks(plan.tasks, factory)}
    for per_call in (1, 3):  # three images per call: a call of one and one of three
        with Client(dask_cluster, set_as_default=False) as client:
            parallel = {report.image: (report, document) for report, document in
                        run_tasks(plan.tasks, factory, client.get_executor(pure=False),
                                  per_call)}
        assert serial.keys() == parallel.keys() == {"corrupt.png", "geo.tif", "plain.png",
                                                    "world.png"}
        for image, (report, document) in serial.items():
            assert parallel[image][1] == document
            assert parallel[image][0].status == report.status


def test_local_workers_get_up_to_four_images_per_call_and_four_calls_each():
    assert images_per_call(480, 8) == WORKER_IMAGES == 4
    assert images_per_call(96, 8) == 3
    assert images_per_call(20, 8) == 1
    assert images_per_call(0, 8) == 1


@pytest.mark.slow
def test_this_process_takes_calls_back_while_local_workers_start(tmp_path):
    images, seeds = make_folder(tmp_path, corrupt=True)
    plan = plan_batch(images, seeds, tmp_path / "out")
    serial = {report.image: document for report, document in run_tasks(plan.tasks, CpuBackend)}
    made_here = []

    def here():
        made_here.append(threading.current_thread().name)
        return CpuBackend()

    # Workers that have not started yet: a pool whose one worker is held, so that no call
    # starts until the gate opens (with real processes, whether the last call is still in
    # the pool's queue when it is asked back depends on how fast they start). Every call
    # not started is taken back from the end of the queue and traced here.
    from concurrent.futures import ThreadPoolExecutor

    gate = threading.Event()
    executor = ThreadPoolExecutor(1)
    executor.submit(gate.wait)
    opener = threading.Timer(60, gate.set)  # without taking back, the pool traces them late
    opener.start()
    try:
        outcomes = list(run_tasks(plan.tasks, CpuBackend, executor, 1, here))
    finally:
        opener.cancel()
        gate.set()
        executor.shutdown()
    assert sorted(report.image for report, _ in outcomes) == sorted(serial)
    assert {report.image: document for report, document in outcomes} == serial
    # All were traced while the pool's worker was held: every call was taken back.
    assert made_here
    assert set(made_here) == {threading.current_thread().name}


def test_in_process_run_reads_the_next_image_while_tracing(tmp_path, monkeypatch):
    opened, closed = [], []
    real_open = core.batch.open_task_image

    def recording_open(task):
        raster = real_open(task)
        name = os.path.basename(task.image)
        opened.append((name, threading.current_thread().name))
        close = raster.close
        raster.close = lambda: (closed.append(name), close())
        return raster

    monkeypatch.setattr(core.batch, "open_task_image", recording_open)
    (tmp_path / "a").mkdir()
    images, seeds = make_folder(tmp_path / "a")
    tasks = plan_batch(images, seeds, tmp_path / "a" / "out").tasks
    names = [os.path.basename(task.image) for task in tasks]
    outcomes = run_tasks(tasks, CpuBackend)
    report, _ = next(outcomes)
    assert report.image == names[0]
    assert opened[0] == (names[0], threading.current_thread().name)
    assert closed == [names[0]]
    outcomes.close()  # stopped: the image read ahead is closed, not left open
    assert [name for name, _ in opened] == names[:2]
    assert opened[1][1].startswith("image-reader")
    assert closed == names[:2]
    # A whole run: every image after the first read ahead, the unreadable one reported.
    opened.clear()
    (tmp_path / "b").mkdir()
    images, seeds = make_folder(tmp_path / "b", corrupt=True)
    tasks = plan_batch(images, seeds, tmp_path / "b" / "out").tasks
    names = [os.path.basename(task.image) for task in tasks]
    reports = [report for report, _ in run_tasks(tasks, CpuBackend)]
    assert [report.image for report in reports] == names
    assert [name for name, _ in opened] == [name for name in names if name != "corrupt.png"]
    assert all(thread.startswith("image-reader") for name, thread in opened if name != names[0])
    assert next(r for r in reports if r.image == "corrupt.png").status == "failed"
    assert {r.status for r in reports if r.image != "corrupt.png"} == {"ok"}


def broken_backend():
    raise RuntimeError("backend exploded")


def test_unexpected_errors_are_recorded(tmp_path, dask_cluster):
    images, seeds = make_folder(tmp_path)
    plan = plan_batch(images, seeds, tmp_path / "out")
    with Client(dask_cluster, set_as_default=False) as client:
        for executor, per_call in ((None, 1), (client.get_executor(pure=False), 1),
                                   (client.get_executor(pure=False), 2)):
            reports = [report for report, _ in run_tasks(plan.tasks, broken_backend, executor,
                                                         per_call)]
            assert len(reports) == len(plan.tasks)
            assert {report.status for report in reports} == {"failed"}
            assert "RuntimeError: backend exploded" in reports[0].failures[0].reason


def test_cli_on_a_scheduler_address(tmp_path, capsys, dask_cluster):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    code, _ = batch(capsys, images, seeds, out, "--scheduler", dask_cluster.scheduler_address)
    assert code == 0
    summary, _ = read_summary(out)
    assert summary["scheduler"] == dask_cluster.scheduler_address
    assert summary["totals"]["segments"] == 18


@pytest.mark.slow
def test_cli_local_worker_processes(tmp_path, capsys):
    """The default: a pool of local worker processes."""
    images, seeds = make_folder(tmp_path, corrupt=True)
    out = tmp_path / "out"
    code, _ = batch(capsys, images, seeds, out, "--workers", "2")
    assert code == 1
    summary, _ = read_summary(out)
    assert summary["totals"]["ok"] == 3
    assert summary["totals"]["failed"] == 1


def test_write_failures(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    (out / "geo.geojson").mkdir(parents=True)  # the output path is taken by a folder
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--overwrite")
    assert code == 1
    summary, _ = read_summary(out)
    geo = next(r for r in summary["images"] if r["image"] == "geo.tif")
    assert geo["status"] == "failed"
    assert "cannot write" in geo["failures"][0]["reason"]
    assert "geo.geojson" in geo["failures"][0]["reason"]
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, err = batch(capsys, images, seeds, blocker, "--workers", "1")
    assert code == 2
    assert err.startswith(f"error: output folder {blocker} is a file, not a folder")
    assert blocker.read_text() == ""
    code, err = batch(capsys, images, seeds, blocker / "out", "--workers", "1")
    assert code == 2
    assert err.startswith("error: cannot write to output folder")


def test_usage_errors(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    code, err = batch(capsys, tmp_path / "nowhere", seeds, out)
    assert (code, err.split(":")[0]) == (2, "error")
    assert "nowhere" in err
    (tmp_path / "bad.json").write_text("{not json")
    code, err = batch(capsys, images, tmp_path / "bad.json", out)
    assert code == 2
    assert "bad.json is not JSON" in err
    code, err = batch(capsys, images, tmp_path / "missing.json", out)
    assert code == 2
    assert "missing.json" in err
    code, err = batch(capsys, images, seeds, out, "--image-crs", "EPSG:999999")
    assert code == 2
    assert "EPSG:999999" in err
    for option, value in (("--guides", "0"), ("--max-angle", "200")):
        code, err = batch(capsys, images, seeds, out, option, value)
        assert code == 2
        assert value in err
    with pytest.raises(SystemExit) as exit_info:  # refused by the option's own type
        batch(capsys, images, seeds, out, "--sigma", "-1")
    assert exit_info.value.code == 2
    assert "sigma must be at least 0.5 px" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        batch(capsys, images, seeds, out, "--workers", "0")
    assert exit_info.value.code == 2
    assert not out.exists()


def test_read_seeds_forms_and_failures(tmp_path):
    path = tmp_path / "s.geojson"
    path.write_text(json.dumps({"type": "LineString", "coordinates": [[141, 35, 7], [141.1, 35]]}))
    seeds, failures = read_seeds(path)
    assert failures == []
    np.testing.assert_array_equal(seeds[0].vertices, [[141, 35], [141.1, 35]])
    assert seeds[0].id == "#0"
    path.write_text(json.dumps({"type": "Feature", "id": 7, "properties": None, "geometry": {
        "type": "MultiLineString", "coordinates": [[[0, 0], [1, 1]], [[2, 2]]]}}))
    seeds, failures = read_seeds(path)
    assert [seed.id for seed in seeds] == ["7/0"]
    assert failures[0].seed == "7/1"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [
        feature([[0, "a"], [1, 1]]), feature([[0, float("nan")], [1, 1]]),
        feature([[500, 10], [600, 10]]), feature([[0, 0], [1, 1]], {"image": 3}), "junk"]}))
    seeds, failures = read_seeds(path)
    assert seeds == []
    reasons = [failure.reason for failure in failures]
    assert "not [x, y] number pairs" in reasons[0]
    assert "not finite" in reasons[1]
    assert "properties.image" in reasons[2]
    assert "properties.image=3" in reasons[3]
    assert "not a GeoJSON Feature" in reasons[4]
    path.write_text(json.dumps({"type": "Point", "coordinates": [0, 0]}))
    with pytest.raises(BadParameter, match="type 'Point'"):
        read_seeds(path)


def test_clip_segments_and_pieces():
    start, end, start_clipped, end_clipped, inside = clip_segments(
        np.array([[-10.0, 5.0], [-10.0, -5.0], [np.nan, 0.0]]),
        np.array([[5.0, 5.0], [-1.0, 60.0], [1.0, 1.0]]), 100, 50)
    np.testing.assert_allclose([start[0], end[0]], [[0, 5], [5, 5]])
    assert (start_clipped[0], end_clipped[0]) == (True, False)
    # Missing the box, and a non-finite end: neither meets it.
    assert inside.tolist() == [True, False, False]
    # In, in, out, in: two pieces; the one leaving ends on the border at x = 99.
    vertices = np.array([[10.0, 10], [50, 10], [150, 10], [60, 20]])
    pieces = [piece for piece, _, _ in pieces_in_image(vertices, 100, 50)]
    assert len(pieces) == 2
    np.testing.assert_allclose(pieces[0], [[10, 10], [50, 10], [99, 10]])
    np.testing.assert_allclose(pieces[1], [[99, 10 + 10 * 51 / 90], [60, 20]])
    # A corner grazed by less than 2 px is dropped.
    assert pieces_in_image(np.array([[-1.0, 1.0], [1.0, -1.0]]), 100, 50) == []


def test_lonlat_seed_clipped_to_footprint(tmp_path):
    geotiff = tmp_path / "geo.tif"
    write_geotiff(geotiff, sample_pixels())
    inside, outside = np.array([300.0, 300.0]), np.array([900.0, 300.0])
    seed_file = tmp_path / "s.geojson"
    seed_file.write_text(json.dumps(feature(lonlat_of(np.array([inside, outside])))))
    seeds, _ = read_seeds(seed_file)
    report, document = process_image(ImageTask(str(geotiff), tuple(seeds), TraceParams()),
                                     CpuBackend)
    assert report.status == "ok"
    assert report.matched_seeds == ["#0"]
    properties = document["features"][0]["properties"]
    # Traced to the last pixel centre, then straight on to the image's edge.
    np.testing.assert_allclose(properties["anchors_px"], [inside, [571, 300], [571.5, 300]],
                               atol=0.01)
    assert properties["extended_to_edge"] == ["end"]
    assert properties["segment_details"] == [{"straight": False}, {"straight": True}]


def test_output_names_on_stem_collision(tmp_path):
    images = [tmp_path / "a.png", tmp_path / "a.tif", tmp_path / "b.jpg"]
    assert output_names(images) == {"a.png": "a.png.geojson", "a.tif": "a.tif.geojson",
                                    "b.jpg": "b.geojson"}


def test_output_names_are_distinct_whatever_the_names(tmp_path):
    """``a.png`` and ``a.tif`` share a stem: named in full, the first is the stem of
    ``a.png.tif``; names differing in case only are one file on macOS and Windows. Every image
    gets its own file, the same whatever the order of the listing."""
    names = ["a.png", "a.tif", "a.png.tif", "B.png", "b.PNG", "b.png.tif"]
    for order in (names, names[::-1]):
        outputs = output_names([tmp_path / name for name in order])
        assert outputs == {"a.png": "a.png.geojson", "a.tif": "a.tif.geojson",
                           "a.png.tif": "a.png.tif.geojson", "B.png": "B.png.geojson",
                           "b.PNG": "b.PNG~2.geojson", "b.png.tif": "b.png.tif.geojson"}


def test_failure_description():
    assert Failure("boom", "s1", 2).describe() == "seed s1 segment 2: boom"
    assert Failure("boom").describe() == "boom"


def test_worker_backend_is_made_once_per_process():
    assert worker_backend("cpu") is worker_backend("cpu")


@pytest.mark.slow
def test_local_gpu_workers_see_one_device_each():
    with local_executor(3, gpus=2) as executor:
        devices = list(executor.map(os.getenv, ["CUDA_VISIBLE_DEVICES"] * 6))
    assert set(devices) <= {"0", "1"}


def test_lonlat_seed_crossing_no_image_is_counted_not_failed(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    document = json.loads(seeds.read_text())
    document["features"].append(feature([[10.0, 50.0], [10.001, 50.001]], id="far"))
    seeds.write_text(json.dumps(document))
    for _ in range(2):  # the second run skips every image and still knows
        code, err = batch(capsys, images, seeds, tmp_path / "out", "--workers", "1")
        assert code == 0, err
        summary, rows = read_summary(tmp_path / "out")
        assert summary["seed_failures"] == []
        assert summary["seeds_outside"] == {"count": 1, "ids": ["far"]}
        assert summary["totals"]["failures"] == 0
        assert rows[-1]["image"] != "(seeds)"
        assert ("note: 1 seed line(s) cross none of the images: not traced (counted, the first "
                "ids listed: seeds_outside in summary.json)\n") in err
    assert summary["totals"]["skipped"] == 3


def test_planner_sends_lonlat_seeds_only_to_images_they_may_cross(tmp_path):
    images, seeds = make_folder(tmp_path)
    shutil.copy(SAMPLE_IMAGE, images / "elsewhere.png")
    write_world_file(images / "elsewhere.pgw",
                     Affine(0.2, 0, 600000, 0, -0.2, 3900000))  # 100 km east
    (images / "elsewhere.prj").write_text("EPSG:32654")
    (images / "broken.tif").write_bytes(b"II*\x00" + b"junk" * 10)
    plan = plan_batch(images, seeds, tmp_path / "out")
    lonlat = {os.path.basename(task.image): sorted(seed.id for seed in task.seeds
                                                   if seed.image is None)
              for task in plan.tasks}
    ids = sorted(case["id"] for case in CASES)
    assert lonlat == {"broken.tif": ids, "elsewhere.png": [], "geo.tif": ids,
                      "plain.png": [], "world.png": ids}
    assert plan.candidates[ids[0]] == {"broken.tif", "geo.tif", "world.png"}


def test_source_crs_outputs(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    code, _ = batch(capsys, images, seeds, tmp_path / "out", "--workers", "1", "--crs", "source")
    assert code == 0
    geo = json.loads((tmp_path / "out" / "geo.geojson").read_text())
    assert geo["crs"]["properties"]["name"] == "urn:ogc:def:crs:EPSG::32654"
    x, y = geo["features"][0]["geometry"]["coordinates"][0]
    assert 500000 < x < 500115
    assert 3899885 < y < 3900000


def test_interrupt_keeps_a_summary(tmp_path, capsys, monkeypatch):
    images, seeds = make_folder(tmp_path)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("core.batch.process_image", interrupt)
    code, err = batch(capsys, images, seeds, tmp_path / "out", "--workers", "1")
    assert code == 130
    assert "stopped after 0 of 3 image(s)" in err
    summary, _ = read_summary(tmp_path / "out")
    assert summary["interrupted"] is True
    assert summary["images"] == []


def test_in_process_batch_traces_with_the_backend_it_chose(tmp_path, capsys, monkeypatch):
    import gpu.select

    images, seeds = make_folder(tmp_path)
    chosen = []
    choose = gpu.select.choose_backend

    def counting(name="auto", batch=False, notify=None):
        chosen.append(name)
        return choose(name, batch, notify)

    monkeypatch.setattr("gpu.select.choose_backend", counting)
    code, _ = batch(capsys, images, seeds, tmp_path / "out", "--workers", "1")
    assert code == 0
    assert chosen == ["cpu"]  # made once, not again for the images
    summary, _ = read_summary(tmp_path / "out")
    assert summary["totals"]["ok"] == 3


def test_repeated_vertices_are_merged_not_failed(tmp_path, capsys):
    np.testing.assert_array_equal(
        without_close_vertices(np.array([[0, 0], [0.5, 0], [3, 0], [3, 1], [10, 0], [10.5, 0]])),
        [[0, 0], [3, 0], [10, 0]])
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(SAMPLE_IMAGE, images / "plain.png")
    seeds = tmp_path / "seeds.geojson"
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": [
        feature([[430, 241], [430, 241], [486, 172], [486.6, 171.5]], {"image": "plain.png"}),
        feature([[100, 100], [100.5, 100.5]], {"image": "plain.png"}, id="dot")]}))
    code, err = batch(capsys, images, seeds, tmp_path / "out", "--workers", "1")
    summary, rows = read_summary(tmp_path / "out")
    assert rows[0]["segments"] == "1"
    assert "seed dot: seed line shorter than 2 px" in rows[0]["reasons"]
    assert code == 1


def test_local_worker_defaults():
    from cli.batch_cmd import CORES, GPU_POOL_MIN_SEGMENTS, GPU_WORKERS_PER_DEVICE, local_workers

    assert local_workers(None, tasks=1000, gpus=0) == CORES
    assert local_workers(None, tasks=1000, gpus=2) == max(min(2 * GPU_WORKERS_PER_DEVICE,
                                                             CORES // 2), 1)
    assert local_workers(6, tasks=1000, gpus=1) == 6  # asked for: several processes per GPU
    # A small GPU batch runs in this process (workers would take longer to start).
    assert local_workers(None, tasks=100, gpus=1, segments=GPU_POOL_MIN_SEGMENTS) == 1
    assert local_workers(None, tasks=100, gpus=1, segments=GPU_POOL_MIN_SEGMENTS + 1) == max(
        min(GPU_WORKERS_PER_DEVICE, CORES // 2), 1)
    assert local_workers(None, tasks=100, gpus=0, segments=10) == min(CORES, 100)
    assert local_workers(4, tasks=100, gpus=1, segments=10) == 4
    assert local_workers(6, tasks=3, gpus=1) == 3  # never more than the images
    assert local_workers(None, tasks=0, gpus=0) == 1


def test_workers_are_forked_from_a_server_that_imported_their_modules(monkeypatch):
    import importlib.util
    import multiprocessing
    import subprocess
    import sys

    from cli.batch_cmd import gpu_likely, worker_modules

    assert worker_modules(False) == ("core.batch", "onnxruntime")
    assert worker_modules(True) == ("core.batch", "gpu.backend", "onnx")
    assert gpu_likely("gpu")
    assert not gpu_likely("cpu")
    assert not gpu_likely("reference")
    with monkeypatch.context() as patched:
        patched.setattr(importlib.util, "find_spec", lambda name: None)  # no pycuda
        assert not gpu_likely("auto")
        patched.setattr(importlib.util, "find_spec", lambda name: object())  # pycuda there
        assert gpu_likely("auto")
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("workers are spawned on this platform")
    # A fresh process: the server is one per process and keeps the modules it started with.
    probe = ("from core.batch import local_executor, start_worker_server, stop_local_executor\n"
             "start_worker_server(('core.batch', 'colorsys'))\n"
             "pool = local_executor(1, modules=('core.batch', 'colorsys'))\n"
             "print(pool.submit(eval, \"'colorsys' in __import__('sys').modules\").result())\n"
             "stop_local_executor(pool, False)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


def test_a_task_bounds_its_segments(tmp_path):
    images, seeds = make_folder(tmp_path)
    plan = plan_batch(images, seeds, tmp_path / "out")
    bounds = {os.path.basename(task.image): task.most_segments for task in plan.tasks}
    traced = {report.image: report.segments for report, _ in run_tasks(plan.tasks, CpuBackend)}
    assert bounds["plain.png"] == traced["plain.png"] == 2 * len(CASES)  # pixel seeds: exact
    assert all(bounds[image] >= traced[image] > 0 for image in traced)


def test_one_gpu_worker_runs_in_this_process(monkeypatch):
    import argparse

    from cli.batch_cmd import open_executor

    monkeypatch.setattr("gpu.select.gpu_device_count", lambda: 1)
    args = argparse.Namespace(scheduler=None, workers=1)
    executor, close, workers = open_executor(args, tasks=3, gpu=True)
    assert executor is None
    assert workers == 1
    close(False)


def test_evidence_folder_is_vectorised_along_the_seeds(tmp_path, capsys):
    # The images show no road; road-probability maps beside them do (one is missing).
    centreline = np.array([[30.0, 150.0], [90.0, 80.0], [170.0, 60.0], [230.0, 100.0]])
    probability = road_image(centreline, width=8.0, noise=0.0, colour=(1.0,) * 3,
                             background=(0.0,) * 3).pixels[:, :, 0]
    images, evidence = tmp_path / "images", tmp_path / "maps"
    images.mkdir()
    evidence.mkdir()
    blank = (np.random.default_rng(0).uniform(90, 110, (200, 260, 3))).astype(np.uint8)
    for name in ("a.png", "b.png"):
        iio.imwrite(images / name, blank)
    iio.imwrite(evidence / "a.tif", (255 * np.clip(probability, 0, 1)).astype(np.uint8))
    seeds = tmp_path / "seeds.geojson"
    ends = centreline[[0, -1]].tolist()
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": [
        feature(ends, {"image": "a.png"}, id="road-a"),
        feature(ends, {"image": "b.png"}, id="road-b")]}))
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--score", "evidence",
                      "--evidence-dir", evidence)
    assert code == 1
    summary, _ = read_summary(out)
    assert summary["evidence_dir"] == str(evidence)
    status = {record["image"]: record for record in summary["images"]}
    assert status["a.png"]["status"] == "ok"
    line = np.array(json.loads((out / "a.geojson").read_text())
                    ["features"][0]["geometry"]["coordinates"])
    dense = np.vstack([p + f * (q - p) for p, q in zip(line[:-1], line[1:], strict=True)
                       for f in np.linspace(0, 1, 20)])
    assert distance_to_polyline(dense, centreline).max() <= 4.0  # inside the 8 px road
    assert status["b.png"]["status"] == "failed"
    assert [f["reason"] for f in status["b.png"]["failures"]] == [
        f"evidence raster not found: {evidence / 'b.png'}"]
    assert "evidence raster not found" in err
    # A map replaced since (say, by a better model's) is another input: a.png is traced again.
    touch_later(evidence / "a.tif")
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--score", "evidence",
                      "--evidence-dir", evidence)
    assert "tracing 1 image(s) again" in err
    assert "(a.png)" in err
    # Without the maps the same seeds are other inputs: traced again, on the images.
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--score", "evidence")
    assert "tracing 1 image(s) again" in err
    with pytest.raises(BadParameter, match="evidence folder .*missing"):
        plan_batch(images, seeds, out, evidence_dir=tmp_path / "missing")



def test_bands_option(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    code, _ = batch(capsys, images, seeds, out, "--workers", "1", "--bands", "3,2,1")
    assert code == 0
    summary, _ = read_summary(out)
    assert summary["bands"] == [3, 2, 1]
    assert summary["totals"]["ok"] == 3
    # Other bands are other inputs; an image without them fails, naming its band count.
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--bands", "5")
    assert code == 1
    assert "tracing 3 image(s) again" in err
    summary, _ = read_summary(out)
    reasons = {record["image"]: record["failures"][0]["reason"]
               for record in summary["images"]}
    assert set(reasons) == {"geo.tif", "plain.png", "world.png"}
    assert all("between 1 and 3 (the image has 3 bands)" in reason
               for reason in reasons.values())
    with pytest.raises(BadParameter, match="give 1 or 3 band numbers"):
        plan_batch(images, seeds, out, bands=(1, 2))


def test_fingerprint_holds_the_model_content_not_its_place(tmp_path, monkeypatch):
    import core.surface

    task = ImageTask(str(SAMPLE_IMAGE), (), TraceParams())
    before = task.fingerprint()
    copy = tmp_path / "elsewhere" / "surface.onnx"  # another install of the same model
    copy.parent.mkdir()
    shutil.copy(core.surface.MODEL_PATH, copy)
    monkeypatch.setattr(core.surface, "MODEL_PATH", copy)
    assert task.fingerprint() == before
    copy.write_bytes(copy.read_bytes() + b"\\0")  # another model
    assert task.fingerprint() != before
    # Kinds that run no model do not depend on it.
    centre = ImageTask(str(SAMPLE_IMAGE), (), TraceParams(score="centre"))
    with_model = centre.fingerprint()
    monkeypatch.setattr(core.surface, "MODEL_PATH", tmp_path / "missing.onnx")
    assert centre.fingerprint() == with_model


def test_a_seed_of_kind_river_is_traced_as_water():
    seeds = tuple(Seed(name, seed_vertices(CASES[0]), SAMPLE_IMAGE.name, properties)
                  for name, properties in (("stream", {"kind": "river"}),
                                           ("track", {"kind": "road"}), ("plain", {}),
                                           ("osm way", {"waterway": "canal"}),
                                           ("osm road", {"highway": "residential"})))
    report, document = process_image(ImageTask(str(SAMPLE_IMAGE), seeds, TraceParams()),
                                     CpuBackend)
    assert report.status == "ok"
    kinds = {feature["properties"]["seed"]: feature["properties"]["params"]["line_kind"]
             for feature in document["features"]}
    assert kinds == {"stream": "river", "track": "road", "plain": "road", "osm way": "river",
                     "osm road": "road"}


def test_lonlat_seeds_find_images_across_the_antimeridian(tmp_path):
    """Footprints and seed boxes are unwrapped: an image across 180° is met by seeds on
    either side of it (and only by those), which reach its pixels, in degrees too."""
    from core.batch import seed_candidates

    images = tmp_path / "images"
    images.mkdir()
    east, north = pyproj.Transformer.from_crs(4326, 32601, always_xy=True).transform(180.0, 52.0)
    write_geotiff(images / "utm1.tif", sample_pixels(), crs="EPSG:32601",
                  transform=Affine(0.2, 0, east - 57, 0, -0.2, north + 57))
    write_geotiff(images / "degrees.tif", sample_pixels(), crs="EPSG:4326",
                  transform=Affine(2e-7, 0, 179.99995, 0, -2e-7, 52.0001))

    def seed(name, vertices):
        return Seed(name, np.array(vertices, dtype=float), None, {})

    seeds = [seed("west", [[-179.99999, 52.00005], [-179.999995, 52.00004]]),
             seed("across", [[179.99999, 52.00003], [-179.99999, 52.00003]]),
             seed("england", [[0.0, 52.0], [0.001, 52.0]])]
    found = seed_candidates(seeds, sorted(images.iterdir()), None)
    assert found == {"degrees.tif": {"west", "across"}, "utm1.tif": {"west", "across"}}
    from core.raster import load_image
    from core.vectors import centre_longitude, near_centre, seeds_in_image

    for name in ("degrees.tif", "utm1.tif"):
        with load_image(images / name) as raster:
            traced = {seed.id: pixels for seed, pixels, _ in seeds_in_image(seeds, name, raster)}
            assert set(traced) == {"west", "across"}, name
            for pixels in traced.values():
                assert np.all(pixels >= -0.5), name
                assert np.all(pixels <= [raster.width - 0.5, raster.height - 0.5]), name
    # Images in degrees wider than 180° keep their longitudes: -180..180 and 0..360.
    for west, expected in ((-180.0, [[189.5, 44.5], [9.5, 44.5]]),
                           (0.0, [[9.5, 44.5], [189.5, 44.5]])):
        path = tmp_path / f"globe{west:g}.tif"
        write_geotiff(path, np.zeros((180, 360, 1), np.uint8), crs="EPSG:4326",
                      transform=Affine(1.0, 0, west, 0, -1.0, 90.0))
        with load_image(path) as raster:
            for lonlat, pixel in zip(([10.0, 45.0], [-170.0, 45.0]), expected, strict=True):
                line = near_centre(np.array([lonlat, lonlat]), centre_longitude(raster))
                np.testing.assert_allclose(raster.georef.lonlat_to_pixel(line)[0], pixel)


def test_outputs_that_are_inputs_are_refused_before_any_work(tmp_path, capsys):
    """An output name (summary.json, summary.csv, <stem>.geojson, the lock file) that is the
    seeds file, an image or an evidence raster, by name or through a link: refused, nothing
    written or replaced."""
    from core.batch import LOCK_FILE

    images, seeds = make_folder(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("summary.json", "summary.csv", "geo.geojson", LOCK_FILE):
        taken = out / name
        shutil.copy(seeds, taken)
        code, err = batch(capsys, images, taken, out, "--workers", "1")
        assert code == 2
        assert err.splitlines() == [
            f"error: output {taken} is the input {taken}: writing it would destroy the input; "
            "choose another file"]
        assert taken.read_bytes() == seeds.read_bytes()
        assert {path.name for path in out.iterdir()} <= {name, LOCK_FILE}
        taken.unlink()
    maps = tmp_path / "maps"
    maps.mkdir()
    shutil.copy(images / "world.png", maps / "world.png")
    for link, target, extra in (("plain.geojson", images / "plain.png", ()),
                                ("world.geojson", maps / "world.png",
                                 ("--score", "evidence", "--evidence-dir", maps))):
        before = target.read_bytes()
        (out / link).symlink_to(target)
        code, err = batch(capsys, images, seeds, out, "--workers", "1", *extra)
        assert code == 2
        assert err.splitlines()[-1] == (
            f"error: output {out / link} is the input {target}: writing it would destroy the "
            "input; choose another file")
        assert target.read_bytes() == before
        assert not (out / SUMMARY_JSON).exists()
        (out / link).unlink()


def test_non_finite_numbers_in_seed_properties_are_written_as_null(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    document = json.loads(seeds.read_text())
    document["features"][1]["properties"].update(
        {"x": float("nan"), "more": [float("inf"), {"y": -float("inf")}], "ok": 1.5})
    seeds.write_text(json.dumps(document))  # NaN, Infinity: what Python's reader accepts
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--quiet")
    assert (code, err) == (0, "")
    assert {path.name for path in out.glob("*.geojson")} == {
        "geo.geojson", "plain.geojson", "world.geojson"}
    summary, rows = read_summary(out)
    assert summary["totals"]["ok"] == 3

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    plain = json.loads((out / "plain.geojson").read_text(), parse_constant=refuse)
    properties = {f["properties"]["seed"]: f["properties"]["seed_properties"]
                  for f in plain["features"]}
    assert properties["#1"] == {"image": "plain.png", "x": None, "more": [None, {"y": None}],
                                "ok": 1.5}


def test_empty_paths_are_refused(tmp_path, capsys, monkeypatch):
    images, seeds = make_folder(tmp_path)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)  # where an empty path would read or write
    for arguments, message in (
            ((images, seeds, ""), "error: empty output path"),
            (("", seeds, "out"), "error: empty images folder path"),
            ((images, "", "out"), "error: empty seeds file path"),
            ((images, seeds, "out", "--evidence-dir", ""), "error: empty evidence folder path")):
        code, err = batch(capsys, *arguments)
        assert (code, err.splitlines()) == (2, [message])
        assert os.listdir(here) == []


def test_a_folder_without_images_is_refused(tmp_path, capsys):
    _, seeds = make_folder(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not an image")
    out = tmp_path / "out"
    code, err = batch(capsys, empty, seeds, out)
    assert code == 2
    assert err.splitlines() == [f"error: no images in {empty} (batch reads the files ending in "
                                ".png, .jpg, .jpeg, .tif, .tiff, .jp2, .j2k)"]
    assert not out.exists()


def test_feature_ids_that_are_not_strings_or_numbers_are_bad_seeds(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    document = json.loads(seeds.read_text())
    document["features"][1]["id"] = [1]
    document["features"][3]["id"] = {"a": 1}
    seeds.write_text(json.dumps(document))
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out, "--workers", "1", "--quiet")
    assert code == 1
    summary, _ = read_summary(out)
    assert [failure["seed"] for failure in summary["seed_failures"]] == ["#1", "#3"]
    assert all("string or number" in failure["reason"] for failure in summary["seed_failures"])
    assert summary["totals"]["ok"] == 3
    assert err.startswith("bad seed #1: id [1] is not a string or number (RFC 7946)\n")


def test_a_feature_collection_whose_features_are_no_list(tmp_path, capsys):
    images, seeds = make_folder(tmp_path)
    seeds.write_text(json.dumps({"type": "FeatureCollection", "features": {"a": 1}}))
    out = tmp_path / "out"
    code, err = batch(capsys, images, seeds, out)
    assert code == 2
    assert err.count("\n") == 1
    assert '"features" must be a list' in err
    assert not out.exists()


def test_the_up_front_check_refuses_what_tracing_refuses(monkeypatch):
    """The surface kind's window needs its model's memory (900 B/px here), more than the
    170 B/px of the kinds without it: a plan over the budget for it is refused before any
    image is read, with the message each trace would give."""
    from core.raster import Raster
    from core.tracer import trace

    monkeypatch.setenv("ROADTRACER_MEMORY_BUDGET", "5M")  # 11 600 px: 1.9 MiB at 170 B/px
    params = TraceParams(score="surface", halfwidth=40.0)
    with pytest.raises(BadParameter) as up_front:
        core.batch.check_params(params)
    raster = Raster(pixels=np.zeros((200, 200, 3), dtype=np.float32))
    with pytest.raises(BadParameter) as traced:
        trace(raster, (50.0, 100.0), (150.0, 100.0), params, CpuBackend())
    assert str(up_front.value) == str(traced.value)
    assert str(up_front.value) == ("a corridor window of 1.16e+04 px (halfwidth 40, sigma 1.5, "
                                   "score surface) needs 9.9 MiB (10.2 MiB in all), over the "
                                   "memory budget of 5.0 MiB (ROADTRACER_MEMORY_BUDGET=5M): "
                                   "lower halfwidth")
    core.batch.check_params(TraceParams(score="cross", halfwidth=40.0))  # 1.8 MiB: fits


def test_a_ground_resolution_out_of_range_is_refused_up_front():
    with pytest.raises(BadParameter, match="ground resolution 0 m per pixel, outside"):
        core.batch.check_params(TraceParams(ground_resolution=0.0))
