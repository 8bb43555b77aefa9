"""Pictures of traced cases: the ground truth (yellow), ours (red) and a peer (cyan) over the
image, cropped around the case and enlarged, one PNG per case.

Usage:

    python main.py eval resources/eval/roads/cases.json --method all --json report.json
    python scripts/overlay_cases.py report.json resources/eval/roads/cases.json OUT_DIR ID [ID ...]
"""

from __future__ import annotations

import argparse
import os

from accuracy_tables import read_report
from PIL import Image, ImageDraw

COLOURS = {"truth": (255, 230, 0), "ours": (255, 40, 40), "peer": (0, 230, 255)}
#: Margin (px) around the case and the size (px) the longer side is enlarged towards.
MARGIN, SIZE = 40, 420


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report")
    parser.add_argument("cases")
    parser.add_argument("out")
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--peer", default="route_flat")
    args = parser.parse_args()
    methods, cases = read_report(args.report, args.cases)
    lines = {name: {case["id"]: case["polyline"] for case in methods[method]["cases"]}
             for name, method in (("ours", "ours"), ("peer", args.peer))}
    os.makedirs(args.out, exist_ok=True)
    for case_id in args.ids:
        case = cases[case_id]
        image = Image.open(os.path.join(os.path.dirname(args.cases), case["image"]))
        xs = [x for x, _ in case["gt"]]
        ys = [y for _, y in case["gt"]]
        box = (max(min(xs) - MARGIN, 0), max(min(ys) - MARGIN, 0),
               min(max(xs) + MARGIN, image.width), min(max(ys) + MARGIN, image.height))
        crop = image.convert("RGB").crop(box)
        scale = max(1, round(SIZE / max(crop.size)))
        crop = crop.resize((crop.width * scale, crop.height * scale), Image.LANCZOS)
        draw = ImageDraw.Draw(crop)
        for name, points in (("truth", case["gt"]), ("peer", lines["peer"][case_id]),
                             ("ours", lines["ours"][case_id])):
            if points:
                draw.line([((x - box[0] + 0.5) * scale, (y - box[1] + 0.5) * scale)
                           for x, y in points], fill=COLOURS[name], width=2)
        crop.save(os.path.join(args.out, f"{case_id}.png"), optimize=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
