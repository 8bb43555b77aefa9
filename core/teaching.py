"""Training cases from traced road lines: the lines a user traced and fixed, as click cases on
the parts of their images around them, to teach the surface model that imagery
(scripts/train_surface_model.py; docs/ACCURACY.md, "Teaching the model a new source").

Each road line is taken as the true centreline of its road and cut into consecutive pieces of
``lengths[0]`` to ``lengths[1]`` px along it (random lengths; a rest too short for a piece of
its own joins the last one where that stays within ``lengths[1]``; a line too short for one
piece, and pieces that leave the image, are left out). Each piece is a click case, its ends
the clicks, tagged ``nontrivial`` where the straight line between them has less than 80 % of
the piece within 3 px, as the evaluation cases are. A training set is a folder:
``images/ID.png`` (each image's part around its lines, 64 px beyond them, 8-bit RGB stretched
linearly to 0..255 (:func:`byte_range`); one part per piece where the lines spread wider than
``MAX_PART_PIXELS``), ``cases.json`` on those parts and ``sources.json`` listing them without
masks (the trainer then learns the clicked road's course alone from them), each with the
image's ground resolution (``gsd_m`` in sources.json, ``ground_resolution`` in the cases) where
its georeferencing gives one.

It also holds what the scripts that teach the model share: the reading of road masks
(:func:`read_mask`) and the check that image ids are unique (:func:`check_unique_ids`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

import numpy as np

from core.errors import BadParameter, OutputWriteError
from core.metrics import path_metrics
from core.output import refuse_empty_path, write_text_atomic
from core.raster import load_image
from core.tracer import GROUND_RESOLUTION_RANGE

#: Shortest and longest click case (px along its road), as the evaluation cases.
CASE_LENGTHS = (60.0, 400.0)
#: Image margin (px) kept around the lines.
MARGIN = 64
#: The straight line's share of a piece within 3 px below which its case is ``nontrivial``.
NONTRIVIAL_BELOW = 0.8
#: Largest image part (px) around all of an image's lines; lines spread wider over a large
#: image (a GeoTIFF) get a part each piece.
MAX_PART_PIXELS = 2048 * 2048
#: Percentiles of an image part's values stretched to 0 and 255.
STRETCH_PERCENTILES = (0.1, 99.9)
#: A graded mask (more than two values: JPEG noise, smoothed edges) marks its surface from this
#: share of its full range up (:func:`read_mask`).
MASK_LEVEL = 0.5


def read_mask(path: str | os.PathLike) -> np.ndarray:
    """A road (or water) mask file's first band as (H, W) bool: True on the surface.

    A mask of two values, 0 and one other (0/1, 0/255 in 8 or 16 bits, 0/65535, a float 0/1
    mask), marks the surface where it holds the other. A graded mask (JPEG noise, smoothed
    edges) marks it where its value is at least ``MASK_LEVEL`` of its full range: of the integer
    type's largest value, or of a float mask's largest value where that is above 1.

    Raises
    ------
    ImageReadError
        If the file is missing, is no image this program reads, or is damaged.
    BadParameter
        If decoding it would need more than the memory budget.
    """
    with load_image(path) as raster:
        values = raster.pixels[:, :, 0]  # integer types scaled to 0..1, floats as they are
    top = float(values.max(initial=0.0))
    if top <= 0:
        return np.zeros(values.shape, dtype=bool)
    if np.all((values == 0) | (values == top)):
        return values == top
    return values >= MASK_LEVEL * max(top, 1.0)


def check_unique_ids(sources: list[dict], where: str,
                     seen: dict[str, str] | None = None) -> None:
    """Check that the ``id`` of each record of ``sources`` (read from the sources file or
    folder ``where``) is named once, there and among ``seen`` (id → where it was named; the
    ids of ``sources`` are added to it): cases name their image by id.

    Raises
    ------
    BadParameter
        Naming the id and where it is named twice.
    """
    seen = {} if seen is None else seen
    mine = set()
    for source in sources:
        name = source["id"]
        if name in mine:
            raise BadParameter(f"{where} names the image id {name!r} twice; ids must be unique")
        if name in seen:
            raise BadParameter(f"the image id {name!r} is named in both {seen[name]} and "
                               f"{where}; ids must be unique (the cases of one would land on "
                               "the other's image): rename one, or make both folders' cases "
                               "in one run of scripts/session_cases.py, which names them apart")
        mine.add(name)
    seen.update(dict.fromkeys(mine, where))


def add_case_options(parser) -> None:
    """Add the case-making options ``--min-length``, ``--max-length`` and ``--seed`` to the
    argparse ``parser`` of a script that makes click cases (:func:`check_case_options` checks
    them)."""
    parser.add_argument("--min-length", type=float, default=CASE_LENGTHS[0],
                        help=f"shortest case along the road, px (default {CASE_LENGTHS[0]:g})")
    parser.add_argument("--max-length", type=float, default=CASE_LENGTHS[1],
                        help=f"longest case along the road, px (default {CASE_LENGTHS[1]:g})")
    parser.add_argument("--seed", type=int, default=0)


def check_case_options(lengths: tuple[float, float], seed: int, least_ratio: float = 1.0
                       ) -> None:
    """Check the case-making options of the scripts that make click cases (``--min-length``,
    ``--max-length``: ``lengths`` in px; ``--seed``): finite lengths with 2 ≤ shortest and
    ``least_ratio`` × shortest ≤ longest (2 where lines are cut into pieces of such lengths,
    :func:`road_pieces`), and a seed of 0 or more.

    Raises
    ------
    BadParameter
        Naming the option that is wrong.
    """
    shortest, longest = lengths
    if not (math.isfinite(shortest) and math.isfinite(longest)):
        raise BadParameter("--min-length and --max-length must be finite, got "
                           f"{shortest:g} and {longest:g}")
    if not 2 <= shortest <= longest / least_ratio:
        bound = "--max-length" if least_ratio == 1 else f"--max-length / {least_ratio:g}"
        raise BadParameter(f"need 2 <= --min-length <= {bound}, got {shortest:g} and "
                           f"{longest:g}")
    if seed < 0:
        raise BadParameter(f"--seed must be 0 or more, got {seed}")


def is_nontrivial(a: np.ndarray, b: np.ndarray, line: np.ndarray) -> bool:
    """Whether the straight line from click ``a`` to ``b`` (2,) has less than
    ``NONTRIVIAL_BELOW`` of the true ``line`` (n, 2) within 3 px: the cases tagged
    ``nontrivial``, as the evaluation cases are."""
    return path_metrics(np.array([a, b]), line).completeness_3 < NONTRIVIAL_BELOW


def road_pieces(line: np.ndarray, lengths: tuple[float, float],
                rng: np.random.Generator) -> list[np.ndarray]:
    """Consecutive pieces (each (m, 2)) of the polyline ``line`` (n, 2) (module docstring)."""
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


def byte_range(bands: np.ndarray) -> np.ndarray:
    """Pixel values (any shape; an image's bands as :func:`core.raster.load_image` reads them,
    8 or 16 bits, float) stretched linearly so that their ``STRETCH_PERCENTILES`` map to 0 and
    255, clipped to 0..255 (float64, not rounded): any imagery on one 8-bit-like scale, its
    levels kept."""
    lowest, highest = np.percentile(bands, STRETCH_PERCENTILES)
    scaled = (bands - lowest) * (255.0 / max(float(highest - lowest), 1e-6))
    return np.clip(scaled, 0, 255)


def image_part(raster, lines: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The part of the :class:`core.raster.Raster` around ``lines`` (each (n, 2), on the image;
    MARGIN px beyond them) as 8-bit RGB (rows, cols, 3) (:func:`byte_range`), and its top-left
    corner (x, y)."""
    points = np.vstack(lines)
    low = np.maximum(np.floor(points.min(axis=0)) - MARGIN, 0).astype(int)
    high = np.minimum(np.ceil(points.max(axis=0)) + MARGIN + 1,
                      (raster.width, raster.height)).astype(int)
    pixels = raster.read_window(low[1], high[1], low[0], high[0])
    bands = pixels[:, :, :3] if pixels.shape[2] >= 3 else np.repeat(pixels[:, :, :1], 3, axis=2)
    return np.round(byte_range(bands)).astype(np.uint8), low.astype(np.float64)


