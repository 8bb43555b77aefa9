"""Click cases made from road masks: two clicks on a road and its true centreline between them,
to measure the tracer on one's own imagery (``roadtracer eval``) or to teach the surface model
one's imagery (``scripts/train_surface_model.py --cases``).

The folder is laid out like the project's training images: ``FOLDER/sources.json`` lists
``{"id", "image", "gt"}`` records (paths relative to the folder, ids unique; ``gt`` a mask of
the image's size, read by ``core.teaching.read_mask``: a two-valued mask (0/1, 0/255, 0/65535)
marks road where it is not 0, a graded one (JPEG noise) where it is at least half its range; an
optional ``gsd_m``, the imagery's metres per pixel). Each mask is
cleaned of specks and holes and thinned to its centrelines (scikit-image's ``skeletonize``);
per image, up to ``--per-image`` cases (a share ``--nontrivial-share`` of them nontrivial,
where the roads allow) join two random centreline pixels by the shortest way
along the centrelines (``skimage.graph.MCP_Geometric``), ``--min-length`` to ``--max-length``
px long, its pixel chain smoothed (Gaussian, σ 2.5 px) so that it runs down the middle of the
road rather than along the thinning's staircase. A case is tagged ``nontrivial`` where the
straight line from a to b has less than 80 % of it within 3 px
(``core.teaching.is_nontrivial``), as the measured cases are. Cases go to ``--out`` (image
paths relative to its folder, each case's image id in ``meta.source``). Each image's count of
cases is reported on stderr as it is done, with a warning for an image that gives none; where
no image gives one, nothing is written (exit 2).

Usage:

    python scripts/mask_cases.py MY_ROADS --out MY_ROADS/cases.json --per-image 20
    roadtracer eval MY_ROADS/cases.json --method all
    python scripts/train_surface_model.py --roads ROADS_TRAIN --roads MY_ROADS \\
        --cases ROAD_CASES.json --cases MY_ROADS/cases.json ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter, TraceError  # noqa: E402
from core.output import (  # noqa: E402
    json_number,
    read_json,
    refuse_overwriting_input,
    shortened,
    write_text_atomic,
)
from core.raster import load_image  # noqa: E402
from core.teaching import (  # noqa: E402
    add_case_options,
    check_case_options,
    check_unique_ids,
    is_nontrivial,
    read_mask,
)

#: Mask specks and holes smaller than this (px) are cleaned away before thinning.
SPECK_PIXELS = 150
#: Smoothing of a case's centreline chain (px).
SMOOTHING_SIGMA = 2.5
#: Random clicks tried per case wanted before an image gives up.
TRIES_PER_CASE = 20
#: A case follows one road as a user clicks it: its centreline's heading, taken every
#: ``TURN_STEP`` px, turns by at most ``MOST_TURN_DEG`` over two such steps (no corner taken at
#: a junction) and by at most ``MOST_TOTAL_TURN_DEG`` in all.
TURN_STEP, MOST_TURN_DEG, MOST_TOTAL_TURN_DEG = 10, 45.0, 100.0
#: Most cases asked of one image: each takes up to ``TRIES_PER_CASE`` shortest-path searches
#: (each over the window a case can reach) and a few hundred cases cover an image's roads many
#: times over.
MOST_PER_IMAGE = 500


def without_specks(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool with its 8-connected parts of at most ``SPECK_PIXELS`` px removed."""
    from scipy.ndimage import label

    parts, _ = label(mask, structure=np.ones((3, 3)))
    kept = np.bincount(parts.ravel()) > SPECK_PIXELS
    kept[0] = False
    return kept[parts]


