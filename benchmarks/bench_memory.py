"""Worker memory over a full epoch of a 1,000,000-record store.

Builds (once, cached in --store) an LMDB store of tiny raw records straight
through the store writer, then reads one shuffled epoch with 2 workers and
samples each worker's unique memory (USS: private clean + private dirty
pages, from /proc/PID/smaps_rollup) after the first batches and at the end.
Copy-on-write of Python objects held by the dataset (a list of a million
keys, say) would show up here as growth; datakit's datasets hold numpy
arrays and derive keys from indices, so they should not grow.

    .venv/bin/python benchmarks/bench_memory.py --records 1000000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

import datakit
from datakit.format.manifest import Manifest
from datakit.format.records import PayloadKind, encode_record
from datakit.format.stats import Stats
from datakit.stores.conversion_state import ConversionSettings, PendingRecord
from datakit.stores.lmdb import LMDBSpec

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _procfs import child_pids, unique_mb

CLASSES = [f"class{i}" for i in range(10)]


def build_store(path: str, records: int) -> None:
    """A store of ``records`` raw 8x8 RGB images, written without any image files."""
    rng = np.random.default_rng(0)
    stats = Stats(class_counts=[0] * len(CLASSES))
    labels = rng.integers(0, len(CLASSES), size=records)
    with LMDBSpec(path).open_writer() as writer:
        writer.create(ConversionSettings("synthetic", CLASSES, "raw"))
        for start in range(0, records, 50_000):
            batch = []
            for index in range(start, min(records, start + 50_000)):
                label = int(labels[index])
                payload = rng.integers(0, 256, size=192, dtype=np.uint8).tobytes()
                data = encode_record(payload, kind=PayloadKind.RAW, label=label, width=8, height=8,
                                     channels=3)
                stats.add(label, len(payload), "raw", 8, 8)
                batch.append(PendingRecord(index, f"synthetic/{index}", label, data))
            writer.commit(batch, stats)
        writer.finish(Manifest(classes=CLASSES, payload_kind="raw", stats=stats, skipped=0,
                               source="synthetic"), labels)


def measure(loader_class: type, dataset: datakit.LMDBDataset, batch_size: int) -> dict[str, object]:
    loader = loader_class(dataset, batch_size=batch_size, shuffle=True, num_workers=2,
                          persistent_workers=True, generator=torch.Generator().manual_seed(0))
    start: dict[int, float] = {}
    seen = 0
    started = time.perf_counter()
    for number, (_, labels) in enumerate(loader):
        seen += len(labels)
        if number == 20:
            start = {pid: unique_mb(pid) for pid in child_pids()}
    end = {pid: unique_mb(pid) for pid in child_pids() if pid in start}
    seconds = time.perf_counter() - started
    growth = {pid: round(end[pid] - start[pid], 1) for pid in end}
    del loader
    return {"samples": seen, "seconds": round(seconds, 1),
            "uss_start_mb": {pid: round(mb, 1) for pid, mb in start.items()},
            "uss_growth_mb": growth, "max_growth_mb": max(growth.values(), default=None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--store", default="/tmp/datakit-bench-memory.lmdb")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    if not os.path.exists(args.store):
        started = time.perf_counter()
        build_store(args.store, args.records)
        print(f"built {args.store} ({args.records} records) in {time.perf_counter() - started:.0f} s")
    dataset = datakit.LMDBDataset(args.store, output="tensor")
    print(f"{len(dataset)} records; one shuffled epoch, batch {args.batch_size}, 2 persistent workers")
    for name, loader_class in (("datakit", datakit.DataLoader), ("torch", torch.utils.data.DataLoader)):
        print(name, measure(loader_class, dataset, args.batch_size), flush=True)


if __name__ == "__main__":
    main()
