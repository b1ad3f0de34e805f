"""Compare datakit.DataLoader with torch.utils.data.DataLoader on the same dataset, in one run.

The dataset is synthetic and map-style, with ``__getitems__`` returning
3x32x32 uint8 tensors and int labels (the shape of raw CIFAR-like records).
Runs alternate between the loaders (torch, datakit, torch, ...) so drift in
machine load hits both; each run is one full epoch, and the median samples/s
over the runs is reported for each loader with the ratio datakit/torch.
It also reports the CPU time (main process plus its reaped workers) per 1,000
samples, which is steadier than wall-clock rates on a shared machine.

Usage:
    .venv/bin/python benchmarks/bench_loader.py [--samples N] [--batch-size B]
        [--workers W] [--runs R] [--pin-memory]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
import torch.utils.data as tud

import datakit


class SyntheticImages(tud.Dataset):
    """``length`` records of a 3x32x32 uint8 image and an int label, fetched a batch at a time."""

    def __init__(self, length: int) -> None:
        self.length = length
        generator = torch.Generator().manual_seed(0)
        # a small pool of distinct images, indexed modulo its size: no I/O, realistic copy costs
        self.pool = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=generator)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.pool[index % 64].clone(), index % 10

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        return [(self.pool[i % 64].clone(), i % 10) for i in indices]


def _cpu_seconds() -> float:
    """CPU time of this process and its terminated, reaped children (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_epoch(loader_class: type, dataset: tud.Dataset, args: argparse.Namespace) -> tuple[float, float]:
    """Samples per second and CPU milliseconds per 1,000 samples of one full epoch, start-up included."""
    loader = loader_class(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=args.pin_memory,
        generator=torch.Generator().manual_seed(1),
    )
    seen = 0
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    for images, _labels in loader:
        seen += images.shape[0]
    elapsed = time.perf_counter() - start
    del loader  # workers exit and are reaped, so their CPU time is counted
    cpu = _cpu_seconds() - cpu_start
    assert seen == len(dataset)
    return seen / elapsed, 1e6 * cpu / seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="runs per loader (alternating)")
    parser.add_argument("--pin-memory", action="store_true")
    args = parser.parse_args()

    dataset = SyntheticImages(args.samples)
    loaders = {"torch": tud.DataLoader, "datakit": datakit.DataLoader}
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    cpu: dict[str, list[float]] = {name: [] for name in loaders}
    one_epoch(tud.DataLoader, tud.Subset(dataset, range(args.batch_size * 4)), args)  # warm-up
    for run in range(args.runs):
        for name, loader_class in loaders.items():
            rate, cpu_ms = one_epoch(loader_class, dataset, args)
            rates[name].append(rate)
            cpu[name].append(cpu_ms)
            label = f"run {run + 1}/{args.runs} {name:>7}"
            print(f"{label}: {rate:>10,.0f} samples/s {cpu_ms:>7.1f} CPU ms/1k samples")

    medians = {name: statistics.median(values) for name, values in rates.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
    print(
        f"\n{args.samples} samples of 3x32x32 uint8, batch {args.batch_size}, {args.workers} workers, "
        f"pin_memory={args.pin_memory}, median of {args.runs} alternating runs"
    )
    for name, value in medians.items():
        print(f"{name:>8}: {value:>10,.0f} samples/s {cpu_medians[name]:>7.1f} CPU ms/1k samples")
    print(f"   ratio: datakit/torch = {medians['datakit'] / medians['torch']:.2f}x samples/s, ", end="")
    print(f"{cpu_medians['datakit'] / cpu_medians['torch']:.2f}x CPU time")


if __name__ == "__main__":
    main()
