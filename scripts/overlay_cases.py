"""Pictures of traced cases: the ground truth (yellow), ours (red) and a peer (cyan) over the
image, cropped around the case and enlarged, one PNG per case. With ``--corrected`` (a report
of ``eval --corrections N``), ours as traced and, beside it, ours after the vertices a
simulated user added (white dots) instead of the peer.

Usage:

    python main.py eval resources/eval/roads/cases.json --method all --json report.json
    python scripts/overlay_cases.py report.json resources/eval/roads/cases.json OUT_DIR ID [ID ...]
    python main.py eval resources/eval/roads/cases.json --corrections 2 --json fixed.json
    python scripts/overlay_cases.py fixed.json resources/eval/roads/cases.json OUT_DIR ID \
        --corrected
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter, TraceError  # noqa: E402
from core.evaluate import OURS, RasterCache, read_report, report_cases  # noqa: E402
from core.output import json_number, read_json, refuse_overwriting_input  # noqa: E402

COLOURS = {"truth": (255, 230, 0), "ours": (255, 40, 40), "peer": (0, 230, 255),
           "vertex": (255, 255, 255)}
#: Margin (px) around the case and the size (px) the longer side is enlarged towards.
MARGIN, SIZE = 40, 420
#: Radius (px of the picture) of an added vertex's dot, and the gap between two panels.
DOT, GAP = 5, 8


def corrected_lines(path: str) -> dict[str, dict]:
    """Ours after the simulated user's vertices, per case id (``{"vertices", "polyline"}``),
    from a report of ``eval --corrections``; BadParameter if it has none."""
    document = read_json(path, "report")
    try:
        lines = document["corrections"]["methods"][OURS]["lines"]
    except (KeyError, TypeError):
        lines = None
    if not isinstance(lines, dict) or not all(isinstance(line, dict)
                                              for line in lines.values()):
        raise BadParameter(f"{path} has no corrected lines of ours: make it with eval "
                           "--corrections N --json")
    return lines


def checked_points(points, what: str) -> list | None:
    """``points`` of a report (``[[x, y], …]``; None or empty: nothing to draw) as a list of
    (x, y) floats, or None; BadParameter naming ``what`` where they are not such a list of
    finite numbers."""
    if points is None or points == []:
        return None
    if not isinstance(points, list) or not all(
            isinstance(point, list) and len(point) == 2
            and all(json_number(value) is not None for value in point) for point in points):
        raise BadParameter(f"{what} must be a list of [x, y] pairs of finite numbers")
    return [(float(x), float(y)) for x, y in points]


def check_output_folder(out: str) -> None:
    """Raise BadParameter unless ``out`` names a folder, or nothing yet (it is made)."""
    if not out:
        raise BadParameter("the output folder must be named, got an empty path")
    if os.path.exists(out) and not os.path.isdir(out):
        raise BadParameter(f"output folder {out} exists and is not a folder")


def picture_name(case_id: str) -> str:
    """The file name of case ``case_id``'s picture; BadParameter where the id would make it
    anything but a plain file name in the output folder (``../x``, ``a/b``)."""
    name = f"{case_id}.png"
    if os.path.basename(name) != name or (os.altsep and os.altsep in name):
        raise BadParameter(f"case id {case_id!r} is not a plain file name: its picture would "
                           "be written outside the output folder")
    return name


def case_frame(case, raster) -> tuple:
    """The picture's frame of ``case`` on its image ``raster`` (:func:`drawn`): the image
    around the case's truth, MARGIN px beyond it, as RGB enlarged towards SIZE px, its top-left
    image pixel and the enlargement; BadParameter where the truth lies off the image."""
    xs, ys = case.gt[:, 0], case.gt[:, 1]
    left, top = max(math.floor(xs.min()) - MARGIN, 0), max(math.floor(ys.min()) - MARGIN, 0)
    right = min(math.ceil(xs.max()) + MARGIN, raster.width)
    bottom = min(math.ceil(ys.max()) + MARGIN, raster.height)
    if right <= left or bottom <= top:
        raise BadParameter(f"case {case.id!r}: its ground truth lies outside its image "
                           f"({raster.width}×{raster.height} px)")
    try:
        pixels = raster.read_window(top, bottom, left, right)
    except TraceError as exc:
        raise BadParameter(f"cannot read the image of case {case.id!r}: {exc}") from None
    pixels = pixels[:, :, :3] if pixels.shape[2] >= 3 else np.repeat(pixels[:, :, :1], 3, axis=2)
    crop = Image.fromarray(np.clip(np.rint(255.0 * pixels), 0, 255).astype(np.uint8), "RGB")
    scale = max(1, round(SIZE / max(crop.size)))
    crop = crop.resize((crop.width * scale, crop.height * scale), Image.LANCZOS)
    return crop, (left, top), scale


def drawn(frame: tuple, lines: tuple, dots=()) -> Image.Image:
    """A copy of ``frame``'s picture (its crop, the crop's top-left image pixel and its
    enlargement) with ``lines`` ((colour name, [[x, y], …] or None), …, in image pixels)
    and white dots at ``dots`` drawn over it."""
    crop, (left, top), scale = frame

    def place(x: float, y: float) -> tuple[float, float]:
        return (x - left + 0.5) * scale, (y - top + 0.5) * scale

    picture = crop.copy()
    draw = ImageDraw.Draw(picture)
    for name, points in lines:
        if points:
            draw.line([place(x, y) for x, y in points], fill=COLOURS[name], width=2)
    for x, y in dots:
        cx, cy = place(x, y)
        draw.ellipse([cx - DOT, cy - DOT, cx + DOT, cy + DOT], fill=COLOURS["vertex"],
                     outline=(0, 0, 0))
    return picture


def case_picture(case, frame: tuple, methods: dict, peer: str, fixed: dict | None,
                 report: str) -> Image.Image:
    """The picture of ``case`` on ``frame`` (:func:`case_frame`): the truth, ours and the
    ``peer`` of ``methods`` (:func:`core.evaluate.read_report`), or with ``fixed``
    (:func:`corrected_lines`) ours as traced beside ours after the added vertices;
    BadParameter where a line of the ``report`` is malformed."""
    def line(method: str) -> list | None:
        return checked_points(methods[method][case.id].get("polyline"),
                              f"{report}: the polyline of {method!r} on case {case.id!r}")

    truth = ("truth", case.gt.tolist())
    if fixed is None:
        return drawn(frame, (truth, ("peer", line(peer)), ("ours", line(OURS))))
    after = fixed.get(case.id) or {}
    what = f"{report}: the corrected line of case {case.id!r}"
    left = drawn(frame, (truth, ("ours", line(OURS))))
    right = drawn(frame, (truth, ("ours", checked_points(after.get("polyline"), what))),
                  checked_points(after.get("vertices"), f"{what}: its vertices") or ())
    crop = frame[0]
    picture = Image.new("RGB", (2 * crop.width + GAP, crop.height), (255, 255, 255))
    picture.paste(left, (0, 0))
    picture.paste(right, (crop.width + GAP, 0))
    return picture


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report")
    parser.add_argument("cases")
    parser.add_argument("out")
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--peer", default="route_flat")
    parser.add_argument("--corrected", action="store_true",
                        help="beside ours as traced, ours after the added vertices (a report "
                             "of eval --corrections) instead of the peer")
    args = parser.parse_args(argv)
    try:
        check_output_folder(args.out)
        methods = read_report(args.report)
        cases = report_cases(methods, args.cases)
        fixed = corrected_lines(args.report) if args.corrected else None
        wanted = (OURS,) if fixed is not None else (OURS, args.peer)
        missing = [name for name in wanted if name not in methods]
        if missing:
            raise BadParameter(f"{args.report} has no method {missing[0]!r} (it has "
                               f"{', '.join(sorted(methods))}): choose the peer with --peer")
        unknown = [case_id for case_id in args.ids if case_id not in cases]
        if unknown:
            raise BadParameter(f"no case {unknown[0]!r} in {args.report}")
        for case_id in args.ids:
            for name in wanted:
                if case_id not in methods[name]:
                    raise BadParameter(f"{args.report}: method {name!r} has no case {case_id!r}")
        paths = {case_id: os.path.join(args.out, picture_name(case_id)) for case_id in args.ids}
        inputs = [args.report, args.cases] + [cases[case_id].image for case_id in args.ids]
        for path in paths.values():
            refuse_overwriting_input(path, inputs, "picture")
        # Every image read and every line checked before any picture is written.
        rasters, pictures = RasterCache(), {}
        for case_id in args.ids:
            case = cases[case_id]
            try:
                raster = rasters.get(case.image)
            except TraceError as exc:
                raise BadParameter(f"cannot read the image of case {case_id!r}: {exc}") from None
            pictures[case_id] = case_picture(case, case_frame(case, raster), methods, args.peer,
                                             fixed, args.report)
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:
            raise BadParameter(f"cannot make output folder {args.out}: "
                               f"{exc.strerror or exc}") from None
        for case_id, picture in pictures.items():
            try:
                picture.save(paths[case_id], optimize=True)  # a file it began is removed
            except OSError as exc:
                raise BadParameter(f"cannot write {paths[case_id]}: {exc.strerror or exc}") \
                    from None
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
