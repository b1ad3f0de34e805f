"""The performance targets, measured side by side in one run.

1. Raw 32x32 RGB records (20,000): datakit.DataLoader against torch's
   DataLoader over the same ``LMDBDataset(output="tensor")`` (which already
   reads a batch per ``__getitems__``), and against the pickle-per-record LMDB
   recipe read one sample at a time by torch's DataLoader.
2. JPEG 256x256 (3,000): datakit against torch over the same dataset, and
   against the decode ceiling: one process decoding every record as fast as
   it can, times the number of cores. A second ceiling runs the dataset's own
   batch path in one process (read, checksum, decode, channel-first layout),
   times the cores: the part of the gap that parallel loading could close.

Every loader runs with batch 256, shuffle, 2 persistent workers. Runs
alternate between contenders; each run times epochs after the first (the
workers are up) and the median over runs is reported. Wall-clock rates on a
shared machine drift, so the CPU time per sample (main process plus
workers, from /proc) is printed too.

    .venv/bin/python benchmarks/bench_targets.py [--runs 5] [--scratch /tmp/datakit-targets]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import lmdb
import numpy as np
import torch
import torch.utils.data as tud

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _procfs import child_pids, cpu_seconds

import datakit
from datakit.format.decoding import record_to_array
from datakit.format.records import decode_record, record_key
from datakit.tools.synthetic import make_image_folder

BATCH, WORKERS = 256, 2


class PickleRecipeDataset(tud.Dataset):
    """The recipe's reader: one transaction and one ``pickle.loads`` per sample."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.env: Any = None
        with lmdb.open(path, readonly=True, lock=False) as env, env.begin() as txn:
            self.length = pickle.loads(txn.get(b"__len__"))
            self.keys = pickle.loads(txn.get(b"__keys__"))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
        with self.env.begin() as txn:
            pixels, label = pickle.loads(txn.get(self.keys[index]))
        return torch.from_numpy(pixels).permute(2, 0, 1), label

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "env": None}


def write_pickle_recipe(dataset: datakit.LMDBDataset, path: str) -> None:
    """The recipe's store of the same images: ``pickle.dumps((HWC array, label))`` per record."""
    with lmdb.open(path, map_size=1 << 34) as env, env.begin(write=True) as txn:
        for index in range(len(dataset)):
            pixels, label = dataset[index]
            txn.put(str(index).encode(), pickle.dumps((pixels, label)))
        txn.put(b"__keys__", pickle.dumps([str(i).encode() for i in range(len(dataset))]))
        txn.put(b"__len__", pickle.dumps(len(dataset)))


def loader_run(loader_class: type, dataset: Any, epochs: int = 2) -> tuple[float, float]:
    """(samples/s, CPU µs/sample) over ``epochs`` epochs after a warm-up epoch."""
    loader = loader_class(dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                          persistent_workers=True, generator=torch.Generator().manual_seed(0))
    for _ in loader:
        pass
    workers = child_pids()
    cpu_before = sum(cpu_seconds(pid) for pid in workers) + time.process_time()
    started = time.perf_counter()
    samples = sum(len(labels) for _ in range(epochs) for _, labels in loader)
    wall = time.perf_counter() - started
    cpu = sum(cpu_seconds(pid) for pid in workers) + time.process_time() - cpu_before
    del loader
    return samples / wall, cpu / samples * 1e6


def decode_ceiling(dataset: datakit.LMDBDataset) -> tuple[float, float]:
    """One process decoding every record to a CHW uint8 array: (samples/s x cores, µs/sample)."""
    with dataset.spec.open_reader() as reader:
        raw = reader.get_many(range(len(dataset)))
    started = time.perf_counter()
    for index, data in enumerate(raw):
        record_to_array(decode_record(data, record_key(index)))
    per_sample = (time.perf_counter() - started) / len(raw)
    return (os.cpu_count() or 1) / per_sample, per_sample * 1e6


def dataset_ceiling(dataset: datakit.LMDBDataset) -> tuple[float, float]:
    """One process running the dataset's own batch path (read, check, decode, channel-first
    batch) over every record, times the number of cores: what perfect parallelism would give."""
    images = np.empty((BATCH, *dataset.batch_sample_shape()), dtype=np.uint8)
    labels = np.empty(BATCH, dtype=np.int64)
    started = time.perf_counter()
    for start in range(0, len(dataset), BATCH):
        indices = list(range(start, min(len(dataset), start + BATCH)))
        dataset.read_batch_into(indices, images[:len(indices)], labels[:len(indices)])
    per_sample = (time.perf_counter() - started) / len(dataset)
    return (os.cpu_count() or 1) / per_sample, per_sample * 1e6


