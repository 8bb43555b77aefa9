"""Make the batch benchmark's workload without GeoTIFFs: N copies of the sample + pixel seeds.

The same 1728 segments as docs/BENCHMARKS.md's batch workload for N = 96 (the sample's six
ground-truth centrelines per tile, one vertex every 40 px), as PNG tiles and seeds in pixel
coordinates naming their tile (``properties.image``), so it runs where rasterio and pyproj are
not installed (e.g. a GPU machine with the `gpu` extra alone).

Usage: ``python benchmarks/batch_workload.py FOLDER N``, then
``python main.py batch FOLDER/images --seeds FOLDER/seeds.geojson -o FOLDER/out --backend gpu``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "resources" / "sample" / "gsi_108.png"
CASES = ROOT / "resources" / "sample" / "gsi_108_cases.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, metavar="FOLDER",
                        help="where to write images/ and seeds.geojson (made if missing)")
    parser.add_argument("count", type=int, metavar="N",
                        help="copies of the sample (96: docs/BENCHMARKS.md's 1728 segments)")
    args = parser.parse_args(argv)
    folder, count = args.folder, args.count
    (folder / "images").mkdir(parents=True, exist_ok=True)
    features, segments = [], 0
    for i in range(count):
        name = f"tile{i:03d}.png"
        shutil.copyfile(SAMPLE, folder / "images" / name)
        for case in json.loads(CASES.read_text()):
            gt = np.array(case["gt"])
            vertices = gt[::40]
            if np.hypot(*(gt[-1] - vertices[-1])) < 20:
                vertices = vertices[:-1]
            vertices = np.vstack([vertices, gt[-1:]])
            segments += len(vertices) - 1
            features.append({"type": "Feature", "id": f"{i}-{case['id']}",
                             "properties": {"image": name},
                             "geometry": {"type": "LineString",
                                          "coordinates": vertices.tolist()}})
    (folder / "seeds.geojson").write_text(json.dumps({"type": "FeatureCollection",
                                                      "features": features}))
    print(f"{count} tiles, {len(features)} seeds, {segments} segments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
