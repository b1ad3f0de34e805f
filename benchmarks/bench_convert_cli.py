"""``datakit convert`` as users run it: whole processes on an ImageNet-shaped folder.

Each contender is a fresh ``datakit convert`` process (start-up and imports
counted), alternating round after round; reported are the median images/s,
its range, and the store's size:

- default options (one reader process per CPU, every image verified);
- ``--workers 1`` (everything in the one process);
- ``--max-side 256`` (default options, images over 256 px stored downscaled).

The folder is :func:`datakit.tools.synthetic.make_photo_folder`'s (JPEGs of photo-like
content, sides 300-500 px, quality 90), made once under ``--scratch``.

    .venv/bin/python benchmarks/bench_convert_cli.py [--images 3000] [--repeats 3] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from datakit.tools.synthetic import make_photo_folder

CONTENDERS = {
    "default options": [],
    "--workers 1": ["--workers", "1"],
    "--max-side 256": ["--max-side", "256"],
}


def store_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scratch", default="bench-data")
    args = parser.parse_args()
    folder = os.path.join(args.scratch, f"photos-{args.images}")
    if not os.path.isdir(folder):
        make_photo_folder(folder + ".partial", images=args.images)
        os.rename(folder + ".partial", folder)
    source_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs) / 1e6
    datakit_command = [os.path.join(os.path.dirname(sys.executable), "datakit")]
    seconds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    sizes: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, options in CONTENDERS.items():
            dest = os.path.join(args.scratch, "convert-bench.lmdb")
            shutil.rmtree(dest, ignore_errors=True)
            started = time.perf_counter()
            subprocess.run([*datakit_command, "convert", folder, dest, "--quiet", *options], check=True)
            seconds[name].append(time.perf_counter() - started)
            sizes[name] = store_bytes(dest)
            shutil.rmtree(dest)
    print(f"{args.images} photos ({source_mb:.0f} MB), {os.cpu_count()} CPUs, whole `datakit convert` "
          f"processes, median of {args.repeats} alternating rounds (range):")
    for name, times in seconds.items():
        rates = [args.images / t for t in times]
        print(f"  {name:<16} {statistics.median(rates):7.0f} images/s ({min(rates):.0f}-{max(rates):.0f})"
              f"  store {sizes[name] / 1e6:6.1f} MB")
    default, single = (statistics.median(seconds[name]) for name in ("default options", "--workers 1"))
    print(f"default / --workers 1: {single / default:.2f}x")


if __name__ == "__main__":
    main()