def training_set(lines_by_image: dict, lengths: tuple[float, float] = CASE_LENGTHS,
                 seed: int = 0) -> tuple[list[dict], list[dict], dict[str, np.ndarray]]:
    """The training set of road lines.

    Parameters
    ----------
    lines_by_image : dict
        Image path → (its :class:`core.raster.Raster`, its road lines, each (n, 2) pixel x, y).
    lengths : (float, float)
        Shortest and longest piece (px along a line).
    seed : int
        Seed of the pieces' random lengths.

    Returns
    -------
    sources, cases, parts
        The sources.json records, the cases, and each image part (rows, cols, 3) uint8 by id;
        images with no piece are left out. Where a raster has a ground resolution, its records
        give it (``gsd_m``, its cases ``ground_resolution``), as ``roadtracer eval`` and the
        trainer read it.

    Raises
    ------
    BadParameter
        If no line makes a case (none of ``lengths[0]`` px or more on its image).
    """
    rng = np.random.default_rng(seed)
    sources, cases, parts = [], [], {}
    # Part names taken, case-folded: images/A.png and images/a.png are one file on Windows.
    taken = set()
    for image, (raster, lines) in lines_by_image.items():
        size = np.array([raster.width, raster.height], dtype=np.float64)
        cut = [piece for line in lines
               for piece in road_pieces(np.asarray(line, dtype=np.float64), lengths, rng)
               if np.all(piece >= -0.5) and np.all(piece <= size - 0.5)]  # on the image
        if not cut:
            continue
        stem = Path(image).stem
        for suffix, group in _part_groups(cut):
            name = stem + suffix
            while name.casefold() in taken:
                name += "_"
            taken.add(name.casefold())
            parts[name], corner = image_part(raster, group)
            source = {"id": name, "image": f"images/{name}.png",
                      "from": os.path.abspath(image), "offset_xy": corner.tolist()}
            ground = getattr(raster, "ground_resolution", None)
            if ground is not None and not (GROUND_RESOLUTION_RANGE[0] <= ground
                                           <= GROUND_RESOLUTION_RANGE[1]):
                ground = None  # a georeferencing of absurd pixels: not a ground resolution
            if ground is not None:
                source["gsd_m"] = float(ground)
            sources.append(source)
            for k, piece in enumerate(group):
                piece = piece - corner
                a, b = piece[0], piece[-1]
                case = {"id": f"{name}_{k:03d}", "image": f"images/{name}.png",
                        "a": np.round(a, 2).tolist(), "b": np.round(b, 2).tolist(),
                        "gt": np.round(piece, 2).tolist(),
                        "tags": ["nontrivial"] if is_nontrivial(a, b, piece) else [],
                        "meta": {"source": name}}
                if ground is not None:
                    case["ground_resolution"] = float(ground)
                cases.append(case)
    if not cases:
        raise BadParameter(f"no road line of {lengths[0]:g} px or more on its image")
    return sources, cases, parts


