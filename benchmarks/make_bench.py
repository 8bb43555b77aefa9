"""Make a batch benchmark folder: N GeoTIFF copies of the sample + lon/lat seeds.

Usage (needs the ``geo`` extra: rasterio, pyproj)::

    python benchmarks/make_bench.py /tmp/bench 96

writes ``/tmp/bench/images/tile000.tif`` … and ``/tmp/bench/seeds.geojson``
(docs/BENCHMARKS.md, "Batch mode, CPU backend").
"""
import argparse
import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pyproj
import rasterio
from affine import Affine

SAMPLE = Path(__file__).resolve().parent.parent / "resources" / "sample"

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("folder", type=Path, help="where images/ and seeds.geojson are written")
parser.add_argument("tiles", type=int, help="number of GeoTIFF copies of the sample")
args = parser.parse_args()
if args.tiles < 1:
    parser.error("tiles must be at least 1")
root, n = args.folder, args.tiles
(root / "images").mkdir(parents=True, exist_ok=True)
pixels = np.moveaxis(iio.imread(SAMPLE / "gsi_108.png"), -1, 0)
features = []
for i in range(n):
    # Tiles side by side, 572 px = 114.4 m apart: each seed crosses exactly one tile.
    t = Affine(0.2, 0, 500000 + 114.4 * i, 0, -0.2, 3900000)
    with rasterio.open(root / "images" / f"tile{i:03d}.tif", "w", driver="GTiff", width=572,
                       height=572, count=3, dtype="uint8", crs="EPSG:32654", transform=t,
                       tiled=True, blockxsize=256, blockysize=256) as ds:
        ds.write(pixels)
    to_ll = pyproj.Transformer.from_crs("EPSG:32654", "EPSG:4326", always_xy=True)
    for case in json.loads((SAMPLE / "gsi_108_cases.json").read_text()):
        gt = np.array(case["gt"])
        v = gt[::40]
        v = np.vstack([v[:-1] if np.hypot(*(gt[-1] - v[-1])) < 20 else v, gt[-1:]])
        x, y = t.c + 0.2 * (v[:, 0] + 0.5), t.f - 0.2 * (v[:, 1] + 0.5)
        lon, lat = to_ll.transform(x, y)
        features.append({"type": "Feature", "id": f"{i}-{case['id']}", "properties": {},
                         "geometry": {"type": "LineString",
                                      "coordinates": np.column_stack([lon, lat]).tolist()}})
(root / "seeds.geojson").write_text(json.dumps({"type": "FeatureCollection", "features": features}))
print(len(features), "seeds")
