"""Pictures of traced cases: the ground truth (yellow), ours (red) and a peer (cyan) over the
image, cropped around the case and enlarged, one PNG per case.

Usage:

    python main.py eval resources/eval/roads/cases.json --method all --json report.json
    python scripts/overlay_cases.py report.json resources/eval/roads/cases.json OUT_DIR ID [ID ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter  # noqa: E402
from core.evaluate import read_report, report_cases  # noqa: E402

COLOURS = {"truth": (255, 230, 0), "ours": (255, 40, 40), "peer": (0, 230, 255)}
#: Margin (px) around the case and the size (px) the longer side is enlarged towards.
MARGIN, SIZE = 40, 420


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report")
    parser.add_argument("cases")
    parser.add_argument("out")
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--peer", default="route_flat")
    args = parser.parse_args(argv)
    try:
        methods = read_report(args.report)
        cases = report_cases(methods, args.cases)
        missing = [name for name in ("ours", args.peer) if name not in methods]
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
    lines = {name: {case_id: row.get("polyline") for case_id, row in methods[method].items()}
             for name, method in (("ours", "ours"), ("peer", args.peer))}
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
        draw = ImageDraw.Draw(crop)
        for name, points in (("truth", case.gt.tolist()), ("peer", lines["peer"][case_id]),
                             ("ours", lines["ours"][case_id])):
            if points:
                draw.line([((x - box[0] + 0.5) * scale, (y - box[1] + 0.5) * scale)
                           for x, y in points], fill=COLOURS[name], width=2)
        crop.save(os.path.join(args.out, f"{case_id}.png"), optimize=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
