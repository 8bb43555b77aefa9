"""Oracle evidence for a cases file: each image's true centrelines drawn as a ridge, so that
tracing it measures what the optimiser reaches where the evidence is perfect (its geometric
ceiling: corridor, guides and turn limit), apart from what the surface model sees.

Usage:

    python scripts/truth_ridges.py CASES.json OUT [--sigma PX]
    roadtracer eval CASES.json --score evidence --evidence-dir OUT

One 8-bit PNG per image, named after the image's stem: exp(−d² / 2σ²) of the distance d (px)
to the nearest true centreline of that image's cases (every case of the image on one raster,
as a road map would show them all).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli import fit_stream_encodings  # noqa: E402
from core.errors import BadParameter, TraceError  # noqa: E402
from core.evaluate import load_cases  # noqa: E402
from core.metrics import densify  # noqa: E402
from core.output import new_folder  # noqa: E402
from core.raster import load_image  # noqa: E402

#: Ridge widths allowed (px).
SIGMA_RANGE = (0.5, 10.0)


def ridge_raster(shape: tuple[int, int], lines: list[np.ndarray], sigma: float) -> np.ndarray:
    """The ridge of ``lines`` (each (g, 2), x, y) on a (rows, cols) grid: exp(−d² / 2σ²) of the
    distance to the nearest line, as 8-bit (rows, cols); parts of a line off the grid count
    only where they are on it."""
    rows, cols = shape
    on_line = np.zeros(shape, dtype=bool)
    for line in lines:
        samples, _ = densify(line, 0.5)
        pixels = np.round(samples).astype(np.int64)
        inside = ((pixels[:, 0] >= 0) & (pixels[:, 0] < cols)
                  & (pixels[:, 1] >= 0) & (pixels[:, 1] < rows))
        on_line[pixels[inside, 1], pixels[inside, 0]] = True
    if not on_line.any():
        return np.zeros(shape, dtype=np.uint8)
    distance = ndimage.distance_transform_edt(~on_line)
    return np.round(255 * np.exp(-distance ** 2 / (2 * sigma ** 2))).astype(np.uint8)


def write_ridges(cases_path: str, out: str, sigma: float = 1.5) -> int:
    """Write ``out``/STEM.png for every image of the cases file; returns the number of images.

    Raises
    ------
    BadParameter
        If the cases file is malformed, two images share a stem, ``out`` exists and is not an
        empty folder, or ``sigma`` is outside its range.
    ImageReadError
        If an image cannot be read.
    """
    if not SIGMA_RANGE[0] <= sigma <= SIGMA_RANGE[1]:
        raise BadParameter(f"--sigma must lie in [{SIGMA_RANGE[0]}, {SIGMA_RANGE[1]}] px, "
                           f"got {sigma}")
    lines: dict[str, list[np.ndarray]] = {}
    for case in load_cases(cases_path):
        lines.setdefault(case.image, []).append(case.gt)
    stems: dict[str, str] = {}
    for image in lines:
        other = stems.setdefault(Path(image).stem, image)
        if other != image:
            raise BadParameter(f"images {other} and {image} share the name "
                               f"{Path(image).stem!r}: their ridges would overwrite each other")
    with new_folder(out, ".ridges-") as partial:
        for image, image_lines in lines.items():
            with load_image(image) as raster:
                shape = (raster.height, raster.width)
            iio.imwrite(os.path.join(partial, f"{Path(image).stem}.png"),
                        ridge_raster(shape, image_lines, sigma))
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    fit_stream_encodings()  # the help and tables hold σ and →, which code pages may lack
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", help="a cases file (the format of resources/eval/*/cases.json)")
    parser.add_argument("out", help="an empty or new folder")
    parser.add_argument("--sigma", type=float, default=1.5,
                        help="the ridge's width (px, the Gaussian's σ; default 1.5)")
    args = parser.parse_args(argv)
    try:
        count = write_ridges(args.cases, args.out, args.sigma)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{count} ridge raster(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
