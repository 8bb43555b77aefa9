"""Click cases made from the lines of the app's sessions: the roads a user traced (and fixed)
teach the surface model that user's imagery, with no road masks.

Each road line of a session (the app's File ▸ Save session: the lines as traced, fixed and
kept) is taken as the true centreline of its road. It is cut into consecutive pieces of
``--min-length`` to ``--max-length`` px along it (random lengths; a rest too short for a piece
of its own joins the last one where that stays within ``--max-length``, a line too short for
one piece is left out); each piece is a click case, its ends the clicks, tagged
``nontrivial`` where the straight line between them has less than 80 % of the piece within
3 px, as scripts/mask_cases.py's cases are. River lines, and pieces that leave the image, are
left out.

``OUT`` (a new or empty folder) receives ``images/ID.png``, each session image's part around
its lines (64 px beyond them; 8-bit RGB, its values stretched linearly to 0..255), the cases in
``cases.json`` (on those images) and ``sources.json`` listing the images without masks, so that
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
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.session import read_session  # noqa: E402
from core.errors import BadParameter, TraceError  # noqa: E402
from core.metrics import path_metrics  # noqa: E402
from core.output import write_text_atomic  # noqa: E402
from core.raster import load_image  # noqa: E402

#: Image margin (px) kept around a session's lines.
MARGIN = 64
#: The straight line's share of a piece within 3 px below which its case is ``nontrivial``.
NONTRIVIAL_BELOW = 0.8
#: Percentiles of an image part's values stretched to 0 and 255.
STRETCH_PERCENTILES = (0.1, 99.9)


def pieces(line: np.ndarray, lengths: tuple[float, float],
           rng: np.random.Generator) -> list[np.ndarray]:
    """Consecutive pieces (each (m, 2)) of the polyline ``line`` (n, 2), ``lengths[0]`` to
    ``lengths[1]`` px along it (module docstring)."""
    along = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    total = float(along[-1])
    cuts = [0.0]
    while total - cuts[-1] >= lengths[0]:
        remaining = total - cuts[-1]
        length = float(rng.uniform(*lengths))
        if remaining - length < lengths[0]:  # the rest would be too short for a piece
            cuts.append(cuts[-1] + min(remaining, lengths[1]))
            break
        cuts.append(cuts[-1] + length)

    def point(at: float) -> np.ndarray:
        return np.array([[np.interp(at, along, line[:, 0]), np.interp(at, along, line[:, 1])]])

    return [np.vstack([point(start), line[(along > start) & (along < end)], point(end)])
            for start, end in zip(cuts[:-1], cuts[1:], strict=True)]


def image_part(raster, lines: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The part of the :class:`core.raster.Raster` around ``lines`` (each (n, 2), on the image;
    MARGIN px beyond them) as 8-bit RGB (rows, cols, 3), and its top-left corner (x, y)."""
    points = np.vstack(lines)
    low = np.maximum(np.floor(points.min(axis=0)) - MARGIN, 0).astype(int)
    high = np.minimum(np.ceil(points.max(axis=0)) + MARGIN + 1,
                      (raster.width, raster.height)).astype(int)
    pixels = raster.read_window(low[1], high[1], low[0], high[0])
    bands = pixels[:, :, :3] if pixels.shape[2] >= 3 else np.repeat(pixels[:, :, :1], 3, axis=2)
    lowest, highest = np.percentile(bands, STRETCH_PERCENTILES)
    scaled = (bands - lowest) * (255.0 / max(float(highest - lowest), 1e-6))
    return np.clip(np.round(scaled), 0, 255).astype(np.uint8), low.astype(np.float64)


def session_cases(sessions: list[str], out: str, lengths: tuple[float, float],
                  seed: int) -> tuple[list[dict], list[dict]]:
    """The cases and the sources.json records of ``sessions`` (module docstring), the image
    parts written under ``out``/images once every session and image has been read."""
    import imageio.v3 as iio

    rng = np.random.default_rng(seed)
    by_image: dict[str, list[np.ndarray]] = {}
    for session in sessions:
        image, lines, _, _ = read_session(session)
        if image is None:
            raise BadParameter(f"session {session} names no image")
        roads = [np.asarray(line.polyline, dtype=np.float64) for line in lines
                 if line.kind == "road"]
        by_image.setdefault(os.path.abspath(image), []).extend(roads)
    cases, sources, parts = [], [], {}
    for image, lines in by_image.items():
        raster = load_image(image)
        size = np.array([raster.width, raster.height], dtype=np.float64)
        cut = [piece for line in lines for piece in pieces(line, lengths, rng)
               if np.all(piece >= -0.5) and np.all(piece <= size - 0.5)]  # on the image
        if not cut:
            continue
        name = Path(image).stem
        while name in parts:
            name += "_"
        parts[name], corner = image_part(raster, cut)
        sources.append({"id": name, "image": f"images/{name}.png", "from": image,
                        "offset_xy": corner.tolist()})
        for k, piece in enumerate(cut):
            piece = piece - corner
            a, b = piece[0], piece[-1]
            nontrivial = path_metrics(np.array([a, b]), piece).completeness_3 < NONTRIVIAL_BELOW
            cases.append({"id": f"{name}_{k:03d}", "image": f"images/{name}.png",
                          "a": np.round(a, 2).tolist(), "b": np.round(b, 2).tolist(),
                          "gt": np.round(piece, 2).tolist(),
                          "tags": ["nontrivial"] if nontrivial else [],
                          "meta": {"source": name}})
    for name, pixels in parts.items():
        os.makedirs(os.path.join(out, "images"), exist_ok=True)
        iio.imwrite(os.path.join(out, "images", f"{name}.png"), pixels)
    return cases, sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sessions", nargs="+", help="session files saved by the app")
    parser.add_argument("--out", required=True, help="a new or empty folder")
    parser.add_argument("--min-length", type=float, default=60.0,
                        help="shortest case along the road, px (default 60)")
    parser.add_argument("--max-length", type=float, default=400.0,
                        help="longest case along the road, px (default 400)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if not 2 <= args.min_length <= args.max_length / 2:
            raise BadParameter("need 2 <= --min-length <= half of --max-length, got "
                               f"{args.min_length:g} and {args.max_length:g}")
        if os.path.exists(args.out) and (not os.path.isdir(args.out) or os.listdir(args.out)):
            raise BadParameter(f"--out {args.out} must be a new or empty folder")
        cases, sources = session_cases(args.sessions, args.out,
                                       (args.min_length, args.max_length), args.seed)
        if not cases:
            raise BadParameter(f"no road line of {args.min_length:g} px or more on its image "
                               "in the sessions")
        write_text_atomic(os.path.join(args.out, "sources.json"), json.dumps(sources, indent=1))
        write_text_atomic(os.path.join(args.out, "cases.json"), json.dumps(cases))
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the image parts could not be written
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    hard = sum("nontrivial" in case["tags"] for case in cases)
    images = f"{len(sources)} image" + ("s" if len(sources) != 1 else "")
    print(f"{len(cases)} cases ({hard} nontrivial) on {images} written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
