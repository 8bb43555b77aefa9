"""Make a batch benchmark folder: N GeoTIFF copies of the sample + lon/lat seeds.

Usage, from the project folder (needs the ``geo`` extra: rasterio, pyproj)::

    python benchmarks/make_bench.py /tmp/bench 96

writes ``/tmp/bench/images/tile000.tif`` … and ``/tmp/bench/seeds.geojson``
(docs/BENCHMARKS.md, "Batch mode, CPU backend").
"""
import json
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pyproj
import rasterio
from affine import Affine

root, n = Path(sys.argv[1]), int(sys.argv[2])
(root / "images").mkdir(parents=True, exist_ok=True)
pixels = np.moveaxis(iio.imread("resources/sample/gsi_108.png"), -1, 0)
features = []
for i in range(n):
    # Tiles side by side, 572 px = 114.4 m apart: each seed crosses exactly one tile.
    t = Affine(0.2, 0, 500000 + 114.4 * i, 0, -0.2, 3900000)
    with rasterio.open(root / "images" / f"tile{i:03d}.tif", "w", driver="GTiff", width=572,
                       height=572, count=3, dtype="uint8", crs="EPSG:32654", transform=t,
                       tiled=True, blockxsize=256, blockysize=256) as ds:
        ds.write(pixels)
    to_ll = pyproj.Transformer.from_crs("EPSG:32654", "EPSG:4326", always_xy=True)
    for case in json.load(open("resources/sample/gsi_108_cases.json")):
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
