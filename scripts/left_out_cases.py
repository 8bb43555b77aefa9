"""Case sets for measuring a source left out of training: cases drawn at random, per source,
from click cases made on that source's training images.

The inputs are cases files as the case generator writes them for a training folder (each case
names its image's id in ``meta.source``; several draws of the generator may be given). For
every ``--source NAME=PREFIX[,PREFIX...][:CAP]`` the cases whose source id starts with one of
the prefixes are shuffled and taken in turn, at most CAP of each kind per image (default
``--per-image``), until ``--nontrivial`` cases tagged ``nontrivial`` (a straight line misses
the road) and ``--straight`` others are chosen. Repeated cases (the same image and endpoints,
as two draws may give) are taken once, and ids repeated across draws are made unique. The
chosen cases go to ``OUT_DIR/<NAME>.json`` with their image paths made absolute: relative to
``--images-from DIR`` (the generator writes them relative to the training folder it read), or
else to the cases file's folder. They are ready for ``scripts/crossval_surface.py`` with the
model trained without that source (``train_surface_model.py --exclude PREFIX``).

Usage:

    python scripts/left_out_cases.py draw9.json draw10.json --images-from ROADS_TRAIN \\
        --out LOSO --source gsi=gsi_:7 --source shanghai=sn3shanghai:7 --source vegas=sn3vegas:3
    python scripts/crossval_surface.py LOSO/gsi.json --model gsi_=NO_GSI.onnx --json gsi.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import BadParameter  # noqa: E402
from core.output import read_json  # noqa: E402


def parse_source(spec: str, default_cap: int) -> tuple[str, tuple[str, ...], int]:
    """``"NAME=PREFIX[,PREFIX...][:CAP]"`` → (name, prefixes, cap)."""
    name, separator, rest = spec.partition("=")
    prefixes, _, cap = rest.partition(":")
    names = tuple(prefix for prefix in prefixes.split(",") if prefix)
    if not separator or not name or not names or not name.replace("_", "").isalnum():
        raise BadParameter(f"--source {spec!r}: expected NAME=PREFIX[,PREFIX...][:CAP], "
                           "NAME in letters, digits and _")
    try:
        limit = int(cap) if cap else default_cap
    except ValueError:
        raise BadParameter(f"--source {spec!r}: CAP must be a whole number") from None
    if limit < 1:
        raise BadParameter(f"--source {spec!r}: CAP must be at least 1")
    return name, names, limit


def read_cases(path: str, images_from: str | None = None) -> list[dict]:
    """The cases of a generator's file, image paths made absolute (relative to ``images_from``,
    default the file's folder)."""
    cases = read_json(path, "cases file")
    if not isinstance(cases, list):
        raise BadParameter(f"{path}: expected a JSON list of cases")
    folder = Path(images_from).resolve() if images_from else Path(path).resolve().parent
    out = []
    for number, case in enumerate(cases):
        meta = case.get("meta") if isinstance(case, dict) else None
        if not isinstance(meta, dict) or not {"image", "a", "b"} <= case.keys() \
                or "source" not in meta:
            raise BadParameter(f"{path}: case {number} lacks image, a, b or meta.source")
        source, image, tags = meta["source"], case["image"], case.get("tags", [])
        if not isinstance(source, str) or not isinstance(image, str) or not isinstance(tags, list):
            raise BadParameter(f"{path}: case {number}: meta.source and image must be text, tags a "
                           "list")
        out.append({**case, "image": os.fspath(folder / image)})
    return out


def unique_ids(cases: list[dict]) -> list[dict]:
    """The cases with ids made unique: two draws of the generator number the cases of an image
    alike, so a repeated id gets ``-2``, ``-3``, … in the order met (reports key cases by id)."""
    met, out = Counter(), []
    for case in cases:
        name = str(case.get("id", case["meta"]["source"]))
        met[name] += 1
        out.append({**case, "id": name if met[name] == 1 else f"{name}-{met[name]}"})
    return out


def choose(cases: list[dict], prefixes: tuple[str, ...], nontrivial: int, straight: int,
           cap: int, seed: int) -> list[dict]:
    """Up to ``nontrivial`` cases tagged nontrivial and ``straight`` others from the images
    whose source id starts with one of ``prefixes``, at random (``seed``), at most ``cap`` of
    each kind per image, each image and endpoint pair once."""
    pool, seen = [], set()
    for case in cases:
        key = (case["meta"]["source"], json.dumps(case["a"]), json.dumps(case["b"]))
        if case["meta"]["source"].startswith(prefixes) and key not in seen:
            seen.add(key)
            pool.append(case)
    random.Random(seed).shuffle(pool)
    wanted = {True: nontrivial, False: straight}
    taken, per_image, chosen = Counter(), Counter(), []
    for case in pool:
        kind = "nontrivial" in case.get("tags", [])
        if taken[kind] < wanted[kind] and per_image[case["meta"]["source"], kind] < cap:
            taken[kind] += 1
            per_image[case["meta"]["source"], kind] += 1
            chosen.append(case)
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", help="the generator's cases files (several draws)")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--images-from", metavar="DIR",
                        help="the folder the cases' image paths are relative to (default: each "
                             "cases file's folder)")
    parser.add_argument("--source", action="append", required=True,
                        metavar="NAME=PREFIX[,PREFIX...][:CAP]")
    parser.add_argument("--nontrivial", type=int, default=150,
                        help="nontrivial cases per source (default 150)")
    parser.add_argument("--straight", type=int, default=100,
                        help="straight-line-right cases per source (default 100)")
    parser.add_argument("--per-image", type=int, default=7,
                        help="at most this many cases of each kind per image (default 7)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.nontrivial < 0 or args.straight < 0:
            raise BadParameter("--nontrivial and --straight must not be negative")
        if args.per_image < 1:
            raise BadParameter(f"--per-image must be at least 1, got {args.per_image}")
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise BadParameter(f"--out {args.out} exists and is not a folder")
        sources = [parse_source(spec, args.per_image) for spec in args.source]
        if len({name for name, _, _ in sources}) < len(sources):
            raise BadParameter("each --source needs a name of its own")
        if args.images_from and not os.path.isdir(args.images_from):
            raise BadParameter(f"--images-from {args.images_from}: no such folder")
        cases = unique_ids([case for path in args.cases
                            for case in read_cases(path, args.images_from)])
        chosen = {name: choose(cases, prefixes, args.nontrivial, args.straight, cap, args.seed)
                  for name, prefixes, cap in sources}
        empty = [name for name, picked in chosen.items() if not picked]
        if empty:
            raise BadParameter(f"no case lies on an image of source {', '.join(empty)}")
        os.makedirs(args.out, exist_ok=True)
        for name, picked in chosen.items():
            target = Path(args.out) / f"{name}.json"
            partial = target.with_suffix(".json.part")
            partial.write_text(json.dumps(picked), encoding="utf-8")
            partial.replace(target)
            hard = sum("nontrivial" in case.get("tags", []) for case in picked)
            print(f"{target}: {hard} nontrivial, {len(picked) - hard} straight-line-right cases")
    except BadParameter as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the folder or a file of --out cannot be made
        print(f"error: cannot write in --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
