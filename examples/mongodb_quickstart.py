"""Pack an image folder into MongoDB, inspect it, and train-style read it back.

Uses the server named by ``DATAKIT_MONGO_URI``, else one on localhost:27017;
a URI that names no database (``mongodb://127.0.0.1:27017``, the form the test
suite takes) uses the database ``datakit_examples``, or the one ``--database``
names:

    export "$(bash scripts/mongo-server.sh start)"   # nx-27017, no Docker (README "MongoDB")
    python examples/mongodb_quickstart.py
    bash scripts/mongo-server.sh stop

    docker compose up -d mongo                       # or a real MongoDB in Docker
    python examples/mongodb_quickstart.py
    DATAKIT_MONGO_URI=mongodb://db.example:27017/vision python examples/mongodb_quickstart.py

The generated image folder is written in a temporary folder, deleted at the
end; ``--output DIR`` keeps it in ``DIR`` (as ``DIR/flowers``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from urllib.parse import urlsplit

import datakit
from datakit.errors import DatakitError, StoreUnavailableError
from datakit.tools.synthetic import make_image_folder

DEFAULT_DATABASE = "datakit_examples"


def database_for(uri: str, given: str | None) -> str | None:
    """The database to pass: ``given``, else none when the URI names one, else the examples' own."""
    if given or urlsplit(uri).path.strip("/"):
        return given
    return DEFAULT_DATABASE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=os.environ.get("DATAKIT_MONGO_URI",
                                                        f"mongodb://localhost:27017/{DEFAULT_DATABASE}"))
    parser.add_argument("--database", default=None,
                        help=f"database, when the URI names none (default {DEFAULT_DATABASE})")
    parser.add_argument("--collection", default="quickstart")
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--output", metavar="DIR", default=None,
                        help="keep the generated images here (default: a temporary folder, deleted "
                             "at the end)")
    args = parser.parse_args()
    database = database_for(args.uri, args.database)
    if database is not None and args.database is None:
        print(f"the URI names no database: using database {database} (--database chooses another)")

    with (contextlib.nullcontext(args.output) if args.output else
          tempfile.TemporaryDirectory(prefix="datakit-mongodb-")) as scratch:
        folder = os.path.join(scratch, "flowers")
        shutil.rmtree(folder, ignore_errors=True)  # a previous run's, in --output DIR
        make_image_folder(folder, classes=["daisy", "rose", "tulip"], per_class=args.images // 3,
                          size=(64, 64))
        try:
            report = datakit.convert(folder, args.uri, collection=args.collection, database=database,
                                     overwrite=True)
        except StoreUnavailableError as exc:
            raise SystemExit(f"{exc}\n(start a server with `bash scripts/mongo-server.sh start` or "
                             "`docker compose up -d mongo`, or point DATAKIT_MONGO_URI at one)") from None
        except DatakitError as exc:
            raise SystemExit(str(exc)) from None
    print(f"converted {report.written} images into {report.destination}")

    summary = datakit.inspect(args.uri, collection=args.collection, database=database, verify=True)
    print(f"inspected: {summary['length']} records, classes {summary['class_counts']}, "
          f"verify {'ok' if summary['verify']['ok'] else 'FAILED'}")

    dataset = datakit.MongoDataset(args.uri, args.collection, database=database, output="tensor")
    loader = datakit.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)
    started = time.perf_counter()
    seen = sum(len(labels) for _, labels in loader)  # one $in query per batch, a client per worker
    print(f"read one epoch: {seen} samples at {seen / (time.perf_counter() - started):.0f} samples/s")


if __name__ == "__main__":
    main()
