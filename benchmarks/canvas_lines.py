"""Canvas drawing of many lines: how long the picture of the lines takes after a zoom.

Builds an offscreen canvas (``QT_QPA_PLATFORM=offscreen``) of ``--size`` on a blank image of
``--image`` px square, loads ``--lines`` synthetic traced lines into it — each 100–600 px
long, 0.5 px between vertices as the tracer makes them, in one to four traced segments whose
link scores vary along them (all the score colours), every fourth ending in a straight
segment, every third a river — spread over the image, and fits the image to the view (all
lines in view, a few screen px each). Then it times the picture of the lines
(:class:`app.canvas.LinesLayer`, the view and its margin) drawn anew three times: once the
lines are loaded and the image fitted (as after an import), after one wheel notch of zoom
in (× 1.2; at the default sizes within the same doubling of the zoom, so the lines' strokes
are reused), and after a zoom in × 2 (the next doubling: every line's strokes built again).

For each it reports the time to the first slice (the viewport repainted at once, the first
lines drawn), the time until the lines in view show (the picture's part in view drawn) and
until the whole picture (and its margin) is drawn, the longest stall of the event
loop meanwhile (the longest gap between two turns of a zero-interval timer, or the first
slice's repaint), the longest garbage-collector pause (the collector's first full pass over
the lines just loaded comes in one of them), and the slices taken.

Usage: ``python benchmarks/canvas_lines.py [--lines N] [--seed S] [--size WxH] [--image PX]
[--json OUT]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.canvas import Canvas  # noqa: E402
from app.display import display_pyramid  # noqa: E402
from app.jobs import JobQueue  # noqa: E402
from app.model import Line, LinesModel, Segment  # noqa: E402
from app.tracing import TracingController  # noqa: E402
from cli.bench_cmd import machine_description  # noqa: E402
from core.tracer import TraceParams  # noqa: E402

#: Px between consecutive vertices of a traced segment, as the tracer makes them.
VERTEX_SPACING = 0.5
#: One wheel notch (``Canvas.wheelEvent``: 1.0015 per eighth of a degree, 120 a notch).
WHEEL_NOTCH = 1.0015 ** 120
#: Seconds after which a drawing that has not finished is given up as too slow.
GIVE_UP_S = 600.0


def synthetic_line(line_id: int, rng: np.random.Generator, image_px: int) -> Line:
    """A line 100–600 px long wandering smoothly from a random point of the image: one to
    four traced segments of vertices :data:`VERTEX_SPACING` apart with link scores varying
    along them, every fourth line ending in a straight segment, every third a river."""
    length = rng.uniform(100.0, 600.0)
    steps = int(length / VERTEX_SPACING)
    heading = rng.uniform(0, 2 * np.pi) + np.cumsum(rng.normal(0, 0.03, steps))
    start = rng.uniform(0.05 * image_px, 0.95 * image_px, 2)
    moves = VERTEX_SPACING * np.column_stack([np.cos(heading), np.sin(heading)])
    path = np.vstack([start, start + np.cumsum(moves, axis=0)])
    cuts = np.sort(rng.choice(np.arange(20, steps - 20), rng.integers(0, 4), replace=False))
    bounds = [0, *cuts.tolist(), steps]
    segments = []
    for first, last in zip(bounds[:-1], bounds[1:], strict=True):
        polyline = path[first:last + 1].copy()
        lengths = np.hypot(*np.diff(polyline, axis=0).T)
        scores = np.sin(np.arange(len(lengths)) / 40.0 + line_id) * lengths
        segments.append(Segment(polyline, scores, float(scores.sum()), TraceParams(),
                                TraceParams(), "cpu"))
    if line_id % 4 == 0:
        end = path[-1] + rng.normal(0, 30.0, 2)
        segments.append(Segment.straight(tuple(path[-1]), tuple(end)))
    anchors = (tuple(path[0]), *(tuple(s.polyline[-1]) for s in segments))
    return Line(line_id, f"line {line_id}", "river" if line_id % 3 == 0 else "road", anchors,
                tuple(segments))


def loaded_canvas(lines: int, seed: int, size: tuple[int, int], image_px: int) -> Canvas:
    """A shown canvas of ``size`` on a blank image of ``image_px`` square (a small overview
    standing for it) with ``lines`` synthetic lines, fitted, nothing painted yet."""
    model = LinesModel()
    canvas = Canvas(model, TracingController(model, JobQueue()))
    canvas.resize(*size)
    canvas.show()
    overview = max(1, image_px // 512)
    canvas.set_image(display_pyramid(np.full((image_px // overview, image_px // overview, 3),
                                             0.5, np.float32), base_factor=overview))
    QApplication.processEvents()  # shown, the image painted
    rng = np.random.default_rng(seed)
    model.reset(tuple(synthetic_line(i + 1, rng, image_px) for i in range(lines)))
    return canvas


def view_drawn(canvas: Canvas) -> bool:
    """Whether the picture of the lines shown is of the view, no new one being drawn (parts
    of its margin may be left)."""
    layer, viewport = canvas._lines, canvas.viewport()
    return (not layer._stale and (layer._job is None or layer._job.pixels is not None)
            and layer._shown is not None
            and layer._shown.shows(canvas.viewportTransform(), viewport.rect(),
                                   viewport.devicePixelRatioF()))


def picture_done(canvas: Canvas) -> bool:
    """Whether the picture of the lines shown is of the view, and drawn to the end."""
    return view_drawn(canvas) and canvas._lines._job is None


def time_drawing(canvas: Canvas, change) -> dict[str, float]:
    """Times the picture of the lines drawn anew after ``change()`` (a zoom): the first
    slice, the whole picture, the longest event-loop stall and garbage-collector pause (s),
    and the slices."""
    app = QApplication.instance()
    pauses, started = [], {}

    def collector(phase: str, info: dict) -> None:
        if phase == "start":
            started["at"] = time.perf_counter()
        elif "at" in started:
            pauses.append(time.perf_counter() - started.pop("at"))

    slices = [1]  # the first, in the repaint; then one a timeout of the layer's timer

    def count_slice() -> None:
        slices[0] += 1

    canvas._lines._timer.timeout.connect(count_slice)
    gc.callbacks.append(collector)
    try:
        start = time.perf_counter()
        change()
        canvas.viewport().repaint()  # the first slice, at once
        first = time.perf_counter() - start
        turns, view = [time.perf_counter()], []
        loop = QEventLoop()

        def turn() -> None:
            turns.append(time.perf_counter())
            if not view and view_drawn(canvas):
                view.append(turns[-1] - start)
            if picture_done(canvas) or turns[-1] - start > GIVE_UP_S:
                loop.quit()

        heartbeat = QTimer(interval=0)
        heartbeat.timeout.connect(turn)
        heartbeat.start()
        loop.exec()
        heartbeat.stop()
        whole = time.perf_counter() - start
        app.processEvents()  # the last slice's repaint
    finally:
        gc.callbacks.remove(collector)
        canvas._lines._timer.timeout.disconnect(count_slice)
    if not picture_done(canvas):
        raise RuntimeError(f"the picture was not drawn within {GIVE_UP_S:.0f} s")
    return {"first_slice_s": first, "view_drawn_s": view[0] if view else first,
            "whole_picture_s": whole,
            "longest_stall_s": max(first, float(np.diff(turns).max(initial=0.0))),
            "longest_gc_pause_s": max(pauses, default=0.0), "slices": slices[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10000, help="synthetic lines loaded")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic lines")
    parser.add_argument("--size", default="1280x800", help="canvas size WxH, px")
    parser.add_argument("--image", type=int, default=20000, help="image side, px")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    width, _, height = args.size.partition("x")
    if args.lines < 1 or args.image < 1000 or not (width.isdigit() and height.isdigit()):
        parser.error("--lines must be at least 1, --image 1000, --size WxH")
    app = QApplication.instance() or QApplication([])  # noqa: F841 (alive while drawing)
    began = time.perf_counter()
    canvas = loaded_canvas(args.lines, args.seed, (int(width), int(height)), args.image)
    load_s = time.perf_counter() - began
    results = {"lines loaded, fit": time_drawing(canvas, canvas.fit),
               "zoom in one notch": time_drawing(canvas, lambda: canvas.zoom(WHEEL_NOTCH)),
               "zoom in x 2": time_drawing(canvas, lambda: canvas.zoom(2.0))}
    vertices = sum(len(s.polyline) for line in canvas.model.lines for s in line.segments)
    print(f"machine: {machine_description()}\n{args.lines} lines ({vertices} vertices) on a "
          f"{args.image} px image, canvas {width}x{height}, loaded in {load_s:.2f} s")
    print(f"{'after':<18} {'first slice':>12} {'view drawn':>11} {'whole picture':>14} "
          f"{'longest stall':>14} {'longest GC':>11} {'slices':>7}")
    for name, figures in results.items():
        print(f"{name:<18} {1e3 * figures['first_slice_s']:>9.0f} ms "
              f"{figures['view_drawn_s']:>9.2f} s {figures['whole_picture_s']:>12.2f} s "
              f"{1e3 * figures['longest_stall_s']:>11.0f} ms "
              f"{1e3 * figures['longest_gc_pause_s']:>8.0f} ms {figures['slices']:>7}")
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine_description(), "lines": args.lines,
                                         "seed": args.seed, "size": args.size,
                                         "image_px": args.image, "vertices": vertices,
                                         "load_s": load_s, "results": results}, indent=2))
    canvas.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