def _part_groups(pieces: list[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
    """The image parts of one image's ``pieces``: one part around all of them (suffix "") where
    it holds at most ``MAX_PART_PIXELS``, else one part per piece (suffix "_p<k>")."""
    points = np.vstack(pieces)
    sides = points.max(axis=0) - points.min(axis=0) + 2 * MARGIN
    if float(sides[0] * sides[1]) <= MAX_PART_PIXELS:
        return [("", pieces)]
    return [(f"_p{k:03d}", [piece]) for k, piece in enumerate(pieces)]


def check_new_folder(out: str | os.PathLike) -> None:
    """Raise :class:`BadParameter` unless ``out`` is a new or an empty folder (an empty path,
    which would name the current folder, is neither)."""
    refuse_empty_path(out, "output folder")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise BadParameter(f"{out} must be a new or empty folder")


def write_training_set(out: str | os.PathLike, sources: list[dict], cases: list[dict],
                       parts: dict[str, np.ndarray]) -> None:
    """Write :func:`training_set`'s result into the new or empty folder ``out``; where that
    fails, what was written is removed again (the folder is left empty).

    Raises
    ------
    BadParameter
        If ``out`` holds files already.
    OutputWriteError
        If a file cannot be written.
    """
    import shutil

    import imageio.v3 as iio

    check_new_folder(out)
    images = os.path.join(out, "images")
    try:
        os.makedirs(images, exist_ok=True)
        for name, pixels in parts.items():
            iio.imwrite(os.path.join(images, f"{name}.png"), pixels)
        write_text_atomic(os.path.join(out, "sources.json"), json.dumps(sources, indent=1))
        write_text_atomic(os.path.join(out, "cases.json"), json.dumps(cases))
    except OSError as exc:  # OutputWriteError is one too
        shutil.rmtree(images, ignore_errors=True)
        for name in ("sources.json", "cases.json"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(out, name))
        if isinstance(exc, OutputWriteError):
            raise
        raise OutputWriteError(f"cannot write {out}: {exc.strerror or exc}") from None
