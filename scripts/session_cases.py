"""Click cases made from the lines of the app's sessions: the roads a user traced (and fixed)
teach the surface model that user's imagery, with no road masks.

Each road line of a session (the app's File ▸ Save session: the lines as traced, fixed and
kept) is taken as the true centreline of its road and cut into pieces of ``--min-length`` to
``--max-length`` px, each a click case (core/teaching.py says how; the app's File ▸ Export
training cases does the same for the open image's lines). ``OUT`` (a new or empty folder)
receives ``images/ID.png``, each session image's part around its lines (a part per piece where
they spread wide over a large image), the cases in
``cases.json`` and ``sources.json`` listing the images without masks, so that
scripts/train_surface_model.py learns the clicked road's course alone from them:

    python scripts/session_cases.py SESSION.json [SESSION.json ...] --out LINES
    python scripts/train_surface_model.py --roads LINES --cases LINES/cases.json \\
        --init-from resources/models/surface.onnx --encoder-lr 0 --learning-rate 3e-4 \\
        --steps 300 --match-histograms 0.5 --out MY_MODEL

Keep some sessions out to measure the result with (``roadtracer eval LINES2/cases.json
--surface-model MY_MODEL/surface.onnx``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.session import read_session  # noqa: E402
from core.errors import BadParameter, TraceError  # noqa: E402
from core.raster import load_image  # noqa: E402
from core.teaching import (  # noqa: E402
    add_case_options,
    check_case_options,
    check_new_folder,
    training_set,
    write_training_set,
)


def session_lines(sessions: list[str]) -> dict:
    """Image path → (its raster, the road lines (n, 2) of ``sessions`` on it), every session
    and image read."""
    by_image: dict[str, list[np.ndarray]] = {}
    for session in sessions:
        image, lines, _, _ = read_session(session)
        if image is None:
            raise BadParameter(f"session {session} names no image")
        roads = [np.asarray(line.polyline, dtype=np.float64) for line in lines
                 if line.kind == "road"]
        by_image.setdefault(os.path.abspath(image), []).extend(roads)
    return {image: (load_image(image), lines) for image, lines in by_image.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", nargs="+", help="session files saved by the app")
    parser.add_argument("--out", required=True, help="a new or empty folder")
    add_case_options(parser)
    args = parser.parse_args(argv)
    try:
        check_case_options((args.min_length, args.max_length), args.seed, least_ratio=2)
        check_new_folder(args.out)
        sources, cases, parts = training_set(session_lines(args.sessions),
                                             (args.min_length, args.max_length), args.seed)
        write_training_set(args.out, sources, cases, parts)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hard = sum("nontrivial" in case["tags"] for case in cases)
    images = f"{len(sources)} image" + ("s" if len(sources) != 1 else "")
    print(f"{len(cases)} cases ({hard} nontrivial) on {images} written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
