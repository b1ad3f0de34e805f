"""Conversion speed: datakit convert against the pickle-per-record recipe.

Generates a folder of JPEGs once, then converts it repeatedly, alternating
the contenders so that none profits from a warmer cache or a quieter machine,
and reports the median images/s of each with its ratio to the recipe.

    .venv/bin/python benchmarks/bench_convert.py --images 3000 --size 256 --repeats 3 [--scratch /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pickle_recipe import folder_to_lmdb

import datakit
from datakit.tools.synthetic import make_image_folder


def contenders(workers: int) -> dict[str, Callable[[str, str], object]]:
    runs: dict[str, Callable[[str, str], object]] = {
        "pickle recipe (1 process, no checks)": lambda src, dest: folder_to_lmdb(src, dest),
        "datakit --no-verify": lambda src, dest: datakit.convert(src, dest, verify=False),
        "datakit --verify -j 1": lambda src, dest: datakit.convert(src, dest, workers=1),
    }
    if workers > 1:
        runs[f"datakit --verify -j {workers}"] = lambda src, dest: datakit.convert(src, dest, workers=workers)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000, help="JPEGs to generate")
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds; the median is reported")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--scratch", default=None,
                        help="where the images and stores go (default: a temporary folder; "
                             "/dev/shm takes the disk out of the measurement)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="datakit-bench-", dir=args.scratch) as scratch:
        src = os.path.join(scratch, "images")
        per_class = max(1, args.images // 10)
        make_image_folder(src, classes=[f"class{i}" for i in range(10)], per_class=per_class,
                          size=(args.size, args.size))
        count = per_class * 10
        megabytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src) for f in fs) / 1e6
        print(f"{count} JPEGs of {args.size}x{args.size} ({megabytes:.1f} MB), "
              f"{args.repeats} alternating rounds, {os.cpu_count()} CPUs")
        timings: dict[str, list[float]] = {name: [] for name in contenders(args.workers)}
        for _ in range(args.repeats):
            for name, run in contenders(args.workers).items():
                dest = os.path.join(scratch, "store")
                started = time.perf_counter()
                run(src, dest)
                timings[name].append(time.perf_counter() - started)
                shutil.rmtree(dest) if os.path.isdir(dest) else os.remove(dest)
        baseline = count / statistics.median(next(iter(timings.values())))
        print(f"{'contender':<40} {'images/s':>10} {'vs recipe':>10}")
        rates = {name: count / statistics.median(seconds) for name, seconds in timings.items()}
        for name, rate in rates.items():
            print(f"{name:<40} {rate:>10.0f} {rate / baseline:>9.2f}x")
        if args.workers > 1:
            ratio = rates[f"datakit --verify -j {args.workers}"] / rates["datakit --verify -j 1"]
            print(f"--verify: {args.workers} workers / 1 worker = {ratio:.2f}x")


if __name__ == "__main__":
    main()
