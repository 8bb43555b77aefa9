"""Helpers several test modules share (imported; not fixtures). Each imports what it needs when
called, so that importing this module pulls in neither Qt nor ONNX."""

from __future__ import annotations

import csv
import json


def batch(capsys, images, seeds, out, *extra) -> tuple[int, str]:
    """``batch IMAGES --seeds SEEDS -o OUT`` on the CPU backend, one worker, the ``centre``
    score, then ``extra``: its exit code and what it wrote to stderr."""
    from cli import main as cli_main

    code = cli_main(["batch", str(images), "--seeds", str(seeds), "-o", str(out),
                     "--backend", "cpu", "--workers", "1", "--score", "centre",
                     *map(str, extra)])
    return code, capsys.readouterr().err


def read_summary(out) -> tuple[dict, list[dict]]:
    """A batch output folder's summary.json and the rows of its summary.csv."""
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "summary.csv", newline="", encoding="utf-8-sig") as stream:
        return summary, list(csv.DictReader(stream))


def traced(a, b, score: float = -3.0):
    """A 'traced' :class:`app.model.Segment` a → b through a point 1 px off the chord, of two
    links scoring ``score`` / 3 and 2 ``score`` / 3 (-1 and -2 by default)."""
    import numpy as np

    from app.model import Segment
    from core.tracer import TraceParams

    polyline = np.array([a, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 1), b], dtype=float)
    return Segment(polyline, np.array([1.0, 2.0]) * (score / 3), score, TraceParams(),
                   TraceParams(guides=1, points=5, halfwidth=2.0), "cpu")


def open_and_wait(qtbot, window, path) -> None:
    """Open the image at ``path`` in the app's ``window`` and wait until it is shown and the
    window is idle."""
    from tests.test_app import wait_idle

    with qtbot.waitSignal(window.image_loaded, timeout=60_000):
        assert window.open_image(str(path))
    wait_idle(qtbot, window)


def shifted_model(path, shift):
    """The bundled model with ``shift`` added to its surface logit (its last bias), saved at
    ``path``: a model that reads the imagery differently."""
    import onnx
    from onnx import numpy_helper

    import core.surface

    model = onnx.load(str(core.surface.BUNDLED_MODEL))
    last = model.graph.node[-1]
    bias = next(item for item in model.graph.initializer if item.name == last.input[2])
    values = numpy_helper.to_array(bias).copy()
    values[0] += shift
    bias.CopyFrom(numpy_helper.from_array(values, bias.name))
    onnx.save(model, str(path))
    return path