def centrelines(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool road mask → (H, W) bool centreline pixels of its roads, specks and small
    holes cleaned away first."""
    from skimage.morphology import skeletonize

    return skeletonize(without_specks(~without_specks(~mask)))


def smooth_chain(chain: np.ndarray) -> np.ndarray:
    """A (n, 2) pixel chain (x, y) resampled every 1 px and smoothed, its ends kept."""
    from scipy.ndimage import gaussian_filter1d

    steps = np.hypot(*np.diff(chain, axis=0).T)
    along = np.concatenate([[0.0], np.cumsum(steps)])
    samples = np.linspace(0.0, along[-1], max(int(np.ceil(along[-1])) + 1, 2))
    line = np.stack([np.interp(samples, along, chain[:, k]) for k in (0, 1)], axis=1)
    if len(line) >= 7:
        line = gaussian_filter1d(line, SMOOTHING_SIGMA, axis=0, mode="nearest")
        line[0], line[-1] = chain[0], chain[-1]
    return line


def follows_one_road(line: np.ndarray) -> bool:
    """Whether a smoothed centreline (n, 2), sampled every 1 px, turns as one road does (see
    ``MOST_TURN_DEG``)."""
    points = line[np.unique(np.r_[np.arange(0, len(line), TURN_STEP), len(line) - 1])]
    heading = np.unwrap(np.arctan2(*np.diff(points, axis=0)[:, ::-1].T))
    local = np.abs(heading[2:] - heading[:-2]) if len(heading) > 2 else np.zeros(1)
    total = np.abs(np.diff(heading)).sum()
    return bool(np.degrees(local.max()) <= MOST_TURN_DEG
                and np.degrees(total) <= MOST_TOTAL_TURN_DEG)


def image_cases(skeleton: np.ndarray, count: int, most_straight: int,
                lengths: tuple[float, float], rng: np.random.Generator) -> list[tuple]:
    """Up to ``count`` (a, b, centreline, nontrivial) of one image's centrelines ``skeleton``
    (H, W) bool: a and b (2,), the centreline (n, 2) between them (x = column, y = row) and
    whether a straight line misses it; at most ``most_straight`` of them not nontrivial."""
    from scipy.ndimage import convolve
    from skimage.graph import MCP_Geometric

    neighbours = convolve(skeleton.astype(np.int32), np.ones((3, 3), np.int32), mode="constant")
    inner = skeleton & (neighbours == 3)  # on a road, not at a junction or an end
    pixels = np.argwhere(inner)
    if len(pixels) < 2:
        return []
    costs = np.where(skeleton, 1.0, -1.0)  # negative: impassable
    # A way of at most lengths[1] px stays within that many px of its start (each step moves at
    # most 1 px along a side and costs at least 1): the search runs in that window alone.
    span = int(math.ceil(lengths[1])) + 1
    found, used, straight = [], set(), 0
    for _ in range(count * TRIES_PER_CASE):
        if len(found) == count:
            break
        start = tuple(pixels[rng.integers(len(pixels))])
        corner = np.maximum(np.asarray(start) - span, 0)
        window = (slice(corner[0], start[0] + span + 1), slice(corner[1], start[1] + span + 1))
        walker = MCP_Geometric(costs[window], fully_connected=True)
        distance, _ = walker.find_costs([tuple(np.asarray(start) - corner)])
        reach = np.argwhere((distance >= lengths[0]) & (distance <= lengths[1])
                            & inner[window]) + corner
        if len(reach) == 0:
            continue
        end = tuple(reach[rng.integers(len(reach))])
        if (start, end) in used or (end, start) in used:
            continue
        used.add((start, end))
        chain = np.asarray(walker.traceback(tuple(np.asarray(end) - corner)),
                           dtype=np.float64)[:, ::-1] + corner[::-1]
        line = smooth_chain(chain)
        if not follows_one_road(line):
            continue
        a, b = chain[0], chain[-1]
        nontrivial = is_nontrivial(a, b, line)
        if not nontrivial:
            if straight == most_straight:
                continue
            straight += 1
        found.append((a, b, line, nontrivial))
    return found


def make_cases(folder: str, out: str, per_image: int, nontrivial_share: float,
               lengths: tuple[float, float], seed: int, log=None) -> list[dict]:
    """The cases of every image of ``folder``'s sources.json (module docstring); ``log``
    (a function of one line, e.g. ``print`` to stderr) hears of each image as it is done.

    Raises
    ------
    BadParameter
        If the sources file, an image or a mask is wrong, or no image gives a case.
    """
    log = log or (lambda line: None)
    sources = read_json(os.path.join(folder, "sources.json"), "sources file")
    if not isinstance(sources, list) or not all(
            isinstance(item, dict) and all(isinstance(item.get(key), str) and item[key]
                                           for key in ("id", "image", "gt"))
            for item in sources):
        raise BadParameter(f"{folder}/sources.json must be a list of "
                           '{"id", "image", "gt"} records (non-empty strings)')
    if not sources:
        raise BadParameter(f"{folder}/sources.json lists no images")
    check_unique_ids(sources, f"{folder}/sources.json")
    for source in sources:
        ground = source.get("gsd_m")
        metres = json_number(ground)
        if ground is not None and (metres is None or metres <= 0):
            raise BadParameter(f"{folder}/sources.json: gsd_m of {source['id']!r} must be a "
                               f"positive number of metres per pixel, got {shortened(ground)}")
    inputs = [os.path.join(folder, "sources.json")] + [
        os.path.join(folder, source[key]) for source in sources for key in ("image", "gt")]
    refuse_overwriting_input(out, inputs, "--out")
    rng = np.random.default_rng(seed)
    out_folder = os.path.dirname(os.path.abspath(out))
    cases, barren = [], []
    for number, source in enumerate(sources, 1):
        image = os.path.join(folder, source["image"])
        raster = load_image(image)
        size = (raster.height, raster.width)
        mask = read_mask(os.path.join(folder, source["gt"]))
        if mask.shape != size:
            raise BadParameter(f"mask of {source['id']} is {mask.shape[1]}×{mask.shape[0]} px, "
                               f"its image {size[1]}×{size[0]}")
        skeleton = centrelines(mask)
        most_straight = per_image - int(round(nontrivial_share * per_image))
        drawn = image_cases(skeleton, per_image, most_straight, lengths, rng)
        log(f"image {number}/{len(sources)} {source['id']}: {len(drawn)} cases "
            f"({len(cases) + len(drawn)} so far)")
        if not drawn:
            why = ("its mask marks no road" if not mask.any() else
                   f"no road of its mask runs {lengths[0]:g} px or more")
            log(f"warning: {source['id']} gives no case: {why} ({source['gt']})")
            barren.append(source["id"])
        for k, (a, b, line, nontrivial) in enumerate(drawn):
            case = {"id": f"{source['id']}_{k:02d}",
                    "image": os.path.relpath(os.path.abspath(image), out_folder),
                    "a": a.tolist(), "b": b.tolist(), "gt": np.round(line, 1).tolist(),
                    "tags": ["nontrivial"] if nontrivial else [],
                    "meta": {"source": source["id"]}}
            if source.get("gsd_m") is not None:
                case["ground_resolution"] = float(source["gsd_m"])
            cases.append(case)
    if not cases:
        raise BadParameter(f"no image gives a case ({', '.join(barren)}): their masks mark no "
                           f"road (road where the mask is not 0 in a two-valued mask, at least "
                           f"half its range in a graded one) or none of {lengths[0]:g} px or "
                           "more")
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="folder with sources.json, images and road masks")
    parser.add_argument("--out", required=True, help="cases file to write (JSON)")
    parser.add_argument("--per-image", type=int, default=10, help="cases per image (default 10)")
    parser.add_argument("--nontrivial-share", type=float, default=0.5,
                        help="share of each image's cases that a straight line misses, where "
                             "its roads have them (default 0.5)")
    add_case_options(parser)
    args = parser.parse_args(argv)
    try:
        if args.per_image < 1:
            raise BadParameter(f"--per-image must be at least 1, got {args.per_image}")
        if args.per_image > MOST_PER_IMAGE:
            raise BadParameter(f"--per-image must be at most {MOST_PER_IMAGE} (more only repeat "
                               f"an image's roads; add images instead), got {args.per_image}")
        if not 0 <= args.nontrivial_share <= 1:
            raise BadParameter(f"--nontrivial-share must be 0 to 1, got {args.nontrivial_share}")
        check_case_options((args.min_length, args.max_length), args.seed)
        cases = make_cases(args.folder, args.out, args.per_image, args.nontrivial_share,
                           (args.min_length, args.max_length), args.seed,
                           lambda line: print(line, file=sys.stderr, flush=True))
        write_text_atomic(args.out, json.dumps(cases))
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hard = sum("nontrivial" in case["tags"] for case in cases)
    print(f"{len(cases)} cases ({hard} nontrivial) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
