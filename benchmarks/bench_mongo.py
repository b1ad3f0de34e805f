"""MongoDataset (one ``$in`` query per batch) against the seed recipe (one ``find_one`` per sample).

Both datasets read the same collection on the same server through the same
``torch.utils.data.DataLoader`` settings and decode the same records into the
same tensors; only the way they fetch differs. Runs alternate between the two
and the median epoch is reported.

The server is ``DATAKIT_MONGO_URI`` when set; otherwise this starts
``nx-27017`` (from the ``test`` extra) on a free loopback port with a
temporary data directory, exactly as the test fixture does, and stops it.

Usage::

    .venv/bin/python benchmarks/bench_mongo.py [--images 2000] [--workers 2] [--runs 5] [--output bytes]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch
from pymongo import MongoClient
from pymongo.errors import PyMongoError
from torch.utils.data import DataLoader, Dataset

import datakit
from datakit.format.decoding import record_to_array
from datakit.format.records import decode_record, record_key
from datakit.tools.synthetic import make_image_folder

COLLECTION = "bench"
DATABASE = "datakit_bench"


@contextlib.contextmanager
def mongo_server(workdir: str) -> Iterator[str]:
    """A server URI: ``DATAKIT_MONGO_URI``, or an nx-27017 started for the run."""
    given = os.environ.get("DATAKIT_MONGO_URI")
    if given:
        yield given
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    executable = os.path.join(os.path.dirname(sys.executable), "nx-27017")
    command = [executable, "--host", "127.0.0.1", "--port", str(port),
               "--data-dir", os.path.join(workdir, "data"), "--log-file", os.path.join(workdir, "nx.log"),
               "--pid-file", os.path.join(workdir, "nx.pid")]
    with open(os.path.join(workdir, "nx-27017.out"), "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    uri = f"mongodb://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers_ping(uri):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"nx-27017 did not start on {uri}; see {workdir}/nx-27017.out")
        yield uri
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _answers_ping(uri: str) -> bool:
    client: MongoClient = MongoClient(uri, serverSelectionTimeoutMS=250)
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


class SeedMongoDataset(Dataset):
    """The seed recipe: a lazily opened client per worker, one ``find_one`` per sample."""

    def __init__(self, uri: str, database: str, collection: str, length: int, output: str) -> None:
        self.uri, self.database, self.collection, self.length = uri, database, collection, length
        self.output = output
        self._client: Any = None
        self._pid: int | None = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if self._client is None or self._pid != os.getpid():
            self._client, self._pid = MongoClient(self.uri), os.getpid()
        document = self._client[self.database][self.collection].find_one({"_id": int(index)})
        record = decode_record(document["data"], record_key(index))
        if self.output == "bytes":
            return bytes(record.payload), record.header.label
        return torch.from_numpy(record_to_array(record)).permute(2, 0, 1), record.header.label


def epoch_seconds(loader: DataLoader) -> float:
    started = time.perf_counter()
    count = sum(len(labels) for _, labels in loader)
    elapsed = time.perf_counter() - started
    assert count == len(loader.dataset), (count, len(loader.dataset))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000, help="images to generate (default 2000)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--runs", type=int, default=5, help="timed epochs per dataset (default 5)")
    parser.add_argument("--output", choices=("tensor", "bytes"), default="tensor",
                        help="decode each JPEG into a tensor (default), or hand over the stored bytes "
                             "(measures the store alone)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-mongo-") as workdir, mongo_server(workdir) as uri:
        folder = os.path.join(workdir, "images")
        classes = ("a", "b", "c", "d")
        make_image_folder(folder, classes=classes, per_class=-(-args.images // len(classes)), size=(64, 64))
        report = datakit.convert(folder, uri, collection=COLLECTION, database=DATABASE, overwrite=True)
        print(f"server: {uri} ({'DATAKIT_MONGO_URI' if os.environ.get('DATAKIT_MONGO_URI') else 'nx-27017'})")
        print(f"converted {report.total} images in {report.seconds:.1f} s")

        datasets = {
            "MongoDataset ($in per batch)": datakit.MongoDataset(uri, COLLECTION, database=DATABASE,
                                                                 output=args.output),
            "seed recipe (find_one per sample)": SeedMongoDataset(uri, DATABASE, COLLECTION, report.total,
                                                                  args.output),
        }
        loaders = {name: DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                    num_workers=args.workers, persistent_workers=args.workers > 0)
                   for name, dataset in datasets.items()}
        times: dict[str, list[float]] = {name: [] for name in loaders}
        for loader in loaders.values():
            epoch_seconds(loader)  # warm up: start the workers, open their clients
        for _ in range(args.runs):
            for name, loader in loaders.items():  # alternate, so drift hits both alike
                times[name].append(epoch_seconds(loader))
        rates = {name: report.total / statistics.median(values) for name, values in times.items()}
        print(f"batch {args.batch_size}, {args.workers} workers, output={args.output}, "
              f"median of {args.runs} epochs of {report.total} samples:")
        for name, rate in rates.items():
            print(f"  {name:36s} {rate:10.0f} samples/s")
        fast, slow = rates.values()
        print(f"  ratio {fast / slow:.1f}x")
        loaders.clear()  # stops the persistent workers before the server goes
        client: MongoClient = MongoClient(uri)
        client.drop_database(DATABASE)
        client.close()


if __name__ == "__main__":
    main()
