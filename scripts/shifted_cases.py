"""Copy a cases file onto changed imagery: every image resampled to another resolution, turned
grey, or hazed, the clicks and true lines moved with it. Tracing the copy with ``eval`` shows how
the tracer holds on imagery unlike the images it was trained on (another ground resolution, a
panchromatic sensor, a hazy or low-contrast scene).

Usage:

    python scripts/shifted_cases.py resources/eval/roads/cases.json OUT --scale 0.5
    python scripts/shifted_cases.py resources/eval/roads/cases.json OUT --colour grey
    roadtracer eval OUT/cases.json --method all --json shifted.json

Completeness radii (3 px, 5 px) are then in the changed images' pixels: at ``--scale 2`` the
same 3 px are half as far on the ground as before.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter, TraceError  # noqa: E402
from core.evaluate import load_cases  # noqa: E402
from core.output import new_folder  # noqa: E402
from core.raster import load_image  # noqa: E402

#: Colour changes: name → function of an image (rows, cols, bands) float in [0, 1].
COLOURS = {
    # Panchromatic: the mean of the bands, one band.
    "grey": lambda image: image.mean(axis=2, keepdims=True),
    # Haze: contrast compressed toward a bright, bluish veil.
    "haze": lambda image: 0.45 + 0.35 * image ** 0.7 + np.array([0.0, 0.02, 0.06])[:image.shape[2]],
}
#: Resolution changes allowed (image px per original px).
SCALE_RANGE = (0.25, 4.0)


def scaled_point(points: np.ndarray, scale: float) -> np.ndarray:
    """Pixel positions (..., 2) (x, y; pixel centres at integers) after resampling by ``scale``."""
    return (np.asarray(points, dtype=np.float64) + 0.5) * scale - 0.5


def resample(image: np.ndarray, scale: float) -> np.ndarray:
    """``image`` (rows, cols, bands) float in [0, 1] resampled by ``scale`` (anti-aliased when
    shrinking): (round(rows · scale), round(cols · scale), bands)."""
    from skimage.transform import rescale

    return rescale(image, scale, order=3, anti_aliasing=scale < 1, channel_axis=2,
                   mode="reflect")


def shifted_image(image: np.ndarray, scale: float, colour: str | None) -> np.ndarray:
    """The changed copy of an 8-bit image (rows, cols[, bands]) as 8-bit (rows', cols', bands')."""
    values = np.atleast_3d(np.asarray(image, dtype=np.float64))[:, :, :3] / 255.0
    if scale != 1.0:
        values = resample(values, scale)
    if colour is not None:
        values = COLOURS[colour](values)
    return np.round(np.clip(values, 0.0, 1.0) * 255).astype(np.uint8)


def shift_cases(cases_path: str, out: str, scale: float = 1.0, colour: str | None = None) -> int:
    """Write ``out``/cases.json and ``out``/images/*.png; returns the number of cases.

    Raises
    ------
    BadParameter
        If the cases file is malformed, an image is not 8-bit, ``out`` exists and is not an
        empty folder, or the change is outside its range.
    ImageReadError
        If an image cannot be read.
    """
    if not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        raise BadParameter(f"--scale must lie in [{SCALE_RANGE[0]}, {SCALE_RANGE[1]}], got {scale}")
    if scale == 1.0 and colour is None:
        raise BadParameter("nothing to change: give --scale other than 1 or --colour")
    cases = load_cases(cases_path)
    with new_folder(out, ".shifted-") as partial:
        os.makedirs(os.path.join(partial, "images"))
        names = {}
        for path in dict.fromkeys(case.image for case in cases):  # each image once, in order
            name = f"images/{len(names):03d}_{Path(path).stem}.png"
            shifted = shifted_image(_read_8bit(path), scale, colour)
            iio.imwrite(os.path.join(partial, name),
                        shifted[:, :, 0] if shifted.shape[2] == 1 else shifted)
            names[path] = name
        _write_cases(os.path.join(partial, "cases.json"), cases, names, scale)
    return len(cases)


def _read_8bit(path: str) -> np.ndarray:
    """The image's pixels as the tracer reads them (:func:`core.raster.load_image`: alpha
    dropped), as 8-bit values (rows, cols, bands) uint8.

    Raises
    ------
    ImageReadError
        If the file is missing, is no image this program reads, or is damaged.
    BadParameter
        If its values are not 8-bit ones, or decoding it would need more than the memory
        budget.
    """
    with load_image(path) as raster:
        values = raster.pixels * np.float32(255)
    levels = np.round(values)
    if levels.min() < 0 or levels.max() > 255 or np.abs(values - levels).max() > 1e-3:
        raise BadParameter(f"image {path} is not an 8-bit image (this script shifts 8-bit "
                           f"images only)")
    return levels.astype(np.uint8)


def _write_cases(path: str, cases, names: dict[str, str], scale: float) -> None:
    """The cases file of the shifted copy: image names from ``names``, points scaled, a ground
    resolution (where the case gives one) divided by the scale."""
    records = [{"id": case.id, "image": names[case.image],
                "a": scaled_point(case.a, scale).round(3).tolist(),
                "b": scaled_point(case.b, scale).round(3).tolist(),
                "gt": scaled_point(case.gt, scale).round(3).tolist(),
                "tags": list(case.tags),
                **({} if case.ground_resolution is None
                   else {"ground_resolution": case.ground_resolution / scale})}
               for case in cases]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(records, handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", help="a cases file (the format of resources/eval/*/cases.json)")
    parser.add_argument("out", help="an empty or new folder")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="resample every image by this factor (0.5: half the resolution)")
    parser.add_argument("--colour", choices=sorted(COLOURS), help="change the colours")
    args = parser.parse_args(argv)
    try:
        count = shift_cases(args.cases, args.out, args.scale, args.colour)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{count} cases written to {os.path.join(args.out, 'cases.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
