"""Opening a large GeoTIFF in the application: the time and memory of its display pyramid.

Writes a tiled (512 px), DEFLATE-compressed RGB GeoTIFF of ``--size`` px square (the bundled
sample mirrored over it), and a copy with internal overviews (2, 4, 8, 16, as ``gdaladdo``
builds them), then opens each in a fresh process as the application's worker does
(:func:`app.display.load_for_display`: the raster, the overview read for display and its
stretched pyramid). Prints, per file, the wall time of the open, the process's peak resident
memory and what it still holds afterwards (both over the memory of the process before it).

Needs the ``geo`` extra (rasterio). Usage: ``python benchmarks/open_large.py [--size PX]
[--folder DIR]`` (default: 20000 px, a temporary folder, removed afterwards; 1.1 GB of disk
at the default size).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.bench_cmd import machine_description  # noqa: E402

SAMPLE = ROOT / "resources" / "sample" / "gsi_108.png"


def write_geotiff(path: Path, size: int) -> None:
    """A ``size`` × ``size`` px tiled RGB GeoTIFF of the sample mirrored over it."""
    import imageio.v3 as iio
    import rasterio
    from rasterio.transform import from_origin
    from rasterio.windows import Window

    tile = iio.imread(SAMPLE)[:512, :512, :3]
    tile = np.concatenate([tile, tile[:, ::-1]], axis=1)
    tile = np.concatenate([tile, tile[::-1]], axis=0)  # 1024 px, no seams
    strip = np.tile(tile, (1, -(-size // len(tile)), 1))[:, :size]  # a row of tiles
    with rasterio.open(path, "w", driver="GTiff", width=size, height=size, count=3,
                       dtype="uint8", crs="EPSG:32654",
                       transform=from_origin(500_000, 4_000_000, 0.2, 0.2), tiled=True,
                       blockxsize=512, blockysize=512, compress="deflate", BIGTIFF="YES",
                       photometric="RGB") as file:
        for row in range(0, size, len(strip)):
            rows = min(len(strip), size - row)
            file.write(strip[:rows].transpose(2, 0, 1), window=Window(0, row, size, rows))


def resident_mb(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``: unlike
    ``getrusage``'s, not inherited from the parent), MB; Linux."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def measure(path: str) -> dict:
    """Open ``path`` as the application's worker does; time and memory (run in a child)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.display import load_for_display

    before = resident_mb()
    start = time.perf_counter()
    raster, pyramid = load_for_display(path)
    seconds = time.perf_counter() - start
    peak = resident_mb("VmHWM")
    held = resident_mb() - before
    raster.close()
    return {"seconds": seconds, "peak_mb": peak - before, "held_mb": held,
            "overview": list(pyramid.levels[0].array.shape[:2])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--folder", help="where to write the files (kept)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    if args.size < 1024:
        parser.error("--size must be at least 1024 px")
    folder = Path(args.folder or tempfile.mkdtemp(prefix="roadtracer-open-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import rasterio

        plain, with_overviews = folder / "plain.tif", folder / "overviews.tif"
        print(f"machine: {machine_description()}\nwriting {args.size}² px GeoTIFFs in "
              f"{folder}…", file=sys.stderr)
        write_geotiff(plain, args.size)
        shutil.copy(plain, with_overviews)
        with rasterio.open(with_overviews, "r+") as file:
            file.build_overviews([2, 4, 8, 16], rasterio.enums.Resampling.average)
        for name, path in (("no overviews", plain), ("internal overviews", with_overviews)):
            child = subprocess.run([sys.executable, __file__, "--measure", str(path)],
                                   capture_output=True, text=True, check=True)
            result = json.loads(child.stdout)
            print(f"{args.size}² px, {name}: opened in {result['seconds']:.2f} s, peak "
                  f"{result['peak_mb']:.0f} MB, holds {result['held_mb']:.0f} MB "
                  f"(overview {result['overview'][1]}×{result['overview'][0]} px)")
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
