"""Importing a pickle-recipe store against converting the same images from a folder.

Generates N JPEGs in class folders once, packs them with the recipe's own
``folder_to_lmdb`` (``benchmarks/pickle_recipe.py``: ``pickle.dumps((bytes,
label))`` per key), then, in the same process and alternating so that neither
profits from a warmer cache or a quieter machine, converts the folder and
imports the recipe store into fresh LMDB stores. Reports each one's median
images/s with its range over the repeats, and the import's ratio to the folder.

    .venv/bin/python benchmarks/bench_import_recipe.py --images 10000 --size 256 --repeats 5 \\
        [--workers N] [--no-verify] [--scratch /dev/shm]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import datakit
from datakit.tools.synthetic import make_image_folder


def _recipe() -> Any:
    path = Path(__file__).with_name("pickle_recipe.py")
    spec = importlib.util.spec_from_file_location("pickle_recipe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=256, help="side of the generated JPEGs")
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds; the median is reported")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--no-verify", dest="verify", action="store_false")
    parser.add_argument("--scratch", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-", dir=args.scratch))
    try:
        folder = scratch / "folder"
        classes = [f"class{i}" for i in range(10)]
        make_image_folder(folder, classes=classes, per_class=max(1, args.images // 10),
                          size=(args.size, args.size))
        recipe_store = scratch / "recipe.lmdb"  # a single file, as the recipe writes by default
        count = _recipe().folder_to_lmdb(str(folder), str(recipe_store))
        sources = {"folder": folder, "recipe LMDB": recipe_store}
        timings: dict[str, list[float]] = {name: [] for name in sources}
        for round_number in range(args.repeats):
            for name, source in sources.items():
                dest = scratch / f"out-{round_number}-{name.replace(' ', '-')}"
                started = time.perf_counter()
                report = datakit.convert(source, dest, workers=args.workers, verify=args.verify)
                timings[name].append(time.perf_counter() - started)
                if report.total != count or report.skipped:
                    raise SystemExit(f"{name}: stored {report.total} of {count}, "
                                     f"skipped {len(report.skipped)}")
                shutil.rmtree(dest)
        folder_rate = count / statistics.median(timings["folder"])
        print(f"{count} images of {args.size}x{args.size}, {args.repeats} alternating rounds, "
              f"workers={args.workers or 'default'}, verify={args.verify}")
        for name, seconds in timings.items():
            rate = count / statistics.median(seconds)
            low, high = count / max(seconds), count / min(seconds)
            print(f"  {name:<12} {rate:9.0f} images/s (range {low:.0f}..{high:.0f}), "
                  f"{rate / folder_rate:.2f}x the folder")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