Measurement = tuple[float, float]  # samples/s, CPU µs/sample


def alternate(contenders: dict[str, Callable[[], Measurement]], runs: int) -> dict[str, Measurement]:
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, run in contenders.items():
            results[name].append(run())
    return {name: (statistics.median(r[0] for r in values), statistics.median(r[1] for r in values))
            for name, values in results.items()}


def report(title: str, medians: dict[str, tuple[float, float]], baseline: str) -> None:
    print(f"\n{title}")
    print(f"  {'contender':<44}{'samples/s':>11}{'CPU us/sample':>15}  vs {baseline}")
    base = medians[baseline][0]
    for name, (rate, cpu) in medians.items():
        print(f"  {name:<44}{rate:>11.0f}{cpu:>15.1f}{rate / base:>21.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scratch", default="/tmp/datakit-targets")
    args = parser.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    raw_store = os.path.join(args.scratch, "raw32.lmdb")
    jpeg_store = os.path.join(args.scratch, "jpeg256.lmdb")
    recipe_store = os.path.join(args.scratch, "raw32-pickle.lmdb")
    if not os.path.exists(raw_store):
        make_image_folder(os.path.join(args.scratch, "raw32"), classes=[f"c{i}" for i in range(10)],
                          per_class=2000, size=(32, 32), image_format="PNG")
        datakit.convert(os.path.join(args.scratch, "raw32"), raw_store, format="raw")
    if not os.path.exists(jpeg_store):
        make_image_folder(os.path.join(args.scratch, "jpeg256"), classes=[f"c{i}" for i in range(10)],
                          per_class=300, size=(256, 256))
        datakit.convert(os.path.join(args.scratch, "jpeg256"), jpeg_store)
    raw = datakit.LMDBDataset(raw_store, output="tensor")
    if not os.path.exists(recipe_store):
        write_pickle_recipe(datakit.LMDBDataset(raw_store, output="numpy"), recipe_store)
    recipe = PickleRecipeDataset(recipe_store)
    jpeg = datakit.LMDBDataset(jpeg_store, output="tensor")
    print(f"{os.cpu_count()} CPUs, batch {BATCH}, {WORKERS} persistent workers, shuffle, "
          f"median of {args.runs} alternating runs")

    medians = alternate({
        "torch DataLoader, LMDBDataset": lambda: loader_run(tud.DataLoader, raw),
        "datakit DataLoader, LMDBDataset": lambda: loader_run(datakit.DataLoader, raw),
        "torch DataLoader, pickle recipe (per sample)": lambda: loader_run(tud.DataLoader, recipe),
    }, args.runs)
    report(f"1. raw 32x32 RGB, {len(raw)} records", medians, "torch DataLoader, LMDBDataset")
    versus_recipe = (medians["datakit DataLoader, LMDBDataset"][0]
                     / medians["torch DataLoader, pickle recipe (per sample)"][0])
    print(f"  datakit vs pickle recipe: {versus_recipe:.1f}x")

    medians = alternate({
        "torch DataLoader, LMDBDataset": lambda: loader_run(tud.DataLoader, jpeg, epochs=1),
        "datakit DataLoader, LMDBDataset": lambda: loader_run(datakit.DataLoader, jpeg, epochs=1),
        "decode ceiling (1 process x cores)": lambda: decode_ceiling(jpeg),
        "dataset's batch path (1 process x cores)": lambda: dataset_ceiling(jpeg),
    }, args.runs)
    report(f"2. JPEG 256x256, {len(jpeg)} records", medians, "torch DataLoader, LMDBDataset")
    ceiling = medians["decode ceiling (1 process x cores)"][0]
    ours = medians["datakit DataLoader, LMDBDataset"][0]
    print(f"  datakit / decode ceiling: {ours / ceiling:.0%}")
    batch_path = medians["dataset's batch path (1 process x cores)"][0]
    print(f"  datakit / the dataset's batch path x cores: {ours / batch_path:.0%}")


if __name__ == "__main__":
    main()
