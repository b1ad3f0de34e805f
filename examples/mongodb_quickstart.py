"""Pack an image folder into MongoDB, inspect it, and train-style read it back.

Uses the server named by ``DATAKIT_MONGO_URI`` (it must name a database or
``--database`` must), else the compose service on localhost:

    docker compose up -d mongo
    python examples/mongodb_quickstart.py
    DATAKIT_MONGO_URI=mongodb://db.example:27017/vision python examples/mongodb_quickstart.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import datakit
from datakit.errors import DatakitError
from datakit.synthetic import make_image_folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=os.environ.get("DATAKIT_MONGO_URI",
                                                        "mongodb://localhost:27017/datakit_examples"))
    parser.add_argument("--collection", default="quickstart")
    parser.add_argument("--images", type=int, default=600)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        folder = os.path.join(scratch, "flowers")
        make_image_folder(folder, classes=["daisy", "rose", "tulip"], per_class=args.images // 3,
                          size=(64, 64))
        try:
            report = datakit.convert(folder, args.uri, collection=args.collection, overwrite=True)
        except DatakitError as exc:
            raise SystemExit(f"{exc}\n(start a server with `docker compose up -d mongo`, "
                             "or point DATAKIT_MONGO_URI at one)") from None
    print(f"converted {report.written} images into {report.destination}")

    summary = datakit.inspect(args.uri, collection=args.collection, verify=True)
    print(f"inspected: {summary['length']} records, classes {summary['class_counts']}, "
          f"verify {'ok' if summary['verify']['ok'] else 'FAILED'}")

    dataset = datakit.MongoDataset(args.uri, args.collection, output="tensor")
    loader = datakit.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)
    started = time.perf_counter()
    seen = sum(len(labels) for _, labels in loader)  # one $in query per batch, a client per worker
    print(f"read one epoch: {seen} samples at {seen / (time.perf_counter() - started):.0f} samples/s")


if __name__ == "__main__":
    main()
