"""Conversion speed by source: the same JPEGs as an image folder, a Hugging Face dataset, WebDataset shards.

Generates N JPEGs once and lays the same bytes out three ways: class folders,
a ``datasets`` dataset written with ``save_to_disk`` (an ``Image`` column and a
``ClassLabel``), and uncompressed ``.tar`` shards of ``<key>.jpg`` + ``<key>.cls``.
Then converts each into LMDB repeatedly, alternating the sources so that none
profits from a warmer cache or a quieter machine, and reports the median
images/s of each with its ratio to the folder (same run, same settings).

    .venv/bin/python benchmarks/bench_convert_sources.py --images 3000 --size 256 --repeats 3 \\
        [--workers N] [--no-verify] [--scratch /dev/shm]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

import datakit
from datakit.tools.synthetic import make_image_folder

SHARD_SAMPLES = 1000


def lay_out(scratch: Path, images: int, size: int) -> tuple[dict[str, Path], int, float]:
    """The folder, and the same files as a save_to_disk dataset and as shards; count and MB."""
    import datasets

    folder = scratch / "folder"
    classes = [f"class{i}" for i in range(10)]
    make_image_folder(folder, classes=classes, per_class=max(1, images // 10), size=(size, size))
    files = [(path, label) for label, name in enumerate(classes)
             for path in sorted((folder / name).iterdir())]
    payloads = [(path.read_bytes(), label) for path, label in files]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    rows = {"image": [{"bytes": data, "path": None} for data, _ in payloads],
            "label": [label for _, label in payloads]}
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(scratch / "hf"))
    shards = scratch / "shards"
    shards.mkdir()
    for start in range(0, len(payloads), SHARD_SAMPLES):
        with tarfile.open(shards / f"shard-{start // SHARD_SAMPLES:04d}.tar", "w") as tar:
            for number, (data, label) in enumerate(payloads[start:start + SHARD_SAMPLES], start):
                members = ((f"{number:08d}.jpg", data), (f"{number:08d}.cls", str(label).encode()))
                for name, content in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
    megabytes = sum(len(data) for data, _ in payloads) / 1e6
    return {"image folder": folder, "Hugging Face (save_to_disk)": scratch / "hf",
            "WebDataset shards": shards}, len(payloads), megabytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000, help="JPEGs to generate")
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds; the median is reported")
    parser.add_argument("--workers", type=int, default=None, help="reader processes (default: datakit's)")
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="header checks only")
    parser.add_argument("--scratch", default=None,
                        help="where the sources and stores go (default: a temporary folder; "
                             "/dev/shm takes the disk out of the measurement)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="datakit-bench-sources-", dir=args.scratch) as scratch:
        sources, count, megabytes = lay_out(Path(scratch), args.images, args.size)
        print(f"{count} JPEGs of {args.size}x{args.size} ({megabytes:.1f} MB) as a folder, a save_to_disk "
              f"dataset and {-(-count // SHARD_SAMPLES)} shard(s); {args.repeats} alternating rounds, "
              f"verify={args.verify}, workers={args.workers or 'default'}, {os.cpu_count()} CPUs")
        timings: dict[str, list[float]] = {name: [] for name in sources}
        for _ in range(args.repeats):
            for name, src in sources.items():
                dest = os.path.join(scratch, "store")
                started = time.perf_counter()
                report = datakit.convert(src, dest, workers=args.workers, verify=args.verify)
                timings[name].append(time.perf_counter() - started)
                assert report.written == count and not report.skipped, (name, report.skipped[:3])
                shutil.rmtree(dest)
        rates = {name: count / statistics.median(seconds) for name, seconds in timings.items()}
        baseline = rates["image folder"]
        print(f"{'source':<30} {'images/s':>10} {'range':>19} {'vs folder':>10}")
        for name, rate in rates.items():
            low, high = count / max(timings[name]), count / min(timings[name])
            print(f"{name:<30} {rate:>10.0f} {f'{low:.0f}-{high:.0f}':>19} {rate / baseline:>9.2f}x")


if __name__ == "__main__":
    main()
