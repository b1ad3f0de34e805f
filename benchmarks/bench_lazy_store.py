"""One shuffled epoch of a 10,000,000-record LMDB store: ``shuffle="lazy"`` against ``shuffle=True``.

Builds (once, cached in --store) a store of tiny raw records straight through
the store writer (``bench_memory.build_store``), then reads one epoch with
``datakit.DataLoader`` (2 persistent workers, batch 256) for each sampler,
alternating, and reports samples/s and the main process's resident-memory
growth (peak VmHWM during the epoch minus VmRSS before the iterator). The
torch-identical sampler materialises a permutation of every index at the start
of each epoch; the lazy one computes its order on the fly.

    .venv/bin/python benchmarks/bench_lazy_store.py [--records 10000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import datakit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_memory import build_store


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        return int(status.read().split(field + ":")[1].split()[0]) / 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:  # resets VmHWM to the current RSS
        clear.write("5")


def one_epoch(dataset: datakit.LMDBDataset, shuffle: bool | str) -> tuple[float, float]:
    loader = datakit.DataLoader(dataset, batch_size=256, shuffle=shuffle, num_workers=2,
                                generator=torch.Generator().manual_seed(0))
    _reset_peak()
    before = _status_mb("VmRSS")
    started, samples = time.perf_counter(), 0
    for _, labels in loader:
        samples += len(labels)
    seconds = time.perf_counter() - started
    assert samples == len(dataset)
    return samples / seconds, _status_mb("VmHWM") - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--store", default="/tmp/datakit-bench-10m.lmdb")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not os.path.exists(args.store):
        started = time.perf_counter()
        build_store(args.store, args.records)
        seconds = time.perf_counter() - started
        print(f"built {args.store} ({args.records} records) in {seconds:.0f} s", flush=True)
    dataset = datakit.LMDBDataset(args.store, output="tensor")
    results: dict[str, list[tuple[float, float]]] = {"shuffle=True": [], 'shuffle="lazy"': []}
    for _ in range(args.rounds):
        for name, shuffle in (("shuffle=True", True), ('shuffle="lazy"', "lazy")):
            rate, growth = one_epoch(dataset, shuffle)
            results[name].append((rate, growth))
            print(f"{name:>15}: {rate:9.0f} samples/s, main-process growth {growth:6.1f} MB", flush=True)
    for name, runs in results.items():
        rates = [rate for rate, _ in runs]
        print(f"{name:>15}: {min(rates):.0f}-{max(rates):.0f} samples/s, "
              f"growth {max(growth for _, growth in runs):.1f} MB at most")


if __name__ == "__main__":
    main()
