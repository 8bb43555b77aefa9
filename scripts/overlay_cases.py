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
import os
import sys
from pathlib import Path

from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter  # noqa: E402
from core.evaluate import OURS, read_report, report_cases  # noqa: E402
from core.output import read_json  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    except BadParameter as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    images = {}
    for case_id in args.ids:  # every image readable before any picture is written
        try:
            images[case_id] = Image.open(cases[case_id].image)
        except OSError as exc:
            print(f"error: cannot read the image of case {case_id!r}: {exc}", file=sys.stderr)
            return 2
    def polylines(method: str) -> dict:
        return {case_id: row.get("polyline") for case_id, row in methods[method].items()}

    ours = polylines(OURS)
    peer = None if fixed is not None else polylines(args.peer)
    os.makedirs(args.out, exist_ok=True)
    for case_id in args.ids:
        case, image = cases[case_id], images[case_id]
        xs = [x for x, _ in case.gt]
        ys = [y for _, y in case.gt]
        box = (max(min(xs) - MARGIN, 0), max(min(ys) - MARGIN, 0),
               min(max(xs) + MARGIN, image.width), min(max(ys) + MARGIN, image.height))
        crop = image.convert("RGB").crop(box)
        scale = max(1, round(SIZE / max(crop.size)))
        crop = crop.resize((crop.width * scale, crop.height * scale), Image.LANCZOS)
        frame = (crop, box[:2], scale)
        truth = ("truth", case.gt.tolist())
        if fixed is None:
            picture = drawn(frame, (truth, ("peer", peer[case_id]), ("ours", ours[case_id])))
        else:
            after = fixed.get(case_id) or {}
            left = drawn(frame, (truth, ("ours", ours[case_id])))
            right = drawn(frame, (truth, ("ours", after.get("polyline"))),
                          after.get("vertices") or ())
            picture = Image.new("RGB", (2 * crop.width + GAP, crop.height), (255, 255, 255))
            picture.paste(left, (0, 0))
            picture.paste(right, (crop.width + GAP, 0))
        picture.save(os.path.join(args.out, f"{case_id}.png"), optimize=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
